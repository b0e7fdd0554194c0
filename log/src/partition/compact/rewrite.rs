//! Rewriting a group of sealed segments (steps 1 and 2 of the pass in `mod.rs`): reading their
//! batches with checksums checked, keeping a record unless a later one has its key or it is a
//! tombstone past its delete horizon, and encoding what is kept as Kafka v2 batches that still
//! cover every offset of the group.

use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use riffle_record::varint::{put_varlong, varlong_len};
use riffle_record::{
    ATTR_CODEC_MASK, ATTR_LOG_APPEND_TIME, BatchHeader, Compression, FetchedBatch, HEADER_LEN,
    LOG_OVERHEAD, batch_crc, codec,
};

use super::{ATTR_DELETE_HORIZON, Group};
use crate::error::{Error, Result};
use crate::partition::Partition;
use crate::segment::segment_file_name;

/// A written batch takes records from further source batches while its records section stays
/// below this.
const OUT_BATCH_BYTES: usize = 256 << 10;

/// One record kept, ready to encode again.
struct Kept {
    offset: u64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(Bytes, Option<Bytes>)>,
}

/// A batch being written: its base offset (its end is the next one's base, or the group's end).
struct OutBatch {
    base: u64,
    codec: Compression,
    log_append_time: bool,
    horizon: Option<i64>,
    max_timestamp: i64,
    records: Vec<Kept>,
    size: usize,
}

/// The rewritten group: its bytes, index entries and max timestamp.
pub(super) struct Cleaned {
    pub(super) bytes: Vec<u8>,
    pub(super) index: Vec<(u32, u32)>,
    pub(super) max_timestamp: i64,
    pub(super) records_read: u64,
    pub(super) records_removed: u64,
    /// Something differs from the group's segments (a record removed, a horizon set, several
    /// segments merged).
    pub(super) changed: bool,
}

impl Partition {
    /// Rewrites `group` into one segment's bytes (see the module docs).
    pub(super) fn clean_group(
        &mut self,
        group: &Group,
        latest: &HashMap<Bytes, u64>,
        now_ms: i64,
        horizon: i64,
    ) -> Result<Cleaned> {
        let mut out: Vec<OutBatch> = Vec::new();
        // Max timestamps of removed batches before the first written batch.
        let mut pending_max = i64::MIN;
        let (mut records_read, mut records_removed) = (0u64, 0u64);
        let mut changed = group.end - group.first > 1;
        // Source batches, and whether they were all empty (a group emptied by an earlier pass).
        let (mut source_batches, mut all_empty) = (0usize, true);
        for i in group.first..group.end {
            let path = self.segments[i].path.clone();
            let bytes = self.read_whole(i)?;
            for_each_batch(&self.tp, &path, bytes, |h, batch, _| {
                source_batches += 1;
                all_empty &= h.record_count == 0;
                let had_horizon =
                    (h.attributes & ATTR_DELETE_HORIZON != 0).then_some(h.first_timestamp);
                let expired = had_horizon.is_some_and(|at| at <= now_ms);
                let mut kept = Vec::new();
                let mut tombstones = false;
                for record in batch.records() {
                    let record = record.map_err(|e| corrupt_record(&path, &e))?;
                    records_read += 1;
                    let superseded = record
                        .key()
                        .and_then(|k| latest.get(k))
                        .is_some_and(|&at| at > record.offset());
                    let tombstone = record.value().is_none() && record.key().is_some();
                    if superseded || (tombstone && expired) {
                        records_removed += 1;
                        changed = true;
                        continue;
                    }
                    tombstones |= tombstone;
                    kept.push(Kept {
                        offset: record.offset(),
                        timestamp: record.timestamp(),
                        key: record.key().cloned(),
                        value: record.value().cloned(),
                        headers: record.headers().map(|hd| (hd.key, hd.value)).collect(),
                    });
                }
                if kept.is_empty() {
                    match out.last_mut() {
                        Some(o) => o.max_timestamp = o.max_timestamp.max(h.max_timestamp),
                        None => pending_max = pending_max.max(h.max_timestamp),
                    }
                    return Ok(());
                }
                let wanted = tombstones.then(|| had_horizon.unwrap_or(horizon));
                if tombstones && had_horizon.is_none() {
                    changed = true;
                }
                let codec = h.compression();
                let log_append_time = h.attributes & ATTR_LOG_APPEND_TIME != 0;
                let size: usize = kept
                    .iter()
                    .map(|k| {
                        32 + k.key.as_ref().map_or(0, Bytes::len)
                            + k.value.as_ref().map_or(0, Bytes::len)
                    })
                    .sum();
                let joins = out.last().is_some_and(|o| {
                    o.codec == codec
                        && o.log_append_time == log_append_time
                        && (o.horizon.is_none() || wanted.is_none() || o.horizon == wanted)
                        && o.size + size <= OUT_BATCH_BYTES
                });
                if joins {
                    // Two source batches become one written batch.
                    changed = true;
                    if let Some(o) = out.last_mut() {
                        o.horizon = o.horizon.or(wanted);
                        o.max_timestamp = o.max_timestamp.max(h.max_timestamp);
                        o.size += size;
                        o.records.extend(kept);
                    }
                } else {
                    let base = if out.is_empty() {
                        group.base
                    } else {
                        h.base_offset
                    };
                    out.push(OutBatch {
                        base,
                        codec,
                        log_append_time,
                        horizon: wanted,
                        max_timestamp: h
                            .max_timestamp
                            .max(std::mem::replace(&mut pending_max, i64::MIN)),
                        records: kept,
                        size,
                    });
                }
                Ok(())
            })?;
        }
        // Encode, each batch reaching to the next one's base (or the group's end).
        let mut bytes = Vec::new();
        let mut index = Vec::new();
        let mut since_index = 0u64;
        let interval = u64::from(self.options.index_interval_bytes);
        let mut max_timestamp = pending_max;
        let mut zstd = None;
        if out.is_empty() {
            // Nothing left: one empty batch holds the group's offsets.
            let h = empty_batch_header(group.base, group.end_offset, pending_max);
            let mut b = vec![0u8; HEADER_LEN];
            h.write(&mut b);
            let crc = batch_crc(&b);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            bytes.extend_from_slice(&b);
            // Unless it was that one empty batch already.
            changed |= !(source_batches == 1 && all_empty);
        }
        let ends: Vec<u64> = out
            .iter()
            .skip(1)
            .map(|o| o.base)
            .chain(std::iter::once(group.end_offset))
            .collect();
        for (o, end) in out.iter().zip(ends) {
            max_timestamp = max_timestamp.max(o.max_timestamp);
            let pos = bytes.len() as u64;
            encode_batch(o, end, &mut bytes, &mut zstd).map_err(|reason| Error::Corrupt {
                path: self.dir.join(segment_file_name(group.base)),
                position: pos,
                reason,
            })?;
            let len = bytes.len() as u64 - pos;
            if since_index >= interval {
                let rel = u32::try_from(end - 1 - group.base).ok();
                if let (Some(rel), Ok(p)) = (rel, u32::try_from(pos)) {
                    index.push((rel, p));
                }
                since_index = 0;
            }
            since_index += len;
        }
        Ok(Cleaned {
            bytes,
            index,
            max_timestamp,
            records_read,
            records_removed,
            changed,
        })
    }
}

pub(super) fn corrupt_record(path: &Path, e: &riffle_record::Error) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        position: 0,
        reason: format!("a record the cleaner read: {e}"),
    }
}

/// Calls `f` with each batch of a sealed segment's bytes, checksums checked: damage is an
/// [`Error::Corrupt`] naming the file and position, never skipped.
pub(super) fn for_each_batch(
    tp: &riffle_record::TopicPartition,
    path: &Path,
    bytes: Bytes,
    mut f: impl FnMut(&BatchHeader, &FetchedBatch, u64) -> Result<()>,
) -> Result<()> {
    let mut at = 0usize;
    while at < bytes.len() {
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_path_buf(),
            position: at as u64,
            reason,
        };
        let h = crate::segment::parse_stored(&bytes[at..]).map_err(corrupt)?;
        let len = usize::try_from(h.total_len()).unwrap_or(usize::MAX);
        let Some(batch) = bytes.get(at..at.saturating_add(len)) else {
            return Err(corrupt(format!(
                "batch of {len} bytes overruns the segment"
            )));
        };
        if batch_crc(batch) != h.crc {
            return Err(corrupt("batch checksum mismatch".to_owned()));
        }
        let fetched = FetchedBatch::decode(tp, &h, bytes.slice(at..at + len))
            .map_err(|e| corrupt(e.to_string()))?;
        f(&h, &fetched, at as u64)?;
        at += len;
    }
    Ok(())
}

/// The header of an empty batch holding offsets `base..end`.
fn empty_batch_header(base: u64, end: u64, max_timestamp: i64) -> BatchHeader {
    BatchHeader {
        base_offset: base,
        length: (HEADER_LEN - LOG_OVERHEAD) as u32,
        leader_epoch: 0,
        crc: 0,
        attributes: 0,
        last_offset_delta: u32::try_from(end - 1 - base).unwrap_or(u32::MAX),
        first_timestamp: max_timestamp,
        max_timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: 0,
    }
}

/// Appends `o` as a Kafka v2 batch holding offsets `o.base..end` to `out`.
fn encode_batch(
    o: &OutBatch,
    end: u64,
    out: &mut Vec<u8>,
    zstd: &mut Option<zstd::bulk::Compressor<'static>>,
) -> std::result::Result<(), String> {
    let first_ts = o
        .horizon
        .or_else(|| o.records.first().map(|k| k.timestamp))
        .unwrap_or(o.max_timestamp);
    let mut records = Vec::with_capacity(o.size);
    for k in &o.records {
        let ts_delta = k.timestamp.wrapping_sub(first_ts);
        let offset_delta = (k.offset - o.base) as i64;
        let len_of = |b: Option<&Bytes>| b.map_or(-1, |b| b.len() as i64);
        let mut headers_len = 0;
        for (hk, hv) in &k.headers {
            headers_len += varlong_len(hk.len() as i64)
                + hk.len()
                + varlong_len(len_of(hv.as_ref()))
                + hv.as_ref().map_or(0, Bytes::len);
        }
        let body = 1
            + varlong_len(ts_delta)
            + varlong_len(offset_delta)
            + varlong_len(len_of(k.key.as_ref()))
            + k.key.as_ref().map_or(0, Bytes::len)
            + varlong_len(len_of(k.value.as_ref()))
            + k.value.as_ref().map_or(0, Bytes::len)
            + varlong_len(k.headers.len() as i64)
            + headers_len;
        put_varlong(&mut records, body as i64);
        records.push(0);
        put_varlong(&mut records, ts_delta);
        put_varlong(&mut records, offset_delta);
        put_varlong(&mut records, len_of(k.key.as_ref()));
        records.extend_from_slice(k.key.as_deref().unwrap_or_default());
        put_varlong(&mut records, len_of(k.value.as_ref()));
        records.extend_from_slice(k.value.as_deref().unwrap_or_default());
        put_varlong(&mut records, k.headers.len() as i64);
        for (hk, hv) in &k.headers {
            put_varlong(&mut records, hk.len() as i64);
            records.extend_from_slice(hk);
            put_varlong(&mut records, len_of(hv.as_ref()));
            records.extend_from_slice(hv.as_deref().unwrap_or_default());
        }
    }
    let at = out.len();
    out.resize(at + HEADER_LEN, 0);
    codec::compress(o.codec, &records, out, zstd).map_err(|e| e.to_string())?;
    let mut attributes = o.codec.id() & ATTR_CODEC_MASK;
    if o.log_append_time {
        attributes |= ATTR_LOG_APPEND_TIME;
    }
    if o.horizon.is_some() {
        attributes |= ATTR_DELETE_HORIZON;
    }
    let h = BatchHeader {
        base_offset: o.base,
        length: u32::try_from(out.len() - at - LOG_OVERHEAD).map_err(|_| "batch too large")?,
        leader_epoch: 0,
        crc: 0,
        attributes,
        last_offset_delta: u32::try_from(end - 1 - o.base).map_err(|_| "offset range too large")?,
        first_timestamp: first_ts,
        max_timestamp: o.max_timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: o.records.len() as u32,
    };
    h.write(&mut out[at..]);
    let crc = batch_crc(&out[at..]);
    out[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}
