//! The cogrouped aggregation's merge node ([`CogroupMerge`], Kafka Streams'
//! `KTablePassThrough` named `COGROUPKSTREAM-MERGE-…`). Each input's aggregation node is the
//! plain aggregation's own (`processor::node::Aggregate`), all writing one store.

use crate::processor::node::{Change, Forward, Node, ProcessingContext};
use crate::types::error::Result;

/// Where the inputs' aggregation nodes meet: passes their updates, deletes and, when a
/// downstream node asked for old values, their `Change`s on as the table's.
pub(crate) struct CogroupMerge<K, A> {
    pub(crate) forward: Forward<K, A>,
    pub(crate) send_old: bool,
}

impl<K: Clone, A: Clone> Node<K, A> for CogroupMerge<K, A> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: A) -> Result<()> {
        self.forward.send(ctx, key, value)
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.forward.send_tombstone(ctx, key)
    }
    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<A>,
    ) -> Result<()> {
        self.forward
            .send_update(ctx, key, change.new, change.old, self.send_old)
    }
}
