//! The cache at a commit's end and at restoration: the cached writes go to the store in one
//! batch with its changelog position, then the cache is cleared (its buffers kept, or freed
//! when a commit used little of them); restored records go to the store directly; `discard`
//! drops uncommitted writes.

use hashbrown::HashTable;

use crate::state::{StoreError, StorePosition};

use super::*;

impl CachedStore {
    /// Applies restored changelog records (ascending keys, each once) to the store, with their
    /// timestamps in front of the values if the store keeps them.
    pub(crate) fn restore(
        &mut self,
        records: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>, i64)>,
    ) -> Result<(), StoreError> {
        if !self.timestamped {
            let mut plain = records.map(|(k, v, _)| (k, v));
            return self.inner.restore_sorted(&mut plain);
        }
        let restored: Vec<(&[u8], Option<Vec<u8>>)> = records
            .map(|(k, v, ts)| {
                let value = v.map(|v| {
                    let mut out = Vec::with_capacity(8 + v.len());
                    out.extend_from_slice(&ts.to_be_bytes());
                    out.extend_from_slice(v);
                    out
                });
                (k, value)
            })
            .collect();
        let mut batch = restored.iter().map(|(k, v)| (*k, v.as_deref()));
        self.inner.restore_sorted(&mut batch)
    }

    /// Phase 2 of a commit: writes the cache to the store and clears it; a persistent store
    /// records `position` (its changelog's end after this commit) with the writes.
    pub(crate) fn write_to_store(
        &mut self,
        position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        if !self.entries.is_empty() {
            let CachedStore {
                inner,
                entries,
                arena,
                timestamped,
                ..
            } = self;
            if *timestamped {
                // Each value's timestamp goes into the room in front of it.
                for e in entries.iter().filter(|e| e.len.is_some()) {
                    arena[e.slot_at..e.slot_at + TS_ROOM]
                        .copy_from_slice(&e.timestamp.to_be_bytes());
                }
            }
            let arena = &*arena;
            let stamped = *timestamped;
            let mut batch = entries.iter().map(|e| {
                let value = if stamped {
                    e.stamped(arena)
                } else {
                    e.value(arena)
                };
                (e.key(arena), value, e.hint)
            });
            inner.write_batch_hinted(&mut batch, position)?;
        }
        self.discard();
        Ok(())
    }

    /// Bytes the cache's buffers hold allocated (its arena, entries and index), whether in use
    /// or kept from the last commit for the next.
    pub(crate) fn kept_bytes(&self) -> usize {
        self.arena.capacity()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.index.capacity() * (std::mem::size_of::<usize>() + 1)
    }

    /// Frees the buffers of an empty cache (one whose task went idle); it grows them again on
    /// its next write.
    pub(crate) fn release_buffers(&mut self) {
        if self.entries.is_empty() {
            self.arena = Vec::new();
            self.entries = Vec::new();
            self.index = HashTable::new();
        }
    }

    /// Forgets uncommitted writes (the store is untouched by them).
    pub(crate) fn discard(&mut self) {
        self.memo.set(None);
        self.memo_hint.set(None);
        self.forwarded = false;
        // Capacity a burst left behind goes back; a steady load keeps its buffers.
        let entry_bytes = std::mem::size_of::<Entry>() + std::mem::size_of::<usize>();
        let used = self.arena.len() + self.entries.len() * entry_bytes;
        let kept = self.arena.capacity() + self.entries.capacity() * entry_bytes;
        let entries = self.entries.len();
        let arena_used = self.arena.len();
        self.entries.clear();
        self.index.clear();
        self.arena.clear();
        if kept > KEEP_BYTES && kept / 4 > used {
            let used = arena_used;
            self.arena.shrink_to(used);
            self.entries.shrink_to(entries);
            self.index.shrink_to(entries, |&i| self.entries[i].hash);
        }
        self.reordered = false;
        if let Some(ordered) = &mut self.ordered {
            ordered.clear();
        }
        self.bytes = 0;
    }
}
