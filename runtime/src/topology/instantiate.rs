//! A sub-topology's nodes built for one task: each node's factory runs children first with a
//! [`BuildCtx`] (its typed children, its stores' task-local slots, the resolved topics), and the
//! task gets an [`Instance`] (its sources by topic index, the handles it flushes and
//! initializes).
//!
//! Nodes built here live on the thread that runs the task: nothing here may cross threads.

use std::sync::Arc;

use crate::processor::collector::TopicTable;
use crate::processor::node::{FlushRef, Forward, NodeRef, SourceRef};
use crate::processor::{ConnectedStore, NodeShared};
use crate::state::def::StoreDef;
use crate::state::global::GlobalStore;
use crate::types::timestamp::TimestampExtractorRef;

use super::graph::{BuiltNode, Erased, LifecycleRef, NodeDef, NodeKind};
use super::split::SubtopologyDef;
use super::{TopicRef, Topology};

impl Topology {
    /// Instantiates the nodes of `sub` for one task; returns its sources by topic index.
    pub(crate) fn instantiate(
        &self,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        store_slots: &[Option<usize>],
        globals: &[Arc<GlobalStore>],
    ) -> Instance {
        let mut built: Vec<Option<Erased>> = (0..self.nodes.len()).map(|_| None).collect();
        let mut sources = Vec::new();
        let mut flushes = Vec::new();
        let mut lifecycles = Vec::new();
        for &id in sub.nodes.iter().rev() {
            let def = &self.nodes[id];
            let ctx = BuildCtx {
                name: &def.name,
                send_old_values: def.send_old_values,
                children: &def.children,
                nodes: &self.nodes,
                built: &built,
                topics,
                application_id,
                store_slots,
                globals,
                stores: &def.stores,
                store_defs: &self.stores,
            };
            let BuiltNode {
                node,
                flush,
                lifecycle,
            } = (def.factory)(&ctx);
            if let NodeKind::Source {
                topics: source_topics,
                extractor,
            } = &def.kind
                && let Some(source) = node.downcast_ref::<SourceRef>()
            {
                for t in source_topics {
                    if let Some(index) = topics.index_of(&t.resolve(application_id)) {
                        let internal = matches!(t, TopicRef::Repartition(_));
                        sources.push((index, source.clone(), extractor.clone(), internal));
                    }
                }
            }
            if let Some(flush) = flush {
                flushes.push(flush);
            }
            if let Some(lifecycle) = lifecycle {
                lifecycles.push(lifecycle);
            }
            built[id] = Some(node);
        }
        // Built children-first; commits flush parents first, so forwarded updates reach a
        // downstream stateful node before it flushes. Processors are initialized parents
        // first too.
        flushes.reverse();
        lifecycles.reverse();
        Instance {
            sources,
            flushes,
            lifecycles,
        }
    }
}

/// The nodes of one task: its sources by topic index, and its stateful nodes in topological
/// order.
pub(crate) struct Instance {
    /// Each source's topic index, node, own timestamp extractor, and whether the topic is a
    /// repartition topic.
    pub(crate) sources: Vec<(usize, SourceRef, Option<TimestampExtractorRef>, bool)>,
    pub(crate) flushes: Vec<FlushRef>,
    pub(crate) lifecycles: Vec<LifecycleRef>,
}

/// What a node factory can see: its children (already built) and the resolved names.
pub(crate) struct BuildCtx<'a> {
    name: &'a str,
    send_old_values: bool,
    children: &'a [usize],
    nodes: &'a [NodeDef],
    store_defs: &'a [StoreDef],
    built: &'a [Option<Erased>],
    topics: &'a TopicTable,
    application_id: &'a str,
    store_slots: &'a [Option<usize>],
    globals: &'a [Arc<GlobalStore>],
    stores: &'a [usize],
}

impl BuildCtx<'_> {
    /// The node's name.
    pub(crate) fn name(&self) -> &str {
        self.name
    }

    /// Whether the node forwards old values (`Change`s): a downstream node asked.
    pub(crate) fn sends_old_values(&self) -> bool {
        self.send_old_values
    }

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

    /// The node's children that take `(K, V)`, typed: for a node whose children take different
    /// types (a foreign-key join's subscription side).
    pub(crate) fn forward_some<K: 'static, V: 'static>(&self) -> Forward<K, V> {
        let children = self
            .children
            .iter()
            .filter_map(|&c| {
                self.built[c]
                    .as_ref()
                    .and_then(|b| b.downcast_ref::<NodeRef<K, V>>())
                    .cloned()
            })
            .collect();
        Forward { children }
    }

    /// What a processor node knows of itself: name, children (typed, and their names) and
    /// connected stores.
    pub(crate) fn node_shared<K: 'static, V: 'static>(&self) -> NodeShared<K, V> {
        NodeShared {
            name: Arc::from(self.name),
            forward: self.forward::<K, V>(),
            child_names: self
                .children
                .iter()
                .map(|&c| Arc::from(self.nodes[c].name.as_str()))
                .collect(),
            stores: (0..self.stores.len())
                .map(|i| {
                    let def = &self.store_defs[self.stores[i]];
                    ConnectedStore {
                        name: def.name.clone(),
                        slot: self.store_slot(i),
                        serdes: def.serdes.clone(),
                        kind: def.kind,
                    }
                })
                .collect(),
        }
    }

    /// The topic-table index of `topic`. Every topic the topology names is in the table.
    pub(crate) fn topic_index(&self, topic: &TopicRef) -> usize {
        self.topics
            .index_of(&topic.resolve(self.application_id))
            .expect("riffle invariant: the topic table holds every topic the topology names")
    }

    /// The store of the topology's global table `i`.
    pub(crate) fn global_store(&self, i: usize) -> Arc<GlobalStore> {
        self.globals
            .get(i)
            .cloned()
            .expect("riffle invariant: an application opens a store for every global table")
    }

    /// The task-local slot of the topology's store `store` (one of this node's).
    pub(crate) fn slot_of(&self, store: usize) -> usize {
        self.store_slots
            .get(store)
            .copied()
            .flatten()
            .expect("riffle invariant: a task creates every store of its sub-topology")
    }

    /// The task-local slot of this node's `i`-th store.
    pub(crate) fn store_slot(&self, i: usize) -> usize {
        self.stores
            .get(i)
            .and_then(|&s| self.store_slots.get(s).copied().flatten())
            .expect("riffle invariant: a task creates every store of its sub-topology")
    }
}
