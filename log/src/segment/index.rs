//! A segment's sparse offset index, in Kafka's format: a batch's relative *last* offset → its
//! byte position, one entry per `index_interval_bytes` of batches, ended by a *seal* once the
//! segment was rolled (where it ends, so a later segment is known to exist). Parsing an index
//! file, keeping the in-memory index as batches are appended or scanned, writing and sealing
//! the file.

use riffle_record::HEADER_LEN;

use super::{Expect, Segment};
use crate::error::{IoContext, Result};

/// Size of one index entry: `u32` relative offset, `u32` position, both big-endian.
pub(crate) const INDEX_ENTRY_LEN: usize = 8;
/// The entry that announces a seal: no batch entry can be `(0, 0)` after the first entry
/// (entries strictly increase), and Kafka's `DumpLogSegments` stops reading an index at an
/// entry naming the base offset, as it does at the zeroed tail of a preallocated index.
const SEAL_MARKER: (u32, u32) = (0, 0);

/// Where a sealed segment ended when it was rolled, as its index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seal {
    /// The offset after its last record (the next segment's base offset).
    pub(crate) end_offset: u64,
    /// Its size in bytes.
    pub(crate) size: u64,
}

/// An index file as read: its batch entries, its seal, and whether it is consistent with a
/// data file of `size` bytes (entries increasing, every position inside the data).
#[derive(Debug)]
pub(crate) struct IndexFile {
    pub(crate) entries: Vec<(u32, u32)>,
    pub(crate) seal: Option<Seal>,
    pub(crate) consistent: bool,
}

/// Parses an index file of the segment at `base` whose data file has `size` bytes.
pub(crate) fn parse_index(raw: &[u8], base: u64, size: u64) -> IndexFile {
    let mut pairs: Vec<(u32, u32)> = raw
        .chunks_exact(INDEX_ENTRY_LEN)
        .map(|e| {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            (rel, pos)
        })
        .collect();
    let mut consistent = raw.len().is_multiple_of(INDEX_ENTRY_LEN);
    let mut seal = None;
    if let [.., marker, (rel, pos)] = pairs[..]
        && marker == SEAL_MARKER
        && (rel, pos) != SEAL_MARKER
    {
        seal = Some(Seal {
            end_offset: base + u64::from(rel),
            size: u64::from(pos),
        });
        pairs.truncate(pairs.len() - 2);
    }
    let mut entries = Vec::with_capacity(pairs.len());
    for (rel, pos) in pairs {
        let increasing = entries.last().is_none_or(|&(r, p)| rel > r && pos > p);
        if !increasing || u64::from(pos) >= size {
            consistent = false;
            break;
        }
        entries.push((rel, pos));
    }
    IndexFile {
        entries,
        seal,
        consistent,
    }
}

impl Segment {
    /// After compaction swapped this segment in: its index is `entries` (built as the data
    /// was written) and its seal says it ends at `end_offset`; the index file is rewritten so,
    /// and fsynced. `max_timestamp` is remembered for retention.
    pub(crate) fn install_index(
        &mut self,
        entries: Vec<(u32, u32)>,
        end_offset: u64,
        max_timestamp: i64,
    ) -> Result<()> {
        self.index = entries;
        self.bytes_since_index = 0;
        self.max_timestamp = Some(max_timestamp);
        self.index_file.truncate(0).at(&self.index_path)?;
        let raw = self.index_bytes();
        self.index_file.append(&raw).at(&self.index_path)?;
        self.seal(end_offset)
    }

    pub(super) fn read_index_file(&mut self) -> Result<IndexFile> {
        let mut raw = vec![0u8; self.index_file.len() as usize];
        self.index_file
            .read_exact_at(0, &mut raw)
            .at(&self.index_path)?;
        Ok(parse_index(&raw, self.base, self.size()))
    }

    /// The seal in the index file, if the segment was rolled. In the active segment it means
    /// the segment after it is missing (or is being created by another process right now).
    pub(crate) fn read_seal(&mut self) -> Result<Option<Seal>> {
        self.index_file.refresh_len().at(&self.index_path)?;
        Ok(self.read_index_file()?.seal)
    }

    /// Where a walk from index entry `entry` starts, and what it must find there (no entry:
    /// the segment's start).
    pub(super) fn entry_start(&self, entry: Option<(u32, u32)>) -> (u64, Expect) {
        entry.map_or((0, Expect::Base(self.base)), |(r, p)| {
            (u64::from(p), Expect::Last(self.base + u64::from(r)))
        })
    }

    /// The in-memory index as the index file would hold it.
    fn index_bytes(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(self.index.len() * INDEX_ENTRY_LEN);
        for &(rel, p) in &self.index {
            raw.extend_from_slice(&rel.to_be_bytes());
            raw.extend_from_slice(&p.to_be_bytes());
        }
        raw
    }

    /// Whether the index file holds exactly the in-memory index.
    pub(crate) fn index_file_matches(&mut self) -> Result<bool> {
        let raw = self.index_bytes();
        self.index_file.refresh_len().at(&self.index_path)?;
        let mut old = vec![0u8; self.index_file.len() as usize];
        self.index_file
            .read_exact_at(0, &mut old)
            .at(&self.index_path)?;
        Ok(old == raw)
    }

    /// Rewrites the index file from the in-memory index if they differ: a clean open writes
    /// (and fsyncs) nothing.
    pub(crate) fn write_index(&mut self) -> Result<()> {
        let raw = self.index_bytes();
        if !self.index_file_matches()? {
            self.index_file.truncate(0).at(&self.index_path)?;
            self.index_file.append(&raw).at(&self.index_path)?;
            self.index_file.sync().at(&self.index_path)?;
        }
        Ok(())
    }

    /// Records in the index that the segment ends at `end_offset`, with its current size, and
    /// fsyncs the index: from now on a missing or short successor is detected. Called after
    /// the next segment's directory entry is durable (a crash in between must not leave a
    /// seal without its successor).
    pub(crate) fn seal(&mut self, end_offset: u64) -> Result<()> {
        let seal = Seal {
            end_offset,
            size: self.size(),
        };
        // An index with no entry gets one for its first batch first: Kafka's dump tool stops
        // at the seal's marker only after the first entry (it takes a first `(0, 0)` for an
        // entry, and then the seal's entry for one too, which points at the end of the file).
        if self.index_file.refresh_len().at(&self.index_path)? == 0
            && self.size() >= HEADER_LEN as u64
        {
            let first = self.read_header(0)?;
            if let Ok(rel) = u32::try_from(first.last_offset() - self.base) {
                let mut entry = [0u8; INDEX_ENTRY_LEN];
                entry[..4].copy_from_slice(&rel.to_be_bytes());
                self.index_file.append(&entry).at(&self.index_path)?;
                self.index = vec![(rel, 0)];
            }
        }
        let mut raw = [0u8; 2 * INDEX_ENTRY_LEN];
        let (rel, pos) = seal_entry(self.base, seal);
        raw[..4].copy_from_slice(&SEAL_MARKER.0.to_be_bytes());
        raw[4..8].copy_from_slice(&SEAL_MARKER.1.to_be_bytes());
        raw[8..12].copy_from_slice(&rel.to_be_bytes());
        raw[12..].copy_from_slice(&pos.to_be_bytes());
        self.index_file.append(&raw).at(&self.index_path)?;
        self.index_file.sync().at(&self.index_path)
    }

    /// Re-reads the index file's length: another process that appended batches may have
    /// appended index entries too, and this handle's next entry goes after them.
    pub(crate) fn refresh_index_size(&mut self) -> Result<u64> {
        self.index_file.refresh_len().at(&self.index_path)
    }

    /// Index bookkeeping for a batch at `pos` ending at `last_offset`; returns the entry to
    /// persist, if one is due. As in Kafka, an entry names the batch's last offset.
    pub(super) fn note_batch(
        &mut self,
        pos: u64,
        last_offset: u64,
        len: u64,
        interval: u64,
    ) -> Option<(u32, u32)> {
        let mut entry = None;
        if self.bytes_since_index >= interval {
            let rel = u32::try_from(last_offset - self.base).ok();
            let p = u32::try_from(pos).ok();
            if let (Some(rel), Some(p)) = (rel, p) {
                self.index.push((rel, p));
                entry = Some((rel, p));
            }
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        entry
    }

    /// Position of the last indexed batch ending at or before `offset` (the segment's start if
    /// none), and what must be found there: scanning from there finds the batch holding
    /// `offset`.
    pub(crate) fn position_for(&self, offset: u64) -> (u64, Expect) {
        let rel = u32::try_from(offset.saturating_sub(self.base)).unwrap_or(u32::MAX);
        let i = self.index.partition_point(|&(r, _)| r <= rel);
        self.entry_start(i.checked_sub(1).and_then(|i| self.index.get(i)).copied())
    }
}

/// A seal as an index entry: relative end offset, size. Both fit: a segment is rolled before
/// its relative offsets pass `u32::MAX`, and it is at most 2 GiB plus one batch.
fn seal_entry(base: u64, seal: Seal) -> (u32, u32) {
    (
        u32::try_from(seal.end_offset - base).unwrap_or(u32::MAX - 1),
        u32::try_from(seal.size).unwrap_or(u32::MAX - 1),
    )
}
