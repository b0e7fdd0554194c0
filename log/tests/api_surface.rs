//! The public API the runtime is written against: these signatures must not change (this file
//! fails to compile if one does).

// Spelling the signatures out in full is the point of this file.
#![allow(clippy::type_complexity)]

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use riffle_log::{
    BatchBuilder, BatchMeta, Compression, Error, FetchedBatch, FsyncPolicy, Log, LogOptions,
    Record, RecordIter, Result, TimestampType, TopicPartition, murmur2, partition_for_key,
};

#[test]
fn signatures_match_the_contract() {
    let _: fn(&Log, &TopicPartition, &mut BatchBuilder) -> Result<u64> = Log::append;
    let _: fn(&Log, &TopicPartition, u64, usize) -> Result<Vec<FetchedBatch>> = Log::fetch;
    let _: fn(&Log, &str, u32) -> Result<()> = Log::create_topic;
    let _: fn(&Log, &str) -> Option<u32> = Log::partitions;
    let _: fn(&Log) -> Vec<(String, u32)> = Log::topics;
    let _: fn(&Log, &TopicPartition) -> Result<u64> = Log::end_offset;
    let _: fn(&Log, &TopicPartition) -> Result<u64> = Log::start_offset;
    let _: fn(&Log, &str, &[(TopicPartition, u64)]) -> Result<()> = Log::commit_offsets;
    let _: fn(&Log, &str, &TopicPartition) -> Result<Option<u64>> = Log::committed_offset;
    let _: for<'a> fn(
        &Log,
        &str,
        &mut [(TopicPartition, &'a mut BatchBuilder)],
        &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> = Log::commit_transaction;
    let _: fn(&Log) -> Result<()> = Log::sync;
    let _: fn(&Log) -> u64 = Log::append_version;
    let _: fn(&Log, u64, Duration) -> u64 = Log::wait_for_append;
    let _: fn(&Log) -> u64 = Log::wake_count;
    let _: fn(&Log, u64, u64, Duration) -> u64 = Log::wait_for_append_or_wake;
    let _: fn() -> Log = Log::in_memory;
    let _: for<'a> fn(&'a Log) -> Option<&'a Path> = Log::dir;
    let _: fn(&Path, LogOptions) -> Result<Log> = |p, o| Log::open(p, o);

    let _: fn(Compression) -> BatchBuilder = BatchBuilder::new;
    let _: fn(&mut BatchBuilder, i64, Option<&[u8]>, Option<&[u8]>) = BatchBuilder::push;
    let _: fn(&BatchBuilder) -> usize = BatchBuilder::len;
    let _: fn(&BatchBuilder) -> bool = BatchBuilder::is_empty;
    let _: fn(&BatchBuilder) -> usize = BatchBuilder::size_bytes;
    let _: fn(&mut BatchBuilder) = BatchBuilder::clear;

    let _: fn(&FetchedBatch) -> &Arc<BatchMeta> = FetchedBatch::meta;
    let _: fn(&FetchedBatch) -> u64 = FetchedBatch::base_offset;
    let _: fn(&FetchedBatch) -> u64 = FetchedBatch::last_offset;
    let _: fn(&FetchedBatch) -> RecordIter = FetchedBatch::records;
    let _: fn(&mut RecordIter) -> Option<Result<Record, riffle_log::RecordError>> = Iterator::next;
    let _: fn(&Record) -> &Arc<BatchMeta> = Record::meta;
    let _: fn(&Record) -> &TopicPartition = Record::topic_partition;
    let _: fn(&Record) -> u64 = Record::offset;
    let _: fn(&Record) -> i64 = Record::timestamp;
    let _: fn(&Record) -> Option<&Bytes> = Record::key;
    let _: fn(&Record) -> Option<&Bytes> = Record::value;

    let _: fn(&[u8]) -> i32 = murmur2;
    let _: fn(&[u8], u32) -> u32 = partition_for_key;
}

#[test]
fn types_match_the_contract() {
    let tp = TopicPartition {
        topic: Arc::from("orders"),
        partition: 3,
    };
    assert_eq!(tp, TopicPartition::new("orders", 3));
    assert_eq!(tp.to_string(), "orders-3");
    let meta = BatchMeta {
        topic_partition: tp,
        base_offset: 0,
        record_count: 1,
        first_timestamp: 0,
        max_timestamp: 0,
        timestamp_type: TimestampType::CreateTime,
        leader_epoch: 0,
        compression: Compression::None,
    };
    let _ = (meta, TimestampType::LogAppendTime);
    assert_eq!(Compression::default(), Compression::None);
    assert_eq!(Compression::from_str("lz4").ok(), Some(Compression::Lz4));
    assert_eq!("zstd".parse::<Compression>().ok(), Some(Compression::Zstd));
    assert_eq!("none".parse::<Compression>().ok(), Some(Compression::None));
    assert_eq!("GZIP".parse::<Compression>().ok(), Some(Compression::Gzip));
    assert_eq!(
        "snappy".parse::<Compression>().ok(),
        Some(Compression::Snappy)
    );
    assert!("brotli".parse::<Compression>().is_err());
    assert_eq!(FsyncPolicy::default(), FsyncPolicy::EveryCommit);
    let _ = (FsyncPolicy::EveryAppend, FsyncPolicy::Never);
    let o = LogOptions::default();
    assert_eq!(
        (o.fsync, o.segment_bytes, o.index_interval_bytes),
        (FsyncPolicy::EveryCommit, 64 << 20, 4096)
    );
    assert_eq!(o.with_txn_journal_bytes(1 << 20).txn_journal_bytes, 1 << 20);
}

#[allow(dead_code)]
fn error_variants_match_the_contract(e: Error) -> String {
    match e {
        Error::Io { path, source } => format!("{path:?}{source}"),
        Error::UnknownTopic { topic } => topic,
        Error::UnknownPartition { topic, partition } => format!("{topic}{partition}"),
        Error::PartitionCountMismatch {
            topic,
            existing,
            requested,
        } => {
            format!("{topic}{existing}{requested}")
        }
        Error::OffsetOutOfRange {
            topic_partition,
            offset,
            start,
            end,
        } => {
            format!("{topic_partition}{offset}{start}{end}")
        }
        Error::InvalidTopicConfig { topic, key, reason } => format!("{topic}{key}{reason}"),
        Error::Corrupt {
            path,
            position,
            reason,
        } => format!("{path:?}{position}{reason}"),
        Error::InvalidName { name } => name,
        Error::Record(riffle_log::RecordError::Compression { codec, reason }) => {
            format!("{codec:?}{reason}")
        }
        other => other.to_string(),
    }
}
