//! Writing a partition: appending a batch at the end offset, rolling to a new segment, and
//! making appends durable (`sync`, which an append calls itself only under
//! [`FsyncPolicy::EveryAppend`]).
//!
//! It must never write without the partition's lock held by the caller
//! ([`lock_for_write`](Partition::lock_for_write)), never at an offset other than the end
//! offset, and never seal a segment before its successor is durable.

use riffle_record::{BatchBuilder, BatchHeader, Placement, batch_crc};

use super::Partition;
use crate::error::{Error, IoContext, Result};
use crate::options::FsyncPolicy;
use crate::segment::Segment;

impl Partition {
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
            if !restored {
                self.poisoned = Some(format!(
                    "a write failed ({e}) and could not be cut back off the segment; reopening \
                     the log cuts it as a torn tail"
                ));
            }
            return Err(e);
        }
        self.next_offset = base + count;
        self.active_end = active.size();
        Ok(())
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
        // The active segment holds the end offset: once it is fsynced (whoever wrote into it:
        // an fsync covers the whole file), every record below the end is durable (sealed
        // segments were fsynced when rolled, or are among the dirty ones here).
        let active_synced = self.segments.last().is_some_and(|s| s.dirty);
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
        if active_synced {
            self.raise_recovery_point(self.next_offset)?;
        }
        Ok(())
    }
}
