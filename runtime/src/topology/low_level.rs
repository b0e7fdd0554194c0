//! Kafka's low-level `Topology` API: sources, processors, sinks and stores added by name to a
//! built [`Topology`], which is split again after each change.
//!
//! A change that fails must leave the topology as it was (`Topology::change` undoes it).

use crate::processor::Processor;
use crate::state::stores::StoreBuilder;
use crate::topology::options::{Consumed, Produced};
use crate::types::error::{Error, Result};

use super::graph::{GraphBuilder, NodeKind, TypeSig};
use super::{TopicRef, Topology, split};

impl Topology {
    /// Applies `change` to the graph and splits it again; on an error nothing changes.
    fn change(
        &mut self,
        change: impl FnOnce(&mut GraphBuilder) -> Result<(), String>,
    ) -> Result<&mut Self> {
        let mut graph = GraphBuilder {
            nodes: std::mem::take(&mut self.nodes),
            stores: std::mem::take(&mut self.stores),
            globals: std::mem::take(&mut self.globals),
            counter: self.counter,
            errors: Vec::new(),
            copartitioned: std::mem::take(&mut self.copartitioned),
            partition_counts: std::mem::take(&mut self.partition_counts),
            ..GraphBuilder::default()
        };
        let (node_count, store_count) = (graph.nodes.len(), graph.stores.len());
        let mut result = change(&mut graph).map_err(Error::Topology);
        if result.is_ok() {
            match split::split(&graph.nodes) {
                Ok(subs) => self.subtopologies = subs,
                Err(e) => result = Err(e),
            }
        }
        if result.is_err() {
            // Undo: drop what was added, and the child links to it.
            graph.nodes.truncate(node_count);
            graph.stores.truncate(store_count);
            for node in &mut graph.nodes {
                node.children.retain(|&c| c < node_count);
                node.stores.retain(|&s| s < store_count);
            }
        }
        self.nodes = graph.nodes;
        self.stores = graph.stores;
        self.globals = graph.globals;
        self.copartitioned = graph.copartitioned;
        self.partition_counts = graph.partition_counts;
        result.map(|()| self)
    }

    /// Adds a source node `name` reading `topics` (Kafka's `Topology.addSource`); the
    /// [`Consumed`] gives its serdes and, optionally, its timestamp extractor.
    pub fn add_source<K: Clone + 'static, V: Clone + 'static>(
        &mut self,
        name: &str,
        consumed: Consumed<K, V>,
        topics: &[&str],
    ) -> Result<&mut Self> {
        self.change(|g| {
            if g.nodes.iter().any(|n| n.name == name) {
                return Err(format!("a node named {name:?} already exists"));
            }
            if topics.is_empty() {
                return Err(format!("source {name} needs at least one topic"));
            }
            let topics = topics
                .iter()
                .map(|t| TopicRef::External((*t).to_owned()))
                .collect();
            g.source(name.to_owned(), topics, consumed);
            Ok(())
        })
    }

    /// Adds a processor node `name` below `parents`, running a [`Processor`] made by
    /// `supplier` for each task (Kafka's `Topology.addProcessor`). The parents must forward
    /// what the processor takes.
    pub fn add_processor<KIn, VIn, KOut, VOut, P>(
        &mut self,
        name: &str,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        parents: &[&str],
    ) -> Result<&mut Self>
    where
        KIn: 'static,
        VIn: 'static,
        KOut: Clone + 'static,
        VOut: Clone + 'static,
        P: Processor<KIn, VIn, KOut, VOut>,
    {
        self.change(|g| {
            let ids = g.parents_for(name, parents, TypeSig::of::<KIn, VIn>())?;
            g.processor(name.to_owned(), supplier, &ids);
            Ok(())
        })
    }

    /// Adds a sink node `name` below `parents`, writing to `topic` (Kafka's
    /// `Topology.addSink`), partitioned by the [`Produced`]'s `StreamPartitioner`, else by the
    /// serialized key as Kafka's producer does.
    pub fn add_sink<K: 'static, V: 'static>(
        &mut self,
        name: &str,
        topic: &str,
        produced: Produced<K, V>,
        parents: &[&str],
    ) -> Result<&mut Self> {
        self.change(|g| {
            let ids = g.parents_for(name, parents, TypeSig::of::<K, V>())?;
            let topic = TopicRef::External(topic.to_owned());
            let (key, value) = (produced.key, produced.value);
            g.sink_partitioned(
                name.to_owned(),
                topic,
                key,
                value,
                produced.partitioner,
                &ids,
            );
            Ok(())
        })
    }

    /// Adds a state store, connected to `processors` (Kafka's `Topology.addStateStore`).
    /// Processors sharing a store are in one sub-topology.
    pub fn add_state_store<K: 'static, V: 'static>(
        &mut self,
        builder: StoreBuilder<K, V>,
        processors: &[&str],
    ) -> Result<&mut Self> {
        self.change(|g| {
            let name = builder.name().to_owned();
            g.declare_store(builder.into_def())?;
            for p in processors {
                let id = g.node_named(p)?;
                g.connect_stores(id, &[&name])?;
            }
            Ok(())
        })
    }

    /// Connects `processor` to stores added before (Kafka's
    /// `Topology.connectProcessorAndStateStores`).
    pub fn connect_processor_and_state_stores(
        &mut self,
        processor: &str,
        stores: &[&str],
    ) -> Result<&mut Self> {
        self.change(|g| {
            let id = g.node_named(processor)?;
            if !matches!(g.nodes[id].kind, NodeKind::Processor) {
                return Err(format!("{processor} is not a processor"));
            }
            g.connect_stores(id, stores)
        })
    }
}
