//! A hash map of byte keys to byte values (or deletes) kept in one arena: the in-memory store's
//! entries and a persistent store's writes not yet written back.
//!
//! Each entry is an 8-byte header (the key's length and the value's, `DELETED` for a delete,
//! each 4 bytes little-endian), the key, then the value, appended to one `Vec<u8>`; a hashbrown
//! table holds the entries' offsets by the key's hash (foldhash, randomly seeded per process).
//! A key costs no allocation of its own: a boxed entry per key took about 115 bytes at a
//! million keys and a `malloc`/`free` each, an arena entry about 50 bytes with 4-byte offsets.
//! A value rewritten with its old length stays in place (an aggregate's usual update); one of
//! another length moves to the arena's end, and the arena is compacted once such garbage is
//! half of it. The arena grows by a quarter at a time, from a small start: what it allocates is
//! what a memory budget counts, and 20,000 tasks each hold one.

use std::hash::BuildHasher;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;

use super::StoreHint;

const HEADER: usize = 8;
const DELETED: u32 = u32::MAX;
/// Garbage below this is never compacted away.
const COMPACT_FLOOR: usize = 64 << 10;

/// A new epoch, unique in the process (so a hint from one map never passes for another's).
fn next_epoch() -> NonZeroU64 {
    static EPOCHS: AtomicU64 = AtomicU64::new(1);
    NonZeroU64::new(EPOCHS.fetch_add(1, Ordering::Relaxed)).unwrap_or(NonZeroU64::MIN)
}

/// An arena offset: `u32` where the owner bounds its arena (a write-back table, written back
/// before 4 GiB), `usize` where nothing does (an in-memory store).
pub(crate) trait Offset: Copy {
    /// The largest arena length the offset can address.
    const LIMIT: usize;
    fn new(at: usize) -> Self;
    fn at(self) -> usize;
}

impl Offset for u32 {
    const LIMIT: usize = u32::MAX as usize;
    fn new(at: usize) -> Self {
        at as u32
    }
    fn at(self) -> usize {
        self as usize
    }
}

impl Offset for usize {
    const LIMIT: usize = usize::MAX;
    fn new(at: usize) -> Self {
        at
    }
    fn at(self) -> usize {
        self
    }
}

/// The key and value (`None`: deleted) of the entry at `at`.
fn entry(arena: &[u8], at: usize) -> (&[u8], Option<&[u8]>) {
    let key_len = u32::from_le_bytes([arena[at], arena[at + 1], arena[at + 2], arena[at + 3]]);
    let value_len =
        u32::from_le_bytes([arena[at + 4], arena[at + 5], arena[at + 6], arena[at + 7]]);
    let key_end = at + HEADER + key_len as usize;
    let key = &arena[at + HEADER..key_end];
    let value = (value_len != DELETED).then(|| &arena[key_end..key_end + value_len as usize]);
    (key, value)
}

fn entry_len(key: &[u8], value: Option<&[u8]>) -> usize {
    HEADER + key.len() + value.map_or(0, <[u8]>::len)
}

/// Appends an entry to `arena`; returns where it starts.
fn append(arena: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) -> usize {
    let at = arena.len();
    let need = entry_len(key, value);
    if arena.capacity() - at < need {
        arena.reserve_exact(need.max(at / 4).max(512));
    }
    arena.extend_from_slice(&(key.len() as u32).to_le_bytes());
    arena.extend_from_slice(&value.map_or(DELETED, |v| v.len() as u32).to_le_bytes());
    arena.extend_from_slice(key);
    if let Some(v) = value {
        arena.extend_from_slice(v);
    }
    at
}

/// See the module documentation.
pub(crate) struct ArenaMap<O: Offset> {
    table: HashTable<O>,
    arena: Vec<u8>,
    /// Arena bytes of entries since moved or removed.
    garbage: usize,
    hasher: foldhash::fast::RandomState,
    /// Changes whenever an entry moves or goes (a value of another length, a removal, a
    /// compaction, a clear): a [`StoreHint`] of an older epoch may point at a dead entry.
    epoch: NonZeroU64,
}

impl<O: Offset> Default for ArenaMap<O> {
    fn default() -> Self {
        ArenaMap {
            table: HashTable::new(),
            arena: Vec::new(),
            garbage: 0,
            hasher: foldhash::fast::RandomState::default(),
            epoch: next_epoch(),
        }
    }
}

impl<O: Offset> ArenaMap<O> {
    /// The keys held (deletes included).
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The value of `key`: `Some(None)` if it is held as deleted, `None` if it is not held.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let hash = self.hasher.hash_one(key);
        let arena = &self.arena;
        self.table
            .find(hash, |&at| entry(arena, at.at()).0 == key)
            .map(|&at| entry(arena, at.at()).1)
    }

    /// As [`get`](Self::get), with where the entry is: a later [`set_hinted`](Self::set_hinted)
    /// of the key writes there without a lookup while no entry moved.
    pub(crate) fn locate(&self, key: &[u8]) -> Option<(Option<&[u8]>, StoreHint)> {
        let hash = self.hasher.hash_one(key);
        let arena = &self.arena;
        self.table
            .find(hash, |&at| entry(arena, at.at()).0 == key)
            .map(|&at| {
                let hint = StoreHint {
                    at: at.at(),
                    epoch: self.epoch,
                };
                (entry(arena, at.at()).1, hint)
            })
    }

    /// As [`set`](Self::set), in place at `hint` when it is of this epoch and the value keeps
    /// its length (an aggregate's update: one write to the entry, no probe of the table).
    pub(crate) fn set_hinted(&mut self, hint: StoreHint, key: &[u8], value: Option<&[u8]>) {
        if hint.epoch == self.epoch
            && let Some(v) = value
            && hint.at + HEADER + key.len() + v.len() <= self.arena.len()
        {
            let (found, old) = entry(&self.arena, hint.at);
            if found == key && old.is_some_and(|o| o.len() == v.len()) {
                let value_at = hint.at + HEADER + key.len();
                self.arena[value_at..value_at + v.len()].copy_from_slice(v);
                return;
            }
        }
        self.set(key, value);
    }

    /// Whether an entry for `key` and `value` fits: its offset addressable, a value shorter
    /// than 4 GiB, a key too.
    pub(crate) fn fits(&self, key: &[u8], value: Option<&[u8]>) -> bool {
        key.len() < DELETED as usize
            && value.is_none_or(|v| v.len() < DELETED as usize)
            && self
                .arena
                .len()
                .checked_add(entry_len(key, value))
                .is_some_and(|end| end <= O::LIMIT)
    }

    /// Sets `key` to `value` (`None`: held as deleted); the entry must [`fit`](Self::fits).
    pub(crate) fn set(&mut self, key: &[u8], value: Option<&[u8]>) {
        let hash = self.hasher.hash_one(key);
        let ArenaMap {
            table,
            arena,
            garbage,
            hasher,
            epoch,
        } = self;
        let value_len = value.map_or(DELETED, |v| v.len() as u32);
        match table.find_mut(hash, |&at| entry(arena, at.at()).0 == key) {
            Some(at) => {
                let (_, old) = entry(arena, at.at());
                let old_len = old.map_or(DELETED, |v| v.len() as u32);
                if old_len == value_len {
                    if let Some(v) = value {
                        let value_at = at.at() + HEADER + key.len();
                        arena[value_at..value_at + v.len()].copy_from_slice(v);
                    }
                } else {
                    *garbage += entry_len(key, old);
                    *at = O::new(append(arena, key, value));
                    *epoch = next_epoch();
                }
            }
            None => {
                let at = O::new(append(arena, key, value));
                table.insert_unique(hash, at, |&at| hasher.hash_one(entry(arena, at.at()).0));
            }
        }
        self.maybe_compact();
    }

    /// Forgets `key`; whether it was held.
    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        let hash = self.hasher.hash_one(key);
        let arena = &self.arena;
        match self
            .table
            .find_entry(hash, |&at| entry(arena, at.at()).0 == key)
        {
            Ok(found) => {
                let (at, _) = found.remove();
                let (key, value) = entry(arena, at.at());
                self.garbage += entry_len(key, value);
                self.epoch = next_epoch();
                self.maybe_compact();
                true
            }
            Err(_) => false,
        }
    }

    fn maybe_compact(&mut self) {
        if self.garbage > COMPACT_FLOOR && self.garbage > self.arena.len() / 2 {
            let live = self.arena.len() - self.garbage;
            let mut arena = Vec::with_capacity(live + live / 4);
            for at in self.table.iter_mut() {
                let (key, value) = entry(&self.arena, at.at());
                *at = O::new(append(&mut arena, key, value));
            }
            self.arena = arena;
            self.garbage = 0;
            self.epoch = next_epoch();
        }
    }

    /// Every entry, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.table.iter().map(|&at| entry(&self.arena, at.at()))
    }

    /// Every entry in key order.
    pub(crate) fn sorted(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }

    /// What the arena and the table have allocated.
    pub(crate) fn allocated(&self) -> usize {
        self.arena.capacity() + self.table.allocation_size()
    }

    /// Empties the map and gives its memory back.
    pub(crate) fn clear(&mut self) {
        self.table = HashTable::new();
        self.arena = Vec::new();
        self.garbage = 0;
        self.epoch = next_epoch();
    }

    /// Arena bytes of moved or removed entries (tests).
    #[cfg(test)]
    pub(crate) fn garbage(&self) -> usize {
        self.garbage
    }

    /// The arena's length (tests).
    #[cfg(test)]
    pub(crate) fn arena_len(&self) -> usize {
        self.arena.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Sets, deletes and removals of values of every length (rewritten in place, or moved
        /// and the old place left as garbage, which compaction reclaims), and sets through
        /// hints of earlier reads, most of them stale or of another key, against a `BTreeMap`:
        /// every key reads as the model has it after every step, and the map lists each key
        /// once, in order.
        #[test]
        fn the_arena_map_reads_like_a_btreemap(
            ops in proptest::collection::vec(
                (0u8..12, prop_oneof![
                    6 => (any::<u8>(), 0usize..3_000).prop_map(Some),
                    1 => Just(None),
                ], any::<bool>()),
                1..400,
            ),
        ) {
            let mut map: ArenaMap<u32> = ArenaMap::default();
            let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            // Hints as reads gave them, kept across later steps (most go stale), and used for
            // writes of any key.
            let mut hints: Vec<StoreHint> = Vec::new();
            for (step, (k, v, remove)) in ops.into_iter().enumerate() {
                let key = vec![b'k'; k as usize];
                if remove && v.is_none() {
                    prop_assert_eq!(map.remove(&key), model.remove(&key).is_some());
                } else {
                    let value = v.map(|(byte, len)| vec![byte; len]);
                    prop_assert!(map.fits(&key, value.as_deref()));
                    if let Some((found, hint)) = map.locate(&key) {
                        prop_assert_eq!(found, model[&key].as_deref());
                        hints.push(hint);
                    }
                    match hints.get(step % (hints.len() + 1)).copied().filter(|_| remove) {
                        Some(hint) => map.set_hinted(hint, &key, value.as_deref()),
                        None => map.set(&key, value.as_deref()),
                    }
                    model.insert(key, value);
                }
                for (key, value) in &model {
                    prop_assert_eq!(map.get(key), Some(value.as_deref()));
                }
                prop_assert_eq!(map.get(b"absent"), None);
                prop_assert_eq!(map.len(), model.len());
                prop_assert!(map.allocated() >= map.arena_len());
            }
            let listed: Vec<(Vec<u8>, Option<Vec<u8>>)> = map
                .sorted()
                .into_iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect();
            prop_assert_eq!(listed, model.into_iter().collect::<Vec<_>>());
        }
    }

    /// Compaction moves every live entry and leaves no garbage beyond its threshold.
    #[test]
    fn rewrites_that_change_a_values_length_are_compacted_away() {
        let mut map: ArenaMap<u32> = ArenaMap::default();
        for round in 0..200usize {
            for k in 0..8u8 {
                map.set(&[k], Some(&vec![k; 100 + round]));
            }
        }
        // 200 rounds appended about 330 KiB; garbage stays under its floor (or half the
        // arena), and the live entries are exactly the last round's.
        assert!(map.arena_len() < 2 * COMPACT_FLOOR, "{}", map.arena_len());
        assert_eq!(map.arena_len() - map.garbage(), 8 * (HEADER + 1 + 299));
        for k in 0..8u8 {
            assert_eq!(map.get(&[k]), Some(Some(&vec![k; 299][..])));
        }
    }
}
