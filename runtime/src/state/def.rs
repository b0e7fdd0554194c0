//! What a store is declared as: its name, kind (key-value, window, session), whether it is
//! logged, persistent, cached, and its typed serdes. The topology keeps one per store; tasks
//! build their stores from it.

use std::any::Any;
use std::sync::Arc;

use crate::serdes::SerdeRef;

/// A store the topology declares.
#[derive(Clone)]
pub(crate) struct StoreDef {
    pub(crate) name: String,
    pub(crate) logged: bool,
    pub(crate) persistent: bool,
    /// Kafka's record cache: one changelog write per key per commit (`false`: every write).
    pub(crate) caching: bool,
    /// Values kept with their timestamps (a DSL aggregation's store).
    pub(crate) timestamped: bool,
    /// The typed serdes of a store built with [`crate::Stores`] (`StoreSerdes<K, V>`).
    pub(crate) serdes: Option<Arc<dyn Any + Send + Sync>>,
    /// Key-value, window or session store.
    pub(crate) kind: StoreKind,
    /// A key-value store read by key prefix between commits (a foreign-key join's subscription
    /// store): its cache keeps an ordered index of its keys.
    pub(crate) ordered_cache: bool,
    /// A table's store whose changelog is the table's source topic (Kafka Streams' source-topic
    /// changelog): nothing is written to a changelog at commit, the store's position is the
    /// input's consumed offset, and it is restored from the source topic up to the committed
    /// offset.
    pub(crate) source_topic: Option<String>,
}

/// What a store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    KeyValue,
    /// Windows, kept `retention_ms` in segments of `segment_ms`; `ordered`: read by key range
    /// between commits (its cache keeps an ordered index).
    Window {
        retention_ms: i64,
        segment_ms: i64,
        ordered: bool,
        /// A window's length: its end is its start plus this.
        window_ms: i64,
        /// Keeps every put of a key and window (a sequence number tells them apart).
        retain_duplicates: bool,
    },
    /// Sessions, kept `retention_ms` (by their end) in segments of `segment_ms`.
    Session {
        retention_ms: i64,
        segment_ms: i64,
    },
}

impl StoreKind {
    /// How long a windowed changelog must keep records (`None`: compacted forever).
    pub(crate) fn retention_ms(&self) -> Option<i64> {
        match *self {
            StoreKind::KeyValue => None,
            StoreKind::Window { retention_ms, .. } | StoreKind::Session { retention_ms, .. } => {
                Some(retention_ms)
            }
        }
    }
}

/// The serdes of a store built with [`crate::Stores`], kept type-erased in the topology.
pub(crate) struct StoreSerdes<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
}
