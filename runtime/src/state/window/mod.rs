//! The segmented store under windowed aggregations: window and session stores whose entries are
//! time-bounded and whose old data is dropped a whole segment at a time, as Kafka Streams'
//! segmented window and session stores do.
//!
//! [`SegmentedStore`] is a [`BytesStore`](super::BytesStore) over *entry keys*: a record key and its window's or
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
//!
//! On disk an entry key longer than fjall takes (65,503 bytes) is written as
//! runtime/src/state/long_keys.rs lays it out, and every read returns it in the order above.
//!
//! The store is split by concern: `key` (the encoding), `segments` (the segments in memory and
//! on disk, and the read paths over them), `writes` (a batch's classification, expiry, reads by
//! time), `bytes_store` (the [`BytesStore`](super::BytesStore) implementation); this file holds
//! [`SegmentedStore`], how it opens and what it says of itself.

mod bytes_store;
mod key;
mod segments;
#[cfg(test)]
mod tests;
mod writes;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use riffle_state_dir::TaskId;

use super::StoreError;
use super::database::StoreDatabase;
use super::long_keys::DiskError;
use super::persistent::{backend_error, disk_error};

use key::*;
pub(crate) use key::{
    DecodedEntry, SegmentedKind, decode_entry, encode_key, is_meta, key_bounds, meta_key,
    session_entry_key, window_entry_key,
};
use segments::*;
pub(super) use writes::narrow_to_times;

/// A window or session store: entries in time segments, dropped a segment at a time once the
/// observed time has passed them by the retention. See the module documentation.
///
/// Its [`BytesStore`](super::BytesStore) reads ([`for_each`](super::BytesStore::for_each),
/// [`range`](super::BytesStore::range)) visit the meta keys first, then the entries segment by
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
        let mut positioned = meta.contains_key(POSITION_KEY).map_err(err)?;
        // A segment listed but whose keyspace is gone (its directory deleted): the position
        // would restore only the changelog's tail over the data it lost. Without the position,
        // the task wipes the store and restores it from the changelog's start.
        let listed = meta.get(SEGMENTS_KEY).map_err(err)?;
        let lost: Vec<i64> = listed
            .as_deref()
            .map(decode_segments)
            .unwrap_or_default()
            .into_iter()
            .filter(|id| !segments.contains_key(id))
            .collect();
        if !lost.is_empty() {
            tracing::warn!(store = %name, path = %dir.join("keyspaces").display(), keyspaces = ?lost.iter().map(|&segment| format!("w{id}.{}", segment_name(segment))).collect::<Vec<_>>(), "segments of the store are missing, their keyspace directories under the path deleted: dropping its changelog position, so that it restores from its changelog");
            meta.remove(POSITION_KEY)
                .and_then(|()| meta.insert(SEGMENTS_KEY, encode_segments(segments.keys())))
                .map_err(err)?;
            positioned = false;
        }
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
                listed: listed.is_some(),
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

    fn err(&self, e: impl Into<DiskError>) -> StoreError {
        let path = match &self.backend {
            Backend::Disk(d) => d.db.path(),
            Backend::Memory(_) => Path::new("(memory)"),
        };
        disk_error(&self.name, path, e.into())
    }
}
