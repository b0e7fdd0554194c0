//! Kafka's record batch, magic v2 (`log/FORMAT.md`, "Batch"), and [`BatchBuilder`], which
//! encodes an outgoing batch in place: header space is reserved at the front of one reusable
//! buffer, records are encoded behind it, and header + CRC are filled in when the batch is
//! sealed. With compression the records are compressed into a second reusable buffer that also
//! has the header reserved. Nothing here copies a batch into an envelope: the sealed bytes are
//! what the embedded log writes to its segment and what a Kafka Produce request carries.

use crate::codec;
use crate::error::{Error, Result};
use crate::types::{Compression, TimestampType, TopicPartition};
use crate::varint::{put_varlong, varlong_len};

/// Bytes before the records section.
pub const HEADER_LEN: usize = 61;
/// `baseOffset` and `batchLength`: the bytes before the length's coverage ("log overhead").
pub const LOG_OVERHEAD: usize = 12;
/// The format version in byte 16.
pub const MAGIC: u8 = 2;
/// Where the magic byte sits.
pub const MAGIC_AT: usize = 16;
/// The CRC covers the batch from the attributes (byte 21) to its end.
pub const CRC_START: usize = 21;
/// Bits 0–2 of the attributes: the codec.
pub const ATTR_CODEC_MASK: u16 = 0b111;
/// Bit 3: timestamps are log-append time.
pub const ATTR_LOG_APPEND_TIME: u16 = 1 << 3;
/// Bit 4: the batch belongs to a transaction.
pub const ATTR_TRANSACTIONAL: u16 = 1 << 4;
/// Bit 5: a control batch (a transaction marker).
pub const ATTR_CONTROL: u16 = 1 << 5;
/// The largest batch the format's 32-bit length can describe.
pub const MAX_BATCH_LEN: usize = i32::MAX as usize;

/// The fixed-size header of a Kafka v2 record batch, in the order of its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: u64,
    /// Bytes after the length field: `total_len() - 12`.
    pub length: u32,
    /// The leader epoch at append (0 in the embedded log; -1 in a Produce request).
    pub leader_epoch: i32,
    /// CRC32C of the bytes from the attributes to the end of the batch.
    pub crc: u32,
    /// Codec, timestamp type, transactional and control bits.
    pub attributes: u16,
    /// The last record's offset minus `base_offset` (more than `record_count - 1` once a
    /// compacted batch has gaps).
    pub last_offset_delta: u32,
    /// Timestamp of the first record (ms); records store deltas to it.
    pub first_timestamp: i64,
    /// Largest record timestamp.
    pub max_timestamp: i64,
    /// The transactional or idempotent producer, -1 for none.
    pub producer_id: i64,
    /// Its epoch, -1 for none.
    pub producer_epoch: i16,
    /// The first record's sequence number, -1 for none.
    pub base_sequence: i32,
    /// Number of records (0 only in a batch compaction emptied).
    pub record_count: u32,
}

fn be<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = b.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

impl BatchHeader {
    /// Parses the header at the front of `b`; `Err(reason)` if it cannot be one. The CRC is
    /// not checked here (see [`batch_crc`]).
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < HEADER_LEN {
            return Err(format!(
                "{} bytes left, a batch header needs {HEADER_LEN}",
                b.len()
            ));
        }
        let magic = b.get(MAGIC_AT).copied().unwrap_or_default();
        if magic != MAGIC {
            return Err(format!(
                "magic {magic}: only Kafka's v2 record batches (magic 2) are supported"
            ));
        }
        let base_offset = i64::from_be_bytes(be(b, 0));
        let length = i32::from_be_bytes(be(b, 8));
        let last_offset_delta = i32::from_be_bytes(be(b, 23));
        let record_count = i32::from_be_bytes(be(b, 57));
        let (Ok(base_offset), Ok(length), Ok(last_offset_delta), Ok(record_count)) = (
            u64::try_from(base_offset),
            u32::try_from(length),
            u32::try_from(last_offset_delta),
            u32::try_from(record_count),
        ) else {
            return Err(format!(
                "a negative base offset ({base_offset}), length ({length}), last offset delta \
                 ({last_offset_delta}) or record count ({record_count})"
            ));
        };
        if (length as usize) < HEADER_LEN - LOG_OVERHEAD {
            return Err(format!("impossible batch length {length}"));
        }
        if u64::from(record_count) > u64::from(last_offset_delta) + 1 {
            return Err(format!(
                "{record_count} records but a last offset delta of {last_offset_delta}"
            ));
        }
        let attributes = u16::from_be_bytes(be(b, 21));
        if Compression::from_id(attributes & ATTR_CODEC_MASK).is_none() {
            return Err(format!("unknown codec in attributes {attributes:#06x}"));
        }
        Ok(BatchHeader {
            base_offset,
            length,
            leader_epoch: i32::from_be_bytes(be(b, 12)),
            crc: u32::from_be_bytes(be(b, 17)),
            attributes,
            last_offset_delta,
            first_timestamp: i64::from_be_bytes(be(b, 27)),
            max_timestamp: i64::from_be_bytes(be(b, 35)),
            producer_id: i64::from_be_bytes(be(b, 43)),
            producer_epoch: i16::from_be_bytes(be(b, 51)),
            base_sequence: i32::from_be_bytes(be(b, 53)),
            record_count,
        })
    }

    /// The whole batch's size, base offset and length fields included.
    pub fn total_len(&self) -> u64 {
        u64::from(self.length) + LOG_OVERHEAD as u64
    }

    /// Offset of the batch's last record (its last offset delta's, after compaction).
    pub fn last_offset(&self) -> u64 {
        self.base_offset
            .saturating_add(u64::from(self.last_offset_delta))
    }

    /// Offset after the batch's last record.
    pub fn next_offset(&self) -> u64 {
        self.last_offset().saturating_add(1)
    }

    /// The codec of the records section.
    pub fn compression(&self) -> Compression {
        Compression::from_id(self.attributes & ATTR_CODEC_MASK).unwrap_or_default()
    }

    /// What the timestamps mean.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether this is a control batch (a transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Writes the header (magic included; `crc` as it is) into the front of `b`.
    pub fn write(&self, b: &mut [u8]) {
        let fields: [(usize, &[u8]); 13] = [
            (0, &self.base_offset.to_be_bytes()),
            (8, &self.length.to_be_bytes()),
            (12, &self.leader_epoch.to_be_bytes()),
            (MAGIC_AT, &[MAGIC]),
            (17, &self.crc.to_be_bytes()),
            (21, &self.attributes.to_be_bytes()),
            (23, &self.last_offset_delta.to_be_bytes()),
            (27, &self.first_timestamp.to_be_bytes()),
            (35, &self.max_timestamp.to_be_bytes()),
            (43, &self.producer_id.to_be_bytes()),
            (51, &self.producer_epoch.to_be_bytes()),
            (53, &self.base_sequence.to_be_bytes()),
            (57, &self.record_count.to_be_bytes()),
        ];
        for (at, bytes) in fields {
            if let Some(dst) = b.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
    }
}

/// The CRC32C a batch must hold in bytes 17..21: over everything from the attributes (byte 21)
/// to the batch's end. The base offset, length and leader epoch are outside it, so a batch
/// moves to another offset without a new checksum, as in Kafka.
pub fn batch_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_START..).unwrap_or_default())
}

/// Sets a whole batch's base offset in place (outside the CRC: nothing else changes).
pub fn set_base_offset(batch: &mut [u8], base_offset: u64) {
    if let Some(dst) = batch.get_mut(..8) {
        dst.copy_from_slice(&base_offset.to_be_bytes());
    }
}

/// A transactional producer's fields in a batch header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerFields {
    /// The producer id the transaction coordinator gave.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The sequence number of the batch's first record (per partition, from 0).
    pub base_sequence: i32,
}

/// Where a sealed batch goes: what the header says beyond the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The base offset (0 for a Produce request: the broker assigns it).
    pub base_offset: u64,
    /// The leader epoch (0 in the embedded log, -1 in a Produce request).
    pub leader_epoch: i32,
    /// The transactional producer, if the batch is part of a transaction.
    pub producer: Option<ProducerFields>,
}

impl Placement {
    /// A non-transactional batch at `base_offset`, leader epoch 0: the embedded log's batches.
    pub fn at(base_offset: u64) -> Self {
        Self {
            base_offset,
            leader_epoch: 0,
            producer: None,
        }
    }
}

/// Builds one outgoing batch. Reuse it: the embedded log's `Log::append` clears it and keeps
/// its buffers (and its zstd context) for the next batch.
pub struct BatchBuilder {
    compression: Compression,
    /// `HEADER_LEN` reserved bytes, then the encoded records.
    buf: Vec<u8>,
    /// `HEADER_LEN` reserved bytes, then the compressed records (only with a codec).
    compressed: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    count: u32,
    first_timestamp: i64,
    max_timestamp: i64,
}

impl std::fmt::Debug for BatchBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchBuilder")
            .field("compression", &self.compression)
            .field("records", &self.count)
            .field("size_bytes", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new(Compression::None)
    }
}

impl BatchBuilder {
    /// An empty builder whose batches are stored with `compression`.
    pub fn new(compression: Compression) -> Self {
        Self {
            compression,
            buf: vec![0; HEADER_LEN],
            compressed: Vec::new(),
            zstd: None,
            count: 0,
            first_timestamp: 0,
            max_timestamp: 0,
        }
    }

    /// The codec batches are stored with.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Encodes one record (Kafka's record format, no headers) behind the previous ones.
    /// `None` is a null key or value (a tombstone); `Some(&[])` is an empty one.
    pub fn push(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.push_with_headers(timestamp, key, value, std::iter::empty());
    }

    /// Encodes one record with `headers` (key, value; `None` is a null value), in order. The
    /// iterator is walked twice (size, then bytes), so it should be cheap to clone.
    pub fn push_with_headers<'h, I>(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: I,
    ) where
        I: Iterator<Item = (&'h [u8], Option<&'h [u8]>)> + Clone,
    {
        if self.count == 0 {
            self.first_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let ts_delta = timestamp.wrapping_sub(self.first_timestamp);
        let offset_delta = i64::from(self.count);
        let len_of = |b: Option<&[u8]>| b.map_or(-1, |b| b.len() as i64);
        let (key_len, value_len) = (len_of(key), len_of(value));
        let mut header_count = 0i64;
        let mut headers_len = 0;
        for (k, v) in headers.clone() {
            header_count += 1;
            headers_len += varlong_len(k.len() as i64)
                + k.len()
                + varlong_len(len_of(v))
                + v.map_or(0, <[u8]>::len);
        }
        let body = 1 // attributes
            + varlong_len(ts_delta)
            + varlong_len(offset_delta)
            + varlong_len(key_len)
            + key.map_or(0, <[u8]>::len)
            + varlong_len(value_len)
            + value.map_or(0, <[u8]>::len)
            + varlong_len(header_count)
            + headers_len;
        self.buf.reserve(body + 5);
        put_varlong(&mut self.buf, body as i64);
        self.buf.push(0); // record attributes: unused, as in Kafka
        put_varlong(&mut self.buf, ts_delta);
        put_varlong(&mut self.buf, offset_delta);
        put_varlong(&mut self.buf, key_len);
        self.buf.extend_from_slice(key.unwrap_or_default());
        put_varlong(&mut self.buf, value_len);
        self.buf.extend_from_slice(value.unwrap_or_default());
        put_varlong(&mut self.buf, header_count);
        if header_count > 0 {
            for (k, v) in headers {
                put_varlong(&mut self.buf, k.len() as i64);
                self.buf.extend_from_slice(k);
                put_varlong(&mut self.buf, len_of(v));
                self.buf.extend_from_slice(v.unwrap_or_default());
            }
        }
        self.count = self.count.saturating_add(1);
    }

    /// Records pushed since the last clear.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no record was pushed since the last clear.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size so far, uncompressed, header included.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The encoded records section so far, uncompressed: Kafka's v2 records, back to back
    /// (offset deltas from 0, timestamp deltas from [`BatchBuilder::first_timestamp`]), the
    /// part of the batch behind the header that [`BatchBuilder::seal`] compresses if asked.
    pub fn records_section(&self) -> &[u8] {
        self.buf.get(HEADER_LEN..).unwrap_or_default()
    }

    /// The first record's timestamp (the base of the records' timestamp deltas); 0 when empty.
    pub fn first_timestamp(&self) -> i64 {
        if self.count == 0 {
            0
        } else {
            self.first_timestamp
        }
    }

    /// The largest record timestamp; 0 when empty.
    pub fn max_timestamp(&self) -> i64 {
        if self.count == 0 {
            0
        } else {
            self.max_timestamp
        }
    }

    /// Forgets the records; keeps the buffers' capacity.
    pub fn clear(&mut self) {
        self.buf.truncate(HEADER_LEN);
        self.compressed.clear();
        self.count = 0;
    }

    /// Fills in the header (and compresses, if asked) for a batch placed as `at` says and
    /// returns the finished Kafka v2 batch, ready to be written or sent as it is. Sealing again
    /// compresses again; the records stay until [`BatchBuilder::clear`].
    pub fn seal(&mut self, tp: &TopicPartition, at: Placement) -> Result<&[u8]> {
        let too_large = |size: usize| Error::BatchTooLarge {
            topic_partition: tp.clone(),
            size: size as u64,
        };
        if self.buf.len() > MAX_BATCH_LEN {
            return Err(too_large(self.buf.len()));
        }
        let codec = self.compression;
        let out = match codec {
            Compression::None => &mut self.buf,
            _ => {
                let records = self.buf.get(HEADER_LEN..).unwrap_or_default();
                self.compressed.clear();
                self.compressed.resize(HEADER_LEN, 0);
                codec::compress(codec, records, &mut self.compressed, &mut self.zstd).map_err(
                    |e| Error::Compression {
                        codec,
                        reason: format!(
                            "compressing the batch for {tp} at offset {}: {e}",
                            at.base_offset
                        ),
                    },
                )?;
                &mut self.compressed
            }
        };
        if out.len() > MAX_BATCH_LEN {
            return Err(too_large(out.len()));
        }
        let p = at.producer.unwrap_or(ProducerFields {
            producer_id: -1,
            epoch: -1,
            base_sequence: -1,
        });
        let mut attributes = codec.id();
        if at.producer.is_some() {
            attributes |= ATTR_TRANSACTIONAL;
        }
        let header = BatchHeader {
            base_offset: at.base_offset,
            length: (out.len() - LOG_OVERHEAD) as u32,
            leader_epoch: at.leader_epoch,
            crc: 0,
            attributes,
            last_offset_delta: self.count.saturating_sub(1),
            first_timestamp: self.first_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: p.producer_id,
            producer_epoch: p.epoch,
            base_sequence: p.base_sequence,
            record_count: self.count,
        };
        header.write(out);
        let crc = batch_crc(out);
        if let Some(dst) = out.get_mut(17..21) {
            dst.copy_from_slice(&crc.to_be_bytes());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_the_crc_covers_from_the_attributes() {
        let tp = TopicPartition::new("t", 0);
        let mut b = BatchBuilder::new(Compression::None);
        b.push(10, Some(b"k"), None);
        b.push(7, None, Some(b""));
        let bytes = b
            .seal(&tp, Placement::at(42))
            .map(<[u8]>::to_vec)
            .expect("seal");
        let h = BatchHeader::parse(&bytes).expect("parse");
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.record_count, 2);
        assert_eq!((h.last_offset(), h.next_offset()), (43, 44));
        assert_eq!((h.first_timestamp, h.max_timestamp), (10, 10));
        assert_eq!(h.total_len(), bytes.len() as u64);
        assert_eq!(h.crc, batch_crc(&bytes));
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (-1, -1, -1)
        );
        let mut moved = bytes.clone();
        set_base_offset(&mut moved, 7);
        assert_eq!(
            batch_crc(&moved),
            h.crc,
            "the base offset is outside the CRC"
        );
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert_ne!(batch_crc(&flipped), h.crc);
        let mut old = bytes.clone();
        old[MAGIC_AT] = 1;
        assert!(
            BatchHeader::parse(&old)
                .expect_err("magic 1")
                .contains("magic 1")
        );
    }

    #[test]
    fn a_transactional_seal_sets_the_producer_fields_and_bit() {
        let tp = TopicPartition::new("t", 0);
        let mut b = BatchBuilder::new(Compression::Zstd);
        b.push(1, Some(b"k"), Some(b"v"));
        let producer = ProducerFields {
            producer_id: 9,
            epoch: 2,
            base_sequence: 5,
        };
        let at = Placement {
            base_offset: 0,
            leader_epoch: -1,
            producer: Some(producer),
        };
        let h = BatchHeader::parse(b.seal(&tp, at).expect("seal")).expect("parse");
        assert!(h.is_transactional() && !h.is_control());
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (9, 2, 5)
        );
        assert_eq!((h.leader_epoch, h.compression()), (-1, Compression::Zstd));
    }
}
