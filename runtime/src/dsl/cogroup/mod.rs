//! Cogrouped aggregations: several grouped streams of one key type, each with its own
//! aggregator, folded into one aggregate per key in one store (Kafka Streams'
//! `KGroupedStream.cogroup` and `CogroupedKStream`).
//!
//! As in Kafka Streams, each input gets its own aggregation node, `COGROUPKSTREAM-AGGREGATE-…`
//! (repartitioned first if its key changed, through `<grouped name or store>-repartition`),
//! all connected to the store `COGROUPKSTREAM-AGGREGATE-STATE-STORE-…` (or the one
//! `Materialized` names), and their updates meet in `COGROUPKSTREAM-MERGE-…`, the table's node
//! (the table–table join's `TableMerge`, Kafka's `KTablePassThrough`).
//! The inputs must be co-partitioned. Only the first input's node forwards the store's cached
//! updates at commit (one store, one flush); every node forwards its own when caching is off.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::grouped::{FoldFn, add_aggregation_store, aggregation_table};
use crate::dsl::join::table_table::node::TableMerge;
use crate::dsl::window::{Flavor, MergeFn, WindowFoldFn, WindowedStore, windowed_node};
use crate::dsl::{KGroupedStream, KTable, Materialized};
use crate::processor::node::{Aggregate, FlushRef, NodeRef, SkipNulls};
use crate::serdes::SerdeRef;
use crate::topology::{BuiltNode, GraphBuilder, NodeFactory, OldValues};
use crate::types::window::{
    EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, WindowKind, Windowed,
};

type Init<A> = Arc<dyn Fn() -> A + Send + Sync>;
/// The store's key and aggregate serdes.
type Serdes<K, A> = (SerdeRef<K>, SerdeRef<A>);

/// One cogrouped input (a grouped stream and its aggregator, its value type erased): adds its
/// aggregation node `name` to the graph below `parent` (its grouped stream, or the source of
/// its repartition topic: [`CogroupInput::parent`]), and returns it. `input` numbers it among
/// the store's nodes: 0 flushes the store.
trait CogroupInput<K, A> {
    fn add_plain(
        &self,
        parent: usize,
        name: String,
        init: &Init<A>,
        serdes: &Serdes<K, A>,
        input: u32,
    ) -> usize;
    #[allow(clippy::too_many_arguments)]
    fn add_windowed(
        &self,
        parent: usize,
        name: String,
        plan: &WindowedStore,
        init: &Init<A>,
        merge: Option<MergeFn<K, A>>,
        serdes: &Serdes<K, A>,
        input: u32,
    ) -> usize;
    /// The node the input's records come from: the grouped stream, or the source of its
    /// repartition topic `<grouping name, else store_name>-repartition`.
    fn parent(&self, store_name: &str) -> usize;
}

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
    inputs: Vec<Box<dyn CogroupInput<K, A>>>,
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
            inputs: vec![Box::new(Input {
                grouped: self.clone_parts(),
                aggregator: Arc::new(aggregator),
            })],
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
        self.inputs.push(Box::new(Input {
            grouped: grouped.clone_parts(),
            aggregator: Arc::new(aggregator),
        }));
        self
    }

    /// Folds every input's records into one aggregate per key that starts at `initializer()`,
    /// kept in the store `materialized` describes, its values written with `aggregate_serde`
    /// (Kafka Streams' `CogroupedKStream.aggregate(Initializer, Materialized)`). A record with a
    /// null key or value is dropped, counted, as Kafka's aggregations drop it.
    pub fn aggregate(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<K, A> {
        let store_name = match &materialized.name {
            Some(name) => name.clone(),
            None => self
                .graph
                .borrow_mut()
                .next_name("COGROUPKSTREAM-AGGREGATE-STATE-STORE"),
        };
        let initializer: Init<A> = Arc::new(initializer);
        let key_serde = materialized.key_serde_or(&self.key_serde);
        let aggregate_serde = materialized.value_serde_or(&aggregate_serde);
        let serdes = (key_serde.clone(), aggregate_serde.clone());
        let parents = self.parents(&store_name);
        let nodes: Vec<usize> = (0u32..)
            .zip(self.inputs.iter().zip(parents))
            .map(|(i, (input, parent))| {
                let name = self.aggregate_name();
                input.add_plain(parent, name, &initializer, &serdes, i)
            })
            .collect();
        let store = add_aggregation_store(
            &mut self.graph.borrow_mut(),
            nodes[0],
            store_name,
            &materialized,
            key_serde.clone(),
            aggregate_serde.clone(),
        );
        let merge = self.merge::<K>(&nodes, store);
        self.graph.borrow_mut().nodes[merge].old_values = OldValues::FromParents;
        aggregation_table(&self.graph, merge, store, key_serde, aggregate_serde)
    }
}

impl<K: Clone + 'static, A: Clone + 'static> CogroupedKStream<K, A> {
    /// The cogrouped inputs in windows: [`TimeWindows`] or [`SlidingWindows`] give a
    /// [`TimeWindowedCogroupedKStream`], [`SessionWindows`] a
    /// [`SessionWindowedCogroupedKStream`] (Kafka Streams' `CogroupedKStream.windowedBy`). As
    /// in Kafka Streams, a windowed cogroup emits every update (there is no emit strategy).
    pub fn windowed_by<W: CogroupWindows<K, A>>(self, windows: W) -> W::Stream {
        windows.windowed(self)
    }

    /// Adds every input's windowed node and the merge; the table of their store.
    fn aggregate_windowed(
        &self,
        kind: WindowKind,
        init: Init<A>,
        merge: Option<MergeFn<K, A>>,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<Windowed<K>, A> {
        let store_name = match &materialized.name {
            Some(name) => name.clone(),
            None => self
                .graph
                .borrow_mut()
                .next_name("COGROUPKSTREAM-AGGREGATE-STATE-STORE"),
        };
        let plan = WindowedStore::plan(&self.graph, kind, store_name, &materialized);
        let key_serde = materialized.key_serde_or(&self.key_serde);
        let aggregate_serde = materialized.value_serde_or(&aggregate_serde);
        let serdes = (key_serde.clone(), aggregate_serde.clone());
        let parents = self.parents(&plan.store_name);
        let nodes: Vec<usize> = (0u32..)
            .zip(self.inputs.iter().zip(parents))
            .map(|(i, (input, parent))| {
                let name = self.aggregate_name();
                let (init, merge) = (&init, merge.clone());
                input.add_windowed(parent, name, &plan, init, merge, &serdes, i)
            })
            .collect();
        let store = plan.add_store(
            nodes[0],
            &materialized,
            key_serde.clone(),
            aggregate_serde.clone(),
        );
        let merge = self.merge::<Windowed<K>>(&nodes, store);
        plan.table(merge, key_serde, aggregate_serde)
    }

    /// Each input's parent, in Kafka's order: every input's repartition topic (if its key
    /// changed) before any aggregation node (`CogroupedStreamAggregateBuilder`). An input
    /// cogrouped twice reads its topic once.
    fn parents(&self, store_name: &str) -> Vec<usize> {
        self.inputs.iter().map(|i| i.parent(store_name)).collect()
    }

    /// The next input's aggregation node name, `COGROUPKSTREAM-AGGREGATE-<n>`.
    fn aggregate_name(&self) -> String {
        self.graph
            .borrow_mut()
            .next_name("COGROUPKSTREAM-AGGREGATE")
    }

    /// Connects `store` to every node but the first (which has it), co-partitions their
    /// inputs, and adds the merge node below them all.
    fn merge<KT: Clone + 'static>(&self, nodes: &[usize], store: usize) -> usize {
        let mut g = self.graph.borrow_mut();
        for &node in &nodes[1..] {
            g.nodes[node].stores.push(store);
            let pair = (g.nodes[nodes[0]].parents[0], g.nodes[node].parents[0]);
            g.copartitioned.push(pair);
        }
        let factory: NodeFactory = Arc::new(|ctx| {
            let node: NodeRef<KT, A> = Rc::new(RefCell::new(TableMerge {
                forward: ctx.forward::<KT, A>(),
                send_old: ctx.sends_old_values(),
            }));
            BuiltNode::plain(Box::new(node))
        });
        g.add_processor_node::<KT, A, KT, A>("COGROUPKSTREAM-MERGE", nodes, factory)
    }
}

/// Window definitions [`CogroupedKStream::windowed_by`] takes.
pub trait CogroupWindows<K, A> {
    /// The windowed cogrouped stream.
    type Stream;
    #[doc(hidden)]
    fn windowed(self, cogrouped: CogroupedKStream<K, A>) -> Self::Stream;
}

impl<K, A> CogroupWindows<K, A> for TimeWindows {
    type Stream = TimeWindowedCogroupedKStream<K, A>;
    fn windowed(self, cogrouped: CogroupedKStream<K, A>) -> Self::Stream {
        TimeWindowedCogroupedKStream {
            cogrouped,
            kind: WindowKind::Time(self),
        }
    }
}

impl<K, A> CogroupWindows<K, A> for SlidingWindows {
    type Stream = TimeWindowedCogroupedKStream<K, A>;
    fn windowed(self, cogrouped: CogroupedKStream<K, A>) -> Self::Stream {
        TimeWindowedCogroupedKStream {
            cogrouped,
            kind: WindowKind::Sliding(self),
        }
    }
}

impl<K, A> CogroupWindows<K, A> for SessionWindows {
    type Stream = SessionWindowedCogroupedKStream<K, A>;
    fn windowed(self, cogrouped: CogroupedKStream<K, A>) -> Self::Stream {
        SessionWindowedCogroupedKStream {
            cogrouped,
            windows: self,
        }
    }
}

/// Cogrouped inputs in time or sliding windows (Kafka Streams'
/// `TimeWindowedCogroupedKStream`).
pub struct TimeWindowedCogroupedKStream<K, A> {
    cogrouped: CogroupedKStream<K, A>,
    kind: WindowKind,
}

impl<K, A> std::fmt::Debug for TimeWindowedCogroupedKStream<K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeWindowedCogroupedKStream")
            .field("kind", &self.kind)
            .finish()
    }
}

impl<K: Clone + 'static, A: Clone + 'static> TimeWindowedCogroupedKStream<K, A> {
    /// Folds every input's records into one aggregate per key and window that starts at
    /// `initializer()`, kept in the window store `materialized` describes.
    pub fn aggregate(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<Windowed<K>, A> {
        self.cogrouped.aggregate_windowed(
            self.kind,
            Arc::new(initializer),
            None,
            materialized,
            aggregate_serde,
        )
    }
}

/// Cogrouped inputs in session windows (Kafka Streams' `SessionWindowedCogroupedKStream`).
pub struct SessionWindowedCogroupedKStream<K, A> {
    cogrouped: CogroupedKStream<K, A>,
    windows: SessionWindows,
}

impl<K, A> std::fmt::Debug for SessionWindowedCogroupedKStream<K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWindowedCogroupedKStream")
            .field("windows", &self.windows)
            .finish()
    }
}

impl<K: Clone + 'static, A: Clone + 'static> SessionWindowedCogroupedKStream<K, A> {
    /// Folds every input's records into one aggregate per key and session that starts at
    /// `initializer()`; `merger` combines the aggregates of the sessions a record joins
    /// (starting from `initializer()`, as Kafka Streams does).
    pub fn aggregate(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        merger: impl Fn(&K, A, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<Windowed<K>, A> {
        let init: Init<A> = Arc::new(initializer);
        let start = init.clone();
        let merge: MergeFn<K, A> =
            Arc::new(move |k, acc, b| merger(k, acc.unwrap_or_else(|| start()), b));
        self.cogrouped.aggregate_windowed(
            WindowKind::Session(self.windows),
            init,
            Some(merge),
            materialized,
            aggregate_serde,
        )
    }
}

/// A grouped stream with its aggregator.
struct Input<K, V, A> {
    grouped: KGroupedStream<K, V>,
    aggregator: Aggregator<K, V, A>,
}

/// An input's aggregator (Kafka Streams' `Aggregator`).
type Aggregator<K, V, A> = Arc<dyn Fn(&K, V, A) -> A + Send + Sync>;

impl<K, V, A> Input<K, V, A>
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    /// `aggregator` folding a value into the aggregate so far, or into `init()`'s.
    fn fold(&self, init: &Init<A>) -> impl Fn(&K, V, Option<A>) -> A + Send + Sync + 'static {
        let (aggregator, init) = (self.aggregator.clone(), init.clone());
        move |k, v, old| aggregator(k, v, old.unwrap_or_else(|| init()))
    }
}

impl<K, V, A> CogroupInput<K, A> for Input<K, V, A>
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    fn parent(&self, store_name: &str) -> usize {
        self.grouped.aggregate_parent(store_name)
    }

    fn add_plain(
        &self,
        parent: usize,
        name: String,
        init: &Init<A>,
        serdes: &Serdes<K, A>,
        input: u32,
    ) -> usize {
        let fold = self.fold(init);
        let fold: FoldFn<K, V, A> = Arc::new(move |k, v, old| Some(fold(k, v, old)));
        let (key_serde, agg_serde) = serdes.clone();
        let value_serde = self.grouped.grouped.value.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let aggregate = Rc::new(RefCell::new(Aggregate {
                store: ctx.store_slot(0),
                key_serde: key_serde.clone(),
                agg_serde: agg_serde.clone(),
                fold: fold.clone(),
                forward: ctx.forward::<K, A>(),
                send_old: ctx.sends_old_values(),
            }));
            let flush = (input == 0).then(|| aggregate.clone() as FlushRef);
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
        let mut g = self.grouped.graph.borrow_mut();
        let node = g.add_named_processor::<K, V, K, A>(name, &[parent], factory);
        g.nodes[node].old_values = OldValues::FromStore;
        node
    }

    fn add_windowed(
        &self,
        parent: usize,
        name: String,
        plan: &WindowedStore,
        init: &Init<A>,
        merge: Option<MergeFn<K, A>>,
        serdes: &Serdes<K, A>,
        input: u32,
    ) -> usize {
        let fold: WindowFoldFn<K, V, A> = Arc::new(self.fold(init));
        let flavor = match (plan.kind(), merge) {
            (WindowKind::Time(w), _) => Flavor::Time(w, fold),
            (WindowKind::Sliding(w), _) => Flavor::Sliding(w, fold),
            (WindowKind::Session(w), Some(merge)) => Flavor::Session(w, fold, merge),
            (WindowKind::Session(_), None) => {
                unreachable!("riffle DSL invariant: a session-windowed cogroup has a merger")
            }
        };
        windowed_node(
            &self.grouped,
            parent,
            name,
            EmitStrategy::OnWindowUpdate,
            flavor,
            plan,
            serdes.clone(),
            input,
        )
    }
}
