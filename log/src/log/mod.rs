//! [`Log`]: the topic map, the group offsets and the append notification, over partitions that
//! each have their own lock.
//!
//! Locks, in the order they may be taken: the transaction lock (the journal's mutex, then the
//! OS lock of `txn/lock`; held for a whole transaction, a checkpoint, or a plain offset
//! commit); the sync lock (held while partitions are fsynced for a commit or [`Log::sync`]);
//! the topic map (only long enough to clone a topic's `Arc`); one partition (its mutex, then
//! the OS lock of its `lock` file), or — only under the transaction lock — several in
//! [`TopicPartition`] order; the unsynced-partition list (briefly, never while taking another);
//! the group offsets. The append counter is taken alone. An idle consumer only touches the
//! append counter (and, on a file-backed log, the change file). The cross-process protocol is
//! in log/FORMAT.md, *Many processes*.
//!
//! This file owns the [`Log`] handle and the state its clones share, opening a log, and the
//! partition surface: appends, fetches, offsets and [`PartitionInfo`], each under the
//! partition's lock. The rest is one file per concern (`impl Log` blocks, but for the format
//! check):
//!
//! - `topics.rs`: loading, creating and deleting topics, and finding a partition's topic;
//! - `cleanup.rs`: what `cleanup.policy` asks for: retention, deleting records, compaction;
//! - `commit.rs`: fsyncing partitions, and the consumer groups' committed offsets;
//! - `wait.rs`: the append notification: the append counter, and waiting for an append;
//! - `format.rs`: the `format` file, which says what on-disk format a directory holds;
//! - transactions are in log/src/txn/.
//!
//! Its partition surface must never hold the topic map's lock while it takes a partition's: a
//! partition is reached through its topic's `Arc`, cloned out of the map first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use crate::changes::Changes;
use crate::cleaner::Cleaner;
use crate::error::{Error, IoContext, Result};
use crate::handles::BoundedHandles;
use crate::lease::Leases;
use crate::offsets::OffsetStore;
use crate::options::LogOptions;
use crate::partition::CompactionReport;
use crate::partition::{Locked, Partition};
use crate::storage::{FileStorage, MemStorage, Storage};
use crate::topic::Topic;
use crate::txn::TxnState;
use riffle_record::BatchBuilder;
use riffle_record::FetchedBatch;
use riffle_record::TopicPartition;

mod cleanup;
mod commit;
mod format;
mod topics;
mod wait;

pub use cleanup::RetentionReport;
pub(crate) use format::{check_format, check_or_restore_format};
use wait::AppendJournal;

/// An embedded, durable, partitioned log. Cheap to clone; all clones share the same log.
#[derive(Clone)]
pub struct Log {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.shared.dir)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) root: PathBuf,
    dir: Option<PathBuf>,
    pub(crate) options: LogOptions,
    topics: RwLock<Topics>,
    /// Partition lock files kept open (bounded by `LOCK_FILES_KEPT_OPEN`,
    /// log/src/partition/lock.rs).
    pub(crate) locks_open: Arc<AtomicUsize>,
    /// The change file, on a log other processes may share; `None` in memory.
    changes: Option<Changes>,
    /// Partitions with plain appends that are not durable yet (each listed once).
    unsynced: Mutex<Vec<TopicPartition>>,
    /// Held while partitions are synced, so a commit cannot write its offsets while another
    /// thread is still syncing data it took off the unsynced list.
    pub(crate) syncing: Mutex<()>,
    pub(crate) groups: Mutex<OffsetStore>,
    /// The transaction journal and the handle of `txn/lock`; this mutex, then that file's OS
    /// lock, is the transaction lock.
    pub(crate) journal: Mutex<TxnState>,
    appends: Mutex<AppendJournal>,
    appended: Condvar,
    /// Whether the change watcher runs (set at the first wait on a shared log).
    watcher: std::sync::OnceLock<bool>,
    /// Threads in `wait_for_append`: an append notifies the condition variable only if there
    /// are any (a notification is a system call).
    waiters: AtomicUsize,
    /// Partition locks kept between appends (log/src/lease.rs).
    pub(crate) leases: Arc<Leases>,
    /// The retention thread's stop signal (log/src/cleaner.rs).
    cleaner: Arc<Cleaner>,
    /// What this handle's compaction passes did, summed.
    compacted: Mutex<CompactionReport>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.leases.stop();
        self.cleaner.stop();
    }
}

/// One partition as [`Log::partition_info`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionInfo {
    /// The first offset still in the partition.
    pub start_offset: u64,
    /// The offset the next append gets.
    pub end_offset: u64,
    /// Its segment files.
    pub segments: usize,
    /// Bytes in its segment files.
    pub bytes: u64,
    /// The base offset of its active segment: retention and compaction touch only the
    /// segments before it.
    pub active_segment_base: u64,
    /// Bytes of the segments before the active one.
    pub sealed_bytes: u64,
    /// The offset up to which the cleaner has compacted the partition (its
    /// `cleaner-checkpoint`; 0: never). Only `cleanup.policy=compact` topics are cleaned.
    pub cleaned_to: u64,
    /// Bytes of the sealed segments the cleaner has not compacted yet (those ending after
    /// `cleaned_to`): a pass is due when they reach `min.cleanable.dirty.ratio` of
    /// `sealed_bytes`.
    pub dirty_bytes: u64,
}

/// The topic map, and the topics by the hash the change file names them by.
#[derive(Debug, Default)]
struct Topics {
    by_name: HashMap<Arc<str>, Arc<Topic>>,
    by_hash: HashMap<u32, Vec<Arc<str>>>,
}

impl Topics {
    fn remove(&mut self, name: &str) {
        self.by_name.remove(name);
        let hash = Changes::hash_of(name);
        if let Some(names) = self.by_hash.get_mut(&hash) {
            names.retain(|n| &**n != name);
        }
    }

    fn insert(&mut self, name: Arc<str>, topic: Arc<Topic>) {
        let names = self.by_hash.entry(Changes::hash_of(&name)).or_default();
        if !names.contains(&name) {
            names.push(Arc::clone(&name));
        }
        self.by_name.insert(name, topic);
    }
}

fn poisoned_topics() -> Error {
    Error::Poisoned {
        what: "the topic map".into(),
    }
}

pub(crate) fn lock<'a, T>(
    m: &'a Mutex<T>,
    what: &dyn std::fmt::Display,
) -> Result<MutexGuard<'a, T>> {
    m.lock().map_err(|_| Error::Poisoned {
        what: what.to_string(),
    })
}

impl Log {
    /// Opens (creating if missing) the log in `dir`, recovering every partition: a torn or
    /// corrupt tail is truncated with a `warn!` naming the file, byte position and offset.
    /// Then the transaction journal is replayed (see
    /// [`commit_transaction`](Self::commit_transaction)).
    ///
    /// Any number of processes may open the same directory at once (log/FORMAT.md, *Many
    /// processes*): each sees the others' appends, transactions and offsets; recovery runs only
    /// under the lock writers hold. With [`LogOptions::read_only`] nothing is created or
    /// changed: no tail is cut, no journal replayed.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let storage: Arc<dyn Storage> = Arc::new(FileStorage);
        if options.read_only {
            if !storage.exists(&dir.join("topics")) {
                return Err(Error::Io {
                    path: dir.join("topics"),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no log here (opened read-only, so it was not created)",
                    ),
                });
            }
        } else {
            for sub in ["topics", "groups", "txn"] {
                let path = dir.join(sub);
                storage.create_dir_all(&path).at(&path)?;
            }
        }
        check_format(&*storage, &dir, options.read_only)?;
        if !options.read_only {
            storage.sync_dir(&dir).at(&dir)?;
        }
        let log = Self::with_storage(storage, dir.clone(), Some(dir), options);
        log.load_topics()?;
        let options = &log.shared.options;
        if !options.read_only
            && (options.retention_check_interval.is_some()
                || options.compaction_check_interval.is_some())
        {
            log.shared.cleaner.start(
                Arc::downgrade(&log.shared),
                options.retention_check_interval,
                options.compaction_check_interval,
                options.cleaner_io_bytes_per_sec,
            );
        }
        Ok(log)
    }

    /// [`open`](Self::open) with [`LogOptions::read_only`] set: a log to look at, never
    /// changed.
    pub fn open_read_only(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        Self::open(dir, options.with_read_only(true))
    }

    /// A log kept in memory, through the same code paths as a file-backed one.
    pub fn in_memory() -> Log {
        Self::in_memory_with_options(LogOptions::default())
    }

    /// [`in_memory`](Self::in_memory) with options (small segments, say, to test rolling).
    pub fn in_memory_with_options(options: LogOptions) -> Log {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::default());
        Self::with_storage(storage, PathBuf::from("/memory"), None, options)
    }

    pub(crate) fn with_storage(
        storage: Arc<dyn Storage>,
        root: PathBuf,
        dir: Option<PathBuf>,
        options: LogOptions,
    ) -> Log {
        let changes = storage
            .shared_between_processes()
            .then(|| Changes::new(Arc::clone(&storage), &root, options.read_only));
        // Every file of a file-backed log goes through the handle cache: open files stay
        // bounded. A memory backend has no descriptors to run out of, and a cache there would
        // only make fetches over many partitions reopen what they just closed.
        let options = options.normalized();
        let storage: Arc<dyn Storage> = if storage.shared_between_processes() {
            Arc::new(BoundedHandles::new(storage, options.max_open_files))
        } else {
            storage
        };
        Log {
            shared: Arc::new(Shared {
                storage,
                root: root.clone(),
                dir,
                options,
                topics: RwLock::default(),
                locks_open: Arc::default(),
                changes,
                unsynced: Mutex::default(),
                syncing: Mutex::default(),
                groups: Mutex::default(),
                journal: Mutex::new(TxnState::new(&root)),
                appends: Mutex::new(AppendJournal::default()),
                appended: Condvar::new(),
                watcher: std::sync::OnceLock::new(),
                waiters: AtomicUsize::new(0),
                leases: Arc::default(),
                cleaner: Arc::default(),
                compacted: Mutex::default(),
            }),
        }
    }

    /// The log's directory; `None` for an in-memory log.
    pub fn dir(&self) -> Option<&Path> {
        self.shared.dir.as_deref()
    }

    /// Runs `f` on `tp`'s partition under its lock (the topic map's lock is not held).
    pub(crate) fn with_partition<T>(
        &self,
        tp: &TopicPartition,
        f: impl FnOnce(&mut Partition) -> Result<T>,
    ) -> Result<T> {
        let topic = self.topic(tp)?;
        let partition =
            topic
                .partitions
                .get(tp.partition as usize)
                .ok_or_else(|| Error::UnknownPartition {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                })?;
        let result = f(&mut *lock(partition, tp)?);
        if let Err(Error::TopicDeleted { .. }) = &result {
            // Another process deleted it: forget this copy, so the next call sees what the
            // directory holds now (nothing, or a topic created since).
            let mut topics = self.shared.topics.write().map_err(|_| poisoned_topics())?;
            if topics
                .by_name
                .get(&*tp.topic)
                .is_some_and(|t| Arc::ptr_eq(t, &topic))
            {
                topics.remove(&tp.topic);
            }
        }
        result
    }

    /// Appends the builder's records as one batch; clears the builder; returns the base offset.
    /// An empty builder appends nothing and returns the end offset. On error the builder keeps
    /// its records, so the append can be retried — except that under
    /// [`FsyncPolicy::EveryAppend`] a failed fsync is reported after the batch was written, so
    /// the batch may be in the log (as with a producer whose acknowledgement was lost).
    ///
    /// [`FsyncPolicy::EveryAppend`]: crate::FsyncPolicy::EveryAppend
    pub fn append(&self, tp: &TopicPartition, batch: &mut BatchBuilder) -> Result<u64> {
        if batch.is_empty() {
            return self.end_offset(tp);
        }
        let base = self.append_with(tp, |p| p.append(batch))?;
        batch.clear();
        Ok(base)
    }

    /// Appends one whole Kafka v2 record batch as it is — one sealed by a [`BatchBuilder`]
    /// for a Kafka Produce request, or one a Kafka fetch returned — without re-encoding it:
    /// only its base offset (set to the end offset, which is returned) and its leader epoch
    /// (set to 0) change, both outside the batch's CRC. The batch must be intact (its length
    /// is `batch.len()`, its CRC matches), hold at least one record at dense offsets, and be
    /// neither transactional nor a control batch (the embedded log has no transaction
    /// markers): otherwise an [`Error::InvalidBatch`] naming the partition, and nothing is
    /// written.
    pub fn append_sealed(&self, tp: &TopicPartition, batch: &mut [u8]) -> Result<u64> {
        self.append_with(tp, |p| p.append_sealed(batch))
    }

    /// Runs `write` on `tp`'s partition under its lock (kept as a lease after a success),
    /// recovering a dead process's transaction first if one holds offsets there; returns the
    /// base offset it appended at and wakes waiters.
    fn append_with(
        &self,
        tp: &TopicPartition,
        mut write: impl FnMut(&mut crate::partition::Partition) -> Result<(u64, bool)>,
    ) -> Result<u64> {
        let base = loop {
            let appended = self.with_partition(tp, |p| {
                if p.lock_for_write(false)? == Locked::TxnPending {
                    return Ok(None);
                }
                let appended = write(p);
                if appended.is_ok() {
                    // Keep the lock for this handle's next append, or release it.
                    p.keep_or_unlock(Instant::now(), || {
                        self.shared.leases.add(tp, &Arc::downgrade(&self.shared))
                    });
                } else {
                    p.unlock();
                }
                let (base, newly_unsynced) = appended?;
                if newly_unsynced {
                    lock(&self.shared.unsynced, &"the unsynced-partition list")?.push(tp.clone());
                }
                Ok(Some(base))
            })?;
            match appended {
                Some(base) => break base,
                // A transaction's process died holding offsets here: recover it first.
                None => self.recover_dead_transaction(tp)?,
            }
        };
        self.notify_append([tp]);
        Ok(base)
    }

    /// Batches holding offsets `>= offset`, up to `max_bytes` of stored batches (at least one
    /// batch if any exists). The first batch may start before `offset`: callers skip records
    /// below it. `offset ==` end offset gives an empty `Vec`; beyond it,
    /// [`Error::OffsetOutOfRange`].
    pub fn fetch(
        &self,
        tp: &TopicPartition,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Vec<FetchedBatch>> {
        let stored = self.with_partition(tp, |p| p.fetch(offset, max_bytes))?;
        // Decompress outside the partition's lock, so appends are not held up by it.
        stored
            .into_iter()
            .map(|b| FetchedBatch::decode(tp, &b.header, b.bytes).map_err(Error::from))
            .collect()
    }

    /// The offset the next append gets.
    pub fn end_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.with_partition(tp, Partition::latest_end_offset)
    }

    /// The first offset still in the partition, the log start offset: 0 until retention or
    /// [`delete_records`](Self::delete_records) (in any process) deleted records below it.
    pub fn start_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.with_partition(tp, Partition::latest_start_offset)
    }

    /// The partition's offsets and files, and how far the cleaner compacted it (reads its
    /// `cleaner-checkpoint` file).
    pub fn partition_info(&self, tp: &TopicPartition) -> Result<PartitionInfo> {
        self.with_partition(tp, |p| {
            let end_offset = p.latest_end_offset()?;
            let start_offset = p.latest_start_offset()?;
            let (cleaned_to, dirty_bytes, sealed_bytes) = p.cleaner_state()?;
            Ok(PartitionInfo {
                start_offset,
                end_offset,
                segments: p.segment_count(),
                bytes: p.size_bytes(),
                active_segment_base: p.active_base(),
                sealed_bytes,
                cleaned_to,
                dirty_bytes,
            })
        })
    }

    /// Runs `f` on `tp`'s partition holding its OS lock (released after), recovering a dead
    /// process's transaction first if one holds offsets there.
    fn with_locked_partition<T>(
        &self,
        tp: &TopicPartition,
        mut f: impl FnMut(&mut Partition) -> Result<T>,
    ) -> Result<T> {
        loop {
            let done = self.with_partition(tp, |p| {
                if p.lock_for_write(false)? == Locked::TxnPending {
                    return Ok(None);
                }
                let result = f(p);
                p.unlock();
                result.map(Some)
            })?;
            match done {
                Some(value) => return Ok(value),
                None => self.recover_dead_transaction(tp)?,
            }
        }
    }
}
