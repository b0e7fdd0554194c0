//! The topology: the graph the DSL builds, split into numbered sub-topologies, and the
//! factories that instantiate a sub-topology's nodes for one task.
//!
//! Node and store names follow Kafka Streams' scheme (`KSTREAM-MAP-0000000001`), and
//! sub-topologies are numbered by their first node, so a topology built twice has the same ids
//! and the same internal topic names.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::collector::TopicTable;
use crate::error::{Error, Result};
use crate::node::{FlushRef, Forward, NodeRef, SourceRef};

/// A topic as the topology names it: internal topics get the application id as a prefix.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TopicRef {
    /// A user topic, named as is.
    External(String),
    /// A repartition topic: `<application_id>-<name>-repartition`.
    Repartition(String),
}

impl TopicRef {
    pub(crate) fn resolve(&self, application_id: &str) -> String {
        match self {
            TopicRef::External(name) => name.clone(),
            TopicRef::Repartition(name) => format!("{application_id}-{name}-repartition"),
        }
    }
}

impl fmt::Display for TopicRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicRef::External(name) => f.write_str(name),
            TopicRef::Repartition(name) => write!(f, "{name}-repartition"),
        }
    }
}

/// The changelog topic of a store.
pub(crate) fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

pub(crate) enum NodeKind {
    Source { topics: Vec<TopicRef> },
    Processor,
    Sink { topic: TopicRef },
}

pub(crate) type Erased = Box<dyn Any>;

/// A node built for one task: its typed handle (erased) and, for stateful nodes, the handle its
/// task calls at commit.
pub(crate) struct BuiltNode {
    pub(crate) node: Erased,
    pub(crate) flush: Option<FlushRef>,
}

impl BuiltNode {
    pub(crate) fn plain(node: Erased) -> Self {
        BuiltNode { node, flush: None }
    }
}

pub(crate) type NodeFactory = Arc<dyn Fn(&BuildCtx<'_>) -> BuiltNode + Send + Sync>;

pub(crate) struct NodeDef {
    pub(crate) name: String,
    pub(crate) kind: NodeKind,
    pub(crate) parents: Vec<usize>,
    pub(crate) children: Vec<usize>,
    pub(crate) stores: Vec<usize>,
    pub(crate) factory: NodeFactory,
}

/// A store the topology declares.
#[derive(Clone, Debug)]
pub(crate) struct StoreDef {
    pub(crate) name: String,
    pub(crate) logged: bool,
    pub(crate) persistent: bool,
}

/// The mutable graph behind a [`crate::StreamsBuilder`].
#[derive(Default)]
pub(crate) struct GraphBuilder {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: Vec<StoreDef>,
    counter: usize,
}

impl GraphBuilder {
    pub(crate) fn next_name(&mut self, prefix: &str) -> String {
        let name = format!("{prefix}-{:010}", self.counter);
        self.counter += 1;
        name
    }

    pub(crate) fn add_node(
        &mut self,
        name: String,
        kind: NodeKind,
        parents: &[usize],
        factory: NodeFactory,
    ) -> usize {
        let id = self.nodes.len();
        self.nodes.push(NodeDef {
            name,
            kind,
            parents: parents.to_vec(),
            children: Vec::new(),
            stores: Vec::new(),
            factory,
        });
        for &p in parents {
            self.nodes[p].children.push(id);
        }
        id
    }

    pub(crate) fn add_store(&mut self, node: usize, store: StoreDef) -> usize {
        let id = self.stores.len();
        self.stores.push(store);
        self.nodes[node].stores.push(id);
        id
    }
}

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

/// A built topology: immutable, shared by every stream thread.
pub struct Topology {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: Vec<StoreDef>,
    pub(crate) subtopologies: Vec<SubtopologyDef>,
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("subtopologies", &self.subtopologies.len())
            .finish()
    }
}

impl Topology {
    pub(crate) fn from_graph(graph: GraphBuilder) -> Result<Topology> {
        let n = graph.nodes.len();
        if n == 0 {
            return Err(Error::Topology(
                "the topology has no nodes; add a stream".into(),
            ));
        }
        // Union-find over parent-child edges: components are sub-topologies.
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for (id, node) in graph.nodes.iter().enumerate() {
            for &c in &node.children {
                let (a, b) = (find(&mut parent, id), find(&mut parent, c));
                if a != b {
                    parent[a.max(b)] = a.min(b);
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
        for (id, node) in graph.nodes.iter().enumerate() {
            let sub = &mut subtopologies[member_of[id]];
            sub.nodes.push(id);
            sub.stores.extend(&node.stores);
            match &node.kind {
                NodeKind::Source { topics } => sub.source_topics.extend(topics.iter().cloned()),
                NodeKind::Sink { topic } => sub.sink_topics.push(topic.clone()),
                NodeKind::Processor => {}
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
        Ok(Topology {
            nodes: graph.nodes,
            stores: graph.stores,
            subtopologies,
        })
    }

    /// The number of sub-topologies.
    pub fn subtopology_count(&self) -> usize {
        self.subtopologies.len()
    }

    /// The names of the stores, in declaration order.
    pub fn store_names(&self) -> Vec<String> {
        self.stores.iter().map(|s| s.name.clone()).collect()
    }

    /// A printable description, in Kafka Streams' `TopologyDescription` layout.
    pub fn describe(&self) -> TopologyDescription<'_> {
        TopologyDescription { topology: self }
    }

    /// Instantiates the nodes of `sub` for one task; returns its sources by topic index.
    pub(crate) fn instantiate(
        &self,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        store_slots: &[Option<usize>],
    ) -> Instance {
        let mut built: Vec<Option<Erased>> = (0..self.nodes.len()).map(|_| None).collect();
        let mut sources = Vec::new();
        let mut flushes = Vec::new();
        for &id in sub.nodes.iter().rev() {
            let def = &self.nodes[id];
            let ctx = BuildCtx {
                children: &def.children,
                built: &built,
                topics,
                application_id,
                store_slots,
                stores: &def.stores,
            };
            let BuiltNode { node, flush } = (def.factory)(&ctx);
            if let NodeKind::Source {
                topics: source_topics,
            } = &def.kind
                && let Some(source) = node.downcast_ref::<SourceRef>()
            {
                {
                    for t in source_topics {
                        if let Some(index) = topics.index_of(&t.resolve(application_id)) {
                            sources.push((index, source.clone()));
                        }
                    }
                }
            }
            if let Some(flush) = flush {
                flushes.push(flush);
            }
            built[id] = Some(node);
        }
        // Built children-first; commits flush parents first, so forwarded updates reach a
        // downstream stateful node before it flushes.
        flushes.reverse();
        Instance { sources, flushes }
    }
}

/// The nodes of one task: its sources by topic index, and its stateful nodes in topological
/// order.
pub(crate) struct Instance {
    pub(crate) sources: Vec<(usize, SourceRef)>,
    pub(crate) flushes: Vec<FlushRef>,
}

/// What a node factory can see: its children (already built) and the resolved names.
pub(crate) struct BuildCtx<'a> {
    children: &'a [usize],
    built: &'a [Option<Erased>],
    topics: &'a TopicTable,
    application_id: &'a str,
    store_slots: &'a [Option<usize>],
    stores: &'a [usize],
}

impl BuildCtx<'_> {
    /// The node's children, typed. Children are built before parents, and the DSL only links
    /// nodes whose types match, so a mismatch here is a bug in the DSL.
    pub(crate) fn forward<K: 'static, V: 'static>(&self) -> Forward<K, V> {
        let children = self
            .children
            .iter()
            .map(|&c| {
                self.built[c]
                    .as_ref()
                    .and_then(|b| b.downcast_ref::<NodeRef<K, V>>())
                    .cloned()
                    .expect("riffle DSL invariant: a child is built before its parent and takes its parent's output types")
            })
            .collect();
        Forward { children }
    }

    /// The topic-table index of `topic`. Every topic the topology names is in the table.
    pub(crate) fn topic_index(&self, topic: &TopicRef) -> usize {
        self.topics
            .index_of(&topic.resolve(self.application_id))
            .expect("riffle invariant: the topic table holds every topic the topology names")
    }

    /// The task-local slot of this node's `i`-th store.
    pub(crate) fn store_slot(&self, i: usize) -> usize {
        self.stores
            .get(i)
            .and_then(|&s| self.store_slots.get(s).copied().flatten())
            .expect("riffle invariant: a task creates every store of its sub-topology")
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
                    NodeKind::Source { topics } => {
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
        Ok(())
    }
}
