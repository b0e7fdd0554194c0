//! Kafka record batches (magic v2) ↔ riffle-log's batch types.
//!
//! Kafka's v2 *records* are byte for byte riffle-log's records (`log/FORMAT.md`, "Record"), so
//! only the 61-byte batch header differs:
//!
//! - **fetch**: each Kafka batch in a fetch response becomes a [`FetchedBatch`] whose records
//!   section is a slice of the response buffer (no copy, no per-record work; compressed batches
//!   are decompressed once per batch);
//! - **produce**: a [`BatchBuilder`]'s encoded records section goes behind a Kafka header as it
//!   is (compressed with the builder's codec, if any), never re-encoded.

use std::io::Read;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use riffle_log::{
    BatchBuilder, BatchMeta, Compression, FetchedBatch, TimestampType, TopicPartition,
};

use crate::error::{Error, Result};

/// Bytes of a Kafka v2 batch header, up to and including the record count.
const HEADER_LEN: usize = 61;
/// `baseOffset` + `batchLength`: the part of the header before the length's coverage.
const LOG_OVERHEAD: usize = 12;
/// The CRC covers the batch from the attributes on.
const CRC_START: usize = 21;
const ATTR_CODEC_MASK: i16 = 0b111;
const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;
const ATTR_CONTROL: i16 = 1 << 5;
/// Decompressed records sections beyond this are refused.
const MAX_DECOMPRESSED: u64 = 1 << 30;

fn be<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = b.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

/// Decodes the record batches of one fetched partition. A batch cut off at the end (the
/// broker's size limit) is left out; control batches and empty batches are skipped; batches
/// that end before `from` are dropped.
pub(crate) fn decode_batches(
    tp: &TopicPartition,
    records: &Bytes,
    from: u64,
    out: &mut Vec<FetchedBatch>,
) -> Result<()> {
    let mut pos = 0;
    while records.len() - pos >= LOG_OVERHEAD {
        let head = records.get(pos..).unwrap_or_default();
        let base_offset = i64::from_be_bytes(be(head, 0));
        let batch_len = i32::from_be_bytes(be(head, 8));
        let err = |reason: String| Error::Batch {
            topic: tp.topic.to_string(),
            partition: tp.partition,
            offset: base_offset,
            reason,
        };
        let total = usize::try_from(batch_len)
            .ok()
            .filter(|&l| l >= HEADER_LEN - LOG_OVERHEAD)
            .map(|l| l + LOG_OVERHEAD)
            .ok_or_else(|| err(format!("impossible batch length {batch_len}")))?;
        if total > head.len() {
            break; // partial batch at the end of the response
        }
        let batch = records.slice(pos..pos + total);
        pos += total;
        let magic = batch.get(16).copied().unwrap_or_default();
        if magic != 2 {
            return Err(err(format!(
                "record batch magic {magic}: only the v2 format (Kafka 0.11+) is supported"
            )));
        }
        let crc = u32::from_be_bytes(be(&batch, 17));
        let actual = crc32c::crc32c(batch.get(CRC_START..).unwrap_or_default());
        if crc != actual {
            return Err(err(format!(
                "CRC32C mismatch (batch says {crc:#010x}, data has {actual:#010x})"
            )));
        }
        let attributes = i16::from_be_bytes(be(&batch, 21));
        let last_offset_delta = i32::from_be_bytes(be(&batch, 23));
        let first_timestamp = i64::from_be_bytes(be(&batch, 27));
        let max_timestamp = i64::from_be_bytes(be(&batch, 35));
        let count = i32::from_be_bytes(be(&batch, 57));
        let leader_epoch = i32::from_be_bytes(be(&batch, 12));
        let (Ok(base), Ok(last_delta), Ok(count)) = (
            u64::try_from(base_offset),
            u32::try_from(last_offset_delta),
            u32::try_from(count),
        ) else {
            return Err(err(format!(
                "negative base offset, last offset delta ({last_offset_delta}) or record count ({count})"
            )));
        };
        if attributes & ATTR_CONTROL != 0 || count == 0 || base + u64::from(last_delta) < from {
            continue;
        }
        if count > last_delta.saturating_add(1) {
            return Err(err(format!(
                "{count} records but a last offset delta of {last_delta}"
            )));
        }
        let payload = batch.slice(HEADER_LEN..);
        let (compression, section) = match attributes & ATTR_CODEC_MASK {
            0 => (Compression::None, payload),
            3 => {
                let mut out = Vec::new();
                lz4_flex::frame::FrameDecoder::new(&payload[..])
                    .take(MAX_DECOMPRESSED)
                    .read_to_end(&mut out)
                    .map_err(|e| err(format!("decompressing LZ4: {e}")))?;
                (Compression::Lz4, Bytes::from(out))
            }
            4 => {
                let mut out = Vec::new();
                zstd::stream::read::Decoder::new(&payload[..])
                    .map_err(|e| err(format!("decompressing Zstandard: {e}")))?
                    .take(MAX_DECOMPRESSED)
                    .read_to_end(&mut out)
                    .map_err(|e| err(format!("decompressing Zstandard: {e}")))?;
                (Compression::Zstd, Bytes::from(out))
            }
            1 => {
                let mut out = Vec::new();
                riffle_log::codec::gzip_decompress(&payload, &mut out, MAX_DECOMPRESSED as usize)
                    .map_err(|e| err(format!("decompressing gzip: {e}")))?;
                (Compression::Gzip, Bytes::from(out))
            }
            2 => {
                let mut out = Vec::new();
                riffle_log::codec::snappy_decompress(&payload, &mut out, MAX_DECOMPRESSED as usize)
                    .map_err(|e| err(format!("decompressing snappy: {e}")))?;
                (Compression::Snappy, Bytes::from(out))
            }
            other => return Err(err(format!("unknown compression codec {other}"))),
        };
        let meta = BatchMeta {
            topic_partition: tp.clone(),
            base_offset: base,
            record_count: count,
            first_timestamp,
            max_timestamp,
            timestamp_type: if attributes & ATTR_LOG_APPEND_TIME != 0 {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            leader_epoch,
            compression,
        };
        out.push(FetchedBatch::from_kafka(
            Arc::new(meta),
            last_delta,
            section,
        ));
    }
    Ok(())
}

/// Encodes `builder`'s records as one Kafka v2 batch (base offset 0: the broker assigns it),
/// compressed with the builder's codec.
pub(crate) fn encode_batch(tp: &TopicPartition, builder: &BatchBuilder) -> Result<Bytes> {
    let records = builder.records_section();
    let count = builder.len();
    let err = |reason: String| Error::Batch {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        offset: -1,
        reason,
    };
    let (codec, payload): (i16, std::borrow::Cow<'_, [u8]>) = match builder.compression() {
        Compression::Lz4 => {
            let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
            std::io::Write::write_all(&mut enc, records)
                .map_err(|e| err(format!("compressing with LZ4: {e}")))?;
            let out = enc
                .finish()
                .map_err(|e| err(format!("compressing with LZ4: {e}")))?;
            (3, out.into())
        }
        Compression::Zstd => {
            let out = zstd::bulk::compress(records, 0)
                .map_err(|e| err(format!("compressing with Zstandard: {e}")))?;
            (4, out.into())
        }
        Compression::Gzip => {
            let mut out = Vec::new();
            riffle_log::codec::gzip_compress(records, &mut out)
                .map_err(|e| err(format!("compressing with gzip: {e}")))?;
            (1, out.into())
        }
        Compression::Snappy => {
            let mut out = Vec::new();
            riffle_log::codec::snappy_compress(records, &mut out)
                .map_err(|e| err(format!("compressing with snappy: {e}")))?;
            (2, out.into())
        }
        _ => (0, records.into()),
    };
    let total = HEADER_LEN + payload.len();
    let batch_len = i32::try_from(total - LOG_OVERHEAD)
        .map_err(|_| err(format!("batch of {total} bytes is too large")))?;
    let last_delta = i32::try_from(count.saturating_sub(1))
        .map_err(|_| err(format!("{count} records in one batch")))?;
    let mut b = Vec::with_capacity(total);
    b.put_i64(0); // base offset
    b.put_i32(batch_len);
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2); // magic
    b.put_u32(0); // CRC, filled below
    b.put_i16(codec);
    b.put_i32(last_delta);
    b.put_i64(builder.first_timestamp());
    b.put_i64(builder.max_timestamp());
    b.put_i64(-1); // producer id
    b.put_i16(-1); // producer epoch
    b.put_i32(-1); // base sequence
    b.put_i32(last_delta + 1);
    b.put_slice(&payload);
    let crc = crc32c::crc32c(b.get(CRC_START..).unwrap_or_default());
    if let Some(dst) = b.get_mut(17..21) {
        dst.copy_from_slice(&crc.to_be_bytes());
    }
    Ok(Bytes::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(compression: Compression) {
        let tp = TopicPartition::new("t", 1);
        let mut builder = BatchBuilder::new(compression);
        builder.push(5, Some(b"a"), Some(b"1"));
        builder.push(9, Some(b"b"), None);
        let mut encoded = encode_batch(&tp, &builder).expect("encodes").to_vec();
        encoded[..8].copy_from_slice(&40i64.to_be_bytes()); // as the broker assigns it
        let mut two = encoded.clone();
        two.extend_from_slice(&encoded[..30]); // a partial batch behind it
        let mut out = Vec::new();
        decode_batches(&tp, &Bytes::from(two), 0, &mut out).expect("decodes");
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].base_offset(), out[0].last_offset()), (40, 41));
        let records: Vec<_> = out[0].records().map(|r| r.expect("record")).collect();
        assert_eq!(records[1].offset(), 41);
        assert_eq!(records[1].timestamp(), 9);
        assert_eq!(records[0].value().map(|v| &v[..]), Some(&b"1"[..]));
        assert!(records[1].value().is_none());
        out.clear();
        decode_batches(&tp, &Bytes::from(encoded.clone()), 42, &mut out).expect("decodes");
        assert!(
            out.is_empty(),
            "a batch that ends before the fetch offset is dropped"
        );
        encoded[70] ^= 1;
        let err = decode_batches(&tp, &Bytes::from(encoded), 0, &mut out).expect_err("crc");
        assert!(err.to_string().contains("t-1 at offset 40"), "{err}");
    }

    #[test]
    fn batches_round_trip_with_every_codec() {
        round_trip(Compression::None);
        round_trip(Compression::Lz4);
        round_trip(Compression::Zstd);
        round_trip(Compression::Gzip);
        round_trip(Compression::Snappy);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let tp = TopicPartition::new("t", 0);
        let mut out = Vec::new();
        let mut junk = vec![0u8; 80];
        junk[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert!(decode_batches(&tp, &Bytes::from(junk.clone()), 0, &mut out).is_err());
        junk[8..12].copy_from_slice(&60i32.to_be_bytes());
        assert!(decode_batches(&tp, &Bytes::from(junk), 0, &mut out).is_err());
    }
}
