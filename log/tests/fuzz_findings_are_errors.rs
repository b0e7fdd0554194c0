//! What the fuzz targets (fuzz/, docs/FUZZING.md) found, kept as tests: input the readers took
//! without error although it said something the writer never writes.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use riffle_log::fuzzing::{MemDir, decode_group_offsets, encode_group_offsets};
use riffle_log::{
    BatchBuilder, BatchMeta, Compression, Error, FetchedBatch, LogOptions, RecordError,
    TimestampType, TopicPartition,
};

fn meta(count: u32) -> Arc<BatchMeta> {
    Arc::new(BatchMeta {
        topic_partition: TopicPartition::new("t", 0),
        base_offset: 100,
        record_count: count,
        first_timestamp: 5,
        max_timestamp: 5,
        timestamp_type: TimestampType::CreateTime,
        leader_epoch: 0,
        compression: Compression::None,
    })
}

/// The records section of a builder holding `n` records.
fn section(n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..n {
        b.push(5, Some(format!("k{i}").as_bytes()), Some(b"v"));
    }
    b.records_section().to_vec()
}

fn read(count: u32, last_delta: u32, section: Vec<u8>) -> Vec<Result<u64, RecordError>> {
    FetchedBatch::from_parts(meta(count), last_delta, Bytes::from(section))
        .records()
        .map(|r| r.map(|r| r.offset()))
        .collect()
}

#[test]
fn a_repeated_offset_delta_is_a_corrupt_record() {
    // Two copies of a one-record section: both records say offset delta 0.
    let one = section(1);
    let twice = [one.clone(), one].concat();
    let got = read(2, 1, twice);
    assert!(matches!(got[0], Ok(100)), "{got:?}");
    assert!(
        matches!(&got[1], Err(RecordError::CorruptRecord { offset: 101, .. })),
        "{got:?}"
    );
}

#[test]
fn a_first_record_past_its_place_is_refused_before_it_is_yielded() {
    // The second record of a two-record section, alone in a batch of two: delta 1 first.
    let two = section(2);
    let first_len = section(1).len();
    let second = two[first_len..].to_vec();
    let got = read(2, 1, [second.clone(), second].concat());
    assert!(
        matches!(&got[0], Err(RecordError::CorruptRecord { offset: 100, .. })),
        "{got:?}"
    );
    assert_eq!(got.len(), 1);
}

#[test]
fn records_beyond_the_batch_count_are_a_corrupt_record_not_dropped() {
    let got = read(1, 0, section(2));
    assert!(
        matches!(&got[0], Err(RecordError::CorruptRecord { offset: 100, .. })),
        "{got:?}"
    );
}

#[test]
fn a_kafka_batch_with_offset_gaps_still_reads() {
    // Compacted Kafka batch: 2 records, last offset delta 3 (deltas 0 and 3 are fine).
    let two = section(2);
    let first_len = section(1).len();
    let mut gapped = two[..first_len].to_vec();
    let mut second = two[first_len..].to_vec();
    // Byte layout: length, attributes, timestamp delta (0), offset delta (zig-zag 1 = 0x02).
    assert_eq!(second[3], 0x02);
    second[3] = 0x06; // zig-zag 3
    gapped.extend_from_slice(&second);
    let got: Vec<u64> = read(2, 3, gapped).into_iter().map(Result::unwrap).collect();
    assert_eq!(got, vec![100, 103]);
}

#[test]
fn group_offsets_out_of_order_or_repeated_are_corrupt() {
    let tp = |p| TopicPartition::new("t", p);
    let offsets: BTreeMap<_, _> = [(tp(1), 10), (tp(2), 20)].into_iter().collect();
    let good = encode_group_offsets(&offsets);
    assert_eq!(decode_group_offsets(&good).unwrap(), offsets);
    // Swap the two 15-byte entries (after magic, version and count) and fix the CRC.
    let entry = 2 + 1 + 4 + 8;
    let body = good.len() - 4;
    let mut swapped = good[..10].to_vec();
    swapped.extend_from_slice(&good[10 + entry..body]);
    swapped.extend_from_slice(&good[10..10 + entry]);
    let mut repeated = good[..10 + entry].to_vec();
    repeated.extend_from_slice(&good[10..10 + entry]);
    for mut bad in [swapped, repeated] {
        let crc = crc32c(&bad);
        bad.extend_from_slice(&crc.to_be_bytes());
        let err = decode_group_offsets(&bad).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("out of order or repeated"),
            "{err}"
        );
    }
}

#[test]
fn a_journaled_group_name_that_is_no_file_name_is_corrupt() {
    // A transaction of group "gg-evil", its journal record's name then made "../evil" (same
    // length) with the record's CRC fixed: replay would write `groups/../evil.offsets`.
    let options = LogOptions::default().with_txn_journal_bytes(u64::MAX);
    let source = MemDir::new();
    let log = source.open(options.clone()).unwrap();
    log.create_topic("t", 1).unwrap();
    let mut b = BatchBuilder::default();
    b.push(1, Some(b"k"), Some(b"v"));
    let tp = TopicPartition::new("t", 0);
    log.commit_transaction("gg-evil", &mut [(tp.clone(), &mut b)], &[(tp, 1)])
        .unwrap();
    drop(log);
    let mut journal = source.read("txn/journal").unwrap();
    // Record header (magic, length, CRC: 12 bytes), version (1), name length (2), name.
    assert_eq!(&journal[15..22], b"gg-evil");
    journal[15..22].copy_from_slice(b"../evil");
    let crc = crc32c(&journal[12..]);
    journal[8..12].copy_from_slice(&crc.to_be_bytes());
    let dir = MemDir::new();
    for (path, bytes) in source.snapshot() {
        dir.write(
            &path,
            if path == "txn/journal" {
                &journal
            } else {
                &bytes
            },
        );
    }
    let err = dir.open(options).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("invalid group name"), "{err}");
}

/// CRC32C (Castagnoli), bitwise: the test needs no dependency for one checksum.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Found by `segment_reader` after the log took Kafka's batch format: a checksum-valid batch
/// whose last offset delta leaves gaps between its records was read as one of the log's
/// batches, wherever it stood. Since compaction (which writes such batches, as Kafka's does)
/// such a batch is part of the format, but it still covers its offsets: one whose range runs
/// over the next batch's base offset is corruption, and one at the end moves the end offset
/// past its whole range.
#[test]
fn a_checksum_valid_batch_with_offset_gaps_still_covers_its_whole_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = TopicPartition::new("t", 0);
    {
        let log = riffle_log::Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("t", 1).expect("create");
        for _ in 0..2 {
            let mut b = BatchBuilder::new(Compression::None);
            b.push(1, Some(b"k"), Some(b"v"));
            b.push(2, Some(b"k"), Some(b"w"));
            log.append(&tp, &mut b).expect("append");
        }
        log.sync().expect("sync");
    }
    let segment = dir.path().join("topics/t/0/00000000000000000000.log");
    let clean = std::fs::read(&segment).expect("read");
    let first_len = u32::from_be_bytes(clean[8..12].try_into().expect("4")) as usize + 12;
    // A gap in `at`'s batch: last offset delta 1 -> 9, CRC made to match again.
    let gapped = |at: usize| {
        let mut bytes = clean.clone();
        bytes[at + 23..at + 27].copy_from_slice(&9i32.to_be_bytes());
        let end = if at == 0 { first_len } else { bytes.len() };
        let crc = riffle_record::batch_crc(&bytes[at..end]);
        bytes[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
        bytes
    };
    std::fs::write(&segment, gapped(0)).expect("write");
    let err = riffle_log::Log::open(dir.path(), LogOptions::default()).expect_err("corrupt");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("holds offsets 2..4 (offset 10 expected there)"),
        "{err}"
    );
    std::fs::write(&segment, gapped(first_len)).expect("write");
    let log = riffle_log::Log::open(dir.path(), LogOptions::default()).expect("a gapped batch");
    assert_eq!(log.end_offset(&tp).expect("end"), 12);
    let offsets: Vec<u64> = log
        .fetch(&tp, 0, 1 << 20)
        .expect("fetch")
        .iter()
        .flat_map(|b| b.records().map(|r| r.expect("record").offset()))
        .collect();
    assert_eq!(offsets, [0, 1, 2, 3]);
}
