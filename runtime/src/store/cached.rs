//! The write cache in front of every store (Kafka Streams' record cache,
//! `statestore_cache_max_bytes`).
//!
//! Between commits, writes go to the cache only: one entry per key, the latest value wins. At a
//! commit the cache's entries are forwarded downstream and written to the changelog (phase 1);
//! once the commit is durable they are written to the store in one batch and the cache is
//! cleared (phase 2). A full cache asks for an early commit rather than evicting to the store,
//! so the store never holds uncommitted writes.

use std::collections::{BTreeMap, HashMap};

use super::{KeyValueStore, StoreError};
use crate::record::Headers;

struct Entry {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    timestamp: i64,
    /// The headers of the record that wrote it (what a cached aggregate forwards with).
    headers: Headers,
    /// When it was last written (the store's write counter).
    seq: u64,
}

/// A store behind its cache.
pub(crate) struct CachedStore {
    pub(crate) inner: Box<dyn KeyValueStore>,
    entries: Vec<Entry>,
    /// Key → entry. foldhash (hashbrown's own hasher, randomly seeded per process) rather than
    /// SipHash: it was a twentieth of a windowed count's CPU time.
    index: HashMap<Vec<u8>, usize, foldhash::fast::RandomState>,
    bytes: usize,
    /// Caching disabled (Kafka's `withCachingDisabled`): every write is kept, so each reaches
    /// the changelog, not only a key's latest.
    every_write: bool,
    /// The store keeps each value behind its 8-byte big-endian timestamp (Kafka's timestamped
    /// stores, what aggregations need for their results' timestamps); the cache, the changelog
    /// and everything above see plain values.
    timestamped: bool,
    /// Reused at commit to put the timestamps in front of the values.
    arena: Vec<u8>,
    spans: Vec<Option<(usize, usize)>>,
    /// The cached keys in order, each with its entry (as `index` has it), for stores read by
    /// range between commits (window and session stores that sliding and session aggregations
    /// and processors query).
    ordered: Option<BTreeMap<Vec<u8>, usize>>,
    /// The last sequence number a window store keeping duplicates gave a put.
    seq: u32,
    /// Counts writes, to order entries by their last write.
    writes: u64,
    /// An entry other than the last was rewritten: entry order is no longer write order.
    reordered: bool,
}

/// The timestamp of a value read from a store that keeps none.
pub(crate) const NO_TIMESTAMP: i64 = i64::MIN;

/// Bytes a cache entry is charged beyond its key and value.
const ENTRY_OVERHEAD: usize = 64;

impl CachedStore {
    pub(crate) fn new(inner: Box<dyn KeyValueStore>) -> Self {
        CachedStore {
            inner,
            entries: Vec::new(),
            index: HashMap::default(),
            bytes: 0,
            every_write: false,
            timestamped: false,
            arena: Vec::new(),
            spans: Vec::new(),
            ordered: None,
            seq: 0,
            writes: 0,
            reordered: false,
        }
    }

    /// Decodes an entry key of this window or session store.
    pub(crate) fn decode_entry(&self, bytes: &[u8]) -> Result<super::DecodedEntry, StoreError> {
        match self.inner.as_segmented() {
            Some(segmented) => segmented.decode(bytes),
            None => Err(self.corrupt(
                "an entry key read from a store that is not a window or session store".into(),
            )),
        }
    }

    /// As [`decode_entry`](Self::decode_entry), into `out`, reusing its key's buffer.
    pub(crate) fn decode_entry_into(
        &self,
        bytes: &[u8],
        out: &mut super::DecodedEntry,
    ) -> Result<(), StoreError> {
        match self.inner.as_segmented() {
            Some(segmented) => segmented.decode_into(bytes, out),
            None => Err(self.corrupt(
                "an entry key read from a store that is not a window or session store".into(),
            )),
        }
    }

    /// The next sequence number for a put of a window store keeping duplicates.
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sets how writes are kept: `timestamped` values, `caching` (one entry per key, else every
    /// write), an `ordered` index of cached keys for range reads.
    pub(crate) fn configured(
        inner: Box<dyn KeyValueStore>,
        timestamped: bool,
        caching: bool,
        ordered: bool,
    ) -> Self {
        CachedStore {
            timestamped,
            every_write: !caching,
            ordered: ordered.then(BTreeMap::new),
            ..CachedStore::new(inner)
        }
    }

    /// A store that keeps each value's timestamp (a DSL aggregation's).
    #[cfg(test)]
    pub(crate) fn timestamped(inner: Box<dyn KeyValueStore>) -> Self {
        CachedStore {
            timestamped: true,
            ..CachedStore::new(inner)
        }
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt {
            store: self.inner.name().to_owned(),
            reason,
        }
    }

    /// Splits a timestamped store's value into its timestamp and the value (left in `value`).
    fn strip_timestamp(&self, key: &[u8], value: &mut Vec<u8>) -> Result<i64, StoreError> {
        let Some(ts) = value.get(..8) else {
            return Err(self.corrupt(format!(
                "the value of a key of {} bytes has {} bytes, fewer than its 8-byte timestamp",
                key.len(),
                value.len()
            )));
        };
        let mut b = [0u8; 8];
        b.copy_from_slice(ts);
        value.drain(..8);
        Ok(i64::from_be_bytes(b))
    }

    /// The value of `key` as processing sees it: the cache, else the store.
    pub(crate) fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        Ok(self.get_with_timestamp(key, out)?.is_some())
    }

    /// The value of `key` (into `out`) and its timestamp: the cached write's, the store's for a
    /// timestamped store, else [`NO_TIMESTAMP`]. `None` if there is no value.
    pub(crate) fn get_with_timestamp(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<i64>, StoreError> {
        match self.index.get(key) {
            Some(&i) => {
                out.clear();
                let entry = &self.entries[i];
                match &entry.value {
                    Some(v) => {
                        out.extend_from_slice(v);
                        Ok(Some(entry.timestamp))
                    }
                    None => Ok(None),
                }
            }
            None => {
                if !self.inner.get_into(key, out)? {
                    return Ok(None);
                }
                if self.timestamped {
                    self.strip_timestamp(key, out).map(Some)
                } else {
                    Ok(Some(NO_TIMESTAMP))
                }
            }
        }
    }

    /// Writes `key` (`None` deletes) into the cache.
    pub(crate) fn put(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &Headers,
    ) {
        self.writes += 1;
        let seq = self.writes;
        match self.index.get(key).filter(|_| !self.every_write) {
            Some(&i) => {
                self.reordered |= i + 1 != self.entries.len();
                let entry = &mut self.entries[i];
                entry.seq = seq;
                self.bytes -= entry.value.as_ref().map_or(0, Vec::len);
                match (&mut entry.value, value) {
                    (Some(existing), Some(v)) => {
                        existing.clear();
                        existing.extend_from_slice(v);
                    }
                    (slot, v) => *slot = v.map(<[u8]>::to_vec),
                }
                self.bytes += value.map_or(0, <[u8]>::len);
                entry.timestamp = timestamp;
                if entry.headers != *headers {
                    entry.headers = headers.clone();
                }
            }
            None => {
                self.bytes += key.len() + value.map_or(0, <[u8]>::len) + ENTRY_OVERHEAD;
                // With caching the lookup above missed: the key is new, no need to look again.
                let at = self.entries.len();
                match self.every_write.then(|| self.index.get_mut(key)).flatten() {
                    Some(i) => {
                        *i = at;
                        if let Some(i) = self.ordered.as_mut().and_then(|o| o.get_mut(key)) {
                            *i = at;
                        }
                    }
                    None => {
                        self.index.insert(key.to_vec(), at);
                        if let Some(ordered) = &mut self.ordered {
                            ordered.insert(key.to_vec(), at);
                        }
                    }
                }
                self.entries.push(Entry {
                    key: key.to_vec(),
                    value: value.map(<[u8]>::to_vec),
                    timestamp,
                    headers: headers.clone(),
                    seq,
                });
            }
        }
    }

    /// Bytes held by the cache.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.bytes
    }

    /// Puts the entries written since the last commit in the order of their last write (Kafka's
    /// record cache flushes a key when it was last written, not first): what commits forward
    /// then follows the records, so a later update's timestamp never overtakes an earlier one's.
    pub(crate) fn order_by_last_write(&mut self) {
        if !self.reordered {
            return;
        }
        self.entries.sort_unstable_by_key(|e| e.seq);
        for (i, e) in self.entries.iter().enumerate() {
            if let Some(slot) = self.index.get_mut(e.key.as_slice()) {
                *slot = i;
            }
            if let Some(slot) = self
                .ordered
                .as_mut()
                .and_then(|o| o.get_mut(e.key.as_slice()))
            {
                *slot = i;
            }
        }
        self.reordered = false;
    }

    /// Entries written since the last commit.
    pub(crate) fn dirty_len(&self) -> usize {
        self.entries.len()
    }

    /// The `i`-th entry written since the last commit: key, value (`None`: deleted), timestamp.
    pub(crate) fn dirty(&self, i: usize) -> (&[u8], Option<&[u8]>, i64) {
        let e = &self.entries[i];
        (&e.key, e.value.as_deref(), e.timestamp)
    }

    /// The headers of the `i`-th entry's write.
    pub(crate) fn dirty_headers(&self, i: usize) -> &Headers {
        &self.entries[i].headers
    }

    /// The entries with `from <= key <= to` (either bound absent: unbounded) as processing
    /// sees them: the store overlaid with the cache, in key order.
    #[allow(clippy::type_complexity)]
    pub(crate) fn scan(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        let within = |k: &[u8]| from.is_none_or(|f| k >= f) && to.is_none_or(|t| k <= t);
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let skip = if self.timestamped { 8 } else { 0 };
        let mut short = None;
        let mut visit = |k: &[u8], v: &[u8]| {
            if within(k) {
                match v.get(skip..) {
                    Some(v) => {
                        merged.insert(k.to_vec(), Some(v.to_vec()));
                    }
                    None => short = Some(v.len()),
                }
            }
        };
        match to {
            Some(t) => {
                // The smallest key after `to` is `to` followed by a zero byte.
                let mut end = t.to_vec();
                end.push(0);
                self.inner
                    .range(from.unwrap_or_default(), &end, &mut visit)?
            }
            None => self.inner.for_each(&mut visit)?,
        }
        if let Some(len) = short {
            return Err(self.corrupt(format!(
                "a value has {len} bytes, fewer than its 8-byte timestamp"
            )));
        }
        for (key, &i) in &self.index {
            if within(key) {
                merged.insert(key.clone(), self.entries[i].value.clone());
            }
        }
        Ok(merged
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// The entries of a window or session store with `from <= key < to` (an empty `to`: no
    /// upper bound) and entry time (a
    /// window's start, a session's end) in `[time_from, time_to]`, as processing sees them (the
    /// store overlaid with the cache), in key order: `(entry key, value, timestamp)`. The
    /// timestamp is the value's for a timestamped store, else [`NO_TIMESTAMP`].
    #[allow(clippy::type_complexity)]
    pub(crate) fn scan_window(
        &self,
        from: &[u8],
        to: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>, i64)>, StoreError> {
        let Some(segmented) = self.inner.as_segmented() else {
            return Err(self.corrupt(
                "a time-range read of a store that is not a window or session store".into(),
            ));
        };
        let mut merged: BTreeMap<Vec<u8>, Option<(Vec<u8>, i64)>> = BTreeMap::new();
        let mut bad = None;
        let timestamped = self.timestamped;
        segmented.scan_time(from, to, time_from, time_to, &mut |k, v| {
            if timestamped {
                match v.get(..8) {
                    Some(ts) => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(ts);
                        merged.insert(k.to_vec(), Some((v[8..].to_vec(), i64::from_be_bytes(b))));
                    }
                    None => bad = Some(v.len()),
                }
            } else {
                merged.insert(k.to_vec(), Some((v.to_vec(), NO_TIMESTAMP)));
            }
        })?;
        if let Some(len) = bad {
            return Err(self.corrupt(format!(
                "a value has {len} bytes, fewer than its 8-byte timestamp"
            )));
        }
        let mut overlay = |key: &[u8], i: usize| -> Result<(), StoreError> {
            if super::window::is_meta(key) {
                return Ok(());
            }
            let time = segmented.decode(key)?.time;
            if time >= time_from && time <= time_to {
                let e = &self.entries[i];
                merged.insert(key.to_vec(), e.value.clone().map(|v| (v, e.timestamp)));
            }
            Ok(())
        };
        // An empty `to` is no upper bound.
        let below = |k: &[u8]| to.is_empty() || k < to;
        match &self.ordered {
            Some(ordered) if to.is_empty() || from < to => {
                let upper = if to.is_empty() {
                    std::ops::Bound::Unbounded
                } else {
                    std::ops::Bound::Excluded(to)
                };
                for (key, &i) in ordered.range::<[u8], _>((std::ops::Bound::Included(from), upper))
                {
                    overlay(key, i)?;
                }
            }
            Some(_) => {}
            None => {
                for (key, &i) in &self.index {
                    if key.as_slice() >= from && below(key) {
                        overlay(key, i)?;
                    }
                }
            }
        }
        Ok(merged
            .into_iter()
            .filter_map(|(k, v)| v.map(|(v, ts)| (k, v, ts)))
            .collect())
    }

    /// Applies restored changelog records (ascending keys, each once) to the store, with their
    /// timestamps in front of the values if the store keeps them.
    pub(crate) fn restore(
        &mut self,
        records: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>, i64)>,
    ) -> Result<(), StoreError> {
        if !self.timestamped {
            let mut plain = records.map(|(k, v, _)| (k, v));
            return self.inner.restore_sorted(&mut plain);
        }
        let restored: Vec<(&[u8], Option<Vec<u8>>)> = records
            .map(|(k, v, ts)| {
                let value = v.map(|v| {
                    let mut out = Vec::with_capacity(8 + v.len());
                    out.extend_from_slice(&ts.to_be_bytes());
                    out.extend_from_slice(v);
                    out
                });
                (k, value)
            })
            .collect();
        let mut batch = restored.iter().map(|(k, v)| (*k, v.as_deref()));
        self.inner.restore_sorted(&mut batch)
    }

    /// About how many entries the store holds, counting cached new keys.
    pub(crate) fn approximate_len(&self) -> usize {
        self.inner.approximate_len() + self.index.len()
    }

    /// Phase 2 of a commit: writes the cache to the store and clears it.
    pub(crate) fn write_to_store(&mut self) -> Result<(), StoreError> {
        if !self.entries.is_empty() {
            let CachedStore {
                inner,
                entries,
                arena,
                spans,
                timestamped,
                ..
            } = self;
            if *timestamped {
                arena.clear();
                spans.clear();
                for e in entries.iter() {
                    spans.push(e.value.as_ref().map(|v| {
                        let start = arena.len();
                        arena.extend_from_slice(&e.timestamp.to_be_bytes());
                        arena.extend_from_slice(v);
                        (start, arena.len())
                    }));
                }
                let arena = &*arena;
                let mut batch = entries
                    .iter()
                    .zip(spans.iter())
                    .map(|(e, span)| (e.key.as_slice(), span.map(|(a, b)| &arena[a..b])));
                inner.write_batch(&mut batch)?;
            } else {
                let mut batch = entries
                    .iter()
                    .map(|e| (e.key.as_slice(), e.value.as_deref()));
                inner.write_batch(&mut batch)?;
            }
        }
        self.discard();
        Ok(())
    }

    /// Forgets uncommitted writes (the store is untouched by them).
    pub(crate) fn discard(&mut self) {
        self.entries.clear();
        self.index.clear();
        self.reordered = false;
        if let Some(ordered) = &mut self.ordered {
            ordered.clear();
        }
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InMemoryKeyValueStore;

    #[test]
    fn reads_see_the_cache_and_the_store_sees_only_committed_writes() {
        let mut store = CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")));
        let mut out = Vec::new();
        let h = Headers::new();
        store.put(b"a", Some(b"1"), 1, &h);
        store.put(b"a", Some(b"2"), 2, &h);
        store.put(b"b", Some(b"3"), 3, &h);
        assert!(store.get_into(b"a", &mut out).unwrap_or(false));
        assert_eq!(out, b"2");
        assert!(
            !store.inner.get_into(b"a", &mut out).unwrap_or(true),
            "not in the store before commit"
        );
        assert_eq!(store.dirty_len(), 2, "one entry per key");
        assert_eq!(store.dirty(0), (&b"a"[..], Some(&b"2"[..]), 2));
        store.write_to_store().ok();
        assert_eq!(store.dirty_len(), 0);
        assert!(store.inner.get_into(b"a", &mut out).unwrap_or(false));
        assert_eq!(out, b"2");
        store.put(b"a", None, 4, &h);
        assert!(
            !store.get_into(b"a", &mut out).unwrap_or(true),
            "a cached delete hides the store's value"
        );
        store.discard();
        assert!(
            store.get_into(b"a", &mut out).unwrap_or(false),
            "discarded writes never reach the store"
        );
    }

    /// Kafka's cache flushes keys in the order of their last write.
    #[test]
    fn dirty_entries_come_in_the_order_of_their_last_write() {
        let mut store = CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")));
        let h = Headers::new();
        for (k, ts) in [(&b"a"[..], 1), (b"b", 2), (b"c", 3), (b"a", 4), (b"c", 5)] {
            store.put(k, Some(b"v"), ts, &h);
        }
        store.order_by_last_write();
        let order: Vec<(Vec<u8>, i64)> = (0..store.dirty_len())
            .map(|i| (store.dirty(i).0.to_vec(), store.dirty(i).2))
            .collect();
        assert_eq!(
            order,
            [(b"b".to_vec(), 2), (b"a".to_vec(), 4), (b"c".to_vec(), 5)]
        );
        let mut out = Vec::new();
        assert_eq!(
            store.get_with_timestamp(b"a", &mut out).ok(),
            Some(Some(4)),
            "index follows"
        );
        store.put(b"b", Some(b"w"), 6, &h);
        assert_eq!(store.dirty_len(), 3, "still one entry per key");
    }

    /// Reordering keeps the ordered index of a window store pointing at the right entries.
    #[test]
    fn reordering_keeps_a_window_stores_range_reads_right() {
        use crate::store::{SegmentedKind, SegmentedStore, window_entry_key};
        let inner = SegmentedStore::in_memory("w", SegmentedKind::Window, 1_000, 100);
        let mut store = CachedStore::configured(Box::new(inner), false, true, true);
        let h = Headers::new();
        let key = |k: &[u8], start| {
            let mut out = Vec::new();
            window_entry_key(k, start, 0, &mut out);
            out
        };
        for (k, start, v) in [
            (&b"a"[..], 0, &b"1"[..]),
            (b"b", 0, b"2"),
            (b"a", 10, b"3"),
            (b"a", 0, b"4"),
        ] {
            store.put(&key(k, start), Some(v), start, &h);
        }
        store.order_by_last_write();
        let got: Vec<Vec<u8>> = store
            .scan_window(&[], &[], 0, 100)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, v, _)| v)
            .collect();
        assert_eq!(
            got,
            [b"4".to_vec(), b"3".to_vec(), b"2".to_vec()],
            "by key, then start"
        );
    }

    #[test]
    fn a_timestamped_store_keeps_each_values_timestamp_and_refuses_a_value_too_short_for_one() {
        let mut store = CachedStore::timestamped(Box::new(InMemoryKeyValueStore::new("t")));
        let h = Headers::new();
        let mut out = Vec::new();
        store.put(b"a", Some(b"1"), 42, &h);
        assert_eq!(
            store.get_with_timestamp(b"a", &mut out).ok(),
            Some(Some(42))
        );
        store.write_to_store().ok();
        assert_eq!(
            store.get_with_timestamp(b"a", &mut out).ok(),
            Some(Some(42)),
            "read back from the store"
        );
        assert_eq!(out, b"1", "the value without its timestamp");
        let mut raw = Vec::new();
        assert!(store.inner.get_into(b"a", &mut raw).unwrap_or(false));
        assert_eq!(
            raw,
            [&42i64.to_be_bytes()[..], b"1"].concat(),
            "8-byte BE prefix"
        );
        assert_eq!(
            store.scan(None, None).ok(),
            Some(vec![(b"a".to_vec(), b"1".to_vec())])
        );
        store.inner.put(b"short", b"1234").ok();
        assert!(matches!(
            store.get_with_timestamp(b"short", &mut out),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(store.scan(None, None).is_err());
    }
}
