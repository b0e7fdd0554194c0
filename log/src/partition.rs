//! One partition: a directory of segments, the offset after its last record, and whether it has
//! appends that are not yet durable. All access goes through the partition's own lock, so
//! partitions append and fetch in parallel.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{BatchBuilder, BatchHeader, HEADER_LEN, batch_crc};
use crate::error::{Error, IoContext, Result};
use crate::options::{FsyncPolicy, LogOptions};
use crate::segment::{Segment, parse_segment_file_name, segment_file_name};
use crate::storage::Storage;
use crate::types::TopicPartition;

/// A whole stored batch, checksum verified, as read from a segment.
#[derive(Debug)]
pub(crate) struct StoredBatch {
    pub(crate) header: BatchHeader,
    pub(crate) bytes: Bytes,
}

#[derive(Debug)]
pub(crate) struct Partition {
    tp: TopicPartition,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    /// Sorted by base offset, never empty; the last one takes appends.
    segments: Vec<Segment>,
    next_offset: u64,
    /// Files were created in `dir` since the last sync.
    dir_dirty: bool,
    /// Sealed segments (by index) whose seal waits for the next directory sync (`Never`).
    unsealed: Vec<usize>,
    /// Plain appends are not yet durable (and not in the transaction journal either). Batches
    /// written by transactions leave it alone: the journal holds them until a checkpoint.
    pub(crate) unsynced: bool,
    /// A failed write could not be rolled back: refuse work until reopened.
    poisoned: bool,
}

impl Partition {
    /// Opens the partition in `dir`, recovering its active segment and checking that the
    /// sealed ones are whole and contiguous (see `segment.rs`). `existing`: the partition
    /// belongs to a topic whose creation finished, so its directory and its segments must be
    /// there — a missing directory or segment is an [`Error::Corrupt`], not a new partition.
    pub(crate) fn open(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        tp: TopicPartition,
        options: LogOptions,
        existing: bool,
    ) -> Result<Self> {
        let missing = |what: String| Error::Corrupt {
            path: dir.clone(),
            position: 0,
            reason: format!(
                "{what}: partition {tp} of a complete topic lost its data (every offset it had \
                 is gone); `riffle log repair` recreates it empty explicitly"
            ),
        };
        if !existing {
            storage.create_dir_all(&dir).at(&dir)?;
        }
        let mut bases: Vec<u64> = storage
            .list(&dir)
            .at(&dir)?
            .iter()
            .filter_map(|name| parse_segment_file_name(name))
            .collect();
        bases.sort_unstable();
        let interval = u64::from(options.index_interval_bytes);
        let mut segments = Vec::with_capacity(bases.len().max(1));
        let mut next_offset = 0;
        let created = bases.is_empty();
        if created {
            if existing {
                return Err(missing(
                    "the partition directory is missing or holds no segment".to_owned(),
                ));
            }
            segments.push(Segment::create(&storage, &dir, 0)?);
            storage.sync_dir(&dir).at(&dir)?;
        }
        if let Some(&first) = bases.first().filter(|&&b| b != 0) {
            // The log keeps every offset (no retention yet): the first segment starts at 0.
            return Err(Error::Corrupt {
                path: dir.join(segment_file_name(first)),
                position: 0,
                reason: format!(
                    "the partition's first segment starts at offset {first}, not 0: offsets \
                     0..{first} are in no segment (a deleted segment file?)"
                ),
            });
        }
        for (i, &base) in bases.iter().enumerate() {
            let mut segment = Segment::open(&storage, &dir, base)?;
            match bases.get(i + 1) {
                None => next_offset = segment.recover(interval)?,
                Some(&next_base) => {
                    segment.check_sealed(next_base, interval)?;
                }
            }
            segments.push(segment);
        }
        Ok(Self {
            tp,
            dir,
            storage,
            options,
            segments,
            next_offset,
            dir_dirty: false,
            unsealed: Vec::new(),
            unsynced: false,
            poisoned: false,
        })
    }

    pub(crate) fn end_offset(&self) -> u64 {
        self.next_offset
    }

    pub(crate) fn start_offset(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.base)
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
    pub(crate) fn append(&mut self, batch: &mut BatchBuilder) -> Result<(u64, bool)> {
        self.check_poisoned()?;
        let base = self.next_offset;
        if batch.is_empty() {
            return Ok((base, false));
        }
        let count = batch.len() as u64;
        let bytes = batch.seal(&self.tp, base)?;
        self.write_sealed(bytes, base, count)?;
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
        if let Err((e, restored)) = active.append(bytes, base, interval) {
            self.poisoned = !restored;
            return Err(e);
        }
        self.next_offset = base + count;
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
        Ok(())
    }

    /// Makes every append durable: dirty segments, then the directory if files were created,
    /// then the seals that waited for it.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
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
        self.check_poisoned()?;
        if offset > self.next_offset || offset < self.start_offset() {
            return Err(Error::OffsetOutOfRange {
                topic_partition: self.tp.clone(),
                offset,
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
            |seg: &Segment, position: u64, h: &BatchHeader, expected: u64| Error::Corrupt {
                path: seg.path.clone(),
                position,
                reason: format!(
                    "the batch there holds offsets {}..{} where offset {expected} was expected",
                    h.base_offset,
                    h.next_offset()
                ),
            };
        // An index entry that does not point at its batch is a stale index (derived data), not
        // damage: the walk starts over from the segment's first batch.
        let mut at_index_entry = pos != 0;
        // Skip the batches that end before `offset`, reading headers only.
        while let Some(seg) = self.segments.get_mut(si) {
            if pos >= seg.size() {
                si += 1;
                pos = 0;
                at_index_entry = false;
                continue;
            }
            let h = match seg.read_header(pos) {
                Ok(h) if h.base_offset == expected => h,
                Err(e @ Error::Io { .. }) => return Err(e),
                _ if at_index_entry => {
                    tracing::warn!(file = %seg.path.display(), position = pos, "an index entry does not point at its batch; reading the segment from its start");
                    (pos, expected, at_index_entry) = (0, seg.base, false);
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
            expected = h.next_offset();
        }
        let mut used = 0usize;
        while let Some(seg) = self.segments.get_mut(si) {
            let avail = seg.size().saturating_sub(pos);
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
                    reason: format!("{reason} (offset {expected} expected there)"),
                };
                let h = BatchHeader::parse(rest).map_err(corrupt)?;
                let total = h.total_len() as usize;
                if total > rest.len() {
                    if position + h.total_len() > seg.size() {
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
                if h.base_offset != expected {
                    return Err(unexpected(seg, position, &h, expected));
                }
                expected = h.next_offset();
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
