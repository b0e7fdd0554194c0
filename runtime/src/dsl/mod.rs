//! The DSL: [`StreamsBuilder`], [`KStream`], [`KGroupedStream`], [`KTable`] and their options.
//!
//! As in Kafka Streams, key-changing operations (`map`, `select_key`, `flat_map`) mark a stream
//! as needing a repartition; a later `group_by_key` then routes it through a repartition topic,
//! which starts a new sub-topology.

pub(crate) mod join;
mod options;
pub(crate) mod table;
pub(crate) mod window;

pub use join::foreign_key::TableJoined;
pub use join::stream_stream::{JoinWindows, StreamJoined};
pub use join::stream_table::Joined;
pub use options::{Consumed, Grouped, Materialized, Produced, StoreType};
pub use table::global::GlobalKTable;
pub use table::grouped::KGroupedTable;
pub use table::suppress::{BufferConfig, Suppressed};
pub use window::{SessionWindowedKStream, TimeWindowedKStream, WindowedBy};

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::table::node::TableView;
use crate::processor::node::{Aggregate, FilterMap, FlatMap, FlushRef, NodeRef, Passthrough};
use crate::processor::{FixedKeyProcessor, Processor, StoreSerdes};
use crate::serdes::{DefaultSerde, SerdeRef, Serdes};
use crate::state::stores::StoreBuilder;
use crate::topology::{
    BuiltNode, Erased, GraphBuilder, NodeFactory, NodeKind, OldValues, StoreDef, TopicRef,
    Topology, TypeSig,
};
use crate::types::error::Result;
use crate::types::window::WindowKind;

/// Builds a [`Topology`] with the DSL.
///
/// ```
/// use riffle::{Consumed, Produced, Serdes, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// builder
///     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
///     .group_by_key()
///     .count()
///     .to_stream()
///     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
/// let topology = builder.build().unwrap();
/// assert_eq!(topology.subtopology_count(), 1);
/// ```
#[derive(Default)]
pub struct StreamsBuilder {
    graph: Rc<RefCell<GraphBuilder>>,
}

impl std::fmt::Debug for StreamsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsBuilder")
            .field("nodes", &self.graph.borrow().nodes.len())
            .finish()
    }
}

impl StreamsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A stream of the records of `topic`.
    pub fn stream<K, V>(&self, topic: &str, consumed: Consumed<K, V>) -> KStream<K, V>
    where
        K: Clone + 'static,
        V: Clone + 'static,
    {
        self.stream_from(&[topic], consumed)
    }

    /// A stream of the records of several topics, merged.
    pub fn stream_from<K, V>(&self, topics: &[&str], consumed: Consumed<K, V>) -> KStream<K, V>
    where
        K: Clone + 'static,
        V: Clone + 'static,
    {
        let topics = topics
            .iter()
            .map(|t| TopicRef::External((*t).to_owned()))
            .collect();
        add_source(&self.graph, topics, consumed, false)
    }

    /// Adds a store for processors to use: name it in [`KStream::process`] or
    /// [`KStream::process_values`] (Kafka's `StreamsBuilder.addStateStore`).
    pub fn add_state_store<K: 'static, V: 'static>(&self, builder: StoreBuilder<K, V>) -> &Self {
        let mut g = self.graph.borrow_mut();
        if let Err(e) = g.declare_store(builder.into_def()) {
            g.errors.push(e);
        }
        self
    }

    /// Finishes the topology: numbers its sub-topologies and checks it.
    pub fn build(self) -> Result<Topology> {
        let graph = std::mem::take(&mut *self.graph.borrow_mut());
        Topology::from_graph(graph)
    }
}

fn add_source<K, V>(
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

/// A stream of key-value records.
pub struct KStream<K, V> {
    graph: Rc<RefCell<GraphBuilder>>,
    node: usize,
    repartition_required: bool,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for KStream<K, V> {
    fn clone(&self) -> Self {
        KStream::at(self.graph.clone(), self.node, self.repartition_required)
    }
}

impl<K, V> KStream<K, V> {
    fn at(graph: Rc<RefCell<GraphBuilder>>, node: usize, repartition_required: bool) -> Self {
        KStream {
            graph,
            node,
            repartition_required,
            types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for KStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KStream").field("node", &self.node).finish()
    }
}

type FilterMapFn<K, V, K2, V2> = Arc<dyn Fn(K, V) -> Option<(K2, V2)> + Send + Sync>;
type FlatMapFn<K, V, K2, V2> = Arc<dyn Fn(K, V, &mut dyn FnMut(K2, V2)) + Send + Sync>;

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    fn filter_map<K2, V2>(
        &self,
        prefix: &str,
        parents: &[usize],
        f: FilterMapFn<K, V, K2, V2>,
        repartition_required: bool,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
    {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(FilterMap {
                f: f.clone(),
                forward: ctx.forward::<K2, V2>(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = g.next_name(prefix);
        let types = (Some(TypeSig::of::<K, V>()), Some(TypeSig::of::<K2, V2>()));
        let node = g.add_node(
            name,
            NodeKind::Processor,
            parents,
            factory,
            types.0,
            types.1,
        );
        KStream::at(self.graph.clone(), node, repartition_required)
    }

    /// Keeps the records for which `predicate` holds.
    pub fn filter(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        let f = Arc::new(move |k, v| predicate(&k, &v).then_some((k, v)));
        self.filter_map("KSTREAM-FILTER", &[self.node], f, self.repartition_required)
    }

    /// Drops the records for which `predicate` holds.
    pub fn filter_not(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        let f = Arc::new(move |k, v| (!predicate(&k, &v)).then_some((k, v)));
        self.filter_map("KSTREAM-FILTER", &[self.node], f, self.repartition_required)
    }

    /// Maps each record to a new key and value (marks the stream for repartitioning).
    pub fn map<K2, V2>(
        &self,
        f: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
    {
        self.filter_map(
            "KSTREAM-MAP",
            &[self.node],
            Arc::new(move |k, v| Some(f(k, v))),
            true,
        )
    }

    /// Maps each value, keeping the key.
    pub fn map_values<V2>(&self, f: impl Fn(V) -> V2 + Send + Sync + 'static) -> KStream<K, V2>
    where
        V2: Clone + 'static,
    {
        let g = Arc::new(move |k, v| Some((k, f(v))));
        self.filter_map(
            "KSTREAM-MAPVALUES",
            &[self.node],
            g,
            self.repartition_required,
        )
    }

    /// Gives each record a new key computed from it (marks the stream for repartitioning).
    pub fn select_key<K2>(&self, f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static) -> KStream<K2, V>
    where
        K2: Clone + 'static,
    {
        let g = Arc::new(move |k, v| Some((f(&k, &v), v)));
        self.filter_map("KSTREAM-KEY-SELECT", &[self.node], g, true)
    }

    /// Calls `f` on each record and passes it on unchanged.
    pub fn peek(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> Self {
        let g = Arc::new(move |k, v| {
            f(&k, &v);
            Some((k, v))
        });
        self.filter_map("KSTREAM-PEEK", &[self.node], g, self.repartition_required)
    }

    /// Calls `f` on each record; ends the stream.
    pub fn foreach(&self, f: impl Fn(K, V) + Send + Sync + 'static) {
        let g: FilterMapFn<K, V, K, V> = Arc::new(move |k, v| {
            f(k, v);
            None
        });
        self.filter_map("KSTREAM-FOREACH", &[self.node], g, false);
    }

    /// The records of both streams.
    pub fn merge(&self, other: &KStream<K, V>) -> Self {
        let repartition = self.repartition_required || other.repartition_required;
        let f = Arc::new(|k, v| Some((k, v)));
        self.filter_map("KSTREAM-MERGE", &[self.node, other.node], f, repartition)
    }

    fn flat_map_node<K2, V2>(
        &self,
        prefix: &str,
        f: FlatMapFn<K, V, K2, V2>,
        repartition_required: bool,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
    {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(FlatMap {
                f: f.clone(),
                forward: ctx.forward::<K2, V2>(),
                out: Vec::new(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = g.next_name(prefix);
        let types = (Some(TypeSig::of::<K, V>()), Some(TypeSig::of::<K2, V2>()));
        let node = g.add_node(
            name,
            NodeKind::Processor,
            &[self.node],
            factory,
            types.0,
            types.1,
        );
        KStream::at(self.graph.clone(), node, repartition_required)
    }

    /// Maps each record to zero or more records (marks the stream for repartitioning).
    pub fn flat_map<K2, V2, I>(
        &self,
        f: impl Fn(K, V) -> I + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
        I: IntoIterator<Item = (K2, V2)>,
    {
        let g = Arc::new(move |k, v, out: &mut dyn FnMut(K2, V2)| {
            for (k2, v2) in f(k, v) {
                out(k2, v2);
            }
        });
        self.flat_map_node("KSTREAM-FLATMAP", g, true)
    }

    /// Maps each value to zero or more values, keeping the key.
    pub fn flat_map_values<V2, I>(
        &self,
        f: impl Fn(V) -> I + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        V2: Clone + 'static,
        I: IntoIterator<Item = V2>,
    {
        let g = Arc::new(move |k: K, v, out: &mut dyn FnMut(K, V2)| {
            for v2 in f(v) {
                out(k.clone(), v2);
            }
        });
        self.flat_map_node("KSTREAM-FLATMAPVALUES", g, self.repartition_required)
    }

    /// Writes the stream to `topic`, partitioned by key with Kafka's default partitioner.
    pub fn to(&self, topic: &str, produced: Produced<K, V>) {
        add_sink(
            &self.graph,
            self.node,
            TopicRef::External(topic.to_owned()),
            produced.key,
            produced.value,
        );
    }

    /// Runs a [`Processor`] made by `supplier` for each task on every record, with the stores
    /// named in `stores` (added with [`StreamsBuilder::add_state_store`]) connected to it. The
    /// processor may change keys: a later `group_by_key` repartitions.
    pub fn process<KOut, VOut, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<KOut, VOut>
    where
        KOut: Clone + 'static,
        VOut: Clone + 'static,
        P: Processor<K, V, KOut, VOut>,
    {
        let mut g = self.graph.borrow_mut();
        let name = g.next_name("KSTREAM-PROCESSOR");
        let node = g.processor(name, supplier, &[self.node]);
        if let Err(e) = g.connect_stores(node, stores) {
            g.errors.push(e);
        }
        KStream::at(self.graph.clone(), node, true)
    }

    /// Runs a [`FixedKeyProcessor`] made by `supplier` for each task: like
    /// [`KStream::process`], but keys stay, so no repartitioning follows.
    pub fn process_values<VOut, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<K, VOut>
    where
        VOut: Clone + 'static,
        P: FixedKeyProcessor<K, V, VOut>,
    {
        let mut g = self.graph.borrow_mut();
        let name = g.next_name("KSTREAM-PROCESSVALUES");
        let node = g.fixed_key_processor(name, supplier, &[self.node]);
        if let Err(e) = g.connect_stores(node, stores) {
            g.errors.push(e);
        }
        KStream::at(self.graph.clone(), node, self.repartition_required)
    }

    /// The name of the node this stream comes out of, to attach processors to it with the
    /// low-level [`Topology`] API.
    pub fn node_name(&self) -> String {
        self.graph.borrow().nodes[self.node].name.clone()
    }

    /// Groups by the current key, with the default serdes of `K` and `V`.
    pub fn group_by_key(&self) -> KGroupedStream<K, V>
    where
        K: DefaultSerde,
        V: DefaultSerde,
    {
        self.group_by_key_with(Grouped::with(K::default_serde(), V::default_serde()))
    }

    /// Groups by the current key. If the key was changed upstream, records go through a
    /// repartition topic first.
    pub fn group_by_key_with(&self, grouped: Grouped<K, V>) -> KGroupedStream<K, V> {
        KGroupedStream {
            graph: self.graph.clone(),
            node: self.node,
            repartition_required: self.repartition_required,
            grouped,
        }
    }

    /// Groups by a new key computed from each record, through a repartition topic.
    pub fn group_by<K2>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KGroupedStream<K2, V>
    where
        K2: Clone + 'static,
    {
        self.select_key(f).group_by_key_with(grouped)
    }
}

fn add_sink<K, V>(
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
fn repartition<K, V>(
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

/// A stream grouped by key, ready to aggregate.
pub struct KGroupedStream<K, V> {
    graph: Rc<RefCell<GraphBuilder>>,
    node: usize,
    repartition_required: bool,
    grouped: Grouped<K, V>,
}

impl<K, V> std::fmt::Debug for KGroupedStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedStream")
            .field("node", &self.node)
            .finish()
    }
}

type FoldFn<K, V, A> = Arc<dyn Fn(&K, V, Option<A>) -> Option<A> + Send + Sync>;

impl<K, V> KGroupedStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Counts the records per key.
    pub fn count(&self) -> KTable<K, i64> {
        self.count_with(Materialized::new())
    }

    /// Counts the records per key, in the store `materialized` describes.
    pub fn count_with(&self, materialized: Materialized<i64>) -> KTable<K, i64> {
        let fold: FoldFn<K, V, i64> =
            Arc::new(|_, _, old| Some(old.unwrap_or(0).saturating_add(1)));
        self.fold(materialized, Serdes::i64(), fold)
    }

    /// Combines the values per key with `reducer`; the first value is the start.
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<V>,
    ) -> KTable<K, V> {
        let fold: FoldFn<K, V, V> = Arc::new(move |_, v, old| {
            Some(match old {
                Some(old) => reducer(old, v),
                None => v,
            })
        });
        let serde = materialized
            .value_serde
            .clone()
            .unwrap_or_else(|| self.grouped.value.clone());
        self.fold(materialized, serde, fold)
    }

    /// Folds the values per key into an aggregate that starts at `init()`.
    pub fn aggregate<A>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<K, A>
    where
        A: Clone + 'static,
    {
        let fold: FoldFn<K, V, A> =
            Arc::new(move |k, v, old| Some(adder(k, v, old.unwrap_or_else(&init))));
        self.fold(materialized, aggregate_serde, fold)
    }

    /// The name of an aggregation's store: the given one, else a generated one.
    pub(crate) fn store_name(&self, name: &Option<String>) -> String {
        match name {
            Some(name) => name.clone(),
            None => self
                .graph
                .borrow_mut()
                .next_name("KSTREAM-AGGREGATE-STATE-STORE"),
        }
    }

    /// The node an aggregation reads from: the grouped stream, or, if its key changed, the
    /// source of a repartition topic named after the grouping (else the store).
    pub(crate) fn aggregate_parent(&self, store_name: &str) -> usize {
        if !self.repartition_required {
            return self.node;
        }
        let topic_name = self
            .grouped
            .name
            .clone()
            .unwrap_or_else(|| store_name.to_owned());
        let topic = TopicRef::repartition(topic_name);
        let (key, value) = (self.grouped.key.clone(), self.grouped.value.clone());
        repartition(&self.graph, self.node, topic, key, value)
    }

    fn fold<A>(
        &self,
        materialized: Materialized<A>,
        agg_serde: SerdeRef<A>,
        fold: FoldFn<K, V, A>,
    ) -> KTable<K, A>
    where
        A: Clone + 'static,
    {
        let store_name = self.store_name(&materialized.name);
        let parent = self.aggregate_parent(&store_name);
        aggregate_table(
            &self.graph,
            "KSTREAM-AGGREGATE",
            parent,
            store_name,
            &materialized,
            self.grouped.key.clone(),
            agg_serde,
            fold,
        )
    }
}

/// Adds an aggregation node `<prefix>-<n>` below `parent`, folding what `parent` forwards into
/// the store `store_name` (named, typed and backed as `materialized` says), and returns its
/// table: the stream aggregations' and, folding `Change`s, the grouped tables'.
#[allow(clippy::too_many_arguments)]
fn aggregate_table<K, VIn, A>(
    graph: &Rc<RefCell<GraphBuilder>>,
    prefix: &str,
    parent: usize,
    store_name: String,
    materialized: &Materialized<A>,
    key_serde: SerdeRef<K>,
    agg_serde: SerdeRef<A>,
    fold: FoldFn<K, VIn, A>,
) -> KTable<K, A>
where
    K: Clone + 'static,
    VIn: 'static,
    A: Clone + 'static,
{
    let (table_key_serde, table_value_serde) = (key_serde.clone(), agg_serde.clone());
    let factory: NodeFactory = Arc::new(move |ctx| {
        let aggregate = Rc::new(RefCell::new(Aggregate {
            store: ctx.store_slot(0),
            key_serde: key_serde.clone(),
            agg_serde: agg_serde.clone(),
            fold: fold.clone(),
            forward: ctx.forward::<K, A>(),
            send_old: ctx.sends_old_values(),
        }));
        let flush: FlushRef = aggregate.clone();
        let node: NodeRef<K, VIn> = aggregate;
        BuiltNode {
            node: Box::new(node),
            flush: Some(flush),
            lifecycle: None,
        }
    });
    let mut g = graph.borrow_mut();
    let node = g.add_processor_node::<K, VIn, K, A>(prefix, &[parent], factory);
    g.nodes[node].old_values = OldValues::FromStore;
    let persistent = materialized.store_type == StoreType::Persistent;
    if g.stores.iter().any(|s| s.name == store_name) {
        g.errors
            .push(format!("a store named {store_name:?} already exists"));
    }
    let mut def = StoreDef::dsl(store_name, materialized.logging, persistent);
    def.caching = materialized.caching;
    def.serdes = Some(Arc::new(StoreSerdes {
        key: table_key_serde.clone(),
        value: table_value_serde.clone(),
    }));
    let store = g.add_store(node, def);
    KTable {
        graph: graph.clone(),
        node,
        key_serde: table_key_serde.clone(),
        value_serde: table_value_serde.clone(),
        windows: None,
        window_end: None,
        view: Some(TableView::of_store(
            store,
            table_key_serde,
            table_value_serde,
        )),
    }
}

/// A changelog stream: the latest value per key.
pub struct KTable<K, V> {
    pub(crate) graph: Rc<RefCell<GraphBuilder>>,
    pub(crate) node: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    /// The windows of a windowed aggregation's table (what `suppress` closes them by).
    pub(crate) windows: Option<WindowKind>,
    /// For a windowed table, a key's window end.
    #[allow(clippy::type_complexity)]
    pub(crate) window_end: Option<Arc<dyn Fn(&K) -> i64 + Send + Sync>>,
    /// Where a join finds the table's current value for a key (`None`: a windowed or
    /// suppressed table, which cannot be joined).
    pub(crate) view: Option<TableView<K, V>>,
}

impl<K, V> std::fmt::Debug for KTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KTable").field("node", &self.node).finish()
    }
}

impl<K, V> KTable<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// The stream of the table's updates.
    pub fn to_stream(&self) -> KStream<K, V> {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(Passthrough {
                forward: ctx.forward::<K, V>(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = g.next_name("KTABLE-TOSTREAM");
        let types = Some(TypeSig::of::<K, V>());
        let node = g.add_node(
            name,
            NodeKind::Processor,
            &[self.node],
            factory,
            types,
            types,
        );
        KStream::at(self.graph.clone(), node, false)
    }

    /// The serde of the table's keys.
    pub fn key_serde(&self) -> SerdeRef<K> {
        self.key_serde.clone()
    }

    /// The serde of the table's values.
    pub fn value_serde(&self) -> SerdeRef<V> {
        self.value_serde.clone()
    }
}
