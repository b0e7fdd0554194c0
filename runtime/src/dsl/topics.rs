//! Where streams meet topics: a source ([`add_source`]), a sink ([`add_sink`]), and a
//! repartition topic between them, which starts a new sub-topology: [`repartition_through`]
//! (Kafka's `createRepartitionedSource`, for every stream operation) and [`repartition_table`]
//! (a grouped table's).

use std::cell::RefCell;
use std::rc::Rc;

use std::sync::Arc;

use crate::dsl::named::{check_name, node_name};
use crate::dsl::{Consumed, KStream, Named, Produced};
use crate::processor::StreamPartitionerRef;
use crate::processor::node::{NodeRef, Passthrough};
use crate::serdes::SerdeRef;
use crate::topology::{
    BuiltNode, Erased, GraphBuilder, NodeFactory, RepartitionDef, RepartitionMaker, TopicRef,
    TypeSig,
};

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

/// How [`repartition_through`] writes its topic.
pub(crate) struct RepartitionSpec<K, V> {
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) partitioner: Option<StreamPartitionerRef<K, V>>,
    /// The topic's partition count, if given (else its writer's).
    pub(crate) partitions: Option<u32>,
    /// Kafka's `OptimizableRepartitionNode` (a grouping's, a join's, `to_table`'s): the
    /// `merge.repartition.topics` optimization may merge it with the other repartition topics
    /// of its key-changing operation. `KStream::repartition`'s is not.
    pub(crate) optimizable: bool,
    /// A second operation through the same topic from the same node reads this one's source
    /// (a named grouping aggregated twice, a stream joined twice), as Kafka reuses the node.
    pub(crate) reuse: bool,
}

impl<K, V> RepartitionSpec<K, V> {
    /// An optimizable, reusable repartition with these serdes: a grouping's or a join's.
    pub(crate) fn grouping(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        RepartitionSpec {
            key_serde,
            value_serde,
            partitioner: None,
            partitions: None,
            optimizable: true,
            reuse: true,
        }
    }
}

/// Routes what `parent` forwards through the repartition topic `<prefix>-repartition` (`prefix`
/// already ending in `-repartition` is kept) and returns the source reading it: Kafka Streams'
/// `createRepartitionedSource`, with its nodes and names. A pass-through filter below `parent`,
/// the sink writing the topic, and the source reading it take a counter value each, in Kafka's
/// order (sink, filter, source), also when an earlier operation's topic is reused; a
/// generated `prefix` (`KSTREAM…-<n>`) gives them generated names, any other
/// `<topic>-filter`, `<topic>-sink` and `<topic>-source`.
///
/// The same topic from the same node again reads the same source when `spec.reuse` says so;
/// any other second writer of a topic is an error at `build` (two writers would interleave
/// their records).
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
    if let Some(source) = reused::<K, V>(&mut g, &topic, parent, spec.reuse) {
        return source;
    }
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
    let (key, value) = (spec.key_serde, spec.value_serde);
    let names = [filter, sink, source];
    let [filter, sink, source] = add_repartition_nodes(
        &mut g,
        parent,
        names,
        topic.clone(),
        (key.clone(), value.clone()),
        spec.partitioner,
    );
    match spec.partitions {
        Some(0) => g.errors.push(format!(
            "repartition topic {topic} is given 0 partitions: it needs at least one"
        )),
        Some(n) => g.partition_counts.push((topic.clone(), n)),
        None => {}
    }
    let maker: Option<RepartitionMaker> = spec.optimizable.then(|| {
        Arc::new(move |g: &mut GraphBuilder, parent, names, topic| {
            add_repartition_nodes(g, parent, names, topic, (key.clone(), value.clone()), None)
        }) as RepartitionMaker
    });
    g.repartitions.push(RepartitionDef {
        topic,
        writer: parent,
        filter: Some(filter),
        sink,
        source,
        maker,
    });
    source
}

/// The source of an earlier repartition of `topic` written by `writer` with the same types, if
/// `reuse` allows reading it again; an error for `build` if another node writes `topic`, or
/// reuse is not allowed.
fn reused<K: 'static, V: 'static>(
    g: &mut GraphBuilder,
    topic: &TopicRef,
    writer: usize,
    reuse: bool,
) -> Option<usize> {
    let earlier = g.repartitions.iter().find(|r| r.topic == *topic)?;
    let same =
        earlier.writer == writer && g.nodes[earlier.source].output == Some(TypeSig::of::<K, V>());
    if reuse && same {
        return Some(earlier.source);
    }
    g.errors.push(format!(
        "repartition topic {topic} is already written by another operation: name the \
         operations (groupings, joins, repartitions) apart"
    ));
    None
}

/// Adds a repartition topic's nodes below `parent`, named `[filter, sink, source]`: Kafka's
/// pass-through filter, the sink writing `topic` (partitioned by `partitioner` if given), and
/// the source reading it. Returns their ids in that order.
fn add_repartition_nodes<K, V>(
    g: &mut GraphBuilder,
    parent: usize,
    [filter, sink, source]: [String; 3],
    topic: TopicRef,
    (key, value): (SerdeRef<K>, SerdeRef<V>),
    partitioner: Option<StreamPartitionerRef<K, V>>,
) -> [usize; 3]
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    // Kafka's filter passes every record on: built as its one child (the sink), so its parent
    // sends straight to the sink and the node costs nothing per record.
    let factory: NodeFactory = Arc::new(|ctx| {
        let forward = ctx.forward::<K, V>();
        let node: NodeRef<K, V> = match &forward.children[..] {
            [sink] => sink.clone(),
            _ => Rc::new(RefCell::new(Passthrough { forward })),
        };
        BuiltNode::plain(Box::new(node) as Erased)
    });
    let filter = g.add_named_processor::<K, V, K, V>(filter, &[parent], factory);
    let sink = g.sink_partitioned(
        sink,
        topic.clone(),
        key.clone(),
        value.clone(),
        partitioner,
        &[filter],
    );
    let source = g.source(source, vec![topic], Consumed::with(key, value));
    [filter, sink, source]
}

/// The source of a grouped table's repartition topic `<topic_name>-repartition` written by
/// `parent`: Kafka Streams' `GroupedTableOperationRepartitionNode`, a sink and a source named
/// `names` (which the caller took from the counter, as Kafka does on every aggregation) and no
/// filter. A named grouping's second aggregation reads the first's source.
pub(crate) fn repartition_table<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    parent: usize,
    topic_name: &str,
    [sink, source]: [String; 2],
    (key, value): (SerdeRef<K>, SerdeRef<V>),
) -> usize
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    let topic = TopicRef::repartition(topic_name);
    let mut g = graph.borrow_mut();
    if let Some(source) = reused::<K, V>(&mut g, &topic, parent, true) {
        return source;
    }
    for name in [&sink, &source] {
        check_name(&mut g, name);
    }
    let sink = g.sink(sink, topic.clone(), key.clone(), value.clone(), &[parent]);
    let source = g.source(source, vec![topic.clone()], Consumed::with(key, value));
    g.repartitions.push(RepartitionDef {
        topic,
        writer: parent,
        filter: None,
        sink,
        source,
        maker: None,
    });
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
