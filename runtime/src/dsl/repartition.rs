//! [`KStream::repartition`]: a stream written to a repartition topic and read back, so a new
//! sub-topology reads it partitioned by its current key or by a [`StreamPartitioner`] (Kafka
//! Streams' `KStream.repartition` and `Repartitioned`). The topic is
//! `<application_id>-<name>-repartition`, or `<application_id>-KSTREAM-REPARTITION-<n>-repartition`
//! unnamed; its nodes are named as `createRepartitionedSource` names them
//! (runtime/src/dsl/topics.rs).

use std::sync::Arc;

use crate::dsl::KStream;
use crate::dsl::topics::{RepartitionSpec, repartition_through};
use crate::processor::{StreamPartitioner, StreamPartitionerRef};
use crate::serdes::{DefaultSerde, SerdeRef};

/// How [`KStream::repartition_with`] writes its topic: serdes, name, partition count and
/// partitioner (Kafka Streams' `Repartitioned`).
pub struct Repartitioned<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
    pub(crate) name: Option<String>,
    pub(crate) partitions: Option<u32>,
    pub(crate) partitioner: Option<StreamPartitionerRef<K, V>>,
}

impl<K, V> Repartitioned<K, V> {
    /// Write and read the topic with these serdes (Kafka's `Repartitioned.with`).
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Repartitioned {
            key,
            value,
            name: None,
            partitions: None,
            partitioner: None,
        }
    }

    /// Names the topic `<application_id>-<name>-repartition` and its nodes `<name>-repartition-sink`,
    /// `-filter` and `-source` (Kafka's `Repartitioned.withName`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Gives the topic `partitions` partitions, and the sub-topology reading it as many tasks
    /// (Kafka's `withNumberOfPartitions`); else it has as many as the sub-topology writing it.
    /// The test driver gives every topic one partition.
    pub fn with_number_of_partitions(mut self, partitions: u32) -> Self {
        self.partitions = Some(partitions);
        self
    }

    /// Each record goes to the partition `partitioner` chooses, or where the default
    /// partitioner puts it when it gives none (Kafka's `withStreamPartitioner`).
    pub fn with_stream_partitioner(mut self, partitioner: impl StreamPartitioner<K, V>) -> Self {
        self.partitioner = Some(Arc::new(partitioner));
        self
    }
}

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// The stream through a repartition topic, with the default serdes of `K` and `V`.
    pub fn repartition(&self) -> KStream<K, V>
    where
        K: DefaultSerde,
        V: DefaultSerde,
    {
        self.repartition_with(Repartitioned::with(K::default_serde(), V::default_serde()))
    }

    /// The stream through a repartition topic written as `repartitioned` says: the records
    /// are read back by a new sub-topology, partitioned by key or by its partitioner.
    ///
    /// ```
    /// use riffle::dsl::Repartitioned;
    /// use riffle::{Consumed, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
    ///     .repartition_with(
    ///         Repartitioned::with(Serdes::string(), Serdes::string())
    ///             .with_name("by-key")
    ///             .with_number_of_partitions(4),
    ///     )
    ///     .to("out", Produced::with(Serdes::string(), Serdes::string()));
    /// let topology = builder.build().unwrap();
    /// assert_eq!(topology.subtopology_count(), 2);
    /// assert!(topology.describe().to_string().contains("Sink: by-key-repartition-sink (topic: by-key-repartition)"));
    /// ```
    pub fn repartition_with(&self, repartitioned: Repartitioned<K, V>) -> KStream<K, V> {
        let prefix = match repartitioned.name {
            Some(name) => name,
            None => self.graph.borrow_mut().next_name("KSTREAM-REPARTITION"),
        };
        let spec = RepartitionSpec {
            key_serde: repartitioned.key,
            value_serde: repartitioned.value,
            partitioner: repartitioned.partitioner,
            partitions: repartitioned.partitions,
            optimizable: false,
            reuse: false,
        };
        let source = repartition_through(&self.graph, self.node, &prefix, spec);
        KStream::at(self.graph.clone(), source, false)
    }
}
