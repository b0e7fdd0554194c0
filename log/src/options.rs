//! How the log trades durability for speed, and how it lays out segments.

/// When appended data is fsynced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FsyncPolicy {
    /// At every [`Log::commit_offsets`](crate::Log::commit_offsets): partitions with unsynced
    /// appends are fsynced before the offsets are written, so a committed offset never points
    /// past durable data. Also at [`Log::sync`](crate::Log::sync) and when a segment is rolled.
    /// A [`Log::commit_transaction`](crate::Log::commit_transaction) fsyncs its journal record
    /// (the commit point) and, like a commit, partitions with unsynced appends.
    #[default]
    EveryCommit,
    /// After every append, before `append` returns.
    EveryAppend,
    /// Only at [`Log::sync`](crate::Log::sync). A crash may lose any unsynced append, even one
    /// a committed offset points past. Group offsets are still written durably. Transactions
    /// stay atomic but are not durable until a sync (their journal record is not fsynced);
    /// the sync writes the journal before any partition, and records its length as committed
    /// after (damage to it is then an error, never a torn tail). A transaction still fsyncs a
    /// partition it writes to whose plain appends are not durable, as its offsets build on them.
    Never,
}

/// Options of a [`Log`](crate::Log).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LogOptions {
    /// When appends are made durable.
    pub fsync: FsyncPolicy,
    /// A segment is rolled when an append would grow it past this size (a batch larger than
    /// this gets a segment of its own). Clamped to 2 GiB, the largest size the index can address.
    pub segment_bytes: u64,
    /// The offset index gets an entry every this many bytes of batches.
    pub index_interval_bytes: u32,
    /// Once the transaction journal grows past this size, a transaction ends with a checkpoint:
    /// every partition is fsynced, transactional offsets are written to their group files, and
    /// the journal is emptied.
    pub txn_journal_bytes: u64,
    /// At most this many segment, index and journal files are open at once (least recently
    /// used ones are closed and reopened on their next use), whatever the partition count.
    pub max_open_files: usize,
    /// Open the log only to read it: nothing is created, locked exclusively, cut or rewritten
    /// (no torn tail is truncated, no journal replayed); appends, commits and topic creation
    /// fail with [`Error::ReadOnly`](crate::Error::ReadOnly). What `consume`, `topics` and
    /// `state inspect` use, so that looking at a log never changes it.
    pub read_only: bool,
    /// How often the cleaner thread of a writable [`Log::open`](crate::Log::open)ed log
    /// applies retention ([`Log::enforce_retention`](crate::Log::enforce_retention)); the
    /// first time one interval after opening. `None`: no thread, retention runs only when
    /// asked. Kafka's `log.retention.check.interval.ms`.
    pub retention_check_interval: Option<std::time::Duration>,
    /// How often the cleaner thread looks for compacted topics' partitions to clean
    /// ([`Log::compact`](crate::Log::compact)); `None`: compaction runs only when asked.
    /// Kafka's `log.cleaner.backoff.ms`.
    pub compaction_check_interval: Option<std::time::Duration>,
    /// At most this many bytes of dirty segments go into one pass's key map (at least one
    /// segment): a bound on a pass's memory, reads and time under the partition's lock. Kafka's
    /// `log.cleaner.dedupe.buffer.size` plays this part.
    pub cleaner_pass_bytes: u64,
    /// The cleaner thread reads and writes at most this many bytes a second on average (it
    /// sleeps between partitions); `None`: no limit. Kafka's
    /// `log.cleaner.io.max.bytes.per.second`.
    pub cleaner_io_bytes_per_sec: Option<u64>,
}

impl Default for LogOptions {
    /// `EveryCommit`, 64 MiB segments, an index entry every 4 KiB, a 32 MiB journal, 512 open
    /// files, retention every 5 minutes and a compaction look every 15 s (Kafka's defaults),
    /// 128 MiB of dirty segments per compaction pass, no cleaner I/O limit.
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::EveryCommit,
            segment_bytes: 64 << 20,
            index_interval_bytes: 4096,
            txn_journal_bytes: 32 << 20,
            max_open_files: 512,
            read_only: false,
            retention_check_interval: Some(std::time::Duration::from_secs(300)),
            compaction_check_interval: Some(std::time::Duration::from_secs(15)),
            cleaner_pass_bytes: 128 << 20,
            cleaner_io_bytes_per_sec: None,
        }
    }
}

impl LogOptions {
    /// These options with `fsync` as the fsync policy.
    pub fn with_fsync(mut self, fsync: FsyncPolicy) -> Self {
        self.fsync = fsync;
        self
    }

    /// These options with `segment_bytes` as the segment size.
    pub fn with_segment_bytes(mut self, segment_bytes: u64) -> Self {
        self.segment_bytes = segment_bytes;
        self
    }

    /// These options with `index_interval_bytes` as the index interval.
    pub fn with_index_interval_bytes(mut self, index_interval_bytes: u32) -> Self {
        self.index_interval_bytes = index_interval_bytes;
        self
    }

    /// These options with `txn_journal_bytes` as the journal size that triggers a checkpoint.
    pub fn with_txn_journal_bytes(mut self, txn_journal_bytes: u64) -> Self {
        self.txn_journal_bytes = txn_journal_bytes;
        self
    }

    /// These options with `max_open_files` as the bound on open files (at least 1).
    pub fn with_max_open_files(mut self, max_open_files: usize) -> Self {
        self.max_open_files = max_open_files;
        self
    }

    /// These options, read-only or not (see [`read_only`](Self::read_only)).
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// These options with `interval` as the retention check interval (`None`: no cleaner
    /// thread).
    pub fn with_retention_check_interval(mut self, interval: Option<std::time::Duration>) -> Self {
        self.retention_check_interval = interval;
        self
    }

    /// These options with `interval` as the compaction check interval (`None`: only when
    /// asked).
    pub fn with_compaction_check_interval(mut self, interval: Option<std::time::Duration>) -> Self {
        self.compaction_check_interval = interval;
        self
    }

    /// These options with `bytes` as the dirty bytes one compaction pass reads into its map.
    pub fn with_cleaner_pass_bytes(mut self, bytes: u64) -> Self {
        self.cleaner_pass_bytes = bytes;
        self
    }

    /// These options with `limit` as the cleaner thread's I/O limit (`None`: no limit).
    pub fn with_cleaner_io_bytes_per_sec(mut self, limit: Option<u64>) -> Self {
        self.cleaner_io_bytes_per_sec = limit;
        self
    }

    /// The options as the log applies them: sizes clamped to what the format can address.
    pub(crate) fn normalized(mut self) -> Self {
        self.segment_bytes = self.segment_bytes.clamp(1, i32::MAX as u64);
        self.index_interval_bytes = self.index_interval_bytes.max(1);
        self.max_open_files = self.max_open_files.max(1);
        self.cleaner_pass_bytes = self.cleaner_pass_bytes.max(1);
        self
    }
}
