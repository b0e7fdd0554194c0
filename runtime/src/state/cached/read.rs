//! Reads through the cache: a key's latest write if the cache holds it, else the store's
//! value (its timestamp stripped for a timestamped store); and the range, prefix and window
//! scans that merge the cache's writes over the store's entries.

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use crate::state::StoreError;

use super::*;

impl CachedStore {
    /// The value of `key` as processing sees it: the cache, else the store.
    pub(crate) fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        Ok(self.get_with_timestamp(key, out)?.is_some())
    }

    /// The value of `key` (into `out`) and its timestamp: the cached write's, the store's for a
    /// timestamped store, else [`NO_TIMESTAMP`]. `None` if there is no value.
    #[inline]
    pub(crate) fn get_with_timestamp(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<i64>, StoreError> {
        if !self.timing {
            return self.get_untimed(key, out);
        }
        let started = std::time::Instant::now();
        let got = self.get_untimed(key, out);
        let mut times = self.get_nanos.get();
        times.add(elapsed_nanos(started));
        self.get_nanos.set(times);
        got
    }

    pub(super) fn get_untimed(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<i64>, StoreError> {
        let hash = self.hasher.hash_one(key);
        let found = self.find(key, hash);
        self.memo.set(Some((hash, found)));
        self.gets.set(self.gets.get() + 1);
        if found.is_some() {
            self.hits.set(self.hits.get() + 1);
        }
        if let Ok(mut memo_key) = self.memo_key.try_borrow_mut() {
            memo_key.clear();
            memo_key.extend_from_slice(key);
        }
        match found {
            Some(i) => {
                self.memo_hint.set(None);
                out.clear();
                let entry = &self.entries[i];
                match entry.value(&self.arena) {
                    Some(v) => {
                        out.extend_from_slice(v);
                        Ok(Some(entry.timestamp))
                    }
                    None => Ok(None),
                }
            }
            None => {
                let (found, hint) = self.inner.get_hinted(key, out)?;
                self.memo_hint.set(hint);
                if !found {
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
        // In write order: with caching disabled a key's later entries replace its earlier.
        for e in &self.entries {
            let key = e.key(&self.arena);
            if within(key) {
                merged.insert(key.to_vec(), e.value(&self.arena).map(<[u8]>::to_vec));
            }
        }
        Ok(merged
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// The entries whose key starts with `prefix` as processing sees them, in key order. The
    /// cache's writes are found through its ordered index when it keeps one, so a scan costs
    /// the keys it returns, not the cache's size.
    #[allow(clippy::type_complexity)]
    pub(crate) fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let skip = if self.timestamped { 8 } else { 0 };
        let mut short = None;
        let mut visit = |k: &[u8], v: &[u8]| {
            if k.starts_with(prefix) {
                match v.get(skip..) {
                    Some(v) => {
                        merged.insert(k.to_vec(), Some(v.to_vec()));
                    }
                    None => short = Some(v.len()),
                }
            }
        };
        // The smallest key above every key with the prefix: the prefix with its last byte
        // below 0xff incremented and what follows dropped (none if it is all 0xff).
        let end = prefix.iter().rposition(|&b| b != 0xff).map(|i| {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        });
        match &end {
            Some(end) => self.inner.range(prefix, end, &mut visit)?,
            None => self.inner.for_each(&mut visit)?,
        }
        if let Some(len) = short {
            return Err(self.corrupt(format!(
                "a value has {len} bytes, fewer than its 8-byte timestamp"
            )));
        }
        match &self.ordered {
            Some(ordered) => {
                for (key, &i) in ordered.range(prefix.to_vec()..) {
                    if !key.starts_with(prefix) {
                        break;
                    }
                    let value = self.entries[i].value(&self.arena).map(<[u8]>::to_vec);
                    merged.insert(key.clone(), value);
                }
            }
            None => {
                // In write order: with caching disabled a key's later entries replace its
                // earlier.
                for e in &self.entries {
                    let key = e.key(&self.arena);
                    if key.starts_with(prefix) {
                        merged.insert(key.to_vec(), e.value(&self.arena).map(<[u8]>::to_vec));
                    }
                }
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
        if time_from > time_to {
            return Ok(Vec::new());
        }
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
            if super::super::window::is_meta(key) {
                return Ok(());
            }
            let time = segmented.entry_time(key)?;
            if time >= time_from && time <= time_to {
                let e = &self.entries[i];
                merged.insert(
                    key.to_vec(),
                    e.value(&self.arena).map(|v| (v.to_vec(), e.timestamp)),
                );
            }
            Ok(())
        };
        // An empty `to` is no upper bound.
        let below = |k: &[u8]| to.is_empty() || k < to;
        match &self.ordered {
            Some(ordered) if to.is_empty() || from < to => {
                // One key's bounds narrow to the entries of that key in the time range (the
                // cache's keys are the store's entry keys).
                let mut bounds = self.bounds.take();
                let narrowed = !to.is_empty()
                    && super::super::window::narrow_to_times(
                        from,
                        to,
                        time_from,
                        time_to,
                        &mut bounds.0,
                        &mut bounds.1,
                    );
                let (lo, hi) = if narrowed {
                    (bounds.0.as_slice(), bounds.1.as_slice())
                } else {
                    (from, to)
                };
                let upper = if hi.is_empty() {
                    std::ops::Bound::Unbounded
                } else {
                    std::ops::Bound::Excluded(hi)
                };
                for (key, &i) in ordered.range::<[u8], _>((std::ops::Bound::Included(lo), upper)) {
                    overlay(key, i)?;
                }
                self.bounds.set(bounds);
            }
            Some(_) => {}
            None => {
                for (i, e) in self.entries.iter().enumerate() {
                    let key = e.key(&self.arena);
                    if key >= from && below(key) {
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
}
