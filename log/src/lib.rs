//! riffle's embedded, durable, partitioned log — the default backend of the riffle runtime.
//!
//! # What it is
//!
//! - **Topics** with a fixed number of **partitions**. A partition is a directory of *segment*
//!   files, named by their base offset and rolled at [`LogOptions::segment_bytes`], holding
//!   Apache Kafka's **record batches** (magic 2, CRC32C-checked, optionally compressed with
//!   gzip, snappy, LZ4 or Zstandard) byte for byte, with a sparse **offset index** per segment
//!   in Kafka's format that fetches seek with: Kafka's `kafka-dump-log.sh` reads both. The
//!   batch codec is the `riffle-record` crate, shared with the Kafka backend. The byte layout
//!   is in `FORMAT.md` next to this crate's `Cargo.toml`; a log written before that format is
//!   refused on open ([`Error::UnsupportedFormat`]), not converted.
//! - **Durable, and never silently wrong**: on [`Log::open`] a *torn tail* — damage at the end
//!   of a partition's active segment with no intact batch after it, past the partition's
//!   *recovery point* (the offset below which it was fsynced, kept in its `lock` file), what a
//!   crash mid-write leaves — is truncated, with a `tracing` warning naming the file, the byte
//!   position and the offset. Any other damage (damage below the recovery point, a damaged batch
//!   followed by intact ones, a missing, short or damaged sealed segment, a gap between
//!   segments, a deleted last segment, a damaged journal record followed by intact ones or below
//!   the journal's committed length, a journal or a group offsets file that vanished, a fetched
//!   batch at an unexpected offset) is an [`Error::Corrupt`] naming the file, the byte position
//!   and the offsets; only [`repair`] (`riffle log repair`) cuts it, and reports what it cut.
//!   Nothing that was fsynced is lost.
//!   A topic's metadata files (`partitions`: the count and the config recorded at creation;
//!   `config`) are checked against its partition directories whenever a handle loads it: one
//!   that is missing, edited or garbled is an [`Error::Corrupt`] naming it and what the
//!   directory holds — never a missing topic that the next writer would replace — and
//!   [`repair`] writes back what the directories (or the record) show, reporting it
//!   ([`RepairReport::restored`]).
//!   When data is fsynced is the [`FsyncPolicy`]: by default at every [`Log::commit_offsets`],
//!   which fsyncs every partition with unsynced appends *before* writing the group's offsets, so
//!   a committed offset never points past durable data.
//! - **Bounded open files**: segment, index and lock files are opened lazily and closed least
//!   recently used first past [`LogOptions::max_open_files`] (512, so 100 busy partitions, each
//!   with its segment, index and lock file, stay open), whatever the partition count (20,000
//!   partitions run under `ulimit -n 1024`).
//! - **Consumer-group offsets**, one file per group, replaced atomically (temp file, fsync,
//!   rename, directory fsync).
//! - **Zero-copy reads**: a [`FetchedBatch`] holds its metadata once, in an `Arc<`[`BatchMeta`]`>`,
//!   and its (decompressed) records section in one `Bytes`; each [`Record`] is that `Arc` plus
//!   slices of that buffer — decoding a record allocates nothing, nor do its headers
//!   ([`Record::headers`], Kafka's record headers, written with
//!   [`BatchBuilder::push_with_headers`]).
//! - **Encode once**: a [`BatchBuilder`] reserves the batch header in its buffer, encodes
//!   records in place behind it, and [`Log::append`] seals it (header and CRC filled in) and
//!   writes the buffer as it is. Compression goes to a second buffer of the builder, also
//!   reused. [`Log::append_sealed`] takes a whole Kafka v2 batch as it is (one sealed for a
//!   Kafka Produce request, or fetched from Kafka): only its base offset and leader epoch,
//!   outside its CRC, change.
//! - **Retention and deleted records**: topics carry Kafka's topic configs ([`TopicConfig`]:
//!   `cleanup.policy`, `retention.ms`, `retention.bytes`, `segment.bytes`, set by
//!   [`Log::create_topic_with`]). [`Log::enforce_retention`] — every
//!   [`LogOptions::retention_check_interval`] on a cleaner thread — deletes whole sealed
//!   segments that `retention.ms` or `retention.bytes` no longer keep, and
//!   [`Log::delete_records`] (Kafka's `deleteRecords`) moves the *start offset*; both record it
//!   durably in the partition's `start` file before removing any file, so a crash at any step
//!   leaves a correct log, and other processes' readers see either the records or
//!   [`Error::OffsetOutOfRange`] naming the start offset (log/FORMAT.md, *Start offset*).
//! - **Concurrent**: [`Log`] is `Clone + Send + Sync`; each partition has its own lock, so
//!   appends and fetches of different partitions run in parallel. [`Log::append_version`] and
//!   [`Log::wait_for_append`] let an idle consumer sleep without touching any partition.
//! - **Transactions** (exactly-once): [`Log::commit_transaction`] appends batches to any
//!   partitions and commits a group's offsets as one unit. It writes one checksummed record with
//!   all of it to a redo journal (`txn/journal`) and fsyncs it — the commit point — and only
//!   then writes the batches into their partitions, under their locks, so readers never see an
//!   uncommitted batch. [`Log::open`] replays the journal's intact records (a torn tail never
//!   committed and is dropped with a warning; a damaged record with intact ones after it is an
//!   [`Error::Corrupt`]). One fsync per transaction; the offsets and the
//!   partitions are made durable at checkpoints, which also empty the journal.
//! - **Kafka's partitioner**: [`murmur2`] and [`partition_for_key`] place keys exactly where
//!   Kafka's Java client does (`Utils.murmur2`, `toPositive(hash) % partitions`).
//! - **Many processes**: any number of processes may open one directory at once (producers,
//!   applications, `consume`, `topics`): appends from all of them land with dense offsets,
//!   transactions stay all-or-nothing, group offsets are read-modify-written under a lock, and
//!   recovery runs only under the lock writers hold — OS file locks, released when a process
//!   dies. [`LogOptions::read_only`] opens a log without changing any file. The protocol is in
//!   `FORMAT.md`, *Many processes*.
//! - **Compaction**: topics with `cleanup.policy=compact` keep the latest record per key
//!   ([`Log::compact`], on each writable handle's cleaner thread every
//!   [`LogOptions::compaction_check_interval`]): sealed segments are rewritten with their offsets
//!   kept (Kafka's compacted batches), tombstones go `delete.retention.ms` after the cleaning
//!   that kept them, and a swap is crash-safe and seen by readers in other processes. The
//!   protocol is in `FORMAT.md`, *Compaction*.
//! - **Testable**: [`Log::in_memory`] runs the same code on an in-memory storage backend (an
//!   internal trait, file-backed or memory-backed; the memory backend keeps a live and a durable
//!   copy of every file, so crash tests can keep only what was synced).
//!
//! # What it is not
//!
//! - Not a Kafka broker: no network protocol, no replication (the leader epoch is always 0).
//! - Not Kafka's transaction protocol: there are no transaction markers, producer ids or
//!   read-committed fetches. [`Log::commit_transaction`] gets the same effect (see
//!   *Transactions* above) without them; the batches' transactional and control bits are 0,
//!   and producer id, epoch and sequence are written as -1.
//!
//! # Example
//!
//! ```
//! use riffle_log::{partition_for_key, BatchBuilder, Compression, Log, TopicPartition};
//!
//! # fn main() -> riffle_log::Result<()> {
//! let log = Log::in_memory(); // or Log::open(dir, LogOptions::default())?
//! log.create_topic("orders", 3)?;
//! let tp = TopicPartition::new("orders", partition_for_key(b"alice", 3));
//!
//! let mut batch = BatchBuilder::new(Compression::Lz4); // reuse it for every batch
//! batch.push(1_700_000_000_000, Some(b"alice"), Some(b"2 apples"));
//! batch.push(1_700_000_000_005, Some(b"alice"), None); // a tombstone
//! let base = log.append(&tp, &mut batch)?; // clears the builder
//! assert_eq!(base, 0);
//!
//! for fetched in log.fetch(&tp, 0, 1 << 20)? {
//!     for record in fetched.records() {
//!         let record = record?;
//!         println!("{} @{}: {:?}", record.topic_partition(), record.offset(), record.value());
//!     }
//! }
//! // Fsyncs the appended data, then stores the offset durably.
//! log.commit_offsets("billing", &[(tp.clone(), 2)])?;
//! assert_eq!(log.committed_offset("billing", &tp)?, Some(2));
//! # Ok(())
//! # }
//! ```

mod changes;
mod cleaner;
#[cfg(test)]
mod compaction_crash_tests;
#[cfg(test)]
mod crash_tests;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod group;
mod handles;
mod journal;
mod lease;
mod log;
mod names;
mod offsets;
mod options;
mod partition;
mod repair;
#[cfg(test)]
mod retention_crash_tests;
mod segment;
mod slots;
mod storage;
mod topic;
mod topic_config;
mod topic_meta;
#[cfg(test)]
mod topic_meta_tests;
mod txn;
#[cfg(test)]
mod txn_crash_tests;
#[cfg(test)]
mod txn_model_tests;
mod wakeup;

pub use crate::{
    error::{Error, Result},
    group::{Departed, Departure, Group, GroupMember, GroupView, MEMBERS_DIR, MemberRecord, Step},
    log::{Log, PartitionInfo, RetentionReport},
    options::{FsyncPolicy, LogOptions},
    partition::CompactionReport,
    repair::{
        CutAction, RepairCut, RepairOptions, RepairReport, RestoreAction, Restored, Unrestorable,
        repair,
    },
    topic_config::{
        CleanupPolicy, DEFAULT_DELETE_RETENTION_MS, DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
        TOPIC_CONFIG_KEYS, TopicConfig,
    },
};
/// The record format's error, inside [`Error::Record`].
pub use riffle_record::Error as RecordError;
/// The record types, shared with the Kafka backend (the `riffle-record` crate).
pub use riffle_record::{
    BatchBuilder, BatchMeta, Compression, FetchedBatch, Header, HeaderIter, Record, RecordIter,
    TimestampType, TopicPartition, UnknownCompression, murmur2, partition_for_key,
};
/// The codecs and varints of the record format (the `riffle-record` crate).
pub use riffle_record::{codec, varint};
