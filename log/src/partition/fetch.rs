//! Reading a partition: the whole, checksum-verified batches from an offset on, the active
//! segment only up to its last whole batch.
//!
//! It takes no OS lock (readers never block writers) and never skips damage: a batch that is
//! not the one expected is an [`Error::Corrupt`] (only a stale index entry, derived data, is
//! passed over, by reading its segment from the start).

use bytes::Bytes;

use riffle_record::{BatchHeader, HEADER_LEN, batch_crc};

use super::Partition;
use crate::error::{Error, Result};
use crate::segment::{Expect, Segment};

/// A whole stored batch, checksum verified, as read from a segment.
#[derive(Debug)]
pub(crate) struct StoredBatch {
    pub(crate) header: BatchHeader,
    pub(crate) bytes: Bytes,
}

impl Partition {
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
