//! Options of the DSL's operations, named as in Kafka Streams.

use crate::serdes::SerdeRef;
pub use crate::topology::options::{Consumed, Produced};

/// How a grouping writes its repartition topic, and what it is named.
pub struct Grouped<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
    pub(crate) name: Option<String>,
}

impl<K, V> Grouped<K, V> {
    /// Group with these serdes.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Grouped {
            key,
            value,
            name: None,
        }
    }

    /// Names the repartition topic `<application_id>-<name>-repartition`.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Where a store keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StoreType {
    /// In memory; rebuilt from the changelog on start.
    #[default]
    InMemory,
    /// On disk in the state directory.
    Persistent,
}

/// How an aggregation's store is named, typed and backed.
pub struct Materialized<V> {
    pub(crate) name: Option<String>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) logging: bool,
    pub(crate) store_type: StoreType,
    pub(crate) caching: bool,
    pub(crate) retention: Option<std::time::Duration>,
}

impl<V> Default for Materialized<V> {
    fn default() -> Self {
        Materialized {
            name: None,
            value_serde: None,
            logging: true,
            store_type: StoreType::default(),
            caching: true,
            retention: None,
        }
    }
}

impl<V> Materialized<V> {
    /// An unnamed, logged, in-memory store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store named `name`; its changelog is `<application_id>-<name>-changelog`.
    pub fn named(name: impl Into<String>) -> Self {
        Materialized {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// The serde of the stored values.
    pub fn with_value_serde(mut self, serde: SerdeRef<V>) -> Self {
        self.value_serde = Some(serde);
        self
    }

    /// Turns the changelog off (the store is then not restored after a restart).
    pub fn without_logging(mut self) -> Self {
        self.logging = false;
        self
    }

    /// Every update reaches the changelog and, for windowed aggregations, downstream (Kafka's
    /// `withCachingDisabled`); by default updates to one key or window collapse between commits.
    pub fn with_caching_disabled(mut self) -> Self {
        self.caching = false;
        self
    }

    /// Updates collapse per key or window between commits (the default).
    pub fn with_caching_enabled(mut self) -> Self {
        self.caching = true;
        self
    }

    /// How long a windowed aggregation's store keeps its windows: at least the window size
    /// plus its grace period (the default, as in Kafka Streams). The store drops older windows
    /// a segment at a time.
    pub fn with_retention(mut self, retention: std::time::Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Chooses where the store keeps its data.
    pub fn with_store_type(mut self, store_type: StoreType) -> Self {
        self.store_type = store_type;
        self
    }
}
