//! The write cache in front of every store (Kafka Streams' record cache,
//! `statestore_cache_max_bytes`).
//!
//! Between commits, writes go to the cache only: one entry per key, the latest value wins. At a
//! commit the cache's entries are forwarded downstream and written to the changelog (phase 1);
//! once the commit is durable they are written to the store in one batch and the cache is
//! cleared (phase 2). A full cache asks for an early commit rather than evicting to the store,
//! so the store never holds uncommitted writes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::{BytesStore, StoreError, StoreHint, StorePosition};
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
    /// With caching disabled, each entry's write of the same key before it in this commit
    /// (`u32::MAX`: none), as [`link_rewrites`](Self::link_rewrites) last found them.
    prev: Vec<u32>,
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
            prev: Vec::new(),
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

    /// The value of `key` as processing sees it: the cache, else the store.
    pub(crate) fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        Ok(self.get_with_timestamp(key, out)?.is_some())
    }

    /// Times every read and write from now on (the `DEBUG` recording level).
    pub(crate) fn set_timing(&mut self, timing: bool) {
        self.timing = timing;
    }

    /// Whether reads and writes are timed.
    pub(crate) fn timing(&self) -> bool {
        self.timing
    }

    /// The value of `key` (into `out`) and its timestamp: the cached write's, the store's for a
    /// timestamped store, else [`NO_TIMESTAMP`]. `None` if there is no value.
    #[inline]
    pub(crate) fn get_with_timestamp(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<i64>, StoreError> {
        if !self.timing {
            return self.get_untimed(key, out);
        }
        let started = std::time::Instant::now();
        let got = self.get_untimed(key, out);
        let mut times = self.get_nanos.get();
        times.add(elapsed_nanos(started));
        self.get_nanos.set(times);
        got
    }

    fn get_untimed(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<i64>, StoreError> {
        let hash = self.hasher.hash_one(key);
        let found = self.find(key, hash);
        self.memo.set(Some((hash, found)));
        self.gets.set(self.gets.get() + 1);
        if found.is_some() {
            self.hits.set(self.hits.get() + 1);
        }
        if let Ok(mut memo_key) = self.memo_key.try_borrow_mut() {
            memo_key.clear();
            memo_key.extend_from_slice(key);
        }
        match found {
            Some(i) => {
                self.memo_hint.set(None);
                out.clear();
                let entry = &self.entries[i];
                match entry.value(&self.arena) {
                    Some(v) => {
                        out.extend_from_slice(v);
                        Ok(Some(entry.timestamp))
                    }
                    None => Ok(None),
                }
            }
            None => {
                let (found, hint) = self.inner.get_hinted(key, out)?;
                self.memo_hint.set(hint);
                if !found {
                    return Ok(None);
                }
                if self.timestamped {
                    self.strip_timestamp(key, out).map(Some)
                } else {
                    Ok(Some(NO_TIMESTAMP))
                }
            }
        }
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

    fn put_untimed(&mut self, key: &[u8], value: Option<&[u8]>, timestamp: i64, headers: &Headers) {
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

    /// Bytes held by the cache.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.bytes
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
    /// commit's flush forwarded it, else the committed store. A table–table join reads the
    /// other side so, at commit, as if each side's updates were applied one side after the
    /// other (an update never meets one of the other side's not yet forwarded).
    pub(crate) fn get_as_forwarded(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<i64>, StoreError> {
        if self.forwarded || self.entries.is_empty() {
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

    /// Before [`dirty_old`](Self::dirty_old) is asked: with caching disabled (several entries
    /// of one key), links each entry to the key's entry before it. A no-op with caching.
    pub(crate) fn link_rewrites(&mut self) {
        self.prev.clear();
        if !self.every_write {
            return;
        }
        let mut last: HashTable<usize> = HashTable::new();
        let (entries, arena) = (&self.entries, &self.arena);
        for (i, e) in entries.iter().enumerate() {
            let key = e.key(arena);
            let slot = last.find_mut(e.hash, |&j| entries[j].key(arena) == key);
            let before = match slot {
                Some(j) => std::mem::replace(j, i) as u32,
                None => {
                    last.insert_unique(e.hash, i, |&j| entries[j].hash);
                    u32::MAX
                }
            };
            self.prev.push(before);
        }
    }

    /// The value the `i`-th entry's key had before that write (into `out`): the key's entry
    /// before it in this commit (caching disabled, after [`link_rewrites`](Self::link_rewrites)),
    /// else the store's. `false` if it had none.
    pub(crate) fn dirty_old(&self, i: usize, out: &mut Vec<u8>) -> Result<bool, StoreError> {
        if self.every_write
            && let Some(&before) = self.prev.get(i)
            && before != u32::MAX
        {
            out.clear();
            return Ok(match self.entries[before as usize].value(&self.arena) {
                Some(v) => {
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            });
        }
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

    /// The entries with `from <= key <= to` (either bound absent: unbounded) as processing
    /// sees them: the store overlaid with the cache, in key order.
    #[allow(clippy::type_complexity)]
    pub(crate) fn scan(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        let within = |k: &[u8]| from.is_none_or(|f| k >= f) && to.is_none_or(|t| k <= t);
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let skip = if self.timestamped { 8 } else { 0 };
        let mut short = None;
        let mut visit = |k: &[u8], v: &[u8]| {
            if within(k) {
                match v.get(skip..) {
                    Some(v) => {
                        merged.insert(k.to_vec(), Some(v.to_vec()));
                    }
                    None => short = Some(v.len()),
                }
            }
        };
        match to {
            Some(t) => {
                // The smallest key after `to` is `to` followed by a zero byte.
                let mut end = t.to_vec();
                end.push(0);
                self.inner
                    .range(from.unwrap_or_default(), &end, &mut visit)?
            }
            None => self.inner.for_each(&mut visit)?,
        }
        if let Some(len) = short {
            return Err(self.corrupt(format!(
                "a value has {len} bytes, fewer than its 8-byte timestamp"
            )));
        }
        // In write order: with caching disabled a key's later entries replace its earlier.
        for e in &self.entries {
            let key = e.key(&self.arena);
            if within(key) {
                merged.insert(key.to_vec(), e.value(&self.arena).map(<[u8]>::to_vec));
            }
        }
        Ok(merged
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// The entries whose key starts with `prefix` as processing sees them, in key order. The
    /// cache's writes are found through its ordered index when it keeps one, so a scan costs
    /// the keys it returns, not the cache's size.
    #[allow(clippy::type_complexity)]
    pub(crate) fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let skip = if self.timestamped { 8 } else { 0 };
        let mut short = None;
        let mut visit = |k: &[u8], v: &[u8]| {
            if k.starts_with(prefix) {
                match v.get(skip..) {
                    Some(v) => {
                        merged.insert(k.to_vec(), Some(v.to_vec()));
                    }
                    None => short = Some(v.len()),
                }
            }
        };
        // The smallest key above every key with the prefix: the prefix with its last byte
        // below 0xff incremented and what follows dropped (none if it is all 0xff).
        let end = prefix.iter().rposition(|&b| b != 0xff).map(|i| {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        });
        match &end {
            Some(end) => self.inner.range(prefix, end, &mut visit)?,
            None => self.inner.for_each(&mut visit)?,
        }
        if let Some(len) = short {
            return Err(self.corrupt(format!(
                "a value has {len} bytes, fewer than its 8-byte timestamp"
            )));
        }
        match &self.ordered {
            Some(ordered) => {
                for (key, &i) in ordered.range(prefix.to_vec()..) {
                    if !key.starts_with(prefix) {
                        break;
                    }
                    let value = self.entries[i].value(&self.arena).map(<[u8]>::to_vec);
                    merged.insert(key.clone(), value);
                }
            }
            None => {
                // In write order: with caching disabled a key's later entries replace its
                // earlier.
                for e in &self.entries {
                    let key = e.key(&self.arena);
                    if key.starts_with(prefix) {
                        merged.insert(key.to_vec(), e.value(&self.arena).map(<[u8]>::to_vec));
                    }
                }
            }
        }
        Ok(merged
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// The entries of a window or session store with `from <= key < to` (an empty `to`: no
    /// upper bound) and entry time (a
    /// window's start, a session's end) in `[time_from, time_to]`, as processing sees them (the
    /// store overlaid with the cache), in key order: `(entry key, value, timestamp)`. The
    /// timestamp is the value's for a timestamped store, else [`NO_TIMESTAMP`].
    #[allow(clippy::type_complexity)]
    pub(crate) fn scan_window(
        &self,
        from: &[u8],
        to: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>, i64)>, StoreError> {
        let Some(segmented) = self.inner.as_segmented() else {
            return Err(self.corrupt(
                "a time-range read of a store that is not a window or session store".into(),
            ));
        };
        if time_from > time_to {
            return Ok(Vec::new());
        }
        let mut merged: BTreeMap<Vec<u8>, Option<(Vec<u8>, i64)>> = BTreeMap::new();
        let mut bad = None;
        let timestamped = self.timestamped;
        segmented.scan_time(from, to, time_from, time_to, &mut |k, v| {
            if timestamped {
                match v.get(..8) {
                    Some(ts) => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(ts);
                        merged.insert(k.to_vec(), Some((v[8..].to_vec(), i64::from_be_bytes(b))));
                    }
                    None => bad = Some(v.len()),
                }
            } else {
                merged.insert(k.to_vec(), Some((v.to_vec(), NO_TIMESTAMP)));
            }
        })?;
        if let Some(len) = bad {
            return Err(self.corrupt(format!(
                "a value has {len} bytes, fewer than its 8-byte timestamp"
            )));
        }
        let mut overlay = |key: &[u8], i: usize| -> Result<(), StoreError> {
            if super::window::is_meta(key) {
                return Ok(());
            }
            let time = segmented.entry_time(key)?;
            if time >= time_from && time <= time_to {
                let e = &self.entries[i];
                merged.insert(
                    key.to_vec(),
                    e.value(&self.arena).map(|v| (v.to_vec(), e.timestamp)),
                );
            }
            Ok(())
        };
        // An empty `to` is no upper bound.
        let below = |k: &[u8]| to.is_empty() || k < to;
        match &self.ordered {
            Some(ordered) if to.is_empty() || from < to => {
                // One key's bounds narrow to the entries of that key in the time range (the
                // cache's keys are the store's entry keys).
                let mut bounds = self.bounds.take();
                let narrowed = !to.is_empty()
                    && super::window::narrow_to_times(
                        from,
                        to,
                        time_from,
                        time_to,
                        &mut bounds.0,
                        &mut bounds.1,
                    );
                let (lo, hi) = if narrowed {
                    (bounds.0.as_slice(), bounds.1.as_slice())
                } else {
                    (from, to)
                };
                let upper = if hi.is_empty() {
                    std::ops::Bound::Unbounded
                } else {
                    std::ops::Bound::Excluded(hi)
                };
                for (key, &i) in ordered.range::<[u8], _>((std::ops::Bound::Included(lo), upper)) {
                    overlay(key, i)?;
                }
                self.bounds.set(bounds);
            }
            Some(_) => {}
            None => {
                for (i, e) in self.entries.iter().enumerate() {
                    let key = e.key(&self.arena);
                    if key >= from && below(key) {
                        overlay(key, i)?;
                    }
                }
            }
        }
        Ok(merged
            .into_iter()
            .filter_map(|(k, v)| v.map(|(v, ts)| (k, v, ts)))
            .collect())
    }

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

    /// About how many entries the store holds, counting cached new keys.
    pub(crate) fn approximate_len(&self) -> usize {
        self.inner.approximate_len() + self.index.len()
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
            self.prev = Vec::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::InMemoryKeyValueStore;

    #[test]
    fn reads_see_the_cache_and_the_store_sees_only_committed_writes() {
        let mut store = CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")));
        let mut out = Vec::new();
        let h = Headers::new();
        store.put(b"a", Some(b"1"), 1, &h);
        store.put(b"a", Some(b"2"), 2, &h);
        store.put(b"b", Some(b"3"), 3, &h);
        assert!(store.get_into(b"a", &mut out).unwrap_or(false));
        assert_eq!(out, b"2");
        assert!(
            !store.inner.get_into(b"a", &mut out).unwrap_or(true),
            "not in the store before commit"
        );
        assert_eq!(store.dirty_len(), 2, "one entry per key");
        assert_eq!(store.dirty(0), (&b"a"[..], Some(&b"2"[..]), 2));
        store.write_to_store(None).ok();
        assert_eq!(store.dirty_len(), 0);
        assert!(store.inner.get_into(b"a", &mut out).unwrap_or(false));
        assert_eq!(out, b"2");
        store.put(b"a", None, 4, &h);
        assert!(
            !store.get_into(b"a", &mut out).unwrap_or(true),
            "a cached delete hides the store's value"
        );
        store.discard();
        assert!(
            store.get_into(b"a", &mut out).unwrap_or(false),
            "discarded writes never reach the store"
        );
    }

    /// Kafka's cache flushes keys in the order of their last write.
    #[test]
    fn dirty_entries_come_in_the_order_of_their_last_write() {
        let mut store = CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")));
        let h = Headers::new();
        for (k, ts) in [(&b"a"[..], 1), (b"b", 2), (b"c", 3), (b"a", 4), (b"c", 5)] {
            store.put(k, Some(b"v"), ts, &h);
        }
        store.order_by_last_write();
        let order: Vec<(Vec<u8>, i64)> = (0..store.dirty_len())
            .map(|i| (store.dirty(i).0.to_vec(), store.dirty(i).2))
            .collect();
        assert_eq!(
            order,
            [(b"b".to_vec(), 2), (b"a".to_vec(), 4), (b"c".to_vec(), 5)]
        );
        let mut out = Vec::new();
        assert_eq!(
            store.get_with_timestamp(b"a", &mut out).ok(),
            Some(Some(4)),
            "index follows"
        );
        store.put(b"b", Some(b"w"), 6, &h);
        assert_eq!(store.dirty_len(), 3, "still one entry per key");
    }

    /// Reordering keeps the ordered index of a window store pointing at the right entries.
    #[test]
    fn reordering_keeps_a_window_stores_range_reads_right() {
        use crate::state::{SegmentedKind, SegmentedStore, window_entry_key};
        let inner = SegmentedStore::in_memory("w", SegmentedKind::Window, 1_000, 100);
        let mut store = CachedStore::configured(Box::new(inner), false, true, true);
        let h = Headers::new();
        let key = |k: &[u8], start| {
            let mut out = Vec::new();
            window_entry_key(k, start, 0, &mut out);
            out
        };
        for (k, start, v) in [
            (&b"a"[..], 0, &b"1"[..]),
            (b"b", 0, b"2"),
            (b"a", 10, b"3"),
            (b"a", 0, b"4"),
        ] {
            store.put(&key(k, start), Some(v), start, &h);
        }
        store.order_by_last_write();
        let got: Vec<Vec<u8>> = store
            .scan_window(&[], &[], 0, 100)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, v, _)| v)
            .collect();
        assert_eq!(
            got,
            [b"4".to_vec(), b"3".to_vec(), b"2".to_vec()],
            "by key, then start"
        );
    }

    #[test]
    fn a_timestamped_store_keeps_each_values_timestamp_and_refuses_a_value_too_short_for_one() {
        let mut store = CachedStore::timestamped(Box::new(InMemoryKeyValueStore::new("t")));
        let h = Headers::new();
        let mut out = Vec::new();
        store.put(b"a", Some(b"1"), 42, &h);
        assert_eq!(
            store.get_with_timestamp(b"a", &mut out).ok(),
            Some(Some(42))
        );
        store.write_to_store(None).ok();
        assert_eq!(
            store.get_with_timestamp(b"a", &mut out).ok(),
            Some(Some(42)),
            "read back from the store"
        );
        assert_eq!(out, b"1", "the value without its timestamp");
        let mut raw = Vec::new();
        assert!(store.inner.get_into(b"a", &mut raw).unwrap_or(false));
        assert_eq!(
            raw,
            [&42i64.to_be_bytes()[..], b"1"].concat(),
            "8-byte BE prefix"
        );
        assert_eq!(
            store.scan(None, None).ok(),
            Some(vec![(b"a".to_vec(), b"1".to_vec())])
        );
        store.inner.put(b"short", b"1234").ok();
        assert!(matches!(
            store.get_with_timestamp(b"short", &mut out),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(store.scan(None, None).is_err());
    }

    mod model {
        use std::collections::BTreeMap;

        use proptest::prelude::*;

        use super::super::*;
        use crate::state::InMemoryKeyValueStore;

        #[derive(Clone, Debug)]
        enum Op {
            /// Key number, value (`None`: delete), timestamp.
            Put(u8, Option<Vec<u8>>, i64),
            Get(u8),
            OrderByLastWrite,
            Commit,
            Discard,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                6 => (0u8..12, proptest::option::weighted(0.85, proptest::collection::vec(any::<u8>(), 0..40)), 0i64..1_000)
                    .prop_map(|(k, v, ts)| Op::Put(k, v, ts)),
                3 => (0u8..12).prop_map(Op::Get),
                1 => Just(Op::OrderByLastWrite),
                1 => Just(Op::Commit),
                1 => Just(Op::Discard),
            ]
        }

        /// Keys of different lengths, so that keys and values of all sizes share the arena.
        fn key(k: u8) -> Vec<u8> {
            vec![k; 1 + (k as usize % 5) * 7]
        }

        type Write = (Vec<u8>, Option<Vec<u8>>, i64);

        /// What the cache must hold: for caching, each key's latest write in the order of the
        /// last writes; otherwise every write in order.
        fn expected_dirty(writes: &[Write], caching: bool) -> Vec<Write> {
            if !caching {
                return writes.to_vec();
            }
            let mut out: Vec<Write> = Vec::new();
            for w in writes {
                out.retain(|o| o.0 != w.0);
                out.push(w.clone());
            }
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The arena cache against a model: a committed `BTreeMap` and the writes since.
            #[test]
            fn the_cache_reads_and_commits_like_its_model(
                timestamped in any::<bool>(),
                caching in any::<bool>(),
                ops in proptest::collection::vec(op(), 1..200),
            ) {
                let inner = Box::new(InMemoryKeyValueStore::new("m"));
                let mut store = CachedStore::configured(inner, timestamped, caching, false);
                let h = Headers::new();
                let mut committed: BTreeMap<Vec<u8>, (Vec<u8>, i64)> = BTreeMap::new();
                let mut writes: Vec<Write> = Vec::new();
                let mut out = Vec::new();
                for op in ops {
                    match op {
                        Op::Put(k, v, ts) => {
                            store.put(&key(k), v.as_deref(), ts, &h);
                            writes.push((key(k), v, ts));
                        }
                        Op::Get(k) => {
                            let k = key(k);
                            let want = match writes.iter().rev().find(|w| w.0 == k) {
                                Some((_, v, ts)) => v.clone().map(|v| (v, *ts)),
                                None => committed.get(&k).map(|(v, ts)| {
                                    (v.clone(), if timestamped { *ts } else { NO_TIMESTAMP })
                                }),
                            };
                            let got = store.get_with_timestamp(&k, &mut out);
                            prop_assert!(got.is_ok());
                            let got = got.ok().flatten().map(|ts| (out.clone(), ts));
                            prop_assert_eq!(got, want);
                        }
                        Op::OrderByLastWrite => {
                            store.order_by_last_write();
                            let want = expected_dirty(&writes, caching);
                            let got: Vec<Write> = (0..store.dirty_len())
                                .map(|i| {
                                    let (k, v, ts) = store.dirty(i);
                                    (k.to_vec(), v.map(<[u8]>::to_vec), ts)
                                })
                                .collect();
                            prop_assert_eq!(got, want);
                        }
                        Op::Commit => {
                            prop_assert_eq!(store.dirty_len(), expected_dirty(&writes, caching).len());
                            let min: usize = expected_dirty(&writes, caching)
                                .iter()
                                .map(|w| w.0.len() + w.1.as_ref().map_or(0, Vec::len))
                                .sum();
                            prop_assert!(store.cache_bytes() >= min);
                            for (k, v, ts) in writes.drain(..) {
                                match v {
                                    Some(v) => { committed.insert(k, (v, ts)); }
                                    None => { committed.remove(&k); }
                                }
                            }
                            prop_assert!(store.write_to_store(None).is_ok());
                            prop_assert_eq!(store.dirty_len(), 0);
                            prop_assert_eq!(store.cache_bytes(), 0);
                        }
                        Op::Discard => {
                            writes.clear();
                            store.discard();
                        }
                    }
                    let mut merged: BTreeMap<Vec<u8>, Vec<u8>> =
                        committed.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect();
                    for (k, v, _) in &writes {
                        match v {
                            Some(v) => { merged.insert(k.clone(), v.clone()); }
                            None => { merged.remove(k); }
                        }
                    }
                    let scanned = store.scan(None, None);
                    prop_assert!(scanned.is_ok());
                    prop_assert_eq!(scanned.unwrap_or_default(), merged.into_iter().collect::<Vec<_>>());
                }
                // What reached the store, read past the cache.
                store.discard();
                for (k, (v, ts)) in &committed {
                    prop_assert_eq!(
                        store.get_with_timestamp(k, &mut out).ok().flatten(),
                        Some(if timestamped { *ts } else { NO_TIMESTAMP })
                    );
                    prop_assert_eq!(&out, v);
                }
            }
        }
    }
}
