//! The printable form of a [`Topology`], in Kafka Streams' `TopologyDescription` layout.

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
        for sub in &t.subtopologies {
            writeln!(f, "   Sub-topology: {}", sub.id)?;
            for &id in &sub.nodes {
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
                }
                if !node.children.is_empty() {
                    let names: Vec<&str> = node
                        .children
                        .iter()
                        .map(|&c| t.nodes[c].name.as_str())
                        .collect();
                    writeln!(f, "      --> {}", names.join(", "))?;
                } else if !matches!(node.kind, NodeKind::Sink { .. }) {
                    writeln!(f, "      --> none")?;
                }
                if !node.parents.is_empty() {
                    let names: Vec<&str> = node
                        .parents
                        .iter()
                        .map(|&p| t.nodes[p].name.as_str())
                        .collect();
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
