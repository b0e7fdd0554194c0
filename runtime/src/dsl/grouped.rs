//! [`KGroupedStream`]: a stream grouped by key, and its aggregations (`count`, `reduce`,
//! `aggregate`) into a table; [`aggregate_table`] is the node and store behind them, and behind
//! a grouped table's aggregations too. Its windowed aggregations are in `window/`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::table::node::TableView;
use crate::dsl::topics::{RepartitionSpec, repartition_through};
use crate::dsl::{Grouped, KTable, Materialized, StoreType};
use crate::processor::StoreSerdes;
use crate::processor::node::{Aggregate, FlushRef, NodeRef, SkipNulls};
use crate::serdes::{SerdeRef, Serdes};
use crate::topology::{BuiltNode, GraphBuilder, NodeFactory, OldValues, StoreDef};

/// A stream grouped by key, ready to aggregate.
pub struct KGroupedStream<K, V> {
    pub(crate) graph: Rc<RefCell<GraphBuilder>>,
    pub(crate) node: usize,
    pub(crate) repartition_required: bool,
    pub(crate) grouped: Grouped<K, V>,
}

impl<K, V> std::fmt::Debug for KGroupedStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedStream")
            .field("node", &self.node)
            .finish()
    }
}

pub(crate) type FoldFn<K, V, A> = Arc<dyn Fn(&K, V, Option<A>) -> Option<A> + Send + Sync>;

impl<K, V> KGroupedStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Counts the records per key (Kafka's `count()`).
    pub fn count(&self) -> KTable<K, i64> {
        self.count_as(Materialized::new(), false)
    }

    /// Counts the records per key, in the store `materialized` describes (its value serde,
    /// if given, instead of [`Serdes::i64`]): Kafka's `count(Materialized)`, which takes one
    /// more counter value when the store is unnamed, as Kafka keeps doing for its topologies'
    /// compatibility.
    pub fn count_with(&self, materialized: Materialized<K, i64>) -> KTable<K, i64> {
        self.count_as(materialized, true)
    }

    fn count_as(&self, materialized: Materialized<K, i64>, burn: bool) -> KTable<K, i64> {
        if burn && materialized.name.is_none() {
            self.graph
                .borrow_mut()
                .next_name("KSTREAM-AGGREGATE-STATE-STORE");
        }
        let fold: FoldFn<K, V, i64> =
            Arc::new(|_, _, old| Some(old.unwrap_or(0).saturating_add(1)));
        let serde = materialized.value_serde_or(&Serdes::i64());
        self.fold("KSTREAM-AGGREGATE", materialized, serde, fold)
    }

    /// Combines the values per key with `reducer`; the first value is the start (processor
    /// `KSTREAM-REDUCE-<n>`, store `KSTREAM-REDUCE-STATE-STORE-<n>` unless named).
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        let fold: FoldFn<K, V, V> = Arc::new(move |_, v, old| {
            Some(match old {
                Some(old) => reducer(old, v),
                None => v,
            })
        });
        let serde = materialized.value_serde_or(&self.grouped.value);
        self.fold("KSTREAM-REDUCE", materialized, serde, fold)
    }

    /// Folds the values per key into an aggregate that starts at `init()`, stored with
    /// `materialized`'s value serde if it has one, else `aggregate_serde`.
    pub fn aggregate<A>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<K, A>
    where
        A: Clone + 'static,
    {
        let fold: FoldFn<K, V, A> =
            Arc::new(move |k, v, old| Some(adder(k, v, old.unwrap_or_else(&init))));
        let serde = materialized.value_serde_or(&aggregate_serde);
        self.fold("KSTREAM-AGGREGATE", materialized, serde, fold)
    }

    /// The name of an aggregation's store: the given one, else `<prefix>-STATE-STORE-<n>`.
    pub(crate) fn store_name(&self, prefix: &str, name: &Option<String>) -> String {
        match name {
            Some(name) => name.clone(),
            None => self
                .graph
                .borrow_mut()
                .next_name(&format!("{prefix}-STATE-STORE")),
        }
    }

    /// The node an aggregation reads from: the grouped stream, or, if its key changed, the
    /// source of the repartition topic `<grouping name, else store_name>-repartition` (Kafka's
    /// `GroupedStreamAggregateBuilder`), taken after the aggregation's store and processor
    /// names, as Kafka takes them. A named grouping's aggregations share its topic.
    pub(crate) fn aggregate_parent(&self, store_name: &str) -> usize {
        if !self.repartition_required {
            return self.node;
        }
        let prefix = self.grouped.name.as_deref().unwrap_or(store_name);
        let (key, value) = (self.grouped.key.clone(), self.grouped.value.clone());
        let spec = RepartitionSpec::grouping(key, value);
        repartition_through(&self.graph, self.node, prefix, spec)
    }

    /// An aggregation in Kafka's order of names: its store (`<prefix>-STATE-STORE-<n>` unless
    /// named), its processor (`<prefix>-<n>`), then the repartition topic's nodes.
    fn fold<A>(
        &self,
        prefix: &str,
        materialized: Materialized<K, A>,
        agg_serde: SerdeRef<A>,
        fold: FoldFn<K, V, A>,
    ) -> KTable<K, A>
    where
        A: Clone + 'static,
    {
        let store_name = self.store_name(prefix, &materialized.name);
        let name = self.graph.borrow_mut().next_name(prefix);
        let parent = self.aggregate_parent(&store_name);
        aggregate_table(
            &self.graph,
            name,
            parent,
            store_name,
            &materialized,
            materialized.key_serde_or(&self.grouped.key),
            agg_serde,
            fold,
            Some(self.grouped.value.clone()),
        )
    }
}

/// Adds the aggregation node `name` below `parent`, folding what `parent` forwards into the
/// store `store_name` (named, typed and backed as `materialized` says; its keys and aggregates
/// through `key_serde` and `agg_serde`), and returns its table: the stream aggregations' and,
/// folding `Change`s, the grouped tables'. A record whose key, or value (`value_serde`, a
/// stream aggregation's), is null is dropped, as Kafka's aggregations drop it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn aggregate_table<K, VIn, A>(
    graph: &Rc<RefCell<GraphBuilder>>,
    name: String,
    parent: usize,
    store_name: String,
    materialized: &Materialized<K, A>,
    key_serde: SerdeRef<K>,
    agg_serde: SerdeRef<A>,
    fold: FoldFn<K, VIn, A>,
    value_serde: Option<SerdeRef<VIn>>,
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
        let node = SkipNulls::wrap(
            ctx.name(),
            Some(key_serde.clone()),
            value_serde.clone(),
            aggregate as NodeRef<K, VIn>,
        );
        BuiltNode {
            node: Box::new(node),
            flush: Some(flush),
            lifecycle: None,
        }
    });
    let mut g = graph.borrow_mut();
    let node = g.add_named_processor::<K, VIn, K, A>(name, &[parent], factory);
    g.nodes[node].old_values = OldValues::FromStore;
    let store = add_aggregation_store(
        &mut g,
        node,
        store_name,
        materialized,
        table_key_serde.clone(),
        table_value_serde.clone(),
    );
    drop(g);
    aggregation_table(graph, node, store, table_key_serde, table_value_serde)
}

/// Adds an aggregation's store `store_name` (typed and backed as `materialized` says) to
/// `node`: a DSL store, cached, timestamped. A name already taken is an error at `build`.
pub(crate) fn add_aggregation_store<K: 'static, A: 'static>(
    g: &mut GraphBuilder,
    node: usize,
    store_name: String,
    materialized: &Materialized<K, A>,
    key_serde: SerdeRef<K>,
    agg_serde: SerdeRef<A>,
) -> usize {
    let persistent = materialized.store_type == StoreType::Persistent;
    if g.stores.iter().any(|s| s.name == store_name) {
        g.errors
            .push(format!("a store named {store_name:?} already exists"));
    }
    let mut def = StoreDef::dsl(store_name, materialized.logging, persistent);
    def.caching = materialized.caching;
    def.serdes = Some(Arc::new(StoreSerdes {
        key: key_serde,
        value: agg_serde,
    }));
    g.add_store(node, def)
}

/// The table of an aggregation whose node is `node` and store `store`.
pub(crate) fn aggregation_table<K: Clone + 'static, A: Clone + 'static>(
    graph: &Rc<RefCell<GraphBuilder>>,
    node: usize,
    store: usize,
    table_key_serde: SerdeRef<K>,
    table_value_serde: SerdeRef<A>,
) -> KTable<K, A> {
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
