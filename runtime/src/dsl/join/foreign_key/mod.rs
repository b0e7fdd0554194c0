//! Foreign-key table joins in the DSL: [`KTable::join_foreign`] and
//! [`KTable::left_join_foreign`] (Kafka Streams' `KTable.join(KTable, Function, ValueJoiner)`,
//! KIP-213), and their materialized `*_with`. The protocol's nodes are in
//! runtime/src/dsl/join/foreign_key/node.rs, its records in
//! runtime/src/dsl/join/foreign_key/format.rs.

mod format;
mod node;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::join::foreign_key::format::{
    Response, ResponseSerde, Subscription, SubscriptionSerde,
};
use crate::dsl::join::foreign_key::node::{
    ForeignJoinKind, ForeignTableJoin, ResponseJoin, ResponseSink, SubscriptionJoin,
    SubscriptionSend,
};
use crate::dsl::join::table_table::node::TableMerge;
use crate::dsl::table::materialize;
use crate::dsl::table::node::Read;
use crate::dsl::{Consumed, KTable, Materialized, StoreType};
use crate::processor::node::NodeRef;
use crate::serdes::SerdeRef;
use crate::topology::GraphBuilder;
use crate::topology::{BuiltNode, Erased, NodeFactory, NodeKind, StoreDef, TopicRef, TypeSig};

/// How a foreign-key join's processors, topics and subscription store are named (Kafka
/// Streams' `TableJoined`, KIP-775). riffle partitions the subscription topics with Kafka's
/// default partitioner and routes answers to the subscribing partition, so there are no
/// partitioners to give.
#[derive(Clone, Debug, Default)]
pub struct TableJoined {
    name: Option<String>,
}

impl TableJoined {
    /// Generated names (`KTABLE-FK-JOIN-…-<n>`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the join's parts after `name`, as Kafka does: the topics
    /// `<application_id>-<name>-subscription-registration-topic` and
    /// `…-<name>-subscription-response-topic`, the store `<name>-subscription-store`, the
    /// processors `<name>-subscription-registration-processor`, `-subscription-receive`,
    /// `-foreign-join-subscription`, `-subscription-response-resolver`, `-result` and their
    /// sinks and sources. Names stay the same when the topology around the join changes.
    pub fn named(name: impl Into<String>) -> Self {
        TableJoined {
            name: Some(name.into()),
        }
    }
}

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
        let (kind, named) = (ForeignJoinKind::Inner, TableJoined::new());
        let (fk, j) = (Arc::new(foreign_key), inner(joiner));
        self.foreign_join(other, kind, fk, j, value_serde, named, None)
    }

    /// [`KTable::join_foreign`], its parts named as `table_joined` says and its result kept in
    /// a store of its own that `materialized` describes.
    #[allow(clippy::too_many_arguments)]
    pub fn join_foreign_with<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        table_joined: TableJoined,
        materialized: Materialized<K, VR>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let (kind, j) = (ForeignJoinKind::Inner, inner(joiner));
        let (fk, m) = (Arc::new(foreign_key), Some(materialized));
        self.foreign_join(other, kind, fk, j, value_serde, table_joined, m)
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
        let (kind, named) = (ForeignJoinKind::Left, TableJoined::new());
        let j: Joiner<V, VO, VR> = Arc::new(joiner);
        self.foreign_join(
            other,
            kind,
            Arc::new(foreign_key),
            j,
            value_serde,
            named,
            None,
        )
    }

    /// [`KTable::left_join_foreign`], its parts named as `table_joined` says and its result
    /// kept in a store of its own that `materialized` describes.
    #[allow(clippy::too_many_arguments)]
    pub fn left_join_foreign_with<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(V, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        table_joined: TableJoined,
        materialized: Materialized<K, VR>,
    ) -> KTable<K, VR>
    where
        KO: Clone + 'static,
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let (kind, j): (_, Joiner<V, VO, VR>) = (ForeignJoinKind::Left, Arc::new(joiner));
        let (fk, m) = (Arc::new(foreign_key), Some(materialized));
        self.foreign_join(other, kind, fk, j, value_serde, table_joined, m)
    }

    /// Adds the protocol's nodes, topics and subscription store, named in Kafka Streams' order.
    #[allow(clippy::too_many_arguments)]
    fn foreign_join<KO, VO, VR>(
        &self,
        other: &KTable<KO, VO>,
        kind: ForeignJoinKind,
        extractor: Extractor<K, V, KO>,
        joiner: Joiner<V, VO, VR>,
        value_serde: SerdeRef<VR>,
        table_joined: TableJoined,
        materialized: Option<Materialized<K, VR>>,
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
                "a windowed or suppressed table, or a foreign-key join's result not materialized, \
                 cannot be joined by foreign key (materialize a foreign-key join with \
                 join_foreign_with or left_join_foreign_with)"
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
        // `<name><suffix>` when the join is named, else a generated name (whose index is taken
        // either way, as Kafka's `NamedInternal.suffixWithOrElseGet` does).
        let named = table_joined.name;
        let name = move |g: &mut GraphBuilder, suffix: &str, prefix: &str| {
            let generated = g.next_name(prefix);
            match &named {
                Some(name) => format!("{name}{suffix}"),
                None => generated,
            }
        };
        // 1. The left side's subscriptions, to the registration topic.
        let registration = TopicRef::Repartition(format!(
            "{}-topic",
            name(
                &mut g,
                "-subscription-registration",
                "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION"
            )
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
        let send_name = name(
            &mut g,
            "-subscription-registration-processor",
            "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION",
        );
        let send =
            g.add_named_processor::<K, V, KO, Subscription>(send_name, &[self.node], factory);
        let subscriptions: SerdeRef<Subscription> = Arc::new(SubscriptionSerde);
        let sink = name(&mut g, "-subscription-registration-sink", "KTABLE-SINK");
        g.sink(
            sink,
            registration.clone(),
            fk_serde.clone(),
            subscriptions.clone(),
            &[send],
        );
        let consumed = Consumed::with(fk_serde.clone(), subscriptions);
        let source_name = name(&mut g, "-subscription-registration-source", "KTABLE-SOURCE");
        let source = g.source::<KO, Subscription>(source_name, vec![registration], consumed);
        // 2. The right side: the subscription store, answers to subscriptions and to right-row
        // updates, to the response topic.
        let store_name = name(
            &mut g,
            "-subscription-store",
            "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE",
        );
        // As the result's store says; persistent without one (Kafka's default store type).
        let store_type = materialized
            .as_ref()
            .map_or(StoreType::default(), |m| m.store_type);
        let persistent = store_type == StoreType::Persistent;
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
                    // As the right table has forwarded it so far: a row cached since the
                    // last commit reaches every subscription when it is forwarded (then
                    // `ForeignTableJoin` answers them all), and one created and deleted again
                    // before that is never forwarded, so no answer may have joined it.
                    foreign: view.bind(ctx, Read::Forwarded),
                    foreign_serde: right_serde.clone(),
                    forward: ctx.forward::<Vec<u8>, Response>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            })
        };
        let join_name = name(
            &mut g,
            "-subscription-receive",
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
        );
        let join = g.add_named_processor::<KO, Subscription, Vec<u8>, Response>(
            join_name,
            &[source],
            factory,
        );
        let store = g.add_store(join, def);
        // The registration topic has the right table's partitions (Kafka's co-partition group).
        g.copartitioned.push((source, other.node));
        g.nodes[join].stores.extend(&other_view.stores);
        // Kafka's receive and join processors are one node here; the name of the second is
        // taken so the rest are numbered as Kafka numbers them.
        name(
            &mut g,
            "-subscription-join-foreign",
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
        );
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
        let foreign_name = name(
            &mut g,
            "-foreign-join-subscription",
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
        );
        let foreign = g.add_named_processor::<KO, VO, Vec<u8>, Response>(
            foreign_name,
            &[other.node],
            factory,
        );
        g.nodes[foreign].stores.push(store);
        let response = TopicRef::Repartition(format!(
            "{}-topic",
            name(
                &mut g,
                "-subscription-response",
                "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE"
            )
        ));
        let sink_topic = response.clone();
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<Vec<u8>, Response> = Rc::new(RefCell::new(ResponseSink {
                topic: ctx.topic_index(&sink_topic),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        let sink = name(&mut g, "-subscription-response-sink", "KTABLE-SINK");
        let input = Some(TypeSig::of::<Vec<u8>, Response>());
        let kind_sink = NodeKind::Sink {
            topic: response.clone(),
        };
        g.add_node(sink, kind_sink, &[join, foreign], factory, input, None);
        // 3. The left side again: answers joined with the left rows they were asked for.
        let consumed = Consumed::with(key_serde.clone(), Arc::new(ResponseSerde));
        let source_name = name(&mut g, "-subscription-response-source", "KTABLE-SOURCE");
        let source = g.source::<K, Response>(source_name, vec![response], consumed);
        // The response topic has the left table's partitions.
        g.copartitioned.push((source, self.node));
        let factory: NodeFactory = {
            let (left_serde, right_serde, view) =
                (left_serde.clone(), right_serde.clone(), this_view.clone());
            Arc::new(move |ctx| {
                let node: NodeRef<K, Response> = Rc::new(RefCell::new(ResponseJoin {
                    kind,
                    // As the left table has forwarded it so far: what the subscriptions in
                    // flight were computed from (a row cached since the last commit is
                    // subscribed when it is forwarded).
                    primary: view.bind(ctx, Read::Forwarded),
                    value_serde: left_serde.clone(),
                    foreign_serde: right_serde.clone(),
                    joiner: joiner.clone(),
                    forward: ctx.forward::<K, VR>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            })
        };
        let resolver_name = name(
            &mut g,
            "-subscription-response-resolver",
            "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR",
        );
        let resolver =
            g.add_named_processor::<K, Response, K, VR>(resolver_name, &[source, send], factory);
        g.nodes[resolver].stores.extend(&this_view.stores);
        let output = name(&mut g, "-result", "KTABLE-FK-JOIN-OUTPUT");
        let (node, view) = match materialized {
            Some(materialized) => {
                let store_name = match &materialized.name {
                    Some(name) => name.clone(),
                    None => g.next_name("KTABLE-FK-JOIN-OUTPUT-STATE-STORE"),
                };
                drop(g);
                let (key, value) = (key_serde.clone(), value_serde.clone());
                let parents = [resolver];
                let (node, view) = materialize(
                    &graph,
                    output,
                    &parents,
                    store_name,
                    &materialized,
                    key,
                    value,
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
