//! The node behind [`KStream::split`](crate::KStream::split): Kafka Streams' `KStreamBranch`.

use std::sync::Arc;

use crate::processor::node::{Forward, Node, ProcessingContext};
use crate::types::error::Result;

pub(crate) type Predicate<K, V> = Arc<dyn Fn(&K, &V) -> bool + Send + Sync>;

/// Sends each record to the branch of the first predicate that holds for it, else to the
/// default branch if there is one (the child after the predicates' children), else nowhere.
pub(crate) struct Branch<K, V> {
    pub(crate) predicates: Arc<[Predicate<K, V>]>,
    /// The branches, in the order they were added: one per predicate, then the default.
    pub(crate) forward: Forward<K, V>,
}

impl<K: Clone, V: Clone> Node<K, V> for Branch<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let branch = self
            .predicates
            .iter()
            .position(|p| p(&key, &value))
            .unwrap_or(self.predicates.len());
        self.forward.send_to(branch, ctx, key, value)
    }
}
