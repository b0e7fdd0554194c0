//! Windowed aggregations in the DSL: `KGroupedStream::windowed_by` gives a
//! [`TimeWindowedKStream`] (time and sliding windows) or a [`SessionWindowedKStream`], whose
//! `count`, `reduce` and `aggregate` make a `KTable<Windowed<K>, V>`; and `KTable::suppress`.

mod node;
mod windowed_core;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::table::suppress::{BufferTimeFn, SuppressNode, SuppressUntil, Suppressed};
use crate::dsl::window::node::{
    SessionWindowAggregate, SlidingWindowAggregate, TimeWindowAggregate,
};
use crate::dsl::window::windowed_core::WindowedCore;
pub(crate) use crate::dsl::window::windowed_core::{FoldFn as WindowFoldFn, MergeFn};
use crate::dsl::{KGroupedStream, KTable, Materialized, StoreType};
use crate::processor::StoreSerdes;
use crate::processor::node::{FlushRef, NodeRef, SkipNulls};
use crate::serdes::{SerdeRef, Serdes};
use crate::topology::{
    BuiltNode, GraphBuilder, LifecycleRef, NodeFactory, NodeKind, StoreDef, StoreKind, TypeSig,
};
use crate::types::window::{
    EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, WindowKind, Windowed,
    segment_interval,
};

/// Window definitions `KGroupedStream::windowed_by` takes: [`TimeWindows`] and
/// [`SlidingWindows`] give a [`TimeWindowedKStream`], [`SessionWindows`] a
/// [`SessionWindowedKStream`].
pub trait WindowedBy<K, V> {
    /// The windowed stream.
    type Stream;
    #[doc(hidden)]
    fn windowed(self, grouped: &KGroupedStream<K, V>) -> Self::Stream;
}

impl<K: Clone + 'static, V: Clone + 'static> WindowedBy<K, V> for TimeWindows {
    type Stream = TimeWindowedKStream<K, V>;
    fn windowed(self, grouped: &KGroupedStream<K, V>) -> Self::Stream {
        TimeWindowedKStream {
            grouped: grouped.clone_parts(),
            windows: WindowKind::Time(self),
            emit: EmitStrategy::default(),
        }
    }
}

impl<K: Clone + 'static, V: Clone + 'static> WindowedBy<K, V> for SlidingWindows {
    type Stream = TimeWindowedKStream<K, V>;
    fn windowed(self, grouped: &KGroupedStream<K, V>) -> Self::Stream {
        TimeWindowedKStream {
            grouped: grouped.clone_parts(),
            windows: WindowKind::Sliding(self),
            emit: EmitStrategy::default(),
        }
    }
}

impl<K: Clone + 'static, V: Clone + 'static> WindowedBy<K, V> for SessionWindows {
    type Stream = SessionWindowedKStream<K, V>;
    fn windowed(self, grouped: &KGroupedStream<K, V>) -> Self::Stream {
        SessionWindowedKStream {
            grouped: grouped.clone_parts(),
            windows: self,
            emit: EmitStrategy::default(),
        }
    }
}

impl<K: Clone + 'static, V: Clone + 'static> KGroupedStream<K, V> {
    /// Aggregates per window: [`TimeWindows`] (tumbling, hopping), [`SlidingWindows`] or
    /// [`SessionWindows`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{Consumed, window::EmitStrategy, Produced, Serdes, StreamsBuilder, StreamsConfig};
    /// use riffle::{TimeWindows, TopologyTestDriver, window::Window, Windowed};
    ///
    /// // Page views per user per minute, each minute's count once it is final.
    /// let minute = Duration::from_secs(60);
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("views", Consumed::with(Serdes::string(), Serdes::string()))
    ///     .group_by_key()
    ///     .windowed_by(TimeWindows::of_size_and_grace(minute, Duration::from_secs(10)))
    ///     .emit_strategy(EmitStrategy::on_window_close())
    ///     .count()
    ///     .to_stream()
    ///     .to("per-minute", Produced::with(Serdes::time_windowed(Serdes::string(), minute), Serdes::i64()));
    ///
    /// let driver = TopologyTestDriver::new(builder.build()?, StreamsConfig::new("views"))?;
    /// let views = driver.create_input_topic("views", Serdes::string(), Serdes::string());
    /// let counts = driver.create_output_topic(
    ///     "per-minute",
    ///     Serdes::time_windowed(Serdes::string(), minute),
    ///     Serdes::i64(),
    /// );
    /// views.pipe_input_at("alice".into(), "/".into(), 1_000)?;
    /// views.pipe_input_at("alice".into(), "/about".into(), 59_000)?;
    /// views.pipe_input_at("alice".into(), "/".into(), 75_000)?; // closes [0, 60 s) + 10 s grace
    /// let alice = Windowed::new("alice".to_string(), Window::new(0, 60_000));
    /// assert_eq!(counts.read_key_values_to_list()?, [(alice, 2)]);
    /// # Ok::<(), riffle::Error>(())
    /// ```
    pub fn windowed_by<W: WindowedBy<K, V>>(&self, windows: W) -> W::Stream {
        windows.windowed(self)
    }

    pub(crate) fn clone_parts(&self) -> KGroupedStream<K, V> {
        KGroupedStream {
            graph: self.graph.clone(),
            node: self.node,
            repartition_required: self.repartition_required,
            grouped: super::Grouped {
                key: self.grouped.key.clone(),
                value: self.grouped.value.clone(),
                name: self.grouped.name.clone(),
            },
        }
    }
}

/// A grouped stream in time or sliding windows.
pub struct TimeWindowedKStream<K, V> {
    grouped: KGroupedStream<K, V>,
    windows: WindowKind,
    emit: EmitStrategy,
}

impl<K, V> std::fmt::Debug for TimeWindowedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeWindowedKStream")
            .field("windows", &self.windows)
            .field("emit", &self.emit)
            .finish()
    }
}

/// A grouped stream in session windows.
pub struct SessionWindowedKStream<K, V> {
    grouped: KGroupedStream<K, V>,
    windows: SessionWindows,
    emit: EmitStrategy,
}

impl<K, V> std::fmt::Debug for SessionWindowedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWindowedKStream")
            .field("windows", &self.windows)
            .field("emit", &self.emit)
            .finish()
    }
}

/// Which aggregation node to build.
pub(crate) enum Flavor<K, V, A> {
    Time(TimeWindows, WindowFoldFn<K, V, A>),
    Sliding(SlidingWindows, WindowFoldFn<K, V, A>),
    Session(SessionWindows, WindowFoldFn<K, V, A>, MergeFn<K, A>),
}

/// A windowed aggregation in Kafka's order of names: its store (`<prefix>-STATE-STORE-<n>`
/// unless named), its processor (`<prefix>-<n>`: `KSTREAM-AGGREGATE` or `KSTREAM-REDUCE`, as
/// Kafka names every windowed aggregation), then the repartition topic's nodes.
fn build<K, V, A>(
    grouped: &KGroupedStream<K, V>,
    prefix: &str,
    emit: EmitStrategy,
    flavor: Flavor<K, V, A>,
    materialized: Materialized<K, A>,
    agg_serde: SerdeRef<A>,
) -> KTable<Windowed<K>, A>
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    let kind = flavor.kind();
    let store_name = grouped.store_name(prefix, &materialized.name);
    let plan = WindowedStore::plan(&grouped.graph, kind, store_name, &materialized);
    let name = grouped.graph.borrow_mut().next_name(prefix);
    let parent = grouped.aggregate_parent(&plan.store_name);
    let key_serde = materialized.key_serde_or(&grouped.grouped.key);
    let agg_serde = materialized.value_serde_or(&agg_serde);
    let serdes = (key_serde.clone(), agg_serde.clone());
    let node = windowed_node(grouped, parent, name, emit, flavor, &plan, serdes, 0);
    plan.add_store(node, &materialized, key_serde.clone(), agg_serde.clone());
    plan.table(node, key_serde, agg_serde)
}

impl<K, V, A> Flavor<K, V, A> {
    fn kind(&self) -> WindowKind {
        match self {
            Flavor::Time(w, _) => WindowKind::Time(*w),
            Flavor::Sliding(w, _) => WindowKind::Sliding(*w),
            Flavor::Session(w, ..) => WindowKind::Session(*w),
        }
    }
}

/// A windowed aggregation's store as planned before its nodes exist: its windows, name and
/// retention (checked against the windows).
pub(crate) struct WindowedStore {
    graph: Rc<RefCell<GraphBuilder>>,
    kind: WindowKind,
    pub(crate) store_name: String,
    retention_ms: i64,
}

impl WindowedStore {
    /// Checks `kind` and the retention `materialized` asks for (errors at `build`).
    pub(crate) fn plan<K, A>(
        graph: &Rc<RefCell<GraphBuilder>>,
        kind: WindowKind,
        store_name: String,
        materialized: &Materialized<K, A>,
    ) -> WindowedStore {
        let check = match kind {
            WindowKind::Time(w) => w.validate(),
            WindowKind::Sliding(w) => w.validate(),
            WindowKind::Session(w) => w.validate(),
        };
        if let Err(e) = check {
            graph.borrow_mut().errors.push(e.to_string());
        }
        let min_retention = kind.min_retention_ms();
        let retention_ms = match materialized.retention {
            Some(r) => {
                let r = r.as_millis().min(i64::MAX as u128) as i64;
                if r < min_retention {
                    graph.borrow_mut().errors.push(format!(
                        "store {store_name:?}: the retention ({r} ms) must be at least the window's size plus its grace ({min_retention} ms)"
                    ));
                }
                r
            }
            None => min_retention,
        };
        WindowedStore {
            graph: graph.clone(),
            kind,
            store_name,
            retention_ms: kind.store_retention_ms(retention_ms),
        }
    }

    /// The windows.
    pub(crate) fn kind(&self) -> WindowKind {
        self.kind
    }

    /// Adds the store to `node` (the aggregation's first node).
    pub(crate) fn add_store<K: 'static, A: 'static>(
        &self,
        node: usize,
        materialized: &Materialized<K, A>,
        key_serde: SerdeRef<K>,
        agg_serde: SerdeRef<A>,
    ) -> usize {
        let mut g = self.graph.borrow_mut();
        let store_name = self.store_name.clone();
        if g.stores.iter().any(|s| s.name == store_name) {
            g.errors
                .push(format!("a store named {store_name:?} already exists"));
        }
        let persistent = materialized.store_type == StoreType::Persistent;
        let mut def = StoreDef::dsl(store_name, materialized.logging, persistent);
        def.caching = materialized.caching;
        let retention_ms = self.retention_ms;
        let segment_ms = segment_interval(retention_ms);
        def.kind = match self.kind {
            WindowKind::Session(_) => {
                def.timestamped = false;
                StoreKind::Session {
                    retention_ms,
                    segment_ms,
                }
            }
            WindowKind::Sliding(w) => StoreKind::Window {
                retention_ms,
                segment_ms,
                ordered: true,
                window_ms: w.difference_ms,
                retain_duplicates: false,
            },
            WindowKind::Time(w) => StoreKind::Window {
                retention_ms,
                segment_ms,
                ordered: false,
                window_ms: w.size_ms,
                retain_duplicates: false,
            },
        };
        def.serdes = Some(Arc::new(StoreSerdes {
            key: key_serde,
            value: agg_serde,
        }));
        g.add_store(node, def)
    }

    /// The windowed table whose node is `node`.
    pub(crate) fn table<K: Clone + 'static, A: Clone + 'static>(
        &self,
        node: usize,
        key_serde: SerdeRef<K>,
        agg_serde: SerdeRef<A>,
    ) -> KTable<Windowed<K>, A> {
        let table_key_serde = match self.kind {
            WindowKind::Time(w) => Serdes::time_windowed(
                key_serde,
                std::time::Duration::from_millis(w.size_ms as u64),
            ),
            WindowKind::Sliding(w) => Serdes::time_windowed(
                key_serde,
                std::time::Duration::from_millis(w.difference_ms as u64),
            ),
            WindowKind::Session(_) => Serdes::session_windowed(key_serde),
        };
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde: table_key_serde,
            value_serde: agg_serde,
            windows: Some(self.kind),
            window_end: Some(Arc::new(|k: &Windowed<K>| k.window.end)),
            view: None,
        }
    }
}

/// Adds the windowed aggregation node `name` below `parent`, folding `grouped`'s records into
/// `plan`'s store (keys and aggregates through `serdes`) as `flavor` says. `input` numbers it
/// among the nodes sharing the store (a cogroup's): each keeps its stream time under its own
/// meta key, and only input 0 forwards the store's updates at commit.
#[allow(clippy::too_many_arguments)]
pub(crate) fn windowed_node<K, V, A>(
    grouped: &KGroupedStream<K, V>,
    parent: usize,
    name: String,
    emit: EmitStrategy,
    flavor: Flavor<K, V, A>,
    plan: &WindowedStore,
    (key_serde, agg_serde): (SerdeRef<K>, SerdeRef<A>),
    input: u32,
) -> usize
where
    K: Clone + 'static,
    V: Clone + 'static,
    A: Clone + 'static,
{
    let (kind, retention_ms) = (plan.kind, plan.retention_ms);
    let node_agg_serde = agg_serde;
    let (null_key, null_value) = (key_serde.clone(), grouped.grouped.value.clone());
    let factory: NodeFactory = Arc::new(move |ctx| {
        let mut core = WindowedCore::new(
            ctx.store_slot(0),
            key_serde.clone(),
            node_agg_serde.clone(),
            emit,
            kind,
            retention_ms,
            ctx.forward::<Windowed<K>, A>(),
        );
        core.share(input);
        let (node, flush, lifecycle): (NodeRef<K, V>, FlushRef, LifecycleRef) = match &flavor {
            Flavor::Time(windows, fold) => {
                let n = Rc::new(RefCell::new(TimeWindowAggregate {
                    core,
                    windows: *windows,
                    fold: fold.clone(),
                }));
                (n.clone(), n.clone(), n)
            }
            Flavor::Sliding(windows, fold) => {
                let n = Rc::new(RefCell::new(SlidingWindowAggregate {
                    core,
                    windows: *windows,
                    fold: fold.clone(),
                }));
                (n.clone(), n.clone(), n)
            }
            Flavor::Session(windows, fold, merge) => {
                let n = Rc::new(RefCell::new(SessionWindowAggregate {
                    core,
                    windows: *windows,
                    fold: fold.clone(),
                    merge: merge.clone(),
                }));
                (n.clone(), n.clone(), n)
            }
        };
        let node = SkipNulls::wrap(
            ctx.name(),
            Some(null_key.clone()),
            Some(null_value.clone()),
            node,
        );
        BuiltNode {
            node: Box::new(node),
            flush: Some(flush),
            lifecycle: Some(lifecycle),
        }
    });
    let mut g = grouped.graph.borrow_mut();
    let types = (
        Some(TypeSig::of::<K, V>()),
        Some(TypeSig::of::<Windowed<K>, A>()),
    );
    g.add_node(
        name,
        NodeKind::Processor,
        &[parent],
        factory,
        types.0,
        types.1,
    )
}

impl<K: Clone + 'static, V: Clone + 'static> TimeWindowedKStream<K, V> {
    /// Forwards every update (the default) or only each window's final result
    /// ([`EmitStrategy::on_window_close`]).
    pub fn emit_strategy(mut self, emit: EmitStrategy) -> Self {
        self.emit = emit;
        self
    }

    fn flavor<A>(&self, fold: WindowFoldFn<K, V, A>) -> Flavor<K, V, A> {
        match self.windows {
            WindowKind::Sliding(w) => Flavor::Sliding(w, fold),
            WindowKind::Time(w) => Flavor::Time(w, fold),
            WindowKind::Session(_) => unreachable!("a time-windowed stream has time windows"),
        }
    }

    /// Counts the records per key and window.
    pub fn count(&self) -> KTable<Windowed<K>, i64> {
        self.count_as(Materialized::new(), false)
    }

    /// Counts the records per key and window, in the store `materialized` describes (in time
    /// windows, an unnamed store takes one more counter value, as Kafka's
    /// `count(Materialized)` does; in sliding windows it does not).
    pub fn count_with(&self, materialized: Materialized<K, i64>) -> KTable<Windowed<K>, i64> {
        self.count_as(materialized, true)
    }

    fn count_as(&self, materialized: Materialized<K, i64>, burn: bool) -> KTable<Windowed<K>, i64> {
        let time = matches!(self.windows, WindowKind::Time(_));
        burn_store_name(&self.grouped, burn && time, &materialized);
        let flavor = self.flavor(count_fold());
        build(
            &self.grouped,
            "KSTREAM-AGGREGATE",
            self.emit,
            flavor,
            materialized,
            Serdes::i64(),
        )
    }

    /// Combines each window's values with `reducer`; the window's first value is the start.
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<Windowed<K>, V> {
        let serde = self.grouped.grouped.value.clone();
        let flavor = self.flavor(reduce_fold(Arc::new(reducer)));
        let prefix = "KSTREAM-REDUCE";
        build(
            &self.grouped,
            prefix,
            self.emit,
            flavor,
            materialized,
            serde,
        )
    }

    /// Folds each window's values into an aggregate that starts at `init()`.
    pub fn aggregate<A: Clone + 'static>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<Windowed<K>, A> {
        let fold: WindowFoldFn<K, V, A> =
            Arc::new(move |k, v, old| aggregator(k, v, old.unwrap_or_else(&init)));
        build(
            &self.grouped,
            "KSTREAM-AGGREGATE",
            self.emit,
            self.flavor(fold),
            materialized,
            aggregate_serde,
        )
    }
}

/// Takes the store name Kafka's `count(Materialized)` takes and drops for an unnamed store, if
/// `burn`.
fn burn_store_name<K, V, A>(grouped: &KGroupedStream<K, V>, burn: bool, m: &Materialized<K, A>) {
    if burn && m.name.is_none() {
        grouped
            .graph
            .borrow_mut()
            .next_name("KSTREAM-AGGREGATE-STATE-STORE");
    }
}

fn count_fold<K, V>() -> WindowFoldFn<K, V, i64> {
    Arc::new(|_, _, old| old.unwrap_or(0).saturating_add(1))
}

type Reducer<V> = Arc<dyn Fn(V, V) -> V + Send + Sync>;

fn reduce_fold<K, V: 'static>(reducer: Reducer<V>) -> WindowFoldFn<K, V, V> {
    Arc::new(move |_, v, old| match old {
        Some(old) => reducer(old, v),
        None => v,
    })
}

impl<K: Clone + 'static, V: Clone + 'static> SessionWindowedKStream<K, V> {
    /// Forwards every update (the default) or only each session's final result
    /// ([`EmitStrategy::on_window_close`]).
    pub fn emit_strategy(mut self, emit: EmitStrategy) -> Self {
        self.emit = emit;
        self
    }

    /// Counts the records per key and session.
    pub fn count(&self) -> KTable<Windowed<K>, i64> {
        self.count_as(Materialized::new(), false)
    }

    /// Counts the records per key and session, in the store `materialized` describes (an
    /// unnamed store takes one more counter value, as Kafka's `count(Materialized)` does).
    pub fn count_with(&self, materialized: Materialized<K, i64>) -> KTable<Windowed<K>, i64> {
        self.count_as(materialized, true)
    }

    fn count_as(&self, materialized: Materialized<K, i64>, burn: bool) -> KTable<Windowed<K>, i64> {
        burn_store_name(&self.grouped, burn, &materialized);
        let merge: MergeFn<K, i64> = Arc::new(|_, a, b| a.unwrap_or(0).saturating_add(b));
        let flavor = Flavor::Session(self.windows, count_fold(), merge);
        build(
            &self.grouped,
            "KSTREAM-AGGREGATE",
            self.emit,
            flavor,
            materialized,
            Serdes::i64(),
        )
    }

    /// Combines each session's values with `reducer` (which also merges sessions).
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<Windowed<K>, V> {
        let serde = self.grouped.grouped.value.clone();
        let reducer: Reducer<V> = Arc::new(reducer);
        let r2 = reducer.clone();
        let merge: MergeFn<K, V> = Arc::new(move |_, acc, v| match acc {
            Some(acc) => r2(acc, v),
            None => v,
        });
        let flavor = Flavor::Session(self.windows, reduce_fold(reducer), merge);
        let prefix = "KSTREAM-REDUCE";
        build(
            &self.grouped,
            prefix,
            self.emit,
            flavor,
            materialized,
            serde,
        )
    }

    /// Folds each session's values into an aggregate that starts at `init()`; `merger`
    /// combines the aggregates of the sessions a record joins (starting from `init()`, as
    /// Kafka Streams does).
    pub fn aggregate<A: Clone + 'static>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        merger: impl Fn(&K, A, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
        aggregate_serde: SerdeRef<A>,
    ) -> KTable<Windowed<K>, A> {
        let init = Arc::new(init);
        let i2 = init.clone();
        let fold: WindowFoldFn<K, V, A> =
            Arc::new(move |k, v, old| aggregator(k, v, old.unwrap_or_else(|| init())));
        let merge: MergeFn<K, A> =
            Arc::new(move |k, acc, v| merger(k, acc.unwrap_or_else(|| i2()), v));
        let flavor = Flavor::Session(self.windows, fold, merge);
        build(
            &self.grouped,
            "KSTREAM-AGGREGATE",
            self.emit,
            flavor,
            materialized,
            aggregate_serde,
        )
    }
}

impl<K: Clone + 'static, V: Clone + 'static> KTable<K, V> {
    /// Holds updates back (Kafka's `suppress`): until each window closes (only a windowed
    /// aggregation's table), or until a time limit passes per key.
    pub fn suppress(&self, suppressed: Suppressed) -> KTable<K, V> {
        let buffer_config = suppressed.buffer;
        let (buffer_time, delay_ms, drop_tombstones): (BufferTimeFn<K>, i64, bool) =
            match suppressed.until {
                SuppressUntil::TimeLimit(limit) => (Arc::new(|_, ts| ts), limit, false),
                SuppressUntil::WindowCloses => {
                    let mut g = self.graph.borrow_mut();
                    if !buffer_config.shut_down_when_full {
                        g.errors.push(
                        "suppress(until_window_closes) needs a buffer that never emits early: BufferConfig::unbounded() or should_shut_down_when_full()".into(),
                    );
                    }
                    match (self.windows, self.window_end.clone()) {
                        (Some(kind), Some(end_of)) => (
                            Arc::new(move |k: &K, _| kind.close_time(end_of(k))),
                            0,
                            true,
                        ),
                        _ => {
                            g.errors.push(
                            "suppress(until_window_closes) applies to a windowed aggregation's table only".into(),
                        );
                            (Arc::new(|_, ts| ts), 0, true)
                        }
                    }
                }
            };
        let mut g = self.graph.borrow_mut();
        let store_name = match &suppressed.name {
            Some(n) => format!("{n}-store"),
            None => g.next_name("KTABLE-SUPPRESS-STATE-STORE"),
        };
        let key_serde = self.key_serde.clone();
        let value_serde = self.value_serde.clone();
        let name = store_name.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node = Rc::new(RefCell::new(SuppressNode::new(
                ctx.store_slot(0),
                key_serde.clone(),
                value_serde.clone(),
                buffer_time.clone(),
                delay_ms,
                buffer_config,
                drop_tombstones,
                name.clone(),
                ctx.forward::<K, V>(),
            )));
            let flush: FlushRef = node.clone();
            let lifecycle: LifecycleRef = node.clone();
            let node: NodeRef<K, V> = node;
            BuiltNode {
                node: Box::new(node),
                flush: Some(flush),
                lifecycle: Some(lifecycle),
            }
        });
        let node_name = match &suppressed.name {
            Some(n) => n.clone(),
            None => g.next_name("KTABLE-SUPPRESS"),
        };
        let types = Some(TypeSig::of::<K, V>());
        let node = g.add_node(
            node_name,
            NodeKind::Processor,
            &[self.node],
            factory,
            types,
            types,
        );
        if g.stores.iter().any(|s| s.name == store_name) {
            g.errors
                .push(format!("a store named {store_name:?} already exists"));
        }
        let def = StoreDef::dsl(store_name, true, false);
        g.add_store(node, def);
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            windows: self.windows,
            window_end: self.window_end.clone(),
            view: None,
        }
    }
}
