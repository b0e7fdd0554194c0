//! Stream–global-table joins in the DSL: [`KStream::join_global`],
//! [`KStream::left_join_global`] and their `_with_key` forms (Kafka Streams'
//! `KStream.join(GlobalKTable, KeyValueMapper, ValueJoiner)` and its left form): each record
//! looks up the key it computes in the global table, with no co-partitioning. The node is in
//! `node.rs`.

mod node;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::join::stream_global::node::StreamGlobalJoin;
use crate::dsl::{GlobalKTable, KStream};
use crate::processor::node::NodeRef;
use crate::topology::{BuiltNode, Erased, NodeFactory};

type GlobalJoinFn<K, V, GV, VR> = Arc<dyn Fn(&K, V, Option<GV>) -> Option<VR> + Send + Sync>;

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Joins each record with the global table's row for the key `key_selector` computes from
    /// it; a record whose lookup key the table does not hold is dropped (Kafka Streams'
    /// `KStream.join(GlobalKTable, KeyValueMapper, ValueJoiner)`). The result keeps the
    /// record's key and timestamp; updates of the global table emit nothing.
    pub fn join_global<GK, GV, VR>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_selector: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(V, GV) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        GK: 'static,
        GV: 'static,
        VR: Clone + 'static,
    {
        let f: GlobalJoinFn<K, V, GV, VR> = Arc::new(move |_, v, g| g.map(|g| joiner(v, g)));
        self.join_global_node(table, Arc::new(key_selector), f)
    }

    /// Joins each record with the global table's row for the key `key_selector` computes from
    /// it, `None` when the table holds none (Kafka Streams' `KStream.leftJoin(GlobalKTable,
    /// KeyValueMapper, ValueJoiner)`).
    pub fn left_join_global<GK, GV, VR>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_selector: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(V, Option<GV>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        GK: 'static,
        GV: 'static,
        VR: Clone + 'static,
    {
        let f: GlobalJoinFn<K, V, GV, VR> = Arc::new(move |_, v, g| Some(joiner(v, g)));
        self.join_global_node(table, Arc::new(key_selector), f)
    }

    /// [`KStream::join_global`] with the joiner given the record's key too (Kafka's
    /// `ValueJoinerWithKey`).
    pub fn join_global_with_key<GK, GV, VR>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_selector: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&K, V, GV) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        GK: 'static,
        GV: 'static,
        VR: Clone + 'static,
    {
        let f: GlobalJoinFn<K, V, GV, VR> = Arc::new(move |k, v, g| g.map(|g| joiner(k, v, g)));
        self.join_global_node(table, Arc::new(key_selector), f)
    }

    /// [`KStream::left_join_global`] with the joiner given the record's key too.
    pub fn left_join_global_with_key<GK, GV, VR>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_selector: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&K, V, Option<GV>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        GK: 'static,
        GV: 'static,
        VR: Clone + 'static,
    {
        let f: GlobalJoinFn<K, V, GV, VR> = Arc::new(move |k, v, g| Some(joiner(k, v, g)));
        self.join_global_node(table, Arc::new(key_selector), f)
    }

    #[allow(clippy::type_complexity)]
    fn join_global_node<GK, GV, VR>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_selector: Arc<dyn Fn(&K, &V) -> GK + Send + Sync>,
        joiner: GlobalJoinFn<K, V, GV, VR>,
    ) -> KStream<K, VR>
    where
        GK: 'static,
        GV: 'static,
        VR: Clone + 'static,
    {
        let (index, key_serde, value_serde) = (
            table.index,
            table.key_serde.clone(),
            table.value_serde.clone(),
        );
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(StreamGlobalJoin {
                name: ctx.name().into(),
                store: ctx.global_store(index),
                key_selector: key_selector.clone(),
                key_serde: key_serde.clone(),
                value_serde: value_serde.clone(),
                joiner: joiner.clone(),
                forward: ctx.forward::<K, VR>(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        // Kafka Streams names both joins KSTREAM-LEFTJOIN.
        let node = g.add_processor_node::<K, V, K, VR>("KSTREAM-LEFTJOIN", &[self.node], factory);
        KStream::at(self.graph.clone(), node, self.repartition_required)
    }
}
