//! riffle's embedded, durable, partitioned log.
//!
//! (crate docs being written)

mod batch;
#[cfg(test)]
mod crash_tests;
mod error;
mod log;
mod murmur;
mod offsets;
mod options;
mod partition;
mod record;
mod segment;
mod storage;
mod topic;
mod types;
mod varint;

pub use crate::{
    batch::BatchBuilder,
    error::{Error, Result},
    log::Log,
    murmur::{murmur2, partition_for_key},
    options::{FsyncPolicy, LogOptions},
    record::{FetchedBatch, Record, RecordIter},
    types::{BatchMeta, Compression, TimestampType, TopicPartition, UnknownCompression},
};
