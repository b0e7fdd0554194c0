//! Identities and small value types: topic-partitions, codecs, timestamp types, batch metadata.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A partition of a topic. Cheap to clone: the topic name is shared.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: Arc<str>,
    /// The partition number, from 0.
    pub partition: u32,
}

impl TopicPartition {
    /// A topic-partition.
    pub fn new(topic: impl Into<Arc<str>>, partition: u32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    /// `topic-3`, as Kafka writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What a batch's timestamps mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampType {
    /// Set by the producer when it created the record.
    CreateTime,
    /// Set by the log when it appended the batch.
    LogAppendTime,
}

/// The codec of a batch's records section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Stored as is.
    #[default]
    None,
    /// LZ4 in the LZ4 frame format, as Kafka writes it (`lz4_flex`).
    Lz4,
    /// Zstandard (`zstd`, default level).
    Zstd,
    /// gzip (`flate2`, default level), one gzip member ([`crate::codec`]).
    Gzip,
    /// snappy in snappy-java's xerial framing, as Kafka's Java client writes it
    /// ([`crate::codec`]).
    Snappy,
}

impl Compression {
    /// The codec's number in a batch's attributes (bits 0–2), Kafka's `CompressionType.id`.
    pub fn id(self) -> u16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec with Kafka's number `id`, if there is one.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// The name of a codec was none of `none`, `gzip`, `snappy`, `lz4`, `zstd`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compression {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
pub struct UnknownCompression(pub String);

impl FromStr for Compression {
    type Err = UnknownCompression;

    /// `none`, `gzip`, `snappy`, `lz4` or `zstd` (ASCII case-insensitive; Kafka's
    /// `compression.type` names).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            _ => Err(UnknownCompression(s.to_owned())),
        }
    }
}

/// Metadata of one stored batch, shared by all its fetched records through one `Arc`.
#[derive(Debug)]
pub struct BatchMeta {
    /// Where the batch lives.
    pub topic_partition: TopicPartition,
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Number of records in the batch.
    pub record_count: u32,
    /// Timestamp of the first record; other records store a delta to it.
    pub first_timestamp: i64,
    /// Largest record timestamp in the batch.
    pub max_timestamp: i64,
    /// What the timestamps mean.
    pub timestamp_type: TimestampType,
    /// Leader epoch at append (always 0 in the embedded log, which has a single leader).
    pub leader_epoch: i32,
    /// Codec the batch was stored with.
    pub compression: Compression,
}
