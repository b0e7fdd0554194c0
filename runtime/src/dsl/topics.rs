//! Where streams meet topics: a source ([`add_source`]), a sink ([`add_sink`]), and a
//! repartition topic between them ([`repartition`]), which starts a new sub-topology.

use std::cell::RefCell;
use std::rc::Rc;

use crate::dsl::{Consumed, KStream};
use crate::serdes::SerdeRef;
use crate::topology::{GraphBuilder, TopicRef, TypeSig};

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

/// Writes what `parent` forwards to `topic`, through a new sink node.
pub(crate) fn add_sink<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    parent: usize,
    topic: TopicRef,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
) where
    K: 'static,
    V: 'static,
{
    let mut g = graph.borrow_mut();
    let name = g.next_name("KSTREAM-SINK");
    g.sink(name, topic, key_serde, value_serde, &[parent]);
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
    add_sink(
        graph,
        parent,
        topic.clone(),
        key_serde.clone(),
        value_serde.clone(),
    );
    let consumed = Consumed::with(key_serde, value_serde);
    let source = add_source::<K, V>(graph, vec![topic.clone()], consumed, false).node;
    graph
        .borrow_mut()
        .repartitions
        .push((topic, parent, source));
    source
}
