//! One partition: a directory of segments, the offset after its last record, and whether it has
//! appends that are not yet durable. All access goes through the partition's own lock, so
//! partitions append and fetch in parallel.
//!
//! Across processes (log/FORMAT.md, *Many processes*): every write happens under the OS lock of
//! the partition's `lock` file, after catching up with what other processes appended since
//! (re-reading the active segment's new batches, adopting a segment another process rolled).
//! Only a writer holding that lock ever cuts a torn tail, so no process cuts another's
//! in-flight batch; readers take no lock and see whole batches only. This module never waits
//! for another lock while holding a partition's.
//!
//! This file owns the [`Partition`] type, its fields and its short surface (the end offset,
//! sizes, poisoning); each concern is an `impl Partition` block of its own file:
//!
//! - `recovery.rs`: opening a partition, catching up with other processes (their appends,
//!   rolls, deletions and compactions), cutting a torn tail;
//! - `lock.rs`: the partition's `lock` file: its OS lock, its marks, and leases;
//! - `recovery_point.rs`: the recovery point (the offset below which records were fsynced),
//!   kept in the lock file;
//! - `retention.rs`: the start offset and its `start` file, retention, deleting records;
//! - `append.rs`: appends, rolling a segment, fsyncs;
//! - `fetch.rs`: reads;
//! - `compact/`: compaction.
//!
//! This file must never do that work itself: it holds the state the files share, and its
//! accessors call into them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use riffle_record::TopicPartition;

use crate::error::{Error, Result};
use crate::options::LogOptions;
use crate::segment::Segment;
use crate::storage::{Storage, StorageFile};

mod append;
mod compact;
mod fetch;
mod lock;
mod recovery;
mod recovery_point;
mod retention;

pub use compact::CompactionReport;
pub(crate) use compact::read_cleaning;
pub(crate) use lock::{LOCK_FILE, Locked};
pub(crate) use recovery_point::{read_recovery_point, write_recovery_point};
pub(crate) use retention::{START_FILE, encode_start, parse_start, read_start};

#[derive(Debug)]
pub(crate) struct Partition {
    tp: TopicPartition,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    /// Sorted by base offset; the last one takes appends. Empty only in a read-only log whose
    /// partition has no segment yet.
    segments: Vec<Segment>,
    /// The log start offset: the first offset still readable (log/FORMAT.md, *Start offset*).
    /// Segments wholly below it are deleted; the first one may start before it.
    start: u64,
    next_offset: u64,
    /// Byte position after the last whole batch of the active segment: what fetches read up to
    /// (bytes past it are a batch another process is still writing, or a torn tail).
    active_end: u64,
    /// Files were created in `dir` since the last sync.
    dir_dirty: bool,
    /// Sealed segments (by index) whose seal waits for the next directory sync (`Never`).
    unsealed: Vec<usize>,
    /// The recovery point as this handle last read or wrote it: every record below it was
    /// fsynced (`recovery_point.rs`).
    recovery_point: u64,
    /// Plain appends are not yet durable (and not in the transaction journal either). Batches
    /// written by transactions leave it alone: the journal holds them until a checkpoint.
    pub(crate) unsynced: bool,
    /// A failed write could not be rolled back: refuse work until reopened. Holds what failed.
    poisoned: Option<String>,
    read_only: bool,
    /// The open `lock` file (see the module docs), if kept open.
    lock: Option<Box<dyn StorageFile>>,
    /// The lock is held by this handle.
    locked: bool,
    /// The active segment's base as the lock file said when the lock was taken (`None`: it
    /// did not say, or the lock is not held).
    lock_active_base: Option<u64>,
    /// Lock files the log keeps open, shared by its partitions.
    locks_open: Arc<AtomicUsize>,
    /// Other processes may open the directory (a file-backed log): take the OS lock to write,
    /// catch up with their appends. A memory-backed log has one handle, which knows everything.
    cross_process: bool,
    /// The lock kept between appends (log/src/lease.rs); `None`: it is released after each
    /// write.
    lease: Option<Lease>,
    /// On the log's list of leased partitions (only its releaser takes it off).
    lease_listed: bool,
    /// The cleaner checkpoint as this handle last read or wrote it (`None`: not read yet).
    cleaned_to: Option<u64>,
    /// When this handle last found another process writing here (it waited for the lock, or
    /// caught up with their batches): no lease until
    /// [`CONTENDED_FOR`](crate::lease::CONTENDED_FOR) after it.
    contended_at: Option<Instant>,
}

/// A partition lock kept between appends: when it was taken, and this handle's last append
/// under it.
#[derive(Debug)]
struct Lease {
    since: Instant,
    last: Instant,
}

impl Partition {
    pub(crate) fn end_offset(&self) -> u64 {
        self.next_offset
    }

    /// The end offset after catching up with other processes' appends.
    pub(crate) fn latest_end_offset(&mut self) -> Result<u64> {
        self.check_poisoned()?;
        self.catch_up()?;
        self.verify_active()?;
        Ok(self.next_offset)
    }

    /// Bytes in the partition's segment files.
    pub(crate) fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    /// The base offset of the active segment.
    pub(crate) fn active_base(&self) -> u64 {
        self.segments.last().map_or(self.next_offset, |s| s.base)
    }

    /// How many segments the partition has.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn check_poisoned(&self) -> Result<()> {
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                what: format!("{} ({cause})", self.tp),
            });
        }
        Ok(())
    }

    /// Refuses all work until the log is reopened: a transaction committed in the journal could
    /// not be written here, and only recovery (replaying the journal) can put it in place.
    pub(crate) fn poison(&mut self) {
        self.poisoned.get_or_insert_with(|| {
            "a committed transaction's batch could not be written here; reopening the log \
             replays it from the transaction journal"
                .to_owned()
        });
    }
}
