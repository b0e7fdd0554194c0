//! A segmented store's writes and time reads: each key of a batch classified (a meta key, or
//! an entry in its segment), the batch planned against the observed time it leads to (writes
//! into expired segments ignored and counted), applied, and expired segments dropped whole;
//! and [`SegmentedStore::scan_time`], entries by key range and time.

use fjall::Keyspace;

use crate::state::segment_totals::{record_segment_drop, record_segment_writes};
use crate::state::{BytesStore, StoreError, StorePosition};

use super::SegmentedStore;
use super::key::*;
use super::segments::*;

impl SegmentedStore {
    pub(super) fn classify(&self, key: &[u8]) -> Result<Target, StoreError> {
        if is_meta(key) {
            return Ok(Target::Meta);
        }
        let parsed =
            parse_entry(self.kind, key).map_err(|m| m.into_error(&self.name, key.len()))?;
        Ok(Target::Segment {
            segment: self.segment_id(parsed.time),
            time: parsed.time,
        })
    }

    /// Classifies a batch: the observed time it leads to, and its writes without those into
    /// segments expired at that time. A malformed key fails the batch before anything is written.
    pub(super) fn plan<'k, 'v>(
        &self,
        batch: &mut dyn Iterator<Item = (&'k [u8], Option<&'v [u8]>)>,
    ) -> Result<Planned<'k, 'v>, StoreError> {
        let mut writes = Vec::with_capacity(batch.size_hint().0);
        let mut observed = self.observed;
        for (key, value) in batch {
            let target = self.classify(key)?;
            if let Target::Segment { time, .. } = target {
                observed = observed.max(time);
            }
            writes.push((target, key, value));
        }
        let bound = live_bound(observed, self.retention_ms, self.segment_interval_ms);
        let before = writes.len();
        writes.retain(|(target, _, _)| match target {
            Target::Meta => true,
            Target::Segment { segment, .. } => *segment >= bound,
        });
        // By segment, then key: inserting into a segment's memtable (a skip list) or tree in
        // key order finds each position next to the last. Stable, so a key written twice
        // still ends as its last write.
        let segment = |t: &Target| match t {
            Target::Meta => i64::MIN,
            Target::Segment { segment, .. } => *segment,
        };
        writes.sort_by(|a, b| segment(&a.0).cmp(&segment(&b.0)).then_with(|| a.1.cmp(b.1)));
        Ok(Planned {
            expired: (before - writes.len()) as u64,
            writes,
            observed,
        })
    }

    /// Applies a planned batch, then drops the segments its observed time expired.
    pub(super) fn apply(
        &mut self,
        planned: Planned<'_, '_>,
        position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        let raised = (planned.observed > self.observed).then_some(planned.observed);
        let written = match &mut self.backend {
            Backend::Memory(m) => {
                m.apply(&planned.writes);
                Ok(())
            }
            Backend::Disk(d) => d.commit(&planned.writes, raised, position),
        };
        written.map_err(|e| self.err(e))?;
        self.positioned |= position.is_some() && self.is_persistent();
        let segment_writes = planned
            .writes
            .iter()
            .filter(|(target, _, _)| matches!(target, Target::Segment { .. }))
            .count();
        record_segment_writes(segment_writes as u64, planned.expired);
        self.expired_writes += planned.expired;
        if let Some(observed) = raised {
            self.observed = observed;
            self.drop_expired()?;
        }
        Ok(())
    }

    /// Drops, whole, every segment below the live bound (timed for
    /// [`crate::segmented_store_totals`] when there is one).
    pub(super) fn drop_expired(&mut self) -> Result<(), StoreError> {
        let bound = self.live_bound();
        let first = match &self.backend {
            Backend::Memory(m) => m.segments.keys().next(),
            Backend::Disk(d) => d.segments.keys().next(),
        };
        if first.is_none_or(|&id| id >= bound) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let (segments, entries, deleted) = match &mut self.backend {
            Backend::Memory(m) => {
                let live = m.segments.split_off(&bound);
                let expired = std::mem::replace(&mut m.segments, live);
                let entries = expired.values().map(MemorySegment::len).sum::<usize>();
                let segments = expired.len();
                drop(expired);
                (segments, entries, Ok(()))
            }
            Backend::Disk(d) => {
                let live = d.segments.split_off(&bound);
                let expired = std::mem::replace(&mut d.segments, live);
                let entries = expired
                    .values()
                    .map(Keyspace::approximate_len)
                    .sum::<usize>();
                let segments = expired.len();
                // The list first: a crash before the keyspaces are gone leaves them unlisted,
                // and expired, so dropped again at the next open.
                let listed = encode_segments(d.segments.keys());
                let deleted = d.meta.insert(SEGMENTS_KEY, listed).and_then(|()| {
                    expired
                        .into_values()
                        .try_for_each(|keyspace| d.db.delete_keyspace_of(d.id, keyspace))
                });
                d.listed = true;
                (segments, entries, deleted)
            }
        };
        record_segment_drop(segments as u64, entries as u64, started.elapsed());
        deleted.map_err(|e| self.err(e))
    }

    /// Visits the entries with `from <= key < to` (encoded entry keys) whose entry time is in
    /// `[time_from, time_to]`: only the segments that can hold such times, in ascending segment
    /// order, in key order within one. Never visits meta keys. When `[from, to)` is one key's
    /// [`key_bounds`], only that key's entries in the time range are read. An empty `to` is no
    /// upper bound (every key from `from` on).
    pub(crate) fn scan_time(
        &self,
        from: &[u8],
        to: &[u8],
        time_from: i64,
        time_to: i64,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        let unbounded = to.is_empty();
        if time_from > time_to || (!unbounded && from >= to) {
            return Ok(());
        }
        let first = self.segment_id(time_from).max(self.live_bound());
        let last = self.segment_id(time_to);
        if first > last {
            return Ok(());
        }
        SCAN_BOUNDS.with(|bounds| {
            // A visit that reads the store again finds the buffers taken: it uses its own.
            let mut own = (Vec::new(), Vec::new());
            let mut taken = bounds.try_borrow_mut();
            let (nlo, nhi) = match &mut taken {
                Ok(b) => &mut **b,
                Err(_) => &mut own,
            };
            let narrowed = !unbounded && narrow_to_times(from, to, time_from, time_to, nlo, nhi);
            let (lo, hi) = if narrowed {
                (nlo.as_slice(), Some(nhi.as_slice()))
            } else {
                (from, (!unbounded).then_some(to))
            };
            let kind = self.kind;
            let mut corrupt = None;
            let mut visit = |k: &[u8], v: &[u8]| match parse_entry(kind, k) {
                Ok(parsed) => {
                    if (time_from..=time_to).contains(&parsed.time) {
                        f(k, v);
                    }
                    true
                }
                Err(m) => {
                    corrupt = Some(m.into_error(&self.name, k.len()));
                    false
                }
            };
            let visited = match &self.backend {
                Backend::Memory(m) => visit_segments(&m.segments, first, last, lo, hi, &mut visit),
                Backend::Disk(d) => visit_segments(&d.segments, first, last, lo, hi, &mut visit),
            };
            visited.map_err(|e| self.err(e))?;
            corrupt.map_or(Ok(()), Err)
        })
    }
}

/// If `[from, to)` is one record key's [`key_bounds`], writes into `lo` and `hi` the narrower
/// range of its entries with times in `[time_from, time_to]` (one key's entries sort by entry
/// time) and says so; else leaves them alone and returns `false`. The buffers are the caller's,
/// to reuse from read to read.
pub(in super::super) fn narrow_to_times(
    from: &[u8],
    to: &[u8],
    time_from: i64,
    time_to: i64,
    lo: &mut Vec<u8>,
    hi: &mut Vec<u8>,
) -> bool {
    let Some((last, head)) = to.split_last() else {
        return false;
    };
    let one_key = *last == 0x01
        && from.len() == to.len()
        && from.starts_with(head)
        && encoded_key_end(from).is_ok_and(|end| end == from.len());
    if !one_key {
        return false;
    }
    lo.clear();
    lo.extend_from_slice(from);
    lo.extend_from_slice(&flip(time_from));
    hi.clear();
    match time_to.checked_add(1) {
        Some(after) => {
            hi.extend_from_slice(from);
            hi.extend_from_slice(&flip(after));
        }
        None => hi.extend_from_slice(to),
    }
    true
}

std::thread_local! {
    /// [`narrow_to_times`]' bounds for [`SegmentedStore::scan_time`], reused per thread.
    static SCAN_BOUNDS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const {
        std::cell::RefCell::new((Vec::new(), Vec::new()))
    };
}
