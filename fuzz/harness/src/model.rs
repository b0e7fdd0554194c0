//! The models the targets compare with: records as plain values, a fetch loop that reads a
//! partition back with every check a consumer relies on, and an independent decoder of Kafka's
//! v2 records section written from FORMAT.md (not from the log's code).

use arbitrary::Arbitrary;
use riffle_log::{BatchBuilder, Log, RecordError, Result, TopicPartition};

/// One record as produced: what must come back.
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    /// Its timestamp.
    pub timestamp: i64,
    /// Its key (`None`: null).
    pub key: Option<Vec<u8>>,
    /// Its value (`None`: a tombstone).
    pub value: Option<Vec<u8>>,
    /// Its headers, in order (a value of `None` is null).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Headers as pairs of byte strings.
pub type ModelHeaders = Vec<(Vec<u8>, Option<Vec<u8>>)>;

impl Rec {
    /// Pushes the record into `b`.
    pub fn push(&self, b: &mut BatchBuilder) {
        let headers = self.headers.iter().map(|(k, v)| (&k[..], v.as_deref()));
        b.push_with_headers(
            self.timestamp,
            self.key.as_deref(),
            self.value.as_deref(),
            headers,
        );
    }
}

/// A record's headers as the log decodes them.
pub fn headers_of(r: &riffle_log::Record) -> ModelHeaders {
    r.headers()
        .map(|h| (h.key.to_vec(), h.value.map(|v| v.to_vec())))
        .collect()
}

/// Reads `tp` from `from` to its end offset, `max_bytes` per fetch, checking what every consumer
/// relies on: each fetch below the end returns at least one batch; the first batch holds the
/// offset asked for and every next one starts where the previous one ended; each batch's records
/// have offsets inside its range, strictly increasing (a compacted batch may hold fewer records
/// than offsets: the callers' models say which records must be there). Errors are returned (the
/// caller decides whether they may happen); wrong answers panic.
pub fn read_all(
    log: &Log,
    tp: &TopicPartition,
    from: u64,
    max_bytes: usize,
) -> Result<Vec<(u64, Rec)>> {
    let end = log.end_offset(tp)?;
    let mut next = from;
    let mut out = Vec::new();
    while next < end {
        let batches = log.fetch(tp, next, max_bytes)?;
        assert!(
            !batches.is_empty(),
            "fetch of {tp} at {next} below the end {end} returned nothing"
        );
        let mut first = true;
        for b in batches {
            if first {
                assert!(
                    b.base_offset() <= next && next <= b.last_offset(),
                    "fetch of {tp} at {next}: first batch holds {}..={}",
                    b.base_offset(),
                    b.last_offset()
                );
            } else {
                assert_eq!(
                    b.base_offset(),
                    next,
                    "fetch of {tp}: batches not contiguous"
                );
            }
            first = false;
            assert!(
                u64::from(b.record_count()) <= b.last_offset() - b.base_offset() + 1,
                "a batch of {tp} holds more records than offsets"
            );
            // The smallest offset the next record may have.
            let mut expected = b.base_offset();
            for r in b.records() {
                let r = r?;
                assert!(
                    r.offset() >= expected && r.offset() <= b.last_offset(),
                    "record offsets of a batch of {tp} increase inside its range"
                );
                expected = r.offset() + 1;
                if r.offset() >= next {
                    out.push((
                        r.offset(),
                        Rec {
                            timestamp: r.timestamp(),
                            key: r.key().map(|k| k.to_vec()),
                            value: r.value().map(|v| v.to_vec()),
                            headers: headers_of(&r),
                        },
                    ));
                }
            }
            next = b.last_offset() + 1;
        }
    }
    assert_eq!(next, end, "read of {tp} ran past its end offset");
    Ok(out)
}

/// A decoded record of [`decode_section`]: offset delta, timestamp delta, key, value.
pub type ModelRecord = (u32, i64, Option<Vec<u8>>, Option<Vec<u8>>, ModelHeaders);

/// Kafka's zig-zag varlong, at most 10 bytes (FORMAT.md).
fn varlong(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z = 0u64;
    for i in 0..10 {
        let byte = *b.get(*pos)?;
        *pos += 1;
        z |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// A varint: a varlong that fits an `i32`.
fn varint(b: &[u8], pos: &mut usize) -> Option<i32> {
    varlong(b, pos).and_then(|v| i32::try_from(v).ok())
}

/// Decodes a records section of `count` records the strict way FORMAT.md describes it: each
/// record exactly as long as its length says, offset deltas strictly increasing and at most
/// `last_offset_delta`, header keys never null, and nothing after the last record. `None` if the
/// section is not that.
pub fn decode_section(s: &[u8], count: u32, last_offset_delta: u32) -> Option<Vec<ModelRecord>> {
    let mut pos = 0usize;
    let mut out = Vec::new();
    let mut prev: Option<u32> = None;
    for _ in 0..count {
        let len = usize::try_from(varint(s, &mut pos)?).ok()?;
        let end = pos.checked_add(len)?;
        let r = s.get(..end)?;
        pos += 1; // attributes
        let ts = varlong(r, &mut pos)?;
        let delta = u32::try_from(varint(r, &mut pos)?).ok()?;
        if delta > last_offset_delta || prev.is_some_and(|p| delta <= p) {
            return None;
        }
        prev = Some(delta);
        let bytes = |pos: &mut usize| -> Option<Option<Vec<u8>>> {
            let n = varint(r, pos)?;
            if n < 0 {
                return Some(None);
            }
            let stop = pos.checked_add(n as usize)?;
            let v = r.get(*pos..stop)?.to_vec();
            *pos = stop;
            Some(Some(v))
        };
        let key = bytes(&mut pos)?;
        let value = bytes(&mut pos)?;
        let count = varint(r, &mut pos)?;
        if count < 0 {
            return None;
        }
        let mut headers = Vec::new();
        for _ in 0..count {
            let k = bytes(&mut pos)??; // a null key is not a header
            let v = bytes(&mut pos)?;
            headers.push((k, v));
        }
        if pos != end {
            return None;
        }
        out.push((delta, ts, key, value, headers));
    }
    (pos == s.len()).then_some(out)
}

/// Whether `e` is the error a record decoder gives, from a batch's record iterator.
pub fn is_corrupt_record(e: &RecordError) -> bool {
    matches!(e, RecordError::CorruptRecord { .. })
}
