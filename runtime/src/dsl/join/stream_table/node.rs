//! The stream–table join's node ([`StreamTableJoin`], Kafka Streams' `KStreamKTableJoin`).

use std::sync::Arc;

use crate::dsl::table::node::BoundView;
use crate::processor::node::{Forward, Node, ProcessingContext};
use crate::serdes::SerdeRef;
use crate::types::error::Result;

/// A stream–table join: each stream record looks its key up in the table (cache first, then
/// store) and the joiner's result goes downstream with the stream record's timestamp. Table
/// updates emit nothing; they only change what later stream records find.
pub(crate) struct StreamTableJoin<K, V, VT, VR> {
    pub(crate) table: BoundView<K, VT>,
    /// A left join's key serde, if it has a null: a null key joins with no row, unlooked-up
    /// (Kafka's KIP-962). An inner join drops null keys before this node.
    pub(crate) null_key: Option<SerdeRef<K>>,
    /// The joiner, given the table's value if there is one; `None`: nothing to emit (an
    /// inner join's miss).
    #[allow(clippy::type_complexity)]
    pub(crate) joiner: Arc<dyn Fn(&K, V, Option<VT>) -> Option<VR> + Send + Sync>,
    pub(crate) forward: Forward<K, VR>,
}

impl<K: Clone + 'static, V, VT, VR: Clone> Node<K, V> for StreamTableJoin<K, V, VT, VR> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let row = match &self.null_key {
            Some(serde) if serde.is_null(&key) => None,
            _ => (self.table)(&key, ctx)?.map(|(row, _)| row),
        };
        match (self.joiner)(&key, value, row) {
            Some(joined) => self.forward.send(ctx, key, joined),
            None => Ok(()),
        }
    }
}
