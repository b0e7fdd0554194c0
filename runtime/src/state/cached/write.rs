//! Writes into the cache (one entry per key, the latest value wins, or every write with caching
//! disabled) and the dirty entries a commit forwards and writes to the changelog, in the order
//! of their last write. Nothing here writes to the store.

use std::hash::BuildHasher;

use crate::state::StoreError;
use crate::types::record::Headers;

use super::*;

impl CachedStore {
    /// Writes `key` (`None` deletes) into the cache.
    #[inline]
    pub(crate) fn put(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &Headers,
    ) {
        if !self.timing {
            return self.put_untimed(key, value, timestamp, headers);
        }
        let started = std::time::Instant::now();
        self.put_untimed(key, value, timestamp, headers);
        self.put_nanos.add(elapsed_nanos(started));
    }

    pub(super) fn put_untimed(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &Headers,
    ) {
        self.writes += 1;
        let seq = self.writes;
        let hint = self.memo_hint.take();
        let (hash, found, hint) = match self.memo.take() {
            Some((hash, found))
                if self
                    .memo_key
                    .try_borrow()
                    .is_ok_and(|k| k.as_slice() == key) =>
            {
                (hash, found, hint)
            }
            _ => {
                let hash = self.hasher.hash_one(key);
                (hash, self.find(key, hash), None)
            }
        };
        let CachedStore {
            entries,
            index,
            arena,
            bytes,
            ordered,
            reordered,
            every_write,
            ..
        } = self;
        match found.filter(|_| !*every_write) {
            Some(i) => {
                *reordered |= i + 1 != entries.len();
                let entry = &mut entries[i];
                entry.seq = seq;
                entry.timestamp = timestamp;
                if entry.headers != *headers {
                    entry.headers = headers.clone();
                }
                match value {
                    None => entry.len = None,
                    Some(v) if v.len() <= entry.cap as usize => {
                        let at = entry.slot_at + TS_ROOM;
                        arena[at..at + v.len()].copy_from_slice(v);
                        entry.len = Some(v.len() as u32);
                    }
                    Some(v) => {
                        let cap = v.len().max(2 * entry.cap as usize);
                        entry.slot_at = push_slot(arena, Some(v), cap);
                        entry.cap = cap as u32;
                        entry.len = Some(v.len() as u32);
                        *bytes += cap;
                    }
                }
            }
            None => {
                let key_at = arena.len();
                arena.extend_from_slice(key);
                let cap = value.map_or(0, <[u8]>::len);
                let slot_at = push_slot(arena, value, cap);
                *bytes += key.len() + cap + ENTRY_OVERHEAD;
                let at = entries.len();
                entries.push(Entry {
                    key_at,
                    key_len: key.len() as u32,
                    slot_at,
                    cap: cap as u32,
                    len: value.map(|v| v.len() as u32),
                    timestamp,
                    headers: headers.clone(),
                    seq,
                    hash,
                    hint,
                });
                match found {
                    // Caching disabled, a key written before: its latest entry is the new one.
                    Some(before) => {
                        if let Some(slot) = index.find_mut(hash, |&i| i == before) {
                            *slot = at;
                        }
                        if let Some(i) = ordered.as_mut().and_then(|o| o.get_mut(key)) {
                            *i = at;
                        }
                    }
                    None => {
                        index.insert_unique(hash, at, |&i| entries[i].hash);
                        if let Some(ordered) = ordered {
                            ordered.insert(key.to_vec(), at);
                        }
                    }
                }
            }
        }
    }

    /// Puts the entries written since the last commit in the order of their last write (Kafka's
    /// record cache flushes a key when it was last written, not first): what commits forward
    /// then follows the records, so a later update's timestamp never overtakes an earlier one's.
    pub(crate) fn order_by_last_write(&mut self) {
        if !self.reordered {
            return;
        }
        self.memo.set(None);
        let CachedStore {
            entries,
            index,
            arena,
            ordered,
            ..
        } = self;
        entries.sort_unstable_by_key(|e| e.seq);
        // One entry per key (a cache that keeps every write is never reordered).
        index.clear();
        for i in 0..entries.len() {
            index.insert_unique(entries[i].hash, i, |&j| entries[j].hash);
            if let Some(slot) = ordered
                .as_mut()
                .and_then(|o| o.get_mut(entries[i].key(arena)))
            {
                *slot = i;
            }
        }
        self.reordered = false;
    }

    /// Entries written since the last commit.
    pub(crate) fn dirty_len(&self) -> usize {
        self.entries.len()
    }

    /// The `i`-th entry written since the last commit: key, value (`None`: deleted), timestamp.
    pub(crate) fn dirty(&self, i: usize) -> (&[u8], Option<&[u8]>, i64) {
        let e = &self.entries[i];
        (e.key(&self.arena), e.value(&self.arena), e.timestamp)
    }

    /// Whether a key's writes between commits collapse into one (caching enabled).
    pub(crate) fn caches_writes(&self) -> bool {
        !self.every_write
    }

    /// The flush of this commit forwards the cached writes now.
    pub(crate) fn mark_forwarded(&mut self) {
        self.forwarded = !self.entries.is_empty();
    }

    /// The value of `key` as the store's table has forwarded it so far: the cache once this
    /// commit's flush forwarded it (or always, with caching disabled: its node forwards every
    /// write as it makes it), else the committed store. A table–table join reads the
    /// other side so, at commit, as if each side's updates were applied one side after the
    /// other (an update never meets one of the other side's not yet forwarded); a foreign-key
    /// join's sides read so too (runtime/src/dsl/join/foreign_key/node.rs).
    pub(crate) fn get_as_forwarded(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<i64>, StoreError> {
        // Caching disabled, the store's writes went downstream as they were made.
        if self.forwarded || self.every_write || self.entries.is_empty() {
            return self.get_with_timestamp(key, out);
        }
        if !self.inner.get_into(key, out)? {
            return Ok(None);
        }
        if self.timestamped {
            self.strip_timestamp(key, out).map(Some)
        } else {
            Ok(Some(NO_TIMESTAMP))
        }
    }

    /// The value the store held for the `i`-th entry's key before this commit (into `out`):
    /// what a cached entry's write replaces. `false` if it held none.
    pub(crate) fn dirty_old(&self, i: usize, out: &mut Vec<u8>) -> Result<bool, StoreError> {
        let key = self.entries[i].key(&self.arena);
        if !self.inner.get_into(key, out)? {
            return Ok(false);
        }
        if self.timestamped {
            self.strip_timestamp(key, out)?;
        }
        Ok(true)
    }

    /// The headers of the `i`-th entry's write.
    pub(crate) fn dirty_headers(&self, i: usize) -> &Headers {
        &self.entries[i].headers
    }
}
