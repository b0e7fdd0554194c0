//! The mutable graph behind a [`crate::StreamsBuilder`] and the low-level
//! [`Topology`](super::Topology) API:
//! node definitions (their kind, links, stores, factory and type signature), the stores' and
//! global tables' definitions, and the [`GraphBuilder`] the DSL adds nodes to.
//!
//! It only records the graph: splitting it is `split`'s, building nodes for a task is
//! `instantiate`'s.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::processor::node::{FlushRef, Node, NodeRef, Sink, Source, SourceRef};
use crate::processor::routed_sink::{RoutedSink, SinkTopic};
use crate::processor::{FixedKeyNode, FixedKeyProcessor, Lifecycle, Processor, ProcessorNode};
use crate::processor::{StreamPartitionerRef, TopicNameExtractorRef};
use crate::serdes::SerdeRef;
use crate::state::def::{StoreDef, StoreKind};
use crate::state::global::CheckFn;
use crate::topology::options::Consumed;
use crate::types::timestamp::TimestampExtractorRef;

use super::TopicRef;
use super::instantiate::BuildCtx;

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
    /// A sink whose `TopicNameExtractor` names each record's topic; `extractor` describes it.
    DynamicSink {
        extractor: String,
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
    /// What the repartition-merging optimization sees in the node ([`Shape`]).
    pub(crate) shape: Shape,
}

/// What Kafka Streams' `merge.repartition.topics` optimization sees in a DSL node: the operation
/// that changed the key a repartition topic is for, a value-changing one (which stops its
/// search for that operation), a `KStream::merge`, or none of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Shape {
    #[default]
    Plain,
    /// `map`, `select_key` (and `group_by`'s), `flat_map`.
    KeyChanging,
    /// `map_values`, `flat_map_values`.
    ValueChanging,
    /// `KStream::merge`.
    Merge,
}

/// Makes a repartition topic's three nodes below `parent`, named as given (filter, sink,
/// source), writing and reading `topic` with the serdes of the repartition it was made for:
/// what the repartition-merging optimization builds its one topic with.
pub(crate) type RepartitionMaker =
    Arc<dyn Fn(&mut GraphBuilder, usize, [String; 3], TopicRef) -> [usize; 3] + Send + Sync>;

/// A repartition topic the DSL made, and the nodes around it.
#[derive(Clone)]
pub(crate) struct RepartitionDef {
    pub(crate) topic: TopicRef,
    /// The node whose records go through it.
    pub(crate) writer: usize,
    /// Kafka's pass-through `-repartition-filter` node (a grouped table's repartition has none).
    pub(crate) filter: Option<usize>,
    pub(crate) sink: usize,
    pub(crate) source: usize,
    /// Kafka's `OptimizableRepartitionNode` (a grouping's, a join's, `to_table`'s), which
    /// `merge.repartition.topics` may merge with the others of its key-changing operation;
    /// `None` for `KStream::repartition`'s and a grouped table's, which stay as they are.
    pub(crate) maker: Option<RepartitionMaker>,
}

/// A table read from a topic by `StreamsBuilder::table`: its store, the topic, and whether its
/// `Materialized` asked for logging. With Kafka's `reuse.ktable.source.topics` the topic is the
/// store's changelog; without it the store has a changelog topic of its own if logged.
#[derive(Clone, Debug)]
pub(crate) struct TableSourceDef {
    pub(crate) store: usize,
    pub(crate) topic: String,
    pub(crate) logging: bool,
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

/// The mutable graph behind a [`crate::StreamsBuilder`] and the low-level
/// [`Topology`](super::Topology) API.
#[derive(Default)]
pub(crate) struct GraphBuilder {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: Vec<StoreDef>,
    pub(crate) globals: Vec<GlobalDef>,
    pub(super) counter: usize,
    /// Mistakes found while building (a DSL call cannot return them): reported by `build`.
    pub(crate) errors: Vec<String>,
    /// Pairs of nodes joined to each other: the source topics above each must have as many
    /// partitions as those above the other (co-partitioned), checked when topics resolve.
    pub(crate) copartitioned: Vec<(usize, usize)>,
    /// Each repartition topic the DSL made: the node writing it and the nodes around the topic,
    /// so a second operation through the same topic from the same node reads the same source
    /// (Kafka reuses a named grouping's repartition topic), and the optimizer can merge them.
    pub(crate) repartitions: Vec<RepartitionDef>,
    /// The tables `StreamsBuilder::table` read, whose changelog `build` decides.
    pub(crate) table_sources: Vec<TableSourceDef>,
    /// Repartition topics given a partition count (Kafka's `Repartitioned.withNumberOfPartitions`)
    /// instead of their writer's.
    pub(crate) partition_counts: Vec<(TopicRef, u32)>,
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
            shape: Shape::Plain,
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

    pub(super) fn node_named(&self, name: &str) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| format!("no node is named {name:?}"))
    }

    /// The node ids of `parents`, checked to forward what a node taking `input` takes.
    pub(super) fn parents_for(
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

    /// Adds a sink writing to `topic`, partitioned by `partitioner` when there is one (else
    /// the plain [`Sink`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sink_partitioned<K: 'static, V: 'static>(
        &mut self,
        name: String,
        topic: TopicRef,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        partitioner: Option<StreamPartitionerRef<K, V>>,
        parents: &[usize],
    ) -> usize {
        let Some(partitioner) = partitioner else {
            return self.sink(name, topic, key_serde, value_serde, parents);
        };
        let sink_topic = topic.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(RoutedSink {
                name: Arc::from(ctx.name()),
                topic: SinkTopic::Fixed(ctx.topic_index(&sink_topic)),
                key_serde: key_serde.clone(),
                value_serde: value_serde.clone(),
                partitioner: Some(partitioner.clone()),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let input = Some(TypeSig::of::<K, V>());
        let kind = NodeKind::Sink { topic };
        self.add_node(name, kind, parents, factory, input, None)
    }

    /// Adds a sink writing each record to the topic `extractor` names (`description`: how
    /// `describe` names the extractor), partitioned by `partitioner` when there is one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dynamic_sink<K: 'static, V: 'static>(
        &mut self,
        name: String,
        extractor: TopicNameExtractorRef<K, V>,
        description: String,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        partitioner: Option<StreamPartitionerRef<K, V>>,
        parents: &[usize],
    ) -> usize {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(RoutedSink {
                name: Arc::from(ctx.name()),
                topic: SinkTopic::Extracted(extractor.clone()),
                key_serde: key_serde.clone(),
                value_serde: value_serde.clone(),
                partitioner: partitioner.clone(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let input = Some(TypeSig::of::<K, V>());
        let kind = NodeKind::DynamicSink {
            extractor: description,
        };
        self.add_node(name, kind, parents, factory, input, None)
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
