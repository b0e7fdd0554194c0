//! The crate's error type. Every message names the topic-partition and the offset it is about.

use crate::types::{Compression, TopicPartition};

/// A batch or record that cannot be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A batch whose header or checksum is not a valid Kafka v2 batch.
    #[error("corrupt batch in {topic_partition} at offset {offset}: {reason}")]
    CorruptBatch {
        /// The partition.
        topic_partition: TopicPartition,
        /// The batch's base offset as its header gives it (-1 if unknown).
        offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// Compressing or decompressing a batch failed.
    #[error("{codec:?} compression error: {reason}")]
    Compression {
        /// The codec.
        codec: Compression,
        /// What failed, naming the partition and offset.
        reason: String,
    },
    /// A record inside a checksum-valid batch does not decode.
    #[error("corrupt record in {topic_partition} at offset {offset}: {reason}")]
    CorruptRecord {
        /// The partition.
        topic_partition: TopicPartition,
        /// The offset of the record (or of its batch, if the record's own is unknown).
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A batch too large for the format's 32-bit length.
    #[error("batch of {size} bytes too large for {topic_partition}")]
    BatchTooLarge {
        /// The partition.
        topic_partition: TopicPartition,
        /// The batch's encoded size.
        size: u64,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
