//! Compaction of one partition (`cleanup.policy=compact`): the latest record per key stays,
//! older ones go, tombstones go `delete.retention.ms` after the cleaning that first kept them
//! (log/FORMAT.md, *Compaction*). Offsets never change.
//!
//! One pass, under the partition's lock (so no writer, retention or other cleaner runs in
//! between), in this order:
//! 1. the *dirty* sealed segments — from the `cleaner-checkpoint` offset on, at most
//!    [`LogOptions::cleaner_pass_bytes`](crate::LogOptions::cleaner_pass_bytes) of them — are
//!    read into a map from key to its latest offset (the active segment is never cleaned);
//! 2. the sealed segments from the first up to the end of that dirty range are taken in groups
//!    of neighbours whose bytes fit in one segment, and each group is rewritten into one
//!    segment, named by the group's first base offset: a record stays unless the map holds a
//!    later offset for its key, or it is a tombstone whose batch's delete horizon has passed.
//!    Batches still cover every offset of the group, in order and without gaps: a batch keeps
//!    the offsets of the removed batches after it (the first keeps those before it), as a
//!    Kafka batch whose records were removed keeps its last offset delta; a group with no
//!    record left is one empty batch. A written batch holding a tombstone gets Kafka's
//!    delete horizon (attribute bit 6, the first-timestamp field: now plus
//!    `delete.retention.ms`) if it has none; its max timestamp stays the largest of the
//!    batches it replaces, so retention by time sees the same segment ages;
//! 3. each group is swapped in (a crash anywhere leaves the old segments or the new one):
//!    the new data goes to `<base>.log.cleaned`, fsynced; for a group of several segments the
//!    `cleaning` file names the range `<base> <end>` (written atomically); the cleaned file is
//!    renamed over `<base>.log`, the directory synced (the commit point: from here the
//!    segment at `<base>` covers the whole group, and the group's other segments are leftovers
//!    a reader skips and a writable open removes, but only as the `cleaning` file says); the
//!    other segments' files are removed, the directory synced, the index rewritten with its
//!    seal;
//! 4. the checkpoint moves to the end of the dirty range.
//!
//! Readers in this process wait on the partition's mutex. Readers in other processes keep
//! reading the files they have open (a rename or removal leaves an open file readable); one
//! that opens a segment again and finds another file under its name (a changed identity), or
//! none, reads the partition's segments again from its start offset.
//!
//! This file owns the pass (what is due, the dirty range, the groups, the checkpoint) and the
//! swap with its crash recovery; `rewrite.rs` owns reading a group's batches and writing the
//! records kept as new batches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::Partition;
use crate::error::{Error, IoContext, Result};
use crate::segment::{Segment, segment_file_name};
use crate::storage::Storage;
use crate::topic_config::TopicConfig;

mod rewrite;

use rewrite::{Cleaned, corrupt_record, for_each_batch};

/// The offset up to which the partition was cleaned (ASCII decimal and a newline; absent: 0).
pub(crate) const CHECKPOINT_FILE: &str = "cleaner-checkpoint";
/// A swap of a group of several segments in progress: `<base> <end>`, the range the segment at
/// `<base>` covers once the cleaned file is renamed over it.
pub(crate) const CLEANING_FILE: &str = "cleaning";
/// The suffix of a cleaned segment being written (never read: removed if a crash left it).
pub(crate) const CLEANED_SUFFIX: &str = ".log.cleaned";
/// Kafka's batch attribute: the first-timestamp field holds the delete horizon, after which
/// the batch's tombstones are removed (KIP-534).
pub(crate) const ATTR_DELETE_HORIZON: u16 = 1 << 6;

/// What one compaction pass of one partition did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// Partitions cleaned.
    pub partitions: usize,
    /// Segments rewritten (before the swap).
    pub segments_cleaned: usize,
    /// Segments they became.
    pub segments_written: usize,
    /// Bytes of the rewritten segments before.
    pub bytes_before: u64,
    /// Bytes of the segments they became.
    pub bytes_after: u64,
    /// Records read (the dirty range for the key map, then every rewritten segment).
    pub records_read: u64,
    /// Records removed: superseded by a later record of their key, or expired tombstones.
    pub records_removed: u64,
    /// Bytes read (dirty range and rewritten segments) and written.
    pub bytes_io: u64,
}

impl CompactionReport {
    /// Adds `other`'s counts.
    pub(crate) fn add(&mut self, other: &CompactionReport) {
        self.partitions += other.partitions;
        self.segments_cleaned += other.segments_cleaned;
        self.segments_written += other.segments_written;
        self.bytes_before += other.bytes_before;
        self.bytes_after += other.bytes_after;
        self.records_read += other.records_read;
        self.records_removed += other.records_removed;
        self.bytes_io += other.bytes_io;
    }
}

/// Reads an offset file (`cleaner-checkpoint`): absent is 0.
pub(crate) fn read_offset_file(storage: &dyn Storage, path: &Path) -> Result<u64> {
    match storage.read(path).at(path)? {
        None => Ok(0),
        Some(raw) => std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| Error::Corrupt {
                path: path.to_path_buf(),
                position: 0,
                reason: format!("not an offset: {:?}", String::from_utf8_lossy(&raw)),
            }),
    }
}

/// The `cleaning` file's range, if it holds one.
pub(crate) fn read_cleaning(storage: &dyn Storage, dir: &Path) -> Result<Option<(u64, u64)>> {
    let path = dir.join(CLEANING_FILE);
    let Some(raw) = storage.read(&path).at(&path)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&raw);
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(base)), Some(Ok(end))) if base < end => Ok(Some((base, end))),
        _ => Err(Error::Corrupt {
            path,
            position: 0,
            reason: format!("not a range `<base> <end>`: {text:?}"),
        }),
    }
}

/// A group of neighbouring sealed segments rewritten into one.
struct Group {
    /// Indexes into the partition's segments, `first..end`.
    first: usize,
    end: usize,
    /// Offsets `base..end_offset`.
    base: u64,
    end_offset: u64,
}

impl Partition {
    /// Whether a compaction pass is due: the dirty share of the sealed bytes (those after the
    /// checkpoint this handle last read) reaches `min.cleanable.dirty.ratio`. Cheap: no file is
    /// read (a stale checkpoint only makes a pass look due; the pass reads it again).
    pub(crate) fn compaction_due(&mut self, config: &TopicConfig) -> Result<bool> {
        self.check_poisoned()?;
        if !config.cleanup_policy.compacts() || self.segments.len() < 2 {
            return Ok(false);
        }
        let checkpoint = match self.cleaned_to {
            Some(c) => c,
            None => {
                let c = read_offset_file(&*self.storage, &self.dir.join(CHECKPOINT_FILE))?;
                self.cleaned_to = Some(c);
                c
            }
        };
        let (dirty, total) = self.dirty_bytes(checkpoint);
        Ok(dirty > 0 && dirty as f64 >= config.min_cleanable_dirty_ratio * total as f64)
    }

    /// The cleaner's checkpoint (read again: another process may have cleaned since), the
    /// bytes of the sealed segments ending after it, and of all sealed segments.
    pub(crate) fn cleaner_state(&mut self) -> Result<(u64, u64, u64)> {
        self.check_poisoned()?;
        let checkpoint = read_offset_file(&*self.storage, &self.dir.join(CHECKPOINT_FILE))?;
        self.cleaned_to = Some(checkpoint);
        let (dirty, sealed) = self.dirty_bytes(checkpoint);
        Ok((checkpoint, dirty, sealed))
    }

    /// Bytes of the sealed segments ending after `checkpoint`, and of all sealed segments.
    fn dirty_bytes(&self, checkpoint: u64) -> (u64, u64) {
        let sealed = self.segments.len().saturating_sub(1);
        let (mut dirty, mut total) = (0, 0);
        for i in 0..sealed {
            let size = self.segments[i].size();
            total += size;
            if self.segments[i + 1].base > checkpoint {
                dirty += size;
            }
        }
        (dirty, total)
    }

    /// One compaction pass (see the module docs); the caller holds the partition's lock and
    /// caught up. `None` if nothing was due.
    pub(crate) fn compact(
        &mut self,
        now_ms: i64,
        config: &TopicConfig,
    ) -> Result<Option<CompactionReport>> {
        self.check_poisoned()?;
        if self.read_only {
            return Err(Error::ReadOnly {
                what: format!("compact {}", self.tp),
            });
        }
        if !config.cleanup_policy.compacts() {
            return Ok(None);
        }
        self.refresh_start()?;
        self.resync()?;
        // Seals that wait for a directory sync are written first: the cleaner reads sealed
        // segments only.
        if self.unsynced || self.dir_dirty || !self.unsealed.is_empty() {
            self.sync()?;
        }
        let checkpoint = read_offset_file(&*self.storage, &self.dir.join(CHECKPOINT_FILE))?;
        self.cleaned_to = Some(checkpoint);
        let sealed = self.segments.len().saturating_sub(1);
        let (dirty, total) = self.dirty_bytes(checkpoint);
        if dirty == 0 || (dirty as f64) < config.min_cleanable_dirty_ratio * total as f64 {
            return Ok(None);
        }
        // The dirty range: from the first sealed segment ending after the checkpoint, at most
        // `cleaner_pass_bytes` (at least one segment).
        let first_dirty = (0..sealed)
            .find(|&i| self.segments[i + 1].base > checkpoint)
            .unwrap_or(sealed);
        let mut dirty_end = first_dirty;
        let mut taken = 0;
        while dirty_end < sealed
            && (dirty_end == first_dirty
                || taken + self.segments[dirty_end].size() <= self.options.cleaner_pass_bytes)
        {
            taken += self.segments[dirty_end].size();
            dirty_end += 1;
        }
        let clean_end = self.segments[dirty_end].base;
        let mut report = CompactionReport {
            partitions: 1,
            ..CompactionReport::default()
        };
        // 1. The latest offset of every key in the dirty range.
        let mut latest: HashMap<Bytes, u64> = HashMap::new();
        for i in first_dirty..dirty_end {
            let path = self.segments[i].path.clone();
            let bytes = self.read_whole(i)?;
            report.bytes_io += bytes.len() as u64;
            for_each_batch(&self.tp, &path, bytes, |_, batch, _| {
                for record in batch.records() {
                    let record = record.map_err(|e| corrupt_record(&path, &e))?;
                    report.records_read += 1;
                    if let Some(key) = record.key() {
                        // A copy: a slice would keep the whole segment's buffer alive.
                        match latest.get_mut(key) {
                            Some(at) => *at = record.offset(),
                            None => {
                                latest.insert(Bytes::copy_from_slice(key), record.offset());
                            }
                        }
                    }
                }
                Ok(())
            })?;
        }
        // 2. Groups of neighbours whose bytes fit in one segment, from the first segment to
        // the end of the dirty range.
        let mut groups = Vec::new();
        let mut i = 0;
        while i < dirty_end {
            let (first, base) = (i, self.segments[i].base);
            let mut size = 0;
            while i < dirty_end
                && (i == first
                    || (size + self.segments[i].size() <= self.options.segment_bytes
                        && self.segments[i + 1].base - base < u64::from(u32::MAX / 2)))
            {
                size += self.segments[i].size();
                i += 1;
            }
            groups.push(Group {
                first,
                end: i,
                base,
                end_offset: self.segments[i].base,
            });
        }
        // 3. Rewritten and swapped in, from the last group to the first (the indexes of the
        // groups before stay valid).
        let horizon =
            now_ms.saturating_add(i64::try_from(config.delete_retention_ms).unwrap_or(i64::MAX));
        for group in groups.iter().rev() {
            let before: u64 = (group.first..group.end)
                .map(|i| self.segments[i].size())
                .sum();
            let cleaned = self.clean_group(group, &latest, now_ms, horizon)?;
            report.records_read += cleaned.records_read;
            report.records_removed += cleaned.records_removed;
            report.bytes_io += before;
            if !cleaned.changed {
                continue;
            }
            report.segments_cleaned += group.end - group.first;
            report.segments_written += 1;
            report.bytes_before += before;
            report.bytes_after += cleaned.bytes.len() as u64;
            report.bytes_io += cleaned.bytes.len() as u64;
            self.swap_in(group, cleaned)?;
        }
        // 4. The checkpoint.
        let path = self.dir.join(CHECKPOINT_FILE);
        self.storage
            .write_atomic(&path, format!("{clean_end}\n").as_bytes())
            .at(&path)?;
        self.cleaned_to = Some(clean_end);
        Ok(Some(report))
    }

    /// The whole file of segment `i` (one segment in memory at a time).
    fn read_whole(&mut self, i: usize) -> Result<Bytes> {
        let segment = &mut self.segments[i];
        let size = segment.size();
        Ok(Bytes::from(
            segment.read(0, usize::try_from(size).unwrap_or(usize::MAX))?,
        ))
    }

    /// Swaps the cleaned `group` in (module docs, step 3).
    fn swap_in(&mut self, group: &Group, cleaned: Cleaned) -> Result<()> {
        let log_path = self.dir.join(segment_file_name(group.base));
        let cleaned_path = cleaned_path(&self.dir, group.base);
        {
            let mut file = self.storage.open(&cleaned_path).at(&cleaned_path)?;
            file.truncate(0).at(&cleaned_path)?;
            file.append(&cleaned.bytes).at(&cleaned_path)?;
            file.sync().at(&cleaned_path)?;
        }
        let merges = group.end - group.first > 1;
        if merges {
            let path = self.dir.join(CLEANING_FILE);
            self.storage
                .write_atomic(
                    &path,
                    format!("{} {}\n", group.base, group.end_offset).as_bytes(),
                )
                .at(&path)?;
        }
        self.storage
            .replace_file(&cleaned_path, &log_path)
            .at(&log_path)?;
        self.storage.sync_dir(&self.dir).at(&self.dir)?;
        // Committed: the segment at `base` covers the group. The rest are leftovers.
        let mut segment = Segment::open(&self.storage, &self.dir, group.base, false)?;
        let old: Vec<Segment> = self.segments.splice(group.first..group.end, []).collect();
        for s in old.iter().skip(1) {
            s.remove(&self.storage)?;
        }
        drop(old);
        if merges {
            self.storage.sync_dir(&self.dir).at(&self.dir)?;
            let path = self.dir.join(CLEANING_FILE);
            self.storage.remove_file(&path).at(&path)?;
        }
        segment.install_index(cleaned.index, group.end_offset, cleaned.max_timestamp)?;
        self.segments.insert(group.first, segment);
        Ok(())
    }

    /// Under the lock, on open: finishes or undoes what a cleaner's crash left — a cleaned
    /// file not yet renamed is removed; `superseded` segments (inside a segment that a
    /// committed swap made cover them, as the `cleaning` file says) are removed; then the
    /// `cleaning` file.
    pub(crate) fn finish_cleaning(&mut self, superseded: &[u64]) -> Result<()> {
        let names = self.storage.list(&self.dir).at(&self.dir)?;
        let mut removed = false;
        for name in names.iter().filter(|n| n.ends_with(CLEANED_SUFFIX)) {
            let path = self.dir.join(name);
            tracing::info!(file = %path.display(), "removing a cleaned segment a compaction did not swap in (it stopped before)");
            self.storage.remove_file(&path).at(&path)?;
            removed = true;
        }
        for &base in superseded {
            let path = self.dir.join(segment_file_name(base));
            tracing::info!(file = %path.display(), "removing a segment a compaction merged into the one before it (it stopped before removing it)");
            self.storage.remove_file(&path).at(&path)?;
            let index = path.with_extension("index");
            self.storage.remove_file(&index).at(&index)?;
            removed = true;
        }
        if removed {
            self.storage.sync_dir(&self.dir).at(&self.dir)?;
        }
        // No swap is in progress (the lock is held): the range it names is done or undone.
        let path = self.dir.join(CLEANING_FILE);
        if self.storage.exists(&path) {
            self.storage.remove_file(&path).at(&path)?;
        }
        Ok(())
    }
}

/// Where the cleaned file of the segment at `base` is written.
pub(crate) fn cleaned_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}{CLEANED_SUFFIX}"))
}
