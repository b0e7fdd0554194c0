//! Where a segmented store's entries live: the segments and meta keys in memory (maps) or on
//! disk (a fjall keyspace per segment in the instance's [`StoreDatabase`]), how a batch's
//! writes are classified and applied to either, and the read paths over both (`Space`).
//!
//! Segments are created and dropped whole here; which ones expire is the store's decision
//! (`SegmentedStore::drop_expired`).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry as MapEntry;
use std::ops::Bound;
use std::sync::Arc;

use fjall::Keyspace;

use crate::state::StorePosition;
use crate::state::database::StoreDatabase;
use crate::state::long_keys::{DiskError, SEGMENT};
use crate::state::segment_totals::record_segment_created;

use super::key::*;

/// On disk, in the meta keyspace: the observed time, 8 bytes big-endian.
pub(super) const OBSERVED_KEY: &[u8] = b"\x00\x02observed";
/// On disk, in the meta keyspace: the kind and segment interval the store was written with.
pub(super) const LAYOUT_KEY: &[u8] = b"\x00\x02layout";
/// On disk, in the meta keyspace: the changelog position of the data ([`StorePosition`]).
pub(super) const POSITION_KEY: &[u8] = b"\x00\x02position";
/// On disk, in the meta keyspace: the segments the store holds (each id 8 bytes big-endian,
/// ascending), written in the batch that creates one and before any is dropped, so a segment
/// whose keyspace is found missing is told from one never written.
pub(super) const SEGMENTS_KEY: &[u8] = b"\x00\x02segments";
/// The fjall keyspace of the meta keys (and of the store's own keys).
pub(super) const META_KEYSPACE: &str = "meta";
/// The fjall keyspace of segment `id` is `seg-<id>`.
pub(super) const SEGMENT_PREFIX: &str = "seg-";

/// The first live segment: `segment_id(observed - retention + 1)`, exactly (no overflow).
pub(super) fn live_bound(observed: i64, retention_ms: i64, segment_interval_ms: i64) -> i64 {
    let t = i128::from(observed) - i128::from(retention_ms) + 1;
    let id = t.div_euclid(i128::from(segment_interval_ms));
    i64::try_from(id).unwrap_or(if id < 0 { i64::MIN } else { i64::MAX })
}

/// The value of [`SEGMENTS_KEY`] for `ids`.
pub(super) fn encode_segments<'a>(ids: impl Iterator<Item = &'a i64>) -> Vec<u8> {
    ids.flat_map(|id| id.to_be_bytes()).collect()
}

/// The segment ids [`encode_segments`] wrote (a trailing part of fewer than 8 bytes ignored).
pub(super) fn decode_segments(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .filter_map(|id| <[u8; 8]>::try_from(id).ok().map(i64::from_be_bytes))
        .collect()
}

pub(super) fn segment_name(id: i64) -> String {
    format!("{SEGMENT_PREFIX}{id}")
}

pub(super) fn layout(kind: SegmentedKind, segment_interval_ms: i64) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = kind.to_byte();
    out[1..].copy_from_slice(&segment_interval_ms.to_be_bytes());
    out
}

pub(super) fn describe_layout(bytes: &[u8]) -> String {
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
pub(super) enum Target {
    Meta,
    Segment { segment: i64, time: i64 },
}

/// One write of a batch: where it goes, its key, its value (`None` deletes).
pub(super) type Write<'k, 'v> = (Target, &'k [u8], Option<&'v [u8]>);

/// A batch of writes, classified and filtered: what it leaves for the segments and the meta keys.
pub(super) struct Planned<'k, 'v> {
    /// The writes to apply, in the batch's order, without those into expired segments.
    pub(super) writes: Vec<Write<'k, 'v>>,
    /// The observed time after the batch.
    pub(super) observed: i64,
    /// Writes left out for their segment being expired.
    pub(super) expired: u64,
}

/// What the read paths need of a segment or of the meta keys: a map in memory, a fjall keyspace
/// on disk.
pub(super) trait Space {
    /// Copies the value of `key` into `out` (cleared first); `false` if there is none.
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, DiskError>;
    /// Visits the entries with `lo <= key < hi` (`None`: unbounded) in key order while `f`
    /// returns `true`; `false` if `f` stopped it.
    fn visit(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool, DiskError>;
}

pub(super) type MemorySegment = BTreeMap<Vec<u8>, Vec<u8>>;

impl Space for MemorySegment {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, DiskError> {
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
    ) -> Result<bool, DiskError> {
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

/// On disk, keys longer than fjall takes are kept as runtime/src/state/long_keys.rs lays them
/// out, and read back in key order.
impl Space for Keyspace {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, DiskError> {
        SEGMENT.get(self, &[], key, out)
    }
    fn visit(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool, DiskError> {
        SEGMENT.visit(self, &[], lo, hi, f)
    }
}

/// Visits the meta keys, then each segment's entries, with `from <= key < to`.
pub(super) fn visit_all<S: Space>(
    meta: &S,
    segments: &BTreeMap<i64, S>,
    from: &[u8],
    to: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), DiskError> {
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
pub(super) fn visit_segments<S: Space>(
    segments: &BTreeMap<i64, S>,
    first: i64,
    last: i64,
    lo: &[u8],
    hi: Option<&[u8]>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), DiskError> {
    for segment in segments.range(first..=last).map(|(_, s)| s) {
        if !segment.visit(lo, hi, f)? {
            break;
        }
    }
    Ok(())
}

pub(super) fn read_in<S: Space>(
    meta: &S,
    segments: &BTreeMap<i64, S>,
    target: Target,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, DiskError> {
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
pub(super) struct Memory {
    pub(super) meta: MemorySegment,
    pub(super) segments: BTreeMap<i64, MemorySegment>,
}

/// Writes `value` at `key`, reusing the value's buffer if the key is there. One walk down the
/// tree: a segment's writes are mostly new keys (windows), so the key is copied up front.
pub(super) fn put_reusing(space: &mut MemorySegment, key: &[u8], value: &[u8]) {
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
    pub(super) fn apply(&mut self, writes: &[Write<'_, '_>]) {
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
pub(super) struct Disk {
    pub(super) db: Arc<StoreDatabase>,
    /// The store's id in the database.
    pub(super) id: u32,
    pub(super) meta: Keyspace,
    pub(super) segments: BTreeMap<i64, Keyspace>,
    /// The meta keyspace holds [`SEGMENTS_KEY`] (one of the store's own keys).
    pub(super) listed: bool,
}

/// The keyspace of segment `id` of store `store`, created if it is new.
pub(super) fn segment_or_create<'a>(
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
    pub(super) fn commit(
        &mut self,
        writes: &[Write<'_, '_>],
        observed: Option<i64>,
        position: Option<&StorePosition>,
    ) -> Result<(), DiskError> {
        let mut batch = self.db.db().batch();
        let held = self.segments.len();
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
            let fjall_key = SEGMENT.key(&[], key);
            match value {
                Some(value) if SEGMENT.is_long(key) => {
                    batch.insert(space, fjall_key, SEGMENT.value(key, value)?)
                }
                Some(value) => batch.insert(space, fjall_key, value),
                None => batch.remove(space, fjall_key),
            }
        }
        if let Some(observed) = observed {
            batch.insert(&self.meta, OBSERVED_KEY, &observed.to_be_bytes()[..]);
        }
        if let Some(position) = position {
            batch.insert(&self.meta, POSITION_KEY, position.encode());
        }
        if self.segments.len() != held {
            batch.insert(
                &self.meta,
                SEGMENTS_KEY,
                encode_segments(self.segments.keys()),
            );
        }
        batch.commit()?;
        self.listed |= self.segments.len() != held;
        Ok(())
    }
}

pub(super) enum Backend {
    Memory(Memory),
    Disk(Disk),
}
