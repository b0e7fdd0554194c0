//! What the segmented window and session stores of this process have done, process-wide:
//! counted per written batch, per segment created and per drop, never per record.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the segmented window and session stores of this process have written and expired so
/// far: entries written at commits, writes ignored for their segment having expired, and whole
/// segments dropped once stream time passed them by the retention. Process-wide totals, for
/// benchmarks and diagnostics ([`segmented_store_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentedStoreTotals {
    /// Entry writes (puts and deletes) applied to segments.
    pub writes: u64,
    /// Entry writes ignored because their segment had expired by the time they were written
    /// (at the commit of a batch whose later entries moved the store's time past them).
    pub expired_writes: u64,
    /// Times a store dropped one or more segments (at most once per store per commit).
    pub drops: u64,
    /// Segments dropped.
    pub segments_dropped: u64,
    /// Entries the dropped segments held (on disk, fjall's approximate count).
    pub entries_dropped: u64,
    /// Time spent dropping segments, in nanoseconds.
    pub drop_nanos: u64,
    /// Segments created on disk (a fjall keyspace each; segments in memory are not counted).
    pub segments_created: u64,
    /// Time spent creating them, in nanoseconds.
    pub create_nanos: u64,
}

impl SegmentedStoreTotals {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &SegmentedStoreTotals) -> SegmentedStoreTotals {
        SegmentedStoreTotals {
            writes: self.writes - earlier.writes,
            expired_writes: self.expired_writes - earlier.expired_writes,
            drops: self.drops - earlier.drops,
            segments_dropped: self.segments_dropped - earlier.segments_dropped,
            entries_dropped: self.entries_dropped - earlier.entries_dropped,
            drop_nanos: self.drop_nanos - earlier.drop_nanos,
            segments_created: self.segments_created - earlier.segments_created,
            create_nanos: self.create_nanos - earlier.create_nanos,
        }
    }
}

static SEGMENT_WRITES: AtomicU64 = AtomicU64::new(0);
static EXPIRED_WRITES: AtomicU64 = AtomicU64::new(0);
static SEGMENT_DROPS: AtomicU64 = AtomicU64::new(0);
static SEGMENTS_DROPPED: AtomicU64 = AtomicU64::new(0);
static ENTRIES_DROPPED: AtomicU64 = AtomicU64::new(0);
static DROP_NANOS: AtomicU64 = AtomicU64::new(0);
static SEGMENTS_CREATED: AtomicU64 = AtomicU64::new(0);
static CREATE_NANOS: AtomicU64 = AtomicU64::new(0);

/// The writes and segment expiry of every window and session store of this process so far.
/// Counted once per written batch (a commit), per segment created and per drop, never per
/// record.
pub fn segmented_store_totals() -> SegmentedStoreTotals {
    SegmentedStoreTotals {
        writes: SEGMENT_WRITES.load(Ordering::Relaxed),
        expired_writes: EXPIRED_WRITES.load(Ordering::Relaxed),
        drops: SEGMENT_DROPS.load(Ordering::Relaxed),
        segments_dropped: SEGMENTS_DROPPED.load(Ordering::Relaxed),
        entries_dropped: ENTRIES_DROPPED.load(Ordering::Relaxed),
        drop_nanos: DROP_NANOS.load(Ordering::Relaxed),
        segments_created: SEGMENTS_CREATED.load(Ordering::Relaxed),
        create_nanos: CREATE_NANOS.load(Ordering::Relaxed),
    }
}

/// A store applied a batch of `writes` entry writes and ignored `expired` more.
pub(crate) fn record_segment_writes(writes: u64, expired: u64) {
    SEGMENT_WRITES.fetch_add(writes, Ordering::Relaxed);
    EXPIRED_WRITES.fetch_add(expired, Ordering::Relaxed);
}

/// A store dropped `segments` segments holding `entries` entries in `elapsed`.
pub(crate) fn record_segment_drop(segments: u64, entries: u64, elapsed: std::time::Duration) {
    SEGMENT_DROPS.fetch_add(1, Ordering::Relaxed);
    SEGMENTS_DROPPED.fetch_add(segments, Ordering::Relaxed);
    ENTRIES_DROPPED.fetch_add(entries, Ordering::Relaxed);
    DROP_NANOS.fetch_add(
        elapsed.as_nanos().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}

/// A store created a segment on disk in `elapsed`.
pub(crate) fn record_segment_created(elapsed: std::time::Duration) {
    SEGMENTS_CREATED.fetch_add(1, Ordering::Relaxed);
    CREATE_NANOS.fetch_add(
        elapsed.as_nanos().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}
