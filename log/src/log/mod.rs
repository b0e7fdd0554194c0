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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::changes::Changes;
use crate::cleaner::Cleaner;
use crate::error::{Error, IoContext, Result};
use crate::handles::BoundedHandles;
use crate::lease::Leases;
use crate::names::validate_name;
use crate::offsets::OffsetStore;
use crate::options::{FsyncPolicy, LogOptions};
use crate::partition::CompactionReport;
use crate::partition::{Locked, Partition};
use crate::storage::{FileStorage, MemStorage, Storage};
use crate::topic::Topic;
use crate::topic_config::TopicConfig;
use crate::txn::TxnState;
use riffle_record::BatchBuilder;
use riffle_record::FetchedBatch;
use riffle_record::TopicPartition;

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
    /// Partition lock files kept open (bounded by `LOCK_FILES_KEPT_OPEN`, partition/lock.rs).
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
    /// Partition locks kept between appends (`lease.rs`).
    pub(crate) leases: Arc<Leases>,
    /// The retention thread's stop signal (`cleaner.rs`).
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

/// What one [`Log::enforce_retention`] pass deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionReport {
    /// Partitions whose start offset moved.
    pub partitions: usize,
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes of the deleted segments.
    pub bytes_freed: u64,
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

/// How often a consumer waiting in [`Log::wait_for_append`] looks at the change file for
/// appends of other processes when inotify cannot watch it (appends of its own process wake
/// it at once; with inotify, so do other processes'): first after
/// [`CHANGE_POLL_MIN`], then twice as long each time nothing changed, up to [`CHANGE_POLL_MAX`]
/// — so a waiter sees a busy producer within about a millisecond and an idle one costs a few
/// hundred `fstat`s a second.
const CHANGE_POLL_MIN: Duration = Duration::from_millis(1);
const CHANGE_POLL_MAX: Duration = Duration::from_millis(5);

/// Counts a thread in [`Log::wait_for_append`] while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(waiters: &'a AtomicUsize) -> Self {
        waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(waiters)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many appended partitions [`Log::appended_since`] remembers; a reader further behind is
/// told to look at every partition.
const APPEND_JOURNAL_LEN: usize = 4_096;

/// The append counter and the partitions of the latest appends, newest last.
#[derive(Debug, Default)]
struct AppendJournal {
    version: u64,
    /// Bumped by [`Log::wake_waiters`]: ends every wait without claiming new data.
    wakeups: u64,
    /// Bumped by the change watcher when another process may have appended.
    external: u64,
    /// `(version after the append, partition)`; at most [`APPEND_JOURNAL_LEN`] entries.
    recent: std::collections::VecDeque<(u64, TopicPartition)>,
}

impl AppendJournal {
    /// Moves by anything that may end a wait.
    fn moves(&self) -> (u64, u64, u64) {
        (self.version, self.external, self.wakeups)
    }

    fn record(&mut self, tp: &TopicPartition) {
        self.version += 1;
        if self.recent.len() == APPEND_JOURNAL_LEN {
            self.recent.pop_front();
        }
        self.recent.push_back((self.version, tp.clone()));
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

    pub(crate) fn load_topics(&self) -> Result<()> {
        let shared = &self.shared;
        if !shared.options.read_only {
            Topic::remove_abandoned_stagings(&shared.storage, &shared.root)?;
        }
        let map = Topic::load_all(
            &shared.storage,
            &shared.root,
            &shared.options,
            &shared.locks_open,
        )?;
        let mut topics = Topics::default();
        for (name, topic) in map {
            topics.insert(name, topic);
        }
        *shared.topics.write().map_err(|_| poisoned_topics())? = topics;
        if shared.options.read_only {
            return Ok(());
        }
        self.recover_journal()
    }

    /// `name` as another process may have created it since this log loaded its topics.
    pub(crate) fn load_topic(&self, name: &str) -> Result<Option<Arc<Topic>>> {
        let shared = &self.shared;
        let mut topics = shared.topics.write().map_err(|_| poisoned_topics())?;
        if let Some(topic) = topics.by_name.get(name) {
            return Ok(Some(Arc::clone(topic)));
        }
        if validate_name(name, true).is_err() {
            return Ok(None);
        }
        let name: Arc<str> = name.into();
        let loaded = Topic::load(
            &shared.storage,
            &shared.root,
            &name,
            &shared.options,
            &shared.locks_open,
        )?;
        Ok(loaded.map(|topic| {
            let topic = Arc::new(topic);
            topics.insert(name, Arc::clone(&topic));
            topic
        }))
    }

    /// Loads every topic another process created since this log loaded its topics.
    fn refresh_topics(&self) -> Result<()> {
        let dir = self.shared.root.join("topics");
        for name in self.shared.storage.list(&dir).at(&dir)? {
            let known = self
                .shared
                .topics
                .read()
                .map_err(|_| poisoned_topics())?
                .by_name
                .contains_key(name.as_str());
            if !known {
                self.load_topic(&name)?;
            }
        }
        Ok(())
    }

    /// Creates `topic` with `partitions` partitions (at least 1). Ok if it exists with that
    /// count; [`Error::PartitionCountMismatch`] if with another. The topic is created whole or
    /// not at all, and two processes creating it at once get one topic (log/FORMAT.md).
    pub fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        self.create_topic_with(topic, partitions, &TopicConfig::default())
    }

    /// [`create_topic`](Self::create_topic) with a configuration (Kafka's topic configs:
    /// [`TopicConfig`]), stored with the topic. A topic that exists keeps the configuration it
    /// was created with.
    pub fn create_topic_with(
        &self,
        topic: &str,
        partitions: u32,
        config: &TopicConfig,
    ) -> Result<()> {
        validate_name(topic, true)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("create topic {topic:?}"),
            });
        }
        let existing = match self.load_topic(topic)? {
            Some(existing) => existing,
            None => {
                let name: Arc<str> = topic.into();
                let shared = &self.shared;
                let mut topics = shared.topics.write().map_err(|_| poisoned_topics())?;
                match topics.by_name.get(topic) {
                    Some(existing) => Arc::clone(existing),
                    None => {
                        let created = Arc::new(Topic::create(
                            &shared.storage,
                            &shared.root,
                            &name,
                            partitions,
                            config,
                            &shared.options,
                            &shared.locks_open,
                        )?);
                        topics.insert(name, Arc::clone(&created));
                        created
                    }
                }
            }
        };
        let existing = existing.partition_count();
        if existing == partitions {
            return Ok(());
        }
        Err(Error::PartitionCountMismatch {
            topic: topic.to_owned(),
            existing,
            requested: partitions,
        })
    }

    /// The topic's partition count, `None` if it does not exist.
    pub fn partitions(&self, topic: &str) -> Option<u32> {
        self.load_topic(topic).ok()?.map(|t| t.partition_count())
    }

    /// Every topic and its partition count, sorted by name (including topics other processes
    /// created since this log was opened).
    pub fn topics(&self) -> Vec<(String, u32)> {
        if let Err(e) = self.refresh_topics() {
            tracing::warn!(error = %e, "could not look for topics created by other processes");
        }
        let mut all: Vec<(String, u32)> = match self.shared.topics.read() {
            Ok(topics) => topics
                .by_name
                .iter()
                .map(|(n, t)| (n.to_string(), t.partition_count()))
                .collect(),
            Err(_) => Vec::new(),
        };
        all.sort();
        all
    }

    /// The topic of `tp`, checking that it has that partition.
    pub(crate) fn topic(&self, tp: &TopicPartition) -> Result<Arc<Topic>> {
        let known = {
            let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
            topics.by_name.get(&*tp.topic).cloned()
        };
        let topic = match known {
            Some(topic) => topic,
            None => self
                .load_topic(&tp.topic)?
                .ok_or_else(|| Error::UnknownTopic {
                    topic: tp.topic.to_string(),
                })?,
        };
        if tp.partition >= topic.partition_count() {
            return Err(Error::UnknownPartition {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            });
        }
        Ok(topic)
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

    /// Bumps the append counter once per partition appended to, remembers which, and wakes
    /// waiting consumers.
    pub(crate) fn notify_append<'a>(&self, appended: impl IntoIterator<Item = &'a TopicPartition>) {
        let mut journal = self
            .shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &self.shared.changes {
            Some(changes) => {
                let appended: Vec<&TopicPartition> = appended.into_iter().collect();
                changes.record(appended.iter().copied());
                journal.version += appended.len() as u64;
            }
            None => {
                for tp in appended {
                    journal.record(tp);
                }
            }
        }
        // Waiters register under the same mutex before they wait, so none is missed.
        if self.shared.waiters.load(Ordering::Relaxed) > 0 {
            self.shared.appended.notify_all();
        }
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

    /// The configuration `topic` was created with; `None` if it does not exist.
    pub fn topic_config(&self, topic: &str) -> Result<Option<TopicConfig>> {
        Ok(self.load_topic(topic)?.map(|t| t.config.clone()))
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

    /// Deletes the records of `tp` below `offset` (Kafka's `deleteRecords`): the start offset
    /// moves there, durably, and segments wholly below it are removed; a fetch below it is
    /// [`Error::OffsetOutOfRange`]. Returns the bytes freed. An offset at or below the start
    /// changes nothing; one past the end offset is [`Error::OffsetOutOfRange`]. What the
    /// runtime calls to purge a repartition topic up to its committed offset.
    pub fn delete_records(&self, tp: &TopicPartition, offset: u64) -> Result<u64> {
        self.with_locked_partition(tp, |p| p.delete_before(offset))
    }

    /// Deletes, in every topic whose `cleanup.policy` includes `delete`, the sealed segments
    /// that `retention.ms` (against `now_ms`, milliseconds since the epoch, and each
    /// segment's newest record timestamp) or `retention.bytes` no longer keep, oldest first,
    /// moving each partition's start offset (as Kafka's retention does; the active segment
    /// always stays). The cleaner thread calls it every
    /// [`LogOptions::retention_check_interval`]. A partition costs a look at its active
    /// segment's size (for other processes' appends); a segment's newest timestamp is read
    /// once and remembered.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<RetentionReport> {
        let topics = self.topics_where(|policy| policy.deletes())?;
        let mut report = RetentionReport::default();
        for (name, topic) in topics {
            for p in 0..topic.partition_count() {
                let tp = TopicPartition::new(Arc::clone(&name), p);
                let due = self.with_partition(&tp, |part| {
                    // What other processes appended and rolled since this handle looked.
                    part.catch_up()?;
                    part.retention_target(now_ms, &topic.config)
                })?;
                if due.is_none() {
                    continue;
                }
                // Under the OS lock, with what other processes did since.
                let (segments_before, freed) = self.with_locked_partition(&tp, |part| {
                    part.resync()?;
                    let before = part.segment_count();
                    match part.retention_target(now_ms, &topic.config)? {
                        Some(to) => Ok((before, part.delete_before(to)?)),
                        None => Ok((before, 0)),
                    }
                })?;
                if freed > 0 {
                    let after = self.with_partition(&tp, |part| Ok(part.segment_count()))?;
                    report.partitions += 1;
                    report.segments_deleted += segments_before.saturating_sub(after);
                    report.bytes_freed += freed;
                }
            }
        }
        Ok(report)
    }

    /// One compaction pass over every partition of the compacted topics (`cleanup.policy`
    /// `compact` or `compact,delete`) whose dirty share reached `min.cleanable.dirty.ratio`
    /// (`partition/compact.rs` says how). `now_ms` decides which tombstones' delete horizon has
    /// passed. The cleaner thread calls this every
    /// [`LogOptions::compaction_check_interval`]; `throttle` is called after each partition
    /// cleaned with the bytes it read and wrote (the thread sleeps there to keep to
    /// [`LogOptions::cleaner_io_bytes_per_sec`]). A partition that is not due costs a look at
    /// its segment sizes.
    pub fn compact(&self, now_ms: i64) -> Result<CompactionReport> {
        self.compact_with(now_ms, &mut |_| {})
    }

    pub(crate) fn compact_with(
        &self,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<CompactionReport> {
        let topics = self.topics_where(|policy| policy.compacts())?;
        let mut report = CompactionReport::default();
        for (name, topic) in topics {
            for p in 0..topic.partition_count() {
                let tp = TopicPartition::new(Arc::clone(&name), p);
                let due = self.with_partition(&tp, |part| {
                    part.catch_up()?;
                    part.compaction_due(&topic.config)
                })?;
                if !due {
                    continue;
                }
                let done =
                    self.with_locked_partition(&tp, |part| part.compact(now_ms, &topic.config))?;
                if let Some(done) = done {
                    throttle(done.bytes_io);
                    report.add(&done);
                    lock(&self.shared.compacted, &"the compaction totals")?.add(&done);
                }
            }
        }
        Ok(report)
    }

    /// What compaction passes through this handle (its cleaner thread's and
    /// [`compact`](Self::compact) calls) did since it was opened, summed.
    pub fn compaction_totals(&self) -> CompactionReport {
        *self
            .shared
            .compacted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The topics whose `cleanup.policy` passes `wanted`, those other processes created since
    /// this handle looked included (they are its to clean too).
    fn topics_where(
        &self,
        wanted: impl Fn(crate::CleanupPolicy) -> bool,
    ) -> Result<Vec<(Arc<str>, Arc<Topic>)>> {
        self.refresh_topics()?;
        let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
        Ok(topics
            .by_name
            .iter()
            .filter(|(_, t)| wanted(t.config.cleanup_policy))
            .map(|(n, t)| (Arc::clone(n), Arc::clone(t)))
            .collect())
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

    /// Fsyncs every partition that has unsynced plain appends.
    pub(crate) fn sync_unsynced(&self) -> Result<()> {
        let pending = std::mem::take(&mut *lock(
            &self.shared.unsynced,
            &"the unsynced-partition list",
        )?);
        for (i, tp) in pending.iter().enumerate() {
            if let Err(e) = self.with_partition(tp, Partition::sync) {
                // Keep the rest listed so a later commit syncs them.
                let rest = pending.get(i..).unwrap_or_default();
                lock(&self.shared.unsynced, &"the unsynced-partition list")?
                    .extend_from_slice(rest);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Durable consumer-group offsets. Under [`FsyncPolicy::EveryCommit`], fsyncs every partition
    /// with unsynced appends first, then writes the group's offsets durably (temp file, fsync,
    /// rename, directory fsync). Offsets of partitions not named are kept. If transactions
    /// committed offsets of this group since the last checkpoint, a checkpoint runs first (so
    /// replaying the journal can never roll these offsets back).
    pub fn commit_offsets(&self, group: &str, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        validate_name(group, false)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("commit offsets of group {group:?}"),
            });
        }
        for (tp, _) in offsets {
            self.topic(tp)?;
        }
        let mut txn = self.txn_lock(true)?;
        if lock(&self.shared.groups, &"the group offsets")?.is_pending(group) {
            self.checkpoint(&mut txn)?;
        }
        if self.shared.options.fsync == FsyncPolicy::EveryCommit {
            let _syncing = lock(&self.shared.syncing, &"the sync lock")?;
            self.sync_unsynced()?;
        }
        // Bumped before the file is written: should this process die in between, the others
        // drop their cached copy rather than write over this one's offsets.
        txn.files_changed()?;
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        groups.generation = txn.generation();
        groups.commit(&self.shared.storage, &self.shared.root, group, offsets)
    }

    /// Every offset the group committed, by topic-partition (as committed by any process).
    pub fn committed_offsets(&self, group: &str) -> Result<Vec<(TopicPartition, u64)>> {
        validate_name(group, false)?;
        let _txn = self.txn_lock(false)?;
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        let all = groups.all(&self.shared.storage, &self.shared.root, group)?;
        Ok(all.into_iter().collect())
    }

    /// Deletes `topic`: its records and every group's committed offsets of it. Writers in
    /// other processes that still have it open fail with [`Error::TopicDeleted`]; a topic
    /// created later under the name starts empty. Readers that had it open keep reading what
    /// it held until they reopen it (log/FORMAT.md, *Deleting a topic*).
    ///
    /// Under the transaction lock (exclusive, after a checkpoint, so the journal holds none of
    /// its batches) and every partition's lock: each partition is marked deleted in its lock
    /// file, the groups' offsets of the topic are removed, and `topics/<topic>` is renamed into
    /// `tmp/` (atomic: `topics/` only ever holds whole topics), then removed. A crash after the
    /// rename leaves a directory the next writable open removes.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        validate_name(topic, true)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("delete topic {topic:?}"),
            });
        }
        let shared = &self.shared;
        let mut txn = self.txn_lock(true)?;
        self.checkpoint(&mut txn)?;
        let Some(existing) = self.load_topic(topic)? else {
            return Err(Error::UnknownTopic {
                topic: topic.to_owned(),
            });
        };
        let mut locked = Vec::with_capacity(existing.partitions.len());
        for (p, partition) in existing.partitions.iter().enumerate() {
            let tp = TopicPartition::new(topic, p as u32);
            let mut guard = lock(partition, &tp)?;
            guard.lock_for_write(true)?;
            guard.mark_deleted()?;
            locked.push(guard);
        }
        txn.files_changed()?;
        {
            let mut groups = lock(&shared.groups, &"the group offsets")?;
            groups.generation = txn.generation();
            groups.delete_topic(&shared.storage, &shared.root, topic)?;
        }
        static DELETIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let from = shared.root.join("topics").join(topic);
        let to = shared.root.join("tmp").join(format!(
            "{topic}.{}.d{}",
            std::process::id(),
            DELETIONS.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = shared.root.join("tmp");
        shared.storage.create_dir_all(&tmp).at(&tmp)?;
        shared.storage.rename(&from, &to).at(&from)?;
        let topics = shared.root.join("topics");
        shared.storage.sync_dir(&topics).at(&topics)?;
        shared
            .topics
            .write()
            .map_err(|_| poisoned_topics())?
            .remove(topic);
        for mut guard in locked {
            guard.unlock();
        }
        drop(txn);
        drop(existing);
        if let Err(e) = shared.storage.remove_dir_all(&to) {
            tracing::warn!(dir = %to.display(), error = %e, "could not remove a deleted topic's files; the next writable open will");
        }
        Ok(())
    }

    /// The group's committed offset for `tp`, `None` if it never committed one (as committed
    /// by any process: read under the shared transaction lock).
    pub fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        validate_name(group, false)?;
        let _txn = self.txn_lock(false)?;
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        groups.get(&self.shared.storage, &self.shared.root, group, tp)
    }

    /// Fsyncs every partition (whatever the policy), and before them the transaction journal.
    pub fn sync(&self) -> Result<()> {
        if self.shared.options.read_only {
            return Ok(());
        }
        let mut txn = lock(&self.shared.journal, &"the transaction journal")?;
        self.sync_all(&mut txn)
    }

    /// [`sync`](Self::sync) for a caller that holds the journal lock.
    pub(crate) fn sync_all(&self, txn: &mut TxnState) -> Result<()> {
        // Write-ahead: a transaction's record is durable before any of its batches is.
        txn.journal.sync(&self.shared.storage)?;
        let _syncing = lock(&self.shared.syncing, &"the sync lock")?;
        let topics: Vec<Arc<Topic>> = {
            let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
            topics.by_name.values().cloned().collect()
        };
        let pending = std::mem::take(&mut *lock(
            &self.shared.unsynced,
            &"the unsynced-partition list",
        )?);
        let result = topics
            .iter()
            .flat_map(|t| &t.partitions)
            .try_for_each(|partition| {
                let mut p = partition.lock().map_err(|_| Error::Poisoned {
                    what: "a partition".into(),
                })?;
                p.sync()
            });
        if result.is_err() {
            // Keep them listed so a later commit syncs them (syncing a synced one is cheap).
            lock(&self.shared.unsynced, &"the unsynced-partition list")?.extend(pending);
        }
        result
    }

    /// A counter bumped by every append to this log (all partitions, by any process sharing
    /// the directory), so an idle consumer can tell "nothing new" without touching a partition.
    pub fn append_version(&self) -> u64 {
        match &self.shared.changes {
            Some(changes) => changes.version(),
            None => {
                self.shared
                    .appends
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .version
            }
        }
    }

    /// Pushes onto `out` the partitions appended to after [`append_version`](Self::append_version)
    /// was `seen` (a partition may appear more than once), and returns the current version —
    /// or `None`, pushing nothing, when `seen` is too far behind for the log to remember them
    /// all (or names a topic this log cannot resolve): the caller then looks at every partition
    /// it reads. Appends of other processes sharing the directory are included (from the change
    /// file). Costs O(appends since `seen`), nothing when nothing was appended.
    pub fn appended_since(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        if let Some(changes) = &self.shared.changes {
            let (now, records) = changes.since(seen, APPEND_JOURNAL_LEN as u64);
            let records = records?;
            if records.is_empty() {
                return Some(now);
            }
            let mut found = Vec::with_capacity(records.len());
            let resolve = |found: &mut Vec<TopicPartition>| -> Option<()> {
                let topics = self.shared.topics.read().ok()?;
                for &(hash, partition) in &records {
                    let names = topics.by_hash.get(&hash)?;
                    for name in names {
                        found.push(TopicPartition::new(Arc::clone(name), partition));
                    }
                }
                Some(())
            };
            if resolve(&mut found).is_none() {
                // A topic created since this log loaded its topics: load them and try again.
                self.refresh_topics().ok()?;
                found.clear();
                resolve(&mut found)?;
            }
            out.extend(found);
            return Some(now);
        }
        let journal = self
            .shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if seen >= journal.version {
            return Some(journal.version);
        }
        // Entries have consecutive versions, so the oldest one tells whether `seen + 1` is kept.
        let oldest = journal.recent.front().map_or(u64::MAX, |&(v, _)| v);
        if oldest > seen + 1 {
            return None;
        }
        let skip = usize::try_from(seen + 1 - oldest).unwrap_or(usize::MAX);
        out.extend(journal.recent.iter().skip(skip).map(|(_, tp)| tp.clone()));
        Some(journal.version)
    }

    /// Ends every [`wait_for_append`](Self::wait_for_append) under way in this process now,
    /// without moving [`append_version`](Self::append_version): for a waiter that has something
    /// else to look at (its group changed, it was asked to stop).
    pub fn wake_waiters(&self) {
        self.appends().wakeups += 1;
        self.shared.appended.notify_all();
    }

    fn appends(&self) -> MutexGuard<'_, AppendJournal> {
        self.shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until [`append_version`](Self::append_version) differs from `seen`, `timeout`
    /// elapses or [`wake_waiters`](Self::wake_waiters) is called; returns the current version.
    /// An append of this process wakes the waiter at once; one of another process as soon as
    /// the change watcher sees the change file written (inotify, in a thread that sleeps in
    /// the kernel: `wakeup.rs`) — or, where inotify cannot start, within
    /// [`CHANGE_POLL_MIN`]…[`CHANGE_POLL_MAX`] (a backoff of `fstat`s).
    /// Nothing wakes a waiter when nothing is appended.
    pub fn wait_for_append(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        let left = || match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(3600),
        };
        let _waiting = Waiting::new(&self.shared.waiters);
        let Some(changes) = &self.shared.changes else {
            let mut journal = self.appends();
            let wakeups = journal.wakeups;
            while journal.version == seen && journal.wakeups == wakeups {
                let left = left();
                if left.is_zero() {
                    break;
                }
                journal = match self.shared.appended.wait_timeout(journal, left) {
                    Ok((j, _)) => j,
                    Err(poisoned) => poisoned.into_inner().0,
                };
            }
            return journal.version;
        };
        let watched = self.watch_changes();
        let mut interval = CHANGE_POLL_MIN;
        let wakeups = self.appends().wakeups;
        loop {
            // What the local journal looked like before reading the change file: any move
            // after this (an append here, a write the watcher saw, a wake-up) ends the wait.
            let before = self.appends().moves();
            let now = changes.version();
            let left = left();
            if now != seen || left.is_zero() {
                return now;
            }
            let local = self.appends();
            if local.wakeups != wakeups {
                return now;
            }
            if local.moves() == before {
                if watched {
                    // The watcher or an append of this process notifies.
                    let _ = self.shared.appended.wait_timeout(local, left);
                } else {
                    let _ = self.shared.appended.wait_timeout(local, left.min(interval));
                    interval = (interval * 2).min(CHANGE_POLL_MAX);
                }
            }
        }
    }

    /// Starts, once per log, the thread that wakes waiters when another process writes the
    /// change file; whether it runs.
    fn watch_changes(&self) -> bool {
        *self.shared.watcher.get_or_init(|| {
            let Some(dir) = self.shared.dir.as_deref() else {
                return false;
            };
            let shared = Arc::downgrade(&self.shared);
            let started = crate::wakeup::spawn_watcher(dir, crate::changes::FILE_NAME, move |changed| {
                let Some(shared) = shared.upgrade() else {
                    return false; // the log was dropped
                };
                if changed {
                    shared
                        .appends
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .external += 1;
                    shared.appended.notify_all();
                }
                true
            });
            match started {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the change file (inotify); a waiter looks at it every millisecond instead");
                    false
                }
            }
        })
    }
}

/// The format version this build reads and writes, in the log directory's `format` file.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The `format` file's content.
const FORMAT_LINE: &str = "riffle-log format 2\n";

/// Checks the log directory's `format` file, and writes it into a log that has none and holds
/// no data yet. A log with data and no `format` file was written before format 2 (its batches
/// are riffle's own, not Kafka's): it is refused, untouched.
pub(crate) fn check_format(storage: &dyn Storage, dir: &Path, read_only: bool) -> Result<()> {
    let path = dir.join("format");
    let refuse = |found: String| Error::UnsupportedFormat {
        path: dir.to_path_buf(),
        found,
        hint: "read it with the riffle build that wrote it (`riffle consume`), or move it \
               aside and let the application rebuild it from its input topics"
            .to_owned(),
    };
    if let Some(raw) = storage.read(&path).at(&path)? {
        let text = String::from_utf8_lossy(&raw);
        let version = text
            .trim()
            .strip_prefix("riffle-log format ")
            .and_then(|v| v.parse::<u32>().ok());
        return match version {
            Some(FORMAT_VERSION) => Ok(()),
            Some(v) => Err(refuse(format!("riffle-log format {v}"))),
            None => Err(Error::Corrupt {
                path,
                position: 0,
                reason: format!("not a format line: {:?}", text.trim()),
            }),
        };
    }
    // No `format` file: format 1 if any data was ever written (its first segments are never
    // empty then: nothing is deleted from a format 1 log), else a new log.
    let topics = dir.join("topics");
    for topic in storage.list(&topics).at(&topics)? {
        let tdir = topics.join(&topic);
        for partition in storage.list(&tdir).at(&tdir)? {
            let first = tdir
                .join(&partition)
                .join(crate::segment::segment_file_name(0));
            if std::fs::metadata(&first).is_ok_and(|m| m.len() > 0) {
                return Err(refuse(format!(
                    "riffle-log format 1 (no `format` file, and {} holds batches)",
                    first.display()
                )));
            }
        }
    }
    let journal = dir.join("txn").join("journal");
    if std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0) {
        return Err(refuse(format!(
            "riffle-log format 1 (no `format` file, and {} holds transactions)",
            journal.display()
        )));
    }
    if !read_only {
        // Every process that opens a new log writes the same line. Two at once share the
        // temporary file, so one's rename may find it gone: then the other's line is there.
        if let Err(e) = storage.write_atomic(&path, FORMAT_LINE.as_bytes())
            && storage.read(&path).ok().flatten().as_deref() != Some(FORMAT_LINE.as_bytes())
        {
            return Err(Error::Io { path, source: e });
        }
    }
    Ok(())
}
