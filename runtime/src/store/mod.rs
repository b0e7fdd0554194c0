//! State stores: the [`KeyValueStore`] trait, an in-memory and a persistent (fjall)
//! implementation, the segmented window/session store ([`SegmentedStore`]), and the write cache
//! every store sits behind.
//!
//! Stores hold bytes; typed access goes through serdes in the processor nodes. A store is written
//! only at commit, after the commit's changelog writes and offsets are durable: between commits,
//! writes collect in the [`CachedStore`]'s cache (one entry per key, like Kafka Streams' record
//! cache), and reads see the cache first. So a store never holds uncommitted state, and a task
//! can resume from its checkpoint after its thread dies.

mod cached;
mod memory;
mod persistent;
mod window;

pub(crate) use memory::InMemoryKeyValueStore;
pub(crate) use persistent::PersistentKeyValueStore;
pub(crate) use window::{
    DecodedEntry, SegmentedKind, SegmentedStore, encode_key, is_meta, key_bounds, meta_key,
    session_entry_key, window_entry_key,
};

pub(crate) use cached::{CachedStore, NO_TIMESTAMP};

/// A failure inside a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The persistent store's storage engine failed.
    #[error("store {store} at {path}: {reason}")]
    Backend {
        /// The store's name.
        store: String,
        /// Where the store lives.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The store holds bytes that cannot be its values.
    #[error("store {store} holds a corrupt value: {reason}")]
    Corrupt {
        /// The store's name.
        store: String,
        /// What is wrong.
        reason: String,
    },
}

/// A key-value store of bytes. Implementations are owned by one task at a time.
///
/// The shape leaves room for window stores (ordered iteration) and for bulk restoration.
pub(crate) trait KeyValueStore: Send {
    /// The store's name.
    fn name(&self) -> &str;
    /// Copies the value of `key` into `out` (cleared first); `false` if there is none.
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Removes `key`.
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError>;
    /// Applies a batch of writes (`None` deletes) at once, as commits and restoration do.
    fn write_batch(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        for (key, value) in batch {
            match value {
                Some(value) => self.put(key, value)?,
                None => self.delete(key)?,
            }
        }
        Ok(())
    }
    /// Applies restored changelog records, given in ascending key order with each key once
    /// (`None` deletes). Stores may load these faster than ordinary writes.
    fn restore_sorted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        self.write_batch(batch)
    }
    /// Visits every entry, in key order ([`SegmentedStore`]: meta keys, then segment by segment).
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError>;
    /// Visits the entries with `from <= key < to`, in key order ([`SegmentedStore`]: meta keys,
    /// then segment by segment).
    fn range(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        self.for_each(&mut |k, v| {
            if k >= from && k < to {
                f(k, v)
            }
        })
    }
    /// Makes written data durable (a no-op in memory).
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Removes every entry (before a full restore).
    fn wipe(&mut self) -> Result<(), StoreError>;
    /// Whether the store keeps its data across restarts (then its checkpoint is meaningful).
    fn is_persistent(&self) -> bool;
    /// The number of entries (approximate for persistent stores).
    fn approximate_len(&self) -> usize;
    /// The store as a window or session store, if it is one (what windowed operators scan by
    /// time).
    fn as_segmented(&self) -> Option<&SegmentedStore> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Both stores answer point reads, deletes, ordered scans and ranges like a BTreeMap.
    #[test]
    fn both_stores_behave_like_a_btreemap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stores: Vec<Box<dyn KeyValueStore>> = vec![
            Box::new(InMemoryKeyValueStore::new("m")),
            Box::new(PersistentKeyValueStore::open("p", dir.path()).expect("open")),
        ];
        for mut store in stores {
            let mut model = BTreeMap::new();
            for i in 0u32..200 {
                let key = format!("k{:03}", (i * 37) % 101).into_bytes();
                if i % 7 == 0 {
                    store.delete(&key).expect("delete");
                    model.remove(&key);
                } else {
                    store.put(&key, &i.to_be_bytes()).expect("put");
                    model.insert(key, i.to_be_bytes().to_vec());
                }
            }
            let mut all = Vec::new();
            store
                .for_each(&mut |k, v| all.push((k.to_vec(), v.to_vec())))
                .expect("scan");
            assert_eq!(
                all,
                model.clone().into_iter().collect::<Vec<_>>(),
                "{}",
                store.name()
            );
            let mut ranged = Vec::new();
            store
                .range(b"k020", b"k050", &mut |k, v| {
                    ranged.push((k.to_vec(), v.to_vec()))
                })
                .expect("range");
            let expected: Vec<_> = model
                .range(b"k020".to_vec()..b"k050".to_vec())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(ranged, expected, "{}", store.name());
            let mut out = Vec::new();
            for (k, v) in &model {
                assert!(store.get_into(k, &mut out).expect("get"));
                assert_eq!(&out, v);
            }
            assert!(!store.get_into(b"absent", &mut out).expect("get"));
        }
    }
}
