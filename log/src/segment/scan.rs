//! Reading a segment's bytes and classifying them: what a stored batch must be
//! ([`parse_stored`], [`parse_appended`]), the unbroken run of intact batches ([`Scan`]), the
//! [`Damage`] that ends it and the intact batches after it; and on a [`Segment`], scanning,
//! cutting a torn tail and checking a sealed segment.

use std::path::{Path, PathBuf};

use riffle_record::{BatchHeader, HEADER_LEN, MAGIC, MAGIC_AT, batch_crc};

use super::{Expect, Seal, Segment, segment_file_name};
use crate::error::{Error, IoContext, Result};
use crate::storage::StorageFile;

/// What reading a segment's batches found: the unbroken run of intact batches from where the
/// read started, and the damage that ends it before the end of the file, if any.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Byte position after the last whole, valid batch of the run.
    pub(crate) end_pos: u64,
    /// The offset after that batch (where the read started if the run is empty).
    pub(crate) end_offset: u64,
    /// Records in the run.
    pub(crate) records: u64,
    /// Why the bytes after `end_pos` are not a batch; `None` if the file ends there.
    pub(crate) problem: Option<String>,
    /// With a problem: where, and which intact batches follow it (then it is corruption, not
    /// a torn tail or a batch still being written).
    pub(crate) damage: Option<Damage>,
}

impl Scan {
    /// Damage followed by intact data: an error whoever reads it, with or without the lock.
    pub(crate) fn corruption(&self) -> Option<&Damage> {
        self.damage.as_ref().filter(|d| !d.is_torn_tail())
    }
}

/// Where the intact run of a segment stops although the file goes on.
#[derive(Debug, Clone)]
pub(crate) struct Damage {
    /// The segment file.
    pub(crate) path: PathBuf,
    /// Byte position where the run stops.
    pub(crate) position: u64,
    /// The offset that was expected there.
    pub(crate) offset: u64,
    /// Why the bytes at `position` are not the expected batch.
    pub(crate) reason: String,
    /// The intact batches found after `position` (resynchronising past damaged bytes).
    pub(crate) intact_after: Vec<IntactBatch>,
}

/// A batch whose header and checksum are valid, found after damage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntactBatch {
    pub(crate) position: u64,
    pub(crate) base_offset: u64,
    pub(crate) next_offset: u64,
    pub(crate) records: u64,
}

impl Damage {
    /// A torn tail: nothing intact follows the damage, so it is what a write cut short by a
    /// crash leaves, and truncating it loses nothing that was ever complete.
    pub(crate) fn is_torn_tail(&self) -> bool {
        self.intact_after.is_empty()
    }

    /// The highest offset after the intact batches past the damage (`offset` if none).
    pub(crate) fn known_end(&self) -> u64 {
        self.intact_after
            .iter()
            .map(|b| b.next_offset)
            .fold(self.offset, u64::max)
    }

    /// Records in the intact batches past the damage.
    pub(crate) fn records_after(&self) -> u64 {
        self.intact_after.iter().map(|b| b.records).sum()
    }

    /// The error for damage that is not a torn tail (or that is in a sealed segment).
    pub(crate) fn to_error(&self) -> Error {
        let follows = match (self.intact_after.first(), self.intact_after.last()) {
            (Some(first), Some(last)) => format!(
                "; intact data follows it: {} batches from byte {} (offsets {}..{}, {} records), so this is not a torn write: offsets {}..{} are damaged and {}..{} cannot be read past them",
                self.intact_after.len(),
                first.position,
                first.base_offset,
                last.next_offset,
                self.records_after(),
                self.offset,
                first.base_offset.max(self.offset),
                first.base_offset.max(self.offset),
                self.known_end(),
            ),
            _ => format!("; offsets from {} on cannot be read", self.offset),
        };
        Error::Corrupt {
            path: self.path.clone(),
            position: self.position,
            reason: format!(
                "{} (offset {} expected there){follows}; `riffle log repair` cuts the damaged data explicitly",
                self.reason, self.offset
            ),
        }
    }
}

/// Parses the header of a batch stored in a segment: a Kafka v2 header, with what the embedded
/// log always writes outside the CRC's coverage checked too: leader epoch 0 (the base offset is
/// checked against the offsets around it). A batch taken over from Kafka gets epoch 0 and its
/// base offset when it is written, without re-encoding. Appended batches hold at least one
/// record at dense offsets; the cleaner's batches (compaction, `partition/compact/`) may hold fewer
/// records than offsets, or none, as Kafka's compacted batches do: batches still follow each
/// other without gaps, each covering `base_offset..=last_offset()`.
pub(crate) fn parse_stored(b: &[u8]) -> Result<BatchHeader, String> {
    let h = BatchHeader::parse(b)?;
    if h.leader_epoch != 0 {
        return Err(format!(
            "leader epoch {} (the embedded log writes 0)",
            h.leader_epoch
        ));
    }
    Ok(h)
}

/// [`parse_stored`] for a batch as appended (the transaction journal's): at least one record,
/// at dense offsets.
pub(crate) fn parse_appended(b: &[u8]) -> Result<BatchHeader, String> {
    let h = parse_stored(b)?;
    if h.record_count == 0 {
        return Err("batch with zero records".to_owned());
    }
    if u64::from(h.record_count) != u64::from(h.last_offset_delta) + 1 {
        return Err(format!(
            "{} records over a last offset delta of {} (appended batches are dense)",
            h.record_count, h.last_offset_delta
        ));
    }
    Ok(h)
}

/// Whether a whole, checksum-valid batch starts at `at` of `bytes`; its header if so.
fn intact_batch_at(bytes: &[u8], at: usize) -> Option<BatchHeader> {
    let rest = bytes.get(at..)?;
    if rest.get(MAGIC_AT) != Some(&MAGIC) {
        return None;
    }
    let h = parse_stored(rest).ok()?;
    let batch = rest.get(..usize::try_from(h.total_len()).ok()?)?;
    (batch_crc(batch) == h.crc).then_some(h)
}

/// The intact batches in `tail` (the file's bytes from byte `start` on), found by trying every
/// position from `first` on and, after each batch found, continuing right after it.
pub(crate) fn find_intact(tail: &[u8], start: u64, first: usize) -> Vec<IntactBatch> {
    let mut found = Vec::new();
    let mut at = first;
    while at + HEADER_LEN <= tail.len() {
        match intact_batch_at(tail, at) {
            Some(h) => {
                found.push(IntactBatch {
                    position: start + at as u64,
                    base_offset: h.base_offset,
                    next_offset: h.next_offset(),
                    records: u64::from(h.record_count),
                });
                at += h.total_len() as usize;
            }
            None => at += 1,
        }
    }
    found
}

/// Reads the batches of a segment file from byte `pos`, where the batch at offset `expected`
/// starts (0 and the base offset: the whole file), checksums included, calling `on_batch` with
/// the position and header of each batch of the intact run; the run and the damage after it.
/// Reads only.
pub(crate) fn scan_file_from(
    file: &mut dyn StorageFile,
    path: &Path,
    mut pos: u64,
    mut expected: u64,
    mut on_batch: impl FnMut(u64, &BatchHeader),
) -> Result<Scan> {
    let len = file.len();
    let mut records = 0u64;
    let mut header = [0u8; HEADER_LEN];
    let mut batch = Vec::new();
    let problem = loop {
        let left = len.saturating_sub(pos);
        if left == 0 {
            break None;
        }
        if left < HEADER_LEN as u64 {
            let reason = format!("{left} trailing bytes, too few for a batch header");
            break Some(reason);
        }
        file.read_exact_at(pos, &mut header).at(path)?;
        let h = match parse_stored(&header) {
            Ok(h) => h,
            Err(reason) => break Some(reason),
        };
        if h.total_len() > left {
            let reason = format!("batch of {} bytes cut off after {left}", h.total_len());
            break Some(reason);
        }
        batch.resize(h.total_len() as usize, 0);
        file.read_exact_at(pos, &mut batch).at(path)?;
        if batch_crc(&batch) != h.crc {
            let reason = format!(
                "checksum mismatch in the batch of {} bytes there",
                h.total_len()
            );
            break Some(reason);
        }
        if h.base_offset != expected {
            let reason = format!(
                "the intact batch there holds offsets {}..{}",
                h.base_offset,
                h.next_offset()
            );
            break Some(reason);
        }
        on_batch(pos, &h);
        pos += h.total_len();
        expected = h.next_offset();
        records += u64::from(h.record_count);
    };
    let damage = match &problem {
        None => None,
        Some(reason) => {
            let mut tail = vec![0u8; (len - pos) as usize];
            file.read_exact_at(pos, &mut tail).at(path)?;
            // An intact batch at the damaged position itself (one at the wrong offset) counts.
            let intact_after = find_intact(&tail, pos, 0);
            Some(Damage {
                path: path.to_path_buf(),
                position: pos,
                offset: expected,
                reason: reason.clone(),
                intact_after,
            })
        }
    };
    Ok(Scan {
        end_pos: pos,
        end_offset: expected,
        records,
        problem,
        damage,
    })
}

impl Segment {
    fn corrupt(&self, position: u64, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            position,
            reason,
        }
    }

    /// Validates every batch from the start, rebuilding the in-memory index of the intact run;
    /// modifies nothing (a read-only open, or a writer that does not hold the partition's lock,
    /// calls this). What the damage is, if any, is the caller's call: see [`Scan`].
    pub(crate) fn scan(&mut self, index_interval: u64) -> Result<Scan> {
        self.index.clear();
        self.bytes_since_index = 0;
        self.scan_from(0, self.base, index_interval)
    }

    /// [`scan`](Self::scan) continued from `pos`, where the batch at offset `expected` starts
    /// (the end of an earlier scan): how a partition catches up with batches another process
    /// appended. Stops at the first batch that is not whole and valid.
    pub(crate) fn scan_from(
        &mut self,
        pos: u64,
        expected: u64,
        index_interval: u64,
    ) -> Result<Scan> {
        let mut noted = Vec::new();
        let scan = scan_file_from(&mut *self.file, &self.path, pos, expected, |pos, h| {
            noted.push((pos, h.last_offset(), h.total_len()));
        })?;
        for (pos, last_offset, len) in noted {
            self.note_batch(pos, last_offset, len, index_interval);
        }
        Ok(scan)
    }

    /// The error for an active segment whose index holds a seal at `seal` while no segment
    /// starts there.
    pub(crate) fn missing_successor(&self, seal: Seal) -> Error {
        self.corrupt(
            seal.size.min(self.size()),
            format!(
                "this segment was rolled at offset {} (its index holds the seal), but no \
                 segment starts there: offsets from {} on are missing (a deleted last \
                 segment?); `riffle log repair` makes this segment the last one explicitly",
                seal.end_offset, seal.end_offset
            ),
        )
    }

    /// Cuts a torn tail — what follows the scan's end when nothing intact follows it — with a
    /// `warn!` naming the file, byte position and offset, and makes the index file match the
    /// in-memory index. Only a writer holding the partition's lock calls this: no other
    /// process can be writing that tail. Damage followed by intact data is never cut: it is
    /// [`Error::Corrupt`] (only `riffle log repair` cuts it, when asked).
    pub(crate) fn cut_tail(&mut self, scan: &Scan) -> Result<()> {
        if let Some(damage) = scan.corruption() {
            return Err(damage.to_error());
        }
        let (pos, offset) = (scan.end_pos, scan.end_offset);
        let reason = scan.problem.as_deref().unwrap_or("trailing bytes");
        let bytes = self.size().saturating_sub(pos);
        tracing::warn!(
            file = %self.path.display(),
            position = pos,
            offset,
            %reason,
            "truncating the torn tail of log segment {} at byte {pos} (offset {offset}; {bytes} \
             bytes, no intact batch among them): {reason}",
            self.path.display(),
        );
        self.file.truncate(pos).at(&self.path)?;
        self.file.sync().at(&self.path)?;
        self.write_index()
    }

    /// Checks a sealed segment against its seal and against `next_base`, the base offset of
    /// the segment after it, reading only the batch headers after its last index entry;
    /// returns the offset after its last batch. That may lie past `next_base` for a segment
    /// compaction merged with the ones after it (the caller checks the claim against the
    /// partition's `cleaning` file). Any other mismatch is an [`Error::Corrupt`]: a
    /// sealed segment never has a torn tail (it was fsynced when rolled), so a short one lost
    /// data, and a gap before `next_base` means a segment is missing.
    pub(crate) fn check_sealed(&mut self, next_base: u64, index_interval: u64) -> Result<u64> {
        let index = self.read_index_file()?;
        let size = self.size();
        let walked = match index.consistent {
            true => self.walk_from(&index.entries)?,
            false => None,
        };
        let fits = |end: u64| {
            end == next_base
                && index
                    .seal
                    .is_none_or(|s| s.size == size && s.end_offset == end)
        };
        if let Some(end) = walked.filter(|&end| fits(end)) {
            self.index = index.entries;
            self.bytes_since_index = 0;
            return Ok(end);
        }
        // The cheap check failed: read the whole segment, to tell a stale index (rebuilt) from
        // damaged or missing data (an error).
        if !index.consistent {
            tracing::warn!(file = %self.index_path.display(), "rebuilding an inconsistent offset index (in memory)");
        }
        let scan = self.scan(index_interval)?;
        if let Some(mut damage) = scan.damage {
            // Not a torn tail, whatever follows: a sealed segment was complete when rolled.
            if damage.intact_after.is_empty() {
                damage.reason.push_str(&format!(
                    " in a sealed segment, which the next segment continues at offset {next_base}"
                ));
            }
            return Err(damage.to_error());
        }
        let end = scan.end_offset;
        // A segment the cleaner rewrote (compaction) is smaller than its seal says, and one it
        // merged with the segments after it ends later, until its index is written again: an
        // intact segment reaching at least as far as its seal lost nothing. Nor does one that
        // reaches exactly where the next segment starts: every offset is in a segment, and a
        // seal past that (it is not checksummed) is damage to the index, rebuilt below.
        if let Some(seal) = index.seal
            && end < seal.end_offset
            && end != next_base
        {
            return Err(self.corrupt(
                size.min(seal.size),
                format!(
                    "the segment was sealed with {} bytes ending at offset {}, but has {size} \
                     bytes ending at offset {end}: offsets {}..{} are lost",
                    seal.size,
                    seal.end_offset,
                    end.min(seal.end_offset),
                    seal.end_offset.max(end)
                ),
            ));
        }
        if end < next_base {
            let next = segment_file_name(next_base);
            let reason = format!(
                "the segment ends at offset {end}, but the next segment, {next}, starts at \
                 offset {next_base}: offsets {end}..{next_base} are in no segment (a missing \
                 segment file?)"
            );
            return Err(self.corrupt(size, reason));
        }
        // Rebuilt in memory only: a read-only open writes nothing (a clean open neither).
        if index.consistent {
            tracing::warn!(file = %self.index_path.display(), "rebuilding an offset index that does not match its segment (in memory)");
        }
        Ok(end)
    }

    /// Walks the batch headers from the last of `entries` to the end of the file; the offset
    /// after the last batch, or `None` if a header is not the expected one.
    fn walk_from(&mut self, entries: &[(u32, u32)]) -> Result<Option<u64>> {
        let size = self.size();
        let (mut pos, mut expected) = self.entry_start(entries.last().copied());
        while pos < size {
            let h = match self.read_header(pos) {
                Ok(h) => h,
                Err(Error::Corrupt { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            if !expected.matches(&h) {
                return Ok(None);
            }
            pos += h.total_len();
            expected = Expect::Base(h.next_offset());
        }
        Ok(Some(match expected {
            Expect::Base(end) => end,
            Expect::Last(last) => last + 1,
        }))
    }
}
