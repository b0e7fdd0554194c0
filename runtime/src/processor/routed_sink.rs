//! A sink that routes each record itself: to the partition a [`StreamPartitioner`] chooses
//! (Kafka Streams' `Produced.withStreamPartitioner`, `Repartitioned.withStreamPartitioner`),
//! and to the topic a [`TopicNameExtractor`] names (Kafka's `KStream.to(TopicNameExtractor)`).
//!
//! A sink with neither is the plain `Sink` of runtime/src/processor/node.rs, whose record path
//! this one does not touch. A topic an extractor names must exist, as in Kafka Streams (whose
//! producer fails on an unknown topic); the test driver, like Kafka's, creates it.

use std::sync::Arc;

use crate::processor::node::{Node, ProcessingContext, send_record};
use crate::serdes::SerdeRef;
use crate::types::error::{Error, Result};
use crate::types::record::Headers;

/// Chooses the partition of each record a sink writes (Kafka Streams' `StreamPartitioner`):
/// `None` leaves it to the default partitioner (the murmur2 hash of the serialized key).
/// `value` is `None` for a tombstone.
///
/// Any `Fn(&str, &K, Option<&V>, u32) -> Option<u32>` is one:
///
/// ```
/// use riffle::processor::StreamPartitioner;
/// let by_length = |_topic: &str, key: &String, _value: Option<&i64>, partitions: u32| {
///     Some(key.len() as u32 % partitions)
/// };
/// assert_eq!(by_length.partition("t", &"abc".to_string(), Some(&1), 2), Some(1));
/// ```
pub trait StreamPartitioner<K, V>: Send + Sync + 'static {
    /// The partition of `topic` (which has `num_partitions`) for this record, or `None` for
    /// the default.
    fn partition(
        &self,
        topic: &str,
        key: &K,
        value: Option<&V>,
        num_partitions: u32,
    ) -> Option<u32>;
}

impl<K, V, F> StreamPartitioner<K, V> for F
where
    F: Fn(&str, &K, Option<&V>, u32) -> Option<u32> + Send + Sync + 'static,
{
    fn partition(
        &self,
        topic: &str,
        key: &K,
        value: Option<&V>,
        num_partitions: u32,
    ) -> Option<u32> {
        self(topic, key, value, num_partitions)
    }
}

/// A shared [`StreamPartitioner`].
pub type StreamPartitionerRef<K, V> = Arc<dyn StreamPartitioner<K, V>>;

/// What a [`TopicNameExtractor`] knows of the record being written (Kafka Streams'
/// `RecordContext`): the input record it came from, if any, and its timestamp and headers.
pub struct RecordContext<'a> {
    topic: Option<&'a str>,
    partition: Option<u32>,
    offset: Option<u64>,
    timestamp: i64,
    headers: &'a Headers,
}

impl RecordContext<'_> {
    /// The input record's topic (`None` while punctuating).
    pub fn topic(&self) -> Option<&str> {
        self.topic
    }

    /// The input record's partition.
    pub fn partition(&self) -> Option<u32> {
        self.partition
    }

    /// The input record's offset.
    pub fn offset(&self) -> Option<u64> {
        self.offset
    }

    /// The timestamp of the record being written.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The headers of the record being written.
    pub fn headers(&self) -> &Headers {
        self.headers
    }
}

/// Names the topic of each record a sink writes (Kafka Streams' `TopicNameExtractor`). `value`
/// is `None` for a tombstone. Any `Fn(&K, Option<&V>, &RecordContext) -> String` is one.
pub trait TopicNameExtractor<K, V>: Send + Sync + 'static {
    /// The topic for this record.
    fn extract(&self, key: &K, value: Option<&V>, context: &RecordContext<'_>) -> String;
}

impl<K, V, F> TopicNameExtractor<K, V> for F
where
    F: Fn(&K, Option<&V>, &RecordContext<'_>) -> String + Send + Sync + 'static,
{
    fn extract(&self, key: &K, value: Option<&V>, context: &RecordContext<'_>) -> String {
        self(key, value, context)
    }
}

/// A shared [`TopicNameExtractor`].
pub type TopicNameExtractorRef<K, V> = Arc<dyn TopicNameExtractor<K, V>>;

/// Where a [`RoutedSink`] writes.
pub(crate) enum SinkTopic<K, V> {
    /// One topic, by its index in the topic table.
    Fixed(usize),
    /// The topic the extractor names for each record.
    Extracted(TopicNameExtractorRef<K, V>),
}

/// A sink with a [`StreamPartitioner`] or a [`TopicNameExtractor`].
pub(crate) struct RoutedSink<K, V> {
    /// The sink's node name, for errors.
    pub(crate) name: Arc<str>,
    pub(crate) topic: SinkTopic<K, V>,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) partitioner: Option<StreamPartitionerRef<K, V>>,
}

impl<K: 'static, V: 'static> RoutedSink<K, V> {
    fn write(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: Option<V>) -> Result<()> {
        let value = value.filter(|v| !self.value_serde.is_null(v));
        let topic = match &self.topic {
            SinkTopic::Fixed(index) => *index,
            SinkTopic::Extracted(extractor) => {
                let tp = ctx.record.map(riffle_record::Record::topic_partition);
                let context = RecordContext {
                    topic: tp.map(|tp| &*tp.topic),
                    partition: tp.map(|tp| tp.partition),
                    offset: ctx.record.map(riffle_record::Record::offset),
                    timestamp: ctx.timestamp,
                    headers: &ctx.headers,
                };
                let name = extractor.extract(&key, value.as_ref(), &context);
                match ctx.collector.dynamic_topic(&name) {
                    Ok(index) => index,
                    Err(error) => return ctx.production_failed(error),
                }
            }
        };
        let partitions = ctx.collector.topics().partitions(topic);
        let chosen = self.partitioner.as_ref().and_then(|p| {
            let name = ctx.collector.topics().name(topic);
            p.partition(name, &key, value.as_ref(), partitions)
        });
        if let Some(p) = chosen
            && p >= partitions
        {
            let error = Error::ProcessorContext {
                processor: self.name.to_string(),
                reason: format!(
                    "its StreamPartitioner chose partition {p} of {}, which has {partitions} \
                     partitions",
                    ctx.collector.topics().name(topic)
                ),
            };
            return ctx.production_failed(error);
        }
        let (key_serde, value_serde) = (&self.key_serde, &self.value_serde);
        send_record(
            ctx,
            topic,
            chosen,
            (key_serde, &key),
            (value_serde, value.as_ref()),
        )
    }
}

impl<K: 'static, V: 'static> Node<K, V> for RoutedSink<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.write(ctx, key, Some(value))
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.write(ctx, key, None)
    }
}
