//! The in-memory store.

use super::arena::ArenaMap;
use super::{BytesStore, StoreError, StoreHint, StorePosition};

/// A store in a hash map whose keys and values share one arena (runtime/src/state/arena.rs): a
/// value rewritten with its old length stays in place (an aggregate's usual update), and a key
/// costs no allocation of its own (a boxed entry per key was a `malloc` and a `free` each, and
/// about 115 bytes at a million keys). Its contents are gone after a restart; the task restores
/// them from the changelog.
pub(crate) struct InMemoryKeyValueStore {
    name: String,
    map: ArenaMap<usize>,
}

impl std::fmt::Debug for InMemoryKeyValueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryKeyValueStore")
            .field("name", &self.name)
            .field("len", &self.map.len())
            .finish()
    }
}

impl InMemoryKeyValueStore {
    /// An empty store.
    pub(crate) fn new(name: impl Into<String>) -> Self {
        InMemoryKeyValueStore {
            name: name.into(),
            map: ArenaMap::default(),
        }
    }
}

impl BytesStore for InMemoryKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        Ok(match self.map.get(key) {
            Some(Some(value)) => {
                out.extend_from_slice(value);
                true
            }
            _ => false,
        })
    }
    fn get_hinted(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(bool, Option<StoreHint>), StoreError> {
        out.clear();
        Ok(match self.map.locate(key) {
            Some((Some(value), hint)) => {
                out.extend_from_slice(value);
                (true, Some(hint))
            }
            _ => (false, None),
        })
    }
    fn write_batch_hinted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>, Option<StoreHint>)>,
        _position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        for (key, value, hint) in batch {
            match (value, hint) {
                (Some(value), Some(hint)) if self.map.fits(key, Some(value)) => {
                    self.map.set_hinted(hint, key, Some(value));
                }
                (Some(value), _) => self.put(key, value)?,
                (None, _) => self.delete(key)?,
            }
        }
        Ok(())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        if !self.map.fits(key, Some(value)) {
            return Err(StoreError::Backend {
                store: self.name.clone(),
                path: "(in memory)".into(),
                reason: format!(
                    "a key of {} bytes with a value of {} bytes: a key or value must be under 4 GiB",
                    key.len(),
                    value.len()
                ),
            });
        }
        self.map.set(key, Some(value));
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.map.remove(key);
        Ok(())
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        for (key, value) in self.map.sorted() {
            if let Some(value) = value {
                f(key, value);
            }
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    fn wipe(&mut self) -> Result<(), StoreError> {
        self.map.clear();
        Ok(())
    }
    fn is_persistent(&self) -> bool {
        false
    }
    fn approximate_len(&self) -> usize {
        self.map.len()
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
