//! [`KStream`]: its stateless operations (`filter`, `map`, `flat_map`, `peek`, `merge`, …),
//! where it goes (`to`, a processor), and its grouping for an aggregation. Each stateless
//! operation is one node, a `FilterMap` or a `FlatMap` (runtime/src/processor/node.rs), and
//! has a `*_named` twin naming its processor ([`Named`]). The operators with nodes of their
//! own live beside them in runtime/src/dsl/: `split/`, `repartition.rs`, `to_table.rs`,
//! `print.rs`, `to_dynamic.rs`.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::named::node_name;
use crate::dsl::topics::add_sink;
use crate::dsl::{Grouped, KGroupedStream, Named, Produced};
use crate::processor::node::{FilterMap, FlatMap, KeepKey, NodeRef};
use crate::processor::{FixedKeyProcessor, Processor};
use crate::serdes::DefaultSerde;
use crate::topology::{
    BuiltNode, Erased, GraphBuilder, NodeFactory, NodeKind, Shape, TopicRef, TypeSig,
};

/// A stream of key-value records.
pub struct KStream<K, V> {
    pub(crate) graph: Rc<RefCell<GraphBuilder>>,
    pub(crate) node: usize,
    pub(crate) repartition_required: bool,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for KStream<K, V> {
    fn clone(&self) -> Self {
        KStream::at(self.graph.clone(), self.node, self.repartition_required)
    }
}

impl<K, V> KStream<K, V> {
    pub(crate) fn at(
        graph: Rc<RefCell<GraphBuilder>>,
        node: usize,
        repartition_required: bool,
    ) -> Self {
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

/// An operator that keeps the key passes a table's delete on (see [`FilterMap`]).
fn keep<K: 'static>() -> Option<KeepKey<K, K>> {
    Some(Arc::new(|k| k))
}

type FilterMapFn<K, V, K2, V2> = Arc<dyn Fn(K, V) -> Option<(K2, V2)> + Send + Sync>;
type FlatMapFn<K, V, K2, V2> = Arc<dyn Fn(K, V, &mut dyn FnMut(K2, V2)) + Send + Sync>;

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    #[allow(clippy::too_many_arguments)]
    fn filter_map<K2, V2>(
        &self,
        prefix: &str,
        named: Option<&Named>,
        parents: &[usize],
        f: FilterMapFn<K, V, K2, V2>,
        tombstones: Option<KeepKey<K, K2>>,
        repartition_required: bool,
        shape: Shape,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
    {
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(FilterMap {
                f: f.clone(),
                forward: ctx.forward::<K2, V2>(),
                tombstones: tombstones.clone(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, prefix, named);
        let types = (Some(TypeSig::of::<K, V>()), Some(TypeSig::of::<K2, V2>()));
        let node = g.add_node(
            name,
            NodeKind::Processor,
            parents,
            factory,
            types.0,
            types.1,
        );
        g.nodes[node].shape = shape;
        KStream::at(self.graph.clone(), node, repartition_required)
    }

    /// Keeps the records for which `predicate` holds.
    pub fn filter(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.filter_as(predicate, None)
    }

    /// [`KStream::filter`], its processor named `named`.
    pub fn filter_named(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        named: Named,
    ) -> Self {
        self.filter_as(predicate, Some(&named))
    }

    fn filter_as(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        named: Option<&Named>,
    ) -> Self {
        let f = Arc::new(move |k, v| predicate(&k, &v).then_some((k, v)));
        let repartition = self.repartition_required;
        self.filter_map(
            "KSTREAM-FILTER",
            named,
            &[self.node],
            f,
            keep(),
            repartition,
            Shape::Plain,
        )
    }

    /// Drops the records for which `predicate` holds.
    pub fn filter_not(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.filter_as(move |k, v| !predicate(k, v), None)
    }

    /// [`KStream::filter_not`], its processor named `named`.
    pub fn filter_not_named(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        named: Named,
    ) -> Self {
        self.filter_as(move |k, v| !predicate(k, v), Some(&named))
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
        self.map_as(f, None)
    }

    /// [`KStream::map`], its processor named `named`.
    pub fn map_named<K2, V2>(
        &self,
        f: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
        named: Named,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
    {
        self.map_as(f, Some(&named))
    }

    fn map_as<K2, V2>(
        &self,
        f: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
        named: Option<&Named>,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
    {
        let g = Arc::new(move |k, v| Some(f(k, v)));
        let shape = Shape::KeyChanging;
        self.filter_map("KSTREAM-MAP", named, &[self.node], g, None, true, shape)
    }

    /// Maps each value, keeping the key.
    pub fn map_values<V2>(&self, f: impl Fn(V) -> V2 + Send + Sync + 'static) -> KStream<K, V2>
    where
        V2: Clone + 'static,
    {
        self.map_values_as(f, None)
    }

    /// [`KStream::map_values`], its processor named `named`.
    pub fn map_values_named<V2>(
        &self,
        f: impl Fn(V) -> V2 + Send + Sync + 'static,
        named: Named,
    ) -> KStream<K, V2>
    where
        V2: Clone + 'static,
    {
        self.map_values_as(f, Some(&named))
    }

    fn map_values_as<V2>(
        &self,
        f: impl Fn(V) -> V2 + Send + Sync + 'static,
        named: Option<&Named>,
    ) -> KStream<K, V2>
    where
        V2: Clone + 'static,
    {
        let g = Arc::new(move |k, v| Some((k, f(v))));
        let repartition = self.repartition_required;
        self.filter_map(
            "KSTREAM-MAPVALUES",
            named,
            &[self.node],
            g,
            keep(),
            repartition,
            Shape::ValueChanging,
        )
    }

    /// Gives each record a new key computed from it (marks the stream for repartitioning).
    pub fn select_key<K2>(&self, f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static) -> KStream<K2, V>
    where
        K2: Clone + 'static,
    {
        self.select_key_as(f, None)
    }

    /// [`KStream::select_key`], its processor named `named`.
    pub fn select_key_named<K2>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        named: Named,
    ) -> KStream<K2, V>
    where
        K2: Clone + 'static,
    {
        self.select_key_as(f, Some(&named))
    }

    fn select_key_as<K2>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        named: Option<&Named>,
    ) -> KStream<K2, V>
    where
        K2: Clone + 'static,
    {
        let g = Arc::new(move |k, v| Some((f(&k, &v), v)));
        let shape = Shape::KeyChanging;
        self.filter_map(
            "KSTREAM-KEY-SELECT",
            named,
            &[self.node],
            g,
            None,
            true,
            shape,
        )
    }

    /// Calls `f` on each record and passes it on unchanged.
    pub fn peek(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> Self {
        self.peek_as(f, None)
    }

    /// [`KStream::peek`], its processor named `named`.
    pub fn peek_named(&self, f: impl Fn(&K, &V) + Send + Sync + 'static, named: Named) -> Self {
        self.peek_as(f, Some(&named))
    }

    fn peek_as(&self, f: impl Fn(&K, &V) + Send + Sync + 'static, named: Option<&Named>) -> Self {
        let g = Arc::new(move |k, v| {
            f(&k, &v);
            Some((k, v))
        });
        let repartition = self.repartition_required;
        let (parents, shape) = (&[self.node], Shape::Plain);
        self.filter_map(
            "KSTREAM-PEEK",
            named,
            parents,
            g,
            keep(),
            repartition,
            shape,
        )
    }

    /// Calls `f` on each record; ends the stream.
    pub fn foreach(&self, f: impl Fn(K, V) + Send + Sync + 'static) {
        self.foreach_as(f, None)
    }

    /// [`KStream::foreach`], its processor named `named`.
    pub fn foreach_named(&self, f: impl Fn(K, V) + Send + Sync + 'static, named: Named) {
        self.foreach_as(f, Some(&named))
    }

    fn foreach_as(&self, f: impl Fn(K, V) + Send + Sync + 'static, named: Option<&Named>) {
        let g: FilterMapFn<K, V, K, V> = Arc::new(move |k, v| {
            f(k, v);
            None
        });
        let shape = Shape::Plain;
        self.filter_map(
            "KSTREAM-FOREACH",
            named,
            &[self.node],
            g,
            None,
            false,
            shape,
        );
    }

    /// The records of both streams.
    pub fn merge(&self, other: &KStream<K, V>) -> Self {
        self.merge_as(other, None)
    }

    /// [`KStream::merge`], its processor named `named`.
    pub fn merge_named(&self, other: &KStream<K, V>, named: Named) -> Self {
        self.merge_as(other, Some(&named))
    }

    fn merge_as(&self, other: &KStream<K, V>, named: Option<&Named>) -> Self {
        self.merge_shaped(other, named, Shape::Merge)
    }

    /// The `-merge` node of a stream–stream join: a `KSTREAM-MERGE` that Kafka's optimizer
    /// does not take for a `KStream::merge`.
    pub(crate) fn join_merge(&self, other: &KStream<K, V>, named: Option<&Named>) -> Self {
        self.merge_shaped(other, named, Shape::Plain)
    }

    fn merge_shaped(&self, other: &KStream<K, V>, named: Option<&Named>, shape: Shape) -> Self {
        let repartition = self.repartition_required || other.repartition_required;
        let f = Arc::new(|k, v| Some((k, v)));
        let parents = [self.node, other.node];
        self.filter_map(
            "KSTREAM-MERGE",
            named,
            &parents,
            f,
            keep(),
            repartition,
            shape,
        )
    }

    fn flat_map_node<K2, V2>(
        &self,
        (prefix, shape): (&str, Shape),
        named: Option<&Named>,
        f: FlatMapFn<K, V, K2, V2>,
        tombstones: Option<KeepKey<K, K2>>,
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
                tombstones: tombstones.clone(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, prefix, named);
        let types = (Some(TypeSig::of::<K, V>()), Some(TypeSig::of::<K2, V2>()));
        let node = g.add_node(
            name,
            NodeKind::Processor,
            &[self.node],
            factory,
            types.0,
            types.1,
        );
        g.nodes[node].shape = shape;
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
        self.flat_map_as(f, None)
    }

    /// [`KStream::flat_map`], its processor named `named`.
    pub fn flat_map_named<K2, V2, I>(
        &self,
        f: impl Fn(K, V) -> I + Send + Sync + 'static,
        named: Named,
    ) -> KStream<K2, V2>
    where
        K2: Clone + 'static,
        V2: Clone + 'static,
        I: IntoIterator<Item = (K2, V2)>,
    {
        self.flat_map_as(f, Some(&named))
    }

    fn flat_map_as<K2, V2, I>(
        &self,
        f: impl Fn(K, V) -> I + Send + Sync + 'static,
        named: Option<&Named>,
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
        let op = ("KSTREAM-FLATMAP", Shape::KeyChanging);
        self.flat_map_node(op, named, g, None, true)
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
        self.flat_map_values_as(f, None)
    }

    /// [`KStream::flat_map_values`], its processor named `named`.
    pub fn flat_map_values_named<V2, I>(
        &self,
        f: impl Fn(V) -> I + Send + Sync + 'static,
        named: Named,
    ) -> KStream<K, V2>
    where
        V2: Clone + 'static,
        I: IntoIterator<Item = V2>,
    {
        self.flat_map_values_as(f, Some(&named))
    }

    fn flat_map_values_as<V2, I>(
        &self,
        f: impl Fn(V) -> I + Send + Sync + 'static,
        named: Option<&Named>,
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
        let repartition = self.repartition_required;
        let op = ("KSTREAM-FLATMAPVALUES", Shape::ValueChanging);
        self.flat_map_node(op, named, g, keep(), repartition)
    }

    /// Writes the stream to `topic`, partitioned by the [`Produced`]'s `StreamPartitioner`,
    /// else by key with Kafka's default partitioner; the sink is named as the [`Produced`]
    /// says, else `KSTREAM-SINK-<n>`.
    pub fn to(&self, topic: &str, produced: Produced<K, V>) {
        let topic = TopicRef::External(topic.to_owned());
        add_sink(&self.graph, self.node, topic, produced);
    }

    /// Runs a [`Processor`] made by `supplier` for each task on every record, with the stores
    /// named in `stores` (added with
    /// [`StreamsBuilder::add_state_store`](crate::StreamsBuilder::add_state_store)) connected
    /// to it. The processor may change keys: a later `group_by_key` repartitions.
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
        self.process_as(supplier, None, stores)
    }

    /// [`KStream::process`], its processor named `named`.
    pub fn process_named<KOut, VOut, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        named: Named,
        stores: &[&str],
    ) -> KStream<KOut, VOut>
    where
        KOut: Clone + 'static,
        VOut: Clone + 'static,
        P: Processor<K, V, KOut, VOut>,
    {
        self.process_as(supplier, Some(&named), stores)
    }

    fn process_as<KOut, VOut, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        named: Option<&Named>,
        stores: &[&str],
    ) -> KStream<KOut, VOut>
    where
        KOut: Clone + 'static,
        VOut: Clone + 'static,
        P: Processor<K, V, KOut, VOut>,
    {
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, "KSTREAM-PROCESSOR", named);
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
        self.process_values_as(supplier, None, stores)
    }

    /// [`KStream::process_values`], its processor named `named`.
    pub fn process_values_named<VOut, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        named: Named,
        stores: &[&str],
    ) -> KStream<K, VOut>
    where
        VOut: Clone + 'static,
        P: FixedKeyProcessor<K, V, VOut>,
    {
        self.process_values_as(supplier, Some(&named), stores)
    }

    fn process_values_as<VOut, P>(
        &self,
        supplier: impl Fn() -> P + Send + Sync + 'static,
        named: Option<&Named>,
        stores: &[&str],
    ) -> KStream<K, VOut>
    where
        VOut: Clone + 'static,
        P: FixedKeyProcessor<K, V, VOut>,
    {
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, "KSTREAM-PROCESSVALUES", named);
        let node = g.fixed_key_processor(name, supplier, &[self.node]);
        if let Err(e) = g.connect_stores(node, stores) {
            g.errors.push(e);
        }
        KStream::at(self.graph.clone(), node, self.repartition_required)
    }

    /// The name of the node this stream comes out of, to attach processors to it with the
    /// low-level [`Topology`](crate::Topology) API.
    pub fn node_name(&self) -> String {
        self.graph.borrow().nodes[self.node].name.clone()
    }

    /// Groups by the current key, with the default serdes of `K` and `V` ([`DefaultSerde`]: the
    /// primitives have one; give a `serde` type JSON with
    /// [`json_default_serde!`](crate::json_default_serde); or name the serdes with
    /// [`KStream::group_by_key_with`]).
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

    /// Groups by a new key computed from each record, through a repartition topic. The key
    /// is computed by a `KSTREAM-KEY-SELECT-<n>` node, named after the grouping if it is named
    /// (Kafka's `groupBy`).
    pub fn group_by<K2>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KGroupedStream<K2, V>
    where
        K2: Clone + 'static,
    {
        let named = grouped.name.clone().map(Named::as_);
        self.select_key_as(f, named.as_ref())
            .group_by_key_with(grouped)
    }
}
