//! Grouped tables: [`KTable::group_by`] and [`KGroupedTable`]'s `count`, `reduce` and
//! `aggregate` (Kafka Streams' `KGroupedTable`). A row's update reaches the aggregation as its
//! old value to subtract and its new value to add, through a repartition topic keyed by the new
//! grouping key.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::grouped::{FoldFn, aggregate_table};
use crate::dsl::named::node_name;
use crate::dsl::table::node::{ChangeSerde, TableGroupBy};
use crate::dsl::topics::repartition_table;
use crate::dsl::{Grouped, KTable, Materialized, Named};
use crate::processor::node::{Change, NodeRef};
use crate::serdes::{SerdeRef, Serdes};
use crate::topology::{BuiltNode, Erased, GraphBuilder, NodeFactory};

/// A table regrouped by [`KTable::group_by`], ready to aggregate.
pub struct KGroupedTable<K, V> {
    graph: Rc<RefCell<GraphBuilder>>,
    /// The node mapping each update to its new key (`KTABLE-SELECT`).
    node: usize,
    grouped: Grouped<K, V>,
}

impl<K, V> std::fmt::Debug for KGroupedTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedTable")
            .field("node", &self.node)
            .finish()
    }
}

impl<K, V> KTable<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Regroups the table's rows by the key and value `selector` makes of each (Kafka Streams'
    /// `KTable.groupBy`): an aggregation of the result subtracts a row's old value from its old
    /// group and adds its new value to its new group whenever the row changes, and subtracts
    /// a deleted row. The rows travel through a repartition topic written with `grouped`'s
    /// serdes.
    ///
    /// ```
    /// use riffle::{Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// // Users and their regions; how many users each region has.
    /// builder
    ///     .table("user-regions", Consumed::with(Serdes::string(), Serdes::string()), Materialized::new())
    ///     .group_by(|_user, region| (region, 1i64), Grouped::with(Serdes::string(), Serdes::i64()))
    ///     .count()
    ///     .to_stream()
    ///     .to("users-per-region", Produced::with(Serdes::string(), Serdes::i64()));
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 2);
    /// ```
    pub fn group_by<K2, V2>(
        &self,
        selector: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
        grouped: Grouped<K2, V2>,
    ) -> KGroupedTable<K2, V2>
    where
        K2: Clone + PartialEq + 'static,
        V2: Clone + 'static,
    {
        let selector = Arc::new(selector);
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(TableGroupBy {
                selector: selector.clone(),
                forward: ctx.forward::<K2, Change<V2>>(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        // Kafka names the selector after the grouping, if named (`KTableImpl.groupBy`).
        let named = grouped.name.clone().map(Named::as_);
        let name = node_name(&mut g, "KTABLE-SELECT", named.as_ref());
        let node = g.add_named_processor::<K, V, K2, Change<V2>>(name, &[self.node], factory);
        if let Err(e) = g.send_old_values(self.node) {
            g.errors.push(e);
        }
        KGroupedTable {
            graph: self.graph.clone(),
            node,
            grouped,
        }
    }
}

impl<K, V> KGroupedTable<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Counts the rows per group: a row's update moves it from its old group to its new one, a
    /// delete takes it out; a group emptied keeps its count of 0, as in Kafka Streams.
    pub fn count(&self) -> KTable<K, i64> {
        self.count_with(Materialized::new())
    }

    /// [`KGroupedTable::count`], in the store `materialized` describes.
    pub fn count_with(&self, materialized: Materialized<K, i64>) -> KTable<K, i64> {
        self.aggregate(
            || 0,
            |_, _, n| n.saturating_add(1),
            |_, _, n| n.saturating_sub(1),
            materialized,
            Serdes::i64(),
        )
    }

    /// Combines each group's values with `adder`, and takes a row's old value back out with
    /// `subtractor` (both get the aggregate first, Kafka's `Reducer`); a group's first value is
    /// its start.
    pub fn reduce(
        &self,
        adder: impl Fn(V, V) -> V + Send + Sync + 'static,
        subtractor: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        let fold: FoldFn<K, Change<V>, V> = Arc::new(move |_, change, agg| {
            let rest = match (change.old, agg) {
                (Some(old), Some(agg)) => Some(subtractor(agg, old)),
                (_, agg) => agg,
            };
            match (change.new, rest) {
                (Some(new), Some(rest)) => Some(adder(rest, new)),
                (Some(new), None) => Some(new),
                (None, rest) => rest,
            }
        });
        let serde = materialized.value_serde_or(&self.grouped.value);
        self.fold("KTABLE-REDUCE", materialized, serde, fold)
    }

    /// Folds each group's values into an aggregate that starts at `init()`: `adder` adds a
    /// row's new value, `subtractor` takes its old value back out (Kafka's `Aggregator`s: key,
    /// value, aggregate).
    pub fn aggregate<A>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        subtractor: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<K, A>
    where
        A: Clone + 'static,
    {
        // Kafka's KTableAggregate: subtract the old value if there is an aggregate to subtract
        // it from, then add the new one to what is left (or to a fresh aggregate).
        let fold: FoldFn<K, Change<V>, A> = Arc::new(move |k, change, agg| {
            let rest = match (change.old, agg) {
                (Some(old), Some(agg)) => Some(subtractor(k, old, agg)),
                (_, agg) => agg,
            };
            match change.new {
                Some(new) => Some(adder(k, new, rest.unwrap_or_else(&init))),
                None => rest,
            }
        });
        let serde = materialized.value_serde_or(&aggregate_serde);
        self.fold("KTABLE-AGGREGATE", materialized, serde, fold)
    }

    /// The aggregation node `<prefix>-<n>` below the repartition topic `<grouping name, else
    /// store>-repartition`, whose records carry each update's old and new values; named in
    /// Kafka's order (`KGroupedTableImpl`): the store (`KTABLE-AGGREGATE-STATE-STORE-<n>` unless
    /// named), the topic's sink and source, the processor. A named grouping's aggregations
    /// share its topic (the sink's and source's counter values are taken all the same).
    fn fold<A>(
        &self,
        prefix: &str,
        materialized: Materialized<K, A>,
        agg_serde: SerdeRef<A>,
        fold: FoldFn<K, Change<V>, A>,
    ) -> KTable<K, A>
    where
        A: Clone + 'static,
    {
        let (store_name, sink, source, name) = {
            let mut g = self.graph.borrow_mut();
            let store_name = match &materialized.name {
                Some(name) => name.clone(),
                None => g.next_name("KTABLE-AGGREGATE-STATE-STORE"),
            };
            let sink = g.next_name("KSTREAM-SINK");
            let source = g.next_name("KSTREAM-SOURCE");
            (store_name, sink, source, g.next_name(prefix))
        };
        let topic_name = self.grouped.name.as_deref().unwrap_or(&store_name);
        let change_serde: SerdeRef<Change<V>> = Arc::new(ChangeSerde {
            inner: self.grouped.value.clone(),
        });
        let serdes = (self.grouped.key.clone(), change_serde);
        let source = repartition_table(&self.graph, self.node, topic_name, [sink, source], serdes);
        aggregate_table(
            &self.graph,
            name,
            source,
            store_name,
            &materialized,
            materialized.key_serde_or(&self.grouped.key),
            agg_serde,
            fold,
            None,
        )
    }
}
