//! Real processes: one appends, one deletes (retention by size and `delete_records`, SIGKILLed
//! at random points and started again), and this process reads all along. With one appender,
//! offset `o` holds its record `a-<o>`, so every read is checked against that model; a read
//! below the start offset is `OffsetOutOfRange` and the start offset only moves forward; at
//! the end, a fresh open reads every record from the start offset on.
//!
//! This test binary runs itself as the child processes (the `child` test does the work when
//! `RIFFLE_DELETE_CHILD` is set). `RIFFLE_CRASH_SEED` replays a seed.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use riffle_log::{BatchBuilder, Compression, Error, Log, LogOptions, TopicConfig, TopicPartition};

const RECORDS: u64 = 6_000;

/// How often the reader found its position below a moved start offset.
static JUMPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn options() -> LogOptions {
    // Small segments and few open files: segments are deleted under the reader's feet, and it
    // reopens closed ones.
    LogOptions::default()
        .with_max_open_files(8)
        .with_retention_check_interval(None)
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

#[test]
fn child() {
    let Ok(mode) = std::env::var("RIFFLE_DELETE_CHILD") else {
        return; // run as a test of its own: nothing to do
    };
    let dir = std::env::var("RIFFLE_DELETE_DIR").expect("dir");
    let log = Log::open(&dir, options()).expect("child: open");
    match mode.as_str() {
        "append" => {
            let mut b = BatchBuilder::new(Compression::None);
            let mut next = 0u64;
            while next < RECORDS {
                for _ in 0..(1 + next % 5).min(RECORDS - next) {
                    b.push(0, Some(b"k"), Some(format!("a-{next}").as_bytes()));
                    next += 1;
                }
                log.append(&tp(), &mut b).expect("child: append");
                if next.is_multiple_of(50) {
                    log.sync().expect("child: sync");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            log.sync().expect("child: sync");
        }
        "delete" => {
            for round in 0u64.. {
                let end = log.end_offset(&tp()).expect("child: end");
                if round.is_multiple_of(2) {
                    log.enforce_retention(i64::MAX / 2)
                        .expect("child: retention");
                } else {
                    log.delete_records(&tp(), end * 3 / 4)
                        .expect("child: delete");
                }
                if end >= RECORDS {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn(dir: &Path, mode: &str) -> Child {
    common::child_command()
        .env("RIFFLE_DELETE_CHILD", mode)
        .env("RIFFLE_DELETE_DIR", dir)
        .spawn()
        .expect("spawn")
}

/// Reads from `from` on, at most `fetches` fetches of 1 KiB (or to the end as it is now),
/// checking every record against the model; returns where it stopped. Below the start
/// offset: jumps to it (it must have moved past).
fn read_on(log: &Log, mut from: u64, last_start: &mut u64, fetches: usize) -> u64 {
    for _ in 0..fetches {
        match log.fetch(&tp(), from, 1 << 10) {
            Ok(batches) if batches.is_empty() => return from,
            Ok(batches) => {
                for batch in batches {
                    for record in batch.records() {
                        let record = record.expect("record decodes");
                        if record.offset() < from {
                            continue;
                        }
                        assert_eq!(record.offset(), from, "offsets are dense");
                        let value = record.value().expect("value");
                        assert_eq!(&value[..], format!("a-{from}").as_bytes());
                        from += 1;
                    }
                }
            }
            Err(Error::OffsetOutOfRange { start, end, .. }) => {
                assert!(
                    start > from,
                    "out of range at {from}, but the start is {start} (end {end})"
                );
                assert!(
                    start >= *last_start,
                    "the start offset went back: {last_start} → {start}"
                );
                *last_start = start;
                from = start;
                JUMPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => panic!("read at {from}: {e}"),
        }
    }
    from
}

#[test]
fn a_reader_sees_every_record_or_a_start_offset_past_it_while_a_killed_deleter_runs() {
    let mut rng = common::rng(common::crash_seed());
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let log = Log::open(dir, options()).expect("open");
    let config = TopicConfig::from_pairs([("segment.bytes", "2048"), ("retention.bytes", "8192")])
        .expect("config");
    log.create_topic_with("t", 1, &config).expect("create");
    let mut appender = spawn(dir, "append");
    let mut deleter = common::KilledChild::start(|| spawn(dir, "delete"));
    let (mut from, mut last_start) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // A slow reader: the deleter overtakes it.
        from = read_on(&log, from, &mut last_start, 1);
        if deleter.both_ended(&mut appender) {
            break;
        }
        deleter.maybe_kill(&mut rng);
        assert!(Instant::now() < deadline, "the children did not finish");
        std::thread::sleep(Duration::from_millis(2));
    }
    from = read_on(&log, from, &mut last_start, usize::MAX);
    assert_eq!(from, RECORDS);
    let jumps = JUMPS.load(std::sync::atomic::Ordering::Relaxed);
    // The reader is slow on purpose: deletions overtake it.
    assert!(jumps > 0, "the deleter never overtook the reader");
    println!(
        "{} deleters killed; the reader jumped to a moved start offset {jumps} times, last {last_start}",
        deleter.kills
    );
    // A fresh open: the start offset is where the deleters left it, every record from it on
    // reads back, and nothing lies wholly below it once retention ran.
    let fresh = Log::open(dir, options()).expect("reopen");
    let start = fresh.start_offset(&tp()).expect("start");
    assert!(
        start >= last_start && start > 0,
        "start {start}, seen {last_start}"
    );
    let mut seen = start;
    assert_eq!(read_on(&fresh, start, &mut seen, usize::MAX), RECORDS);
    assert_eq!(seen, start);
    fresh.enforce_retention(0).expect("retention");
    let info = fresh.partition_info(&tp()).expect("info");
    assert!(info.bytes <= 8192 + 2048 + 4096, "{info:?}");
}
