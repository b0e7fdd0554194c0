//! Stream–table joins in the DSL: [`KStream::join`], [`KStream::left_join`] and their
//! `*_with` forms (Kafka Streams' `KStream.join(KTable, ValueJoiner)` and
//! `KStream.leftJoin(KTable, ValueJoiner)`): each stream record meets the table's current row
//! for its key. The node is in `node.rs`.

mod node;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::join::stream_table::node::StreamTableJoin;
use crate::dsl::named::node_name;
use crate::dsl::table::node::Read;
use crate::dsl::topics::{RepartitionSpec, repartition_through};
use crate::dsl::{KStream, KTable, Named};
use crate::processor::node::{NodeRef, SkipNulls};
use crate::serdes::SerdeRef;
use crate::topology::{BuiltNode, Erased, NodeFactory};

/// How the stream side of a stream–table join is repartitioned when its key changed upstream:
/// the serdes of its repartition topic, and the topic's name (Kafka Streams' `Joined`; the
/// table's values need no serde here, the table has its own).
pub struct Joined<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
    pub(crate) name: Option<String>,
}

impl<K, V> Joined<K, V> {
    /// Repartition the stream with these serdes.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Joined {
            key,
            value,
            name: None,
        }
    }

    /// Names the join's processor `name` and its repartition topic
    /// `<application_id>-<name>-repartition` (Kafka's `Joined.as`); unnamed, the topic is named
    /// after the node the stream comes out of (`<application_id>-KSTREAM-KEY-SELECT-<n>-repartition`).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

type JoinFn<K, V, VT, VR> = Arc<dyn Fn(&K, V, Option<VT>) -> Option<VR> + Send + Sync>;

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Joins each record with the table's current value for its key; a record whose key the
    /// table does not hold is dropped. Table updates emit nothing (Kafka Streams'
    /// `KStream.join(KTable, ValueJoiner)`). The stream and the table must be co-partitioned;
    /// a stream whose key changed upstream needs [`KStream::join_with`].
    pub fn join<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(V, VT) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: JoinFn<K, V, VT, VR> = Arc::new(move |_, v, t| t.map(|t| joiner(v, t)));
        self.join_table("KSTREAM-JOIN", table, f, None)
    }

    /// Joins each record with the table's current value for its key, `None` when the table
    /// does not hold it (Kafka Streams' `KStream.leftJoin(KTable, ValueJoiner)`).
    pub fn left_join<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(V, Option<VT>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: JoinFn<K, V, VT, VR> = Arc::new(move |_, v, t| Some(joiner(v, t)));
        self.join_table("KSTREAM-LEFTJOIN", table, f, None)
    }

    /// [`KStream::join`] with the joiner given the key too (Kafka Streams'
    /// `KStream.join(KTable, ValueJoinerWithKey)`).
    pub fn join_with_key<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&K, V, VT) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: JoinFn<K, V, VT, VR> = Arc::new(move |k, v, t| t.map(|t| joiner(k, v, t)));
        self.join_table("KSTREAM-JOIN", table, f, None)
    }

    /// [`KStream::left_join`] with the joiner given the key too (Kafka Streams'
    /// `KStream.leftJoin(KTable, ValueJoinerWithKey)`).
    pub fn left_join_with_key<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&K, V, Option<VT>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: JoinFn<K, V, VT, VR> = Arc::new(move |k, v, t| Some(joiner(k, v, t)));
        self.join_table("KSTREAM-LEFTJOIN", table, f, None)
    }

    /// [`KStream::join`] with the joiner given the key too (Kafka's `ValueJoinerWithKey`),
    /// and, for a stream whose key changed upstream, the serdes of the repartition topic it
    /// goes through first.
    pub fn join_with<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&K, V, VT) -> VR + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: JoinFn<K, V, VT, VR> = Arc::new(move |k, v, t| t.map(|t| joiner(k, v, t)));
        self.join_table("KSTREAM-JOIN", table, f, Some(joined))
    }

    /// [`KStream::left_join`] with the joiner given the key too, and the serdes of the
    /// repartition topic for a stream whose key changed upstream.
    pub fn left_join_with<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&K, V, Option<VT>) -> VR + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let f: JoinFn<K, V, VT, VR> = Arc::new(move |k, v, t| Some(joiner(k, v, t)));
        self.join_table("KSTREAM-LEFTJOIN", table, f, Some(joined))
    }

    fn join_table<VT, VR>(
        &self,
        prefix: &str,
        table: &KTable<K, VT>,
        joiner: JoinFn<K, V, VT, VR>,
        joined: Option<Joined<K, V>>,
    ) -> KStream<K, VR>
    where
        VT: Clone + 'static,
        VR: Clone + 'static,
    {
        let mut parent = self.node;
        if self.repartition_required {
            match &joined {
                Some(joined) => {
                    // Kafka's `repartitionForJoin`: the topic is named after the join, else
                    // after the node the stream comes out of.
                    let prefix = match &joined.name {
                        Some(name) => name.clone(),
                        None => self.node_name(),
                    };
                    let (key, value) = (joined.key.clone(), joined.value.clone());
                    let spec = RepartitionSpec::grouping(key, value);
                    parent = repartition_through(&self.graph, self.node, &prefix, spec);
                }
                None => self.graph.borrow_mut().errors.push(
                    "a stream whose key changed is joined with a table: it must be \
                     repartitioned first, so give the repartition topic's serdes with \
                     join_with or left_join_with and Joined::with"
                        .into(),
                ),
            }
        }
        let view = table.view.clone();
        if view.is_none() {
            self.graph.borrow_mut().errors.push(
                "a windowed or suppressed table, or a foreign-key join's result not materialized, \
                 cannot be joined with a stream (materialize a foreign-key join with \
                 join_foreign_with or left_join_foreign_with)"
                    .into(),
            );
        }
        let factory_view = view.clone();
        // Kafka's rule (KIP-962): an inner join drops a record with a null key or value; a left
        // join drops a null value, and joins a null key with no row.
        let left = prefix == "KSTREAM-LEFTJOIN";
        let key_serde = Some(table.key_serde.clone()).filter(|s| s.has_null());
        let named = joined.as_ref().and_then(|j| j.name.clone()).map(Named::as_);
        let value_serde = joined.map(|j| j.value);
        let factory: NodeFactory = Arc::new(move |ctx| {
            let view = factory_view
                .as_ref()
                .expect("riffle DSL invariant: a topology with an unjoinable table is not built");
            let node: NodeRef<K, V> = Rc::new(RefCell::new(StreamTableJoin {
                table: view.bind(ctx, Read::Latest),
                null_key: key_serde.clone().filter(|_| left),
                joiner: joiner.clone(),
                forward: ctx.forward::<K, VR>(),
            }));
            let key_check = key_serde.clone().filter(|_| !left);
            let node = SkipNulls::wrap(ctx.name(), key_check, value_serde.clone(), node);
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, prefix, named.as_ref());
        let node = g.add_named_processor::<K, V, K, VR>(name, &[parent], factory);
        if let Some(view) = &view {
            g.nodes[node].stores.extend(&view.stores);
        }
        g.copartitioned.push((parent, table.node));
        KStream::at(self.graph.clone(), node, false)
    }
}
