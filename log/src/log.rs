//! [`Log`]: the topic map, the group offsets and the append notification, over partitions that
//! each have their own lock.
//!
//! Locks, in the order they may be taken: the transaction journal (held for a whole transaction,
//! a checkpoint, or a plain offset commit); the sync lock (held while partitions are fsynced for
//! a commit or [`Log::sync`]); the topic map (only long enough to clone a topic's `Arc`); one
//! partition, or — only under the journal lock — several in [`TopicPartition`] order; the
//! unsynced-partition list (briefly, never while taking another); the group offsets. The append
//! counter is taken alone. An idle consumer only touches the append counter.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::batch::BatchBuilder;
use crate::error::{Error, IoContext, Result};
use crate::handles::BoundedHandles;
use crate::journal::Journal;
use crate::offsets::OffsetStore;
use crate::options::{FsyncPolicy, LogOptions};
use crate::partition::Partition;
use crate::record::FetchedBatch;
use crate::storage::{FileStorage, MemStorage, Storage};
use crate::topic::Topic;
use crate::types::{TopicPartition, validate_name};

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
    topics: RwLock<HashMap<Arc<str>, Arc<Topic>>>,
    /// Partitions with plain appends that are not durable yet (each listed once).
    unsynced: Mutex<Vec<TopicPartition>>,
    /// Held while partitions are synced, so a commit cannot write its offsets while another
    /// thread is still syncing data it took off the unsynced list.
    pub(crate) syncing: Mutex<()>,
    pub(crate) groups: Mutex<OffsetStore>,
    /// The transaction journal; its lock is the transaction lock.
    pub(crate) journal: Mutex<Journal>,
    appends: Mutex<AppendJournal>,
    appended: Condvar,
}

/// How many appended partitions [`Log::appended_since`] remembers; a reader further behind is
/// told to look at every partition.
const APPEND_JOURNAL_LEN: usize = 4_096;

/// The append counter and the partitions of the latest appends, newest last.
#[derive(Debug, Default)]
struct AppendJournal {
    version: u64,
    /// `(version after the append, partition)`; at most [`APPEND_JOURNAL_LEN`] entries.
    recent: std::collections::VecDeque<(u64, TopicPartition)>,
}

impl AppendJournal {
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
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let storage: Arc<dyn Storage> = Arc::new(FileStorage);
        for sub in ["topics", "groups", "txn"] {
            let path = dir.join(sub);
            storage.create_dir_all(&path).at(&path)?;
        }
        storage.sync_dir(&dir).at(&dir)?;
        let log = Self::with_storage(storage, dir.clone(), Some(dir), options);
        log.load_topics()?;
        Ok(log)
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
        // Every file of the log goes through the handle cache: open files stay bounded.
        let options = options.normalized();
        let storage: Arc<dyn Storage> =
            Arc::new(BoundedHandles::new(storage, options.max_open_files));
        Log {
            shared: Arc::new(Shared {
                storage,
                root: root.clone(),
                dir,
                options,
                topics: RwLock::default(),
                unsynced: Mutex::default(),
                syncing: Mutex::default(),
                groups: Mutex::default(),
                journal: Mutex::new(Journal::new(&root)),
                appends: Mutex::new(AppendJournal::default()),
                appended: Condvar::new(),
            }),
        }
    }

    /// The log's directory; `None` for an in-memory log.
    pub fn dir(&self) -> Option<&Path> {
        self.shared.dir.as_deref()
    }

    pub(crate) fn load_topics(&self) -> Result<()> {
        let shared = &self.shared;
        let map = Topic::load_all(&shared.storage, &shared.root, &shared.options)?;
        *shared.topics.write().map_err(|_| poisoned_topics())? = map;
        self.recover_journal()
    }

    /// Creates `topic` with `partitions` partitions (at least 1). Ok if it exists with that
    /// count; [`Error::PartitionCountMismatch`] if with another.
    pub fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        validate_name(topic, true)?;
        let mut topics = self.shared.topics.write().map_err(|_| poisoned_topics())?;
        if let Some(existing) = topics.get(topic) {
            let existing = existing.partitions.len() as u32;
            if existing == partitions {
                return Ok(());
            }
            return Err(Error::PartitionCountMismatch {
                topic: topic.to_owned(),
                existing,
                requested: partitions,
            });
        }
        let name: Arc<str> = topic.into();
        let shared = &self.shared;
        let created = Topic::create(
            &shared.storage,
            &shared.root,
            &name,
            partitions,
            &shared.options,
        )?;
        topics.insert(name, Arc::new(created));
        Ok(())
    }

    /// The topic's partition count, `None` if it does not exist.
    pub fn partitions(&self, topic: &str) -> Option<u32> {
        let topics = self.shared.topics.read().ok()?;
        topics.get(topic).map(|t| t.partition_count())
    }

    /// Every topic and its partition count, sorted by name.
    pub fn topics(&self) -> Vec<(String, u32)> {
        let mut all: Vec<(String, u32)> = match self.shared.topics.read() {
            Ok(topics) => topics
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
        let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
        let topic = topics.get(&*tp.topic).ok_or_else(|| Error::UnknownTopic {
            topic: tp.topic.to_string(),
        })?;
        if tp.partition >= topic.partition_count() {
            return Err(Error::UnknownPartition {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            });
        }
        Ok(Arc::clone(topic))
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
        f(&mut *lock(partition, tp)?)
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
        let base = self.with_partition(tp, |p| {
            let (base, newly_unsynced) = p.append(batch)?;
            if newly_unsynced {
                lock(&self.shared.unsynced, &"the unsynced-partition list")?.push(tp.clone());
            }
            Ok(base)
        })?;
        batch.clear();
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
        for tp in appended {
            journal.record(tp);
        }
        self.shared.appended.notify_all();
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
            .map(|b| FetchedBatch::decode(tp, &b.header, b.bytes))
            .collect()
    }

    /// The offset the next append gets.
    pub fn end_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.with_partition(tp, |p| Ok(p.end_offset()))
    }

    /// The first offset still in the log (0: the log keeps everything for now).
    pub fn start_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.with_partition(tp, |p| Ok(p.start_offset()))
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
        for (tp, _) in offsets {
            self.topic(tp)?;
        }
        let mut journal = lock(&self.shared.journal, &"the transaction journal")?;
        if lock(&self.shared.groups, &"the group offsets")?.is_pending(group) {
            self.checkpoint(&mut journal)?;
        }
        if self.shared.options.fsync == FsyncPolicy::EveryCommit {
            let _syncing = lock(&self.shared.syncing, &"the sync lock")?;
            self.sync_unsynced()?;
        }
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        groups.commit(&self.shared.storage, &self.shared.root, group, offsets)
    }

    /// The group's committed offset for `tp`, `None` if it never committed one.
    pub fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        validate_name(group, false)?;
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        let offsets = groups.group(&self.shared.storage, &self.shared.root, group)?;
        Ok(offsets.get(tp).copied())
    }

    /// Fsyncs every partition (whatever the policy), and before them the transaction journal.
    pub fn sync(&self) -> Result<()> {
        let mut journal = lock(&self.shared.journal, &"the transaction journal")?;
        self.sync_all(&mut journal)
    }

    /// [`sync`](Self::sync) for a caller that holds the journal lock.
    pub(crate) fn sync_all(&self, journal: &mut Journal) -> Result<()> {
        // Write-ahead: a transaction's record is durable before any of its batches is.
        journal.sync(&self.shared.storage)?;
        let _syncing = lock(&self.shared.syncing, &"the sync lock")?;
        let topics: Vec<Arc<Topic>> = {
            let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
            topics.values().cloned().collect()
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

    /// A counter bumped by every append to this log (all partitions), so an idle consumer can
    /// tell "nothing new" without touching a partition.
    pub fn append_version(&self) -> u64 {
        self.shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .version
    }

    /// Pushes onto `out` the partitions appended to after [`append_version`](Self::append_version)
    /// was `seen` (a partition may appear more than once), and returns the current version —
    /// or `None`, pushing nothing, when `seen` is too far behind for the log to remember them
    /// all: the caller then looks at every partition it reads. Costs O(appends since `seen`),
    /// nothing when nothing was appended.
    pub fn appended_since(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
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

    /// Blocks until [`append_version`](Self::append_version) differs from `seen` or `timeout`
    /// elapses; returns the current version.
    pub fn wait_for_append(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        let mut journal = self
            .shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while journal.version == seen {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                break;
            }
            journal = match self.shared.appended.wait_timeout(journal, left) {
                Ok((j, _)) => j,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        journal.version
    }
}
