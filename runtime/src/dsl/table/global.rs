//! Global tables in the DSL: [`StreamsBuilder::global_table`] and the stream–global-table
//! joins ([`KStream::join_global`], [`KStream::left_join_global`]).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::StreamsBuilder;
use crate::dsl::table::node::StreamGlobalJoin;
use crate::dsl::{Consumed, KStream, Materialized, StoreType};
use crate::processor::node::NodeRef;
use crate::serdes::SerdeRef;
use crate::state::global::CheckFn;
use crate::topology::{BuiltNode, Erased, GlobalDef, NodeFactory};

/// A table every application instance holds whole, every partition of its topic (Kafka
/// Streams' `GlobalKTable`): a stream joins it by any key it computes, without
/// co-partitioning or repartitioning.
pub struct GlobalKTable<K, V> {
    /// The topology's index of the global table.
    index: usize,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for GlobalKTable<K, V> {
    fn clone(&self) -> Self {
        GlobalKTable {
            index: self.index,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for GlobalKTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalKTable")
            .field("index", &self.index)
            .finish()
    }
}

impl StreamsBuilder {
    /// A table of every record of every partition of `topic`, held whole by each instance
    /// (Kafka Streams' `StreamsBuilder.globalTable`): before the stream threads start, the
    /// application's global thread reads the topic to its end into the store `materialized`
    /// names (or `<topic>-STATE-STORE-<n>`), and it follows the topic while the application
    /// runs. A record without a value deletes its key; one without a key is skipped; one that
    /// does not decode goes to the deserialization exception handler (under `fail`, the
    /// default, the application stops). The topic
    /// is the store's changelog (no `-changelog` topic). An in-memory store (the default) is
    /// read again from the topic at each start; a persistent one records how far it read each
    /// partition with its data, and reads on from there.
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let products = builder.global_table(
    ///     "products",
    ///     Consumed::with(Serdes::string(), Serdes::string()),
    ///     Materialized::named("products-store"),
    /// );
    /// builder
    ///     .stream("orders", Consumed::with(Serdes::string(), Serdes::string()))
    ///     // An order's value is its product id.
    ///     .join_global(&products, |_order, product| product.clone(), |product, name| format!("{product}: {name}"))
    ///     .to("orders-with-names", Produced::with(Serdes::string(), Serdes::string()));
    /// builder.build().unwrap();
    /// ```
    pub fn global_table<K, V>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<V>,
    ) -> GlobalKTable<K, V>
    where
        K: 'static,
        V: 'static,
    {
        let mut g = self.graph.borrow_mut();
        let store = match &materialized.name {
            Some(name) => name.clone(),
            None => g.next_name(&format!("{topic}-STATE-STORE")),
        };
        if g.stores.iter().any(|s| s.name == store) || g.globals.iter().any(|s| s.store == store) {
            g.errors
                .push(format!("a store named {store:?} already exists"));
        }
        if g.globals.iter().any(|s| s.topic == topic) {
            g.errors
                .push(format!("topic {topic:?} is read by two global tables"));
        }
        // Kafka's globalTable takes a source's and a table source's names after the store's:
        // taken here too, so later names are numbered as Kafka numbers them.
        g.next_name("KSTREAM-SOURCE");
        g.next_name("KTABLE-SOURCE");
        let (key_serde, value_serde) = (consumed.key.clone(), consumed.value.clone());
        let check: CheckFn = Arc::new(move |key, value| {
            key_serde.deserialize(Some(key)).map_err(|e| ("key", e))?;
            if let Some(value) = value {
                value_serde
                    .deserialize(Some(value))
                    .map_err(|e| ("value", e))?;
            }
            Ok(())
        });
        g.globals.push(GlobalDef {
            store,
            topic: topic.to_owned(),
            persistent: materialized.store_type == StoreType::Persistent,
            check,
        });
        GlobalKTable {
            index: g.globals.len() - 1,
            key_serde: consumed.key,
            value_serde: consumed.value,
            types: PhantomData,
        }
    }
}

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
