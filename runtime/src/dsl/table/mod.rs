//! Tables in the DSL: [`KTable`], [`StreamsBuilder::table`] and the operations that keep a
//! table a table. A table's joins are in runtime/src/dsl/join/.

pub(crate) mod global;
pub(crate) mod grouped;
pub(crate) mod node;
pub(crate) mod suppress;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::named::node_name;
use crate::dsl::table::node::{TableMap, TableStore, TableView};
use crate::dsl::{Consumed, KStream, Materialized, Named, StoreType, StreamsBuilder};
use crate::processor::StoreSerdes;
use crate::processor::node::{FlushRef, NodeRef, Passthrough, WithDeletes};
use crate::serdes::SerdeRef;
use crate::topology::GraphBuilder;
use crate::topology::{
    BuiltNode, Erased, NodeFactory, NodeKind, OldValues, StoreDef, TableSourceDef, TopicRef,
    TypeSig,
};
use crate::types::window::WindowKind;

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
    /// The stream of the table's updates. A delete travels on as a tombstone: operators that
    /// keep the key (`filter`, `map_values`, `flat_map_values`, `peek`, `merge`) pass it on
    /// without calling their function, and [`KStream::to`] writes it as a record without a
    /// value; an operator whose function needs the value (`map`, `select_key`, an
    /// aggregation, a join, a processor) drops it, counted in `dropped-records`. To see deletes
    /// as values, as Kafka Streams' `toStream()` hands a `null` to the next operator, use
    /// [`KTable::to_stream_with_deletes`].
    pub fn to_stream(&self) -> KStream<K, V> {
        self.to_stream_as(None)
    }

    /// [`KTable::to_stream`], its processor named `named`.
    pub fn to_stream_named(&self, named: Named) -> KStream<K, V> {
        self.to_stream_as(Some(&named))
    }

    fn to_stream_as(&self, named: Option<&Named>) -> KStream<K, V> {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(Passthrough {
                forward: ctx.forward::<K, V>(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, "KTABLE-TOSTREAM", named);
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

    /// The stream of the table's updates with its deletes as `None` (Kafka Streams'
    /// `toStream()`, whose next operator sees a delete as a `null` value). A sink writes `None`
    /// as a tombstone when its value serde is [`Serdes::optional`](crate::Serdes::optional).
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .table("prices", Consumed::with(Serdes::string(), Serdes::i64()), Materialized::new())
    ///     .to_stream_with_deletes()
    ///     .map_values(|price| price.map(|cents| format!("{}.{:02}", cents / 100, cents % 100)))
    ///     .to("labels", Produced::with(Serdes::string(), Serdes::optional(Serdes::string())));
    /// builder.build().unwrap();
    /// ```
    pub fn to_stream_with_deletes(&self) -> KStream<K, Option<V>> {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(WithDeletes {
                forward: ctx.forward::<K, Option<V>>(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = g.next_name("KTABLE-TOSTREAM");
        let node = g.add_node(
            name,
            NodeKind::Processor,
            &[self.node],
            factory,
            Some(TypeSig::of::<K, V>()),
            Some(TypeSig::of::<K, Option<V>>()),
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

impl StreamsBuilder {
    /// A table of the records of `topic`: each record is the key's latest value, a record
    /// without a value deletes the key, and one without a key is dropped (Kafka Streams'
    /// `StreamsBuilder.table`).
    ///
    /// The table is kept in the store `materialized` names (or `<topic>-STATE-STORE-<n>`), in
    /// the topic's own bytes. Its changelog is Kafka's: built with `topology.optimization`
    /// `all` or `reuse.ktable.source.topics` ([`StreamsBuilder::build_with`]), the topic is the
    /// store's changelog (there is no `-changelog` topic, and a task restores the store from
    /// the topic up to its committed offset, whatever `materialized`'s logging says); built
    /// without ([`StreamsBuilder::build`], Kafka's default), the store has its own
    /// `<application_id>-<store>-changelog` topic if logged, as any store.
    /// Its serdes are `consumed`'s, whatever `materialized`'s (Kafka's rule: `Consumed`'s
    /// serdes replace `Materialized`'s).
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let customers = builder.table(
    ///     "customers",
    ///     Consumed::with(Serdes::string(), Serdes::string()),
    ///     Materialized::named("customers-store"),
    /// );
    /// builder
    ///     .stream("orders", Consumed::with(Serdes::string(), Serdes::i64()))
    ///     .join(&customers, |amount, region| format!("{region}:{amount}"))
    ///     .to("orders-by-region", Produced::with(Serdes::string(), Serdes::string()));
    /// let topology = builder.build().unwrap();
    /// assert_eq!(topology.subtopology_count(), 1);
    /// ```
    pub fn table<K, V>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V>
    where
        K: Clone + 'static,
        V: Clone + 'static,
    {
        let (key_serde, value_serde) = (consumed.key.clone(), consumed.value.clone());
        let mut g = self.graph.borrow_mut();
        // Named in Kafka's order: the store (when unnamed), the source, the table's node.
        let store_name = match &materialized.name {
            Some(name) => name.clone(),
            None => g.next_name(&format!("{topic}-STATE-STORE")),
        };
        let source_name = g.next_name("KSTREAM-SOURCE");
        let topics = vec![TopicRef::External(topic.to_owned())];
        let source = g.source_of(source_name, topics, consumed, true);
        let name = g.next_name("KTABLE-SOURCE");
        drop(g);
        let identity: MapFn<K, V, V> = Arc::new(|_, v| Some(v));
        let (node, view) = add_table_store(
            &self.graph,
            name,
            &[source],
            store_name,
            &materialized,
            key_serde.clone(),
            value_serde.clone(),
            identity,
            Some(topic.to_owned()),
        );
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde,
            value_serde,
            windows: None,
            window_end: None,
            view: Some(view),
        }
    }
}

pub(super) type MapFn<K, V, V2> = Arc<dyn Fn(&K, V) -> Option<V2> + Send + Sync>;

/// Adds a node `name` below `parents` that keeps the table in a store named `store_name`: the
/// node's updates (mapped by `map`; `None` is a delete) go to the store's cache, and from it
/// downstream at commit. `source_topic`: the table is that topic's, kept in its own bytes; the
/// topic is the store's changelog if `build` applies Kafka's `reuse.ktable.source.topics`,
/// else the store has a changelog topic of its own (if logged). Returns the node and the
/// table's view.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_table_store<K, VIn, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    name: String,
    parents: &[usize],
    store_name: String,
    materialized: &Materialized<K, V>,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    map: MapFn<K, VIn, V>,
    source_topic: Option<String>,
) -> (usize, TableView<K, V>)
where
    K: Clone + 'static,
    VIn: Clone + 'static,
    V: Clone + 'static,
{
    let raw = source_topic.is_some();
    let (k, v) = (key_serde.clone(), value_serde.clone());
    let factory: NodeFactory = Arc::new(move |ctx| {
        let table = Rc::new(RefCell::new(TableStore {
            store: ctx.store_slot(0),
            key_serde: k.clone(),
            value_serde: v.clone(),
            raw,
            map: map.clone(),
            forward: ctx.forward::<K, V>(),
            send_old: ctx.sends_old_values(),
        }));
        let flush: FlushRef = table.clone();
        let node: NodeRef<K, VIn> = table;
        BuiltNode {
            node: Box::new(node) as Erased,
            flush: Some(flush),
            lifecycle: None,
        }
    });
    let mut g = graph.borrow_mut();
    let types = (TypeSig::of::<K, VIn>(), TypeSig::of::<K, V>());
    let node = g.add_node(
        name,
        NodeKind::Processor,
        parents,
        factory,
        Some(types.0),
        Some(types.1),
    );
    g.nodes[node].old_values = OldValues::FromStore;
    if g.stores.iter().any(|s| s.name == store_name) {
        g.errors
            .push(format!("a store named {store_name:?} already exists"));
    }
    let persistent = materialized.store_type == StoreType::Persistent;
    let mut def = StoreDef::dsl(store_name, materialized.logging, persistent);
    def.caching = materialized.caching;
    def.serdes = Some(Arc::new(StoreSerdes {
        key: key_serde.clone(),
        value: value_serde.clone(),
    }));
    let store = g.add_store(node, def);
    if let Some(topic) = source_topic {
        // Its changelog is decided at `build`, by `reuse.ktable.source.topics`.
        g.table_sources.push(TableSourceDef {
            store,
            topic,
            logging: materialized.logging,
        });
    }
    (node, TableView::of_store(store, key_serde, value_serde))
}

/// Adds a node `name` below `parents` that keeps what they send, as it is, in the store
/// `store_name` (a join's result, materialized); its keys and values are written with
/// `materialized`'s serdes, else `key_serde` and `value_serde`.
pub(super) fn materialize<K, V>(
    graph: &Rc<RefCell<GraphBuilder>>,
    name: String,
    parents: &[usize],
    store_name: String,
    materialized: &Materialized<K, V>,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
) -> (usize, TableView<K, V>)
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    let identity: MapFn<K, V, V> = Arc::new(|_, v| Some(v));
    let serde = materialized.value_serde_or(&value_serde);
    add_table_store(
        graph,
        name,
        parents,
        store_name,
        materialized,
        materialized.key_serde_or(&key_serde),
        serde,
        identity,
        None,
    )
}

impl<K, V> KTable<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// A table with `f` applied to each update without a store: what `f` drops becomes a
    /// delete downstream.
    fn map_node<V2>(
        &self,
        prefix: &str,
        f: MapFn<K, V, V2>,
        value_serde: SerdeRef<V2>,
        filter: bool,
    ) -> KTable<K, V2>
    where
        V2: Clone + 'static,
    {
        let g2 = f.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(TableMap {
                f: g2.clone(),
                forward: ctx.forward::<K, V2>(),
                send_old: ctx.sends_old_values(),
                filter,
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let node = g.add_processor_node::<K, V, K, V2>(prefix, &[self.node], factory);
        g.nodes[node].old_values = OldValues::FromParents;
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde: self.key_serde.clone(),
            value_serde,
            windows: None,
            window_end: None,
            view: self
                .view
                .as_ref()
                .map(|view| view.then(move |k, v| f(k, v))),
        }
    }

    /// A table with `f` applied to each update, kept in its own store (named, typed and
    /// backed as `materialized` says; its keys written with `materialized`'s key serde, else
    /// this table's, its values with `value_serde`).
    fn materialized_node<V2>(
        &self,
        prefix: &str,
        f: MapFn<K, V, V2>,
        materialized: Materialized<K, V2>,
        value_serde: SerdeRef<V2>,
    ) -> KTable<K, V2>
    where
        V2: Clone + 'static,
    {
        let store_name = match &materialized.name {
            Some(name) => name.clone(),
            None => self.graph.borrow_mut().next_name("KTABLE-STATE-STORE"),
        };
        let name = self.graph.borrow_mut().next_name(prefix);
        let key_serde = materialized.key_serde_or(&self.key_serde);
        let (node, view) = add_table_store(
            &self.graph,
            name,
            &[self.node],
            store_name,
            &materialized,
            key_serde.clone(),
            value_serde.clone(),
            f,
            None,
        );
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde,
            value_serde,
            windows: None,
            window_end: None,
            view: Some(view),
        }
    }

    /// The rows for which `predicate` holds; for an update that fails it, a delete of the
    /// key goes downstream (Kafka Streams' `KTable.filter`).
    pub fn filter(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        let f: MapFn<K, V, V> = Arc::new(move |k, v| predicate(k, &v).then_some(v));
        self.map_node("KTABLE-FILTER", f, self.value_serde.clone(), true)
    }

    /// The rows for which `predicate` does not hold.
    pub fn filter_not(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        let f: MapFn<K, V, V> = Arc::new(move |k, v| (!predicate(k, &v)).then_some(v));
        self.map_node("KTABLE-FILTER", f, self.value_serde.clone(), true)
    }

    /// [`KTable::filter`], kept in a store of its own that `materialized` describes (so it
    /// can be queried).
    pub fn filter_with(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> Self {
        let f: MapFn<K, V, V> = Arc::new(move |k, v| predicate(k, &v).then_some(v));
        let serde = materialized.value_serde_or(&self.value_serde);
        self.materialized_node("KTABLE-FILTER", f, materialized, serde)
    }

    /// Each row's value mapped by `f`; deletes stay deletes (Kafka Streams'
    /// `KTable.mapValues`). `value_serde` is the new values' serde.
    pub fn map_values<V2>(
        &self,
        f: impl Fn(V) -> V2 + Send + Sync + 'static,
        value_serde: SerdeRef<V2>,
    ) -> KTable<K, V2>
    where
        V2: Clone + 'static,
    {
        let f: MapFn<K, V, V2> = Arc::new(move |_, v| Some(f(v)));
        self.map_node("KTABLE-MAPVALUES", f, value_serde, false)
    }

    /// [`KTable::map_values`], kept in a store of its own that `materialized` describes; its
    /// values are written with `materialized`'s value serde, else `value_serde`.
    pub fn map_values_with<V2>(
        &self,
        f: impl Fn(V) -> V2 + Send + Sync + 'static,
        value_serde: SerdeRef<V2>,
        materialized: Materialized<K, V2>,
    ) -> KTable<K, V2>
    where
        V2: Clone + 'static,
    {
        let f: MapFn<K, V, V2> = Arc::new(move |_, v| Some(f(v)));
        let serde = materialized.value_serde_or(&value_serde);
        self.materialized_node("KTABLE-MAPVALUES", f, materialized, serde)
    }
}
