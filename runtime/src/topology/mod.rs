//! The topology: the graph the DSL builds, split into numbered sub-topologies, and the
//! factories that instantiate a sub-topology's nodes for one task.
//!
//! Node and store names follow Kafka Streams' scheme (`KSTREAM-MAP-0000000001`), and
//! sub-topologies are numbered by their first node, so a topology built twice has the same ids
//! and the same internal topic names.
//!
//! This file is the front door: [`Topology`], the topics it names ([`TopicRef`],
//! [`changelog_topic`]) and its short surface. The rest is one file per concern:
//! - `graph`: the mutable graph the DSL and the low-level API build ([`GraphBuilder`]), its
//!   node and store definitions;
//! - `low_level`: Kafka's low-level `Topology` API (`add_source`, `add_processor`, …);
//! - `optimize`: Kafka's topology optimizations, applied at `build` (`topology.optimization`);
//! - `split`: the split into numbered sub-topologies;
//! - `instantiate`: a sub-topology's nodes built for one task ([`BuildCtx`], `Instance`);
//! - `describe`: the printable `TopologyDescription`.

mod describe;
mod graph;
mod instantiate;
mod low_level;
mod optimize;
pub(crate) mod options;
mod split;

use std::collections::BTreeSet;
use std::fmt;

use crate::config::TopologyOptimization;
pub(crate) use crate::state::def::{StoreDef, StoreKind};
use crate::types::error::{Error, Result};

pub(crate) use graph::{
    BuiltNode, Erased, GlobalDef, GraphBuilder, LifecycleRef, NodeDef, NodeFactory, NodeKind,
    OldValues, RepartitionDef, RepartitionMaker, Shape, TableSourceDef, TypeSig,
};
pub(crate) use instantiate::BuildCtx;
pub(crate) use split::SubtopologyDef;

/// A topic as the topology names it: internal topics get the application id as a prefix.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TopicRef {
    /// A user topic, named as is.
    External(String),
    /// An internal topic the application writes and reads itself: `<application_id>-<name>`,
    /// the name ending in `-repartition` ([`TopicRef::repartition`]) or, for a foreign-key
    /// join's subscription topics, `-topic` (Kafka Streams' names).
    Repartition(String),
}

impl TopicRef {
    /// The repartition topic `<application_id>-<name>-repartition`.
    pub(crate) fn repartition(name: impl std::fmt::Display) -> TopicRef {
        TopicRef::Repartition(format!("{name}-repartition"))
    }

    pub(crate) fn resolve(&self, application_id: &str) -> String {
        match self {
            TopicRef::External(name) => name.clone(),
            TopicRef::Repartition(name) => format!("{application_id}-{name}"),
        }
    }
}

impl fmt::Display for TopicRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicRef::External(name) => f.write_str(name),
            TopicRef::Repartition(name) => f.write_str(name),
        }
    }
}

/// The changelog topic of a store.
pub(crate) fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

/// A built topology: immutable, shared by every stream thread.
pub struct Topology {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: Vec<StoreDef>,
    pub(crate) globals: Vec<GlobalDef>,
    pub(crate) subtopologies: Vec<SubtopologyDef>,
    /// The DSL's name counter, kept so names stay unique.
    counter: usize,
    /// Joined node pairs (see [`GraphBuilder`]).
    pub(crate) copartitioned: Vec<(usize, usize)>,
    /// Repartition topics with a partition count of their own (see [`GraphBuilder`]).
    pub(crate) partition_counts: Vec<(TopicRef, u32)>,
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("subtopologies", &self.subtopologies.len())
            .finish()
    }
}

impl Default for Topology {
    fn default() -> Self {
        Topology::new()
    }
}

impl Topology {
    /// The topology of `graph`, with `optimization`'s rewrites (Kafka's
    /// `InternalStreamsBuilder.optimizeTopology`; see `optimize`).
    pub(crate) fn from_graph(
        mut graph: GraphBuilder,
        optimization: TopologyOptimization,
    ) -> Result<Topology> {
        if let Some(first) = graph.errors.first() {
            return Err(Error::Topology(first.clone()));
        }
        optimize::reuse_ktable_source_topics(&mut graph, optimization.reuse_ktable_source_topics);
        if optimization.merge_repartition_topics {
            optimize::merge_repartition_topics(&mut graph);
            if let Some(first) = graph.errors.first() {
                return Err(Error::Topology(first.clone()));
            }
        }
        if graph.nodes.is_empty() {
            return Err(Error::Topology(
                "the topology has no nodes; add a stream".into(),
            ));
        }
        let subtopologies = split::split(&graph.nodes)?;
        Ok(Topology {
            nodes: graph.nodes,
            stores: graph.stores,
            globals: graph.globals,
            subtopologies,
            counter: graph.counter,
            copartitioned: graph.copartitioned,
            partition_counts: graph.partition_counts,
        })
    }

    /// An empty topology, for Kafka's low-level API: add sources, processors, sinks and
    /// stores by name.
    ///
    /// ```
    /// use riffle::{Consumed, Processor, ProcessorContext, Produced, Record, Result, Serdes, Topology};
    ///
    /// struct Upper;
    /// impl Processor<String, String, String, String> for Upper {
    ///     fn process(&mut self, ctx: &mut ProcessorContext<'_, String, String>, r: Record<String, String>) -> Result<()> {
    ///         let upper = r.value().to_uppercase();
    ///         ctx.forward(r.with_value(upper))
    ///     }
    /// }
    ///
    /// let mut topology = Topology::new();
    /// topology
    ///     .add_source("in", Consumed::with(Serdes::string(), Serdes::string()), &["words"])?
    ///     .add_processor("upper", || Upper, &["in"])?
    ///     .add_sink("out", "shouted", Produced::with(Serdes::string(), Serdes::string()), &["upper"])?;
    /// assert!(topology.describe().to_string().contains("Processor: upper (stores: [])"));
    /// # Ok::<(), riffle::Error>(())
    /// ```
    pub fn new() -> Topology {
        Topology {
            nodes: Vec::new(),
            stores: Vec::new(),
            globals: Vec::new(),
            subtopologies: Vec::new(),
            counter: 0,
            copartitioned: Vec::new(),
            partition_counts: Vec::new(),
        }
    }

    /// The source topics above `node`: what it reads, through its parents.
    pub(crate) fn upstream_topics(&self, node: usize) -> BTreeSet<TopicRef> {
        let mut topics = BTreeSet::new();
        let mut stack = vec![node];
        let mut seen = vec![false; self.nodes.len()];
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id], true) {
                continue;
            }
            if let NodeKind::Source { topics: t, .. } = &self.nodes[id].kind {
                topics.extend(t.iter().cloned());
            }
            stack.extend(self.nodes[id].parents.iter().copied());
        }
        topics
    }

    /// The number of sub-topologies.
    pub fn subtopology_count(&self) -> usize {
        self.subtopologies.len()
    }

    /// The names of the stores, in declaration order.
    pub fn store_names(&self) -> Vec<String> {
        self.stores.iter().map(|s| s.name.clone()).collect()
    }

    /// Disables every store's cache when `statestore_cache_max_bytes` is 0, as Kafka Streams
    /// strips the caching layers then (`InternalTopologyBuilder.rewriteTopology`): every update
    /// goes downstream as it is processed, and every write to the changelog.
    pub(crate) fn configure_caching(&mut self, cache_max_bytes: usize) {
        if cache_max_bytes == 0 {
            for store in &mut self.stores {
                store.caching = false;
            }
        }
    }
}
