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

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use riffle_record::varint::{put_varlong, varlong_len};
use riffle_record::{
    ATTR_CODEC_MASK, ATTR_LOG_APPEND_TIME, BatchHeader, Compression, FetchedBatch, HEADER_LEN,
    LOG_OVERHEAD, batch_crc, codec,
};

use super::Partition;
use crate::error::{Error, IoContext, Result};
use crate::segment::{Segment, segment_file_name};
use crate::storage::Storage;
use crate::topic_config::TopicConfig;

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
/// A written batch takes records from further source batches while its records section stays
/// below this.
const OUT_BATCH_BYTES: usize = 256 << 10;

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

/// One record kept, ready to encode again.
struct Kept {
    offset: u64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(Bytes, Option<Bytes>)>,
}

/// A batch being written: its base offset (its end is the next one's base, or the group's end).
struct OutBatch {
    base: u64,
    codec: Compression,
    log_append_time: bool,
    horizon: Option<i64>,
    max_timestamp: i64,
    records: Vec<Kept>,
    size: usize,
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

/// The rewritten group: its bytes, index entries and max timestamp.
struct Cleaned {
    bytes: Vec<u8>,
    index: Vec<(u32, u32)>,
    max_timestamp: i64,
    records_read: u64,
    records_removed: u64,
    /// Something differs from the group's segments (a record removed, a horizon set, several
    /// segments merged).
    changed: bool,
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

    /// Rewrites `group` into one segment's bytes (see the module docs).
    fn clean_group(
        &mut self,
        group: &Group,
        latest: &HashMap<Bytes, u64>,
        now_ms: i64,
        horizon: i64,
    ) -> Result<Cleaned> {
        let mut out: Vec<OutBatch> = Vec::new();
        // Max timestamps of removed batches before the first written batch.
        let mut pending_max = i64::MIN;
        let (mut records_read, mut records_removed) = (0u64, 0u64);
        let mut changed = group.end - group.first > 1;
        // Source batches, and whether they were all empty (a group emptied by an earlier pass).
        let (mut source_batches, mut all_empty) = (0usize, true);
        for i in group.first..group.end {
            let path = self.segments[i].path.clone();
            let bytes = self.read_whole(i)?;
            for_each_batch(&self.tp, &path, bytes, |h, batch, _| {
                source_batches += 1;
                all_empty &= h.record_count == 0;
                let had_horizon =
                    (h.attributes & ATTR_DELETE_HORIZON != 0).then_some(h.first_timestamp);
                let expired = had_horizon.is_some_and(|at| at <= now_ms);
                let mut kept = Vec::new();
                let mut tombstones = false;
                for record in batch.records() {
                    let record = record.map_err(|e| corrupt_record(&path, &e))?;
                    records_read += 1;
                    let superseded = record
                        .key()
                        .and_then(|k| latest.get(k))
                        .is_some_and(|&at| at > record.offset());
                    let tombstone = record.value().is_none() && record.key().is_some();
                    if superseded || (tombstone && expired) {
                        records_removed += 1;
                        changed = true;
                        continue;
                    }
                    tombstones |= tombstone;
                    kept.push(Kept {
                        offset: record.offset(),
                        timestamp: record.timestamp(),
                        key: record.key().cloned(),
                        value: record.value().cloned(),
                        headers: record.headers().map(|hd| (hd.key, hd.value)).collect(),
                    });
                }
                if kept.is_empty() {
                    match out.last_mut() {
                        Some(o) => o.max_timestamp = o.max_timestamp.max(h.max_timestamp),
                        None => pending_max = pending_max.max(h.max_timestamp),
                    }
                    return Ok(());
                }
                let wanted = tombstones.then(|| had_horizon.unwrap_or(horizon));
                if tombstones && had_horizon.is_none() {
                    changed = true;
                }
                let codec = h.compression();
                let log_append_time = h.attributes & ATTR_LOG_APPEND_TIME != 0;
                let size: usize = kept
                    .iter()
                    .map(|k| {
                        32 + k.key.as_ref().map_or(0, Bytes::len)
                            + k.value.as_ref().map_or(0, Bytes::len)
                    })
                    .sum();
                let joins = out.last().is_some_and(|o| {
                    o.codec == codec
                        && o.log_append_time == log_append_time
                        && (o.horizon.is_none() || wanted.is_none() || o.horizon == wanted)
                        && o.size + size <= OUT_BATCH_BYTES
                });
                if joins {
                    // Two source batches become one written batch.
                    changed = true;
                    if let Some(o) = out.last_mut() {
                        o.horizon = o.horizon.or(wanted);
                        o.max_timestamp = o.max_timestamp.max(h.max_timestamp);
                        o.size += size;
                        o.records.extend(kept);
                    }
                } else {
                    let base = if out.is_empty() {
                        group.base
                    } else {
                        h.base_offset
                    };
                    out.push(OutBatch {
                        base,
                        codec,
                        log_append_time,
                        horizon: wanted,
                        max_timestamp: h
                            .max_timestamp
                            .max(std::mem::replace(&mut pending_max, i64::MIN)),
                        records: kept,
                        size,
                    });
                }
                Ok(())
            })?;
        }
        // Encode, each batch reaching to the next one's base (or the group's end).
        let mut bytes = Vec::new();
        let mut index = Vec::new();
        let mut since_index = 0u64;
        let interval = u64::from(self.options.index_interval_bytes);
        let mut max_timestamp = pending_max;
        let mut zstd = None;
        if out.is_empty() {
            // Nothing left: one empty batch holds the group's offsets.
            let h = empty_batch_header(group.base, group.end_offset, pending_max);
            let mut b = vec![0u8; HEADER_LEN];
            h.write(&mut b);
            let crc = batch_crc(&b);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            bytes.extend_from_slice(&b);
            // Unless it was that one empty batch already.
            changed |= !(source_batches == 1 && all_empty);
        }
        let ends: Vec<u64> = out
            .iter()
            .skip(1)
            .map(|o| o.base)
            .chain(std::iter::once(group.end_offset))
            .collect();
        for (o, end) in out.iter().zip(ends) {
            max_timestamp = max_timestamp.max(o.max_timestamp);
            let pos = bytes.len() as u64;
            encode_batch(o, end, &mut bytes, &mut zstd).map_err(|reason| Error::Corrupt {
                path: self.dir.join(segment_file_name(group.base)),
                position: pos,
                reason,
            })?;
            let len = bytes.len() as u64 - pos;
            if since_index >= interval {
                let rel = u32::try_from(end - 1 - group.base).ok();
                if let (Some(rel), Ok(p)) = (rel, u32::try_from(pos)) {
                    index.push((rel, p));
                }
                since_index = 0;
            }
            since_index += len;
        }
        Ok(Cleaned {
            bytes,
            index,
            max_timestamp,
            records_read,
            records_removed,
            changed,
        })
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

fn corrupt_record(path: &Path, e: &riffle_record::Error) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        position: 0,
        reason: format!("a record the cleaner read: {e}"),
    }
}

/// Calls `f` with each batch of a sealed segment's bytes, checksums checked: damage is an
/// [`Error::Corrupt`] naming the file and position, never skipped.
fn for_each_batch(
    tp: &riffle_record::TopicPartition,
    path: &Path,
    bytes: Bytes,
    mut f: impl FnMut(&BatchHeader, &FetchedBatch, u64) -> Result<()>,
) -> Result<()> {
    let mut at = 0usize;
    while at < bytes.len() {
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_path_buf(),
            position: at as u64,
            reason,
        };
        let h = crate::segment::parse_stored(&bytes[at..]).map_err(corrupt)?;
        let len = usize::try_from(h.total_len()).unwrap_or(usize::MAX);
        let Some(batch) = bytes.get(at..at.saturating_add(len)) else {
            return Err(corrupt(format!(
                "batch of {len} bytes overruns the segment"
            )));
        };
        if batch_crc(batch) != h.crc {
            return Err(corrupt("batch checksum mismatch".to_owned()));
        }
        let fetched = FetchedBatch::decode(tp, &h, bytes.slice(at..at + len))
            .map_err(|e| corrupt(e.to_string()))?;
        f(&h, &fetched, at as u64)?;
        at += len;
    }
    Ok(())
}

/// The header of an empty batch holding offsets `base..end`.
fn empty_batch_header(base: u64, end: u64, max_timestamp: i64) -> BatchHeader {
    BatchHeader {
        base_offset: base,
        length: (HEADER_LEN - LOG_OVERHEAD) as u32,
        leader_epoch: 0,
        crc: 0,
        attributes: 0,
        last_offset_delta: u32::try_from(end - 1 - base).unwrap_or(u32::MAX),
        first_timestamp: max_timestamp,
        max_timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: 0,
    }
}

/// Appends `o` as a Kafka v2 batch holding offsets `o.base..end` to `out`.
fn encode_batch(
    o: &OutBatch,
    end: u64,
    out: &mut Vec<u8>,
    zstd: &mut Option<zstd::bulk::Compressor<'static>>,
) -> std::result::Result<(), String> {
    let first_ts = o
        .horizon
        .or_else(|| o.records.first().map(|k| k.timestamp))
        .unwrap_or(o.max_timestamp);
    let mut records = Vec::with_capacity(o.size);
    for k in &o.records {
        let ts_delta = k.timestamp.wrapping_sub(first_ts);
        let offset_delta = (k.offset - o.base) as i64;
        let len_of = |b: Option<&Bytes>| b.map_or(-1, |b| b.len() as i64);
        let mut headers_len = 0;
        for (hk, hv) in &k.headers {
            headers_len += varlong_len(hk.len() as i64)
                + hk.len()
                + varlong_len(len_of(hv.as_ref()))
                + hv.as_ref().map_or(0, Bytes::len);
        }
        let body = 1
            + varlong_len(ts_delta)
            + varlong_len(offset_delta)
            + varlong_len(len_of(k.key.as_ref()))
            + k.key.as_ref().map_or(0, Bytes::len)
            + varlong_len(len_of(k.value.as_ref()))
            + k.value.as_ref().map_or(0, Bytes::len)
            + varlong_len(k.headers.len() as i64)
            + headers_len;
        put_varlong(&mut records, body as i64);
        records.push(0);
        put_varlong(&mut records, ts_delta);
        put_varlong(&mut records, offset_delta);
        put_varlong(&mut records, len_of(k.key.as_ref()));
        records.extend_from_slice(k.key.as_deref().unwrap_or_default());
        put_varlong(&mut records, len_of(k.value.as_ref()));
        records.extend_from_slice(k.value.as_deref().unwrap_or_default());
        put_varlong(&mut records, k.headers.len() as i64);
        for (hk, hv) in &k.headers {
            put_varlong(&mut records, hk.len() as i64);
            records.extend_from_slice(hk);
            put_varlong(&mut records, len_of(hv.as_ref()));
            records.extend_from_slice(hv.as_deref().unwrap_or_default());
        }
    }
    let at = out.len();
    out.resize(at + HEADER_LEN, 0);
    codec::compress(o.codec, &records, out, zstd).map_err(|e| e.to_string())?;
    let mut attributes = o.codec.id() & ATTR_CODEC_MASK;
    if o.log_append_time {
        attributes |= ATTR_LOG_APPEND_TIME;
    }
    if o.horizon.is_some() {
        attributes |= ATTR_DELETE_HORIZON;
    }
    let h = BatchHeader {
        base_offset: o.base,
        length: u32::try_from(out.len() - at - LOG_OVERHEAD).map_err(|_| "batch too large")?,
        leader_epoch: 0,
        crc: 0,
        attributes,
        last_offset_delta: u32::try_from(end - 1 - o.base).map_err(|_| "offset range too large")?,
        first_timestamp: first_ts,
        max_timestamp: o.max_timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: o.records.len() as u32,
    };
    h.write(&mut out[at..]);
    let crc = batch_crc(&out[at..]);
    out[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}
