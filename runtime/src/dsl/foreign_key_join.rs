//! Foreign-key table joins in the DSL: [`KTable::join_foreign`] and
//! [`KTable::left_join_foreign`] (Kafka Streams' `KTable.join(KTable, Function, ValueJoiner)`,
//! KIP-213), and their materialized `*_with`. The protocol's nodes are in
//! runtime/src/foreign_key.rs.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::table::{MapFn, add_table_store};
use super::{Consumed, KTable, Materialized, StoreType, add_source};
use crate::foreign_key::{
    ForeignJoinKind, ForeignTableJoin, Response, ResponseJoin, ResponseSink, Subscription,
    SubscriptionJoin, SubscriptionSend, SubscriptionSerde,
};
use crate::node::NodeRef;
use crate::serdes::SerdeRef;
use crate::table::{Read, TableMerge};
use crate::topology::{BuiltNode, Erased, NodeFactory, NodeKind, StoreDef, TopicRef, TypeSig};

type Extractor<K, V, KO> = Arc<dyn Fn(&K, &V) -> Option<KO> + Send + Sync>;
type Joiner<V, VO, VR> = Arc<dyn Fn(V, Option<VO>) -> VR + Send + Sync>;

impl<K, V> KTable<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Joins each row with the other table's row for the foreign key `foreign_key` takes from it
    /// (Kafka Streams' foreign-key join, KIP-213): the result has this table's keys, a row for
    /// each key whose foreign key the other table holds, updated when either row changes, and
    /// deleted when this row is deleted, its foreign key is `None`, or the other row goes. The
    /// tables need not be co-partitioned: subscriptions travel to the other table's partitions
    /// through `<application_id>-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic` and the
    /// answers back through `…-SUBSCRIPTION-RESPONSE-<n>-topic`. The result is not
    /// materialized (join it, or group it, through [`KTable::join_foreign_with`]).
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// // Orders (order id → customer id) and customers (customer id → name).
    /// let orders = builder.table("orders", Consumed::with(Serdes::string(), Serdes::string()), Materialized::new());
    /// let customers = builder.table("customers", Consumed::with(Serdes::string(), Serdes::string()), Materialized::new());
    /// orders
    ///     .join_foreign(&customers, |_, customer| Some(customer.clone()), |customer, name| format!("{customer}: {name}"), Serdes::string())
    ///     .to_stream()
    ///     .to("orders-with-names", Produced::with(Serdes::string(), Serdes::string()));
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 2);
    /// ```
    pub fn join_foreign<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let kind = ForeignJoinKind::Inner;
        self.foreign_join(
            other,
            kind,
            Arc::new(foreign_key),
            inner(joiner),
            value_serde,
            None,
        )
    }

    /// [`KTable::join_foreign`], kept in a store of its own that `materialized` describes.
    pub fn join_foreign_with<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        materialized: Materialized<VR>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let (kind, j) = (ForeignJoinKind::Inner, inner(joiner));
        self.foreign_join(
            other,
            kind,
            Arc::new(foreign_key),
            j,
            value_serde,
            Some(materialized),
        )
    }

    /// Every row of this table, joined with the other table's row for its foreign key, or with
    /// `None` when there is none or the foreign key is `None` (Kafka Streams'
    /// `KTable.leftJoin(KTable, Function, ValueJoiner)`).
    pub fn left_join_foreign<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(V, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let kind = ForeignJoinKind::Left;
        let j: Joiner<V, VO, VR> = Arc::new(joiner);
        self.foreign_join(other, kind, Arc::new(foreign_key), j, value_serde, None)
    }

    /// [`KTable::left_join_foreign`], kept in a store of its own that `materialized`
    /// describes.
    pub fn left_join_foreign_with<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(V, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        materialized: Materialized<VR>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let (kind, j): (_, Joiner<V, VO, VR>) = (ForeignJoinKind::Left, Arc::new(joiner));
        self.foreign_join(
            other,
            kind,
            Arc::new(foreign_key),
            j,
            value_serde,
            Some(materialized),
        )
    }

    /// Adds the protocol's nodes, topics and subscription store, named in Kafka Streams' order.
    fn foreign_join<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        kind: ForeignJoinKind,
        extractor: Extractor<K, V, KO>,
        joiner: Joiner<V, VO, VR>,
        value_serde: SerdeRef<VR>,
        materialized: Option<Materialized<VR>>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let unjoinable = |this: &Self| KTable {
            graph: this.graph.clone(),
            node: this.node,
            key_serde: this.key_serde.clone(),
            value_serde: value_serde.clone(),
            windows: None,
            window_end: None,
            view: None,
        };
        let (Some(this_view), Some(other_view)) = (self.view.clone(), other.view.clone()) else {
            self.graph.borrow_mut().errors.push(
                "a windowed or suppressed table cannot be joined by foreign key (riffle joins \
                 tables read from a topic, aggregated, or derived from those)"
                    .into(),
            );
            return unjoinable(self);
        };
        let (key_serde, fk_serde) = (self.key_serde.clone(), other.key_serde.clone());
        let (left_serde, right_serde) = (self.value_serde.clone(), other.value_serde.clone());
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        if let Err(e) = g.send_old_values(self.node) {
            g.errors.push(e);
        }
        // 1. The left side's subscriptions, to the registration topic.
        let registration = TopicRef::Repartition(format!(
            "{}-topic",
            g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION")
        ));
        let factory: NodeFactory = {
            let (key_serde, left_serde, fk_serde) =
                (key_serde.clone(), left_serde.clone(), fk_serde.clone());
            Arc::new(move |ctx| {
                let node: NodeRef<K, V> = Rc::new(RefCell::new(SubscriptionSend {
                    kind,
                    extractor: extractor.clone(),
                    key_serde: key_serde.clone(),
                    value_serde: left_serde.clone(),
                    fk_serde: fk_serde.clone(),
                    to_registration: ctx.forward_some::<KO, Subscription>(),
                    to_resolver: ctx.forward_some::<K, Response>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            })
        };
        let send = g.add_processor_node::<K, V, KO, Subscription>(
            "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION",
            &[self.node],
            factory,
        );
        let subscriptions: SerdeRef<Subscription> = Arc::new(SubscriptionSerde);
        let sink = g.next_name("KTABLE-SINK");
        g.sink(
            sink,
            registration.clone(),
            fk_serde.clone(),
            subscriptions.clone(),
            &[send],
        );
        drop(g);
        let consumed = Consumed::with(fk_serde.clone(), subscriptions);
        let source = add_source::<KO, Subscription>(&graph, vec![registration], consumed, false);
        // 2. The right side: the subscription store, answers to subscriptions and to right-row
        // updates, to the response topic.
        let mut g = graph.borrow_mut();
        let store_name = g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE");
        let persistent = materialized
            .as_ref()
            .is_some_and(|m| m.store_type == StoreType::Persistent);
        let mut def = StoreDef::dsl(store_name, true, persistent);
        def.caching = false;
        def.ordered_cache = true;
        let factory: NodeFactory = {
            let (fk_serde, right_serde, view) =
                (fk_serde.clone(), right_serde.clone(), other_view.clone());
            Arc::new(move |ctx| {
                let node: NodeRef<KO, Subscription> = Rc::new(RefCell::new(SubscriptionJoin {
                    store: ctx.store_slot(0),
                    fk_serde: fk_serde.clone(),
                    foreign: view.bind(ctx, Read::Latest),
                    foreign_serde: right_serde.clone(),
                    forward: ctx.forward::<Vec<u8>, Response>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            })
        };
        let join = g.add_processor_node::<KO, Subscription, Vec<u8>, Response>(
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
            &[source.node],
            factory,
        );
        let store = g.add_store(join, def);
        // The registration topic has the right table's partitions (Kafka's co-partition group).
        g.copartitioned.push((source.node, other.node));
        g.nodes[join].stores.extend(&other_view.stores);
        // Kafka's receive and join processors are one node here; the name of the second is
        // taken so the rest are numbered as Kafka numbers them.
        g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR");
        let factory: NodeFactory = {
            let (fk_serde, right_serde) = (fk_serde.clone(), right_serde.clone());
            Arc::new(move |ctx| {
                let node: NodeRef<KO, VO> = Rc::new(RefCell::new(ForeignTableJoin {
                    store: ctx.store_slot(0),
                    fk_serde: fk_serde.clone(),
                    foreign_serde: right_serde.clone(),
                    forward: ctx.forward::<Vec<u8>, Response>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            })
        };
        let foreign = g.add_processor_node::<KO, VO, Vec<u8>, Response>(
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
            &[other.node],
            factory,
        );
        g.nodes[foreign].stores.push(store);
        let response = TopicRef::Repartition(format!(
            "{}-topic",
            g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE")
        ));
        let sink_topic = response.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<Vec<u8>, Response> = Rc::new(RefCell::new(ResponseSink {
                topic: ctx.topic_index(&sink_topic),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let sink = g.next_name("KTABLE-SINK");
        let input = Some(TypeSig::of::<Vec<u8>, Response>());
        let kind_sink = NodeKind::Sink {
            topic: response.clone(),
        };
        g.add_node(sink, kind_sink, &[join, foreign], factory, input, None);
        drop(g);
        // 3. The left side again: answers joined with the left rows they were asked for.
        let consumed = Consumed::with(
            key_serde.clone(),
            Arc::new(crate::foreign_key::ResponseSerde),
        );
        let source = add_source::<K, Response>(&graph, vec![response], consumed, false);
        let mut g = graph.borrow_mut();
        // The response topic has the left table's partitions.
        g.copartitioned.push((source.node, self.node));
        let factory: NodeFactory = {
            let (left_serde, right_serde, view) =
                (left_serde.clone(), right_serde.clone(), this_view.clone());
            Arc::new(move |ctx| {
                let node: NodeRef<K, Response> = Rc::new(RefCell::new(ResponseJoin {
                    kind,
                    primary: view.bind(ctx, Read::Latest),
                    value_serde: left_serde.clone(),
                    foreign_serde: right_serde.clone(),
                    joiner: joiner.clone(),
                    forward: ctx.forward::<K, VR>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            })
        };
        let resolver = g.add_processor_node::<K, Response, K, VR>(
            "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR",
            &[source.node, send],
            factory,
        );
        g.nodes[resolver].stores.extend(&this_view.stores);
        let output = g.next_name("KTABLE-FK-JOIN-OUTPUT");
        let (node, view) = match materialized {
            Some(materialized) => {
                let store_name = match &materialized.name {
                    Some(name) => name.clone(),
                    None => g.next_name("KTABLE-FK-JOIN-OUTPUT-STATE-STORE"),
                };
                drop(g);
                let identity: MapFn<K, VR, VR> = Arc::new(|_, v| Some(v));
                let serde = materialized
                    .value_serde
                    .clone()
                    .unwrap_or_else(|| value_serde.clone());
                let (node, view) = add_table_store(
                    &graph,
                    output,
                    &[resolver],
                    store_name,
                    &materialized,
                    key_serde.clone(),
                    serde,
                    identity,
                    None,
                );
                (node, Some(view))
            }
            None => {
                // Unmaterialized: updates pass on, with no old values and no view (Kafka's
                // output is a table source materialized only when named or needed).
                let factory: NodeFactory = Arc::new(|ctx| {
                    let node: NodeRef<K, VR> = Rc::new(RefCell::new(TableMerge {
                        forward: ctx.forward::<K, VR>(),
                        send_old: false,
                    }));
                    BuiltNode::plain(Box::new(node) as Erased)
                });
                let sig = Some(TypeSig::of::<K, VR>());
                let node = g.add_node(output, NodeKind::Processor, &[resolver], factory, sig, sig);
                (node, None)
            }
        };
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde,
            value_serde,
            windows: None,
            window_end: None,
            view,
        }
    }
}

/// An inner joiner as the answer join calls it (only with a right row).
fn inner<V, VO, VR>(joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static) -> Joiner<V, VO, VR>
where
    V: 'static,
    VO: 'static,
{
    Arc::new(move |v, o| match o {
        Some(o) => joiner(v, o),
        None => unreachable!("riffle invariant: an inner foreign-key join joins a right row"),
    })
}
