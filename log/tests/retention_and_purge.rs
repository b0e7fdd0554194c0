//! Retention and `delete_records` against a model: random appends (old and new timestamps),
//! retention passes, record deletions, reads and reopens, through two handles on one directory
//! (as two processes open it: each has its own descriptors and OS locks, and a handle that
//! closed a segment file finds it gone). The expected start offset after a retention pass is
//! computed by brute force from the segment files on disk and the model's timestamps, with
//! Kafka's rules; every record from the start offset on must read back as appended.

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use riffle_log::{BatchBuilder, Compression, Error, Log, LogOptions, TopicConfig, TopicPartition};

const NOW: i64 = 10_000_000;
const RETENTION_MS: i64 = 1_000;

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn options() -> LogOptions {
    // Few open files: handles close segment files and reopen them, so a removed one is missed.
    LogOptions::default()
        .with_index_interval_bytes(100)
        .with_max_open_files(4)
        .with_retention_check_interval(None)
}

fn open(dir: &Path) -> Log {
    Log::open(dir, options()).expect("open")
}

#[derive(Clone, Debug)]
enum Op {
    Append {
        handle: usize,
        p: u32,
        n: usize,
        old: bool,
    },
    Retention {
        handle: usize,
        later: bool,
    },
    DeleteRecords {
        handle: usize,
        p: u32,
        percent: u64,
    },
    Read {
        handle: usize,
        p: u32,
    },
    Reopen {
        handle: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..2u32, 1..6usize, any::<bool>())
            .prop_map(|(handle, p, n, old)| Op::Append { handle, p, n, old }),
        2 => (0..2usize, any::<bool>()).prop_map(|(handle, later)| Op::Retention { handle, later }),
        2 => (0..2usize, 0..2u32, 0..=100u64)
            .prop_map(|(handle, p, percent)| Op::DeleteRecords { handle, p, percent }),
        2 => (0..2usize, 0..2u32).prop_map(|(handle, p)| Op::Read { handle, p }),
        1 => (0..2usize).prop_map(|handle| Op::Reopen { handle }),
    ]
}

fn partition_dir(dir: &Path, p: u32) -> PathBuf {
    dir.join("topics").join("t").join(p.to_string())
}

/// `(base offset, size)` of each segment file on disk, in offset order.
fn segments_on_disk(dir: &Path, p: u32) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = std::fs::read_dir(partition_dir(dir, p))
        .expect("read_dir")
        .filter_map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().into_string().ok()?;
            let base = name.strip_suffix(".log")?.parse().ok()?;
            Some((base, e.metadata().expect("metadata").len()))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Kafka's retention, by brute force: from the oldest segment on, a sealed segment goes while
/// its newest record (the model's timestamps) is older than `retention.ms`, or while the
/// partition without it is still at least `retention.bytes`.
fn expected_start(
    segments: &[(u64, u64)],
    timestamps: &[i64],
    start: u64,
    now: i64,
    retention_bytes: Option<u64>,
) -> u64 {
    let mut excess = retention_bytes.map(|limit| {
        segments
            .iter()
            .map(|&(_, size)| size)
            .sum::<u64>()
            .saturating_sub(limit)
    });
    let mut kept = start;
    for w in segments.windows(2) {
        let ((base, size), (next, _)) = (w[0], w[1]);
        let newest = timestamps[base as usize..next as usize]
            .iter()
            .copied()
            .max()
            .unwrap_or(i64::MIN);
        let by_time = now - newest > RETENTION_MS;
        let by_bytes = excess.is_some_and(|e| e >= size && size > 0);
        if !(by_time || by_bytes) {
            break;
        }
        if let Some(e) = &mut excess {
            *e = e.saturating_sub(size);
        }
        kept = kept.max(next);
    }
    kept
}

/// Every record from the start offset on reads back as the model has it; below it, a fetch
/// is out of range. With `cleaned` (right after a retention pass or a deletion), no segment
/// file lies wholly below it (appends after a deletion up to the end offset can roll one
/// below it: as in Kafka, the next retention pass removes it).
fn check(log: &Log, dir: &Path, p: u32, model: &[(i64, String)], start: u64, cleaned: bool) {
    let tp = tp(p);
    assert_eq!(log.start_offset(&tp).expect("start"), start);
    assert_eq!(log.end_offset(&tp).expect("end"), model.len() as u64);
    let read = common::read_all(log, &tp, start, 700);
    let expected: Vec<(u64, String)> = model
        .iter()
        .enumerate()
        .skip(start as usize)
        .map(|(o, (_, v))| (o as u64, v.clone()))
        .collect();
    let got: Vec<(u64, String)> = read
        .into_iter()
        .map(|(o, (_, _, v))| (o, String::from_utf8(v.expect("value")).expect("utf-8")))
        .collect();
    assert_eq!(got, expected);
    if start > 0 {
        match log.fetch(&tp, start - 1, 1 << 20) {
            Err(Error::OffsetOutOfRange {
                start: reported, ..
            }) => assert_eq!(reported, start),
            other => panic!("a fetch below the start offset {start} gave {other:?}"),
        }
    }
    let segments = segments_on_disk(dir, p);
    assert!(segments[0].0 <= start, "{segments:?} start {start}");
    assert!(
        !cleaned || segments.get(1).is_none_or(|&(b, _)| b > start),
        "a segment wholly below the start offset {start}: {segments:?}"
    );
}

fn run(ops: Vec<Op>, retention_bytes: Option<u64>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut handles = vec![open(dir), open(dir)];
    let mut pairs = vec![
        ("retention.ms", RETENTION_MS.to_string()),
        ("segment.bytes", "300".to_owned()),
    ];
    if let Some(bytes) = retention_bytes {
        pairs.push(("retention.bytes", bytes.to_string()));
    }
    let config =
        TopicConfig::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("config");
    handles[0]
        .create_topic_with("t", 2, &config)
        .expect("create");
    assert_eq!(handles[1].topic_config("t").expect("config"), Some(config));
    let mut models: Vec<Vec<(i64, String)>> = vec![Vec::new(); 2];
    let mut starts = [0u64; 2];
    let mut builder = BatchBuilder::new(Compression::None);
    for op in ops {
        match op {
            Op::Append { handle, p, n, old } => {
                let ts = if old { 0 } else { NOW };
                let model = &mut models[p as usize];
                for _ in 0..n {
                    let value = format!("v{}-{}", p, model.len());
                    builder.push(ts, Some(b"k"), Some(value.as_bytes()));
                    model.push((ts, value));
                }
                handles[handle]
                    .append(&tp(p), &mut builder)
                    .expect("append");
            }
            Op::Retention { handle, later } => {
                let now = if later { NOW + 10 * RETENTION_MS } else { NOW };
                let expected: Vec<u64> = (0..2)
                    .map(|p| {
                        let ts: Vec<i64> = models[p as usize].iter().map(|(t, _)| *t).collect();
                        let segments = segments_on_disk(dir, p);
                        expected_start(&segments, &ts, starts[p as usize], now, retention_bytes)
                    })
                    .collect();
                handles[handle].enforce_retention(now).expect("retention");
                for p in 0..2u32 {
                    starts[p as usize] = expected[p as usize];
                    check(
                        &handles[handle],
                        dir,
                        p,
                        &models[p as usize],
                        starts[p as usize],
                        true,
                    );
                }
            }
            Op::DeleteRecords { handle, p, percent } => {
                let end = models[p as usize].len() as u64;
                let start = starts[p as usize];
                let offset = start + (end - start) * percent / 100;
                handles[handle]
                    .delete_records(&tp(p), offset)
                    .expect("delete records");
                starts[p as usize] = start.max(offset);
                check(
                    &handles[handle],
                    dir,
                    p,
                    &models[p as usize],
                    starts[p as usize],
                    true,
                );
                // Past the end: refused, nothing changes.
                assert!(matches!(
                    handles[handle].delete_records(&tp(p), end + 1),
                    Err(Error::OffsetOutOfRange { .. })
                ));
            }
            Op::Read { handle, p } => {
                check(
                    &handles[handle],
                    dir,
                    p,
                    &models[p as usize],
                    starts[p as usize],
                    false,
                );
            }
            Op::Reopen { handle } => {
                handles[handle] = open(dir);
            }
        }
    }
    // Both handles, and a fresh one, agree.
    handles.push(open(dir));
    for log in &handles {
        for p in 0..2u32 {
            check(log, dir, p, &models[p as usize], starts[p as usize], false);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn retention_and_deleted_records_match_the_model_across_handles(
        ops in proptest::collection::vec(op(), 1..60),
        retention_bytes in proptest::option::of(200..2_000u64),
    ) {
        run(ops, retention_bytes);
    }
}

#[test]
fn retention_keeps_the_active_segment_and_a_reader_below_the_start_is_told() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = open(tmp.path());
    let config =
        TopicConfig::from_pairs([("retention.ms", "0"), ("segment.bytes", "200")]).expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..20 {
        b.push(0, Some(b"k"), Some(format!("value-{i}").as_bytes()));
        log.append(&tp(0), &mut b).expect("append");
    }
    let before = log.partition_info(&tp(0)).expect("info");
    assert!(before.segments > 2, "{before:?}");
    let report = log.enforce_retention(NOW).expect("retention");
    let after = log.partition_info(&tp(0)).expect("info");
    // Everything is old, but the active segment stays.
    assert_eq!(after.segments, 1);
    assert_eq!(report.segments_deleted, before.segments - 1);
    assert_eq!(report.bytes_freed, before.bytes - after.bytes);
    assert_eq!(after.end_offset, 20);
    assert!(after.start_offset > 0 && after.start_offset < 20);
    let err = log.fetch(&tp(0), 0, 1 << 20).expect_err("below the start");
    assert!(err.to_string().contains("t-0"), "{err}");
    // A second pass finds nothing more to do.
    assert_eq!(
        log.enforce_retention(NOW)
            .expect("retention")
            .segments_deleted,
        0
    );
    // A topic without a delete policy keeps everything.
    let compacted = TopicConfig::from_pairs([("cleanup.policy", "compact"), ("retention.ms", "0")])
        .expect("config");
    log.create_topic_with("c", 1, &compacted).expect("create");
    for _ in 0..20 {
        b.push(0, Some(b"k"), Some(&[1u8; 50]));
        log.append(&TopicPartition::new("c", 0), &mut b)
            .expect("append");
    }
    log.enforce_retention(NOW).expect("retention");
    assert_eq!(
        log.start_offset(&TopicPartition::new("c", 0))
            .expect("start"),
        0
    );
}

#[test]
fn the_start_offset_survives_a_reopen_and_a_read_only_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    {
        let log = open(tmp.path());
        log.create_topic("t", 1).expect("create");
        let mut b = BatchBuilder::new(Compression::None);
        for _ in 0..5 {
            b.push(NOW, Some(b"k"), Some(b"v"));
        }
        log.append(&tp(0), &mut b).expect("append");
        assert_eq!(log.delete_records(&tp(0), 3).expect("delete"), 0);
    }
    let log = open(tmp.path());
    assert_eq!(log.start_offset(&tp(0)).expect("start"), 3);
    let ro = Log::open_read_only(tmp.path(), options()).expect("read-only");
    assert_eq!(ro.start_offset(&tp(0)).expect("start"), 3);
    assert!(ro.delete_records(&tp(0), 4).is_err());
    assert_eq!(
        std::fs::read_to_string(partition_dir(tmp.path(), 0).join("start")).expect("start file"),
        format!("3 {:08x}\n", crc32c::crc32c(b"3"))
    );
    // A damaged start offset is an error naming the file, never another start offset; the
    // checksum-less form of older logs is read as it was.
    drop((log, ro));
    let start = partition_dir(tmp.path(), 0).join("start");
    for damaged in ["2 1b1e2e9e\n", "3 00000000\n", "3\n\n", "x\n", "3 8\n"] {
        std::fs::write(&start, damaged).expect("damage");
        let err = Log::open(tmp.path(), options())
            .and_then(|log| log.start_offset(&tp(0)))
            .expect_err(damaged);
        assert!(err.to_string().contains("start"), "{err}");
    }
    std::fs::write(&start, "3\n").expect("an older log's start");
    assert_eq!(open(tmp.path()).start_offset(&tp(0)).expect("start"), 3);
}
