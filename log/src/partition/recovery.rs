//! Opening a partition and keeping up with other processes: reading its segments on open (and
//! removing what an unfinished deletion or compaction left), catching up with the batches and
//! segments other processes appended and rolled since, starting again from the start offset
//! when their retention or compaction removed segments this handle knew, and cutting a torn
//! tail.
//!
//! It must never cut anything without holding the partition's OS lock (log/FORMAT.md, *Many
//! processes*: a batch past the last whole one may be another process's write in flight), and
//! never cut damage that intact data follows: that is an [`Error::Corrupt`], which only
//! `riffle log repair` (log/src/repair/) cuts.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use riffle_record::TopicPartition;

use super::compact::{CLEANED_SUFFIX, CLEANING_FILE};
use super::recovery_point::{below_recovery_point, read_recovery_point};
use super::{LOCK_FILE, Partition, START_FILE, read_cleaning, read_start};
use crate::error::{Error, IoContext, Result};
use crate::options::LogOptions;
use crate::segment::{Segment, gone, parse_segment_file_name, segment_file_name};
use crate::storage::Storage;

/// A sealed `segment` that reaches `end`, past the next listed segment: a compaction merged
/// the segments after it into it, which only the `cleaning` file (`partition/compact/`) may
/// say. Returns how many of `later` (the listed bases after it) it covers; they are leftovers
/// of that swap. Anything else is an [`Error::Corrupt`] (never skipped), or, if a covered
/// segment is gone since the listing (the swap finished meanwhile), `NotFound`: look again.
fn check_merged(
    storage: &dyn Storage,
    dir: &std::path::Path,
    segment: &Segment,
    later: &[u64],
    end: u64,
) -> Result<usize> {
    let covered = later.iter().take_while(|&&b| b < end).count();
    let claimed = read_cleaning(storage, dir)? == Some((segment.base, end));
    if claimed && later.get(covered) == Some(&end) {
        return Ok(covered);
    }
    if let Some(gone_one) = later[..covered]
        .iter()
        .map(|&b| dir.join(segment_file_name(b)))
        .find(|p| !storage.exists(p))
    {
        return Err(gone(&gone_one));
    }
    Err(Error::Corrupt {
        path: segment.path.clone(),
        position: segment.size(),
        reason: format!(
            "the segment ends at offset {end}, past offset {} where the next segment starts, \
             and no compaction in progress says it replaced the segments there",
            later.first().copied().unwrap_or(end)
        ),
    })
}

impl Partition {
    /// Opens the partition in `dir`, reading its active segment up to the last whole batch.
    /// Nothing is modified unless that segment has a torn tail and the log is writable: then it
    /// is cut under the partition's lock (so not while another process is still writing it).
    pub(crate) fn open(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        tp: TopicPartition,
        options: LogOptions,
        locks_open: Arc<AtomicUsize>,
    ) -> Result<Self> {
        // Retention in another process may delete a segment between the listing and its
        // opening: then the start offset moved past it, and a second look sees that.
        let mut attempt = 0;
        loop {
            let opened = Self::open_once(
                Arc::clone(&storage),
                dir.clone(),
                tp.clone(),
                options.clone(),
                Arc::clone(&locks_open),
            );
            match opened {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && attempt < 8 =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn open_once(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        tp: TopicPartition,
        options: LogOptions,
        locks_open: Arc<AtomicUsize>,
    ) -> Result<Self> {
        let read_only = options.read_only;
        // Read before the listing and the reads: every record below it was durable, so in a
        // segment listed and written before the reads below (another process may be writing
        // past it right now, but never below it).
        let recovery_point = read_recovery_point(&*storage, &dir)?;
        let names = storage.list(&dir).at(&dir)?;
        let cleaned_left = names
            .iter()
            .any(|n| n.ends_with(CLEANED_SUFFIX) || n == CLEANING_FILE);
        let mut bases: Vec<u64> = names
            .iter()
            .filter_map(|name| parse_segment_file_name(name))
            .collect();
        bases.sort_unstable();
        // Read after the listing: the start offset moves before segments are deleted, so any
        // listed segment that is gone by now lies below it.
        let start = read_start(&*storage, &dir)?;
        // Segments wholly below the start offset are what a deletion that did not finish left
        // (a crash between moving the start and removing the files): a writer removes them.
        let below = bases.windows(2).take_while(|w| w[1] <= start).count();
        let leftovers: Vec<u64> = bases.drain(..below).collect();
        let interval = u64::from(options.index_interval_bytes);
        // A partition of a complete topic always has a segment (topics are staged whole), and
        // the first one holds the start offset.
        let Some(&first) = bases.first() else {
            return Err(Error::Corrupt {
                path: dir.clone(),
                position: 0,
                reason: format!(
                    "the partition directory of {tp} is missing or holds no segment: every \
                     offset it had is gone; `riffle log repair` recreates it empty explicitly"
                ),
            });
        };
        if first > start {
            return Err(Error::Corrupt {
                path: dir.join(segment_file_name(first)),
                position: 0,
                reason: format!(
                    "the partition's first segment starts at offset {first}, but its start offset \
                     is {start}: offsets {start}..{first} are in no segment (a deleted segment \
                     file?)"
                ),
            });
        }
        let mut segments = Vec::with_capacity(bases.len());
        let mut scan = None;
        // Segments a committed compaction swap merged into the one before them (the swap's
        // removal of their files did not happen yet): skipped, and removed by a writer.
        let mut superseded = Vec::new();
        let mut i = 0;
        while let Some(&base) = bases.get(i) {
            let mut segment = Segment::open(&storage, &dir, base, read_only)?;
            match bases.get(i + 1).copied() {
                // Sealed: whole and contiguous, or an error (never cut).
                Some(next_base) => {
                    let end = segment.check_sealed(next_base, interval)?;
                    if end > next_base {
                        let covered =
                            check_merged(&*storage, &dir, &segment, &bases[i + 1..], end)?;
                        superseded.extend(bases.drain(i + 1..i + 1 + covered));
                    }
                }
                None => {
                    if let Some(seal) = segment.read_seal()? {
                        // Rolled: unless another process is creating its successor right now,
                        // the segment after it is missing.
                        let next = dir.join(segment_file_name(seal.end_offset));
                        if !storage.exists(&next) {
                            return Err(segment.missing_successor(seal));
                        }
                    }
                    let active = segment.scan(interval)?;
                    if let Some(damage) = active.corruption() {
                        return Err(damage.to_error());
                    }
                    // Ending below the recovery point is losing fsynced records, unless the
                    // segment was rolled since the listing (then the catch-up adopts the next:
                    // a segment named by the end offset, which an empty segment's own name is).
                    let rolled = active.end_offset > base
                        && storage.exists(&dir.join(segment_file_name(active.end_offset)));
                    if active.end_offset < recovery_point && (active.problem.is_some() || !rolled) {
                        return Err(below_recovery_point(
                            &tp,
                            &dir,
                            &segment.path,
                            active.end_pos,
                            active.end_offset,
                            active.problem.as_deref(),
                            recovery_point,
                        ));
                    }
                    scan = Some(active);
                }
            }
            segments.push(segment);
            i += 1;
        }
        let cross_process = storage.shared_between_processes();
        let mut partition = Self {
            tp,
            dir,
            storage,
            options,
            segments,
            start,
            next_offset: scan.as_ref().map_or(0, |s| s.end_offset),
            active_end: scan.as_ref().map_or(0, |s| s.end_pos),
            dir_dirty: false,
            unsealed: Vec::new(),
            recovery_point,
            unsynced: false,
            poisoned: None,
            read_only,
            lock: None,
            locked: false,
            lock_active_base: None,
            locks_open,
            cross_process,
            lease: None,
            lease_listed: false,
            cleaned_to: None,
            contended_at: None,
        };
        let torn = scan.is_some_and(|s| s.problem.is_some());
        let stale_index = match partition.segments.last_mut() {
            Some(active) if !read_only => !active.index_file_matches()?,
            _ => false,
        };
        if !read_only
            && (torn
                || stale_index
                || partition.segments.is_empty()
                || !leftovers.is_empty()
                || !superseded.is_empty()
                || cleaned_left)
        {
            partition.recover(&leftovers, &superseded)?;
        }
        if partition.start > partition.next_offset {
            return Err(Error::Corrupt {
                path: partition.dir.join(START_FILE),
                position: 0,
                reason: format!(
                    "the start offset {} is past the partition's end offset {}: records it \
                     kept are gone",
                    partition.start, partition.next_offset
                ),
            });
        }
        Ok(partition)
    }

    /// Under the lock: removes segments left below the start offset and what a compaction
    /// that stopped left, creates the first segment if there is none, cuts a torn tail.
    fn recover(&mut self, leftovers: &[u64], superseded: &[u64]) -> Result<()> {
        let path = self.dir.join(LOCK_FILE);
        self.lock_file()?.lock(true).at(&path)?;
        self.locked = true;
        let result = self
            .remove_leftovers(leftovers)
            .and_then(|()| self.finish_cleaning(superseded))
            .and_then(|()| self.recover_locked());
        self.unlock();
        result
    }

    /// Removes the files of segments wholly below the start offset (a deletion a crash cut
    /// short), under the lock, after checking that the start offset still says so.
    fn remove_leftovers(&mut self, bases: &[u64]) -> Result<()> {
        if bases.is_empty() {
            return Ok(());
        }
        self.start = self.start.max(read_start(&*self.storage, &self.dir)?);
        for &base in bases {
            let path = self.dir.join(segment_file_name(base));
            tracing::info!(file = %path.display(), start_offset = self.start, "removing a segment below the partition's start offset (a deletion that did not finish)");
            self.storage.remove_file(&path).at(&path)?;
            let index = path.with_extension("index");
            self.storage.remove_file(&index).at(&index)?;
        }
        self.storage.sync_dir(&self.dir).at(&self.dir)
    }

    fn recover_locked(&mut self) -> Result<()> {
        if self.segments.is_empty() {
            if self.storage.exists(&self.dir.join(segment_file_name(0))) {
                self.adopt_segment(0)?;
            } else {
                self.segments
                    .push(Segment::create(&self.storage, &self.dir, 0)?);
                self.storage.sync_dir(&self.dir).at(&self.dir)?;
                return Ok(());
            }
        }
        // Read again under the lock: a writer may have finished the batch that looked torn.
        let interval = u64::from(self.options.index_interval_bytes);
        if let Some(active) = self.segments.last_mut() {
            active.refresh_size()?;
            let scan = active.scan(interval)?;
            if scan.problem.is_some() {
                if scan.end_offset < self.recovery_point {
                    return Err(below_recovery_point(
                        &self.tp,
                        &self.dir,
                        &active.path,
                        scan.end_pos,
                        scan.end_offset,
                        scan.problem.as_deref(),
                        self.recovery_point,
                    ));
                }
                // Only a torn tail is cut; damage followed by intact data is an error.
                active.cut_tail(&scan)?;
            } else {
                active.write_index()?;
            }
            self.next_offset = scan.end_offset;
            self.active_end = scan.end_pos;
        }
        self.catch_up()
    }

    /// Reads what other processes appended since this handle last looked: new whole batches
    /// of the active segment, then any segment rolled after it (named by the end offset).
    /// Under the lock, a torn tail (a writer died mid-batch) is cut; without it, bytes past the
    /// last whole batch are left alone (they may be a batch still being written).
    pub(crate) fn catch_up(&mut self) -> Result<()> {
        if !self.cross_process || self.lease.is_some() {
            // One handle, or the lock held since it last caught up: it made every change since.
            return Ok(());
        }
        match self.catch_up_once() {
            // A file of the segment this handle knew as active is gone: another process's
            // retention deleted it.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                self.rebase_on_start()?;
                self.catch_up_once()
            }
            other => other,
        }
    }

    fn catch_up_once(&mut self) -> Result<()> {
        let interval = u64::from(self.options.index_interval_bytes);
        loop {
            let Some(active) = self.segments.last_mut() else {
                let first = self.dir.join(segment_file_name(0));
                if !self.storage.exists(&first) {
                    return Ok(());
                }
                self.adopt_segment(0)?;
                continue;
            };
            let size = active.refresh_size()?;
            if size < self.active_end {
                return Err(Error::Corrupt {
                    path: active.path.clone(),
                    position: size,
                    reason: format!(
                        "the segment shrank to {size} bytes under whole batches up to byte {} \
                         (offset {}): something other than a writer cut it",
                        self.active_end, self.next_offset
                    ),
                });
            }
            let grew = size > self.active_end;
            if grew {
                active.refresh_index_size()?;
                let scan = active.scan_from(self.active_end, self.next_offset, interval)?;
                self.next_offset = scan.end_offset;
                self.active_end = scan.end_pos;
                if scan.problem.is_some() {
                    // Intact data after the damage: no writer is still writing it.
                    if let Some(damage) = scan.corruption() {
                        return Err(damage.to_error());
                    }
                    if !self.locked {
                        return Ok(()); // perhaps a batch still being written
                    }
                    // The lock is ours, so its writer is gone: a torn tail, unless its records
                    // were fsynced (the recovery point is past them).
                    let (path, end_pos) = (active.path.clone(), scan.end_pos);
                    let point = self.recovery_point()?;
                    if scan.end_offset < point {
                        return Err(below_recovery_point(
                            &self.tp,
                            &self.dir,
                            &path,
                            end_pos,
                            scan.end_offset,
                            scan.problem.as_deref(),
                            point,
                        ));
                    }
                    let Some(active) = self.segments.last_mut() else {
                        return Ok(());
                    };
                    active.cut_tail(&scan)?;
                    return Ok(());
                }
            }
            if self.active_end == 0 {
                return Ok(()); // nobody rolls an empty segment
            }
            if self.lock_active_base == Some(active.base) {
                return Ok(()); // the lock file says nobody rolled since
            }
            let next = self.dir.join(segment_file_name(self.next_offset));
            if !self.storage.exists(&next) {
                // Nothing new here and no successor: is this segment still there (a look only
                // when nothing came in)?
                if !grew && !active.is_current(&self.storage)? {
                    // Rolled and deleted since this handle looked (another process's
                    // retention), or rolled and merged into another segment (compaction):
                    // the caller starts again from the start offset.
                    return Err(gone(&active.path));
                }
                return Ok(());
            }
            self.adopt_segment(self.next_offset)?;
        }
    }

    /// Takes the segment at `base`, rolled by another process, as the active one.
    fn adopt_segment(&mut self, base: u64) -> Result<()> {
        let segment = Segment::open(&self.storage, &self.dir, base, self.read_only)?;
        self.segments.push(segment);
        self.active_end = 0;
        self.next_offset = base;
        // Once per segment: forget the segments other processes' retention deleted.
        self.refresh_start()
    }

    /// A catch-up that found more data in its active segment does not look whether that
    /// segment's file is still there (it saves a look per tailing fetch): one that was rolled
    /// and then deleted by another process's retention can leave this handle's end offset
    /// behind. Where that matters (an end offset asked for, a fetch beyond the known end), this
    /// looks, and starts again from the start offset if the file is gone.
    pub(super) fn verify_active(&mut self) -> Result<()> {
        if !self.cross_process || self.lease.is_some() {
            return Ok(());
        }
        let gone = match self.segments.last() {
            Some(active) => !active.is_current(&self.storage)?,
            None => false,
        };
        if gone {
            self.rebase_on_start()?;
            self.catch_up()?;
        }
        Ok(())
    }

    /// The base offsets of the segment files in the partition's directory, in order.
    fn listed_bases(&self) -> Result<Vec<u64>> {
        let mut bases: Vec<u64> = self
            .storage
            .list(&self.dir)
            .at(&self.dir)?
            .iter()
            .filter_map(|name| parse_segment_file_name(name))
            .collect();
        bases.sort_unstable();
        Ok(bases)
    }

    /// The active segment this handle knew was deleted by another process (its retention
    /// passed it while this handle did not look): starts again from the segment holding the
    /// start offset, and the caller's catch-up walks the segments rolled since.
    fn rebase_on_start(&mut self) -> Result<()> {
        // Another deletion may remove the segment found here before it is opened: look again.
        let mut attempt = 0;
        let (start, segment) = loop {
            let bases = self.listed_bases()?;
            // After the listing: a listed segment that is gone lies below it.
            let start = read_start(&*self.storage, &self.dir)?;
            let Some(first) = bases.iter().rev().find(|&&b| b <= start).copied() else {
                return Err(Error::Corrupt {
                    path: self.dir.clone(),
                    position: 0,
                    reason: format!(
                        "the partition's active segment is gone, and no segment holds its \
                         start offset {start} (segments at {bases:?})"
                    ),
                });
            };
            match Segment::open(&self.storage, &self.dir, first, self.read_only) {
                Ok(segment) => break (start, segment),
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && attempt < 8 =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        tracing::debug!(partition = %self.tp, start_offset = start, "the active segment was deleted by another process's retention; catching up from the start offset");
        let n = self.segments.len();
        self.drop_front(n);
        self.start = self.start.max(start);
        self.next_offset = segment.base;
        self.segments.push(segment);
        self.active_end = 0;
        Ok(())
    }

    /// Under the lock, before retention or compaction work on the sealed segments: if another
    /// process's compaction replaced or removed segments this handle lists (the listing or a
    /// file's identity differs), reads them again. One listing and one open per segment.
    pub(crate) fn resync(&mut self) -> Result<()> {
        if !self.cross_process {
            return Ok(());
        }
        let listed = self.listed_bases()?;
        let ours: Vec<u64> = self.segments.iter().map(|s| s.base).collect();
        let mut same = listed == ours;
        for segment in &self.segments {
            if !same {
                break;
            }
            same = segment.is_current(&self.storage)?;
        }
        if same { Ok(()) } else { self.reload() }
    }

    /// Forgets every segment and reads them again from the one holding the start offset:
    /// another process's compaction replaced segments this handle knew.
    pub(super) fn reload(&mut self) -> Result<()> {
        // The segments this handle appended to are forgotten: make its appends durable first.
        if self.unsynced || self.dir_dirty || !self.unsealed.is_empty() {
            self.sync()?;
        }
        let mut attempt = 0;
        loop {
            self.rebase_on_start()?;
            let walked = self.catch_up_once();
            // A segment swapped while the walk read it ends the walk early, at the old file's
            // end: the last segment must be the file its name holds now.
            let current = match self.segments.last() {
                Some(last) => last.is_current(&self.storage)?,
                None => true,
            };
            match walked {
                Ok(()) if current => return Ok(()),
                Err(Error::Io { source, .. })
                    if source.kind() != std::io::ErrorKind::NotFound || attempt >= 8 =>
                {
                    return Err(Error::Io {
                        path: self.dir.clone(),
                        source,
                    });
                }
                Err(e) if !matches!(e, Error::Io { .. }) => return Err(e),
                _ if attempt >= 8 => {
                    return Err(Error::Corrupt {
                        path: self.dir.clone(),
                        position: 0,
                        reason: "its segments kept changing while they were read again (a \
                                 compaction in another process?)"
                            .to_owned(),
                    });
                }
                _ => attempt += 1,
            }
        }
    }
}
