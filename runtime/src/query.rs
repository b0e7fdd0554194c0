//! Interactive queries (Kafka Streams' IQ): a read-only view of a key-value store over every
//! task of this instance, from outside the topology while the application runs.
//!
//! A store belongs to the stream thread running its task, so a query is answered by the
//! threads: [`StreamsApp::store`](crate::StreamsApp::store) gives a [`ReadOnlyKeyValueStore`]
//! whose calls put a request in every thread's queue, wake the threads, and merge their
//! answers. A thread looks at its queue once per loop iteration (one relaxed load when it is
//! empty) and answers from its running tasks' stores as processing sees them — the store
//! overlaid with its write cache. While a task with the store is still restoring, an answer that
//! depends on it is [`Error::InvalidStateStore`] (Kafka's `InvalidStateStoreException`): a
//! `get` whose key no running task has, and every `range`, `all` and count.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, mpsc};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::processor::StoreSerdes;
use crate::serdes::SerdeRef;
use crate::shared::AppShared;
use crate::topology::StoreKind;

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

impl QueryableStoreTypes {
    /// A key-value store of keys `K` and values `V`: a DSL aggregation's (`count`: values
    /// `i64`) or one built with [`crate::Stores::key_value_store_builder`].
    pub fn key_value<K, V>() -> KeyValueStoreType<K, V> {
        KeyValueStoreType(PhantomData)
    }
}

/// What a query asks of one thread's stores.
#[derive(Debug, Clone)]
pub(crate) enum QueryOp {
    Get(Vec<u8>),
    /// Entries with `from <= key <= to` (a bound absent: unbounded).
    Range(Option<Vec<u8>>, Option<Vec<u8>>),
    Count,
}

/// One thread's answer.
#[derive(Debug, Default)]
pub(crate) struct QueryAnswer {
    pub(crate) entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) count: u64,
    /// Tasks of this thread holding the store that are not running yet (restoring).
    pub(crate) restoring: usize,
}

/// A query waiting in a thread's queue.
#[derive(Debug)]
pub(crate) struct StoreQuery {
    pub(crate) store: String,
    pub(crate) op: QueryOp,
    pub(crate) reply: mpsc::Sender<Result<QueryAnswer>>,
}

/// A read-only view of a key-value store over every local task (Kafka's
/// `ReadOnlyKeyValueStore`); results are returned whole rather than as iterators.
pub struct ReadOnlyKeyValueStore<K, V> {
    shared: Arc<AppShared>,
    name: String,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
}

impl<K, V> std::fmt::Debug for ReadOnlyKeyValueStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyKeyValueStore")
            .field("store", &self.name)
            .finish()
    }
}

/// The view of `params.name` for [`crate::StreamsApp::store`].
pub(crate) fn key_value_store<K: 'static, V: 'static>(
    shared: &Arc<AppShared>,
    params: &StoreQueryParameters<KeyValueStoreType<K, V>>,
) -> Result<ReadOnlyKeyValueStore<K, V>> {
    let name = &params.name;
    let Some(def) = shared.topology.stores.iter().find(|s| &s.name == name) else {
        return Err(Error::InvalidStateStore {
            store: name.clone(),
            reason: "the topology has no store of that name".into(),
        });
    };
    if def.kind != StoreKind::KeyValue {
        return Err(Error::InvalidStateStore {
            store: name.clone(),
            reason: "it is a window or session store, not a key-value store".into(),
        });
    }
    let serdes = def
        .serdes
        .as_ref()
        .and_then(|s| s.downcast_ref::<StoreSerdes<K, V>>())
        .ok_or_else(|| Error::InvalidStateStore {
            store: name.clone(),
            reason: format!(
                "it does not hold keys {} and values {}",
                std::any::type_name::<K>(),
                std::any::type_name::<V>()
            ),
        })?;
    Ok(ReadOnlyKeyValueStore {
        shared: shared.clone(),
        name: name.clone(),
        key_serde: serdes.key.clone(),
        value_serde: serdes.value.clone(),
    })
}

impl<K: 'static, V: 'static> ReadOnlyKeyValueStore<K, V> {
    /// The value of `key` in whichever local task holds it.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let mut bytes = Vec::new();
        self.key_serde.serialize(key, &mut bytes);
        let (answers, restoring) = self.ask(QueryOp::Get(bytes))?;
        match answers.into_iter().flat_map(|a| a.entries).next() {
            Some((_, value)) => self.value(&value).map(Some),
            None if restoring > 0 => Err(self.migrating(restoring)),
            None => Ok(None),
        }
    }

    /// The entries with `from <= key <= to` in the serialized keys' order, over every local
    /// task (Kafka's `range`).
    pub fn range(&self, from: &K, to: &K) -> Result<Vec<(K, V)>> {
        let (mut f, mut t) = (Vec::new(), Vec::new());
        self.key_serde.serialize(from, &mut f);
        self.key_serde.serialize(to, &mut t);
        self.entries(QueryOp::Range(Some(f), Some(t)))
    }

    /// Every entry, in the serialized keys' order, over every local task.
    pub fn all(&self) -> Result<Vec<(K, V)>> {
        self.entries(QueryOp::Range(None, None))
    }

    /// The number of entries (approximate for persistent stores) over every local task.
    pub fn approximate_num_entries(&self) -> Result<u64> {
        let (answers, restoring) = self.ask(QueryOp::Count)?;
        if restoring > 0 {
            return Err(self.migrating(restoring));
        }
        Ok(answers.iter().map(|a| a.count).sum())
    }

    fn entries(&self, op: QueryOp) -> Result<Vec<(K, V)>> {
        let (answers, restoring) = self.ask(op)?;
        if restoring > 0 {
            return Err(self.migrating(restoring));
        }
        let mut all: Vec<(Vec<u8>, Vec<u8>)> =
            answers.into_iter().flat_map(|a| a.entries).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter()
            .map(|(k, v)| {
                let key = self.key_serde.deserialize(Some(&k)).map_err(|source| {
                    Error::InvalidStateStore {
                        store: self.name.clone(),
                        reason: format!("a key its serde cannot read: {source}"),
                    }
                })?;
                Ok((key, self.value(&v)?))
            })
            .collect()
    }

    fn value(&self, bytes: &[u8]) -> Result<V> {
        self.value_serde
            .deserialize(Some(bytes))
            .map_err(|source| Error::InvalidStateStore {
                store: self.name.clone(),
                reason: format!("a value its serde cannot read: {source}"),
            })
    }

    fn migrating(&self, restoring: usize) -> Error {
        Error::InvalidStateStore {
            store: self.name.clone(),
            reason: format!(
                "{restoring} of its local tasks are restoring (the store is migrating); try again"
            ),
        }
    }

    /// Puts `op` in every stream thread's queue, wakes them, and waits for every answer.
    fn ask(&self, op: QueryOp) -> Result<(Vec<QueryAnswer>, usize)> {
        let shared = &*self.shared;
        if shared.shutdown.load(Ordering::Acquire) {
            return Err(Error::InvalidStateStore {
                store: self.name.clone(),
                reason: "the application is not running".into(),
            });
        }
        let (tx, rx) = mpsc::channel();
        let threads = shared.queries.len();
        for (slot, queue) in shared.queries.iter().enumerate() {
            queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(StoreQuery {
                    store: self.name.clone(),
                    op: op.clone(),
                    reply: tx.clone(),
                });
            shared.query_pending[slot].store(true, Ordering::Release);
        }
        drop(tx);
        let deadline = Instant::now() + QUERY_TIMEOUT;
        let mut answers = Vec::with_capacity(threads);
        while answers.len() < threads {
            shared.backend.wake_waiters();
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(answer) => answers.push(answer?),
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    return Err(Error::InvalidStateStore {
                        store: self.name.clone(),
                        reason: format!(
                            "{} of {threads} stream threads did not answer (not running)",
                            threads - answers.len()
                        ),
                    });
                }
            }
        }
        let restoring = answers.iter().map(|a| a.restoring).sum();
        Ok((answers, restoring))
    }
}
