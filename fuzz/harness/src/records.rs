//! Target `records`: the batch and record codec against its models.
//!
//! - *Round trip*: random records are encoded with `BatchBuilder` (each codec), appended to an
//!   in-memory log with small segments and a dense index, and fetched back from random offsets
//!   with random byte budgets; what comes back must be exactly the records from that offset on.
//!   A reopen of the same files must find them all again and change no file.
//! - *Raw sections*: random bytes as a batch's records section (`FetchedBatch::from_parts`, the
//!   same decoder the log's own batches go through) must decode exactly as the independent
//!   decoder of `model::decode_section` says: the same records, or an error where it finds none.

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use riffle_log::fuzzing::MemDir;
use riffle_log::{BatchBuilder, BatchMeta, Compression, FetchedBatch, TimestampType};

use crate::model::{Rec, decode_section, is_corrupt_record, read_all};
use crate::{codec, small_options, tp};

#[derive(Arbitrary, Debug)]
struct Append {
    codec: u8,
    records: Vec<Rec>,
}

#[derive(Arbitrary, Debug)]
struct Fetch {
    offset: u16,
    max_bytes: u16,
}

#[derive(Arbitrary, Debug)]
enum Input {
    RoundTrip {
        segment_bytes: u16,
        index_interval: u16,
        appends: Vec<Append>,
        fetches: Vec<Fetch>,
    },
    Raw {
        base_offset: u64,
        first_timestamp: i64,
        count: u8,
        gaps: u8,
        section: Vec<u8>,
    },
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    match input {
        Input::RoundTrip {
            segment_bytes,
            index_interval,
            appends,
            fetches,
        } => round_trip(segment_bytes, index_interval, &appends, &fetches),
        Input::Raw {
            base_offset,
            first_timestamp,
            count,
            gaps,
            section,
        } => raw(base_offset, first_timestamp, count, gaps, section),
    }
}

fn round_trip(segment_bytes: u16, index_interval: u16, appends: &[Append], fetches: &[Fetch]) {
    let options = small_options(segment_bytes, index_interval);
    let dir = MemDir::new();
    let log = dir.open(options.clone()).expect("open an empty log");
    log.create_topic(crate::TOPIC, 1).expect("create topic");
    let tp = tp(0);
    let mut model: Vec<Rec> = Vec::new();
    for a in appends {
        let mut b = crate::builder(codec(a.codec));
        for r in &a.records {
            r.push(&mut b);
        }
        check_section(&b, &a.records);
        let base = log.append(&tp, &mut b).expect("append");
        assert_eq!(base, model.len() as u64, "append's base offset");
        assert!(b.is_empty(), "append clears the builder");
        crate::give_back(b);
        model.extend(a.records.iter().cloned());
    }
    assert_eq!(log.end_offset(&tp).expect("end"), model.len() as u64);
    let check = |log: &riffle_log::Log, from: u64, max_bytes: usize| {
        let got = read_all(log, &tp, from, max_bytes).expect("valid data reads back");
        let want: Vec<(u64, Rec)> = model
            .iter()
            .cloned()
            .enumerate()
            .skip(from as usize)
            .map(|(i, r)| (i as u64, r))
            .collect();
        assert!(
            got == want,
            "read from {from} ({max_bytes} bytes per fetch) differs from the model"
        );
    };
    for f in fetches.iter().take(8) {
        let from = u64::from(f.offset) % (model.len() as u64 + 1);
        check(&log, from, usize::from(f.max_bytes));
    }
    check(&log, 0, 1 << 20);
    drop(log);
    // A reopen (as after a restart) finds everything and, the files being intact, writes nothing.
    let before = dir.snapshot();
    let log = dir.open(options).expect("reopen intact files");
    assert!(
        dir.snapshot() == before,
        "opening an intact log changed its files"
    );
    check(&log, 0, 1);
    check(&log, 0, 1 << 20);
}

/// The builder's uncompressed records section decodes (as Kafka's backend hands it over) to
/// exactly the pushed records, and the independent decoder agrees.
fn check_section(b: &BatchBuilder, records: &[Rec]) {
    if records.is_empty() {
        return;
    }
    let count = records.len() as u32;
    let meta = meta(7, b.first_timestamp(), count);
    let section = Bytes::copy_from_slice(b.records_section());
    let batch = FetchedBatch::from_parts(Arc::new(meta), count - 1, section.clone());
    let got: Vec<Rec> = batch
        .records()
        .map(|r| {
            let r = r.expect("a builder's section decodes");
            Rec {
                timestamp: r.timestamp(),
                key: r.key().map(|k| k.to_vec()),
                value: r.value().map(|v| v.to_vec()),
                headers: crate::model::headers_of(&r),
            }
        })
        .collect();
    assert!(got == records, "records section round trip");
    let model =
        decode_section(&section, count, count - 1).expect("the model decodes a builder's section");
    assert_eq!(model.len(), records.len());
}

fn meta(base_offset: u64, first_timestamp: i64, count: u32) -> BatchMeta {
    BatchMeta {
        topic_partition: tp(0),
        base_offset,
        record_count: count,
        first_timestamp,
        max_timestamp: first_timestamp,
        timestamp_type: TimestampType::CreateTime,
        leader_epoch: 0,
        compression: Compression::None,
    }
}

fn raw(base_offset: u64, first_timestamp: i64, count: u8, gaps: u8, section: Vec<u8>) {
    let count = u32::from(count.max(1));
    // Offsets must fit: the log never names one past u64::MAX.
    let last_delta = count - 1 + u32::from(gaps);
    let base_offset = base_offset.min(u64::MAX - u64::from(last_delta));
    let meta = meta(base_offset, first_timestamp, count);
    let batch = FetchedBatch::from_parts(Arc::new(meta), last_delta, Bytes::from(section.clone()));
    let model = decode_section(&section, count, last_delta);
    let mut got = Vec::new();
    let mut failed = false;
    for r in batch.records() {
        match r {
            Ok(r) => got.push(r),
            Err(e) => {
                assert!(
                    is_corrupt_record(&e),
                    "a bad record must be RecordError::CorruptRecord: {e:?}"
                );
                failed = true;
            }
        }
    }
    match model {
        Some(model) => {
            assert!(!failed, "the reader refused a section the model decodes");
            assert_eq!(got.len(), model.len());
            for (r, (delta, ts, key, value, headers)) in got.iter().zip(&model) {
                assert_eq!(crate::model::headers_of(r), *headers);
                assert_eq!(r.offset(), base_offset + u64::from(*delta));
                assert_eq!(r.timestamp(), first_timestamp.wrapping_add(*ts));
                assert_eq!(r.key().map(|k| k.to_vec()), *key);
                assert_eq!(r.value().map(|v| v.to_vec()), *value);
            }
        }
        None => assert!(
            failed,
            "the reader accepted a section the model refuses: {} of {count} records read",
            got.len()
        ),
    }
}
