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
    /// In memory (Kafka's `Stores.inMemoryKeyValueStore`); rebuilt from the changelog on start.
    InMemory,
    /// On disk in the state directory (riffle's fjall database, where Kafka's default is
    /// RocksDB): the default, as Kafka's. After a restart it restores only the changelog
    /// written since its last checkpoint.
    #[default]
    Persistent,
}

/// How an aggregation's or a table's store is named, typed and backed (Kafka's
/// `Materialized<K, V, S>`): its name, its key and value serdes, logging, caching, retention
/// and [`StoreType`]. Without serdes the store takes its operation's (the grouping's key
/// serde, the aggregation's value serde); without a store type it is persistent, as Kafka's.
///
/// ```
/// use riffle::dsl::StoreType;
/// use riffle::{Consumed, Materialized, Serdes, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// let words = builder.stream("words", Consumed::with(Serdes::string(), Serdes::string()));
/// // Kafka's `Materialized.with(Serdes.String(), Serdes.Long())`.
/// words.group_by_key().count_with(Materialized::with(Serdes::string(), Serdes::i64()));
/// // A named in-memory store (Kafka's `Materialized.as(Stores.inMemoryKeyValueStore(..))`).
/// words.group_by_key().count_with(
///     Materialized::named("counts").with_store_type(StoreType::InMemory),
/// );
/// ```
pub struct Materialized<K, V> {
    pub(crate) name: Option<String>,
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) logging: bool,
    pub(crate) store_type: StoreType,
    pub(crate) caching: bool,
    pub(crate) retention: Option<std::time::Duration>,
}

impl<K, V> Default for Materialized<K, V> {
    fn default() -> Self {
        Materialized {
            name: None,
            key_serde: None,
            value_serde: None,
            logging: true,
            store_type: StoreType::default(),
            caching: true,
            retention: None,
        }
    }
}

impl<K, V> Materialized<K, V> {
    /// An unnamed, logged, cached, persistent store with its operation's serdes.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store named `name`; its changelog is `<application_id>-<name>-changelog` (Kafka's
    /// `Materialized.as(name)`).
    pub fn named(name: impl Into<String>) -> Self {
        Materialized {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// An unnamed store with these key and value serdes (Kafka's `Materialized.with`).
    pub fn with(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Materialized {
            key_serde: Some(key_serde),
            value_serde: Some(value_serde),
            ..Self::default()
        }
    }

    /// The serde of the stored keys (Kafka's `withKeySerde`).
    pub fn with_key_serde(mut self, serde: SerdeRef<K>) -> Self {
        self.key_serde = Some(serde);
        self
    }

    /// The serde of the stored values (Kafka's `withValueSerde`).
    pub fn with_value_serde(mut self, serde: SerdeRef<V>) -> Self {
        self.value_serde = Some(serde);
        self
    }

    /// The key serde given, else `operation`'s.
    pub(crate) fn key_serde_or(&self, operation: &SerdeRef<K>) -> SerdeRef<K> {
        self.key_serde.clone().unwrap_or_else(|| operation.clone())
    }

    /// The value serde given, else `operation`'s.
    pub(crate) fn value_serde_or(&self, operation: &SerdeRef<V>) -> SerdeRef<V> {
        self.value_serde
            .clone()
            .unwrap_or_else(|| operation.clone())
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

    /// Chooses where the store keeps its data ([`StoreType::Persistent`] unless told).
    pub fn with_store_type(mut self, store_type: StoreType) -> Self {
        self.store_type = store_type;
        self
    }
}
