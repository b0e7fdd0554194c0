//! The counters of a stream thread, readable from any thread while it runs.
//!
//! Writes are relaxed atomic adds on the thread's own slot: no lock and no allocation on the
//! record path. Readers get plain numbers through the getters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::telemetry::Latency;

/// Counters of one stream thread, readable while it runs ([`crate::StreamsApp::thread_metrics`]).
#[derive(Debug, Default)]
pub struct ThreadMetrics {
    /// The thread's name (`<application_id>-StreamThread-<n>`), set when it starts.
    name: Mutex<String>,
    /// Each loop's fetch phase.
    pub(crate) poll: Latency,
    /// Time spent processing records, in nanoseconds.
    pub(crate) process_nanos: AtomicU64,
    pub(crate) commit: Latency,
    pub(crate) punctuate: Latency,
    /// Changelog records the restoring tasks have left (published by the state updater).
    pub(crate) restore_remaining: Arc<AtomicU64>,
    pub(crate) loops: AtomicU64,
    pub(crate) records: AtomicU64,
    pub(crate) dropped_records: AtomicU64,
    pub(crate) commits: AtomicU64,
    /// Times the thread was fenced and closed its tasks dirty (exactly-once).
    pub(crate) fenced: AtomicU64,
    pub(crate) snapshot_changes: AtomicU64,
    pub(crate) records_restored: AtomicU64,
    pub(crate) snapshot_unchanged: AtomicU64,
    pub(crate) snapshot_full_rebuilds: AtomicU64,
    pub(crate) snapshot_incremental_updates: AtomicU64,
    os_thread_id: AtomicU64,
}

impl ThreadMetrics {
    /// The thread's name; empty before it started.
    pub fn name(&self) -> String {
        self.name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_name(&self, name: &str) {
        *self.name.lock().unwrap_or_else(PoisonError::into_inner) = name.to_owned();
    }

    /// (records processed, nanoseconds spent processing them).
    pub(crate) fn process_time(&self) -> (u64, f64) {
        (
            self.records(),
            self.process_nanos.load(Ordering::Relaxed) as f64,
        )
    }

    /// Loop iterations so far.
    pub fn loops(&self) -> u64 {
        self.loops.load(Ordering::Relaxed)
    }

    /// Records processed so far.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Records dropped so far (Kafka's `dropped-records`): late for every window they belong
    /// to, counted once per window they missed.
    pub fn dropped_records(&self) -> u64 {
        self.dropped_records.load(Ordering::Relaxed)
    }

    /// Commits done so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Times the thread was fenced (another producer or member took its place) and closed
    /// its tasks dirty.
    pub fn fenced(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }

    /// Changelog records restored into this thread's stores so far.
    pub fn records_restored(&self) -> u64 {
        self.records_restored.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that changed the snapshot.
    pub fn snapshot_changes(&self) -> u64 {
        self.snapshot_changes.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that returned at once because nothing changed.
    pub fn snapshot_unchanged(&self) -> u64 {
        self.snapshot_unchanged.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that rebuilt it from scratch.
    pub fn snapshot_full_rebuilds(&self) -> u64 {
        self.snapshot_full_rebuilds.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that re-evaluated only the changed tasks.
    pub fn snapshot_incremental_updates(&self) -> u64 {
        self.snapshot_incremental_updates.load(Ordering::Relaxed)
    }

    /// The OS thread id (Linux tid), for reading the thread's CPU time; 0 until known.
    pub fn os_thread_id(&self) -> u64 {
        self.os_thread_id.load(Ordering::Relaxed)
    }

    pub(crate) fn set_os_thread_id(&self) {
        // /proc/thread-self links to /proc/<pid>/task/<tid>.
        let tid = std::fs::read_link("/proc/thread-self").ok().and_then(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse().ok())
        });
        self.os_thread_id.store(tid.unwrap_or(0), Ordering::Relaxed);
    }
}

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
