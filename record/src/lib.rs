//! Kafka's record batch (magic v2), shared by riffle's two backends: the embedded log stores
//! these batches in its segments byte for byte, and the Kafka backend sends and receives them.
//! One implementation of each part:
//!
//! - **Identities**: [`TopicPartition`], [`Compression`] (Kafka's codec numbers and names),
//!   [`TimestampType`], and [`BatchMeta`], the metadata a batch's records share.
//! - **The batch** ([`BatchHeader`], [`batch_crc`]): the 61-byte header, CRC32C over the
//!   attributes to the end, the producer fields. The layout is in `log/FORMAT.md`.
//! - **Writing**: a [`BatchBuilder`] encodes records in place behind reserved header space and
//!   [`BatchBuilder::seal`] fills the header in (compressing once, into a reused buffer) for a
//!   segment ([`Placement::at`]) or a Produce request (base offset 0, a producer's fields).
//! - **Reading**: [`FetchedBatch::decode`] turns a checked batch into one `Arc<BatchMeta>` and
//!   one `Bytes` of records; its [`Record`]s and their [`Header`]s are slices of that buffer,
//!   decoded lazily, allocating nothing.
//! - **Codecs** ([`codec`]): gzip, snappy (xerial framing), LZ4 (frame) and Zstandard, as
//!   Kafka's Java client writes them, each with a decompression limit; Kafka's zig-zag
//!   [`varint`]s.
//! - **Placement**: [`murmur2`] and [`partition_for_key`], Kafka's default partitioner.

mod batch;
pub mod codec;
mod error;
mod murmur;
mod record;
mod types;
pub mod varint;

pub use crate::{
    batch::{
        ATTR_CODEC_MASK, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, BatchBuilder,
        BatchHeader, CRC_START, HEADER_LEN, LOG_OVERHEAD, MAGIC, MAGIC_AT, MAX_BATCH_LEN,
        Placement, ProducerFields, batch_crc, set_base_offset,
    },
    error::{Error, Result},
    murmur::{murmur2, partition_for_key},
    record::{FetchedBatch, Header, HeaderIter, Record, RecordIter},
    types::{BatchMeta, Compression, TimestampType, TopicPartition, UnknownCompression},
};
