//! The stream–global-table join's node ([`StreamGlobalJoin`], Kafka Streams'
//! `KStreamGlobalKTableJoin`).

use std::sync::Arc;

use crate::processor::node::{Forward, Node, ProcessingContext};
use crate::serdes::SerdeRef;
use crate::state::global::GlobalStore;
use crate::types::error::{Error, Result, SerializationExceptionOrigin};

/// A stream–global-table join (Kafka Streams' `KStreamGlobalKTableJoin`): each stream record's
/// lookup key (`key_selector`) is read from the global store, and the joiner's result goes on
/// with the stream record's key and timestamp.
pub(crate) struct StreamGlobalJoin<K, V, GK, GV, VR> {
    pub(crate) name: Arc<str>,
    pub(crate) store: Arc<GlobalStore>,
    #[allow(clippy::type_complexity)]
    pub(crate) key_selector: Arc<dyn Fn(&K, &V) -> GK + Send + Sync>,
    pub(crate) key_serde: SerdeRef<GK>,
    pub(crate) value_serde: SerdeRef<GV>,
    /// The joiner, given the global table's row if there is one; `None`: nothing to emit.
    #[allow(clippy::type_complexity)]
    pub(crate) joiner: Arc<dyn Fn(&K, V, Option<GV>) -> Option<VR> + Send + Sync>,
    pub(crate) forward: Forward<K, VR>,
}

impl<K: Clone + 'static, V, GK: 'static, GV: 'static, VR: Clone> Node<K, V>
    for StreamGlobalJoin<K, V, GK, GV, VR>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let lookup = (self.key_selector)(&key, &value);
        if self.key_serde.is_null(&lookup) {
            // Kafka's rule: a null lookup key cannot be joined (Kafka's left join joins it with
            // no row when the record's own key is null too; this join does not see that key's
            // serde, and drops it).
            ctx.skip_record(Some(&self.name), "null join key");
            return Ok(());
        }
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        if let Err(source) = self.key_serde.serialize(&lookup, &mut scratch.key) {
            return Err(Error::SerializeState {
                store: self.store.name.clone(),
                origin: SerializationExceptionOrigin::Key,
                source,
            });
        }
        let row = match self.store.get(&scratch.key, &mut scratch.old)? {
            Some(_) => match self.value_serde.deserialize(Some(&scratch.old)) {
                Ok(row) => Some(row),
                Err(source) => {
                    return Err(Error::CorruptState {
                        store: self.store.name.clone(),
                        task: ctx.task,
                        source,
                    });
                }
            },
            None => None,
        };
        match (self.joiner)(&key, value, row) {
            Some(joined) => self.forward.send(ctx, key, joined),
            None => Ok(()),
        }
    }
}
