//! Real processes: one appends, one compacts (SIGKILLed at random points and started again),
//! and this process reads all along. Offset `o` holds key `k<o % 37>` and value `a-<o>` (every
//! 23rd a tombstone), so every read is checked against that model: records come in offset
//! order, each exactly as appended; a record the reader never saw must have had a later record
//! of its key; the segment files are swapped under the reader's open handles, and it reopens
//! closed ones. At the end a fresh open reads every key's latest record, no leftover of a swap
//! is on disk, and a last pass leaves at most one record per key below the active segment.
//!
//! This test binary runs itself as the child processes (the `child` test does the work when
//! `RIFFLE_COMPACT_CHILD` is set). `RIFFLE_CRASH_SEED` replays a seed.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use rand::Rng as _;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicConfig, TopicPartition};

const RECORDS: u64 = 40_000;
const KEYS: u64 = 37;

fn options() -> LogOptions {
    LogOptions::default()
        .with_max_open_files(8)
        .with_retention_check_interval(None)
        .with_compaction_check_interval(None)
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn key(o: u64) -> Vec<u8> {
    format!("k{}", o % KEYS).into_bytes()
}

fn value(o: u64) -> Option<Vec<u8>> {
    (!o.is_multiple_of(23)).then(|| format!("a-{o}").into_bytes())
}

#[test]
fn child() {
    let Ok(mode) = std::env::var("RIFFLE_COMPACT_CHILD") else {
        return; // run as a test of its own: nothing to do
    };
    let dir = std::env::var("RIFFLE_COMPACT_DIR").expect("dir");
    let log = Log::open(&dir, options()).expect("child: open");
    match mode.as_str() {
        "append" => {
            let mut b = BatchBuilder::new(Compression::None);
            let mut next = 0u64;
            while next < RECORDS {
                for _ in 0..(1 + next % 7).min(RECORDS - next) {
                    b.push(0, Some(&key(next)), value(next).as_deref());
                    next += 1;
                }
                log.append(&tp(), &mut b).expect("child: append");
                if next.is_multiple_of(40) {
                    log.sync().expect("child: sync");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            log.sync().expect("child: sync");
        }
        "compact" => loop {
            let end = log.end_offset(&tp()).expect("child: end");
            log.compact(1_000).expect("child: compact");
            if end >= RECORDS {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        },
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn(dir: &Path, mode: &str) -> Child {
    common::child_command()
        .env("RIFFLE_COMPACT_CHILD", mode)
        .env("RIFFLE_COMPACT_DIR", dir)
        .spawn()
        .expect("spawn")
}

/// Reads from `from` on, at most `fetches` fetches of 1 KiB (or to the end as it is now),
/// checking every record against the model; returns where it stopped and counts the records
/// it never saw (each must have had a later record of its key by then).
fn read_on(log: &Log, mut from: u64, fetches: usize, skipped: &mut u64) -> u64 {
    for _ in 0..fetches {
        let end = log.end_offset(&tp()).expect("end");
        let batches = log.fetch(&tp(), from, 1 << 10).expect("fetch");
        if batches.is_empty() {
            return from;
        }
        for batch in batches {
            for record in batch.records() {
                let record = record.expect("record decodes");
                let o = record.offset();
                if o < from {
                    continue;
                }
                for gone in from..o {
                    assert!(
                        gone + KEYS < end,
                        "offset {gone} was removed, but its key had no later record below {end}"
                    );
                    *skipped += 1;
                }
                assert_eq!(record.key().map(|k| k.to_vec()), Some(key(o)), "key at {o}");
                assert_eq!(record.value().map(|v| v.to_vec()), value(o), "value at {o}");
                from = o + 1;
            }
            from = from.max(batch.last_offset() + 1);
        }
    }
    from
}

#[test]
fn a_reader_sees_every_latest_record_while_a_killed_compactor_runs() {
    let mut rng = common::rng(common::crash_seed());
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let log = Log::open(dir, options()).expect("open");
    let config = TopicConfig::from_pairs([
        ("cleanup.policy", "compact"),
        ("segment.bytes", "2048"),
        ("min.cleanable.dirty.ratio", "0.3"),
    ])
    .expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let mut appender = spawn(dir, "append");
    let mut compactor = common::KilledChild::start(|| spawn(dir, "compact"));
    let (mut from, mut skipped, mut passes) = (0u64, 0u64, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // A slow reader, from the start again now and then: compaction swaps segments it
        // read before.
        from = read_on(&log, from, 1, &mut skipped);
        if rng.random_ratio(1, 60) {
            from = 0;
            passes += 1;
        }
        if compactor.both_ended(&mut appender) {
            break;
        }
        compactor.maybe_kill(&mut rng);
        assert!(Instant::now() < deadline, "the children did not finish");
        std::thread::sleep(Duration::from_millis(2));
    }
    let end = read_on(&log, from, usize::MAX, &mut skipped);
    assert_eq!(end, RECORDS);
    println!(
        "{} compactors killed; the reader started over {passes} times and found {skipped} records compacted away",
        compactor.kills
    );
    assert!(
        skipped > 0,
        "the compactor never removed a record the reader was to read"
    );
    // A fresh open, after a last pass: every key's latest record, nothing else below the
    // active segment, no leftover of a swap.
    let fresh = Log::open(dir, options()).expect("reopen");
    fresh.compact(1_000).expect("compact");
    let info = fresh.partition_info(&tp()).expect("info");
    let mut latest = BTreeMap::new();
    let mut below = 0;
    for (offset, (_, key, _)) in common::read_all(&fresh, &tp(), 0, 1 << 16) {
        below += usize::from(offset < info.active_segment_base);
        latest.insert(key.expect("key"), offset);
    }
    let expected: BTreeMap<Vec<u8>, u64> = (RECORDS - KEYS..RECORDS).map(|o| (key(o), o)).collect();
    assert_eq!(latest, expected);
    assert!(
        below <= KEYS as usize,
        "{below} records below the active segment"
    );
    common::assert_no_swap_leftovers(&dir.join("topics/t/0"));
}
