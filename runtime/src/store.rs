//! State stores: the [`KeyValueStore`] trait and its in-memory implementation.
//!
//! Stores hold bytes; typed access goes through serdes in the processor nodes. A store never
//! touches the changelog itself: [`LoggedStore`] sits in front of it, remembers which keys changed
//! since the last commit (so each key is written to the changelog once per commit, like Kafka
//! Streams' record cache) and hands them to the commit.

use std::collections::{HashMap, HashSet};

/// A failure inside a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O failure of a persistent store.
    #[error("store {store}: {reason}")]
    Backend {
        /// The store's name.
        store: String,
        /// What failed.
        reason: String,
    },
}

/// A key-value store of bytes. Implementations are owned by one task at a time.
///
/// The shape leaves room for window stores (ordered range scans) and for bulk restoration.
pub trait KeyValueStore: Send {
    /// The store's name.
    fn name(&self) -> &str;
    /// Copies the value of `key` into `out` (cleared first); `false` if there is none.
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Removes `key`.
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError>;
    /// Applies a batch of changelog records (`None` deletes), as restoration does.
    fn write_batch(&mut self, batch: &[(&[u8], Option<&[u8]>)]) -> Result<(), StoreError> {
        for (key, value) in batch {
            match value {
                Some(value) => self.put(key, value)?,
                None => self.delete(key)?,
            }
        }
        Ok(())
    }
    /// Visits every entry, in key order.
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError>;
    /// Makes written data durable (a no-op in memory).
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Whether the store keeps its data across restarts (then its checkpoint is meaningful).
    fn is_persistent(&self) -> bool;
    /// The number of entries (approximate for persistent stores).
    fn approximate_len(&self) -> usize;
}

/// A store in a hash map. Updating an existing key reuses its value's allocation.
#[derive(Debug)]
pub struct InMemoryKeyValueStore {
    name: String,
    map: HashMap<Vec<u8>, Vec<u8>>,
}

impl InMemoryKeyValueStore {
    /// An empty store.
    pub fn new(name: impl Into<String>) -> Self {
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
    fn is_persistent(&self) -> bool {
        false
    }
    fn approximate_len(&self) -> usize {
        self.map.len()
    }
}

/// A store plus what the commit needs: which keys changed since the last commit, and the
/// changelog it writes to (if logging is enabled).
pub(crate) struct LoggedStore {
    pub(crate) inner: Box<dyn KeyValueStore>,
    /// Index of the changelog topic in the application's topic table; `None` without logging.
    pub(crate) changelog: Option<usize>,
    dirty: HashSet<Vec<u8>>,
}

impl LoggedStore {
    pub(crate) fn new(inner: Box<dyn KeyValueStore>, changelog: Option<usize>) -> Self {
        LoggedStore {
            inner,
            changelog,
            dirty: HashSet::new(),
        }
    }

    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.inner.put(key, value)?;
        self.mark_dirty(key);
        Ok(())
    }

    fn mark_dirty(&mut self, key: &[u8]) {
        if self.changelog.is_some() && !self.dirty.contains(key) {
            self.dirty.insert(key.to_vec());
        }
    }

    /// Hands every key changed since the last call, with its current value (`None`: deleted),
    /// to `emit`, then forgets them.
    pub(crate) fn drain_dirty(
        &mut self,
        scratch: &mut Vec<u8>,
        emit: &mut dyn FnMut(&[u8], Option<&[u8]>) -> Result<(), crate::Error>,
    ) -> Result<(), crate::Error> {
        for key in self.dirty.drain() {
            let found = self
                .inner
                .get_into(&key, scratch)
                .map_err(crate::Error::from)?;
            emit(&key, found.then_some(scratch.as_slice()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_store_reports_each_changed_key_once() {
        let mut store = LoggedStore::new(Box::new(InMemoryKeyValueStore::new("s")), Some(0));
        store.put(b"a", b"1").ok();
        store.put(b"a", b"2").ok();
        store.put(b"b", b"3").ok();
        let mut seen = Vec::new();
        let mut scratch = Vec::new();
        store
            .drain_dirty(&mut scratch, &mut |k, v| {
                seen.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                Ok(())
            })
            .ok();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (b"a".to_vec(), Some(b"2".to_vec())),
                (b"b".to_vec(), Some(b"3".to_vec()))
            ]
        );
        let mut again = 0;
        store
            .drain_dirty(&mut scratch, &mut |_, _| {
                again += 1;
                Ok(())
            })
            .ok();
        assert_eq!(again, 0);
    }
}
