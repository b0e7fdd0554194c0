//! The typed key-value store a processor gets from its context ([`KeyValueStore`]): keys and
//! values through the store's serdes, over the task's cached store. It never writes the
//! changelog itself: writes reach it at the task's commit.

use riffle_state_dir::TaskId;

use crate::serdes::SerdeRef;
use crate::state::CachedStore;
use crate::state::def::StoreSerdes;
use crate::types::error::{Error, Result};
use crate::types::error::{SerdeError, SerializationExceptionOrigin};
use crate::types::record::Headers;

/// A typed key-value store, as a processor sees it (Kafka Streams' `KeyValueStore<K, V>`).
///
/// Reads see this commit's writes; writes reach the changelog and the store at the task's
/// next commit (docs/design.md §3). Keys are ordered by their serialized bytes, as in Kafka.
pub struct KeyValueStore<'a, K, V> {
    pub(super) store: &'a mut CachedStore,
    pub(super) scratch: &'a mut StoreScratch,
    pub(super) key_serde: &'a SerdeRef<K>,
    pub(super) value_serde: &'a SerdeRef<V>,
    pub(super) timestamp: i64,
    pub(super) task: TaskId,
}

/// Buffers the typed store handles reuse.
#[derive(Default)]
pub(crate) struct StoreScratch {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) old: Vec<u8>,
}

impl<'a, K: 'static, V: 'static> KeyValueStore<'a, K, V> {
    // Used by the test driver (the `embedded` feature).
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn new(
        store: &'a mut CachedStore,
        scratch: &'a mut StoreScratch,
        serdes: &'a StoreSerdes<K, V>,
        task: TaskId,
    ) -> Self {
        KeyValueStore {
            store,
            scratch,
            key_serde: &serdes.key,
            value_serde: &serdes.value,
            timestamp: 0,
            task,
        }
    }

    pub(super) fn corrupt(&self, source: SerdeError) -> Error {
        Error::CorruptState {
            store: self.store.inner.name().to_owned(),
            task: self.task,
            source,
        }
    }

    /// A key (`origin`) or value the store's serde could not serialize.
    pub(super) fn unserializable(
        &self,
        origin: SerializationExceptionOrigin,
        source: SerdeError,
    ) -> Error {
        Error::SerializeState {
            store: self.store.inner.name().to_owned(),
            origin,
            source,
        }
    }

    pub(super) fn decode_value(&self, bytes: &[u8]) -> Result<V> {
        self.value_serde
            .deserialize(Some(bytes))
            .map_err(|e| self.corrupt(e))
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        self.store.inner.name()
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &K) -> Result<Option<V>> {
        let s = &mut *self.scratch;
        s.key.clear();
        if let Err(e) = self.key_serde.serialize(key, &mut s.key) {
            return Err(self.unserializable(SerializationExceptionOrigin::Key, e));
        }
        if !self.store.get_into(&s.key, &mut s.old)? {
            return Ok(None);
        }
        let old = std::mem::take(&mut self.scratch.old);
        let value = self.decode_value(&old);
        self.scratch.old = old;
        value.map(Some)
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &K, value: &V) -> Result<()> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.value.clear();
        if let Err(e) = self.key_serde.serialize(key, &mut s.key) {
            return Err(self.unserializable(SerializationExceptionOrigin::Key, e));
        }
        if let Err(e) = self.value_serde.serialize(value, &mut s.value) {
            return Err(self.unserializable(SerializationExceptionOrigin::Value, e));
        }
        self.store
            .put(&s.key, Some(&s.value), self.timestamp, &Headers::new());
        Ok(())
    }

    /// Sets `key` to `value` unless it has a value; returns the value it had.
    pub fn put_if_absent(&mut self, key: &K, value: &V) -> Result<Option<V>> {
        match self.get(key)? {
            Some(existing) => Ok(Some(existing)),
            None => self.put(key, value).map(|()| None),
        }
    }

    /// Removes `key`; returns the value it had.
    pub fn delete(&mut self, key: &K) -> Result<Option<V>> {
        let old = self.get(key)?;
        if old.is_some() {
            // `get` left the key's bytes in the scratch buffer.
            self.store
                .put(&self.scratch.key, None, self.timestamp, &Headers::new());
        }
        Ok(old)
    }

    pub(super) fn decode_all(&self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<(K, V)>> {
        entries
            .into_iter()
            .map(|(k, v)| {
                let key = self
                    .key_serde
                    .deserialize(Some(&k))
                    .map_err(|e| self.corrupt(e))?;
                Ok((key, self.decode_value(&v)?))
            })
            .collect()
    }

    /// The entries with `from <= key <= to` (by serialized key), in key order.
    pub fn range(&mut self, from: &K, to: &K) -> Result<Vec<(K, V)>> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.value.clear();
        let keys = self
            .key_serde
            .serialize(from, &mut s.key)
            .and_then(|()| self.key_serde.serialize(to, &mut s.value));
        if let Err(e) = keys {
            return Err(self.unserializable(SerializationExceptionOrigin::Key, e));
        }
        let entries = self.store.scan(Some(&s.key), Some(&s.value))?;
        self.decode_all(entries)
    }

    /// Every entry, in key order.
    pub fn all(&mut self) -> Result<Vec<(K, V)>> {
        let entries = self.store.scan(None, None)?;
        self.decode_all(entries)
    }

    /// About how many entries the store holds.
    pub fn approximate_num_entries(&self) -> u64 {
        self.store.approximate_len() as u64
    }
}
