//! The test stores: typed views of a [`TopologyTestDriver`](super::TopologyTestDriver)'s
//! key-value, window and session stores, read (and a key-value store written) between piped
//! records through the same typed stores the processors use.

use std::cell::RefCell;
use std::rc::Rc;

use super::driver::Inner;
use crate::processor::StoreScratch;
use crate::processor::window_store::SessionStore;
use crate::processor::window_store::WindowStore;
use crate::processor::{KeyValueStore, StoreSerdes};
use crate::state::CachedStore;
use crate::topology::StoreDef;
use crate::topology::StoreKind;
use crate::types::error::{Error, Result};
use crate::types::window::Windowed;

/// A store of a [`TopologyTestDriver`](super::TopologyTestDriver)'s task, to read (and write)
/// between piped records.
pub struct TestKeyValueStore<K, V> {
    pub(super) at: StoreAt,
    pub(super) _types: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> TestKeyValueStore<K, V> {
    fn with<T>(&self, f: impl FnOnce(&mut KeyValueStore<'_, K, V>) -> Result<T>) -> Result<T> {
        self.at.with::<K, V, T>(|_, serdes, store, scratch, id| {
            f(&mut KeyValueStore::new(store, scratch, serdes, id))
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        self.with(|s| s.get(key))
    }

    /// Every entry, in key order.
    pub fn all(&self) -> Result<Vec<(K, V)>> {
        self.with(|s| s.all())
    }

    /// The entries with `from <= key <= to`.
    pub fn range(&self, from: &K, to: &K) -> Result<Vec<(K, V)>> {
        self.with(|s| s.range(from, to))
    }

    /// About how many entries there are.
    pub fn approximate_num_entries(&self) -> Result<u64> {
        self.with(|s| Ok(s.approximate_num_entries()))
    }

    /// Sets `key` to `value` (committed with the next piped record).
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        self.with(|s| s.put(key, value))
    }
}

/// A window store of a topology under test, read between piped records.
pub struct TestWindowStore<K, V> {
    pub(super) at: StoreAt,
    pub(super) _types: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> TestWindowStore<K, V> {
    fn with<T>(&self, f: impl FnOnce(&mut WindowStore<'_, K, V>) -> Result<T>) -> Result<T> {
        self.at.with::<K, V, T>(|def, serdes, store, scratch, id| {
            let StoreKind::Window {
                window_ms,
                retain_duplicates,
                ..
            } = def.kind
            else {
                return Err(Error::Topology(format!(
                    "store {:?} is not a window store",
                    def.name
                )));
            };
            f(&mut WindowStore::new(
                store,
                scratch,
                serdes,
                window_ms,
                retain_duplicates,
                0,
                id,
            ))
        })
    }

    /// `key`'s windows starting in `[time_from, time_to]`: (start, value).
    pub fn fetch(&self, key: &K, time_from: i64, time_to: i64) -> Result<Vec<(i64, V)>> {
        self.with(|s| s.fetch(key, time_from, time_to))
    }

    /// The windows of keys `key_from..=key_to` starting in `[time_from, time_to]`.
    pub fn fetch_range(
        &self,
        key_from: &K,
        key_to: &K,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.fetch_range(key_from, key_to, time_from, time_to))
    }

    /// Every window the store holds.
    pub fn all(&self) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.all())
    }

    /// Every key's windows starting in `[time_from, time_to]`.
    pub fn fetch_all(&self, time_from: i64, time_to: i64) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.fetch_all(time_from, time_to))
    }
}

/// A session store of a topology under test, read between piped records.
pub struct TestSessionStore<K, V> {
    pub(super) at: StoreAt,
    pub(super) _types: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> TestSessionStore<K, V> {
    fn with<T>(&self, f: impl FnOnce(&mut SessionStore<'_, K, V>) -> Result<T>) -> Result<T> {
        self.at.with::<K, V, T>(|def, serdes, store, scratch, id| {
            if !matches!(def.kind, StoreKind::Session { .. }) {
                return Err(Error::Topology(format!(
                    "store {:?} is not a session store",
                    def.name
                )));
            }
            f(&mut SessionStore::new(store, scratch, serdes, 0, id))
        })
    }

    /// Every session of `key`.
    pub fn fetch(&self, key: &K) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.fetch(key))
    }

    /// `key`'s sessions ending at or after `earliest_end` and starting at or before
    /// `latest_start`.
    pub fn find_sessions(
        &self,
        key: &K,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.find_sessions(key, earliest_end, latest_start))
    }

    /// Every session the store holds.
    pub fn all(&self) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.all())
    }
}

/// Where a store of the driver's topology is: its index, its task, its slot in the task.
pub(super) struct StoreAt {
    pub(super) inner: Rc<RefCell<Inner>>,
    pub(super) store: usize,
    pub(super) task: usize,
    pub(super) slot: usize,
}

impl StoreAt {
    /// Calls `f` with the store's definition, its typed serdes, the store, the scratch buffers
    /// and its task's id.
    fn with<K: 'static, V: 'static, T>(
        &self,
        f: impl FnOnce(
            &StoreDef,
            &StoreSerdes<K, V>,
            &mut CachedStore,
            &mut StoreScratch,
            riffle_state_dir::TaskId,
        ) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.inner.borrow_mut();
        let inner = &mut *guard;
        let topology = inner.topology.clone();
        let def = &topology.stores[self.store];
        let serdes = def
            .serdes
            .as_ref()
            .and_then(|s| s.downcast_ref::<StoreSerdes<K, V>>())
            .ok_or_else(|| Error::IllegalState("store serdes changed".into()))?;
        let task = &mut inner.tasks[self.task];
        let id = task.id;
        f(
            def,
            serdes,
            &mut task.stores.stores[self.slot],
            &mut inner.scratch.store,
            id,
        )
    }
}
