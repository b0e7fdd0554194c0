//! The segmented store under windowed aggregations: window and session stores whose entries are
//! time-bounded and whose old data is dropped a whole segment at a time, as Kafka Streams'
//! segmented window and session stores do.
//!
//! [`SegmentedStore`] is a [`BytesStore`] over *entry keys*: a record key and its window's or
//! session's times, encoded so that byte order is key order, then time order. So the write cache,
//! the changelog and restoration above it treat it as any other store. Each entry belongs to the
//! segment `time.div_euclid(segment_interval_ms)` of its *entry time* (a window's start, a
//! session's end). The store keeps the largest entry time written, its *observed time*; a segment
//! whose id is below `segment_id(observed - retention_ms + 1)` is dropped whole (its map, or its
//! fjall keyspace), never entry by entry, and later writes into it are ignored and counted.
//!
//! Besides entries the store keeps *meta keys*: small processor metadata (an aggregation's
//! observed stream time, say), written, logged and restored like entries, and never expired.
//!
//! # Key layout
//!
//! - a record key is escaped by [`encode_key`]: each 0x00 becomes 0x00 0xFF, then a terminator
//!   0x00 0x00 follows. Comparing encodings compares keys, whatever is appended after them;
//! - a time is [`flip`]ped: big-endian with the sign bit flipped, so negative times sort first;
//! - a window entry: `encode_key(key) ‖ flip(start) ‖ seq` (a big-endian `u32`, 0 unless the
//!   store keeps duplicates), see [`window_entry_key`];
//! - a session entry: `encode_key(key) ‖ flip(end) ‖ flip(start)`, see [`session_entry_key`];
//! - a meta key: `0x00 0x01 ‖ name`, see [`meta_key`]. No entry key starts so (an encoded key
//!   starts with 0x00 only as 0x00 0xFF or 0x00 0x00), and 0x00 0x02 starts the store's own
//!   keys on disk, which no read ever visits.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry as MapEntry;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use fjall::Keyspace;
use riffle_state_dir::TaskId;

use super::database::StoreDatabase;
use super::persistent::backend_error;
use super::{BytesStore, StoreError, StorePosition};
use crate::state::segment_totals::{
    record_segment_created, record_segment_drop, record_segment_writes,
};

/// The first two bytes of every meta key.
const META_PREFIX: [u8; 2] = [0x00, 0x01];
/// The smallest key above every meta key.
const META_END: [u8; 2] = [0x00, 0x02];
/// On disk, in the meta keyspace: the observed time, 8 bytes big-endian.
const OBSERVED_KEY: &[u8] = b"\x00\x02observed";
/// On disk, in the meta keyspace: the kind and segment interval the store was written with.
const LAYOUT_KEY: &[u8] = b"\x00\x02layout";
/// On disk, in the meta keyspace: the changelog position of the data ([`StorePosition`]).
const POSITION_KEY: &[u8] = b"\x00\x02position";
/// The fjall keyspace of the meta keys (and of the store's own keys).
const META_KEYSPACE: &str = "meta";
/// The fjall keyspace of segment `id` is `seg-<id>`.
const SEGMENT_PREFIX: &str = "seg-";

/// Appends `key` escaped to `out`: each 0x00 as 0x00 0xFF, every other byte as is, then the
/// terminator 0x00 0x00. Order-preserving and prefix-free: comparing two encodings compares the
/// keys lexicographically, whatever follows each.
pub(crate) fn encode_key(key: &[u8], out: &mut Vec<u8>) {
    out.reserve(key.len() + 2);
    let mut rest = key;
    while let Some(i) = rest.iter().position(|&b| b == 0) {
        out.extend_from_slice(&rest[..=i]);
        out.push(0xFF);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0x00, 0x00]);
}

/// `t` as 8 bytes that sort as the times do: big-endian with the sign bit flipped.
pub(crate) fn flip(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// The time [`flip`] made `bytes` of.
pub(crate) fn unflip(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// Appends the key of the window entry of `key` starting at `start` to `out`:
/// `encode_key(key) ‖ flip(start) ‖ seq` (big-endian). Its entry time is `start`.
pub(crate) fn window_entry_key(key: &[u8], start: i64, seq: u32, out: &mut Vec<u8>) {
    encode_key(key, out);
    out.extend_from_slice(&flip(start));
    out.extend_from_slice(&seq.to_be_bytes());
}

/// Appends the key of the session entry of `key` over `[start, end]` to `out`:
/// `encode_key(key) ‖ flip(end) ‖ flip(start)`. Its entry time is `end`.
pub(crate) fn session_entry_key(key: &[u8], end: i64, start: i64, out: &mut Vec<u8>) {
    encode_key(key, out);
    out.extend_from_slice(&flip(end));
    out.extend_from_slice(&flip(start));
}

/// Appends the meta key `name` to `out`: `0x00 0x01 ‖ name`.
pub(crate) fn meta_key(name: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&META_PREFIX);
    out.extend_from_slice(name);
}

/// Whether `bytes` is a meta key.
pub(crate) fn is_meta(bytes: &[u8]) -> bool {
    bytes.starts_with(&META_PREFIX)
}

/// `[lower, upper)` holding exactly the entries of `key`: lower is `encode_key(key)`, upper the
/// same with its last byte (the terminator's 0x00) made 0x01.
pub(crate) fn key_bounds(key: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lower = Vec::with_capacity(key.len() + 2);
    encode_key(key, &mut lower);
    let mut upper = lower.clone();
    if let Some(last) = upper.last_mut() {
        *last = 0x01;
    }
    (lower, upper)
}

/// What a segmented store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentedKind {
    /// Windows, keyed by record key, start and sequence number; entry time: the start.
    Window,
    /// Sessions, keyed by record key, end and start; entry time: the end.
    Session,
}

impl SegmentedKind {
    /// The bytes after an entry key's encoded record key.
    fn tail_len(self) -> usize {
        match self {
            SegmentedKind::Window => 12,
            SegmentedKind::Session => 16,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            SegmentedKind::Window => "window",
            SegmentedKind::Session => "session",
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(SegmentedKind::Window),
            1 => Some(SegmentedKind::Session),
            _ => None,
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            SegmentedKind::Window => 0,
            SegmentedKind::Session => 1,
        }
    }
}

/// An entry key taken apart by [`decode_entry`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DecodedEntry {
    /// The record key, unescaped.
    pub(crate) key: Vec<u8>,
    /// The entry time: a window's start, a session's end.
    pub(crate) time: i64,
    /// The second field: a window's sequence number, a session's start.
    pub(crate) second: i64,
}

/// Why bytes are not an entry key.
#[derive(Debug, Clone, Copy)]
enum Malformed {
    Meta,
    BadEscape { at: usize, byte: u8 },
    Unterminated,
    Tail { kind: SegmentedKind, len: usize },
}

impl Malformed {
    fn into_error(self, store: &str, len: usize) -> StoreError {
        let what = match self {
            Malformed::Meta => "is a meta key (0x00 0x01 ...), not an entry".to_owned(),
            Malformed::BadEscape { at, byte } => format!(
                "has 0x00 followed by 0x{byte:02x} at byte {at}, neither an escaped 0x00 \
                 (0x00 0xFF) nor the record key's terminator (0x00 0x00)"
            ),
            Malformed::Unterminated => {
                "has no terminator (0x00 0x00) after its record key".to_owned()
            }
            Malformed::Tail { kind, len } => format!(
                "has {len} bytes after its record key, not the {} of a {} entry",
                kind.tail_len(),
                kind.describe()
            ),
        };
        StoreError::Corrupt {
            store: store.to_owned(),
            reason: format!("an entry key of {len} bytes {what}"),
        }
    }
}

/// Where the escaped record key at the start of `bytes` ends (just past its terminator).
fn encoded_key_end(bytes: &[u8]) -> Result<usize, Malformed> {
    let mut from = 0;
    loop {
        let Some(zero) = bytes
            .get(from..)
            .and_then(|rest| rest.iter().position(|&b| b == 0))
        else {
            return Err(Malformed::Unterminated);
        };
        let at = from + zero;
        match bytes.get(at + 1) {
            Some(0x00) => return Ok(at + 2),
            Some(0xFF) => from = at + 2,
            Some(&byte) => return Err(Malformed::BadEscape { at, byte }),
            None => return Err(Malformed::Unterminated),
        }
    }
}

/// An entry key's parts, without copying its record key.
#[derive(Debug, Clone, Copy)]
struct Parsed {
    /// Where the encoded record key (with its terminator) ends.
    key_end: usize,
    time: i64,
    second: i64,
}

fn parse_entry(kind: SegmentedKind, bytes: &[u8]) -> Result<Parsed, Malformed> {
    if is_meta(bytes) {
        return Err(Malformed::Meta);
    }
    let key_end = encoded_key_end(bytes)?;
    let tail = bytes.get(key_end..).unwrap_or_default();
    let malformed = Malformed::Tail {
        kind,
        len: tail.len(),
    };
    let Some((time, rest)) = tail.split_first_chunk::<8>() else {
        return Err(malformed);
    };
    let second = match kind {
        SegmentedKind::Window => match <[u8; 4]>::try_from(rest) {
            Ok(seq) => i64::from(u32::from_be_bytes(seq)),
            Err(_) => return Err(malformed),
        },
        SegmentedKind::Session => match <[u8; 8]>::try_from(rest) {
            Ok(start) => unflip(start),
            Err(_) => return Err(malformed),
        },
    };
    Ok(Parsed {
        key_end,
        time: unflip(*time),
        second,
    })
}

/// Takes the entry key `bytes` of the `kind` store `store` apart. Bytes that are not such a key
/// (a meta key included) are a [`StoreError::Corrupt`] naming the store and what is wrong.
pub(crate) fn decode_entry(
    store: &str,
    kind: SegmentedKind,
    bytes: &[u8],
) -> Result<DecodedEntry, StoreError> {
    let mut out = DecodedEntry {
        key: Vec::new(),
        time: 0,
        second: 0,
    };
    decode_entry_into(store, kind, bytes, &mut out)?;
    Ok(out)
}

/// As [`decode_entry`], into `out`, reusing its key's buffer.
pub(crate) fn decode_entry_into(
    store: &str,
    kind: SegmentedKind,
    bytes: &[u8],
    out: &mut DecodedEntry,
) -> Result<(), StoreError> {
    let parsed = parse_entry(kind, bytes).map_err(|m| m.into_error(store, bytes.len()))?;
    let encoded = bytes
        .get(..parsed.key_end.saturating_sub(2))
        .unwrap_or_default();
    let key = &mut out.key;
    key.clear();
    key.reserve(encoded.len());
    let mut bytes = encoded.iter();
    while let Some(&b) = bytes.next() {
        key.push(b);
        if b == 0 {
            // The escape's 0xFF.
            bytes.next();
        }
    }
    out.time = parsed.time;
    out.second = parsed.second;
    Ok(())
}

/// The first live segment: `segment_id(observed - retention + 1)`, exactly (no overflow).
fn live_bound(observed: i64, retention_ms: i64, segment_interval_ms: i64) -> i64 {
    let t = i128::from(observed) - i128::from(retention_ms) + 1;
    let id = t.div_euclid(i128::from(segment_interval_ms));
    i64::try_from(id).unwrap_or(if id < 0 { i64::MIN } else { i64::MAX })
}

fn segment_name(id: i64) -> String {
    format!("{SEGMENT_PREFIX}{id}")
}

fn layout(kind: SegmentedKind, segment_interval_ms: i64) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = kind.to_byte();
    out[1..].copy_from_slice(&segment_interval_ms.to_be_bytes());
    out
}

fn describe_layout(bytes: &[u8]) -> String {
    match bytes.split_first() {
        Some((&kind, interval)) if interval.len() == 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(interval);
            match SegmentedKind::from_byte(kind) {
                Some(kind) => format!(
                    "a {} store with {} ms segments",
                    kind.describe(),
                    i64::from_be_bytes(b)
                ),
                None => format!("an unknown kind {kind}"),
            }
        }
        _ => format!("an unreadable layout of {} bytes", bytes.len()),
    }
}

/// Where a key written to the store goes.
#[derive(Debug, Clone, Copy)]
enum Target {
    Meta,
    Segment { segment: i64, time: i64 },
}

/// One write of a batch: where it goes, its key, its value (`None` deletes).
type Write<'k, 'v> = (Target, &'k [u8], Option<&'v [u8]>);

/// A batch of writes, classified and filtered: what it leaves for the segments and the meta keys.
struct Planned<'k, 'v> {
    /// The writes to apply, in the batch's order, without those into expired segments.
    writes: Vec<Write<'k, 'v>>,
    /// The observed time after the batch.
    observed: i64,
    /// Writes left out for their segment being expired.
    expired: u64,
}

/// What the read paths need of a segment or of the meta keys: a map in memory, a fjall keyspace
/// on disk.
trait Space {
    /// Copies the value of `key` into `out` (cleared first); `false` if there is none.
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, fjall::Error>;
    /// Visits the entries with `lo <= key < hi` (`None`: unbounded) in key order while `f`
    /// returns `true`; `false` if `f` stopped it.
    fn visit(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool, fjall::Error>;
}

type MemorySegment = BTreeMap<Vec<u8>, Vec<u8>>;

impl Space for MemorySegment {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, fjall::Error> {
        out.clear();
        Ok(match self.get(key) {
            Some(value) => {
                out.extend_from_slice(value);
                true
            }
            None => false,
        })
    }
    fn visit(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool, fjall::Error> {
        if hi.is_some_and(|hi| lo >= hi) {
            return Ok(true);
        }
        let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
        for (k, v) in self.range::<[u8], _>((Bound::Included(lo), hi)) {
            if !f(k, v) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl Space for Keyspace {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, fjall::Error> {
        out.clear();
        Ok(match self.get(key)? {
            Some(value) => {
                out.extend_from_slice(&value);
                true
            }
            None => false,
        })
    }
    fn visit(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool, fjall::Error> {
        if hi.is_some_and(|hi| lo >= hi) {
            return Ok(true);
        }
        let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
        for guard in self.range::<&[u8], _>((Bound::Included(lo), hi)) {
            let (k, v) = guard.into_inner()?;
            if !f(&k, &v) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Visits the meta keys, then each segment's entries, with `from <= key < to`.
fn visit_all<S: Space>(
    meta: &S,
    segments: &BTreeMap<i64, S>,
    from: &[u8],
    to: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), fjall::Error> {
    // On disk the meta keyspace holds the store's own keys too (0x00 0x02 ...): keep to the
    // meta keys.
    let lo = from.max(&META_PREFIX[..]);
    let hi = to.map_or(&META_END[..], |to| to.min(&META_END[..]));
    if !meta.visit(lo, Some(hi), f)? {
        return Ok(());
    }
    for segment in segments.values() {
        if !segment.visit(from, to, f)? {
            break;
        }
    }
    Ok(())
}

/// Visits the entries with `lo <= key < hi` of the segments `first..=last`.
fn visit_segments<S: Space>(
    segments: &BTreeMap<i64, S>,
    first: i64,
    last: i64,
    lo: &[u8],
    hi: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), fjall::Error> {
    for segment in segments.range(first..=last).map(|(_, s)| s) {
        if !segment.visit(lo, hi, f)? {
            break;
        }
    }
    Ok(())
}

fn read_in<S: Space>(
    meta: &S,
    segments: &BTreeMap<i64, S>,
    target: Target,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, fjall::Error> {
    match target {
        Target::Meta => meta.read(key, out),
        Target::Segment { segment, .. } => match segments.get(&segment) {
            Some(space) => space.read(key, out),
            None => {
                out.clear();
                Ok(false)
            }
        },
    }
}

/// The segments in memory.
struct Memory {
    meta: MemorySegment,
    segments: BTreeMap<i64, MemorySegment>,
}

/// Writes `value` at `key`, reusing the value's buffer if the key is there. One walk down the
/// tree: a segment's writes are mostly new keys (windows), so the key is copied up front.
fn put_reusing(space: &mut MemorySegment, key: &[u8], value: &[u8]) {
    match space.entry(key.to_vec()) {
        MapEntry::Occupied(mut existing) => {
            let existing = existing.get_mut();
            existing.clear();
            existing.extend_from_slice(value);
        }
        MapEntry::Vacant(slot) => {
            slot.insert(value.to_vec());
        }
    }
}

impl Memory {
    fn apply(&mut self, writes: &[Write<'_, '_>]) {
        for &(target, key, value) in writes {
            match (target, value) {
                (Target::Meta, Some(value)) => put_reusing(&mut self.meta, key, value),
                (Target::Meta, None) => {
                    self.meta.remove(key);
                }
                (Target::Segment { segment, .. }, Some(value)) => {
                    put_reusing(self.segments.entry(segment).or_default(), key, value)
                }
                (Target::Segment { segment, .. }, None) => {
                    if let MapEntry::Occupied(mut space) = self.segments.entry(segment) {
                        space.get_mut().remove(key);
                        if space.get().is_empty() {
                            space.remove();
                        }
                    }
                }
            }
        }
    }
}

/// The segments on disk, in the instance's [`StoreDatabase`]: a keyspace per segment and one
/// for the meta keys, named after the store's id.
struct Disk {
    db: Arc<StoreDatabase>,
    /// The store's id in the database.
    id: u32,
    meta: Keyspace,
    segments: BTreeMap<i64, Keyspace>,
}

/// The keyspace of segment `id` of store `store`, created if it is new.
fn segment_or_create<'a>(
    db: &StoreDatabase,
    store: u32,
    segments: &'a mut BTreeMap<i64, Keyspace>,
    id: i64,
) -> Result<&'a Keyspace, fjall::Error> {
    Ok(match segments.entry(id) {
        MapEntry::Occupied(e) => e.into_mut(),
        MapEntry::Vacant(e) => {
            let started = std::time::Instant::now();
            let keyspace = db.keyspace_of(store, &segment_name(id))?;
            record_segment_created(started.elapsed());
            e.insert(keyspace)
        }
    })
}

impl Disk {
    /// Applies `writes` and the new observed time (if it rose) in one fjall batch. A key written
    /// twice in it ends as its last write: a batch's writes share one sequence number, and the
    /// memtable replaces an equal (key, sequence number) entry, live and on replaying the
    /// journal (pinned by a test).
    fn commit(
        &mut self,
        writes: &[Write<'_, '_>],
        observed: Option<i64>,
        position: Option<&StorePosition>,
    ) -> Result<(), fjall::Error> {
        let mut batch = self.db.db().batch();
        for &(target, key, value) in writes {
            let space = match (target, value) {
                (Target::Meta, _) => &self.meta,
                (Target::Segment { segment, .. }, Some(_)) => {
                    segment_or_create(&self.db, self.id, &mut self.segments, segment)?
                }
                (Target::Segment { segment, .. }, None) => match self.segments.get(&segment) {
                    Some(space) => space,
                    // Nothing to delete in a segment never written.
                    None => continue,
                },
            };
            match value {
                Some(value) => batch.insert(space, key, value),
                None => batch.remove(space, key),
            }
        }
        if let Some(observed) = observed {
            batch.insert(&self.meta, OBSERVED_KEY, &observed.to_be_bytes()[..]);
        }
        if let Some(position) = position {
            batch.insert(&self.meta, POSITION_KEY, position.encode());
        }
        batch.commit()
    }
}

enum Backend {
    Memory(Memory),
    Disk(Disk),
}

/// A window or session store: entries in time segments, dropped a segment at a time once the
/// observed time has passed them by the retention. See the module documentation.
///
/// Its [`BytesStore`] reads ([`for_each`](BytesStore::for_each),
/// [`range`](BytesStore::range)) visit the meta keys first, then the entries segment by
/// segment in ascending segment order, in key order within a segment: this is NOT global key
/// order. [`SegmentedStore::scan_time`] reads entries by key range and time.
pub(crate) struct SegmentedStore {
    name: String,
    kind: SegmentedKind,
    retention_ms: i64,
    segment_interval_ms: i64,
    /// The largest entry time written (`i64::MIN` before the first).
    observed: i64,
    /// Writes ignored because their segment had expired.
    expired_writes: u64,
    /// On disk, a changelog position is recorded (one of the store's own keys).
    positioned: bool,
    backend: Backend,
}

impl std::fmt::Debug for SegmentedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("SegmentedStore");
        s.field("name", &self.name)
            .field("kind", &self.kind)
            .field("retention_ms", &self.retention_ms)
            .field("segment_interval_ms", &self.segment_interval_ms)
            .field("observed", &self.observed)
            .field("segments", &self.segment_count());
        if let Backend::Disk(disk) = &self.backend {
            s.field("id", &disk.id).field("path", &disk.db.path());
        }
        s.finish()
    }
}

impl SegmentedStore {
    /// An empty store in memory. `retention_ms` and `segment_interval_ms` are at least 1 (smaller
    /// values count as 1).
    pub(crate) fn in_memory(
        name: impl Into<String>,
        kind: SegmentedKind,
        retention_ms: i64,
        segment_interval_ms: i64,
    ) -> Self {
        SegmentedStore {
            name: name.into(),
            kind,
            retention_ms: retention_ms.max(1),
            segment_interval_ms: segment_interval_ms.max(1),
            observed: i64::MIN,
            expired_writes: 0,
            positioned: false,
            backend: Backend::Memory(Memory {
                meta: BTreeMap::new(),
                segments: BTreeMap::new(),
            }),
        }
    }

    /// Opens (creating if needed) the store `name` in `dir`: one fjall database, with a keyspace
    /// `seg-<id>` per segment and `meta` for the meta keys. A reopened store keeps its observed
    /// time, so it goes on expiring where it stopped. Opening a store written with another kind
    /// or segment interval fails: its segments would mean other times.
    pub(crate) fn persistent(
        db: &Arc<StoreDatabase>,
        task: TaskId,
        format: &str,
        name: impl Into<String>,
        kind: SegmentedKind,
        retention_ms: i64,
        segment_interval_ms: i64,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        let segment_interval_ms = segment_interval_ms.max(1);
        let id = db.store_id(task, format, &name)?;
        let dir = db.path();
        let err = |e: fjall::Error| backend_error(&name, dir, e);
        let corrupt = |reason: String| StoreError::Corrupt {
            store: name.clone(),
            reason,
        };
        // Refuse a keyspace that is neither before creating anything.
        let mut segments = BTreeMap::new();
        let mut meta = None;
        for (keyspace, handle) in db.keyspaces_of(id) {
            if keyspace == META_KEYSPACE {
                meta = Some(handle);
                continue;
            }
            let Some(segment) = keyspace
                .strip_prefix(SEGMENT_PREFIX)
                .and_then(|id| id.parse::<i64>().ok())
            else {
                return Err(corrupt(format!(
                    "its database holds a keyspace {keyspace:?}, neither a segment nor the meta keys"
                )));
            };
            segments.insert(segment, handle);
        }
        let meta = match meta {
            Some(meta) => meta,
            None => db.keyspace_of(id, META_KEYSPACE).map_err(err)?,
        };
        let expected = layout(kind, segment_interval_ms);
        match meta.get(LAYOUT_KEY).map_err(err)? {
            Some(found) if *found == expected[..] => {}
            Some(found) => {
                return Err(corrupt(format!(
                    "it was written as {} and is opened as {}; delete its task's directory \
                     while the application is stopped to rebuild it from its changelog",
                    describe_layout(&found),
                    describe_layout(&expected)
                )));
            }
            None => meta.insert(LAYOUT_KEY, &expected[..]).map_err(err)?,
        }
        let observed = match meta.get(OBSERVED_KEY).map_err(err)? {
            None => i64::MIN,
            Some(bytes) => match <[u8; 8]>::try_from(&*bytes) {
                Ok(b) => i64::from_be_bytes(b),
                Err(_) => {
                    return Err(corrupt(format!(
                        "its observed time has {} bytes, not 8",
                        bytes.len()
                    )));
                }
            },
        };
        let positioned = meta.contains_key(POSITION_KEY).map_err(err)?;
        let mut store = SegmentedStore {
            kind,
            retention_ms: retention_ms.max(1),
            segment_interval_ms,
            observed,
            expired_writes: 0,
            positioned,
            backend: Backend::Disk(Disk {
                db: db.clone(),
                id,
                meta,
                segments,
            }),
            name,
        };
        // A crash between a batch and the deletion of the segments it expired leaves them; so
        // does a shorter retention than before.
        store.drop_expired()?;
        Ok(store)
    }

    /// A store alone in a database of its own in `dir` (tests).
    #[cfg(test)]
    pub(crate) fn persistent_in(
        name: impl Into<String>,
        kind: SegmentedKind,
        retention_ms: i64,
        segment_interval_ms: i64,
        dir: &Path,
    ) -> Result<Self, StoreError> {
        let db = StoreDatabase::open(dir, super::MemoryBudget::split(0, 0))?;
        let task = TaskId::new(0, 0);
        Self::persistent(
            &db,
            task,
            "window",
            name,
            kind,
            retention_ms,
            segment_interval_ms,
        )
    }

    /// What the store holds.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> SegmentedKind {
        self.kind
    }

    /// How long after the observed time entries are kept, in ms.
    #[cfg(test)]
    pub(crate) fn retention_ms(&self) -> i64 {
        self.retention_ms
    }

    /// The length of a segment, in ms.
    #[cfg(test)]
    pub(crate) fn segment_interval_ms(&self) -> i64 {
        self.segment_interval_ms
    }

    /// The largest entry time written (`i64::MIN` before the first).
    pub(crate) fn observed_time(&self) -> i64 {
        self.observed
    }

    /// The segments held (a segment emptied by deletes may stay until it expires).
    pub(crate) fn segment_count(&self) -> usize {
        match &self.backend {
            Backend::Memory(m) => m.segments.len(),
            Backend::Disk(d) => d.segments.len(),
        }
    }

    /// Writes ignored because their entry's segment had expired (for a metric).
    #[cfg(test)]
    pub(crate) fn expired_writes(&self) -> u64 {
        self.expired_writes
    }

    /// The segment of an entry time.
    pub(crate) fn segment_id(&self, time: i64) -> i64 {
        time.div_euclid(self.segment_interval_ms)
    }

    /// Whether an entry at `time` would be kept now (its segment is not expired).
    #[cfg(test)]
    pub(crate) fn is_live(&self, time: i64) -> bool {
        self.segment_id(time) >= self.live_bound()
    }

    /// Takes an entry key of this store apart.
    pub(crate) fn decode(&self, bytes: &[u8]) -> Result<DecodedEntry, StoreError> {
        decode_entry(&self.name, self.kind, bytes)
    }

    /// The entry time of an entry key of this store (a window's start, a session's end),
    /// without copying its record key.
    pub(crate) fn entry_time(&self, bytes: &[u8]) -> Result<i64, StoreError> {
        parse_entry(self.kind, bytes)
            .map(|p| p.time)
            .map_err(|m| m.into_error(&self.name, bytes.len()))
    }

    /// As [`decode`](Self::decode), into `out`, reusing its key's buffer.
    pub(crate) fn decode_into(
        &self,
        bytes: &[u8],
        out: &mut DecodedEntry,
    ) -> Result<(), StoreError> {
        decode_entry_into(&self.name, self.kind, bytes, out)
    }

    /// The first segment not expired.
    fn live_bound(&self) -> i64 {
        live_bound(self.observed, self.retention_ms, self.segment_interval_ms)
    }

    fn err(&self, e: fjall::Error) -> StoreError {
        let path = match &self.backend {
            Backend::Disk(d) => d.db.path(),
            Backend::Memory(_) => Path::new("(memory)"),
        };
        backend_error(&self.name, path, e)
    }

    fn classify(&self, key: &[u8]) -> Result<Target, StoreError> {
        if is_meta(key) {
            return Ok(Target::Meta);
        }
        let parsed =
            parse_entry(self.kind, key).map_err(|m| m.into_error(&self.name, key.len()))?;
        Ok(Target::Segment {
            segment: self.segment_id(parsed.time),
            time: parsed.time,
        })
    }

    /// Classifies a batch: the observed time it leads to, and its writes without those into
    /// segments expired at that time. A malformed key fails the batch before anything is written.
    fn plan<'k, 'v>(
        &self,
        batch: &mut dyn Iterator<Item = (&'k [u8], Option<&'v [u8]>)>,
    ) -> Result<Planned<'k, 'v>, StoreError> {
        let mut writes = Vec::with_capacity(batch.size_hint().0);
        let mut observed = self.observed;
        for (key, value) in batch {
            let target = self.classify(key)?;
            if let Target::Segment { time, .. } = target {
                observed = observed.max(time);
            }
            writes.push((target, key, value));
        }
        let bound = live_bound(observed, self.retention_ms, self.segment_interval_ms);
        let before = writes.len();
        writes.retain(|(target, _, _)| match target {
            Target::Meta => true,
            Target::Segment { segment, .. } => *segment >= bound,
        });
        // By segment, then key: inserting into a segment's memtable (a skip list) or tree in
        // key order finds each position next to the last. Stable, so a key written twice
        // still ends as its last write.
        let segment = |t: &Target| match t {
            Target::Meta => i64::MIN,
            Target::Segment { segment, .. } => *segment,
        };
        writes.sort_by(|a, b| segment(&a.0).cmp(&segment(&b.0)).then_with(|| a.1.cmp(b.1)));
        Ok(Planned {
            expired: (before - writes.len()) as u64,
            writes,
            observed,
        })
    }

    /// Applies a planned batch, then drops the segments its observed time expired.
    fn apply(
        &mut self,
        planned: Planned<'_, '_>,
        position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        let raised = (planned.observed > self.observed).then_some(planned.observed);
        let written = match &mut self.backend {
            Backend::Memory(m) => {
                m.apply(&planned.writes);
                Ok(())
            }
            Backend::Disk(d) => d.commit(&planned.writes, raised, position),
        };
        written.map_err(|e| self.err(e))?;
        self.positioned |= position.is_some() && self.is_persistent();
        let segment_writes = planned
            .writes
            .iter()
            .filter(|(target, _, _)| matches!(target, Target::Segment { .. }))
            .count();
        record_segment_writes(segment_writes as u64, planned.expired);
        self.expired_writes += planned.expired;
        if let Some(observed) = raised {
            self.observed = observed;
            self.drop_expired()?;
        }
        Ok(())
    }

    /// Drops, whole, every segment below the live bound (timed for
    /// [`crate::segmented_store_totals`] when there is one).
    fn drop_expired(&mut self) -> Result<(), StoreError> {
        let bound = self.live_bound();
        let first = match &self.backend {
            Backend::Memory(m) => m.segments.keys().next(),
            Backend::Disk(d) => d.segments.keys().next(),
        };
        if first.is_none_or(|&id| id >= bound) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let (segments, entries, deleted) = match &mut self.backend {
            Backend::Memory(m) => {
                let live = m.segments.split_off(&bound);
                let expired = std::mem::replace(&mut m.segments, live);
                let entries = expired.values().map(MemorySegment::len).sum::<usize>();
                let segments = expired.len();
                drop(expired);
                (segments, entries, Ok(()))
            }
            Backend::Disk(d) => {
                let live = d.segments.split_off(&bound);
                let expired = std::mem::replace(&mut d.segments, live);
                let entries = expired
                    .values()
                    .map(Keyspace::approximate_len)
                    .sum::<usize>();
                let segments = expired.len();
                let deleted = expired
                    .into_values()
                    .try_for_each(|keyspace| d.db.delete_keyspace_of(d.id, keyspace));
                (segments, entries, deleted)
            }
        };
        record_segment_drop(segments as u64, entries as u64, started.elapsed());
        deleted.map_err(|e| self.err(e))
    }

    /// Visits the entries with `from <= key < to` (encoded entry keys) whose entry time is in
    /// `[time_from, time_to]`: only the segments that can hold such times, in ascending segment
    /// order, in key order within one. Never visits meta keys. When `[from, to)` is one key's
    /// [`key_bounds`], only that key's entries in the time range are read. An empty `to` is no
    /// upper bound (every key from `from` on).
    pub(crate) fn scan_time(
        &self,
        from: &[u8],
        to: &[u8],
        time_from: i64,
        time_to: i64,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        let unbounded = to.is_empty();
        if time_from > time_to || (!unbounded && from >= to) {
            return Ok(());
        }
        let first = self.segment_id(time_from).max(self.live_bound());
        let last = self.segment_id(time_to);
        if first > last {
            return Ok(());
        }
        SCAN_BOUNDS.with(|bounds| {
            // A visit that reads the store again finds the buffers taken: it uses its own.
            let mut own = (Vec::new(), Vec::new());
            let mut taken = bounds.try_borrow_mut();
            let (nlo, nhi) = match &mut taken {
                Ok(b) => &mut **b,
                Err(_) => &mut own,
            };
            let narrowed = !unbounded && narrow_to_times(from, to, time_from, time_to, nlo, nhi);
            let (lo, hi) = if narrowed {
                (nlo.as_slice(), Some(nhi.as_slice()))
            } else {
                (from, (!unbounded).then_some(to))
            };
            let kind = self.kind;
            let mut corrupt = None;
            let mut visit = |k: &[u8], v: &[u8]| match parse_entry(kind, k) {
                Ok(parsed) => {
                    if (time_from..=time_to).contains(&parsed.time) {
                        f(k, v);
                    }
                    true
                }
                Err(m) => {
                    corrupt = Some(m.into_error(&self.name, k.len()));
                    false
                }
            };
            let visited = match &self.backend {
                Backend::Memory(m) => visit_segments(&m.segments, first, last, lo, hi, &mut visit),
                Backend::Disk(d) => visit_segments(&d.segments, first, last, lo, hi, &mut visit),
            };
            visited.map_err(|e| self.err(e))?;
            corrupt.map_or(Ok(()), Err)
        })
    }
}

/// If `[from, to)` is one record key's [`key_bounds`], writes into `lo` and `hi` the narrower
/// range of its entries with times in `[time_from, time_to]` (one key's entries sort by entry
/// time) and says so; else leaves them alone and returns `false`. The buffers are the caller's,
/// to reuse from read to read.
pub(super) fn narrow_to_times(
    from: &[u8],
    to: &[u8],
    time_from: i64,
    time_to: i64,
    lo: &mut Vec<u8>,
    hi: &mut Vec<u8>,
) -> bool {
    let Some((last, head)) = to.split_last() else {
        return false;
    };
    let one_key = *last == 0x01
        && from.len() == to.len()
        && from.starts_with(head)
        && encoded_key_end(from).is_ok_and(|end| end == from.len());
    if !one_key {
        return false;
    }
    lo.clear();
    lo.extend_from_slice(from);
    lo.extend_from_slice(&flip(time_from));
    hi.clear();
    match time_to.checked_add(1) {
        Some(after) => {
            hi.extend_from_slice(from);
            hi.extend_from_slice(&flip(after));
        }
        None => hi.extend_from_slice(to),
    }
    true
}

std::thread_local! {
    /// [`narrow_to_times`]' bounds for [`SegmentedStore::scan_time`], reused per thread.
    static SCAN_BOUNDS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const {
        std::cell::RefCell::new((Vec::new(), Vec::new()))
    };
}

impl BytesStore for SegmentedStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        let target = self.classify(key)?;
        // No entry is later than the observed time (it is written with every batch that
        // raises it): a read beyond it, a window opened since the last commit, looks nothing up.
        if let Target::Segment { time, .. } = target
            && time > self.observed
        {
            out.clear();
            return Ok(false);
        }
        let read = match &self.backend {
            Backend::Memory(m) => read_in(&m.meta, &m.segments, target, key, out),
            Backend::Disk(d) => read_in(&d.meta, &d.segments, target, key, out),
        };
        read.map_err(|e| self.err(e))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.write_batch(&mut std::iter::once((key, Some(value))))
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.write_batch(&mut std::iter::once((key, None)))
    }
    /// Applies the batch as one: its observed time is the largest of the store's and of its
    /// entries' times, and its writes into segments expired at that time are ignored (and
    /// counted). On disk, one fjall batch, with the observed time.
    fn write_batch(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        let planned = self.plan(batch)?;
        self.apply(planned, None)
    }
    /// As [`write_batch`](Self::write_batch), the position in the same fjall batch.
    fn write_batch_at(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: &StorePosition,
    ) -> Result<(), StoreError> {
        let planned = self.plan(batch)?;
        self.apply(planned, Some(position))
    }
    fn record_position(&mut self, position: &StorePosition) -> Result<(), StoreError> {
        let Backend::Disk(d) = &self.backend else {
            return Ok(());
        };
        d.meta
            .insert(POSITION_KEY, position.encode())
            .map_err(|e| self.err(e))?;
        self.positioned = true;
        Ok(())
    }
    fn position(&self) -> Result<Option<StorePosition>, StoreError> {
        let Backend::Disk(d) = &self.backend else {
            return Ok(None);
        };
        match d.meta.get(POSITION_KEY).map_err(|e| self.err(e))? {
            Some(bytes) => StorePosition::decode(&self.name, &bytes).map(Some),
            None => Ok(None),
        }
    }
    /// As [`write_batch`](Self::write_batch): on disk one fjall batch per call, across the
    /// segments its keys fall in. Ingesting each segment's share as a table of its own (what the
    /// key-value store does) was measured slower: with restoration's chunks of at most 1000
    /// records, 200 000 window entries over 20 segments took 1.4 s (chronological chunks, 231
    /// tables) to 12.9 s (each chunk across all 20 segments, 4031 tables) against 0.28 s and
    /// 0.33 s through batches, and the many small tables slowed reads until compacted.
    fn restore_sorted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        self.write_batch(batch)
    }
    /// Visits the meta keys, then the entries segment by segment: not global key order.
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        let mut visit = |k: &[u8], v: &[u8]| {
            f(k, v);
            true
        };
        let visited = match &self.backend {
            Backend::Memory(m) => visit_all(&m.meta, &m.segments, &[], None, &mut visit),
            Backend::Disk(d) => visit_all(&d.meta, &d.segments, &[], None, &mut visit),
        };
        visited.map_err(|e| self.err(e))
    }
    /// Visits the meta keys, then the entries segment by segment, with `from <= key < to`: not
    /// global key order.
    fn range(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        if from >= to {
            return Ok(());
        }
        let mut visit = |k: &[u8], v: &[u8]| {
            f(k, v);
            true
        };
        let visited = match &self.backend {
            Backend::Memory(m) => visit_all(&m.meta, &m.segments, from, Some(to), &mut visit),
            Backend::Disk(d) => visit_all(&d.meta, &d.segments, from, Some(to), &mut visit),
        };
        visited.map_err(|e| self.err(e))
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(_) => Ok(()),
            Backend::Disk(d) => d.db.sync().map_err(|e| self.err(e)),
        }
    }
    /// Drops every segment and meta key; the observed time starts over.
    fn wipe(&mut self) -> Result<(), StoreError> {
        let wiped = match &mut self.backend {
            Backend::Memory(m) => {
                m.meta.clear();
                m.segments.clear();
                Ok(())
            }
            Backend::Disk(d) => {
                let layout = layout(self.kind, self.segment_interval_ms);
                // The position goes first, durably: the segments' deletion is not in the
                // journal's order, and a crash in between must not leave it over no data.
                d.meta
                    .remove(POSITION_KEY)
                    .and_then(|()| d.db.db().persist(fjall::PersistMode::SyncAll))
                    .and_then(|()| {
                        std::mem::take(&mut d.segments)
                            .into_values()
                            .try_for_each(|keyspace| d.db.delete_keyspace_of(d.id, keyspace))
                    })
                    .and_then(|()| d.meta.clear())
                    .and_then(|()| d.meta.insert(LAYOUT_KEY, &layout[..]))
            }
        };
        wiped.map_err(|e| self.err(e))?;
        self.observed = i64::MIN;
        self.positioned = false;
        Ok(())
    }
    fn is_persistent(&self) -> bool {
        matches!(self.backend, Backend::Disk(_))
    }
    fn approximate_len(&self) -> usize {
        match &self.backend {
            Backend::Memory(m) => {
                m.meta.len() + m.segments.values().map(MemorySegment::len).sum::<usize>()
            }
            Backend::Disk(d) => {
                // Less the store's own keys: its layout, and its observed time and position
                // once written.
                let own = 1 + usize::from(self.observed != i64::MIN) + usize::from(self.positioned);
                d.meta.approximate_len().saturating_sub(own)
                    + d.segments
                        .values()
                        .map(Keyspace::approximate_len)
                        .sum::<usize>()
            }
        }
    }
    fn as_segmented(&self) -> Option<&SegmentedStore> {
        Some(self)
    }
}

#[cfg(test)]
impl SegmentedStore {
    /// The ids of the segments held, ascending.
    fn segment_ids(&self) -> Vec<i64> {
        match &self.backend {
            Backend::Memory(m) => m.segments.keys().copied().collect(),
            Backend::Disk(d) => d.segments.keys().copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::state::InMemoryKeyValueStore;
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::{Malformed, decode_entry, flip, parse_entry, unflip};
    // Through the store module's re-exports, as the operators will reach them.
    use crate::state::{
        BytesStore, DecodedEntry, SegmentedKind, SegmentedStore, StoreError, encode_key, is_meta,
        key_bounds, meta_key, session_entry_key, window_entry_key,
    };

    use SegmentedKind::{Session, Window};

    fn window_key(key: &[u8], start: i64, seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        window_entry_key(key, start, seq, &mut out);
        out
    }

    fn session_key(key: &[u8], end: i64, start: i64) -> Vec<u8> {
        let mut out = Vec::new();
        session_entry_key(key, end, start, &mut out);
        out
    }

    fn meta(name: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        meta_key(name, &mut out);
        out
    }

    fn fail(e: StoreError) -> TestCaseError {
        TestCaseError::fail(e.to_string())
    }

    /// Every entry and meta key, as `for_each` visits them.
    fn listing(store: &dyn BytesStore) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        store
            .for_each(&mut |k, v| all.push((k.to_vec(), v.to_vec())))
            .expect("for_each");
        all
    }

    fn scanned(store: &SegmentedStore, from: &[u8], to: &[u8], t0: i64, t1: i64) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        store
            .scan_time(from, to, t0, t1, &mut |k, _| keys.push(k.to_vec()))
            .expect("scan_time");
        keys
    }

    fn record_key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![Just(0u8), Just(1), Just(0xFE), Just(0xFF), any::<u8>()],
            0..5,
        )
    }

    fn time() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            -3i64..3,
            prop::sample::select(vec![i64::MIN, i64::MIN + 1, i64::MAX - 1, i64::MAX]),
        ]
    }

    #[test]
    fn the_encoding_escapes_zero_bytes_terminates_keys_and_flips_the_sign_bit() {
        let mut out = Vec::new();
        encode_key(&[0, 1, 0xFF, 0], &mut out);
        assert_eq!(out, [0, 0xFF, 1, 0xFF, 0, 0xFF, 0, 0]);
        assert_eq!(flip(i64::MIN), [0; 8]);
        assert_eq!(flip(-1), [0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(flip(0), [0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(flip(i64::MAX), [0xFF; 8]);
        for t in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(unflip(flip(t)), t);
        }
        assert_eq!(
            window_key(b"k", 0, 7),
            [b'k', 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]
        );
        assert_eq!(key_bounds(b""), (vec![0, 0], vec![0, 1]));
        assert_eq!(
            key_bounds(b"a\0"),
            (vec![b'a', 0, 0xFF, 0, 0], vec![b'a', 0, 0xFF, 0, 1])
        );
        let m = meta(b"time");
        assert_eq!(m, b"\x00\x01time");
        assert!(is_meta(&m));
        assert!(!is_meta(&window_key(b"", 0, 0)) && !is_meta(&window_key(b"\0", 0, 0)));
        match decode_entry("w", Window, &m) {
            Err(StoreError::Corrupt { store, reason }) => {
                assert_eq!(store, "w");
                assert!(reason.contains("meta key"), "{reason}");
            }
            other => panic!("a meta key decoded as an entry: {other:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Encoded window keys compare as their (key, start, seq) and decode back to them.
        #[test]
        fn window_keys_compare_as_key_start_seq_and_decode_back(
            a in (record_key(), time(), prop_oneof![Just(0u32), any::<u32>()]),
            b in (record_key(), time(), prop_oneof![Just(0u32), any::<u32>()]),
        ) {
            let (ea, eb) = (window_key(&a.0, a.1, a.2), window_key(&b.0, b.1, b.2));
            prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
            let decoded = decode_entry("w", Window, &ea).map_err(fail)?;
            prop_assert_eq!(decoded, DecodedEntry { key: a.0.clone(), time: a.1, second: i64::from(a.2) });
        }

        /// Encoded session keys compare as their (key, end, start) and decode back to them.
        #[test]
        fn session_keys_compare_as_key_end_start_and_decode_back(
            a in (record_key(), time(), time()),
            b in (record_key(), time(), time()),
        ) {
            let (ea, eb) = (session_key(&a.0, a.1, a.2), session_key(&b.0, b.1, b.2));
            prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
            let decoded = decode_entry("s", Session, &ea).map_err(fail)?;
            prop_assert_eq!(decoded, DecodedEntry { key: a.0.clone(), time: a.1, second: a.2 });
        }

        /// `key_bounds(a)` holds an entry of `b` exactly when `a == b`, and no meta key.
        #[test]
        fn key_bounds_hold_exactly_the_entries_of_their_key(
            a in record_key(), b in record_key(), t in time(), u in time(), seq in any::<u32>(),
        ) {
            let (lower, upper) = key_bounds(&a);
            for entry in [window_key(&b, t, seq), session_key(&b, t, u)] {
                prop_assert_eq!(lower <= entry && entry < upper, a == b);
            }
            let m = meta(&b);
            prop_assert!(!(lower <= m && m < upper));
        }

        /// Any bytes decode or fail with a `Corrupt` naming the store; what decodes is exactly
        /// the encoding of what it decodes to.
        #[test]
        fn decoding_any_bytes_never_panics_and_what_decodes_encodes_back(
            bytes in prop_oneof![
                prop::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()], 0..40),
                (record_key(), prop::collection::vec(any::<u8>(), 10..18)).prop_map(|(k, tail)| {
                    let mut out = Vec::new();
                    encode_key(&k, &mut out);
                    out.extend(tail);
                    out
                }),
            ],
        ) {
            for kind in [Window, Session] {
                match decode_entry("s", kind, &bytes) {
                    Ok(d) => {
                        let again = match kind {
                            Window => window_key(&d.key, d.time, u32::try_from(d.second).map_err(|e| TestCaseError::fail(e.to_string()))?),
                            Session => session_key(&d.key, d.time, d.second),
                        };
                        prop_assert_eq!(&again, &bytes);
                    }
                    Err(StoreError::Corrupt { store, .. }) => prop_assert_eq!(store, "s"),
                    Err(e) => return Err(TestCaseError::fail(format!("not Corrupt: {e}"))),
                }
            }
        }
    }

    /// A model key: an entry (record key, entry time, second field) or a meta key's name.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum ModelKey {
        Entry(Vec<u8>, i64, i64),
        Meta(Vec<u8>),
    }

    /// What the store should hold: every entry ever written (visible iff its segment is live),
    /// the meta keys, the observed time and the expired writes.
    struct Model {
        kind: SegmentedKind,
        retention: i64,
        interval: i64,
        entries: BTreeMap<(Vec<u8>, i64, i64), Vec<u8>>,
        meta: BTreeMap<Vec<u8>, Vec<u8>>,
        observed: i64,
        expired: u64,
    }

    impl Model {
        fn segment(&self, t: i64) -> i64 {
            t.div_euclid(self.interval)
        }
        /// `segment_id(observed - retention + 1)`, computed without overflow.
        fn bound(&self) -> i64 {
            let t = i128::from(self.observed) - i128::from(self.retention) + 1;
            let id = t.div_euclid(i128::from(self.interval));
            i64::try_from(id).unwrap_or(i64::MIN)
        }
        fn visible(&self, t: i64) -> bool {
            self.segment(t) >= self.bound()
        }
        /// Where relative times count from.
        fn base(&self) -> i64 {
            if self.observed == i64::MIN {
                0
            } else {
                self.observed
            }
        }
        fn encode(&self, key: &ModelKey) -> Vec<u8> {
            match (key, self.kind) {
                (ModelKey::Meta(name), _) => meta(name),
                (ModelKey::Entry(k, t, s), Window) => {
                    window_key(k, *t, u32::try_from(*s).unwrap_or_default())
                }
                (ModelKey::Entry(k, t, s), Session) => session_key(k, *t, *s),
            }
        }
        /// The absolute key a generated write means now.
        fn resolve(&self, w: &W) -> (ModelKey, Option<Vec<u8>>) {
            match w {
                W::Entry {
                    key,
                    dt,
                    second,
                    value,
                } => {
                    let t = self.base().saturating_add(*dt);
                    (self.entry_key(key, t, *second), value.map(|v| vec![v]))
                }
                W::Meta { name, value } => (ModelKey::Meta(vec![*name]), value.map(|v| vec![v])),
            }
        }
        fn entry_key(&self, key: &[u8], t: i64, second: i64) -> ModelKey {
            match self.kind {
                Window => ModelKey::Entry(key.to_vec(), t, second),
                Session => ModelKey::Entry(key.to_vec(), t, t.saturating_sub(second * 3)),
            }
        }
        /// A batch: the observed time rises to its largest entry time first; writes into
        /// segments expired then are ignored and counted.
        fn apply(&mut self, writes: &[(ModelKey, Option<Vec<u8>>)]) {
            for (key, _) in writes {
                if let ModelKey::Entry(_, t, _) = key {
                    self.observed = self.observed.max(*t);
                }
            }
            for (key, value) in writes {
                match key {
                    ModelKey::Meta(name) => match value {
                        Some(v) => {
                            self.meta.insert(name.clone(), v.clone());
                        }
                        None => {
                            self.meta.remove(name);
                        }
                    },
                    ModelKey::Entry(k, t, s) => {
                        if !self.visible(*t) {
                            self.expired += 1;
                            continue;
                        }
                        match value {
                            Some(v) => {
                                self.entries.insert((k.clone(), *t, *s), v.clone());
                            }
                            None => {
                                self.entries.remove(&(k.clone(), *t, *s));
                            }
                        }
                    }
                }
            }
        }
        fn get(&self, key: &ModelKey) -> Option<Vec<u8>> {
            match key {
                ModelKey::Meta(name) => self.meta.get(name).cloned(),
                ModelKey::Entry(k, t, s) => self
                    .entries
                    .get(&(k.clone(), *t, *s))
                    .filter(|_| self.visible(*t))
                    .cloned(),
            }
        }
        /// Visible entries with `from <= key < to` and time in `[t0, t1]`, by segment, then key.
        fn entries_in(
            &self,
            from: &[u8],
            to: Option<&[u8]>,
            t0: i64,
            t1: i64,
        ) -> Vec<(Vec<u8>, Vec<u8>)> {
            let mut found: Vec<_> = self
                .entries
                .iter()
                .filter(|((_, t, _), _)| self.visible(*t) && (t0..=t1).contains(t))
                .map(|((k, t, s), v)| {
                    let key = self.encode(&ModelKey::Entry(k.clone(), *t, *s));
                    (self.segment(*t), key, v.clone())
                })
                .filter(|(_, key, _)| {
                    key.as_slice() >= from && to.is_none_or(|to| key.as_slice() < to)
                })
                .collect();
            found.sort();
            found.into_iter().map(|(_, k, v)| (k, v)).collect()
        }
        /// What `range` (or `for_each`, with no `to`) visits: meta keys, then entries.
        fn listing(&self, from: &[u8], to: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
            let mut all: Vec<_> = self
                .meta
                .iter()
                .map(|(name, v)| (meta(name), v.clone()))
                .filter(|(key, _)| {
                    key.as_slice() >= from && to.is_none_or(|to| key.as_slice() < to)
                })
                .collect();
            all.extend(self.entries_in(from, to, i64::MIN, i64::MAX));
            all
        }
        fn existing(&self, i: prop::sample::Index) -> Option<ModelKey> {
            if self.entries.is_empty() {
                return None;
            }
            let (k, t, s) = self.entries.keys().nth(i.index(self.entries.len()))?;
            Some(ModelKey::Entry(k.clone(), *t, *s))
        }
    }

    /// A generated write; its time is relative to the model's observed time.
    #[derive(Debug, Clone)]
    enum W {
        Entry {
            key: Vec<u8>,
            dt: i64,
            second: i64,
            value: Option<u8>,
        },
        Meta {
            name: u8,
            value: Option<u8>,
        },
    }

    #[derive(Debug, Clone)]
    enum Op {
        Write(W),
        DeleteExisting(prop::sample::Index),
        PutAt {
            key: Vec<u8>,
            time: i64,
            value: u8,
        },
        Batch(Vec<W>),
        Restore(Vec<W>),
        Get {
            key: Vec<u8>,
            dt: i64,
            second: i64,
        },
        GetExisting(prop::sample::Index),
        /// `bounds`: 0, the key bounds of `a`; 1, from the smaller key's lower bound to the
        /// larger's upper; 2, the raw bytes `a..b`.
        ScanTime {
            a: Vec<u8>,
            b: Vec<u8>,
            bounds: u8,
            dt: i64,
            len: i64,
        },
        /// `scan_time` over the key bounds of an existing entry's key, around its time.
        ScanExisting {
            entry: prop::sample::Index,
            dt: i64,
            len: i64,
        },
        Range {
            from: Vec<u8>,
            to: Vec<u8>,
        },
        Wipe,
        Reopen,
    }

    fn small_key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xFF, b'a']), 0..3)
    }

    fn raw_bound() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0xFF, b'a']), 0..4)
    }

    fn write() -> impl Strategy<Value = W> {
        prop_oneof![
            6 => (small_key(), -40i64..12, 0i64..4, prop::option::weighted(0.8, any::<u8>()))
                .prop_map(|(key, dt, second, value)| W::Entry { key, dt, second, value }),
            1 => (0u8..3, prop::option::weighted(0.8, any::<u8>()))
                .prop_map(|(name, value)| W::Meta { name, value }),
        ]
    }

    /// Writes on few keys, so that a batch often writes one key twice.
    fn dense_write() -> impl Strategy<Value = W> {
        prop_oneof![
            4 => (prop::sample::select(vec![vec![], vec![0u8]]), -2i64..1, prop::option::of(0u8..3))
                .prop_map(|(key, dt, value)| W::Entry { key, dt, second: 0, value }),
            1 => prop::option::of(0u8..3).prop_map(|value| W::Meta { name: 0, value }),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => write().prop_map(Op::Write),
            2 => any::<prop::sample::Index>().prop_map(Op::DeleteExisting),
            1 => (
                small_key(),
                prop::sample::select(vec![i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX]),
                any::<u8>(),
            ).prop_map(|(key, time, value)| Op::PutAt { key, time, value }),
            3 => prop::collection::vec(prop_oneof![write(), dense_write()], 0..8).prop_map(Op::Batch),
            2 => prop::collection::vec(prop_oneof![write(), dense_write()], 0..8).prop_map(Op::Restore),
            3 => (small_key(), -40i64..12, 0i64..4).prop_map(|(key, dt, second)| Op::Get { key, dt, second }),
            3 => any::<prop::sample::Index>().prop_map(Op::GetExisting),
            5 => (small_key(), small_key(), 0u8..3, -50i64..12, -3i64..60)
                .prop_map(|(a, b, bounds, dt, len)| Op::ScanTime { a, b, bounds, dt, len }),
            3 => (any::<prop::sample::Index>(), -30i64..1, 0i64..40)
                .prop_map(|(entry, dt, len)| Op::ScanExisting { entry, dt, len }),
            2 => (raw_bound(), raw_bound()).prop_map(|(from, to)| Op::Range { from, to }),
            1 => Just(Op::Wipe),
            2 => Just(Op::Reopen),
        ]
    }

    fn open(
        kind: SegmentedKind,
        retention: i64,
        interval: i64,
        dir: Option<&std::path::Path>,
    ) -> Result<SegmentedStore, TestCaseError> {
        match dir {
            Some(dir) => {
                SegmentedStore::persistent_in("s", kind, retention, interval, dir).map_err(fail)
            }
            None => Ok(SegmentedStore::in_memory("s", kind, retention, interval)),
        }
    }

    fn check_scan(
        store: &SegmentedStore,
        model: &Model,
        from: &[u8],
        to: &[u8],
        t0: i64,
        t1: i64,
    ) -> Result<(), TestCaseError> {
        let mut got = Vec::new();
        store
            .scan_time(from, to, t0, t1, &mut |k, v| {
                got.push((k.to_vec(), v.to_vec()))
            })
            .map_err(fail)?;
        prop_assert_eq!(
            got,
            // An empty `to` is no upper bound.
            model.entries_in(from, (!to.is_empty()).then_some(to), t0, t1),
            "scan_time {:?}..{:?} [{}, {}]",
            from,
            to,
            t0,
            t1
        );
        Ok(())
    }

    /// Runs `ops` on a store (on disk in `dir`, else in memory) and on the model, checking
    /// every read, and after every operation the whole contents, the observed time and the
    /// expired writes.
    fn run_against_model(
        kind: SegmentedKind,
        retention: i64,
        interval: i64,
        ops: &[Op],
        dir: Option<&std::path::Path>,
    ) -> Result<(), TestCaseError> {
        let mut store = open(kind, retention, interval, dir)?;
        let mut model = Model {
            kind,
            retention,
            interval,
            entries: BTreeMap::new(),
            meta: BTreeMap::new(),
            observed: i64::MIN,
            expired: 0,
        };
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Write(w) => {
                    let (key, value) = model.resolve(w);
                    let encoded = model.encode(&key);
                    match &value {
                        Some(v) => store.put(&encoded, v),
                        None => store.delete(&encoded),
                    }
                    .map_err(fail)?;
                    model.apply(&[(key, value)]);
                }
                Op::DeleteExisting(i) => {
                    if let Some(key) = model.existing(*i) {
                        store.delete(&model.encode(&key)).map_err(fail)?;
                        model.apply(&[(key, None)]);
                    }
                }
                Op::PutAt { key, time, value } => {
                    let key = model.entry_key(key, *time, 1);
                    store.put(&model.encode(&key), &[*value]).map_err(fail)?;
                    model.apply(&[(key, Some(vec![*value]))]);
                }
                Op::Batch(ws) => {
                    let writes: Vec<_> = ws.iter().map(|w| model.resolve(w)).collect();
                    let encoded: Vec<_> = writes
                        .iter()
                        .map(|(k, v)| (model.encode(k), v.clone()))
                        .collect();
                    store
                        .write_batch(&mut encoded.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
                        .map_err(fail)?;
                    model.apply(&writes);
                }
                Op::Restore(ws) => {
                    // As restoration gives them: each key once (its last write), ascending.
                    let mut last = BTreeMap::new();
                    for w in ws {
                        let (key, value) = model.resolve(w);
                        last.insert(model.encode(&key), (key, value));
                    }
                    store
                        .restore_sorted(
                            &mut last.iter().map(|(k, (_, v))| (k.as_slice(), v.as_deref())),
                        )
                        .map_err(fail)?;
                    let writes: Vec<_> = last.into_values().collect();
                    model.apply(&writes);
                }
                Op::Get { key, dt, second } => {
                    let key = model.entry_key(key, model.base().saturating_add(*dt), *second);
                    let found = store
                        .get_into(&model.encode(&key), &mut out)
                        .map_err(fail)?;
                    prop_assert_eq!(found.then(|| out.clone()), model.get(&key), "get {:?}", key);
                }
                Op::GetExisting(i) => {
                    if let Some(key) = model.existing(*i) {
                        let found = store
                            .get_into(&model.encode(&key), &mut out)
                            .map_err(fail)?;
                        prop_assert_eq!(
                            found.then(|| out.clone()),
                            model.get(&key),
                            "get {:?}",
                            key
                        );
                    }
                }
                Op::ScanTime {
                    a,
                    b,
                    bounds,
                    dt,
                    len,
                } => {
                    let (from, to) = match bounds {
                        0 => key_bounds(a),
                        1 => (key_bounds(a.min(b)).0, key_bounds(a.max(b)).1),
                        _ => (a.clone(), b.clone()),
                    };
                    let t0 = model.base().saturating_add(*dt);
                    check_scan(&store, &model, &from, &to, t0, t0.saturating_add(*len))?;
                }
                Op::ScanExisting { entry, dt, len } => {
                    if let Some(ModelKey::Entry(key, t, _)) = model.existing(*entry) {
                        let (from, to) = key_bounds(&key);
                        let t0 = t.saturating_add(*dt);
                        check_scan(&store, &model, &from, &to, t0, t0.saturating_add(*len))?;
                    }
                }
                Op::Range { from, to } => {
                    let mut got = Vec::new();
                    store
                        .range(from, to, &mut |k, v| got.push((k.to_vec(), v.to_vec())))
                        .map_err(fail)?;
                    prop_assert_eq!(
                        got,
                        model.listing(from, Some(to)),
                        "range {:?}..{:?}",
                        from,
                        to
                    );
                }
                Op::Wipe => {
                    store.wipe().map_err(fail)?;
                    model.entries.clear();
                    model.meta.clear();
                    model.observed = i64::MIN;
                }
                Op::Reopen => {
                    if dir.is_some() {
                        store.flush().map_err(fail)?;
                        drop(store);
                        store = open(kind, retention, interval, dir)?;
                        // The counter is the running store's, for a metric.
                        model.expired = 0;
                    }
                }
            }
            prop_assert_eq!(listing(&store), model.listing(&[], None), "after {:?}", op);
            prop_assert_eq!(store.observed_time(), model.observed, "after {:?}", op);
            prop_assert_eq!(store.expired_writes(), model.expired, "after {:?}", op);
            let live_segments: std::collections::BTreeSet<i64> = model
                .entries
                .keys()
                .filter(|(_, t, _)| model.visible(*t))
                .map(|(_, t, _)| model.segment(*t))
                .collect();
            if dir.is_none() {
                let visible = model
                    .entries
                    .keys()
                    .filter(|(_, t, _)| model.visible(*t))
                    .count();
                prop_assert_eq!(store.approximate_len(), visible + model.meta.len());
                prop_assert_eq!(
                    store.segment_ids(),
                    live_segments.into_iter().collect::<Vec<_>>()
                );
            } else {
                // On disk a segment emptied by deletes stays until it expires.
                let held = store.segment_ids();
                prop_assert!(live_segments.iter().all(|s| held.contains(s)));
                prop_assert!(held.iter().all(|&s| s >= model.bound()));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The in-memory window and session stores read as the model says, expiry included.
        #[test]
        fn the_in_memory_store_reads_like_its_model(
            retention in 1i64..60,
            interval in 1i64..25,
            ops in prop::collection::vec(op(), 1..50),
        ) {
            for kind in [Window, Session] {
                run_against_model(kind, retention, interval, &ops, None)?;
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// The persistent window and session stores read as the model says, expiry included,
        /// across closing and reopening.
        #[test]
        fn the_persistent_store_reads_like_its_model_across_reopening(
            retention in 1i64..60,
            interval in 1i64..25,
            ops in prop::collection::vec(op(), 1..50),
        ) {
            for kind in [Window, Session] {
                let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
                run_against_model(kind, retention, interval, &ops, Some(dir.path()))?;
            }
        }
    }

    fn keyspace_dirs(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir.join("keyspaces")).map_or(0, |d| d.count())
    }

    /// A write that moves the observed time past a segment's retention drops the segment whole:
    /// its entries go at once, later writes into it are ignored and counted, and on disk its
    /// keyspace is gone after reopening.
    #[test]
    fn expiring_a_segment_drops_it_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let persistent = |dir: &std::path::Path| {
            SegmentedStore::persistent_in("w", Window, 100, 10, dir).expect("open")
        };
        for mut store in [
            SegmentedStore::in_memory("w", Window, 100, 10),
            persistent(dir.path()),
        ] {
            for t in (0..50).step_by(5) {
                store.put(&window_key(b"k", t, 0), b"v").expect("put");
            }
            store.flush().expect("flush");
            assert_eq!(store.segment_ids(), [0, 1, 2, 3, 4]);
            let dirs_before = keyspace_dirs(dir.path());
            // 125 - 100 + 1 = 26: segments 0 and 1 (times 0..20) expire.
            store.put(&window_key(b"k", 125, 0), b"v").expect("put");
            assert_eq!(store.segment_ids(), [2, 3, 4, 12]);
            assert_eq!(store.segment_count(), 4);
            let (lo, hi) = key_bounds(b"k");
            let times: Vec<i64> = scanned(&store, &lo, &hi, i64::MIN, i64::MAX)
                .iter()
                .map(|k| store.decode(k).expect("decode").time)
                .collect();
            assert_eq!(times, [20, 25, 30, 35, 40, 45, 125]);
            let mut out = Vec::new();
            assert!(
                !store
                    .get_into(&window_key(b"k", 5, 0), &mut out)
                    .expect("get")
            );
            assert!(!store.is_live(19) && store.is_live(20));
            store.put(&window_key(b"k", 5, 0), b"late").expect("put");
            store.delete(&window_key(b"k", 15, 0)).expect("delete");
            assert_eq!(
                store.expired_writes(),
                2,
                "writes into expired segments are counted"
            );
            assert_eq!(store.segment_count(), 4, "and create no segment");
            if store.is_persistent() {
                store.flush().expect("flush");
                drop(store);
                let store = persistent(dir.path());
                assert_eq!(store.segment_ids(), [2, 3, 4, 12]);
                assert_eq!(store.observed_time(), 125);
                assert_eq!(
                    keyspace_dirs(dir.path()),
                    dirs_before - 2 + 1,
                    "two segments' keyspaces deleted, one created"
                );
            }
        }
    }

    /// A reopened store keeps its observed time: writes that were expired before stay ignored,
    /// and later writes go on expiring segments.
    /// The changelog position goes with the batch it covers, survives reopening, is not an
    /// entry (nor counted as one), and goes with a wipe.
    #[test]
    fn the_recorded_position_survives_reopening_and_goes_with_a_wipe() {
        use crate::state::StorePosition;
        let dir = tempfile::tempdir().expect("tempdir");
        let open =
            || SegmentedStore::persistent_in("s", Window, 1_000, 100, dir.path()).expect("open");
        let at = |offset| StorePosition {
            changelog: riffle_record::TopicPartition::new("app-s-changelog", 3),
            offset,
        };
        let mut store = open();
        assert_eq!(
            store.position().ok(),
            Some(None),
            "a new store records none"
        );
        let key = window_key(b"a", 10, 0);
        store
            .write_batch_at(
                &mut std::iter::once((key.as_slice(), Some(&b"1"[..]))),
                &at(7),
            )
            .expect("batch");
        assert_eq!(store.approximate_len(), 1, "the position is not an entry");
        drop(store);
        let mut store = open();
        assert_eq!(store.position().ok(), Some(Some(at(7))));
        assert_eq!(listing(&store).len(), 1, "nor visited as one");
        store.record_position(&at(9)).expect("record");
        drop(store);
        let mut store = open();
        assert_eq!(store.position().ok(), Some(Some(at(9))));
        store.wipe().expect("wipe");
        assert_eq!(store.position().ok(), Some(None));
        drop(store);
        assert_eq!(open().position().ok(), Some(None), "gone on disk too");
    }

    #[test]
    fn a_reopened_store_keeps_its_observed_time_and_goes_on_expiring() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open =
            || SegmentedStore::persistent_in("s", Session, 50, 10, dir.path()).expect("open");
        let mut store = open();
        let batch = [
            (session_key(b"a", 10, 0), b"1".to_vec()),
            (session_key(b"b", 70, 60), b"2".to_vec()),
            (meta(b"stream-time"), b"70".to_vec()),
        ];
        store
            .write_batch(
                &mut batch
                    .iter()
                    .map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
            )
            .expect("batch");
        // 70 - 50 + 1 = 21: segment 1 expired, segment 2 (times 20..30) live.
        assert_eq!(store.segment_ids(), [7]);
        drop(store);
        let mut store = open();
        assert_eq!(store.observed_time(), 70);
        store.put(&session_key(b"c", 15, 12), b"late").expect("put");
        assert_eq!(store.expired_writes(), 1);
        store.put(&session_key(b"c", 25, 22), b"kept").expect("put");
        assert_eq!(store.segment_ids(), [2, 7]);
        store.put(&session_key(b"d", 100, 90), b"4").expect("put");
        assert_eq!(
            store.segment_ids(),
            [7, 10],
            "100 - 50 + 1 = 51: segment 2 goes"
        );
        let all = listing(&store);
        assert_eq!(
            all.first().map(|(k, v)| (k.clone(), v.clone())),
            Some((meta(b"stream-time"), b"70".to_vec()))
        );
        assert_eq!(all.len(), 3, "the meta key and two sessions: {all:?}");
        store.wipe().expect("wipe");
        assert_eq!(
            (
                store.observed_time(),
                store.segment_count(),
                listing(&store).len()
            ),
            (i64::MIN, 0, 0)
        );
        drop(store);
        assert_eq!(
            open().observed_time(),
            i64::MIN,
            "a wiped store starts over"
        );
    }

    /// A batch writing one key more than once (a store with caching disabled gets every write)
    /// ends with the last write, also after reopening: pins fjall's behaviour that
    /// `Disk::commit` relies on.
    #[test]
    fn a_batch_writing_a_key_twice_keeps_the_last_write_also_after_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open =
            || SegmentedStore::persistent_in("w", Window, 100, 10, dir.path()).expect("open");
        let mut store = open();
        let key = |i: u8| window_key(&[i], 5, 0);
        let (k0, k1, k2, k3) = (key(0), key(1), key(2), key(3));
        let writes: [(&[u8], Option<&[u8]>); 8] = [
            (&k0, Some(b"1")),
            (&k0, Some(b"2")),
            (&k1, Some(b"2")),
            (&k1, Some(b"1")),
            (&k2, Some(b"1")),
            (&k2, None),
            (&k3, None),
            (&k3, Some(b"1")),
        ];
        store.write_batch(&mut writes.into_iter()).expect("batch");
        let expected = vec![
            (k0.clone(), b"2".to_vec()),
            (k1.clone(), b"1".to_vec()),
            (k3.clone(), b"1".to_vec()),
        ];
        assert_eq!(listing(&store), expected);
        store.flush().expect("flush");
        drop(store);
        assert_eq!(listing(&open()), expected, "after replaying the journal");
    }

    /// Segment ids mean other times under another kind or segment interval: opening so is
    /// refused.
    #[test]
    fn a_store_reopened_with_another_kind_or_segment_interval_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store =
            SegmentedStore::persistent_in("w", Window, 100, 10, dir.path()).expect("open");
        store.put(&window_key(b"k", 5, 0), b"v").expect("put");
        drop(store);
        for (kind, interval) in [(Window, 20), (Session, 10)] {
            match SegmentedStore::persistent_in("w", kind, 100, interval, dir.path()) {
                Err(StoreError::Corrupt { store, reason }) => {
                    assert_eq!(store, "w");
                    assert!(
                        reason.contains("a window store with 10 ms segments"),
                        "{reason}"
                    );
                }
                other => panic!("opened as {kind:?} with {interval} ms segments: {other:?}"),
            }
        }
        let store = SegmentedStore::persistent_in("w", Window, 500, 10, dir.path())
            .expect("another retention is fine");
        assert_eq!(store.approximate_len(), 1);
    }

    /// A key that is neither an entry of the store's kind nor a meta key fails the whole batch
    /// with a `Corrupt` naming the store, before anything is written; reads refuse it too.
    #[test]
    fn malformed_keys_are_corrupt_errors_and_fail_their_batch_whole() {
        let mut store = SegmentedStore::in_memory("wins", Window, 100, 10);
        let good = window_key(b"k", 5, 0);
        let session = session_key(b"k", 5, 0);
        for bad in [&session[..], b"\x00\x02observed", b"k", b""] {
            let mut batch = [(&good[..], Some(&b"v"[..])), (bad, Some(&b"v"[..]))].into_iter();
            match store.write_batch(&mut batch) {
                Err(StoreError::Corrupt { store, .. }) => assert_eq!(store, "wins"),
                other => panic!("{bad:?} written: {other:?}"),
            }
            assert!(
                store.get_into(bad, &mut Vec::new()).is_err(),
                "{bad:?} read"
            );
        }
        assert_eq!(listing(&store), []);
        assert_eq!(store.observed_time(), i64::MIN);
        assert!(matches!(
            parse_entry(Window, &window_key(b"k", 1, 2)[..14]),
            Err(Malformed::Tail { len: 11, .. })
        ));
    }

    /// Behind the trait, a segmented store is found by `as_segmented`; other stores are not.
    #[test]
    fn as_segmented_finds_a_segmented_store_behind_the_trait() {
        let stores: Vec<Box<dyn BytesStore>> = vec![
            Box::new(SegmentedStore::in_memory("w", Session, 100, 10)),
            Box::new(InMemoryKeyValueStore::new("kv")),
        ];
        assert_eq!(
            stores[0].as_segmented().map(SegmentedStore::kind),
            Some(Session)
        );
        assert_eq!(
            stores[0].as_segmented().map(SegmentedStore::retention_ms),
            Some(100)
        );
        assert_eq!(
            stores[0]
                .as_segmented()
                .map(SegmentedStore::segment_interval_ms),
            Some(10)
        );
        assert!(stores[1].as_segmented().is_none());
    }
}
