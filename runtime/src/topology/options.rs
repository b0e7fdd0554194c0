//! How the low-level API and the DSL read a source topic ([`Consumed`]) and write a sink
//! ([`Produced`]).

use std::sync::Arc;

use crate::processor::{StreamPartitioner, StreamPartitionerRef};
use crate::serdes::SerdeRef;
use crate::types::timestamp::TimestampExtractorRef;

/// How a source topic's keys and values are read, and which timestamps its records get.
pub struct Consumed<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
    pub(crate) extractor: Option<TimestampExtractorRef>,
}

impl<K, V> Consumed<K, V> {
    /// Read with these serdes, timestamps from the config's extractor.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Consumed {
            key,
            value,
            extractor: None,
        }
    }

    /// Timestamps from `extractor` instead of the config's `default_timestamp_extractor`.
    pub fn with_timestamp_extractor(mut self, extractor: TimestampExtractorRef) -> Self {
        self.extractor = Some(extractor);
        self
    }
}

/// How a sink writes keys and values, to which partitions, and what the sink is named.
pub struct Produced<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
    pub(crate) name: Option<String>,
    pub(crate) partitioner: Option<StreamPartitionerRef<K, V>>,
}

impl<K, V> Produced<K, V> {
    /// Write with these serdes, partitioned by the serialized key (Kafka's default
    /// partitioner).
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Produced {
            key,
            value,
            name: None,
            partitioner: None,
        }
    }

    /// Names the sink node (Kafka's `Produced.withName`), instead of `KSTREAM-SINK-<n>`.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Each record goes to the partition `partitioner` chooses, or, when it gives none, where
    /// the default partitioner puts it (Kafka's `Produced.withStreamPartitioner`).
    pub fn with_stream_partitioner(mut self, partitioner: impl StreamPartitioner<K, V>) -> Self {
        self.partitioner = Some(Arc::new(partitioner));
        self
    }
}
