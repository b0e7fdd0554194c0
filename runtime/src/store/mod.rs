//! State stores: the [`KeyValueStore`] trait, an in-memory and a persistent (fjall)
//! implementation, and the write cache every store sits behind.
//!
//! Stores hold bytes; typed access goes through serdes in the processor nodes. A store is written
//! only at commit, after the commit's changelog writes and offsets are durable: between commits,
//! writes collect in the [`CachedStore`]'s cache (one entry per key, like Kafka Streams' record
//! cache), and reads see the cache first. So a store never holds uncommitted state, and a task
//! can resume from its checkpoint after its thread dies.

mod cached;
mod memory;
mod persistent;

pub use memory::InMemoryKeyValueStore;
pub use persistent::PersistentKeyValueStore;

pub(crate) use cached::CachedStore;

/// A failure inside a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The persistent store's storage engine failed.
    #[error("store {store} at {path}: {reason}")]
    Backend {
        /// The store's name.
        store: String,
        /// Where the store lives.
        path: String,
        /// What failed.
        reason: String,
    },
}

/// A key-value store of bytes. Implementations are owned by one task at a time.
///
/// The shape leaves room for window stores (ordered iteration) and for bulk restoration.
pub trait KeyValueStore: Send {
    /// The store's name.
    fn name(&self) -> &str;
    /// Copies the value of `key` into `out` (cleared first); `false` if there is none.
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Removes `key`.
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError>;
    /// Applies a batch of writes (`None` deletes) at once, as commits and restoration do.
    fn write_batch(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        for (key, value) in batch {
            match value {
                Some(value) => self.put(key, value)?,
                None => self.delete(key)?,
            }
        }
        Ok(())
    }
    /// Applies restored changelog records, given in ascending key order with each key once
    /// (`None` deletes). Stores may load these faster than ordinary writes.
    fn restore_sorted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        self.write_batch(batch)
    }
    /// Visits every entry, in key order.
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError>;
    /// Makes written data durable (a no-op in memory).
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Removes every entry (before a full restore).
    fn wipe(&mut self) -> Result<(), StoreError>;
    /// Whether the store keeps its data across restarts (then its checkpoint is meaningful).
    fn is_persistent(&self) -> bool;
    /// The number of entries (approximate for persistent stores).
    fn approximate_len(&self) -> usize;
}
