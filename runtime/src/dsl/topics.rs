//! Where streams meet topics: a source ([`add_source`]), a sink ([`add_sink`]), and a
//! repartition topic between them ([`repartition`], and [`repartition_through`] with Kafka's
//! node names), which starts a new sub-topology.

use std::cell::RefCell;
use std::rc::Rc;

use std::sync::Arc;

use crate::dsl::named::{check_name, node_name};
use crate::dsl::{Consumed, KStream, Named, Produced};
use crate::processor::StreamPartitionerRef;
use crate::processor::node::{NodeRef, Passthrough};
use crate::serdes::SerdeRef;
use crate::topology::{BuiltNode, Erased, GraphBuilder, NodeFactory, TopicRef, TypeSig};

/// A stream of the records of `topics`, read by a new source node.
pub(crate) fn add_source<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    topics: Vec<TopicRef>,
    consumed: Consumed<K, V>,
    repartition_required: bool,
) -> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    let mut g = graph.borrow_mut();
    let name = g.next_name("KSTREAM-SOURCE");
    let node = g.source(name, topics, consumed);
    KStream::at(graph.clone(), node, repartition_required)
}

/// Writes what `parent` forwards to `topic`, through a new sink node named and partitioned as
/// `produced` says.
pub(crate) fn add_sink<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    parent: usize,
    topic: TopicRef,
    produced: Produced<K, V>,
) where
    K: 'static,
    V: 'static,
{
    let mut g = graph.borrow_mut();
    let named = produced.name.map(Named::as_);
    let name = node_name(&mut g, "KSTREAM-SINK", named.as_ref());
    let (key, value) = (produced.key, produced.value);
    g.sink_partitioned(name, topic, key, value, produced.partitioner, &[parent]);
}

/// The source of repartition topic `topic` written by `parent` with these serdes: made (a sink
/// below `parent`, a source of the topic) the first time, and the same source again for the
/// same topic from the same node, so two aggregations of one named grouping read its topic once
/// (as Kafka Streams reuses it). Another node writing a topic of the same name is an error at
/// `build` (two writers would interleave their records).
pub(crate) fn repartition<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    parent: usize,
    topic: TopicRef,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
) -> usize
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    {
        let mut g = graph.borrow_mut();
        if let Some(&(_, writer, source)) = g.repartitions.iter().find(|(t, ..)| *t == topic) {
            let same = writer == parent && g.nodes[source].output == Some(TypeSig::of::<K, V>());
            if same {
                return source;
            }
            g.errors.push(format!(
                "repartition topic {topic} is already written by another operation: name \
                 the groupings or joins apart"
            ));
        }
    }
    let produced = Produced::with(key_serde.clone(), value_serde.clone());
    add_sink(graph, parent, topic.clone(), produced);
    let consumed = Consumed::with(key_serde, value_serde);
    let source = add_source::<K, V>(graph, vec![topic.clone()], consumed, false).node;
    graph
        .borrow_mut()
        .repartitions
        .push((topic, parent, source));
    source
}

/// How [`repartition_through`] writes its topic.
pub(crate) struct RepartitionSpec<K, V> {
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) partitioner: Option<StreamPartitionerRef<K, V>>,
    /// The topic's partition count, if given (else its writer's).
    pub(crate) partitions: Option<u32>,
}

/// Routes what `parent` forwards through the repartition topic `<prefix>-repartition` (`prefix`
/// already ending in `-repartition` is kept) and returns the source reading it: Kafka Streams'
/// `createRepartitionedSource`, with its nodes and names. A pass-through filter below `parent`,
/// the sink writing the topic, and the source reading it take a counter value each, in Kafka's
/// order (sink, filter, source); a generated `prefix` (`KSTREAM-…-<n>`) gives them generated
/// names, a user's gives `<topic>-filter`, `<topic>-sink` and `<topic>-source`.
pub(crate) fn repartition_through<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    parent: usize,
    prefix: &str,
    spec: RepartitionSpec<K, V>,
) -> usize
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    let topic_name = match prefix.strip_suffix("-repartition") {
        Some(_) => prefix.to_owned(),
        None => format!("{prefix}-repartition"),
    };
    let topic = TopicRef::Repartition(topic_name.clone());
    let mut g = graph.borrow_mut();
    let sink = g.next_name("KSTREAM-SINK");
    let filter = g.next_name("KSTREAM-FILTER");
    let source = g.next_name("KSTREAM-SOURCE");
    let (sink, filter, source) = if generated(prefix) {
        (sink, filter, source)
    } else {
        let names = [
            format!("{topic_name}-sink"),
            format!("{topic_name}-filter"),
            format!("{topic_name}-source"),
        ];
        for name in &names {
            check_name(&mut g, name);
        }
        let [sink, filter, source] = names;
        (sink, filter, source)
    };
    if g.repartitions.iter().any(|(t, ..)| *t == topic) {
        g.errors.push(format!(
            "repartition topic {topic} is already written by another operation: name the \
             operations apart"
        ));
    }
    let factory: NodeFactory = Arc::new(|ctx| {
        let node: NodeRef<K, V> = Rc::new(RefCell::new(Passthrough {
            forward: ctx.forward::<K, V>(),
        }));
        BuiltNode::plain(Box::new(node) as Erased)
    });
    let filter = g.add_named_processor::<K, V, K, V>(filter, &[parent], factory);
    let (key, value) = (spec.key_serde, spec.value_serde);
    let partitioner = spec.partitioner;
    g.sink_partitioned(
        sink,
        topic.clone(),
        key.clone(),
        value.clone(),
        partitioner,
        &[filter],
    );
    let source = g.source(source, vec![topic.clone()], Consumed::with(key, value));
    match spec.partitions {
        Some(0) => g.errors.push(format!(
            "repartition topic {topic} is given 0 partitions: it needs at least one"
        )),
        Some(n) => g.partition_counts.push((topic.clone(), n)),
        None => {}
    }
    g.repartitions.push((topic, filter, source));
    source
}

/// Whether `name` is one Kafka Streams generated (`KSTREAM…-` and ten digits), which its
/// repartition nodes' names follow.
fn generated(name: &str) -> bool {
    let Some((head, digits)) = name.rsplit_once('-') else {
        return false;
    };
    name.starts_with("KSTREAM")
        && !head.is_empty()
        && digits.len() == 10
        && digits.bytes().all(|b| b.is_ascii_digit())
}
