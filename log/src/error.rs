//! The crate's one error type. Every message names what it is about: a file, a topic-partition,
//! an offset.

use std::io;
use std::path::PathBuf;

use riffle_record::TopicPartition;

/// Everything that can go wrong in the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on `path` failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory the operation was about.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The topic does not exist.
    #[error("unknown topic {topic:?}")]
    UnknownTopic {
        /// The topic asked for.
        topic: String,
    },
    /// The topic was deleted (by this or another process) since this handle opened it: reopen
    /// or recreate it.
    #[error("topic {topic:?} was deleted")]
    TopicDeleted {
        /// The topic.
        topic: String,
    },
    /// The topic exists but has no such partition.
    #[error("unknown partition {partition} of topic {topic:?}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
    },
    /// `create_topic` was asked for a different partition count than the topic has.
    #[error("topic {topic:?} exists with {existing} partitions, {requested} requested")]
    PartitionCountMismatch {
        /// The topic.
        topic: String,
        /// Its partition count.
        existing: u32,
        /// The partition count asked for.
        requested: u32,
    },
    /// A topic cannot have this many partitions (zero).
    #[error("topic {topic:?} cannot have {requested} partitions")]
    InvalidPartitionCount {
        /// The topic.
        topic: String,
        /// The partition count asked for.
        requested: u32,
    },
    /// A fetch asked for an offset outside `[start offset, end offset]`.
    #[error(
        "offset {offset} out of range {start}..{end} of {topic_partition} (start offset {start}, end offset {end})"
    )]
    OffsetOutOfRange {
        /// The partition.
        topic_partition: TopicPartition,
        /// The offset asked for.
        offset: u64,
        /// The partition's start offset: records below it were deleted (retention, or
        /// [`Log::delete_records`](crate::Log::delete_records)).
        start: u64,
        /// The partition's end offset.
        end: u64,
    },
    /// A file's content is not what the format says it must be.
    #[error("corrupt file {} at byte {position}: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte position of the problem in the file.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// A topic config key the embedded log does not apply, or a value it cannot take
    /// ([`TopicConfig`](crate::TopicConfig)).
    #[error("invalid config {key:?} for topic {topic:?}: {reason}")]
    InvalidTopicConfig {
        /// The topic.
        topic: String,
        /// The config key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A topic or group name that is not a safe file name.
    #[error(
        "invalid name {name:?}: names must be 1 to 249 bytes for a topic and 1 to 243 for a group \
         (its offsets file adds 12), not `.` or `..`, without `/`, `\\` or NUL (topic names: \
         only ASCII letters, digits, `.`, `_`, `-`)"
    )]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// A batch or record that does not encode or decode (`riffle-record`'s error: a corrupt
    /// record, a compression failure, a batch too large).
    #[error(transparent)]
    Record(#[from] riffle_record::Error),
    /// [`Log::append_sealed`](crate::Log::append_sealed) was given a batch the log does not
    /// store: damaged, cut, transactional, a control batch, or with gaps between its offsets.
    #[error("cannot append the batch to {topic_partition}: {reason}")]
    InvalidBatch {
        /// The partition.
        topic_partition: TopicPartition,
        /// What is wrong with the batch.
        reason: String,
    },
    /// The log directory was written in a format this version does not read (an older
    /// riffle-log's, before its segments held Kafka's v2 batches). Nothing was changed.
    #[error("the log at {} is in {found}; this riffle reads only riffle-log format 2 (Kafka's v2 record batches, log/FORMAT.md) and does not convert older logs: {hint}", path.display())]
    UnsupportedFormat {
        /// The log directory.
        path: PathBuf,
        /// What was found there.
        found: String,
        /// What to do.
        hint: String,
    },
    /// A write was asked of a log opened read-only ([`LogOptions::read_only`](crate::LogOptions)).
    #[error("cannot {what}: the log was opened read-only")]
    ReadOnly {
        /// What was asked.
        what: String,
    },
    /// An earlier failure (a panic while a lock was held, or a write that could not be rolled
    /// back) left this partition in an unknown state; it refuses further work until reopened.
    #[error("{what} is poisoned by an earlier failure; reopen the log")]
    Poisoned {
        /// What is poisoned (a topic-partition, or the group offsets).
        what: String,
    },
    /// A member of a group of processes was declared gone (its session expired, or a step
    /// found its lock free) and must not commit: its tasks may run elsewhere
    /// (log/FORMAT.md, *Groups of processes*).
    #[error("member {member:?} of group {group:?} is fenced: {reason}")]
    Fenced {
        /// The group.
        group: String,
        /// The member id.
        member: String,
        /// Why.
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches the path an `io::Error` is about (only on the error path: no allocation otherwise).
pub(crate) trait IoContext<T> {
    /// Maps the error to [`Error::Io`] naming `path`.
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
