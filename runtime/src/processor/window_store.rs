//! Typed window and session stores, as processors and tests see them (Kafka Streams'
//! `WindowStore<K, V>` and `SessionStore<K, V>`).
//!
//! Both read through the task's write cache, so reads see this commit's writes. Results come
//! sorted: by key (serialized bytes), then window start (windows) or session end, start
//! (sessions); the `backward_` variants reverse that order.

use riffle_state_dir::TaskId;

use crate::processor::{StoreScratch, StoreSerdes};
use crate::serdes::SerdeRef;
use crate::state::{CachedStore, encode_key, key_bounds, session_entry_key, window_entry_key};
use crate::types::error::{Error, Result};
use crate::types::error::{SerdeError, SerializationExceptionOrigin};
use crate::types::record::Headers;
use crate::types::window::{Window, Windowed};

const KEY: SerializationExceptionOrigin = SerializationExceptionOrigin::Key;
const VALUE: SerializationExceptionOrigin = SerializationExceptionOrigin::Value;

/// A store of values per key and window start (Kafka Streams' `WindowStore<K, V>`).
pub struct WindowStore<'a, K, V> {
    store: &'a mut CachedStore,
    scratch: &'a mut StoreScratch,
    key_serde: &'a SerdeRef<K>,
    value_serde: &'a SerdeRef<V>,
    window_ms: i64,
    retain_duplicates: bool,
    timestamp: i64,
    task: TaskId,
}

/// Typed decoding shared by both handles.
fn corrupt(store: &CachedStore, task: TaskId, source: SerdeError) -> Error {
    Error::CorruptState {
        store: store.inner.name().to_owned(),
        task,
        source,
    }
}

/// Appends `value` through `serde` for `store`; a failure names the store.
fn serialize<T: 'static>(
    serde: &SerdeRef<T>,
    value: &T,
    out: &mut Vec<u8>,
    store: &CachedStore,
    origin: SerializationExceptionOrigin,
) -> Result<()> {
    serde
        .serialize(value, out)
        .map_err(|source| Error::SerializeState {
            store: store.inner.name().to_owned(),
            origin,
            source,
        })
}

/// The encoded-key bounds `[lo, hi)` of keys `from..=to` (serialized), or of all keys.
fn range_bounds<K: 'static>(
    serde: &SerdeRef<K>,
    store: &CachedStore,
    from: Option<&K>,
    to: Option<&K>,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut raw = Vec::new();
    let lo = match from {
        Some(k) => {
            serialize(serde, k, &mut raw, store, SerializationExceptionOrigin::Key)?;
            let mut lo = Vec::new();
            encode_key(&raw, &mut lo);
            lo
        }
        None => Vec::new(),
    };
    let hi = match to {
        Some(k) => {
            raw.clear();
            serialize(serde, k, &mut raw, store, SerializationExceptionOrigin::Key)?;
            key_bounds(&raw).1
        }
        None => Vec::new(),
    };
    Ok((lo, hi))
}

impl<'a, K: 'static, V: 'static> WindowStore<'a, K, V> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        store: &'a mut CachedStore,
        scratch: &'a mut StoreScratch,
        serdes: &'a StoreSerdes<K, V>,
        window_ms: i64,
        retain_duplicates: bool,
        timestamp: i64,
        task: TaskId,
    ) -> Self {
        WindowStore {
            store,
            scratch,
            key_serde: &serdes.key,
            value_serde: &serdes.value,
            window_ms,
            retain_duplicates,
            timestamp,
            task,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        self.store.inner.name()
    }

    /// Puts `value` for `key` in the window starting at `window_start`. Unless the store keeps
    /// duplicates, this replaces the window's value. A window older than the store's retention
    /// is not kept.
    pub fn put(&mut self, key: &K, value: &V, window_start: i64) -> Result<()> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.value.clear();
        s.old.clear();
        serialize(self.key_serde, key, &mut s.key, self.store, KEY)?;
        serialize(self.value_serde, value, &mut s.value, self.store, VALUE)?;
        let seq = if self.retain_duplicates {
            self.store.next_seq()
        } else {
            0
        };
        window_entry_key(&s.key, window_start, seq, &mut s.old);
        self.store
            .put(&s.old, Some(&s.value), self.timestamp, &Headers::new());
        Ok(())
    }

    /// Removes the value of `key` in the window starting at `window_start` (the first of a
    /// store keeping duplicates).
    pub fn delete(&mut self, key: &K, window_start: i64) -> Result<()> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.old.clear();
        serialize(self.key_serde, key, &mut s.key, self.store, KEY)?;
        window_entry_key(&s.key, window_start, 0, &mut s.old);
        self.store
            .put(&s.old, None, self.timestamp, &Headers::new());
        Ok(())
    }

    fn scan(
        &mut self,
        lo: &[u8],
        hi: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let entries = self.store.scan_window(lo, hi, time_from, time_to)?;
        let mut out = Vec::with_capacity(entries.len());
        for (entry, value, _) in entries {
            let decoded = self.store.decode_entry(&entry)?;
            let key = self
                .key_serde
                .deserialize(Some(&decoded.key))
                .map_err(|e| corrupt(self.store, self.task, e))?;
            let value = self
                .value_serde
                .deserialize(Some(&value))
                .map_err(|e| corrupt(self.store, self.task, e))?;
            let window = Window::new(decoded.time, decoded.time.saturating_add(self.window_ms));
            out.push((Windowed::new(key, window), value));
        }
        Ok(out)
    }

    /// The value of `key` in the window starting at `window_start`.
    pub fn fetch_window(&mut self, key: &K, window_start: i64) -> Result<Option<V>> {
        Ok(self
            .fetch(key, window_start, window_start)?
            .into_iter()
            .next()
            .map(|(_, v)| v))
    }

    /// `key`'s windows starting in `[time_from, time_to]`: (window start, value), by start.
    pub fn fetch(&mut self, key: &K, time_from: i64, time_to: i64) -> Result<Vec<(i64, V)>> {
        let s = &mut *self.scratch;
        s.key.clear();
        serialize(self.key_serde, key, &mut s.key, self.store, KEY)?;
        let (lo, hi) = key_bounds(&s.key);
        Ok(self
            .scan(&lo, &hi, time_from, time_to)?
            .into_iter()
            .map(|(w, v)| (w.window.start, v))
            .collect())
    }

    /// [`WindowStore::fetch`], latest window first.
    pub fn backward_fetch(
        &mut self,
        key: &K,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(i64, V)>> {
        let mut out = self.fetch(key, time_from, time_to)?;
        out.reverse();
        Ok(out)
    }

    /// The windows of keys `key_from..=key_to` (serialized order) starting in
    /// `[time_from, time_to]`.
    pub fn fetch_range(
        &mut self,
        key_from: &K,
        key_to: &K,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let (lo, hi) = range_bounds(self.key_serde, self.store, Some(key_from), Some(key_to))?;
        self.scan(&lo, &hi, time_from, time_to)
    }

    /// [`WindowStore::fetch_range`], in reverse order.
    pub fn backward_fetch_range(
        &mut self,
        key_from: &K,
        key_to: &K,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.fetch_range(key_from, key_to, time_from, time_to)?;
        out.reverse();
        Ok(out)
    }

    /// Every key's windows starting in `[time_from, time_to]`.
    pub fn fetch_all(&mut self, time_from: i64, time_to: i64) -> Result<Vec<(Windowed<K>, V)>> {
        self.scan(&[], &[], time_from, time_to)
    }

    /// [`WindowStore::fetch_all`], in reverse order.
    pub fn backward_fetch_all(
        &mut self,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.fetch_all(time_from, time_to)?;
        out.reverse();
        Ok(out)
    }

    /// Every window the store holds.
    pub fn all(&mut self) -> Result<Vec<(Windowed<K>, V)>> {
        self.fetch_all(i64::MIN, i64::MAX)
    }

    /// [`WindowStore::all`], in reverse order.
    pub fn backward_all(&mut self) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.all()?;
        out.reverse();
        Ok(out)
    }
}

/// A store of values per key and session (Kafka Streams' `SessionStore<K, V>`).
pub struct SessionStore<'a, K, V> {
    store: &'a mut CachedStore,
    scratch: &'a mut StoreScratch,
    key_serde: &'a SerdeRef<K>,
    value_serde: &'a SerdeRef<V>,
    timestamp: i64,
    task: TaskId,
}

impl<'a, K: 'static, V: 'static> SessionStore<'a, K, V> {
    pub(crate) fn new(
        store: &'a mut CachedStore,
        scratch: &'a mut StoreScratch,
        serdes: &'a StoreSerdes<K, V>,
        timestamp: i64,
        task: TaskId,
    ) -> Self {
        SessionStore {
            store,
            scratch,
            key_serde: &serdes.key,
            value_serde: &serdes.value,
            timestamp,
            task,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        self.store.inner.name()
    }

    fn entry(&mut self, session: &Windowed<K>) -> Result<()> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.old.clear();
        serialize(self.key_serde, &session.key, &mut s.key, self.store, KEY)?;
        session_entry_key(&s.key, session.window.end, session.window.start, &mut s.old);
        Ok(())
    }

    /// Puts `value` for the session `session` (its key and window).
    pub fn put(&mut self, session: &Windowed<K>, value: &V) -> Result<()> {
        self.entry(session)?;
        let s = &mut *self.scratch;
        s.value.clear();
        serialize(self.value_serde, value, &mut s.value, self.store, VALUE)?;
        self.store
            .put(&s.old, Some(&s.value), self.timestamp, &Headers::new());
        Ok(())
    }

    /// Removes the session `session`.
    pub fn remove(&mut self, session: &Windowed<K>) -> Result<()> {
        self.entry(session)?;
        self.store
            .put(&self.scratch.old, None, self.timestamp, &Headers::new());
        Ok(())
    }

    fn scan(
        &mut self,
        lo: &[u8],
        hi: &[u8],
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let entries = self.store.scan_window(lo, hi, earliest_end, i64::MAX)?;
        let mut out = Vec::with_capacity(entries.len());
        for (entry, value, _) in entries {
            let decoded = self.store.decode_entry(&entry)?;
            if decoded.second > latest_start {
                continue;
            }
            let key = self
                .key_serde
                .deserialize(Some(&decoded.key))
                .map_err(|e| corrupt(self.store, self.task, e))?;
            let value = self
                .value_serde
                .deserialize(Some(&value))
                .map_err(|e| corrupt(self.store, self.task, e))?;
            out.push((
                Windowed::new(key, Window::new(decoded.second, decoded.time)),
                value,
            ));
        }
        Ok(out)
    }

    /// The value of the session of `key` from `start` to `end`.
    pub fn fetch_session(&mut self, key: &K, start: i64, end: i64) -> Result<Option<V>> {
        Ok(self
            .find_sessions(key, end, start)?
            .into_iter()
            .find(|(w, _)| w.window == Window::new(start, end))
            .map(|(_, v)| v))
    }

    /// `key`'s sessions ending at or after `earliest_end` and starting at or before
    /// `latest_start` (the sessions a record between the two could join), by end.
    pub fn find_sessions(
        &mut self,
        key: &K,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let s = &mut *self.scratch;
        s.key.clear();
        serialize(self.key_serde, key, &mut s.key, self.store, KEY)?;
        let (lo, hi) = key_bounds(&s.key);
        self.scan(&lo, &hi, earliest_end, latest_start)
    }

    /// [`SessionStore::find_sessions`], latest first.
    pub fn backward_find_sessions(
        &mut self,
        key: &K,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.find_sessions(key, earliest_end, latest_start)?;
        out.reverse();
        Ok(out)
    }

    /// Every session of `key`.
    pub fn fetch(&mut self, key: &K) -> Result<Vec<(Windowed<K>, V)>> {
        self.find_sessions(key, i64::MIN, i64::MAX)
    }

    /// [`SessionStore::fetch`], latest first.
    pub fn backward_fetch(&mut self, key: &K) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.fetch(key)?;
        out.reverse();
        Ok(out)
    }

    /// The sessions of keys `key_from..=key_to` (serialized order).
    pub fn fetch_range(&mut self, key_from: &K, key_to: &K) -> Result<Vec<(Windowed<K>, V)>> {
        let (lo, hi) = range_bounds(self.key_serde, self.store, Some(key_from), Some(key_to))?;
        self.scan(&lo, &hi, i64::MIN, i64::MAX)
    }

    /// Every session the store holds.
    pub fn all(&mut self) -> Result<Vec<(Windowed<K>, V)>> {
        self.scan(&[], &[], i64::MIN, i64::MAX)
    }

    /// [`SessionStore::all`], in reverse order.
    pub fn backward_all(&mut self) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.all()?;
        out.reverse();
        Ok(out)
    }
}
