//! The printable form of a [`Topology`], in Kafka Streams' `TopologyDescription` layout and
//! order: a sub-topology's nodes, and each node's successors and predecessors, sorted as
//! Kafka's `InternalTopologyBuilder` sorts them, the node with the larger sub-tree first (a
//! node's size is one plus its children's sizes), then by name.

use std::collections::BTreeSet;
use std::fmt;

use super::Topology;
use super::graph::NodeKind;

impl Topology {
    /// A printable description, in Kafka Streams' `TopologyDescription` layout.
    pub fn describe(&self) -> TopologyDescription<'_> {
        TopologyDescription { topology: self }
    }
}

/// The printable form of a [`Topology`].
pub struct TopologyDescription<'a> {
    topology: &'a Topology,
}

impl fmt::Display for TopologyDescription<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.topology;
        writeln!(f, "Topologies:")?;
        let sizes = subtree_sizes(t);
        let order = |ids: &mut Vec<usize>| {
            ids.sort_by(|&a, &b| {
                (sizes[b].cmp(&sizes[a])).then_with(|| t.nodes[a].name.cmp(&t.nodes[b].name))
            });
        };
        for (i, sub) in t.subtopologies.iter().enumerate() {
            // Kafka indents the first sub-topology by three spaces, the others by two.
            let indent = if i == 0 { "   " } else { "  " };
            writeln!(f, "{indent}Sub-topology: {}", sub.id)?;
            let mut nodes = sub.nodes.clone();
            order(&mut nodes);
            for id in nodes {
                let node = &t.nodes[id];
                match &node.kind {
                    NodeKind::Source { topics, .. } => {
                        let names: Vec<String> = topics.iter().map(ToString::to_string).collect();
                        writeln!(
                            f,
                            "    Source: {} (topics: [{}])",
                            node.name,
                            names.join(", ")
                        )?
                    }
                    NodeKind::Processor => {
                        let stores: BTreeSet<&str> = node
                            .stores
                            .iter()
                            .map(|&s| t.stores[s].name.as_str())
                            .collect();
                        let stores: Vec<&str> = stores.into_iter().collect();
                        writeln!(
                            f,
                            "    Processor: {} (stores: [{}])",
                            node.name,
                            stores.join(", ")
                        )?
                    }
                    NodeKind::Sink { topic } => {
                        writeln!(f, "    Sink: {} (topic: {topic})", node.name)?
                    }
                    NodeKind::DynamicSink { extractor } => {
                        writeln!(f, "    Sink: {} (extractor class: {extractor})", node.name)?
                    }
                }
                let sink = matches!(
                    node.kind,
                    NodeKind::Sink { .. } | NodeKind::DynamicSink { .. }
                );
                let mut children = node.children.clone();
                order(&mut children);
                if !children.is_empty() {
                    let names: Vec<&str> =
                        children.iter().map(|&c| t.nodes[c].name.as_str()).collect();
                    writeln!(f, "      --> {}", names.join(", "))?;
                } else if !sink {
                    writeln!(f, "      --> none")?;
                }
                let mut parents = node.parents.clone();
                order(&mut parents);
                if !parents.is_empty() {
                    let names: Vec<&str> =
                        parents.iter().map(|&p| t.nodes[p].name.as_str()).collect();
                    writeln!(f, "      <-- {}", names.join(", "))?;
                }
            }
            writeln!(f)?;
        }
        for global in &t.globals {
            writeln!(
                f,
                "   Global store: {} (topic: {}; every partition, in every instance, no tasks)",
                global.store, global.topic
            )?;
        }
        Ok(())
    }
}

/// Each node's size as Kafka's description counts it: one plus the sizes of its children (a
/// node reached by two paths counts twice).
fn subtree_sizes(t: &Topology) -> Vec<usize> {
    // Children are added after their parents, so one pass from the last node back suffices.
    let mut sizes = vec![1usize; t.nodes.len()];
    for id in (0..t.nodes.len()).rev() {
        let below: usize = t.nodes[id].children.iter().map(|&c| sizes[c]).sum();
        sizes[id] = sizes[id].saturating_add(below);
    }
    sizes
}
