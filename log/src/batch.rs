//! The batch format (see `FORMAT.md`) and [`BatchBuilder`], which encodes an outgoing batch in
//! place: header space is reserved at the front of one reusable buffer, records are encoded
//! behind it, and header + CRC are filled in at append time. With compression the records are
//! compressed into a second reusable buffer that also has the header reserved. Nothing here
//! copies a batch into an envelope.

use crate::error::{Error, Result};
use crate::types::{Compression, TimestampType, TopicPartition};
use crate::varint::{put_varlong, varlong_len};

/// Bytes before the records section.
pub(crate) const HEADER_LEN: usize = 61;
/// Format version in byte 8.
pub(crate) const MAGIC: u8 = 1;
/// Bits 0–2 of the attributes: the codec.
pub(crate) const ATTR_CODEC_MASK: u16 = 0b111;
/// Bit 3: timestamps are log-append time.
pub(crate) const ATTR_LOG_APPEND_TIME: u16 = 1 << 3;
/// Bit 4: reserved for transactional batches (exactly-once, later).
#[allow(dead_code)]
pub(crate) const ATTR_TRANSACTIONAL: u16 = 1 << 4;
/// Bit 5: reserved for control batches (transaction markers, later).
#[allow(dead_code)]
pub(crate) const ATTR_CONTROL: u16 = 1 << 5;
/// The largest batch the format's 32-bit length can describe.
pub(crate) const MAX_BATCH_LEN: usize = i32::MAX as usize;

/// The fixed-size header of a stored batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    /// Bytes after the length field: `total_len() - 4`.
    pub(crate) length: u32,
    pub(crate) crc: u32,
    pub(crate) attributes: u16,
    pub(crate) base_offset: u64,
    pub(crate) record_count: u32,
    pub(crate) first_timestamp: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) leader_epoch: i32,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
    /// Length of the records section once decompressed.
    pub(crate) records_len: u32,
}

fn be<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = b.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

impl BatchHeader {
    /// Parses the header at the front of `b`; `Err(reason)` if it cannot be one.
    pub(crate) fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < HEADER_LEN {
            return Err(format!(
                "{} bytes left, a batch header needs {HEADER_LEN}",
                b.len()
            ));
        }
        if b.get(8) != Some(&MAGIC) {
            return Err(format!("bad magic {:?} (expected {MAGIC})", b.get(8)));
        }
        let h = BatchHeader {
            length: u32::from_be_bytes(be(b, 0)),
            crc: u32::from_be_bytes(be(b, 4)),
            attributes: u16::from_be_bytes(be(b, 9)),
            base_offset: u64::from_be_bytes(be(b, 11)),
            record_count: u32::from_be_bytes(be(b, 19)),
            first_timestamp: i64::from_be_bytes(be(b, 23)),
            max_timestamp: i64::from_be_bytes(be(b, 31)),
            leader_epoch: i32::from_be_bytes(be(b, 39)),
            producer_id: i64::from_be_bytes(be(b, 43)),
            producer_epoch: i16::from_be_bytes(be(b, 51)),
            base_sequence: i32::from_be_bytes(be(b, 53)),
            records_len: u32::from_be_bytes(be(b, 57)),
        };
        if (h.length as usize) < HEADER_LEN - 4 || h.length as usize > MAX_BATCH_LEN {
            return Err(format!("impossible batch length {}", h.length));
        }
        if h.record_count == 0 {
            return Err("batch with zero records".to_owned());
        }
        if Compression::from_id(h.attributes & ATTR_CODEC_MASK).is_none() {
            return Err(format!("unknown codec in attributes {:#06x}", h.attributes));
        }
        Ok(h)
    }

    /// The whole batch's size on disk, length field included.
    pub(crate) fn total_len(&self) -> u64 {
        u64::from(self.length) + 4
    }

    /// Offset after the batch's last record.
    pub(crate) fn next_offset(&self) -> u64 {
        self.base_offset
            .saturating_add(u64::from(self.record_count))
    }

    pub(crate) fn compression(&self) -> Compression {
        Compression::from_id(self.attributes & ATTR_CODEC_MASK).unwrap_or_default()
    }

    pub(crate) fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    fn write(&self, b: &mut [u8]) {
        let fields: [(usize, &[u8]); 12] = [
            (0, &self.length.to_be_bytes()),
            (4, &self.crc.to_be_bytes()),
            (8, &[MAGIC]),
            (9, &self.attributes.to_be_bytes()),
            (11, &self.base_offset.to_be_bytes()),
            (19, &self.record_count.to_be_bytes()),
            (23, &self.first_timestamp.to_be_bytes()),
            (31, &self.max_timestamp.to_be_bytes()),
            (39, &self.leader_epoch.to_be_bytes()),
            (43, &self.producer_id.to_be_bytes()),
            (51, &self.producer_epoch.to_be_bytes()),
            (53, &self.base_sequence.to_be_bytes()),
        ];
        for (at, bytes) in fields {
            if let Some(dst) = b.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
        if let Some(dst) = b.get_mut(57..61) {
            dst.copy_from_slice(&self.records_len.to_be_bytes());
        }
    }
}

/// The CRC32C stored in a batch: over everything from the magic byte to the batch's end.
pub(crate) fn batch_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(8..).unwrap_or_default())
}

/// Builds one outgoing batch. Reuse it: [`Log::append`](crate::Log::append) clears it and keeps
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
    /// (offset deltas from 0, timestamp deltas from [`BatchBuilder::first_timestamp`]). The Kafka
    /// backend sends it behind a Kafka batch header as it is.
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

    /// Fills in the header (and compresses, if asked) for a batch at `base_offset` and returns
    /// the finished bytes, ready to be written as they are.
    pub(crate) fn seal(&mut self, tp: &TopicPartition, base_offset: u64) -> Result<&[u8]> {
        let records_len = self.buf.len() - HEADER_LEN;
        let too_large = |size: usize| Error::BatchTooLarge {
            topic_partition: tp.clone(),
            size: size as u64,
        };
        if self.buf.len() > MAX_BATCH_LEN {
            return Err(too_large(self.buf.len()));
        }
        let codec = self.compression;
        let compress_err = |reason: String| Error::Compression {
            codec,
            reason: format!("compressing the batch for {tp} at offset {base_offset}: {reason}"),
        };
        let out = match codec {
            Compression::None => &mut self.buf,
            Compression::Lz4 => {
                let records = self.buf.get(HEADER_LEN..).unwrap_or_default();
                let bound = lz4_flex::block::get_maximum_output_size(records.len());
                self.compressed.resize(HEADER_LEN + bound, 0);
                let dst = self.compressed.get_mut(HEADER_LEN..).unwrap_or_default();
                let n = lz4_flex::block::compress_into(records, dst)
                    .map_err(|e| compress_err(e.to_string()))?;
                self.compressed.truncate(HEADER_LEN + n);
                &mut self.compressed
            }
            Compression::Zstd => {
                let records = self.buf.get(HEADER_LEN..).unwrap_or_default();
                let bound = zstd::zstd_safe::compress_bound(records.len());
                self.compressed.resize(HEADER_LEN + bound, 0);
                let zstd = match &mut self.zstd {
                    Some(z) => z,
                    None => self.zstd.insert(
                        zstd::bulk::Compressor::new(0).map_err(|e| compress_err(e.to_string()))?,
                    ),
                };
                let dst = self.compressed.get_mut(HEADER_LEN..).unwrap_or_default();
                let n = zstd
                    .compress_to_buffer(records, dst)
                    .map_err(|e| compress_err(e.to_string()))?;
                self.compressed.truncate(HEADER_LEN + n);
                &mut self.compressed
            }
            Compression::Gzip | Compression::Snappy => {
                let records = self.buf.get(HEADER_LEN..).unwrap_or_default();
                self.compressed.clear();
                self.compressed.resize(HEADER_LEN, 0);
                if codec == Compression::Gzip {
                    crate::codec::gzip_compress(records, &mut self.compressed)
                        .map_err(|e| compress_err(e.to_string()))?;
                } else {
                    crate::codec::snappy_compress(records, &mut self.compressed)
                        .map_err(|e| compress_err(e.to_string()))?;
                }
                &mut self.compressed
            }
        };
        if out.len() > MAX_BATCH_LEN {
            return Err(too_large(out.len()));
        }
        let header = BatchHeader {
            length: (out.len() - 4) as u32,
            crc: 0,
            attributes: codec.id(),
            base_offset,
            record_count: self.count,
            first_timestamp: self.first_timestamp,
            max_timestamp: self.max_timestamp,
            leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_len: records_len as u32,
        };
        header.write(out);
        let crc = batch_crc(out);
        if let Some(dst) = out.get_mut(4..8) {
            dst.copy_from_slice(&crc.to_be_bytes());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_crc_covers_from_magic() {
        let tp = TopicPartition::new("t", 0);
        let mut b = BatchBuilder::new(Compression::None);
        b.push(10, Some(b"k"), None);
        b.push(7, None, Some(b""));
        let bytes = b.seal(&tp, 42).map(<[u8]>::to_vec).expect("seal");
        let h = BatchHeader::parse(&bytes).expect("parse");
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.record_count, 2);
        assert_eq!((h.first_timestamp, h.max_timestamp), (10, 10));
        assert_eq!(h.total_len(), bytes.len() as u64);
        assert_eq!(h.crc, batch_crc(&bytes));
        assert_eq!(h.producer_id, -1);
        assert_eq!(h.records_len as usize, bytes.len() - HEADER_LEN);
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert_ne!(batch_crc(&flipped), h.crc);
    }
}
