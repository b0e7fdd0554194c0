//! Stream–stream windowed joins in the DSL: [`KStream::join_stream`],
//! [`KStream::left_join_stream`] and [`KStream::outer_join_stream`] (Kafka Streams'
//! `KStream.join(KStream, ValueJoiner, JoinWindows, StreamJoined)` and its left and outer
//! forms). What a join is given is in `options.rs` ([`JoinWindows`], [`StreamJoined`]); its
//! semantics, with the two nodes that run it, in `node.rs`; the times they share, in `time.rs`.

mod node;
mod options;
mod time;

pub use options::{JoinWindows, StreamJoined};

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::dsl::join::stream_stream::node::{JoinSide, JoinSpec, SideJoiner, SideStores};
use crate::dsl::join::stream_stream::time::Side;
use crate::dsl::topics::{RepartitionSpec, repartition_through};
use crate::dsl::{KStream, Named, StoreType};
use crate::processor::node::NodeRef;
use crate::serdes::{SerdeRef, Serdes};
use crate::state::stores::Stores;
use crate::topology::{BuiltNode, Erased, GraphBuilder, LifecycleRef, NodeFactory, StoreDef};

/// The joiner of a join as the DSL keeps it: the key, the left value and the right value
/// (either missing in left and outer joins).
type Joiner<K, V1, V2, VR> = Arc<dyn Fn(&K, Option<&V1>, Option<&V2>) -> VR + Send + Sync>;

impl<K, V1> KStream<K, V1>
where
    K: Clone + 'static,
    V1: Clone + 'static,
{
    /// Joins each record with every record of `other` with the same key whose timestamp is
    /// within `windows` of it, each result at the later of the two timestamps (Kafka Streams'
    /// `KStream.join(KStream, ValueJoiner, JoinWindows, StreamJoined)`). Both streams must be
    /// co-partitioned; a stream whose key changed upstream is repartitioned first with
    /// `joined`'s serdes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{Consumed, JoinWindows, Produced, Serdes, dsl::StreamJoined, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let clicks = builder.stream("clicks", Consumed::with(Serdes::string(), Serdes::string()));
    /// builder
    ///     .stream("impressions", Consumed::with(Serdes::string(), Serdes::string()))
    ///     .join_stream(
    ///         &clicks,
    ///         |impression, click| format!("{impression}->{click}"),
    ///         JoinWindows::of_time_difference_and_grace(Duration::from_secs(60), Duration::from_secs(10)),
    ///         StreamJoined::with(Serdes::string(), Serdes::string(), Serdes::string()),
    ///     )
    ///     .to("clicked", Produced::with(Serdes::string(), Serdes::string()));
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 1);
    /// ```
    pub fn join_stream<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: impl Fn(&V1, &V2) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        self.join_stream_with_key(other, move |_, l, r| joiner(l, r), windows, joined)
    }

    /// [`KStream::join_stream`], and each record of this stream that joins nothing is emitted
    /// once with `None`, when its window has closed (`t + after + grace` behind stream time),
    /// or at once if it arrives after its window (Kafka Streams' `KStream.leftJoin(KStream,
    /// ...)`, with the spurious-result fix of Kafka 3.1).
    pub fn left_join_stream<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: impl Fn(&V1, Option<&V2>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        self.left_join_stream_with_key(other, move |_, l, r| joiner(l, r), windows, joined)
    }

    /// [`KStream::left_join_stream`] both ways: a record of either stream that joins nothing
    /// is emitted once with `None` for the other side (Kafka Streams'
    /// `KStream.outerJoin(KStream, ...)`).
    pub fn outer_join_stream<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: impl Fn(Option<&V1>, Option<&V2>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        self.outer_join_stream_with_key(other, move |_, l, r| joiner(l, r), windows, joined)
    }

    /// [`KStream::join_stream`] with the joiner given the key too (Kafka Streams'
    /// `ValueJoinerWithKey`).
    pub fn join_stream_with_key<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: impl Fn(&K, &V1, &V2) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: Joiner<K, V1, V2, VR> = Arc::new(move |k, l, r| match (l, r) {
            (Some(l), Some(r)) => joiner(k, l, r),
            _ => unreachable!("riffle invariant: an inner join joins two records"),
        });
        self.join_streams(other, f, windows, joined, (false, false))
    }

    /// [`KStream::left_join_stream`] with the joiner given the key too.
    pub fn left_join_stream_with_key<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: impl Fn(&K, &V1, Option<&V2>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: Joiner<K, V1, V2, VR> = Arc::new(move |k, l, r| match l {
            Some(l) => joiner(k, l, r),
            None => unreachable!(
                "riffle invariant: a left join's processors never emit a right record alone"
            ),
        });
        self.join_streams(other, f, windows, joined, (true, false))
    }

    /// [`KStream::outer_join_stream`] with the joiner given the key too.
    pub fn outer_join_stream_with_key<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: impl Fn(&K, Option<&V1>, Option<&V2>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: Joiner<K, V1, V2, VR> = Arc::new(move |k, l, r| joiner(k, l, r));
        self.join_streams(other, f, windows, joined, (true, true))
    }

    /// The join of both streams: `outer` says whether the left and the right side emit their
    /// unmatched records.
    fn join_streams<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        joiner: Joiner<K, V1, V2, VR>,
        windows: JoinWindows,
        joined: StreamJoined<K, V1, V2>,
        outer: (bool, bool),
    ) -> KStream<K, VR>
    where
        V2: Clone + 'static,
        VR: Clone + 'static,
    {
        let (left_outer, right_outer) = outer;
        if let Err(e) = windows.check() {
            self.graph.borrow_mut().errors.push(e);
        }
        let base = joined.name.clone();
        let left = repartitioned(self, &joined.key, &joined.value, &base, "left");
        let right = repartitioned(other, &joined.key, &joined.other_value, &base, "right");

        let mut g = self.graph.borrow_mut();
        // Kafka numbers the processors whether or not the join is named; a name replaces the
        // processors' names, a store name the stores'. Its two `KSTREAM-WINDOWED` nodes (which
        // put each side's records into its store; riffle's join nodes do that themselves)
        // take their counter values first, so the names after them are Kafka's.
        g.next_name("KSTREAM-WINDOWED");
        g.next_name("KSTREAM-WINDOWED");
        let this_generated = g.next_name(if right_outer {
            "KSTREAM-OUTERTHIS"
        } else {
            "KSTREAM-JOINTHIS"
        });
        let other_generated = g.next_name(if left_outer {
            "KSTREAM-OUTEROTHER"
        } else {
            "KSTREAM-JOINOTHER"
        });
        let this_suffix = if right_outer {
            "-outer-this-join"
        } else {
            "-this-join"
        };
        let other_suffix = if left_outer {
            "-outer-other-join"
        } else {
            "-other-join"
        };
        let (this_name, other_name) = match &base {
            Some(name) => (
                format!("{name}{this_suffix}"),
                format!("{name}{other_suffix}"),
            ),
            None => (this_generated.clone(), other_generated.clone()),
        };
        let store_base = joined.store_name.clone();
        let (this_store, other_store) = match &store_base {
            Some(s) => (
                format!("{s}{this_suffix}-store"),
                format!("{s}{other_suffix}-store"),
            ),
            None => (
                format!("{this_generated}-store"),
                format!("{other_generated}-store"),
            ),
        };
        // Kafka's `OuterStreamJoinStoreFactory`: named after the store name, else
        // `KSTREAM-OUTERSHARED-<n>-store` with this side's processor's number (no counter value).
        let outer_store = left_outer.then(|| {
            let kind = if right_outer { "outer" } else { "left" };
            match &store_base {
                Some(s) => format!("{s}-{kind}-shared-join-store"),
                None => {
                    let number = this_generated.rsplit('-').next().unwrap_or_default();
                    format!("KSTREAM-OUTERSHARED-{number}-store")
                }
            }
        });
        let persistent = joined.store_type == StoreType::Persistent;
        let (logging, key) = (joined.logging, &joined.key);
        let left_def = window_def(
            &this_store,
            key,
            &joined.value,
            &windows,
            persistent,
            logging,
        );
        let right_def = window_def(
            &other_store,
            key,
            &joined.other_value,
            &windows,
            persistent,
            logging,
        );
        // The stores first, in Kafka's order (this side's, the other side's, the outer store),
        // so each side's node knows their topology ids; then each node is connected to all
        // three, its own first.
        let this_id = declare(&mut g, left_def);
        let other_id = declare(&mut g, right_def);
        let outer_id = outer_store.as_ref().map(|outer| {
            let supplier = if persistent {
                Stores::persistent_key_value_store(outer)
            } else {
                Stores::in_memory_key_value_store(outer)
            };
            let builder =
                Stores::key_value_store_builder(supplier, Serdes::bytes(), Serdes::bytes());
            let mut def = builder.into_def();
            def.logged = logging;
            declare(&mut g, def)
        });
        let spec = Arc::new(JoinSpec {
            processor: this_name.clone(),
            windows,
            outer_store: outer_store.clone(),
            other_outer: right_outer,
            trackers: Arc::default(),
        });
        let other_spec = Arc::new(JoinSpec {
            processor: other_name.clone(),
            windows,
            outer_store: outer_store.clone(),
            other_outer: left_outer,
            trackers: spec.trackers.clone(),
        });

        let right_joiner: SideJoiner<K, V2, V1, VR> = {
            let joiner = joiner.clone();
            Arc::new(move |k, this, other| joiner(k, other, this))
        };
        let (key, value, other_value) = (&joined.key, &joined.value, &joined.other_value);
        let left_node = side_node(
            &mut g,
            this_name,
            (Side::Left, left_outer),
            spec,
            joiner,
            (key.clone(), value.clone(), other_value.clone()),
            [this_id, other_id],
            outer_id,
            left,
        );
        let right_node = side_node(
            &mut g,
            other_name,
            (Side::Right, right_outer),
            other_spec,
            right_joiner,
            (key.clone(), other_value.clone(), value.clone()),
            [other_id, this_id],
            outer_id,
            right,
        );
        g.nodes[left_node].stores.push(this_id);
        g.nodes[right_node].stores.push(other_id);
        let mut names = vec![this_store.as_str(), other_store.as_str()];
        if let (Some(outer), Some(outer_id)) = (&outer_store, outer_id) {
            g.nodes[left_node].stores.push(outer_id);
            names.push(outer.as_str());
        }
        for node in [left_node, right_node] {
            if let Err(e) = g.connect_stores(node, &names) {
                g.errors.push(e);
            }
        }
        g.copartitioned.push((left, right));
        drop(g);
        let left_out: KStream<K, VR> = KStream::at(self.graph.clone(), left_node, false);
        let right_out: KStream<K, VR> = KStream::at(self.graph.clone(), right_node, false);
        // Kafka's `-merge` node: a pass-through, not a `KStream::merge` to the optimizer.
        let named = base.map(|name| Named::as_(format!("{name}-merge")));
        left_out.join_merge(&right_out, named.as_ref())
    }
}

/// Adds one side's node below `parent`: `side` and whether it emits its unmatched records, the
/// join as this side sees it, its joiner, its (key, this, other) serdes, and the topology ids of
/// its (this, other) window stores and of the outer store.
#[allow(clippy::too_many_arguments)]
fn side_node<K, VThis, VOther, VR>(
    g: &mut GraphBuilder,
    name: String,
    (side, outer): (Side, bool),
    spec: Arc<JoinSpec>,
    joiner: SideJoiner<K, VThis, VOther, VR>,
    serdes: (SerdeRef<K>, SerdeRef<VThis>, SerdeRef<VOther>),
    [this_store, other_store]: [usize; 2],
    outer_store: Option<usize>,
    parent: usize,
) -> usize
where
    K: Clone + 'static,
    VThis: Clone + 'static,
    VOther: Clone + 'static,
    VR: Clone + 'static,
{
    let factory: NodeFactory = Arc::new(move |ctx| {
        let stores = SideStores {
            this: ctx.slot_of(this_store),
            other: ctx.slot_of(other_store),
            outer: outer_store.map(|s| ctx.slot_of(s)),
        };
        let node = Rc::new(RefCell::new(JoinSide::new(
            (side, outer),
            spec.clone(),
            joiner.clone(),
            serdes.clone(),
            stores,
            ctx.forward::<K, VR>(),
        )));
        let lifecycle: LifecycleRef = node.clone();
        let typed: NodeRef<K, VThis> = node;
        BuiltNode {
            node: Box::new(typed) as Erased,
            flush: None,
            lifecycle: Some(lifecycle),
        }
    });
    g.add_named_processor::<K, VThis, K, VR>(name, &[parent], factory)
}

/// Adds `def` to the topology's stores, connected to no node yet; returns its id.
fn declare(g: &mut GraphBuilder, def: StoreDef) -> usize {
    g.stores.push(def);
    g.stores.len() - 1
}

/// A join side's window store: kept `before + after + grace`, keeping duplicates.
fn window_def<K: 'static, V: 'static>(
    name: &str,
    key: &SerdeRef<K>,
    value: &SerdeRef<V>,
    windows: &JoinWindows,
    persistent: bool,
    logging: bool,
) -> StoreDef {
    let retention = Duration::from_millis(windows.retention_ms().max(0) as u64);
    let size = Duration::from_millis(windows.size_ms().max(0) as u64);
    let supplier = if persistent {
        Stores::persistent_window_store(name, retention, size, true)
    } else {
        Stores::in_memory_window_store(name, retention, size, true)
    };
    let mut def = Stores::window_store_builder(supplier, key.clone(), value.clone()).into_def();
    def.logged = logging;
    def
}

/// The node a join side reads from: the stream's own, or, when its key changed upstream, the
/// source of the repartition topic `<name>-<side>-repartition` (a named join), else
/// `<the node the stream comes out of>-repartition`, written with `key` and `value` (Kafka's
/// `repartitionForJoin`).
fn repartitioned<K, V>(
    stream: &KStream<K, V>,
    key: &SerdeRef<K>,
    value: &SerdeRef<V>,
    base: &Option<String>,
    side: &str,
) -> usize
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    if !stream.repartition_required {
        return stream.node;
    }
    let prefix = match base {
        Some(base) => format!("{base}-{side}"),
        None => stream.node_name(),
    };
    let spec = RepartitionSpec::grouping(key.clone(), value.clone());
    repartition_through(&stream.graph, stream.node, &prefix, spec)
}
