//! The in-memory store.

use std::collections::HashMap;

use super::{KeyValueStore, StoreError};

/// A store in a hash map. Updating an existing key reuses its value's allocation. Its contents
/// are gone after a restart; the task restores them from the changelog.
#[derive(Debug)]
pub(crate) struct InMemoryKeyValueStore {
    name: String,
    map: HashMap<Vec<u8>, Vec<u8>>,
}

impl InMemoryKeyValueStore {
    /// An empty store.
    pub(crate) fn new(name: impl Into<String>) -> Self {
        InMemoryKeyValueStore {
            name: name.into(),
            map: HashMap::new(),
        }
    }
}

impl KeyValueStore for InMemoryKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        Ok(match self.map.get(key) {
            Some(value) => {
                out.extend_from_slice(value);
                true
            }
            None => false,
        })
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        match self.map.get_mut(key) {
            Some(existing) => {
                existing.clear();
                existing.extend_from_slice(value);
            }
            None => {
                self.map.insert(key.to_vec(), value.to_vec());
            }
        }
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.map.remove(key);
        Ok(())
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        let mut entries: Vec<_> = self.map.iter().collect();
        entries.sort_unstable();
        for (k, v) in entries {
            f(k, v);
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
