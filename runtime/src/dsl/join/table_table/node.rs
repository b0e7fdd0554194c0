//! The table–table join's nodes: each side's ([`TableJoin`], Kafka Streams'
//! `KTableKTableInnerJoin`, `…LeftJoin`, `…RightJoin`, `…OuterJoin`) and where the two sides
//! meet ([`TableMerge`], `KTableKTableJoinMerger`; a foreign-key join's unmaterialized result
//! passes through one too, and a cogroup's inputs meet in one).

use std::sync::Arc;

use crate::dsl::table::node::BoundView;
use crate::processor::node::{Change, Forward, Node, ProcessingContext};
use crate::types::error::Result;

/// How one side of a table–table join treats an update (Kafka Streams' `KTableKTableInnerJoin`,
/// `…LeftJoin`, `…RightJoin`, `…OuterJoin` processors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinSide {
    /// Either side of an inner join: nothing while the other side has no row.
    Inner,
    /// The left side of a left join: its rows join whatever the right side has.
    Left,
    /// The right side of a left join: nothing while the left side has no row; a right delete
    /// joins the left row with nothing, not a delete.
    Right,
    /// Either side of an outer join: a row joins whatever the other side has.
    Outer,
}

/// One side of a table–table join: each update of this side's table is joined with the other
/// table's current row for the key (read through its view) and sent on with the larger of the
/// two timestamps; the joined old value goes with it when downstream asked for old values.
pub(crate) struct TableJoin<K, VT, VO, VR> {
    pub(crate) side: JoinSide,
    pub(crate) other: BoundView<K, VO>,
    /// This side's value and the other side's (the arguments swapped for a join's other side).
    #[allow(clippy::type_complexity)]
    pub(crate) joiner: Arc<dyn Fn(Option<VT>, Option<VO>) -> VR + Send + Sync>,
    pub(crate) forward: Forward<K, VR>,
    pub(crate) send_old: bool,
}

impl<K: Clone + 'static, VT, VO: Clone, VR: Clone> Node<K, VT> for TableJoin<K, VT, VO, VR> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: VT) -> Result<()> {
        self.process_change(ctx, key, Change::of(Some(value)))
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.process_change(ctx, key, Change::of(None))
    }

    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<VT>,
    ) -> Result<()> {
        let other = (self.other)(&key, ctx)?;
        let this_empty = change.new.is_none() && change.old.is_none();
        let (other, timestamp) = match (self.side, other) {
            (JoinSide::Inner | JoinSide::Right, None) => return Ok(()),
            (JoinSide::Left | JoinSide::Outer, None) if this_empty => return Ok(()),
            (_, None) => (None, ctx.timestamp),
            (_, Some((row, ts))) => (Some(row), ctx.timestamp.max(ts)),
        };
        let j = &self.joiner;
        // Which of this side's values make a joined row: an inner or left join's only this
        // side's rows; the right side of a left join's every value, a delete too; an outer
        // join's any value while either side has a row.
        let join = |value: Option<VT>| match self.side {
            JoinSide::Inner | JoinSide::Left => value.map(|v| j(Some(v), other.clone())),
            JoinSide::Right => Some(j(value, other.clone())),
            JoinSide::Outer => {
                (value.is_some() || other.is_some()).then(|| j(value, other.clone()))
            }
        };
        let new = join(change.new);
        let old = if self.send_old {
            join(change.old)
        } else {
            None
        };
        let saved = std::mem::replace(&mut ctx.timestamp, timestamp);
        let sent = self.forward.send_update(ctx, key, new, old, self.send_old);
        ctx.timestamp = saved;
        sent
    }
}

/// Where a table–table join's two sides meet (Kafka Streams' `KTableKTableJoinMerger`,
/// unmaterialized): updates, deletes and, when asked for, old values pass on.
pub(crate) struct TableMerge<K, V> {
    pub(crate) forward: Forward<K, V>,
    pub(crate) send_old: bool,
}

impl<K: Clone, V: Clone> Node<K, V> for TableMerge<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.forward.send(ctx, key, value)
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.forward.send_tombstone(ctx, key)
    }

    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        self.forward
            .send_update(ctx, key, change.new, change.old, self.send_old)
    }
}
