//! Compaction against a model: random appends (few keys, tombstones, null keys, several codecs),
//! compaction passes at moving clocks, reads and reopens, through two handles on one directory
//! (as two processes open it: a handle that closed a segment file finds another file under its
//! name after a swap). The model replays Kafka's rules by brute force: after a pass that cleaned
//! up to the active segment's base `E`, a record below `E` is gone if its key has a later record
//! below `E`, or if it is a tombstone whose delete horizon (the first pass that kept it, plus
//! `delete.retention.ms`) has passed; every other record reads back exactly as appended, at its
//! offset.

mod common;

use std::path::Path;

use proptest::prelude::*;
use riffle_log::{Compression, Log, LogOptions, TopicConfig, TopicPartition};

const DELETE_RETENTION_MS: i64 = 1_000;

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn options() -> LogOptions {
    LogOptions::default()
        .with_index_interval_bytes(100)
        .with_max_open_files(4)
        .with_retention_check_interval(None)
        .with_compaction_check_interval(None)
}

fn open(dir: &Path) -> Log {
    Log::open(dir, options()).expect("open")
}

#[derive(Clone, Debug)]
enum Op {
    Append {
        handle: usize,
        codec: u8,
        /// Key (`None`: a null key) and whether the value is a tombstone.
        records: Vec<(Option<u8>, bool)>,
    },
    Compact {
        handle: usize,
        advance: i64,
    },
    Read {
        handle: usize,
    },
    Reopen {
        handle: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let record = (
        proptest::option::weighted(0.95, 0..5u8),
        proptest::bool::weighted(0.2),
    );
    prop_oneof![
        6 => (0..2usize, 0..3u8, proptest::collection::vec(record, 1..6))
            .prop_map(|(handle, codec, records)| Op::Append { handle, codec, records }),
        3 => (0..2usize, prop_oneof![Just(0i64), Just(DELETE_RETENTION_MS / 2), Just(DELETE_RETENTION_MS + 1)])
            .prop_map(|(handle, advance)| Op::Compact { handle, advance }),
        2 => (0..2usize).prop_map(|handle| Op::Read { handle }),
        1 => (0..2usize).prop_map(|handle| Op::Reopen { handle }),
    ]
}

/// Ops written one to a line, for the scenarios the property test found:
/// `<handle> append <none|zstd|lz4>: <records>` (a record is its key, a digit, or `-` for a
/// null key, then `t` if it is a tombstone), `<handle> compact <ms the clock advances>`,
/// `<handle> read`, `<handle> reopen`.
fn script(text: &str) -> Vec<Op> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (handle, rest) = line.split_once(' ').expect("a handle");
            let handle: usize = handle.parse().expect("a handle");
            let (verb, args) = rest.split_once(' ').unwrap_or((rest, ""));
            match verb {
                "append" => {
                    let (codec, records) = args.split_once(':').expect("append <codec>: …");
                    let codec = ["none", "zstd", "lz4"]
                        .iter()
                        .position(|name| *name == codec)
                        .expect("a codec") as u8;
                    let records = records
                        .split_whitespace()
                        .map(|r| {
                            let (key, tombstone) = match r.strip_suffix('t') {
                                Some(key) => (key, true),
                                None => (r, false),
                            };
                            let key = (key != "-").then(|| key.parse().expect("a key"));
                            (key, tombstone)
                        })
                        .collect();
                    Op::Append {
                        handle,
                        codec,
                        records,
                    }
                }
                "compact" => Op::Compact {
                    handle,
                    advance: args.parse().expect("ms"),
                },
                "read" => Op::Read { handle },
                "reopen" => Op::Reopen { handle },
                _ => panic!("not an op: {line}"),
            }
        })
        .collect()
}

/// One appended record and what the model says about it now.
#[derive(Clone, Debug)]
struct Rec {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    ts: i64,
    present: bool,
    /// When a pass first kept it as a tombstone: that pass's clock plus the retention.
    horizon: Option<i64>,
}

/// A pass that cleaned up to `end` at clock `now`.
fn apply_pass(model: &mut [Rec], end: u64, now: i64) {
    let end = end as usize;
    for o in 0..end {
        if !model[o].present {
            continue;
        }
        let key = model[o].key.clone();
        let superseded = key.is_some() && model[o + 1..end].iter().any(|r| r.key == key);
        if superseded {
            model[o].present = false;
            continue;
        }
        let tombstone = key.is_some() && model[o].value.is_none();
        if tombstone {
            match model[o].horizon {
                Some(h) if h <= now => model[o].present = false,
                Some(_) => {}
                None => model[o].horizon = Some(now + DELETE_RETENTION_MS),
            }
        }
    }
}

/// What `log` reads equals the model (`exact`: the handle that compacted, or one opened since),
/// or (another handle, which may still read the files it had open before a swap) holds every
/// record the model keeps and nothing that was not appended at its offset.
fn check(log: &Log, model: &[Rec], exact: bool) {
    assert_eq!(log.end_offset(&tp()).expect("end"), model.len() as u64);
    assert_eq!(log.start_offset(&tp()).expect("start"), 0);
    let got: Vec<(u64, common::Model)> = common::read_all(log, &tp(), 0, 500);
    let as_model = |o: usize, r: &Rec| (o as u64, (r.ts, r.key.clone(), r.value.clone()));
    let expected: Vec<(u64, common::Model)> = model
        .iter()
        .enumerate()
        .filter(|(_, r)| r.present)
        .map(|(o, r)| as_model(o, r))
        .collect();
    if exact {
        assert_eq!(got, expected);
        return;
    }
    for record in &got {
        assert_eq!(
            *record,
            as_model(record.0 as usize, &model[record.0 as usize])
        );
    }
    let offsets: std::collections::BTreeSet<u64> = got.iter().map(|r| r.0).collect();
    for record in &expected {
        assert!(offsets.contains(&record.0), "{record:?} is missing");
    }
}

fn run(ops: Vec<Op>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut handles = [open(dir), open(dir)];
    let config = TopicConfig::from_pairs([
        ("cleanup.policy", "compact"),
        ("segment.bytes", "300"),
        ("min.cleanable.dirty.ratio", "0"),
        ("delete.retention.ms", &DELETE_RETENTION_MS.to_string()),
    ])
    .expect("config");
    handles[0]
        .create_topic_with("t", 1, &config)
        .expect("create");
    let mut model: Vec<Rec> = Vec::new();
    let mut now = 1_000_000i64;
    let mut checkpoint = 0u64;
    // Which handles have seen every swap (opened or compacted since the last one).
    let mut fresh = [true, true];
    for op in ops {
        match op {
            Op::Append {
                handle,
                codec,
                records,
            } => {
                let codec =
                    [Compression::None, Compression::Zstd, Compression::Lz4][codec as usize];
                let batch: Vec<common::Model> = records
                    .iter()
                    .map(|(key, tombstone)| {
                        let o = model.len();
                        let rec = Rec {
                            key: key.map(|k| vec![b'k', k]),
                            value: (!tombstone).then(|| format!("value-{o}").into_bytes()),
                            ts: now + o as i64,
                            present: true,
                            horizon: None,
                        };
                        model.push(rec.clone());
                        (rec.ts, rec.key, rec.value)
                    })
                    .collect();
                common::append(&handles[handle], &tp(), codec, &batch);
            }
            Op::Compact { handle, advance } => {
                now += advance;
                let end = handles[handle]
                    .partition_info(&tp())
                    .expect("info")
                    .active_segment_base;
                let report = handles[handle].compact(now).expect("compact");
                // With a dirty ratio of 0, a pass runs whenever a sealed segment is new.
                assert_eq!(
                    report.partitions,
                    usize::from(end > checkpoint),
                    "{report:?}"
                );
                if report.partitions == 1 {
                    apply_pass(&mut model, end, now);
                    checkpoint = end;
                    // The handle that cleaned reads its own swaps; the other still reads
                    // what it has open.
                    fresh = [false, false];
                    fresh[handle] = true;
                }
                check(&handles[handle], &model, fresh[handle]);
            }
            Op::Read { handle } => check(&handles[handle], &model, fresh[handle]),
            Op::Reopen { handle } => {
                handles[handle] = open(dir);
                fresh[handle] = true;
            }
        }
    }
    for (log, fresh) in handles.iter().zip(fresh) {
        check(log, &model, fresh);
    }
    check(&open(dir), &model, true);
    // A read-only open agrees too, and no leftover of a swap is on disk.
    let read_only = Log::open(dir, options().with_read_only(true)).expect("read-only open");
    check(&read_only, &model, true);
    common::assert_no_swap_leftovers(&dir.join("topics").join("t").join("0"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_what_kafkas_rules_keep_across_handles(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(ops);
    }
}

/// A long, fixed history: every key's latest value survives many passes, the log shrinks to
/// about one record per key, and a segment group with nothing left is one empty batch.
#[test]
fn many_passes_shrink_the_log_to_the_latest_record_per_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let log = open(dir);
    let config =
        TopicConfig::from_pairs([("cleanup.policy", "compact"), ("segment.bytes", "2000")])
            .expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let mut latest = std::collections::BTreeMap::new();
    let mut now = 1_000_000;
    for round in 0..40u64 {
        let batch: Vec<common::Model> = (0..50u64)
            .map(|i| {
                let key = format!("key-{}", (round * 50 + i) % 20).into_bytes();
                let value = format!("value-{round}-{i}").into_bytes();
                latest.insert(key.clone(), value.clone());
                (now, Some(key), Some(value))
            })
            .collect();
        common::append(&log, &tp(), Compression::None, &batch);
        now += 10;
        log.compact(now).expect("compact");
    }
    let info = log.partition_info(&tp()).expect("info");
    let read = common::read_all(&log, &tp(), 0, 1 << 20);
    let mut seen = std::collections::BTreeMap::new();
    for (_, (_, key, value)) in &read {
        seen.insert(key.clone().expect("key"), value.clone().expect("value"));
    }
    assert_eq!(seen, latest);
    // Sealed segments hold one record per key at most; the active one what came since.
    let below: Vec<_> = read
        .iter()
        .filter(|(o, _)| *o < info.active_segment_base)
        .collect();
    assert!(
        below.len() <= 20,
        "{} records below the active segment",
        below.len()
    );
    assert!(info.bytes < 8_000, "{info:?}");
    let again = open(dir);
    assert_eq!(common::read_all(&again, &tp(), 0, 300), read);
}

/// Found by the property test: a handle that appended before another one merged its segments
/// reads on after the swap.
#[test]
fn a_handle_reads_on_after_another_merged_the_segments_it_had_open() {
    run(script(
        "
         1 append none: - - -
         0 append none: -
         0 append none: - - - - -
         0 compact 0
         0 append none: -
         0 append none: 0 0
        ",
    ));
}

/// Found by the property test (1,500 cases): handles taking turns at compacting and appending.
#[test]
fn handles_taking_turns_at_compacting_and_appending() {
    run(script(
        "
         1 append lz4: 0 2 3 1 3
         0 append lz4: 0
         0 append lz4: 3t 0t
         0 append zstd: 2 2 4
         1 append zstd: -t - 2 4
         1 append none: 0 0 0 0
         0 compact 1001
         0 read
         0 append none: 3 3 0 2
         1 reopen
         0 compact 0
         0 compact 500
         1 append zstd: 4 1 1 2 1
         1 append lz4: 0 4 1 4 4
         0 compact 500
         1 append none: - 0 2 0 1
         0 append zstd: 0 0
         1 append lz4: 2t 1 3 2
         0 read
         1 compact 1001
         1 append zstd: 2 4t
         0 compact 500
         0 append zstd: 2 4 2 3t 3
         0 reopen
         0 append zstd: 4 1t 1 -t
         1 compact 0
         1 append none: 1 3 4
         0 read
         1 read
         0 append zstd: 2 3 4
         0 compact 0
         1 read
         1 compact 1001
         1 compact 1001
         0 compact 1001
         0 compact 0
         1 append lz4: 1 0t 3
         0 compact 1001
         0 append none: 0 2
         1 compact 1001
         1 compact 1001
         1 append none: 3 0 0 1 3
         1 compact 0
         1 compact 1001
         0 read
         1 read
         0 append zstd: 1
         1 compact 0
         0 read
         0 append lz4: 4
         0 append none: 4 2 4 2
         0 compact 1001
         1 append zstd: 2 4 2
         1 append none: 3 1 0
         0 append lz4: 2 3 3 2
         0 compact 0
        ",
    ));
}

/// Found by the property test: a handle whose active segment was rolled by another, then merged
/// into the segment before it by that other's compaction, finds the records appended since.
#[test]
fn a_handle_whose_active_segment_was_merged_away_finds_the_new_end() {
    run(script(
        "
         0 append none: -
         0 append none: - - - - 0
         0 append none: 0 0
         0 append none: - - -
         0 append lz4: 0 0
         0 append zstd: 0 0
         0 append none: 0 0
         1 append none: - 0
         0 append zstd: 0 1 -
         0 append none: -
         0 append none: 0 0 0
         0 compact 0
         0 append none: - - -
         0 append none: - -
         0 compact 0
         0 append none: -
        ",
    ));
}
