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
}

/// A store behind its cache.
pub(crate) struct CachedStore {
    pub(crate) inner: Box<dyn KeyValueStore>,
    entries: Vec<Entry>,
    index: HashMap<Vec<u8>, usize>,
    bytes: usize,
    /// Caching disabled (Kafka's `withCachingDisabled`): every write is kept, so each reaches
    /// the changelog, not only a key's latest.
    every_write: bool,
}

/// Bytes a cache entry is charged beyond its key and value.
const ENTRY_OVERHEAD: usize = 64;

impl CachedStore {
    pub(crate) fn new(inner: Box<dyn KeyValueStore>) -> Self {
        CachedStore {
            inner,
            entries: Vec::new(),
            index: HashMap::new(),
            bytes: 0,
            every_write: false,
        }
    }

    /// A store whose every write goes to the changelog (caching disabled).
    pub(crate) fn without_caching(inner: Box<dyn KeyValueStore>) -> Self {
        CachedStore {
            every_write: true,
            ..CachedStore::new(inner)
        }
    }

    /// The value of `key` as processing sees it: the cache, else the store.
    pub(crate) fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        match self.index.get(key) {
            Some(&i) => {
                out.clear();
                match &self.entries[i].value {
                    Some(v) => {
                        out.extend_from_slice(v);
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
            None => self.inner.get_into(key, out),
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
        match self.index.get(key).filter(|_| !self.every_write) {
            Some(&i) => {
                let entry = &mut self.entries[i];
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
                match self.index.get_mut(key) {
                    Some(i) => *i = self.entries.len(),
                    None => {
                        self.index.insert(key.to_vec(), self.entries.len());
                    }
                }
                self.entries.push(Entry {
                    key: key.to_vec(),
                    value: value.map(<[u8]>::to_vec),
                    timestamp,
                    headers: headers.clone(),
                });
            }
        }
    }

    /// Bytes held by the cache.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.bytes
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
        let mut visit = |k: &[u8], v: &[u8]| {
            if within(k) {
                merged.insert(k.to_vec(), Some(v.to_vec()));
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

    /// About how many entries the store holds, counting cached new keys.
    pub(crate) fn approximate_len(&self) -> usize {
        self.inner.approximate_len() + self.index.len()
    }

    /// Phase 2 of a commit: writes the cache to the store and clears it.
    pub(crate) fn write_to_store(&mut self) -> Result<(), StoreError> {
        if !self.entries.is_empty() {
            let mut batch = self
                .entries
                .iter()
                .map(|e| (e.key.as_slice(), e.value.as_deref()));
            self.inner.write_batch(&mut batch)?;
        }
        self.discard();
        Ok(())
    }

    /// Forgets uncommitted writes (the store is untouched by them).
    pub(crate) fn discard(&mut self) {
        self.entries.clear();
        self.index.clear();
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
}
