//! A global table's store (Kafka Streams' `GlobalKTable`): one per instance, written by the
//! global thread (runtime/src/engine/global.rs) and read by every stream thread at once.

use std::sync::{Arc, PoisonError, RwLock};

use crate::state::{BytesStore, StoreError};
use crate::types::error::{Result, SerdeError};

/// One global table's store, shared by the global thread (which writes it) and the stream
/// threads (which read it).
pub(crate) struct GlobalStore {
    pub(crate) name: String,
    pub(crate) topic: String,
    /// Read by every stream thread at once; written by the global thread a fetch at a time.
    pub(crate) store: RwLock<Box<dyn BytesStore + Sync>>,
}

impl std::fmt::Debug for GlobalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalStore")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .finish()
    }
}

impl GlobalStore {
    /// The value of `key` (into `out`) and its timestamp; `None` if the table has no row.
    pub(crate) fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<i64>, StoreError> {
        let store = self.store.read().unwrap_or_else(PoisonError::into_inner);
        if !store.get_into(key, out)? {
            return Ok(None);
        }
        let Some(stamp) = out.get(..8) else {
            return Err(StoreError::Corrupt {
                store: self.name.clone(),
                reason: format!(
                    "a value of {} bytes, fewer than its 8-byte timestamp",
                    out.len()
                ),
            });
        };
        let mut ts = [0u8; 8];
        ts.copy_from_slice(stamp);
        out.drain(..8);
        Ok(Some(i64::from_be_bytes(ts)))
    }
}

/// Checks that a global record's key and value decode with the table's serdes: which part
/// does not, and why.
pub(crate) type CheckFn =
    Arc<dyn Fn(&[u8], Option<&[u8]>) -> Result<(), (&'static str, SerdeError)> + Send + Sync>;
