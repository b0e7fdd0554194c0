//! Cogrouped aggregations: several grouped streams of one key type, each with its own
//! aggregator, folded into one aggregate per key in one store (Kafka Streams'
//! `KGroupedStream.cogroup` and `CogroupedKStream`).
//!
//! As in Kafka Streams, each input gets its own aggregation node, `COGROUPKSTREAM-AGGREGATE-…`
//! (repartitioned first if its key changed, through `<grouped name or store>-repartition`),
//! all connected to the store `COGROUPKSTREAM-AGGREGATE-STATE-STORE-…` (or the one
//! `Materialized` names), and their updates meet in `COGROUPKSTREAM-MERGE-…`, the table's node.
//! The inputs must be co-partitioned. Only the first input's node forwards the store's cached
//! updates at commit (one store, one flush); every node forwards its own when caching is off.

mod node;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::cogroup::node::CogroupMerge;
use crate::dsl::grouped::{FoldFn, add_aggregation_store, aggregation_table};
use crate::dsl::{KGroupedStream, KTable, Materialized};
use crate::processor::node::{Aggregate, FlushRef, NodeRef, SkipNulls};
use crate::serdes::SerdeRef;
use crate::topology::{BuiltNode, GraphBuilder, NodeFactory, OldValues};

/// Adds one input's aggregation node (below its grouped stream, repartitioned if needed) to the
/// graph, given the store's name, the initializer, the aggregate's serde, and whether this node
/// flushes the store; returns the node.
type AddInput<A> =
    Box<dyn Fn(&str, &Arc<dyn Fn() -> A + Send + Sync>, &SerdeRef<A>, bool) -> usize>;

/// Grouped streams cogrouped into one aggregate per key (Kafka Streams' `CogroupedKStream`):
/// made by [`KGroupedStream::cogroup`], grown by [`CogroupedKStream::cogroup`], and turned into
/// a table by [`CogroupedKStream::aggregate`].
///
/// ```
/// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// let clicks = builder
///     .stream("clicks", Consumed::with(Serdes::string(), Serdes::string()))
///     .group_by_key();
/// let buys = builder
///     .stream("buys", Consumed::with(Serdes::string(), Serdes::i64()))
///     .group_by_key();
/// clicks
///     .cogroup(|_user, _page, (clicks, spent): (i64, i64)| (clicks + 1, spent))
///     .cogroup(&buys, |_user, cents, (clicks, spent)| (clicks, spent + cents))
///     .aggregate(|| (0, 0), Materialized::named("activity"), Serdes::json())
///     .to_stream()
///     .map_values(|(clicks, spent)| format!("{clicks} clicks, {spent} cents"))
///     .to("activity", Produced::with(Serdes::string(), Serdes::string()));
/// builder.build().unwrap();
/// ```
pub struct CogroupedKStream<K, A> {
    graph: Rc<RefCell<GraphBuilder>>,
    key_serde: SerdeRef<K>,
    inputs: Vec<AddInput<A>>,
}

impl<K, A> std::fmt::Debug for CogroupedKStream<K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CogroupedKStream")
            .field("inputs", &self.inputs.len())
            .finish()
    }
}

impl<K, V> KGroupedStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Starts a cogrouped aggregation with this grouped stream, folded in by `aggregator`
    /// (Kafka Streams' `KGroupedStream.cogroup(Aggregator)`).
    pub fn cogroup<A: Clone + 'static>(
        &self,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
    ) -> CogroupedKStream<K, A> {
        CogroupedKStream {
            graph: self.graph.clone(),
            key_serde: self.grouped.key.clone(),
            inputs: vec![input(self.clone_parts(), Arc::new(aggregator))],
        }
    }
}

impl<K: Clone + 'static, A: Clone + 'static> CogroupedKStream<K, A> {
    /// Adds `grouped`, folded in by `aggregator` (Kafka Streams'
    /// `CogroupedKStream.cogroup(KGroupedStream, Aggregator)`).
    pub fn cogroup<V: Clone + 'static>(
        mut self,
        grouped: &KGroupedStream<K, V>,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
    ) -> Self {
        self.inputs
            .push(input(grouped.clone_parts(), Arc::new(aggregator)));
        self
    }

    /// Folds every input's records into one aggregate per key that starts at `initializer()`,
    /// kept in the store `materialized` describes, its values written with `aggregate_serde`
    /// (Kafka Streams' `CogroupedKStream.aggregate(Initializer, Materialized)`). A record with a
    /// null key or value is dropped, counted, as Kafka's aggregations drop it.
    pub fn aggregate(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        materialized: Materialized<A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<K, A> {
        let store_name = match &materialized.name {
            Some(name) => name.clone(),
            None => self
                .graph
                .borrow_mut()
                .next_name("COGROUPKSTREAM-AGGREGATE-STATE-STORE"),
        };
        let initializer: Arc<dyn Fn() -> A + Send + Sync> = Arc::new(initializer);
        let nodes: Vec<usize> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, add)| add(&store_name, &initializer, &aggregate_serde, i == 0))
            .collect();
        let mut g = self.graph.borrow_mut();
        let store = add_aggregation_store(
            &mut g,
            nodes[0],
            store_name,
            &materialized,
            self.key_serde.clone(),
            aggregate_serde.clone(),
        );
        for &node in &nodes[1..] {
            g.nodes[node].stores.push(store);
            let pair = (g.nodes[nodes[0]].parents[0], g.nodes[node].parents[0]);
            g.copartitioned.push(pair);
        }
        let factory: NodeFactory = Arc::new(|ctx| {
            let node: NodeRef<K, A> = Rc::new(RefCell::new(CogroupMerge {
                forward: ctx.forward::<K, A>(),
                send_old: ctx.sends_old_values(),
            }));
            BuiltNode::plain(Box::new(node))
        });
        let merge = g.add_processor_node::<K, A, K, A>("COGROUPKSTREAM-MERGE", &nodes, factory);
        g.nodes[merge].old_values = OldValues::FromParents;
        drop(g);
        aggregation_table(
            &self.graph,
            merge,
            store,
            self.key_serde.clone(),
            aggregate_serde,
        )
    }
}

/// The [`AddInput`] of `grouped` folded in by `aggregator`.
fn input<K, V, A>(
    grouped: KGroupedStream<K, V>,
    aggregator: Arc<dyn Fn(&K, V, A) -> A + Send + Sync>,
) -> AddInput<A>
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    Box::new(move |store_name, initializer, agg_serde, flushes| {
        let parent = grouped.aggregate_parent(store_name);
        let (aggregator, initializer) = (aggregator.clone(), initializer.clone());
        let fold: FoldFn<K, V, A> =
            Arc::new(move |k, v, old| Some(aggregator(k, v, old.unwrap_or_else(|| initializer()))));
        let (key_serde, value_serde) = (grouped.grouped.key.clone(), grouped.grouped.value.clone());
        let agg_serde = agg_serde.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let aggregate = Rc::new(RefCell::new(Aggregate {
                store: ctx.store_slot(0),
                key_serde: key_serde.clone(),
                agg_serde: agg_serde.clone(),
                fold: fold.clone(),
                forward: ctx.forward::<K, A>(),
                send_old: ctx.sends_old_values(),
            }));
            let flush = flushes.then(|| aggregate.clone() as FlushRef);
            let node = SkipNulls::wrap(
                ctx.name(),
                Some(key_serde.clone()),
                Some(value_serde.clone()),
                aggregate as NodeRef<K, V>,
            );
            BuiltNode {
                node: Box::new(node),
                flush,
                lifecycle: None,
            }
        });
        let mut g = grouped.graph.borrow_mut();
        let node =
            g.add_processor_node::<K, V, K, A>("COGROUPKSTREAM-AGGREGATE", &[parent], factory);
        g.nodes[node].old_values = OldValues::FromStore;
        node
    })
}
