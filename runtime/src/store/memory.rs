//! The in-memory store.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::{KeyValueStore, StoreError};

/// One key and its value, in one allocation (the key's bytes, then the value's), with the
/// key's hash, so growing the table never reads a key again.
#[derive(Debug)]
struct Slot {
    hash: u64,
    key_len: u32,
    bytes: Box<[u8]>,
}

impl Slot {
    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.key_len as usize..]
    }

    fn new(hash: u64, key: &[u8], value: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(key.len() + value.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        Slot {
            hash,
            key_len: key.len() as u32,
            bytes: bytes.into_boxed_slice(),
        }
    }
}

/// A store in a hash table. A key and its value share one allocation, rewritten in place when
/// the new value has the old one's length (an aggregate's usual update). Its contents are gone
/// after a restart; the task restores them from the changelog.
#[derive(Debug)]
pub(crate) struct InMemoryKeyValueStore {
    name: String,
    table: HashTable<Slot>,
    /// foldhash (hashbrown's own hasher, randomly seeded per process) rather than SipHash:
    /// it was a tenth of a count's CPU time over a million keys.
    hasher: foldhash::fast::RandomState,
}

impl InMemoryKeyValueStore {
    /// An empty store.
    pub(crate) fn new(name: impl Into<String>) -> Self {
        InMemoryKeyValueStore {
            name: name.into(),
            table: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl KeyValueStore for InMemoryKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        let hash = self.hasher.hash_one(key);
        Ok(match self.table.find(hash, |s| s.key() == key) {
            Some(slot) => {
                out.extend_from_slice(slot.value());
                true
            }
            None => false,
        })
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let hash = self.hasher.hash_one(key);
        match self.table.find_mut(hash, |s| s.key() == key) {
            Some(slot) if slot.value().len() == value.len() => {
                slot.bytes[key.len()..].copy_from_slice(value);
            }
            Some(slot) => *slot = Slot::new(hash, key, value),
            None => {
                self.table
                    .insert_unique(hash, Slot::new(hash, key, value), |s| s.hash);
            }
        }
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let hash = self.hasher.hash_one(key);
        if let Ok(entry) = self.table.find_entry(hash, |s| s.key() == key) {
            entry.remove();
        }
        Ok(())
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        let mut entries: Vec<&Slot> = self.table.iter().collect();
        entries.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        for slot in entries {
            f(slot.key(), slot.value());
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    fn wipe(&mut self) -> Result<(), StoreError> {
        self.table.clear();
        Ok(())
    }
    fn is_persistent(&self) -> bool {
        false
    }
    fn approximate_len(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Puts of values of every length (rewritten in place or reallocated), deletes and
        /// reads against a `BTreeMap`; `for_each` visits in key order.
        #[test]
        fn the_in_memory_store_reads_like_a_btreemap(
            ops in proptest::collection::vec(
                (0u8..16, proptest::option::weighted(0.8, proptest::collection::vec(any::<u8>(), 0..12))),
                1..300,
            ),
        ) {
            let mut store = InMemoryKeyValueStore::new("m");
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut out = Vec::new();
            for (k, v) in ops {
                let key = vec![b'k'; 1 + k as usize];
                match v {
                    Some(v) => {
                        prop_assert!(store.put(&key, &v).is_ok());
                        model.insert(key.clone(), v);
                    }
                    None => {
                        prop_assert!(store.delete(&key).is_ok());
                        model.remove(&key);
                    }
                }
                let found = store.get_into(&key, &mut out).unwrap_or(false);
                prop_assert_eq!(found.then(|| out.clone()), model.get(&key).cloned());
                prop_assert_eq!(store.approximate_len(), model.len());
            }
            let mut listed = Vec::new();
            prop_assert!(store.for_each(&mut |k, v| listed.push((k.to_vec(), v.to_vec()))).is_ok());
            prop_assert_eq!(listed, model.into_iter().collect::<Vec<_>>());
        }
    }
}
