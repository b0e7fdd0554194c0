//! The topology: the graph the DSL builds, split into numbered sub-topologies, and the
//! factories that instantiate a sub-topology's nodes for one task.
//!
//! Node and store names follow Kafka Streams' scheme (`KSTREAM-MAP-0000000001`), and
//! sub-topologies are numbered by their first node, so a topology built twice has the same ids
//! and the same internal topic names.

pub(crate) mod options;

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::processor::collector::TopicTable;
use crate::processor::node::{FlushRef, Forward, Node, NodeRef, Sink, Source, SourceRef};
use crate::processor::{
    ConnectedStore, FixedKeyNode, FixedKeyProcessor, Lifecycle, NodeShared, Processor,
    ProcessorNode,
};
use crate::serdes::SerdeRef;
pub(crate) use crate::state::def::{StoreDef, StoreKind};
use crate::state::global::CheckFn;
use crate::state::global::GlobalStore;
use crate::state::stores::StoreBuilder;
use crate::topology::options::{Consumed, Produced};
use crate::types::error::{Error, Result};
use crate::types::timestamp::TimestampExtractorRef;

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

pub(crate) enum NodeKind {
    Source {
        topics: Vec<TopicRef>,
        /// The source's own timestamp extractor (`None`: the config's).
        extractor: Option<TimestampExtractorRef>,
    },
    Processor,
    Sink {
        topic: TopicRef,
    },
}

pub(crate) type Erased = Box<dyn Any>;
pub(crate) type LifecycleRef = Rc<RefCell<dyn Lifecycle>>;

/// A node built for one task: its typed handle (erased) and, for stateful nodes, the handle its
/// task calls at commit; for processors, the one it calls `init` and `close` through.
pub(crate) struct BuiltNode {
    pub(crate) node: Erased,
    pub(crate) flush: Option<FlushRef>,
    pub(crate) lifecycle: Option<LifecycleRef>,
}

impl BuiltNode {
    pub(crate) fn plain(node: Erased) -> Self {
        BuiltNode {
            node,
            flush: None,
            lifecycle: None,
        }
    }
}

/// The key and value types a node takes or forwards, checked when nodes are connected.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TypeSig {
    key: TypeId,
    value: TypeId,
    names: (&'static str, &'static str),
}

impl TypeSig {
    pub(crate) fn of<K: 'static, V: 'static>() -> Self {
        TypeSig {
            key: TypeId::of::<K>(),
            value: TypeId::of::<V>(),
            names: (std::any::type_name::<K>(), std::any::type_name::<V>()),
        }
    }
}

impl PartialEq for TypeSig {
    fn eq(&self, other: &Self) -> bool {
        (self.key, self.value) == (other.key, other.value)
    }
}

impl fmt::Display for TypeSig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.names.0, self.names.1)
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
    /// What it forwards (`None` for a sink): checked against what a child added by name takes.
    pub(crate) output: Option<TypeSig>,
    /// Where the node's old values would come from, if it is a table's.
    pub(crate) old_values: OldValues,
    /// A downstream node asked for old values: the node forwards `Change`s.
    pub(crate) send_old_values: bool,
}

/// Where a table node's old values come from, for the operations that need them
/// (`KTable::group_by`'s subtraction, table–table joins; Kafka Streams' `enableSendingOldValues`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OldValues {
    /// None: not a table's node, or a table that cannot give them (windowed, suppressed).
    Unavailable,
    /// Read from the node's own store at commit (a table's store, an aggregation).
    FromStore,
    /// Computed from what its parents send (an unmaterialized filter or `map_values`, a join).
    FromParents,
}

impl StoreDef {
    /// Whether the store has a changelog topic of its own, `<application_id>-<store>-changelog`
    /// (a table's store whose source topic is its changelog has none).
    pub(crate) fn has_changelog_topic(&self) -> bool {
        self.logged && self.source_topic.is_none()
    }

    /// A DSL aggregation's store: cached, timestamped, serdes set by the caller.
    pub(crate) fn dsl(name: String, logged: bool, persistent: bool) -> Self {
        StoreDef {
            name,
            logged,
            persistent,
            caching: true,
            timestamped: true,
            serdes: None,
            kind: StoreKind::KeyValue,
            ordered_cache: false,
            source_topic: None,
        }
    }
}

/// A global table: its store and the topic it holds whole (every partition, in every instance,
/// outside the tasks; [`crate::engine::global`]).
#[derive(Clone)]
pub(crate) struct GlobalDef {
    pub(crate) store: String,
    pub(crate) topic: String,
    /// Kept in the store database, with its position in each partition (else in memory, read
    /// again at each start).
    pub(crate) persistent: bool,
    /// Whether a record's key and value decode with the table's serdes.
    pub(crate) check: CheckFn,
}

impl fmt::Debug for GlobalDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalDef")
            .field("store", &self.store)
            .field("topic", &self.topic)
            .field("persistent", &self.persistent)
            .finish_non_exhaustive()
    }
}

/// The mutable graph behind a [`crate::StreamsBuilder`] and the low-level [`Topology`] API.
#[derive(Default)]
pub(crate) struct GraphBuilder {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: Vec<StoreDef>,
    pub(crate) globals: Vec<GlobalDef>,
    counter: usize,
    /// Mistakes found while building (a DSL call cannot return them): reported by `build`.
    pub(crate) errors: Vec<String>,
    /// Pairs of nodes joined to each other: the source topics above each must have as many
    /// partitions as those above the other (co-partitioned), checked when topics resolve.
    pub(crate) copartitioned: Vec<(usize, usize)>,
    /// Each repartition topic the DSL made: the node writing it and the source reading it, so a
    /// second operation through the same topic from the same node reads the same source
    /// (Kafka reuses a named grouping's repartition topic).
    pub(crate) repartitions: Vec<(TopicRef, usize, usize)>,
}

impl GraphBuilder {
    pub(crate) fn next_name(&mut self, prefix: &str) -> String {
        let name = format!("{prefix}-{:010}", self.counter);
        self.counter += 1;
        name
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_node(
        &mut self,
        name: String,
        kind: NodeKind,
        parents: &[usize],
        factory: NodeFactory,
        _input: Option<TypeSig>,
        output: Option<TypeSig>,
    ) -> usize {
        let id = self.nodes.len();
        self.nodes.push(NodeDef {
            name,
            kind,
            parents: parents.to_vec(),
            children: Vec::new(),
            stores: Vec::new(),
            factory,
            output,
            old_values: OldValues::Unavailable,
            send_old_values: false,
        });
        for &p in parents {
            self.nodes[p].children.push(id);
        }
        id
    }

    /// Adds a DSL processor named `<prefix>-<n>` below `parents`, taking `(KIn, VIn)` and
    /// forwarding `(KOut, VOut)`.
    pub(crate) fn add_processor_node<KIn: 'static, VIn: 'static, KOut: 'static, VOut: 'static>(
        &mut self,
        prefix: &str,
        parents: &[usize],
        factory: NodeFactory,
    ) -> usize {
        let name = self.next_name(prefix);
        self.add_named_processor::<KIn, VIn, KOut, VOut>(name, parents, factory)
    }

    /// [`add_processor_node`](Self::add_processor_node) with the name given.
    pub(crate) fn add_named_processor<KIn: 'static, VIn: 'static, KOut: 'static, VOut: 'static>(
        &mut self,
        name: String,
        parents: &[usize],
        factory: NodeFactory,
    ) -> usize {
        let (input, output) = (TypeSig::of::<KIn, VIn>(), TypeSig::of::<KOut, VOut>());
        self.add_node(
            name,
            NodeKind::Processor,
            parents,
            factory,
            Some(input),
            Some(output),
        )
    }

    /// Makes `node` forward old values, and the table nodes above it that it computes them
    /// from; an error naming the table that cannot.
    pub(crate) fn send_old_values(&mut self, node: usize) -> Result<(), String> {
        let def = &mut self.nodes[node];
        if def.send_old_values {
            return Ok(());
        }
        match def.old_values {
            OldValues::Unavailable => Err(format!(
                "{} cannot send old values: windowed and suppressed tables, and the results of \
                 foreign-key joins not materialized (join_foreign_with, left_join_foreign_with), \
                 cannot be grouped or joined as tables",
                def.name
            )),
            OldValues::FromStore => {
                def.send_old_values = true;
                Ok(())
            }
            OldValues::FromParents => {
                def.send_old_values = true;
                for parent in def.parents.clone() {
                    self.send_old_values(parent)?;
                }
                Ok(())
            }
        }
    }

    pub(crate) fn add_store(&mut self, node: usize, store: StoreDef) -> usize {
        let id = self.stores.len();
        self.stores.push(store);
        self.nodes[node].stores.push(id);
        id
    }

    /// Declares a store not yet connected to any processor; an error if the name is taken.
    pub(crate) fn declare_store(&mut self, store: StoreDef) -> Result<usize, String> {
        if self.stores.iter().any(|s| s.name == store.name) {
            return Err(format!("a store named {:?} already exists", store.name));
        }
        self.stores.push(store);
        Ok(self.stores.len() - 1)
    }

    /// Connects `node` to the stores named `names`.
    pub(crate) fn connect_stores(&mut self, node: usize, names: &[&str]) -> Result<(), String> {
        for name in names {
            let Some(store) = self.stores.iter().position(|s| s.name == *name) else {
                return Err(format!(
                    "processor {} names store {name:?}, which was not added (add_state_store)",
                    self.nodes[node].name
                ));
            };
            if !self.nodes[node].stores.contains(&store) {
                self.nodes[node].stores.push(store);
            }
        }
        Ok(())
    }

    fn node_named(&self, name: &str) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| format!("no node is named {name:?}"))
    }

    /// The node ids of `parents`, checked to forward what a node taking `input` takes.
    fn parents_for(
        &self,
        child: &str,
        parents: &[&str],
        input: TypeSig,
    ) -> Result<Vec<usize>, String> {
        if self.nodes.iter().any(|n| n.name == child) {
            return Err(format!("a node named {child:?} already exists"));
        }
        if parents.is_empty() {
            return Err(format!("{child} needs at least one parent"));
        }
        let mut ids = Vec::with_capacity(parents.len());
        for parent in parents {
            let id = self.node_named(parent)?;
            match self.nodes[id].output {
                None => return Err(format!("{parent} is a sink: it has no children")),
                Some(out) if out != input => {
                    return Err(format!(
                        "{child} takes {input} but its parent {parent} forwards {out}"
                    ));
                }
                Some(_) => ids.push(id),
            }
        }
        Ok(ids)
    }

    /// Adds a source reading `topics`.
    pub(crate) fn source<K: Clone + 'static, V: Clone + 'static>(
        &mut self,
        name: String,
        topics: Vec<TopicRef>,
        consumed: Consumed<K, V>,
    ) -> usize {
        self.source_of(name, topics, consumed, false)
    }

    /// Adds a source reading `topics`, for a table (`table`: records without a value are
    /// deletes) or a stream.
    pub(crate) fn source_of<K: Clone + 'static, V: Clone + 'static>(
        &mut self,
        name: String,
        topics: Vec<TopicRef>,
        consumed: Consumed<K, V>,
        table: bool,
    ) -> usize {
        let (key_serde, value_serde) = (consumed.key, consumed.value);
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: SourceRef = Rc::new(RefCell::new(Source {
                key_serde: key_serde.clone(),
                value_serde: value_serde.clone(),
                forward: ctx.forward::<K, V>(),
                table,
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let kind = NodeKind::Source {
            topics,
            extractor: consumed.extractor,
        };
        self.add_node(name, kind, &[], factory, None, Some(TypeSig::of::<K, V>()))
    }

    /// Adds a sink writing to `topic`.
    pub(crate) fn sink<K: 'static, V: 'static>(
        &mut self,
        name: String,
        topic: TopicRef,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        parents: &[usize],
    ) -> usize {
        let sink_topic = topic.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(Sink {
                topic: ctx.topic_index(&sink_topic),
                key_serde: key_serde.clone(),
                value_serde: value_serde.clone(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let input = Some(TypeSig::of::<K, V>());
        self.add_node(
            name,
            NodeKind::Sink { topic },
            parents,
            factory,
            input,
            None,
        )
    }

    /// Adds a node running a [`Processor`] from `supplier`.
    pub(crate) fn processor<KIn, VIn, KOut, VOut, P>(
        &mut self,
        name: String,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        parents: &[usize],
    ) -> usize
    where
        KIn: 'static,
        VIn: 'static,
        KOut: Clone + 'static,
        VOut: Clone + 'static,
        P: Processor<KIn, VIn, KOut, VOut>,
    {
        let factory: NodeFactory = Arc::new(move |ctx| {
            lifecycle_node::<KIn, VIn, _>(ProcessorNode {
                processor: Box::new(supplier()),
                node: Rc::new(ctx.node_shared::<KOut, VOut>()),
            })
        });
        let (input, output) = (TypeSig::of::<KIn, VIn>(), TypeSig::of::<KOut, VOut>());
        let kind = NodeKind::Processor;
        self.add_node(name, kind, parents, factory, Some(input), Some(output))
    }

    /// Adds a node running a [`FixedKeyProcessor`] from `supplier`.
    pub(crate) fn fixed_key_processor<K, VIn, VOut, P>(
        &mut self,
        name: String,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        parents: &[usize],
    ) -> usize
    where
        K: Clone + 'static,
        VIn: 'static,
        VOut: Clone + 'static,
        P: FixedKeyProcessor<K, VIn, VOut>,
    {
        let factory: NodeFactory = Arc::new(move |ctx| {
            lifecycle_node::<K, VIn, _>(FixedKeyNode {
                processor: Box::new(supplier()),
                node: Rc::new(ctx.node_shared::<K, VOut>()),
                _types: PhantomData,
            })
        });
        let (input, output) = (TypeSig::of::<K, VIn>(), TypeSig::of::<K, VOut>());
        let kind = NodeKind::Processor;
        self.add_node(name, kind, parents, factory, Some(input), Some(output))
    }
}

/// A processor node's two handles: the typed one its parents call, and the one its task calls
/// `init` and `close` through.
fn lifecycle_node<KIn: 'static, VIn: 'static, N>(node: N) -> BuiltNode
where
    N: Node<KIn, VIn> + Lifecycle + 'static,
{
    let node = Rc::new(RefCell::new(node));
    let lifecycle: LifecycleRef = node.clone();
    let typed: NodeRef<KIn, VIn> = node;
    BuiltNode {
        node: Box::new(typed),
        flush: None,
        lifecycle: Some(lifecycle),
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
    pub(crate) globals: Vec<GlobalDef>,
    pub(crate) subtopologies: Vec<SubtopologyDef>,
    /// The DSL's name counter, kept so names stay unique.
    counter: usize,
    /// Joined node pairs (see [`GraphBuilder`]).
    pub(crate) copartitioned: Vec<(usize, usize)>,
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
    pub(crate) fn from_graph(graph: GraphBuilder) -> Result<Topology> {
        if let Some(first) = graph.errors.first() {
            return Err(Error::Topology(first.clone()));
        }
        if graph.nodes.is_empty() {
            return Err(Error::Topology(
                "the topology has no nodes; add a stream".into(),
            ));
        }
        let subtopologies = split(&graph.nodes)?;
        Ok(Topology {
            nodes: graph.nodes,
            stores: graph.stores,
            globals: graph.globals,
            subtopologies,
            counter: graph.counter,
            copartitioned: graph.copartitioned,
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
        }
    }

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
            repartitions: Vec::new(),
        };
        let (node_count, store_count) = (graph.nodes.len(), graph.stores.len());
        let mut result = change(&mut graph).map_err(Error::Topology);
        if result.is_ok() {
            match split(&graph.nodes) {
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
    /// `Topology.addSink`), partitioned by the serialized key as Kafka's producer does.
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
            g.sink(name.to_owned(), topic, produced.key, produced.value, &ids);
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

/// Splits the graph into sub-topologies: the connected parts, where nodes sharing a store are
/// connected too. Numbered by their first node.
fn split(nodes: &[NodeDef]) -> Result<Vec<SubtopologyDef>> {
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
    Ok(subtopologies)
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
