//! The write cache in front of every store (Kafka Streams' record cache,
//! `statestore_cache_max_bytes`).
//!
//! Between commits, writes go to the cache only: one entry per key, the latest value wins. At a
//! commit the cache's entries are forwarded downstream and written to the changelog (phase 1);
//! once the commit is durable they are written to the store in one batch and the cache is
//! cleared (phase 2). A full cache asks for an early commit rather than evicting to the store,
//! so the store never holds uncommitted writes.//!
//! This file holds [`CachedStore`], its entries and arena, and its short surface; the rest is
//! one file per concern: `read` (reads through the cache, range and window scans), `write`
//! (puts, and the dirty entries a commit forwards and logs), `commit` (the cache written to the
//! store, restoration, buffers kept or freed).

mod commit;
mod read;
#[cfg(test)]
mod tests;
mod write;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use hashbrown::HashTable;

use super::{BytesStore, StoreError, StoreHint};
use crate::types::record::Headers;

/// Room kept in front of every cached value for its 8-byte timestamp, so that a timestamped
/// store's values go from the arena to the store without another copy.
const TS_ROOM: usize = 8;

/// A cached write. Its key and value are in the cache's arena.
struct Entry {
    /// The key: where it starts in the arena, and its length.
    key_at: usize,
    key_len: u32,
    /// The value's slot: `TS_ROOM` bytes, then room for `cap` bytes of value.
    slot_at: usize,
    cap: u32,
    /// The value's length (`None`: deleted).
    len: Option<u32>,
    timestamp: i64,
    /// The headers of the record that wrote it (what a cached aggregate forwards with).
    headers: Headers,
    /// When it was last written (the store's write counter).
    seq: u64,
    /// The key's hash (the index never hashes a key twice).
    hash: u64,
    /// Where the store held the key when a read before its first write here found it there:
    /// the commit writes it back without a second lookup.
    hint: Option<StoreHint>,
}

impl Entry {
    fn key<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        &arena[self.key_at..self.key_at + self.key_len as usize]
    }

    fn value<'a>(&self, arena: &'a [u8]) -> Option<&'a [u8]> {
        let at = self.slot_at + TS_ROOM;
        self.len.map(|n| &arena[at..at + n as usize])
    }

    /// The value behind the timestamp [`CachedStore::write_to_store`] put in the slot's room.
    fn stamped<'a>(&self, arena: &'a [u8]) -> Option<&'a [u8]> {
        self.len
            .map(|n| &arena[self.slot_at..self.slot_at + TS_ROOM + n as usize])
    }
}

/// Appends a value slot for `value` with room for `cap` bytes; returns where it starts.
fn push_slot(arena: &mut Vec<u8>, value: Option<&[u8]>, cap: usize) -> usize {
    let at = arena.len();
    arena.extend_from_slice(&[0; TS_ROOM]);
    if let Some(v) = value {
        arena.extend_from_slice(v);
    }
    arena.resize(at + TS_ROOM + cap, 0);
    at
}

/// A store behind its cache.
///
/// Keys and values are appended to one arena and the index holds entry numbers, so a new key
/// costs no allocation once the arena, the entries and the index have grown to a commit's
/// size: they are cleared at commit with their capacity kept (and given back when a commit
/// used less than a quarter of it).
pub(crate) struct CachedStore {
    pub(crate) inner: Box<dyn BytesStore>,
    entries: Vec<Entry>,
    /// Every key's latest entry, by the key's hash. foldhash (hashbrown's own hasher, randomly
    /// seeded per process) rather than SipHash: it was a twentieth of a windowed count's CPU
    /// time.
    index: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    /// The entries' keys and value slots, in the order they were written (a rewritten value
    /// stays in its slot when it fits, else it moves to a new slot twice as large).
    arena: Vec<u8>,
    /// Bytes charged to the cache: keys, value slots and `ENTRY_OVERHEAD` per entry.
    bytes: usize,
    /// Caching disabled (Kafka's `withCachingDisabled`): every write is kept, so each reaches
    /// the changelog, not only a key's latest.
    every_write: bool,
    /// The store keeps each value behind its 8-byte big-endian timestamp (Kafka's timestamped
    /// stores, what aggregations need for their results' timestamps); the cache, the changelog
    /// and everything above see plain values.
    timestamped: bool,
    /// The cached keys in order, each with its entry (as `index` has it), for stores read by
    /// range between commits (window and session stores that sliding and session aggregations
    /// and processors query).
    ordered: Option<BTreeMap<Vec<u8>, usize>>,
    /// The bounds a range read of one key narrows to, kept between reads.
    bounds: Cell<(Vec<u8>, Vec<u8>)>,
    /// The last sequence number a window store keeping duplicates gave a put. It starts at a
    /// random number, so that puts after a restart do not replace entries of the same key and
    /// window written before it (which a count from 0 would, Kafka Streams' own weakness).
    seq: u32,
    /// Counts writes, to order entries by their last write.
    writes: u64,
    /// An entry other than the last was rewritten: entry order is no longer write order.
    reordered: bool,
    /// The last read's key hash and entry (`None`: not cached), for the write of the same key
    /// that follows it in an aggregation: one probe of the index instead of two. Any write
    /// takes it.
    memo: Cell<Option<(u64, Option<usize>)>>,
    /// Reads, and reads the cache answered, since the last [`take_counts`](Self::take_counts)
    /// (plain counters: the store is its thread's own).
    gets: Cell<u64>,
    hits: Cell<u64>,
    /// `writes` at the last `take_counts`.
    counted_writes: u64,
    /// Times every read and write (the `DEBUG` recording level); off, a read or write pays one
    /// branch.
    timing: bool,
    /// Since the last `take_timings`, when timing: reads timed, their total and largest
    /// nanoseconds.
    get_nanos: Cell<OpTimes>,
    /// Writes timed, their total and largest nanoseconds.
    put_nanos: OpTimes,
    /// The last read's key.
    memo_key: RefCell<Vec<u8>>,
    /// Where the store held the last read's key, when the cache did not and the store could say.
    memo_hint: Cell<Option<StoreHint>>,
    /// This commit's flush forwarded the cached writes downstream ([`mark_forwarded`]
    /// (Self::mark_forwarded)); until then, what a table join sees of this store is its
    /// committed state ([`get_as_forwarded`](Self::get_as_forwarded)).
    forwarded: bool,
}

/// What a store read and wrote between two commits ([`CachedStore::take_counts`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreCounts {
    pub(crate) puts: u64,
    pub(crate) gets: u64,
    pub(crate) hits: u64,
}

/// Timed operations of one kind: how many, their total and largest nanoseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpTimes {
    pub(crate) count: u64,
    pub(crate) nanos: u64,
    pub(crate) max_nanos: u64,
}

impl OpTimes {
    fn add(&mut self, nanos: u64) {
        self.count += 1;
        self.nanos += nanos;
        self.max_nanos = self.max_nanos.max(nanos);
    }
}

fn elapsed_nanos(started: std::time::Instant) -> u64 {
    started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
}

/// The timestamp of a value read from a store that keeps none.
pub(crate) const NO_TIMESTAMP: i64 = i64::MIN;

/// Bytes a cache entry is charged beyond its key and value.
const ENTRY_OVERHEAD: usize = 64;

/// Capacity below which the cache keeps its buffers whatever a commit used. Small: a thread
/// may run thousands of tasks, and what each keeps idle adds up (20,000 tasks keeping 6 KiB
/// each were 120 MiB).
const KEEP_BYTES: usize = 4 << 10;

impl CachedStore {
    pub(crate) fn new(inner: Box<dyn BytesStore>) -> Self {
        CachedStore {
            inner,
            entries: Vec::new(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            arena: Vec::new(),
            bytes: 0,
            every_write: false,
            timestamped: false,
            ordered: None,
            bounds: Cell::new((Vec::new(), Vec::new())),
            seq: {
                use std::hash::{BuildHasher, Hasher};
                std::hash::RandomState::new().build_hasher().finish() as u32
            },
            writes: 0,
            reordered: false,
            memo: Cell::new(None),
            gets: Cell::new(0),
            hits: Cell::new(0),
            counted_writes: 0,
            timing: false,
            get_nanos: Cell::new(OpTimes::default()),
            put_nanos: OpTimes::default(),
            memo_key: RefCell::new(Vec::new()),
            memo_hint: Cell::new(None),
            forwarded: false,
        }
    }

    /// Decodes an entry key of this window or session store.
    pub(crate) fn decode_entry(&self, bytes: &[u8]) -> Result<super::DecodedEntry, StoreError> {
        match self.inner.as_segmented() {
            Some(segmented) => segmented.decode(bytes),
            None => Err(self.corrupt(
                "an entry key read from a store that is not a window or session store".into(),
            )),
        }
    }

    /// As [`decode_entry`](Self::decode_entry), into `out`, reusing its key's buffer.
    pub(crate) fn decode_entry_into(
        &self,
        bytes: &[u8],
        out: &mut super::DecodedEntry,
    ) -> Result<(), StoreError> {
        match self.inner.as_segmented() {
            Some(segmented) => segmented.decode_into(bytes, out),
            None => Err(self.corrupt(
                "an entry key read from a store that is not a window or session store".into(),
            )),
        }
    }

    /// The next sequence number for a put of a window store keeping duplicates.
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sets how writes are kept: `timestamped` values, `caching` (one entry per key, else every
    /// write), an `ordered` index of cached keys for range reads.
    pub(crate) fn configured(
        inner: Box<dyn BytesStore>,
        timestamped: bool,
        caching: bool,
        ordered: bool,
    ) -> Self {
        CachedStore {
            timestamped,
            every_write: !caching,
            ordered: ordered.then(BTreeMap::new),
            ..CachedStore::new(inner)
        }
    }

    /// A store that keeps each value's timestamp (a DSL aggregation's).
    #[cfg(test)]
    pub(crate) fn timestamped(inner: Box<dyn BytesStore>) -> Self {
        CachedStore {
            timestamped: true,
            ..CachedStore::new(inner)
        }
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt {
            store: self.inner.name().to_owned(),
            reason,
        }
    }

    /// Splits a timestamped store's value into its timestamp and the value (left in `value`).
    fn strip_timestamp(&self, key: &[u8], value: &mut Vec<u8>) -> Result<i64, StoreError> {
        let Some(ts) = value.get(..8) else {
            return Err(self.corrupt(format!(
                "the value of a key of {} bytes has {} bytes, fewer than its 8-byte timestamp",
                key.len(),
                value.len()
            )));
        };
        let mut b = [0u8; 8];
        b.copy_from_slice(ts);
        value.drain(..8);
        Ok(i64::from_be_bytes(b))
    }

    /// The latest entry of `key` (its hash `hash`), if cached.
    fn find(&self, key: &[u8], hash: u64) -> Option<usize> {
        let (entries, arena) = (&self.entries, &self.arena);
        self.index
            .find(hash, |&i| entries[i].key(arena) == key)
            .copied()
    }

    /// Times every read and write from now on (the `DEBUG` recording level).
    pub(crate) fn set_timing(&mut self, timing: bool) {
        self.timing = timing;
    }

    /// Whether reads and writes are timed.
    pub(crate) fn timing(&self) -> bool {
        self.timing
    }

    /// What was read and written since the last call, for metrics.
    pub(crate) fn take_counts(&mut self) -> StoreCounts {
        let puts = self.writes - self.counted_writes;
        self.counted_writes = self.writes;
        StoreCounts {
            puts,
            gets: self.gets.replace(0),
            hits: self.hits.replace(0),
        }
    }

    /// The (puts, gets) timed since the last call (only when timing), for metrics published as
    /// the operations happen.
    pub(crate) fn take_timings(&mut self) -> (OpTimes, OpTimes) {
        (
            std::mem::take(&mut self.put_nanos),
            self.get_nanos.replace(OpTimes::default()),
        )
    }

    /// Bytes held by the cache.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.bytes
    }

    /// About how many entries the store holds, counting cached new keys.
    pub(crate) fn approximate_len(&self) -> usize {
        self.inner.approximate_len() + self.index.len()
    }
}
