//! The split of the graph into sub-topologies: its connected parts, where nodes sharing a store
//! are connected too, numbered by their first node so a topology built twice gets the same ids.
//! Repartition topics are where sub-topologies meet: a sink writing one ends one sub-topology,
//! the source reading it starts another.

use crate::types::error::{Error, Result};

use super::TopicRef;
use super::graph::{NodeDef, NodeKind};

/// One connected part of the topology: the unit tasks are made of.
#[derive(Clone, Debug)]
pub(crate) struct SubtopologyDef {
    pub(crate) id: u32,
    /// Node ids, ascending (parents before children).
    pub(crate) nodes: Vec<usize>,
    pub(crate) source_topics: Vec<TopicRef>,
    pub(crate) sink_topics: Vec<TopicRef>,
    pub(crate) stores: Vec<usize>,
}

/// Splits the graph into sub-topologies: the connected parts, where nodes sharing a store are
/// connected too. Numbered by their first node.
pub(super) fn split(nodes: &[NodeDef]) -> Result<Vec<SubtopologyDef>> {
    let n = nodes.len();
    // Union-find over parent-child edges and shared stores.
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    fn union(parent: &mut [usize], a: usize, b: usize) {
        let (a, b) = (find(parent, a), find(parent, b));
        if a != b {
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut store_owner: std::collections::HashMap<usize, usize> = Default::default();
    for (id, node) in nodes.iter().enumerate() {
        for &c in &node.children {
            union(&mut parent, id, c);
        }
        for &s in &node.stores {
            match store_owner.get(&s) {
                Some(&other) => union(&mut parent, id, other),
                None => {
                    store_owner.insert(s, id);
                }
            }
        }
    }
    let mut roots: Vec<usize> = Vec::new();
    let mut member_of = vec![0usize; n];
    for (id, member) in member_of.iter_mut().enumerate() {
        let root = find(&mut parent, id);
        let index = match roots.iter().position(|&r| r == root) {
            Some(i) => i,
            None => {
                roots.push(root);
                roots.len() - 1
            }
        };
        *member = index;
    }
    let mut subtopologies: Vec<SubtopologyDef> = (0..roots.len())
        .map(|i| SubtopologyDef {
            id: i as u32,
            nodes: Vec::new(),
            source_topics: Vec::new(),
            sink_topics: Vec::new(),
            stores: Vec::new(),
        })
        .collect();
    for (id, node) in nodes.iter().enumerate() {
        let sub = &mut subtopologies[member_of[id]];
        sub.nodes.push(id);
        for &s in &node.stores {
            if !sub.stores.contains(&s) {
                sub.stores.push(s);
            }
        }
        match &node.kind {
            NodeKind::Source { topics, .. } => sub.source_topics.extend(topics.iter().cloned()),
            NodeKind::Sink { topic } => sub.sink_topics.push(topic.clone()),
            NodeKind::Processor | NodeKind::DynamicSink { .. } => {}
        }
    }
    for sub in &subtopologies {
        if sub.source_topics.is_empty() {
            return Err(Error::Topology(format!(
                "sub-topology {} has no source; every processor must descend from a stream",
                sub.id
            )));
        }
    }
    Ok(subtopologies)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::config::TopologyOptimization;
    use crate::serdes::Serdes;
    use crate::state::def::StoreDef;
    use crate::topology::options::Consumed;

    use super::super::graph::{BuiltNode, GraphBuilder, NodeFactory};
    use super::super::{TopicRef, Topology};

    fn strings() -> Consumed<String, String> {
        Consumed::with(Serdes::string(), Serdes::string())
    }

    fn external(name: &str) -> TopicRef {
        TopicRef::External(name.to_owned())
    }

    fn sink(g: &mut GraphBuilder, name: &str, topic: TopicRef, parent: usize) -> usize {
        let (k, v) = (Serdes::string(), Serdes::string());
        g.sink::<String, String>(name.to_owned(), topic, k, v, &[parent])
    }

    fn noop() -> NodeFactory {
        Arc::new(|_| BuiltNode::plain(Box::new(())))
    }

    #[test]
    fn a_repartition_topic_ends_one_subtopology_and_starts_the_next() {
        let mut g = GraphBuilder::default();
        let s0 = g.source("s0".into(), vec![external("in")], strings());
        sink(&mut g, "k0", TopicRef::repartition("by-word"), s0);
        let s1 = g.source(
            "s1".into(),
            vec![TopicRef::repartition("by-word")],
            strings(),
        );
        sink(&mut g, "k1", external("out"), s1);
        let t = Topology::from_graph(g, TopologyOptimization::none()).expect("a valid topology");
        assert_eq!(t.subtopology_count(), 2);
        let (a, b) = (&t.subtopologies[0], &t.subtopologies[1]);
        assert_eq!((a.id, a.nodes.as_slice()), (0, &[0, 1][..]));
        assert_eq!(a.source_topics, [external("in")]);
        assert_eq!(a.sink_topics, [TopicRef::repartition("by-word")]);
        assert_eq!((b.id, b.nodes.as_slice()), (1, &[2, 3][..]));
        assert_eq!(b.source_topics, [TopicRef::repartition("by-word")]);
        assert_eq!(b.sink_topics, [external("out")]);
    }

    #[test]
    fn subtopologies_are_numbered_by_their_first_node() {
        let mut g = GraphBuilder::default();
        let s0 = g.source("s0".into(), vec![external("a")], strings());
        let s1 = g.source("s1".into(), vec![external("b")], strings());
        sink(&mut g, "k1", external("out-b"), s1);
        sink(&mut g, "k0", external("out-a"), s0);
        let t = Topology::from_graph(g, TopologyOptimization::none()).expect("a valid topology");
        let nodes: Vec<&[usize]> = t.subtopologies.iter().map(|s| s.nodes.as_slice()).collect();
        assert_eq!(nodes, [&[0, 3][..], &[1, 2][..]]);
        assert_eq!(t.subtopologies[1].source_topics, [external("b")]);
    }

    #[test]
    fn processors_sharing_a_store_are_one_subtopology() {
        let mut g = GraphBuilder::default();
        let s0 = g.source("s0".into(), vec![external("a")], strings());
        let s1 = g.source("s1".into(), vec![external("b")], strings());
        let p0 =
            g.add_named_processor::<String, String, String, String>("p0".into(), &[s0], noop());
        let p1 =
            g.add_named_processor::<String, String, String, String>("p1".into(), &[s1], noop());
        let store = g
            .declare_store(StoreDef::dsl("st".into(), false, false))
            .expect("a new store");
        g.connect_stores(p0, &["st"]).expect("st exists");
        g.connect_stores(p1, &["st"]).expect("st exists");
        let t = Topology::from_graph(g, TopologyOptimization::none()).expect("a valid topology");
        assert_eq!(t.subtopology_count(), 1);
        assert_eq!(t.subtopologies[0].nodes, [0, 1, 2, 3]);
        assert_eq!(t.subtopologies[0].stores, [store]);
    }

    #[test]
    fn a_part_without_a_source_is_an_error() {
        let mut g = GraphBuilder::default();
        let s0 = g.source("s0".into(), vec![external("a")], strings());
        sink(&mut g, "k0", external("out"), s0);
        g.add_named_processor::<String, String, String, String>("orphan".into(), &[], noop());
        let err = Topology::from_graph(g, TopologyOptimization::none())
            .expect_err("a part without a source")
            .to_string();
        assert!(err.contains("sub-topology 1 has no source"), "{err}");
    }
}
