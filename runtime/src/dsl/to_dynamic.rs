//! [`KStream::to_dynamic`]: each record written to the topic a [`TopicNameExtractor`] names
//! for it (Kafka Streams' `KStream.to(TopicNameExtractor, Produced)`), by a sink node that
//! `describe` shows as `Sink: <name> (extractor class: <the extractor's type>)`. The node is
//! the routed sink of runtime/src/processor/routed_sink.rs.

use std::sync::Arc;

use crate::dsl::named::node_name;
use crate::dsl::{KStream, Named, Produced};
use crate::processor::TopicNameExtractor;

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Writes each record to the topic `extractor` names for it, with `produced`'s serdes,
    /// partitioner and name. The topic must exist: writing to one that does not goes to the
    /// production exception handler as [`Error::UnknownTopic`](crate::Error::UnknownTopic)
    /// (which fails the thread by default), as Kafka's producer fails on an unknown topic.
    /// The test driver creates it instead, as Kafka's does.
    ///
    /// ```
    /// use riffle::processor::RecordContext;
    /// use riffle::{Consumed, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("events", Consumed::with(Serdes::string(), Serdes::string()))
    ///     .to_dynamic(
    ///         |key: &String, _: Option<&String>, _: &RecordContext<'_>| format!("events-{key}"),
    ///         Produced::with(Serdes::string(), Serdes::string()),
    ///     );
    /// let text = builder.build().unwrap().describe().to_string();
    /// assert!(text.contains("Sink: KSTREAM-SINK-0000000001 (extractor class: "));
    /// ```
    pub fn to_dynamic<E>(&self, extractor: E, produced: Produced<K, V>)
    where
        E: TopicNameExtractor<K, V>,
    {
        let mut g = self.graph.borrow_mut();
        let named = produced.name.map(Named::as_);
        let name = node_name(&mut g, "KSTREAM-SINK", named.as_ref());
        let description = std::any::type_name::<E>().to_owned();
        let (key, value) = (produced.key, produced.value);
        g.dynamic_sink(
            name,
            Arc::new(extractor),
            description,
            key,
            value,
            produced.partitioner,
            &[self.node],
        );
    }
}
