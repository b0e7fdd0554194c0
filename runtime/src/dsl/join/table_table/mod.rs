//! Table–table joins in the DSL: [`KTable::join`], [`KTable::left_join`] and
//! [`KTable::outer_join`], each also materialized (`*_with`). Kafka Streams' `KTableKTableJoin`:
//! an update of either table is joined with the other table's current row for its key, and the
//! result is a table. The nodes are in `node.rs`.

pub(crate) mod node;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::join::table_table::node::{JoinSide, TableJoin, TableMerge};
use crate::dsl::table::materialize;
use crate::dsl::table::node::{Read, TableView};
use crate::dsl::{KTable, Materialized};
use crate::processor::node::NodeRef;
use crate::serdes::SerdeRef;
use crate::topology::GraphBuilder;
use crate::topology::{BuiltNode, Erased, NodeFactory, NodeKind, OldValues, TypeSig};

type JoinFn<V, VO, VR> = Arc<dyn Fn(Option<V>, Option<VO>) -> VR + Send + Sync>;

impl<K, V> KTable<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// The rows both tables have for a key, joined by `joiner` (Kafka Streams'
    /// `KTable.join(KTable, ValueJoiner)`): an update of either table emits the joined row
    /// while the other has one, a delete of either emits a delete. The tables must be
    /// co-partitioned; the result is not materialized (its rows are read through both
    /// tables' stores), and `value_serde` is its values' serde.
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let names = builder.table("names", Consumed::with(Serdes::string(), Serdes::string()), Materialized::new());
    /// let emails = builder.table("emails", Consumed::with(Serdes::string(), Serdes::string()), Materialized::new());
    /// names
    ///     .join(&emails, |name, email| format!("{name} <{email}>"), Serdes::string())
    ///     .to_stream()
    ///     .to("contacts", Produced::with(Serdes::string(), Serdes::string()));
    /// assert_eq!(builder.build().unwrap().subtopology_count(), 1);
    /// ```
    pub fn join<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        self.table_join(other, JoinKind::Inner, inner(joiner), value_serde, None)
    }

    /// [`KTable::join`], kept in a store of its own that `materialized` describes.
    pub fn join_with<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        materialized: Materialized<K, VR>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let j = inner(joiner);
        self.table_join(other, JoinKind::Inner, j, value_serde, Some(materialized))
    }

    /// Every row of this table, joined by `joiner` with the other table's row for its key if
    /// there is one (Kafka Streams' `KTable.leftJoin(KTable, ValueJoiner)`): an update of the
    /// other table emits while this table has the key, and a delete of the other table's row
    /// emits this row joined with nothing.
    pub fn left_join<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(V, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        self.table_join(other, JoinKind::Left, left(joiner), value_serde, None)
    }

    /// [`KTable::left_join`], kept in a store of its own that `materialized` describes.
    pub fn left_join_with<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(V, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        materialized: Materialized<K, VR>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let j = left(joiner);
        self.table_join(other, JoinKind::Left, j, value_serde, Some(materialized))
    }

    /// Every key either table has, joined by `joiner` from the rows there are (Kafka Streams'
    /// `KTable.outerJoin(KTable, ValueJoiner)`); a key both tables deleted is deleted.
    pub fn outer_join<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(Option<V>, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        self.table_join(other, JoinKind::Outer, Arc::new(joiner), value_serde, None)
    }

    /// [`KTable::outer_join`], kept in a store of its own that `materialized` describes.
    pub fn outer_join_with<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(Option<V>, Option<VO>) -> VR + Send + Sync + 'static,
        value_serde: SerdeRef<VR>,
        materialized: Materialized<K, VR>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let j = Arc::new(joiner);
        self.table_join(other, JoinKind::Outer, j, value_serde, Some(materialized))
    }

    /// Adds the join's two sides (`KTABLE-JOINTHIS`, `KTABLE-JOINOTHER`, each reading the
    /// other table through its view) and where they meet (`KTABLE-MERGE`: a pass-through, or a
    /// table store when materialized), named in Kafka Streams' order.
    fn table_join<VO, VR>(
        &self,
        other: &KTable<K, VO>,
        kind: JoinKind,
        joiner: JoinFn<V, VO, VR>,
        value_serde: SerdeRef<VR>,
        materialized: Option<Materialized<K, VR>>,
    ) -> KTable<K, VR>
    where
        VO: Clone + 'static,
        VR: Clone + 'static,
    {
        let (Some(this_view), Some(other_view)) = (self.view.clone(), other.view.clone()) else {
            self.graph.borrow_mut().errors.push(
                "a windowed or suppressed table, or a foreign-key join's result not materialized, \
                 cannot be joined with a table (materialize a foreign-key join with \
                 join_foreign_with or left_join_foreign_with)"
                    .into(),
            );
            return self.unjoinable(value_serde);
        };
        let mut g = self.graph.borrow_mut();
        // A left join's left table and both tables of an outer join send their old values, as
        // Kafka Streams' do: a deleted row must reach the join even when the other table has
        // none, or the joined row it made would never be deleted.
        let old_values = match kind {
            JoinKind::Inner => [].as_slice(),
            JoinKind::Left => &[self.node][..],
            JoinKind::Outer => &[self.node, other.node][..],
        };
        for &table in old_values {
            if let Err(e) = g.send_old_values(table) {
                g.errors.push(e);
            }
        }
        let store_name = materialized.as_ref().map(|m| match &m.name {
            Some(name) => name.clone(),
            None => g.next_name("KTABLE-MERGE-STATE-STORE"),
        });
        let merge_name = g.next_name("KTABLE-MERGE");
        let (this_side, other_side) = kind.sides();
        let reversed = joiner.clone();
        let reversed: JoinFn<VO, V, VR> = Arc::new(move |o, t| reversed(t, o));
        let this = add_side(
            &mut g,
            "KTABLE-JOINTHIS",
            self.node,
            this_side,
            &other_view,
            joiner.clone(),
        );
        let that = add_side(
            &mut g,
            "KTABLE-JOINOTHER",
            other.node,
            other_side,
            &this_view,
            reversed,
        );
        g.copartitioned.push((self.node, other.node));
        let (node, view) = match (store_name, materialized) {
            (Some(store_name), Some(materialized)) => {
                drop(g);
                let (key, value) = (self.key_serde.clone(), value_serde.clone());
                let parents = [this, that];
                materialize(
                    &self.graph,
                    merge_name,
                    &parents,
                    store_name,
                    &materialized,
                    key,
                    value,
                )
            }
            _ => {
                let factory: NodeFactory = Arc::new(|ctx| {
                    let node: NodeRef<K, VR> = Rc::new(RefCell::new(TableMerge {
                        forward: ctx.forward::<K, VR>(),
                        send_old: ctx.sends_old_values(),
                    }));
                    BuiltNode::plain(Box::new(node) as Erased)
                });
                let sig = Some(TypeSig::of::<K, VR>());
                let node = g.add_node(
                    merge_name,
                    NodeKind::Processor,
                    &[this, that],
                    factory,
                    sig,
                    sig,
                );
                g.nodes[node].old_values = OldValues::FromParents;
                let view =
                    TableView::join(&this_view, &other_view, move |t, o| kind.row(&joiner, t, o));
                (node, view)
            }
        };
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde: self.key_serde.clone(),
            value_serde,
            windows: None,
            window_end: None,
            view: Some(view),
        }
    }

    /// The result of a join the build refuses (its error is recorded): a table nothing reads.
    fn unjoinable<VR>(&self, value_serde: SerdeRef<VR>) -> KTable<K, VR> {
        KTable {
            graph: self.graph.clone(),
            node: self.node,
            key_serde: self.key_serde.clone(),
            value_serde,
            windows: None,
            window_end: None,
            view: None,
        }
    }
}

/// A table–table join's kind.
#[derive(Clone, Copy, Debug)]
enum JoinKind {
    Inner,
    Left,
    Outer,
}

impl JoinKind {
    /// How this table's side and the other table's side treat their updates.
    fn sides(self) -> (JoinSide, JoinSide) {
        match self {
            JoinKind::Inner => (JoinSide::Inner, JoinSide::Inner),
            JoinKind::Left => (JoinSide::Left, JoinSide::Right),
            JoinKind::Outer => (JoinSide::Outer, JoinSide::Outer),
        }
    }

    /// The joined row of a key from both tables' rows (Kafka's join value getters).
    fn row<V, VO, VR>(
        self,
        joiner: &JoinFn<V, VO, VR>,
        this: Option<V>,
        other: Option<VO>,
    ) -> Option<VR> {
        let joins = match self {
            JoinKind::Inner => this.is_some() && other.is_some(),
            JoinKind::Left => this.is_some(),
            JoinKind::Outer => this.is_some() || other.is_some(),
        };
        joins.then(|| joiner(this, other))
    }
}

/// An inner joiner as the join nodes call it (they call it only with both values).
fn inner<V, VO, VR>(joiner: impl Fn(V, VO) -> VR + Send + Sync + 'static) -> JoinFn<V, VO, VR>
where
    V: 'static,
    VO: 'static,
{
    Arc::new(move |v, o| match (v, o) {
        (Some(v), Some(o)) => joiner(v, o),
        _ => unreachable!("riffle invariant: an inner table join joins two rows"),
    })
}

/// A left joiner as the join nodes call it (they call it only with this table's row).
fn left<V, VO, VR>(
    joiner: impl Fn(V, Option<VO>) -> VR + Send + Sync + 'static,
) -> JoinFn<V, VO, VR>
where
    V: 'static,
    VO: 'static,
{
    Arc::new(move |v, o| match v {
        Some(v) => joiner(v, o),
        None => unreachable!("riffle invariant: a left table join joins a left row"),
    })
}

/// Adds one side of a join below `parent`: it reads the other table through `other`, so it is
/// connected to that table's stores.
fn add_side<K, VT, VO, VR>(
    g: &mut GraphBuilder,
    prefix: &str,
    parent: usize,
    side: JoinSide,
    other: &TableView<K, VO>,
    joiner: JoinFn<VT, VO, VR>,
) -> usize
where
    K: Clone + 'static,
    VT: Clone + 'static,
    VO: Clone + 'static,
    VR: Clone + 'static,
{
    let view = other.clone();
    let factory: NodeFactory = Arc::new(move |ctx| {
        let node: NodeRef<K, VT> = Rc::new(RefCell::new(TableJoin {
            side,
            other: view.bind(ctx, Read::Forwarded),
            joiner: joiner.clone(),
            forward: ctx.forward::<K, VR>(),
            send_old: ctx.sends_old_values(),
        }));
        BuiltNode::plain(Box::new(node) as Erased)
    });
    let node = g.add_processor_node::<K, VT, K, VR>(prefix, &[parent], factory);
    g.nodes[node].old_values = OldValues::FromParents;
    g.nodes[node].stores.extend(&other.stores);
    node
}
