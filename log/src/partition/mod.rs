//! One partition: a directory of segments, the offset after its last record, and whether it has
//! appends that are not yet durable. All access goes through the partition's own lock, so
//! partitions append and fetch in parallel.
//!
//! Across processes (log/FORMAT.md, *Many processes*): every write happens under the OS lock of
//! the partition's `lock` file, after catching up with what other processes appended since
//! (re-reading the active segment's new batches, adopting a segment another process rolled).
//! Only a writer holding that lock ever cuts a torn tail, so no process cuts another's
//! in-flight batch; readers take no lock and see whole batches only. This module never waits
//! for another lock while holding a partition's.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;

use riffle_record::{BatchBuilder, BatchHeader, HEADER_LEN, Placement, TopicPartition, batch_crc};

use crate::error::{Error, IoContext, Result};
use crate::lease::{CONTENDED_FOR, LEASE_IDLE, LEASE_MAX};
use crate::options::{FsyncPolicy, LogOptions};
use crate::segment::{Expect, Segment, gone, parse_segment_file_name, segment_file_name};
use crate::storage::{Storage, StorageFile};
use crate::topic_config::TopicConfig;

mod compact;
pub use compact::CompactionReport;
pub(crate) use compact::read_cleaning;
use compact::{CLEANED_SUFFIX, CLEANING_FILE};

/// A whole stored batch, checksum verified, as read from a segment.
#[derive(Debug)]
pub(crate) struct StoredBatch {
    pub(crate) header: BatchHeader,
    pub(crate) bytes: Bytes,
}

/// How many partition lock files a log keeps open between writes; past it a partition opens
/// its lock file for each write and closes it after, so handles stay bounded whatever the
/// partition count.
pub(crate) const LOCK_FILES_KEPT_OPEN: usize = 256;

/// The name of a partition's lock file. Its content (FORMAT.md): byte 0 the transaction mark,
/// bytes 8..16 the active segment's base offset (`u64`, big-endian), written by whoever rolls a
/// segment, so a writer learns of another process's roll without listing the directory.
pub(crate) const LOCK_FILE: &str = "lock";
const LOCK_CONTENT_LEN: usize = 16;
/// The byte of the lock file's content that says the topic was deleted (`Log::delete_topic`).
const DELETED_AT: usize = 1;

/// The name of a partition's start-offset file: the log start offset, ASCII decimal and a
/// newline, replaced atomically; absent while the start offset is 0.
pub(crate) const START_FILE: &str = "start";

/// The start offset the partition directory `dir` records (0 without a `start` file).
pub(crate) fn read_start(storage: &dyn Storage, dir: &std::path::Path) -> Result<u64> {
    let path = dir.join(START_FILE);
    let Some(bytes) = storage.read(&path).at(&path)? else {
        return Ok(0);
    };
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|s| s.strip_suffix('\n'))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Error::Corrupt {
            path,
            position: 0,
            reason: "expected the start offset, a decimal number and a newline".to_owned(),
        })
}

/// What [`Partition::lock_for_write`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Locked {
    /// The lock is held and the partition caught up: write, then [`Partition::unlock`].
    Yes,
    /// A transaction marked this partition and its process died before clearing the mark: the
    /// lock was released again; the transaction journal must be recovered first.
    TxnPending,
}

#[derive(Debug)]
pub(crate) struct Partition {
    tp: TopicPartition,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    /// Sorted by base offset; the last one takes appends. Empty only in a read-only log whose
    /// partition has no segment yet.
    segments: Vec<Segment>,
    /// The log start offset: the first offset still readable (log/FORMAT.md, *Start offset*).
    /// Segments wholly below it are deleted; the first one may start before it.
    start: u64,
    next_offset: u64,
    /// Byte position after the last whole batch of the active segment: what fetches read up to
    /// (bytes past it are a batch another process is still writing, or a torn tail).
    active_end: u64,
    /// Files were created in `dir` since the last sync.
    dir_dirty: bool,
    /// Sealed segments (by index) whose seal waits for the next directory sync (`Never`).
    unsealed: Vec<usize>,
    /// Plain appends are not yet durable (and not in the transaction journal either). Batches
    /// written by transactions leave it alone: the journal holds them until a checkpoint.
    pub(crate) unsynced: bool,
    /// A failed write could not be rolled back: refuse work until reopened.
    poisoned: bool,
    read_only: bool,
    /// The open `lock` file (see the module docs), if kept open.
    lock: Option<Box<dyn StorageFile>>,
    /// The lock is held by this handle.
    locked: bool,
    /// The active segment's base as the lock file said when the lock was taken (`None`: it
    /// did not say, or the lock is not held).
    lock_active_base: Option<u64>,
    /// Lock files the log keeps open, shared by its partitions.
    locks_open: Arc<AtomicUsize>,
    /// Other processes may open the directory (a file-backed log): take the OS lock to write,
    /// catch up with their appends. A memory-backed log has one handle, which knows everything.
    cross_process: bool,
    /// The lock kept between appends (`lease.rs`); `None`: it is released after each write.
    lease: Option<Lease>,
    /// On the log's list of leased partitions (only its releaser takes it off).
    lease_listed: bool,
    /// The cleaner checkpoint as this handle last read or wrote it (`None`: not read yet).
    cleaned_to: Option<u64>,
    /// When this handle last found another process writing here (it waited for the lock, or
    /// caught up with their batches): no lease until [`CONTENDED_FOR`] after it.
    contended_at: Option<Instant>,
}

/// A partition lock kept between appends: when it was taken, and this handle's last append
/// under it.
#[derive(Debug)]
struct Lease {
    since: Instant,
    last: Instant,
}

/// A sealed `segment` that reaches `end`, past the next listed segment: a compaction merged
/// the segments after it into it, which only the `cleaning` file (`partition/compact.rs`) may
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
            unsynced: false,
            poisoned: false,
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

    /// The lock file, opened (and counted) if it is not.
    fn lock_file(&mut self) -> Result<&mut Box<dyn StorageFile>> {
        if self.lock.is_none() {
            let path = self.dir.join(LOCK_FILE);
            self.lock = Some(self.storage.open(&path).at(&path)?);
            self.locks_open.fetch_add(1, Ordering::Relaxed);
        }
        self.lock.as_mut().ok_or_else(|| Error::Poisoned {
            what: format!("the lock file of {}", self.tp),
        })
    }

    /// Takes the partition's OS lock and catches up with other processes' appends. With
    /// `in_txn` (the caller holds the transaction lock, so no transaction is in flight
    /// anywhere) a transaction mark is stale and ignored; otherwise it is reported as
    /// [`Locked::TxnPending`] and the lock released.
    pub(crate) fn lock_for_write(&mut self, in_txn: bool) -> Result<Locked> {
        self.check_poisoned()?;
        if self.read_only {
            return Err(Error::ReadOnly {
                what: format!("append to {}", self.tp),
            });
        }
        if !self.cross_process || self.lease.is_some() {
            // One handle on a memory-backed log: no other writer to exclude or catch up with,
            // and no transaction mark (only cross-process transactions write one). Or this
            // handle kept the lock since its last append: nobody else wrote since.
            self.locked = true;
            return Ok(Locked::Yes);
        }
        let lock = self.lock_file()?;
        // Whether another process holds it: then this partition has other writers.
        let waited = match lock.try_lock() {
            Ok(true) => false,
            Ok(false) => {
                if let Err(e) = lock.lock(true) {
                    return Err(e).at(&self.dir.join(LOCK_FILE));
                }
                true
            }
            Err(e) => return Err(e).at(&self.dir.join(LOCK_FILE)),
        };
        let mut content = [0u8; LOCK_CONTENT_LEN];
        let read = lock.read_exact_at(0, &mut content);
        self.locked = true;
        let (marked, base) = match read {
            Ok(()) if content[DELETED_AT] != 0 => {
                // Deleted under this handle: its files are no longer the topic's.
                self.unlock();
                self.close_lock();
                return Err(Error::TopicDeleted {
                    topic: self.tp.topic.to_string(),
                });
            }
            Ok(()) => {
                let mut base = [0u8; 8];
                base.copy_from_slice(&content[8..]);
                (content[0] != 0, Some(u64::from_be_bytes(base)))
            }
            // A new lock file (or one of an older version): no mark, no base.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => (false, None),
            Err(e) => {
                self.unlock();
                return Err(e).at(&self.dir.join(LOCK_FILE));
            }
        };
        self.lock_active_base = base;
        if marked && !in_txn {
            self.unlock();
            return Ok(Locked::TxnPending);
        }
        let end_before = self.next_offset;
        if let Err(e) = self.catch_up() {
            self.unlock();
            return Err(e);
        }
        if waited || self.next_offset != end_before {
            // Others write here too: no lease for a while (it would make them wait).
            self.contended_at = Some(Instant::now());
        }
        if self.lock_active_base.is_none() {
            // A new lock file: say where the active segment is, so later writers need not look.
            let base = self.segments.last().map_or(0, |s| s.base);
            if let Err(e) = self.write_lock_content(None, Some(base)) {
                self.unlock();
                return Err(e);
            }
            self.lock_active_base = Some(base);
        }
        Ok(Locked::Yes)
    }

    /// After a successful append: keeps the lock for this handle's next append (a lease,
    /// `lease.rs`) or releases it. A lease is renewed until [`LEASE_MAX`] after it began;
    /// `list` puts the partition on the releaser's list (`false`: the list is full).
    pub(crate) fn keep_or_unlock(&mut self, now: Instant, list: impl FnOnce() -> bool) {
        let contended = self
            .contended_at
            .is_some_and(|at| now.saturating_duration_since(at) < CONTENDED_FOR);
        if !self.cross_process || !self.locked || contended {
            self.unlock();
            return;
        }
        match &mut self.lease {
            Some(lease) if now.saturating_duration_since(lease.since) < LEASE_MAX => {
                lease.last = now;
            }
            Some(_) => self.unlock(),
            None if self.lease_listed || list() => {
                self.lease_listed = true;
                self.lease = Some(Lease {
                    since: now,
                    last: now,
                });
            }
            None => self.unlock(),
        }
    }

    /// The releaser's look: ends the lease if this handle has not appended for [`LEASE_IDLE`].
    /// Returns whether the partition leaves the list (no lease any more).
    pub(crate) fn end_lease_if_idle(&mut self, now: Instant) -> bool {
        if let Some(lease) = &self.lease
            && now.saturating_duration_since(lease.last) < LEASE_IDLE
        {
            return false;
        }
        self.unlock();
        self.lease_listed = false;
        true
    }

    /// Releases the OS lock (closing the lock file if the log keeps too many open); ends a
    /// lease.
    pub(crate) fn unlock(&mut self) {
        self.lease = None;
        if !self.locked {
            return;
        }
        self.locked = false;
        self.lock_active_base = None;
        if let Some(lock) = self.lock.as_mut()
            && let Err(e) = lock.unlock()
        {
            // Closing the file releases the lock too.
            tracing::warn!(partition = %self.tp, error = %e, "unlocking a partition lock file failed; closing it");
            self.close_lock();
            return;
        }
        if self.locks_open.load(Ordering::Relaxed) > LOCK_FILES_KEPT_OPEN {
            self.close_lock();
        }
    }

    fn close_lock(&mut self) {
        if self.lock.take().is_some() {
            self.locks_open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Marks the partition as written by a transaction in flight (under the lock): should its
    /// process die before [`clear_txn_mark`](Self::clear_txn_mark), the next writer recovers
    /// the journal before taking an offset the transaction may own.
    pub(crate) fn set_txn_mark(&mut self) -> Result<()> {
        self.write_lock_content(Some(1), None)
    }

    /// Under the lock: marks the partition deleted in its lock file, so that a handle of
    /// another process that still has it open fails its next write with
    /// [`Error::TopicDeleted`] instead of appending to files that are no longer the topic's.
    pub(crate) fn mark_deleted(&mut self) -> Result<()> {
        if !self.cross_process {
            return Ok(());
        }
        let path = self.dir.join(LOCK_FILE);
        let lock = self.lock_file()?;
        let mut content = [0u8; LOCK_CONTENT_LEN];
        if let Err(e) = lock.read_exact_at(0, &mut content)
            && e.kind() != std::io::ErrorKind::UnexpectedEof
        {
            return Err(e).at(&path);
        }
        content[DELETED_AT] = 1;
        lock.write_at(0, &content).at(&path)
    }

    /// Clears the mark of [`set_txn_mark`](Self::set_txn_mark).
    pub(crate) fn clear_txn_mark(&mut self) -> Result<()> {
        self.write_lock_content(Some(0), None)
    }

    /// Writes the mark and/or the active base into the lock file (whole, 16 bytes).
    fn write_lock_content(&mut self, mark: Option<u8>, base: Option<u64>) -> Result<()> {
        let path = self.dir.join(LOCK_FILE);
        let active = self.segments.last().map_or(0, |s| s.base);
        let lock = self.lock_file()?;
        let mut content = [0u8; LOCK_CONTENT_LEN];
        if let Err(e) = lock.read_exact_at(0, &mut content)
            && e.kind() != std::io::ErrorKind::UnexpectedEof
        {
            return Err(e).at(&path);
        }
        if let Some(mark) = mark {
            content[0] = mark;
        }
        content[8..].copy_from_slice(&base.unwrap_or(active).to_be_bytes());
        lock.write_at(0, &content).at(&path)
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
                    // The lock is ours, so its writer is gone: a torn tail.
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

    pub(crate) fn end_offset(&self) -> u64 {
        self.next_offset
    }

    /// The end offset after catching up with other processes' appends.
    pub(crate) fn latest_end_offset(&mut self) -> Result<u64> {
        self.check_poisoned()?;
        self.catch_up()?;
        self.verify_active()?;
        Ok(self.next_offset)
    }

    /// A catch-up that found more data in its active segment does not look whether that
    /// segment's file is still there (it saves a look per tailing fetch): one that was rolled
    /// and then deleted by another process's retention can leave this handle's end offset
    /// behind. Where that matters (an end offset asked for, a fetch beyond the known end), this
    /// looks, and starts again from the start offset if the file is gone.
    fn verify_active(&mut self) -> Result<()> {
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

    /// The start offset after looking at what other processes deleted since.
    pub(crate) fn latest_start_offset(&mut self) -> Result<u64> {
        self.check_poisoned()?;
        self.refresh_start()?;
        Ok(self.start)
    }

    /// Forgets the first `n` segments (below the start offset), keeping the indexes of
    /// segments waiting for their seal pointed at the same segments.
    fn drop_front(&mut self, n: usize) -> Vec<Segment> {
        self.unsealed.retain(|&i| i >= n);
        for i in &mut self.unsealed {
            *i -= n;
        }
        self.segments.drain(..n).collect()
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

    /// Reads the start offset again (another process may have moved it) and forgets the
    /// segments wholly below it whose files are gone.
    fn refresh_start(&mut self) -> Result<()> {
        if !self.cross_process {
            return Ok(());
        }
        self.start = self.start.max(read_start(&*self.storage, &self.dir)?);
        let start = self.start;
        // Forget the listed segments wholly below it whose files are gone; one still there
        // (rolled below the start after a deletion up to the end offset) stays listed for
        // retention to remove.
        let below = self
            .segments
            .windows(2)
            .take_while(|w| w[1].base <= start && !self.storage.exists(&w[0].path))
            .count();
        self.drop_front(below);
        Ok(())
    }

    /// The offset retention would move the start offset to at `now_ms` (milliseconds since
    /// the epoch): the base of the first sealed segment to keep, or `None` if no sealed
    /// segment is due. As Kafka's: from the oldest segment on, a segment goes while its newest
    /// record is more than `retention.ms` old, or while the partition without it is still at
    /// least `retention.bytes`; the active segment never goes.
    pub(crate) fn retention_target(
        &mut self,
        now_ms: i64,
        config: &TopicConfig,
    ) -> Result<Option<u64>> {
        self.check_poisoned()?;
        if !config.cleanup_policy.deletes() {
            return Ok(None);
        }
        // Other processes' retention may have deleted segments this handle still lists.
        self.refresh_start()?;
        if self.segments.len() < 2 {
            return Ok(None);
        }
        let mut excess = config.retention_bytes.map(|limit| {
            let size: u64 = self.segments.iter().map(Segment::size).sum();
            size.saturating_sub(limit)
        });
        let mut keep = None;
        let sealed = self.segments.len() - 1;
        for i in 0..sealed {
            let size = self.segments[i].size();
            let by_bytes = excess.is_some_and(|e| e >= size && size > 0);
            let by_time = match config.retention_ms {
                Some(ms) => {
                    let newest = self.segments[i].max_timestamp()?;
                    now_ms.saturating_sub(newest) > i64::try_from(ms).unwrap_or(i64::MAX)
                }
                None => false,
            };
            if !(by_bytes || by_time) {
                break;
            }
            if let Some(e) = &mut excess {
                *e = e.saturating_sub(size);
            }
            keep = Some(self.segments[i + 1].base);
        }
        // Segments wholly below the start offset go too (`delete_records` moved it past the
        // end of what was then the active segment).
        let target = keep.unwrap_or(0).max(self.start);
        let below_start = self.segments[1].base <= self.start;
        Ok((target > self.start || below_start).then_some(target))
    }

    /// Moves the start offset to `offset` (Kafka's `deleteRecords`; retention moves it to a
    /// segment's base) and removes the segments wholly below it. The caller holds the lock.
    /// In order, so that a crash anywhere leaves a correct log: the partition is synced (the
    /// start never passes durable data), the `start` file is replaced atomically (the commit
    /// point), then the segment files are removed and the directory synced; a crash before
    /// the removal leaves segments below the start, which the next writable open removes.
    /// Returns the bytes of the removed segments. An offset at or below the start only removes
    /// segments already wholly below it; one past the end offset is
    /// [`Error::OffsetOutOfRange`].
    pub(crate) fn delete_before(&mut self, offset: u64) -> Result<u64> {
        self.check_poisoned()?;
        if self.read_only {
            return Err(Error::ReadOnly {
                what: format!("delete records of {}", self.tp),
            });
        }
        self.refresh_start()?;
        if offset > self.next_offset {
            return Err(Error::OffsetOutOfRange {
                topic_partition: self.tp.clone(),
                offset,
                start: self.start,
                end: self.next_offset,
            });
        }
        if offset > self.start {
            self.move_start(offset)?;
        }
        let start = self.start;
        let below = self
            .segments
            .windows(2)
            .take_while(|w| w[1].base <= start)
            .count();
        let mut freed = 0;
        for segment in self.drop_front(below) {
            freed += segment.size();
            segment.remove(&self.storage)?;
        }
        if freed > 0 {
            self.storage.sync_dir(&self.dir).at(&self.dir)?;
        }
        Ok(freed)
    }

    /// Makes the records below `offset` durable, then `offset` the start offset (the commit
    /// point of a deletion).
    fn move_start(&mut self, offset: u64) -> Result<()> {
        if self.unsynced || self.dir_dirty || !self.unsealed.is_empty() {
            self.sync()?;
        }
        // The records below `offset` are durable, whoever wrote them (a writer in another
        // process may not have synced yet): a crash must not leave the start offset past the
        // partition's durable end.
        let holding = self
            .segments
            .partition_point(|s| s.base < offset)
            .saturating_sub(1);
        if let Some(segment) = self.segments.get_mut(holding) {
            segment.sync_now()?;
        }
        self.storage.sync_dir(&self.dir).at(&self.dir)?;
        let path = self.dir.join(START_FILE);
        self.storage
            .write_atomic(&path, format!("{offset}\n").as_bytes())
            .at(&path)?;
        self.start = offset;
        Ok(())
    }

    /// Bytes in the partition's segment files.
    pub(crate) fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    /// The base offset of the active segment.
    pub(crate) fn active_base(&self) -> u64 {
        self.segments.last().map_or(self.next_offset, |s| s.base)
    }

    /// How many segments the partition has.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned {
                what: self.tp.to_string(),
            });
        }
        Ok(())
    }

    /// Appends the builder's records as one batch at the end offset; returns its base offset.
    /// Returns whether the partition became unsynced by this append (so the log can note it).
    /// The caller holds the lock ([`lock_for_write`](Self::lock_for_write)).
    pub(crate) fn append(&mut self, batch: &mut BatchBuilder) -> Result<(u64, bool)> {
        self.check_poisoned()?;
        let base = self.next_offset;
        if batch.is_empty() {
            return Ok((base, false));
        }
        let count = batch.len() as u64;
        let bytes = batch.seal(&self.tp, Placement::at(base))?;
        self.write_sealed(bytes, base, count)?;
        self.appended(base)
    }

    /// Appends a whole Kafka v2 batch as it is, at the end offset: see
    /// [`Log::append_sealed`](crate::Log::append_sealed). The caller holds the lock.
    pub(crate) fn append_sealed(&mut self, batch: &mut [u8]) -> Result<(u64, bool)> {
        self.check_poisoned()?;
        let refuse = |offset: i64, reason: String| Error::InvalidBatch {
            topic_partition: self.tp.clone(),
            reason: format!("{reason} (the batch says base offset {offset})"),
        };
        let h = BatchHeader::parse(batch).map_err(|r| refuse(-1, r))?;
        let at = h.base_offset as i64;
        if h.total_len() != batch.len() as u64 {
            return Err(refuse(
                at,
                format!(
                    "its header says {} bytes, {} given",
                    h.total_len(),
                    batch.len()
                ),
            ));
        }
        if batch_crc(batch) != h.crc {
            return Err(refuse(at, "its CRC does not match its bytes".to_owned()));
        }
        if h.is_control() || h.is_transactional() {
            return Err(refuse(
                at,
                "a transactional or control batch (the embedded log has no transaction markers)"
                    .to_owned(),
            ));
        }
        if h.record_count == 0 || u64::from(h.record_count) != u64::from(h.last_offset_delta) + 1 {
            return Err(refuse(
                at,
                format!(
                    "{} records over a last offset delta of {} (the log keeps offsets dense)",
                    h.record_count, h.last_offset_delta
                ),
            ));
        }
        let base = self.next_offset;
        riffle_record::set_base_offset(batch, base);
        if let Some(epoch) = batch.get_mut(12..16) {
            epoch.copy_from_slice(&0i32.to_be_bytes());
        }
        self.write_sealed(batch, base, u64::from(h.record_count))?;
        self.appended(base)
    }

    /// After a batch at `base` was written: marks the partition unsynced (fsyncing it at once
    /// under [`FsyncPolicy::EveryAppend`]); whether it became unsynced by this append.
    fn appended(&mut self, base: u64) -> Result<(u64, bool)> {
        let newly_unsynced = !self.unsynced;
        self.unsynced = true;
        if self.options.fsync == FsyncPolicy::EveryAppend {
            self.sync()?;
            return Ok((base, false));
        }
        Ok((base, newly_unsynced))
    }

    /// Writes a sealed batch of `count` records at `base`, which must be the end offset: the
    /// step shared by [`append`](Self::append) and transactions (which seal their batches
    /// earlier, to journal them first). Rolls a segment if due. Does not fsync, and does not
    /// mark the partition [`unsynced`](Self::unsynced): a transaction's batches are durable in
    /// the journal, and a checkpoint syncs every partition before it drops them from there.
    pub(crate) fn write_sealed(&mut self, bytes: &[u8], base: u64, count: u64) -> Result<()> {
        self.check_poisoned()?;
        if base != self.next_offset {
            return Err(Error::Poisoned {
                what: format!(
                    "{} (a batch for offset {base} arrived at end offset {})",
                    self.tp, self.next_offset
                ),
            });
        }
        let len = bytes.len() as u64;
        let needs_roll = match self.segments.last() {
            Some(active) => {
                active.size() > 0
                    && (active.size() + len > self.options.segment_bytes
                        || base + count - active.base > u64::from(u32::MAX))
            }
            None => true,
        };
        if needs_roll {
            self.roll(base)?;
        }
        let interval = u64::from(self.options.index_interval_bytes);
        let Some(active) = self.segments.last_mut() else {
            return Err(Error::Poisoned {
                what: self.tp.to_string(),
            });
        };
        if let Err((e, restored)) = active.append(bytes, base + count - 1, interval) {
            self.poisoned = !restored;
            return Err(e);
        }
        self.next_offset = base + count;
        self.active_end = active.size();
        Ok(())
    }

    /// Refuses all work until the log is reopened: a transaction committed in the journal could
    /// not be written here, and only recovery (replaying the journal) can put it in place.
    pub(crate) fn poison(&mut self) {
        self.poisoned = true;
    }

    /// Starts a new segment at `base`. Unless the policy is `Never`, the sealed segment and the
    /// directory entries are synced first, so only the active segment can ever have a torn tail
    /// and a sealed segment never disappears in a crash; then the sealed segment's index gets
    /// its seal (where it ends), durably, so a missing successor is detected. The seal always
    /// follows the directory sync: a crash never leaves a seal whose successor is not durable.
    fn roll(&mut self, base: u64) -> Result<()> {
        let segment = Segment::create(&self.storage, &self.dir, base)?;
        let sealed = self.segments.len().checked_sub(1);
        if self.options.fsync == FsyncPolicy::Never {
            self.dir_dirty = true;
            self.unsealed.extend(sealed);
        } else {
            if let Some(sealed) = self.segments.last_mut() {
                sealed.sync()?;
            }
            self.storage.sync_dir(&self.dir).at(&self.dir)?;
            if let Some(sealed) = self.segments.last_mut() {
                sealed.seal(base)?;
            }
        }
        self.segments.push(segment);
        self.active_end = 0;
        if self.cross_process {
            // Before any batch goes into it: others learn of the roll from the lock file.
            self.write_lock_content(None, Some(base))?;
            self.lock_active_base = Some(base);
        }
        // Once per segment: forget the segments other processes' retention deleted.
        self.refresh_start()
    }

    /// Makes every append durable: dirty segments, then the directory if files were created,
    /// then the seals that waited for it.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
        if self.read_only {
            return Ok(());
        }
        for segment in self.segments.iter_mut().filter(|s| s.dirty) {
            segment.sync()?;
        }
        if self.dir_dirty {
            self.storage.sync_dir(&self.dir).at(&self.dir)?;
            self.dir_dirty = false;
        }
        for i in std::mem::take(&mut self.unsealed) {
            let next = self.segments.get(i + 1).map(|s| s.base);
            if let (Some(segment), Some(next)) = (self.segments.get_mut(i), next) {
                segment.seal(next)?;
            }
        }
        self.unsynced = false;
        Ok(())
    }

    /// Batches holding offsets `>= offset`, up to `max_bytes` of stored batches (at least one),
    /// checksum-verified but still compressed: the caller decodes them after releasing the lock.
    pub(crate) fn fetch(&mut self, offset: u64, max_bytes: usize) -> Result<Vec<StoredBatch>> {
        let mut attempt = 0;
        loop {
            match self.fetch_once(offset, max_bytes) {
                // A segment file this handle had closed is gone: another process moved the
                // start offset past it, or compacted it (renamed a cleaned file over it, removed
                // the segments it merged). Look again: the start offset first (the offset may be
                // out of range by now), then the segments from the start on.
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && self.cross_process
                        && attempt < 8 =>
                {
                    if attempt == 0 {
                        self.refresh_start()?;
                    } else {
                        self.reload()?;
                    }
                    attempt += 1;
                }
                other => return other,
            }
        }
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
    fn reload(&mut self) -> Result<()> {
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

    fn fetch_once(&mut self, offset: u64, max_bytes: usize) -> Result<Vec<StoredBatch>> {
        self.check_poisoned()?;
        if offset >= self.next_offset {
            // Perhaps another process appended since.
            self.catch_up()?;
        }
        if offset > self.next_offset {
            // Beyond the end as this handle knows it: make sure it knows.
            self.verify_active()?;
        }
        if offset > self.next_offset || offset < self.start {
            return Err(Error::OffsetOutOfRange {
                topic_partition: self.tp.clone(),
                offset,
                start: self.start,
                end: self.next_offset,
            });
        }
        let mut out = Vec::new();
        if offset == self.next_offset {
            return Ok(out);
        }
        let mut si = self
            .segments
            .partition_point(|s| s.base <= offset)
            .saturating_sub(1);
        let Some(seg) = self.segments.get(si) else {
            return Ok(out);
        };
        // Every batch must start at the offset the one before it ended at (an index entry
        // says where the first one starts): anything else is damage, never skipped over.
        let (mut pos, mut expected) = seg.position_for(offset);
        let unexpected =
            |seg: &Segment, position: u64, h: &BatchHeader, expected: Expect| Error::Corrupt {
                path: seg.path.clone(),
                position,
                reason: format!(
                    "the batch there holds offsets {}..{} where {expected} was expected",
                    h.base_offset,
                    h.next_offset()
                ),
            };
        // An index entry that does not point at its batch is a stale index (derived data), not
        // damage: the walk starts over from the segment's first batch.
        // (An entry naming a later offset at position 0 is one too.)
        let mut at_index_entry = pos != 0 || expected != Expect::Base(seg.base);
        // The active segment is read up to its last whole batch only.
        let (last, active_end) = (self.segments.len() - 1, self.active_end);
        let end_of = |si: usize, seg: &Segment| if si == last { active_end } else { seg.size() };
        // Skip the batches that end before `offset`, reading headers only.
        while let Some(seg) = self.segments.get_mut(si) {
            if pos >= end_of(si, seg) {
                if at_index_entry {
                    tracing::warn!(file = %seg.path.display(), position = pos, "an index entry points past the segment's data; reading the segment from its start");
                    (pos, expected, at_index_entry) = (0, Expect::Base(seg.base), false);
                    continue;
                }
                si += 1;
                pos = 0;
                at_index_entry = false;
                continue;
            }
            let h = match seg.read_header(pos) {
                Ok(h) if expected.matches(&h) => h,
                Err(e @ Error::Io { .. }) => return Err(e),
                _ if at_index_entry => {
                    tracing::warn!(file = %seg.path.display(), position = pos, "an index entry does not point at its batch; reading the segment from its start");
                    (pos, expected, at_index_entry) = (0, Expect::Base(seg.base), false);
                    continue;
                }
                Ok(h) => return Err(unexpected(seg, pos, &h, expected)),
                Err(e) => return Err(e),
            };
            at_index_entry = false;
            if h.next_offset() > offset {
                break;
            }
            pos += h.total_len();
            expected = Expect::Base(h.next_offset());
        }
        let mut used = 0usize;
        while let Some(seg) = self.segments.get_mut(si) {
            let seg_end = end_of(si, seg);
            let avail = seg_end.saturating_sub(pos);
            if avail == 0 {
                si += 1;
                pos = 0;
                continue;
            }
            let budget = max_bytes.saturating_sub(used) as u64;
            let mut want = budget.min(avail);
            if out.is_empty() {
                want = want.max(seg.read_header(pos)?.total_len());
            }
            if want < HEADER_LEN as u64 {
                break;
            }
            // One read for as many whole batches as fit; each batch is a slice of it.
            let buf = Bytes::from(seg.read(pos, want as usize)?);
            let mut at = 0usize;
            while let Some(rest) = buf.get(at..).filter(|r| r.len() >= HEADER_LEN) {
                let position = pos + at as u64;
                let corrupt = |reason: String| Error::Corrupt {
                    path: seg.path.clone(),
                    position,
                    reason: format!("{reason} ({expected} expected there)"),
                };
                let h = crate::segment::parse_stored(rest).map_err(corrupt)?;
                let total = h.total_len() as usize;
                if total > rest.len() {
                    if position + h.total_len() > seg_end {
                        return Err(corrupt(format!("batch of {total} bytes overruns the file")));
                    }
                    break; // the next batch does not fit the budget
                }
                let batch = buf.slice(at..at + total);
                if batch_crc(&batch) != h.crc {
                    return Err(corrupt(format!(
                        "checksum mismatch in the batch of {total} bytes there"
                    )));
                }
                if !expected.matches(&h) {
                    return Err(unexpected(seg, position, &h, expected));
                }
                expected = Expect::Base(h.next_offset());
                out.push(StoredBatch {
                    header: h,
                    bytes: batch,
                });
                used += total;
                at += total;
            }
            if at < buf.len() || used >= max_bytes {
                break;
            }
            pos += at as u64;
        }
        Ok(out)
    }
}
