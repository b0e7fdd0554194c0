//! The read side of the record path: a [`FetchedBatch`] is one `Arc<BatchMeta>` plus the batch's
//! (decompressed) records section as one `Bytes`; its [`Record`]s are slices of that buffer and
//! clones of that `Arc`. Decoding a record allocates nothing.

use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{BatchHeader, HEADER_LEN};
use crate::codec;
use crate::error::{Error, Result};
use crate::types::{BatchMeta, Compression, TopicPartition};
use crate::varint::{get_varint, get_varlong};

/// Records sections beyond this, decompressed, are refused.
const MAX_RECORDS_LEN: usize = 1 << 30;

/// One fetched batch: from the embedded log's `Log::fetch` or from a Kafka fetch response.
#[derive(Clone, Debug)]
pub struct FetchedBatch {
    meta: Arc<BatchMeta>,
    records: Bytes,
    /// Offset of the last record minus the base offset: `record_count - 1` in the embedded log,
    /// larger in a compacted Kafka batch whose records have gaps between their offsets.
    last_offset_delta: u32,
}

impl FetchedBatch {
    /// Builds a fetched batch from a whole Kafka v2 batch (`h` is its parsed header) whose
    /// checksum was already verified, decompressing its records section if needed: a slice of
    /// `batch` when it is not compressed, no copy.
    pub fn decode(tp: &TopicPartition, h: &BatchHeader, batch: Bytes) -> Result<Self> {
        let codec = h.compression();
        let payload = batch.slice(HEADER_LEN.min(batch.len())..);
        let records = match codec {
            Compression::None => payload,
            _ => {
                let mut out = Vec::new();
                codec::decompress(codec, &payload, &mut out, MAX_RECORDS_LEN).map_err(|e| {
                    Error::Compression {
                        codec,
                        reason: format!(
                            "decompressing the batch of {tp} at offset {}: {e}",
                            h.base_offset
                        ),
                    }
                })?;
                Bytes::from(out)
            }
        };
        let meta = BatchMeta {
            topic_partition: tp.clone(),
            base_offset: h.base_offset,
            record_count: h.record_count,
            first_timestamp: h.first_timestamp,
            max_timestamp: h.max_timestamp,
            timestamp_type: h.timestamp_type(),
            leader_epoch: h.leader_epoch,
            compression: codec,
        };
        Ok(Self::from_parts(
            Arc::new(meta),
            h.last_offset_delta,
            records,
        ))
    }

    /// A batch from its parts: its metadata (from the batch header; `record_count` is the
    /// number of records present) and its records section, uncompressed — what
    /// [`FetchedBatch::decode`] builds, and what a reader builds for a run of skipped batches
    /// (no records, the offsets they covered).
    ///
    /// The section is used as it is, without copying or re-encoding. `last_offset_delta` is the
    /// header's field of that name: in a compacted topic records may be missing from a batch,
    /// so offset deltas can have gaps and the batch's last offset is `base_offset +
    /// last_offset_delta`, not `base_offset + record_count - 1`. Records are checked lazily: a
    /// malformed record is an [`Error::CorruptRecord`] from the iterator.
    pub fn from_parts(meta: Arc<BatchMeta>, last_offset_delta: u32, records: Bytes) -> Self {
        Self {
            last_offset_delta: last_offset_delta.max(meta.record_count.saturating_sub(1)),
            meta,
            records,
        }
    }

    /// The batch's metadata, shared with its records.
    pub fn meta(&self) -> &Arc<BatchMeta> {
        &self.meta
    }

    /// Offset of the first record.
    pub fn base_offset(&self) -> u64 {
        self.meta.base_offset
    }

    /// Offset of the last record: `base_offset + record_count - 1` (more in a compacted Kafka
    /// batch, see [`FetchedBatch::from_parts`]).
    pub fn last_offset(&self) -> u64 {
        self.meta.base_offset + u64::from(self.last_offset_delta)
    }

    /// Number of records.
    pub fn record_count(&self) -> u32 {
        self.meta.record_count
    }

    /// Decodes the records lazily, in offset order.
    pub fn records(&self) -> RecordIter {
        RecordIter {
            meta: Arc::clone(&self.meta),
            buf: self.records.clone(),
            pos: 0,
            left: self.meta.record_count,
            last_offset_delta: self.last_offset_delta,
            min_delta: 0,
        }
    }
}

/// Iterator over a batch's records. Stops after the first error.
#[derive(Debug)]
pub struct RecordIter {
    meta: Arc<BatchMeta>,
    buf: Bytes,
    pos: usize,
    left: u32,
    last_offset_delta: u32,
    /// The smallest offset delta the next record may have: deltas strictly increase (they are
    /// the record's index in a log batch, with gaps only in a compacted Kafka batch).
    min_delta: u64,
}

impl RecordIter {
    fn decode_next(&mut self) -> Result<Record, String> {
        let buf: &[u8] = &self.buf;
        let mut pos = self.pos;
        let len = get_varint(buf, &mut pos).ok_or("bad record length")?;
        let len = usize::try_from(len).map_err(|_| format!("negative record length {len}"))?;
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= buf.len())
            .ok_or_else(|| {
                format!(
                    "record of {len} bytes overruns the batch ({} left)",
                    buf.len() - pos
                )
            })?;
        let body = buf.get(..end).unwrap_or_default();
        pos += 1; // attributes
        let ts_delta = get_varlong(body, &mut pos).ok_or("bad timestamp delta")?;
        let offset_delta = get_varint(body, &mut pos).ok_or("bad offset delta")?;
        let offset_delta = u32::try_from(offset_delta)
            .ok()
            // The records after this one need deltas of their own, up to the last one's.
            .filter(|&d| d <= self.last_offset_delta.saturating_sub(self.left))
            .ok_or_else(|| format!("offset delta {offset_delta} outside the batch"))?;
        if u64::from(offset_delta) < self.min_delta {
            return Err(format!(
                "offset delta {offset_delta} does not follow the previous record's"
            ));
        }
        let mut slice = |what: &str| -> Result<Option<Bytes>, String> {
            let n = get_varint(body, &mut pos).ok_or_else(|| format!("bad {what} length"))?;
            if n < 0 {
                return Ok(None);
            }
            let stop = pos + n as usize;
            if stop > end {
                return Err(format!("{what} of {n} bytes overruns its record"));
            }
            let b = self.buf.slice(pos..stop);
            pos = stop;
            Ok(Some(b))
        };
        let key = slice("key")?;
        let value = slice("value")?;
        // Headers: a count, then per header key length + key, value length (-1 = null) +
        // value. They are checked here and kept as one slice, decoded when asked for.
        let headers = get_varint(body, &mut pos).ok_or("bad header count")?;
        let headers_start = pos;
        for i in 0..headers.max(0) {
            for part in ["key", "value"] {
                let n =
                    get_varint(body, &mut pos).ok_or_else(|| format!("bad header {i} {part}"))?;
                if n < 0 && part == "key" {
                    return Err(format!("header {i} has a null key"));
                }
                let skip = usize::try_from(n).unwrap_or(0);
                pos = pos
                    .checked_add(skip)
                    .filter(|&p| p <= end)
                    .ok_or_else(|| format!("header {i} {part} of {n} bytes overruns its record"))?;
            }
        }
        if headers < 0 {
            return Err(format!("negative header count {headers}"));
        }
        if pos != end {
            return Err(format!("{} trailing bytes in record", end - pos));
        }
        if self.left == 0 && end != buf.len() {
            // More bytes than the batch's record count accounts for: records would be lost.
            return Err(format!(
                "{} bytes after the batch's last record",
                buf.len() - end
            ));
        }
        self.pos = end;
        self.min_delta = u64::from(offset_delta) + 1;
        Ok(Record {
            meta: Arc::clone(&self.meta),
            offset_delta,
            timestamp: self.meta.first_timestamp.wrapping_add(ts_delta),
            key,
            value,
            header_count: headers.max(0) as u32,
            headers: (headers > 0).then(|| self.buf.slice(headers_start..pos)),
        })
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match self.decode_next() {
            Ok(r) => Some(Ok(r)),
            Err(reason) => {
                let index = self.meta.record_count - self.left - 1;
                self.left = 0;
                Some(Err(Error::CorruptRecord {
                    topic_partition: self.meta.topic_partition.clone(),
                    offset: self.meta.base_offset + u64::from(index),
                    reason: format!(
                        "record at byte {} of the records section: {reason}",
                        self.pos
                    ),
                }))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

/// One record of a fetched batch.
#[derive(Clone, Debug)]
pub struct Record {
    meta: Arc<BatchMeta>,
    offset_delta: u32,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    header_count: u32,
    /// The encoded headers after their count; `None` (nothing to clone or drop) when there
    /// are none.
    headers: Option<Bytes>,
}

impl Record {
    /// Metadata of the record's batch.
    pub fn meta(&self) -> &Arc<BatchMeta> {
        &self.meta
    }

    /// Where the record lives.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.meta.topic_partition
    }

    /// The record's offset.
    pub fn offset(&self) -> u64 {
        self.meta.base_offset + u64::from(self.offset_delta)
    }

    /// The record's timestamp (see [`BatchMeta::timestamp_type`]).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The key; `None` for a null key.
    pub fn key(&self) -> Option<&Bytes> {
        self.key.as_ref()
    }

    /// The value; `None` for a null value (a tombstone).
    pub fn value(&self) -> Option<&Bytes> {
        self.value.as_ref()
    }

    /// How many headers the record has.
    pub fn header_count(&self) -> u32 {
        self.header_count
    }

    /// The record's headers, in order (a key may repeat), as slices of the fetched batch:
    /// iterating allocates nothing. They were checked when the record was decoded.
    pub fn headers(&self) -> HeaderIter {
        HeaderIter {
            buf: self.headers.clone().unwrap_or_default(),
            pos: 0,
            left: self.header_count,
        }
    }
}

/// One record header: a key (Kafka's are UTF-8 strings) and a value that may be null.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The header's key.
    pub key: Bytes,
    /// The header's value; `None` for a null value.
    pub value: Option<Bytes>,
}

impl Header {
    /// A header from a key and a value.
    pub fn new(key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        Header {
            key: key.into(),
            value,
        }
    }

    /// The key as UTF-8, if it is.
    pub fn key_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.key).ok()
    }
}

/// The headers of a [`Record`], from [`Record::headers`].
#[derive(Clone, Debug)]
pub struct HeaderIter {
    buf: Bytes,
    pos: usize,
    left: u32,
}

impl Iterator for HeaderIter {
    type Item = Header;

    fn next(&mut self) -> Option<Header> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The layout was checked at decode time; a failure here ends the iteration.
        let mut part = || -> Option<Option<Bytes>> {
            let n = get_varint(&self.buf, &mut self.pos)?;
            if n < 0 {
                return Some(None);
            }
            let stop = self.pos.checked_add(n as usize)?;
            if stop > self.buf.len() {
                return None;
            }
            let b = self.buf.slice(self.pos..stop);
            self.pos = stop;
            Some(Some(b))
        };
        let key = part().flatten();
        let value = part();
        match (key, value) {
            (Some(key), Some(value)) => Some(Header { key, value }),
            _ => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::varint::put_varlong;

    fn batch(section: Vec<u8>, count: u32) -> FetchedBatch {
        let meta = BatchMeta {
            topic_partition: TopicPartition::new("t", 0),
            base_offset: 10,
            record_count: count,
            first_timestamp: 100,
            max_timestamp: 100,
            timestamp_type: crate::TimestampType::CreateTime,
            leader_epoch: 0,
            compression: Compression::None,
        };
        FetchedBatch::from_parts(Arc::new(meta), count - 1, Bytes::from(section))
    }

    /// One record with `headers` headers `(key, value)`, as a Kafka client writes it.
    fn record(headers: &[(&[u8], Option<&[u8]>)]) -> Vec<u8> {
        let mut body = vec![0u8]; // attributes
        put_varlong(&mut body, 5); // timestamp delta
        put_varlong(&mut body, 0); // offset delta
        put_varlong(&mut body, 1);
        body.push(b'k');
        put_varlong(&mut body, 2);
        body.extend_from_slice(b"vv");
        put_varlong(&mut body, headers.len() as i64);
        for (k, v) in headers {
            put_varlong(&mut body, k.len() as i64);
            body.extend_from_slice(k);
            put_varlong(&mut body, v.map_or(-1, |v| v.len() as i64));
            body.extend_from_slice(v.unwrap_or_default());
        }
        let mut out = Vec::new();
        put_varlong(&mut out, body.len() as i64);
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn record_headers_from_kafka_are_read_in_order_with_null_values() {
        let section = record(&[(b"trace", Some(b"abc")), (b"null", None)]);
        let records: Vec<_> = batch(section, 1)
            .records()
            .collect::<Result<_>>()
            .expect("decodes");
        let r = records.first().expect("one record");
        assert_eq!((r.offset(), r.timestamp()), (10, 105));
        assert_eq!(r.key().map(|k| &k[..]), Some(&b"k"[..]));
        assert_eq!(r.value().map(|v| &v[..]), Some(&b"vv"[..]));
        assert_eq!(r.header_count(), 2);
        let headers: Vec<Header> = r.headers().collect();
        assert_eq!(
            headers,
            [
                Header::new(&b"trace"[..], Some(Bytes::from_static(b"abc"))),
                Header::new(&b"null"[..], None),
            ]
        );
    }

    #[test]
    fn headers_pushed_by_the_builder_read_back_and_a_record_without_them_has_none() {
        let mut builder = crate::BatchBuilder::new(Compression::None);
        let h: [(&[u8], Option<&[u8]>); 3] = [(b"a", Some(b"1")), (b"a", Some(b"")), (b"n", None)];
        builder.push_with_headers(100, Some(b"k"), Some(b"vv"), h.iter().copied());
        builder.push(101, None, None);
        let section = builder.records_section().to_vec();
        let records: Vec<_> = batch(section, 2)
            .records()
            .collect::<Result<_>>()
            .expect("decodes");
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = records[0]
            .headers()
            .map(|h| (h.key.to_vec(), h.value.map(|v| v.to_vec())))
            .collect();
        let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = h
            .iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(got, want, "order, repeated keys, empty and null values");
        assert_eq!(records[1].header_count(), 0);
        assert_eq!(records[1].headers().count(), 0);
        assert_eq!(records[1].timestamp(), 101);
    }

    #[test]
    fn a_header_with_a_null_key_is_a_corrupt_record() {
        let mut section = record(&[(b"k", Some(b"v"))]);
        // The header key length 1 (varint 0x02) becomes -1 (0x01).
        let at = section.len() - 4;
        assert_eq!(section[at], 0x02);
        section[at] = 0x01;
        let err = batch(section, 1)
            .records()
            .next()
            .expect("one item")
            .expect_err("corrupt");
        assert!(err.to_string().contains("null key"), "{err}");
    }

    #[test]
    fn a_header_overrunning_its_record_is_a_corrupt_record() {
        let mut section = record(&[(b"trace", Some(b"abc"))]);
        let len = section.len();
        if let Some(b) = section.get_mut(len - 4) {
            *b = 0x7e; // the value length becomes 63 bytes
        }
        let err = batch(section, 1)
            .records()
            .next()
            .expect("one item")
            .expect_err("corrupt");
        assert!(
            matches!(err, Error::CorruptRecord { offset: 10, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("t-0"), "{err}");
    }
}
