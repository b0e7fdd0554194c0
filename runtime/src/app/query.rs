//! Interactive queries (Kafka Streams' IQ): a read-only view of a key-value, window or session
//! store over every task of this instance, from outside the topology while the application
//! runs.
//!
//! A store belongs to the stream thread running its task, so a query is answered by the
//! threads: [`StreamsApp::store`](crate::StreamsApp::store) gives a [`ReadOnlyKeyValueStore`]
//! whose calls put a request in every thread's queue, wake the threads, and merge their
//! answers. A thread looks at its queue once per loop iteration (one relaxed load when it is
//! empty) and answers from its running tasks' stores as processing sees them — the store
//! overlaid with its write cache. While a task with the store is still restoring, an answer that
//! depends on it is [`Error::InvalidStateStore`] (Kafka's `InvalidStateStoreException`): a
//! `get` (or one key's window or session fetch) whose key no running task has, and every
//! `range`, `all` and count.

use std::marker::PhantomData;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::engine::instance::InstanceWiring;
use crate::engine::lifecycle::Lifecycle;
pub(crate) use crate::engine::query::{QueryAnswer, QueryInbox, QueryOp, StoreQuery};
use crate::processor::StoreSerdes;
use crate::serdes::SerdeRef;
use crate::state::{SegmentedKind, decode_entry, encode_key, key_bounds};
use crate::topology::{StoreDef, StoreKind, Topology};
use crate::types::error::{Error, Result, SerializationExceptionOrigin};
use crate::types::window::{Window, Windowed};

/// How long a query waits for the stream threads' answers.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Which store to query, and as what (Kafka's `StoreQueryParameters`).
#[derive(Debug)]
pub struct StoreQueryParameters<T> {
    pub(crate) name: String,
    _kind: T,
}

impl<T> StoreQueryParameters<T> {
    /// The store `name`, of the type `kind` says ([`QueryableStoreTypes::key_value`]).
    pub fn from_name_and_type(name: impl Into<String>, kind: T) -> Self {
        StoreQueryParameters {
            name: name.into(),
            _kind: kind,
        }
    }
}

/// The store types that can be queried (Kafka's `QueryableStoreTypes`).
#[derive(Debug)]
pub struct QueryableStoreTypes;

/// A key-value store of `K` and `V` (what [`QueryableStoreTypes::key_value`] names).
#[derive(Debug)]
pub struct KeyValueStoreType<K, V>(PhantomData<fn() -> (K, V)>);

/// A window store of `K` and `V` (what [`QueryableStoreTypes::window_store`] names).
#[derive(Debug)]
pub struct WindowStoreType<K, V>(PhantomData<fn() -> (K, V)>);

/// A session store of `K` and `V` (what [`QueryableStoreTypes::session_store`] names).
#[derive(Debug)]
pub struct SessionStoreType<K, V>(PhantomData<fn() -> (K, V)>);

impl QueryableStoreTypes {
    /// A key-value store of keys `K` and values `V`: a DSL aggregation's (`count`: values
    /// `i64`) or one built with [`crate::Stores::key_value_store_builder`].
    pub fn key_value<K, V>() -> KeyValueStoreType<K, V> {
        KeyValueStoreType(PhantomData)
    }

    /// A window store of keys `K` and values `V`: a time or sliding windowed aggregation's
    /// (`windowed_by(..).count()`: values `i64`) or one built with
    /// [`crate::Stores::window_store_builder`].
    pub fn window_store<K, V>() -> WindowStoreType<K, V> {
        WindowStoreType(PhantomData)
    }

    /// A session store of keys `K` and values `V`: a session windowed aggregation's or one
    /// built with [`crate::Stores::session_store_builder`].
    pub fn session_store<K, V>() -> SessionStoreType<K, V> {
        SessionStoreType(PhantomData)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A store type [`crate::StreamsApp::store`] can give a view of: [`KeyValueStoreType`],
/// [`WindowStoreType`] or [`SessionStoreType`], made by [`QueryableStoreTypes`].
pub trait QueryableStoreType: sealed::Sealed {
    /// The read-only view of such a store.
    type Store;
    #[doc(hidden)]
    fn view(app: &ViewSource, name: &str) -> Result<Self::Store>;
}

/// What a view is made from, opaque outside riffle: the topology (for the store's definition),
/// the stream threads' query inboxes, whether the application runs, and the backend (to wake the
/// threads).
#[doc(hidden)]
pub struct ViewSource {
    pub(crate) wiring: Arc<InstanceWiring>,
    pub(crate) queries: Arc<QueryInbox>,
    pub(crate) lifecycle: Arc<Lifecycle>,
}

impl<K, V> sealed::Sealed for KeyValueStoreType<K, V> {}
impl<K, V> sealed::Sealed for WindowStoreType<K, V> {}
impl<K, V> sealed::Sealed for SessionStoreType<K, V> {}

impl<K: 'static, V: 'static> QueryableStoreType for KeyValueStoreType<K, V> {
    type Store = ReadOnlyKeyValueStore<K, V>;
    fn view(app: &ViewSource, name: &str) -> Result<Self::Store> {
        let (_, serdes) = find::<K, V>(&app.wiring.topology, name, "a key-value", |k| {
            matches!(k, StoreKind::KeyValue)
        })?;
        Ok(ReadOnlyKeyValueStore {
            asker: Asker::new(app, name),
            key_serde: serdes.key.clone(),
            value_serde: serdes.value.clone(),
        })
    }
}

impl<K: 'static, V: 'static> QueryableStoreType for WindowStoreType<K, V> {
    type Store = ReadOnlyWindowStore<K, V>;
    fn view(app: &ViewSource, name: &str) -> Result<Self::Store> {
        let (def, serdes) = find::<K, V>(&app.wiring.topology, name, "a window", |k| {
            matches!(k, StoreKind::Window { .. })
        })?;
        let StoreKind::Window { window_ms, .. } = def.kind else {
            unreachable!("find checked the kind");
        };
        Ok(ReadOnlyWindowStore {
            asker: Asker::new(app, name),
            key_serde: serdes.key.clone(),
            value_serde: serdes.value.clone(),
            window_ms,
        })
    }
}

impl<K: 'static, V: 'static> QueryableStoreType for SessionStoreType<K, V> {
    type Store = ReadOnlySessionStore<K, V>;
    fn view(app: &ViewSource, name: &str) -> Result<Self::Store> {
        let (_, serdes) = find::<K, V>(&app.wiring.topology, name, "a session", |k| {
            matches!(k, StoreKind::Session { .. })
        })?;
        Ok(ReadOnlySessionStore {
            asker: Asker::new(app, name),
            key_serde: serdes.key.clone(),
            value_serde: serdes.value.clone(),
        })
    }
}

fn kind_name(kind: &StoreKind) -> &'static str {
    match kind {
        StoreKind::KeyValue => "a key-value",
        StoreKind::Window { .. } => "a window",
        StoreKind::Session { .. } => "a session",
    }
}

/// The store `name` of the topology, if it is of the kind `want` accepts and holds `K` and `V`.
fn find<'a, K: 'static, V: 'static>(
    topology: &'a Topology,
    name: &str,
    wanted: &str,
    want: impl Fn(&StoreKind) -> bool,
) -> Result<(&'a StoreDef, &'a StoreSerdes<K, V>)> {
    let invalid = |reason: String| Error::InvalidStateStore {
        store: name.to_owned(),
        reason,
    };
    let Some(def) = topology.stores.iter().find(|s| s.name == name) else {
        return Err(invalid("the topology has no store of that name".into()));
    };
    if !want(&def.kind) {
        return Err(invalid(format!(
            "it is {} store, not {wanted} store",
            kind_name(&def.kind)
        )));
    }
    let serdes = def
        .serdes
        .as_ref()
        .and_then(|s| s.downcast_ref::<StoreSerdes<K, V>>())
        .ok_or_else(|| {
            invalid(format!(
                "it does not hold keys {} and values {}",
                std::any::type_name::<K>(),
                std::any::type_name::<V>()
            ))
        })?;
    Ok((def, serdes))
}

/// Puts queries to the stream threads for one store's view.
struct Asker {
    queries: Arc<QueryInbox>,
    lifecycle: Arc<Lifecycle>,
    backend: Arc<dyn Backend>,
    name: String,
}

impl Asker {
    fn new(source: &ViewSource, name: &str) -> Self {
        Asker {
            queries: source.queries.clone(),
            lifecycle: source.lifecycle.clone(),
            backend: source.wiring.backend.clone(),
            name: name.to_owned(),
        }
    }

    fn invalid(&self, reason: String) -> Error {
        Error::InvalidStateStore {
            store: self.name.clone(),
            reason,
        }
    }

    fn migrating(&self, restoring: usize) -> Error {
        self.invalid(format!(
            "{restoring} of its local tasks are restoring (the store is migrating); try again"
        ))
    }

    /// Puts `op` in every stream thread's queue, wakes them, and waits for every answer.
    fn ask(&self, op: QueryOp) -> Result<(Vec<QueryAnswer>, usize)> {
        if self.lifecycle.is_shutting_down() {
            return Err(self.invalid("the application is not running".into()));
        }
        let (tx, rx) = mpsc::channel();
        let threads = self.queries.slots();
        for slot in 0..threads {
            self.queries.post(
                slot,
                StoreQuery {
                    store: self.name.clone(),
                    op: op.clone(),
                    reply: tx.clone(),
                },
            );
        }
        drop(tx);
        let deadline = Instant::now() + QUERY_TIMEOUT;
        let mut answers = Vec::with_capacity(threads);
        while answers.len() < threads {
            self.backend.wake_waiters();
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(answer) => answers.push(answer?),
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    return Err(self.invalid(format!(
                        "{} of {threads} stream threads did not answer (not running)",
                        threads - answers.len()
                    )));
                }
            }
        }
        let restoring = answers.iter().map(|a| a.restoring).sum();
        Ok((answers, restoring))
    }

    /// Every thread's entries for `op`, sorted by key; an error while a holding task restores
    /// (`one_key`: only if no running task had an entry, as the key's task is then running).
    fn entries(&self, op: QueryOp, one_key: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (answers, restoring) = self.ask(op)?;
        let mut all: Vec<(Vec<u8>, Vec<u8>)> =
            answers.into_iter().flat_map(|a| a.entries).collect();
        if restoring > 0 && (!one_key || all.is_empty()) {
            return Err(self.migrating(restoring));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// `key`'s bytes through the store's key serde.
    fn key_bytes<T: 'static>(&self, serde: &SerdeRef<T>, key: &T) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        match serde.serialize(key, &mut out) {
            Ok(()) => Ok(out),
            Err(source) => Err(Error::SerializeState {
                store: self.name.clone(),
                origin: SerializationExceptionOrigin::Key,
                source,
            }),
        }
    }

    fn decode<T: 'static>(&self, serde: &SerdeRef<T>, bytes: &[u8], what: &str) -> Result<T> {
        serde
            .deserialize(Some(bytes))
            .map_err(|source| self.invalid(format!("{what} its serde cannot read: {source}")))
    }
}

/// A read-only view of a key-value store over every local task (Kafka's
/// `ReadOnlyKeyValueStore`); results are returned whole rather than as iterators.
pub struct ReadOnlyKeyValueStore<K, V> {
    asker: Asker,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
}

impl<K, V> std::fmt::Debug for ReadOnlyKeyValueStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyKeyValueStore")
            .field("store", &self.asker.name)
            .finish()
    }
}

impl<K: 'static, V: 'static> ReadOnlyKeyValueStore<K, V> {
    /// The value of `key` in whichever local task holds it.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let bytes = self.asker.key_bytes(&self.key_serde, key)?;
        let entries = self.asker.entries(QueryOp::Get(bytes), true)?;
        match entries.into_iter().next() {
            Some((_, value)) => self.value(&value).map(Some),
            None => Ok(None),
        }
    }

    /// The entries with `from <= key <= to` in the serialized keys' order, over every local
    /// task (Kafka's `range`).
    pub fn range(&self, from: &K, to: &K) -> Result<Vec<(K, V)>> {
        let f = self.asker.key_bytes(&self.key_serde, from)?;
        let t = self.asker.key_bytes(&self.key_serde, to)?;
        self.entries(QueryOp::Range(Some(f), Some(t)))
    }

    /// Every entry, in the serialized keys' order, over every local task.
    pub fn all(&self) -> Result<Vec<(K, V)>> {
        self.entries(QueryOp::Range(None, None))
    }

    /// The number of entries (approximate for persistent stores) over every local task.
    pub fn approximate_num_entries(&self) -> Result<u64> {
        let (answers, restoring) = self.asker.ask(QueryOp::Count)?;
        if restoring > 0 {
            return Err(self.asker.migrating(restoring));
        }
        Ok(answers.iter().map(|a| a.count).sum())
    }

    fn entries(&self, op: QueryOp) -> Result<Vec<(K, V)>> {
        self.asker
            .entries(op, false)?
            .into_iter()
            .map(|(k, v)| {
                let key = self.asker.decode(&self.key_serde, &k, "a key")?;
                Ok((key, self.value(&v)?))
            })
            .collect()
    }

    fn value(&self, bytes: &[u8]) -> Result<V> {
        self.asker.decode(&self.value_serde, bytes, "a value")
    }
}

/// The encoded-key bounds `[lo, hi)` of the serialized keys `from..=to` (absent: unbounded).
fn encoded_bounds<K: 'static>(
    asker: &Asker,
    serde: &SerdeRef<K>,
    from: Option<&K>,
    to: Option<&K>,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut lo = Vec::new();
    if let Some(k) = from {
        encode_key(&asker.key_bytes(serde, k)?, &mut lo);
    }
    let hi = match to {
        Some(k) => key_bounds(&asker.key_bytes(serde, k)?).1,
        None => Vec::new(),
    };
    Ok((lo, hi))
}

/// A read-only view of a window store over every local task (Kafka's `ReadOnlyWindowStore`):
/// a time or sliding windowed aggregation's, or a [`crate::Stores`] window store. Results come
/// whole, by key (serialized order) then window start; `backward_` variants reverse that.
pub struct ReadOnlyWindowStore<K, V> {
    asker: Asker,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    window_ms: i64,
}

impl<K, V> std::fmt::Debug for ReadOnlyWindowStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyWindowStore")
            .field("store", &self.asker.name)
            .field("window_ms", &self.window_ms)
            .finish()
    }
}

impl<K: 'static, V: 'static> ReadOnlyWindowStore<K, V> {
    fn scan(
        &self,
        lo: Vec<u8>,
        hi: Vec<u8>,
        from: i64,
        to: i64,
        one_key: bool,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let entries = self
            .asker
            .entries(QueryOp::Segmented { lo, hi, from, to }, one_key)?;
        let mut out = Vec::with_capacity(entries.len());
        for (entry, value) in entries {
            let decoded = decode_entry(&self.asker.name, SegmentedKind::Window, &entry)
                .map_err(|e| self.asker.invalid(e.to_string()))?;
            let key = self.asker.decode(&self.key_serde, &decoded.key, "a key")?;
            let value = self.asker.decode(&self.value_serde, &value, "a value")?;
            let window = Window::new(decoded.time, decoded.time.saturating_add(self.window_ms));
            out.push((Windowed::new(key, window), value));
        }
        Ok(out)
    }

    /// The value of `key` in the window starting at `window_start` (Kafka's `fetch(key, time)`).
    pub fn fetch_window(&self, key: &K, window_start: i64) -> Result<Option<V>> {
        Ok(self
            .fetch(key, window_start, window_start)?
            .into_iter()
            .next()
            .map(|(_, v)| v))
    }

    /// `key`'s windows starting in `[time_from, time_to]`: (window start, value), by start.
    pub fn fetch(&self, key: &K, time_from: i64, time_to: i64) -> Result<Vec<(i64, V)>> {
        let raw = self.asker.key_bytes(&self.key_serde, key)?;
        let (lo, hi) = key_bounds(&raw);
        Ok(self
            .scan(lo, hi, time_from, time_to, true)?
            .into_iter()
            .map(|(w, v)| (w.window.start, v))
            .collect())
    }

    /// [`ReadOnlyWindowStore::fetch`], latest window first.
    pub fn backward_fetch(&self, key: &K, time_from: i64, time_to: i64) -> Result<Vec<(i64, V)>> {
        let mut out = self.fetch(key, time_from, time_to)?;
        out.reverse();
        Ok(out)
    }

    /// The windows of keys `key_from..=key_to` (serialized order) starting in
    /// `[time_from, time_to]`.
    pub fn fetch_range(
        &self,
        key_from: &K,
        key_to: &K,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let (lo, hi) = encoded_bounds(&self.asker, &self.key_serde, Some(key_from), Some(key_to))?;
        self.scan(lo, hi, time_from, time_to, false)
    }

    /// Every key's windows starting in `[time_from, time_to]`.
    pub fn fetch_all(&self, time_from: i64, time_to: i64) -> Result<Vec<(Windowed<K>, V)>> {
        self.scan(Vec::new(), Vec::new(), time_from, time_to, false)
    }

    /// Every window the store holds.
    pub fn all(&self) -> Result<Vec<(Windowed<K>, V)>> {
        self.fetch_all(i64::MIN, i64::MAX)
    }

    /// [`ReadOnlyWindowStore::all`], in reverse order.
    pub fn backward_all(&self) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.all()?;
        out.reverse();
        Ok(out)
    }
}

/// A read-only view of a session store over every local task (Kafka's
/// `ReadOnlySessionStore`): a session windowed aggregation's, or a [`crate::Stores`] session
/// store. Results come whole, by key (serialized order) then session end; `backward_` variants
/// reverse that.
pub struct ReadOnlySessionStore<K, V> {
    asker: Asker,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
}

impl<K, V> std::fmt::Debug for ReadOnlySessionStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlySessionStore")
            .field("store", &self.asker.name)
            .finish()
    }
}

impl<K: 'static, V: 'static> ReadOnlySessionStore<K, V> {
    fn scan(
        &self,
        lo: Vec<u8>,
        hi: Vec<u8>,
        earliest_end: i64,
        latest_start: i64,
        one_key: bool,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let op = QueryOp::Segmented {
            lo,
            hi,
            from: earliest_end,
            to: i64::MAX,
        };
        let entries = self.asker.entries(op, one_key)?;
        let mut out = Vec::with_capacity(entries.len());
        for (entry, value) in entries {
            let decoded = decode_entry(&self.asker.name, SegmentedKind::Session, &entry)
                .map_err(|e| self.asker.invalid(e.to_string()))?;
            if decoded.second > latest_start {
                continue;
            }
            let key = self.asker.decode(&self.key_serde, &decoded.key, "a key")?;
            let value = self.asker.decode(&self.value_serde, &value, "a value")?;
            out.push((
                Windowed::new(key, Window::new(decoded.second, decoded.time)),
                value,
            ));
        }
        Ok(out)
    }

    /// The value of the session of `key` from `start` to `end`.
    pub fn fetch_session(&self, key: &K, start: i64, end: i64) -> Result<Option<V>> {
        Ok(self
            .find_sessions(key, end, start)?
            .into_iter()
            .find(|(w, _)| w.window == Window::new(start, end))
            .map(|(_, v)| v))
    }

    /// `key`'s sessions ending at or after `earliest_end` and starting at or before
    /// `latest_start`, by end.
    pub fn find_sessions(
        &self,
        key: &K,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        let raw = self.asker.key_bytes(&self.key_serde, key)?;
        let (lo, hi) = key_bounds(&raw);
        self.scan(lo, hi, earliest_end, latest_start, true)
    }

    /// Every session of `key`, by end (Kafka's `fetch(key)`).
    pub fn fetch(&self, key: &K) -> Result<Vec<(Windowed<K>, V)>> {
        self.find_sessions(key, i64::MIN, i64::MAX)
    }

    /// [`ReadOnlySessionStore::fetch`], latest first.
    pub fn backward_fetch(&self, key: &K) -> Result<Vec<(Windowed<K>, V)>> {
        let mut out = self.fetch(key)?;
        out.reverse();
        Ok(out)
    }

    /// The sessions of keys `key_from..=key_to` (serialized order).
    pub fn fetch_range(&self, key_from: &K, key_to: &K) -> Result<Vec<(Windowed<K>, V)>> {
        let (lo, hi) = encoded_bounds(&self.asker, &self.key_serde, Some(key_from), Some(key_to))?;
        self.scan(lo, hi, i64::MIN, i64::MAX, false)
    }
}
