//! The log start offset (log/FORMAT.md, *Start offset*): the `start` file, what other
//! processes' deletions moved it to, retention (which sealed segments `retention.ms` and
//! `retention.bytes` no longer keep) and deleting the records below an offset.
//!
//! It must never remove a segment file before the `start` file durably says its records are
//! gone, nor move the start offset past durable data or past the end offset: a crash at any
//! step leaves a correct log.

use super::Partition;
use crate::error::{Error, IoContext, Result};
use crate::segment::Segment;
use crate::storage::Storage;
use crate::topic_config::TopicConfig;

/// The name of a partition's start-offset file: the log start offset, ASCII decimal and a
/// newline, replaced atomically; absent while the start offset is 0.
pub(crate) const START_FILE: &str = "start";

/// The start offset the partition directory `dir` records (0 without a `start` file).
pub(crate) fn read_start(storage: &dyn Storage, dir: &std::path::Path) -> Result<u64> {
    let path = dir.join(START_FILE);
    let Some(bytes) = storage.read(&path).at(&path)? else {
        return Ok(0);
    };
    parse_start(&path, &bytes)
}

/// The start offset in `bytes`, the content of the `start` file at `path`; anything but what
/// [`encode_start`] writes (or the checksum-less form of older logs) is an [`Error::Corrupt`].
pub(crate) fn parse_start(path: &std::path::Path, bytes: &[u8]) -> Result<u64> {
    decode_start(bytes).ok_or_else(|| Error::Corrupt {
        path: path.to_path_buf(),
        position: 0,
        reason: format!(
            "expected the start offset (a decimal number, a space, the CRC32C of that number in \
             8 hex digits, a newline), found {:?}; the start offset says which records were \
             deleted, so a damaged one is not guessed",
            String::from_utf8_lossy(bytes)
        ),
    })
}

/// The content of a `start` file for `offset`: the offset in decimal, a space, the CRC32C of
/// those digits in 8 lowercase hex digits, a newline (log/FORMAT.md, *Start offset*).
pub(crate) fn encode_start(offset: u64) -> Vec<u8> {
    let digits = offset.to_string();
    format!("{digits} {:08x}\n", crc32c::crc32c(digits.as_bytes())).into_bytes()
}

/// The offset in a `start` file's content; `None` if it is not one [`encode_start`] writes (or
/// the checksum-less `N\n` of logs written before the checksum).
fn decode_start(bytes: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let (digits, crc) = match line.split_once(' ') {
        Some((digits, crc)) => (digits, Some(crc)),
        None => (line, None),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if crc.is_none() && space_flipped_to_zero(digits) {
        return None;
    }
    if let Some(crc) = crc
        && (crc.len() != 8
            || u32::from_str_radix(crc, 16).ok()? != crc32c::crc32c(digits.as_bytes())
            || crc != format!("{:08x}", crc32c::crc32c(digits.as_bytes())))
    {
        return None;
    }
    digits.parse().ok()
}

/// Whether `digits`, a line without a space, is a checksummed line whose space one flipped bit
/// (0x20 → 0x30) turned into a `0`, its checksum's hex digits all decimal: the offset, `0`, the
/// checksum of the offset. Read as an older log's offset, it would be another start offset.
fn space_flipped_to_zero(digits: &str) -> bool {
    let Some(split) = digits.len().checked_sub(9).filter(|&n| n > 0) else {
        return false;
    };
    let (offset, rest) = digits.split_at(split);
    rest.strip_prefix('0')
        .is_some_and(|crc| crc == format!("{:08x}", crc32c::crc32c(offset.as_bytes())))
}

impl Partition {
    /// The start offset after looking at what other processes deleted since.
    pub(crate) fn latest_start_offset(&mut self) -> Result<u64> {
        self.check_poisoned()?;
        self.refresh_start()?;
        Ok(self.start)
    }

    /// Forgets the first `n` segments (below the start offset), keeping the indexes of
    /// segments waiting for their seal pointed at the same segments.
    pub(super) fn drop_front(&mut self, n: usize) -> Vec<Segment> {
        self.unsealed.retain(|&i| i >= n);
        for i in &mut self.unsealed {
            *i -= n;
        }
        self.segments.drain(..n).collect()
    }

    /// Reads the start offset again (another process may have moved it) and forgets the
    /// segments wholly below it whose files are gone.
    pub(super) fn refresh_start(&mut self) -> Result<()> {
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
            .write_atomic(&path, &encode_start(offset))
            .at(&path)?;
        self.start = offset;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_file_with_its_space_flipped_to_a_zero_is_not_an_older_logs_offset() {
        // An offset whose checksum's hex digits are all decimal.
        let offset = (1u64..)
            .find(|n| {
                format!("{:08x}", crc32c::crc32c(n.to_string().as_bytes()))
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .expect("one");
        let mut bytes = encode_start(offset);
        assert_eq!(decode_start(&bytes), Some(offset));
        let space = bytes.iter().position(|&b| b == b' ').expect("a space");
        bytes[space] ^= 0x10;
        assert_eq!(bytes[space], b'0');
        assert_eq!(
            decode_start(&bytes),
            None,
            "{:?}",
            String::from_utf8_lossy(&bytes)
        );
        // The older form is still read.
        assert_eq!(decode_start(format!("{offset}\n").as_bytes()), Some(offset));
        assert_eq!(decode_start(b"1234567890\n"), Some(1_234_567_890));
    }
}
