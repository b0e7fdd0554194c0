//! The counters of a stream thread, readable from any thread while it runs.
//!
//! Writes are relaxed atomic adds on the thread's own slot: no lock and no allocation on the
//! record path. Readers get plain numbers through the getters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one stream thread, readable while it runs ([`crate::StreamsApp::thread_metrics`]).
#[derive(Debug, Default)]
pub struct ThreadMetrics {
    pub(crate) loops: AtomicU64,
    pub(crate) records: AtomicU64,
    pub(crate) dropped_records: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) snapshot_changes: AtomicU64,
    pub(crate) records_restored: AtomicU64,
    pub(crate) snapshot_unchanged: AtomicU64,
    pub(crate) snapshot_full_rebuilds: AtomicU64,
    pub(crate) snapshot_incremental_updates: AtomicU64,
    os_thread_id: AtomicU64,
}

impl ThreadMetrics {
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

/// What the segmented window and session stores of this process have expired so far: whole
/// segments dropped once stream time passed them by the retention. Process-wide totals, for
/// benchmarks and diagnostics ([`segment_expiry_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentExpiry {
    /// Times a store dropped one or more segments (at most once per store per commit).
    pub drops: u64,
    /// Segments dropped.
    pub segments: u64,
    /// Entries the dropped segments held (on disk, fjall's approximate count).
    pub entries: u64,
    /// Time spent dropping them, in nanoseconds.
    pub nanos: u64,
}

static EXPIRY_DROPS: AtomicU64 = AtomicU64::new(0);
static EXPIRY_SEGMENTS: AtomicU64 = AtomicU64::new(0);
static EXPIRY_ENTRIES: AtomicU64 = AtomicU64::new(0);
static EXPIRY_NANOS: AtomicU64 = AtomicU64::new(0);

/// The segment expiry of every window and session store of this process so far. Counted only
/// when a store drops a segment (at a commit), never on the record path.
pub fn segment_expiry_totals() -> SegmentExpiry {
    SegmentExpiry {
        drops: EXPIRY_DROPS.load(Ordering::Relaxed),
        segments: EXPIRY_SEGMENTS.load(Ordering::Relaxed),
        entries: EXPIRY_ENTRIES.load(Ordering::Relaxed),
        nanos: EXPIRY_NANOS.load(Ordering::Relaxed),
    }
}

/// A store dropped `segments` segments holding `entries` entries in `elapsed`.
pub(crate) fn record_segment_drop(segments: u64, entries: u64, elapsed: std::time::Duration) {
    EXPIRY_DROPS.fetch_add(1, Ordering::Relaxed);
    EXPIRY_SEGMENTS.fetch_add(segments, Ordering::Relaxed);
    EXPIRY_ENTRIES.fetch_add(entries, Ordering::Relaxed);
    EXPIRY_NANOS.fetch_add(
        elapsed.as_nanos().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}
