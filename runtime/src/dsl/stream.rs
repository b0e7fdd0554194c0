//! [`KStream`]: its stateless operations (`filter`, `map`, `flat_map`, `peek`, `merge`, …),
//! where it goes (`to`, a processor), and its grouping for an aggregation. Each stateless
//! operation is one node, a `FilterMap` or a `FlatMap` (runtime/src/processor/node.rs).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::topics::add_sink;
use crate::dsl::{Grouped, KGroupedStream, Produced};
use crate::processor::node::{FilterMap, FlatMap, NodeRef};
use crate::processor::{FixedKeyProcessor, Processor};
use crate::serdes::DefaultSerde;
use crate::topology::{BuiltNode, Erased, GraphBuilder, NodeFactory, NodeKind, TopicRef, TypeSig};

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
