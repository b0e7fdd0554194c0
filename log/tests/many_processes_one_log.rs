//! Real processes on one log directory: this test binary runs itself as child processes (the
//! `child` test does the work when `RIFFLE_LOG_CHILD` is set) that append small batches, or
//! commit transactions, to the same partitions at once, some SIGKILLed at random points. Every
//! record lands once with dense offsets; a killed appender's records are a prefix of what it
//! meant to write (its in-flight batch was cut by the next writer, nothing else); each
//! transaction is all or nothing, and its group's committed offset counts exactly the
//! transactions that landed.
//!
//! `RIFFLE_CRASH_SEED` replays a failing seed.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rand::Rng as _;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

const TOPIC: &str = "t";
const PARTITIONS: u32 = 2;
const OFFSETS_TOPIC: &str = "in";

fn options() -> LogOptions {
    // Small segments: processes roll segments under each other.
    LogOptions::default().with_segment_bytes(64 << 10)
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// What a child does, from its environment.
#[test]
fn child() {
    let Ok(mode) = std::env::var("RIFFLE_LOG_CHILD") else {
        return; // run as a test of its own: nothing to do
    };
    let var = |name: &str| std::env::var(name).expect(name);
    let dir = var("RIFFLE_LOG_DIR");
    let id: usize = var("RIFFLE_LOG_ID").parse().expect("id");
    let n: usize = var("RIFFLE_LOG_N").parse().expect("n");
    let log = Log::open(&dir, options()).expect("child: open");
    match mode.as_str() {
        "append" => {
            for i in 0..n {
                let mut b = BatchBuilder::new(Compression::None);
                for j in 0..(1 + i % 4) {
                    b.push(
                        0,
                        Some(format!("a{id}").as_bytes()),
                        Some(format!("{i}.{j}").as_bytes()),
                    );
                }
                log.append(&tp((i % PARTITIONS as usize) as u32), &mut b)
                    .expect("child: append");
            }
        }
        "txn" => {
            for i in 0..n {
                let mut first = BatchBuilder::new(Compression::Lz4);
                let mut second = BatchBuilder::new(Compression::None);
                first.push(
                    0,
                    Some(format!("t{id}").as_bytes()),
                    Some(format!("{i}.a").as_bytes()),
                );
                second.push(
                    0,
                    Some(format!("t{id}").as_bytes()),
                    Some(format!("{i}.b").as_bytes()),
                );
                log.commit_transaction(
                    &format!("g{id}"),
                    &mut [(tp(0), &mut first), (tp(1), &mut second)],
                    &[(TopicPartition::new(OFFSETS_TOPIC, 0), i as u64 + 1)],
                )
                .expect("child: transaction");
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn(dir: &Path, mode: &str, id: usize, n: usize) -> Child {
    common::child_command()
        .env("RIFFLE_LOG_CHILD", mode)
        .env("RIFFLE_LOG_DIR", dir)
        .env("RIFFLE_LOG_ID", id.to_string())
        .env("RIFFLE_LOG_N", n.to_string())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// Waits for `child`; true if it was SIGKILLed, else it must have succeeded.
fn finish(child: Child) -> bool {
    let out = child.wait_with_output().expect("wait");
    if out.status.signal() == Some(9) {
        return true;
    }
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// Every record of the topic, per writer key, in offset order, checking dense offsets.
fn records(dir: &Path) -> BTreeMap<String, Vec<(u32, String)>> {
    let log = Log::open_read_only(dir, options()).expect("open read-only");
    let mut out: BTreeMap<String, Vec<(u32, String)>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let end = log.end_offset(&tp(p)).expect("end");
        let mut next = 0;
        while next < end {
            for batch in log.fetch(&tp(p), next, 1 << 20).expect("fetch") {
                assert_eq!(batch.base_offset(), next, "{}: a gap or overlap", tp(p));
                for r in batch.records() {
                    let r = r.expect("record");
                    assert_eq!(r.offset(), next);
                    next += 1;
                    let key = String::from_utf8_lossy(r.key().expect("key")).into_owned();
                    let value = String::from_utf8_lossy(r.value().expect("value")).into_owned();
                    out.entry(key).or_default().push((p, value));
                }
            }
        }
    }
    out
}

/// What appender `id` writes in its first `n` appends, per partition, in order.
fn appender_records(n: usize) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for i in 0..n {
        for j in 0..(1 + i % 4) {
            out.push(((i % PARTITIONS as usize) as u32, format!("{i}.{j}")));
        }
    }
    out
}

fn by_partition(records: &[(u32, String)]) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (p, v) in records {
        out.entry(*p).or_default().push(v.clone());
    }
    out
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), options()).expect("open");
    log.create_topic(TOPIC, PARTITIONS).expect("create");
    log.create_topic(OFFSETS_TOPIC, 1).expect("create");
    dir
}

#[test]
fn appender_processes_get_dense_offsets_and_every_record_once() {
    let dir = setup();
    let (writers, n) = (4, 1_500);
    let started = Instant::now();
    let children: Vec<Child> = (0..writers)
        .map(|id| spawn(dir.path(), "append", id, n))
        .collect();
    for child in children {
        assert!(!finish(child), "not killed");
    }
    let elapsed = started.elapsed();
    let got = records(dir.path());
    for id in 0..writers {
        assert_eq!(
            by_partition(got.get(&format!("a{id}")).expect("a writer's records")),
            by_partition(&appender_records(n)),
            "writer {id}"
        );
    }
    println!(
        "{writers} processes × {n} appends in {:.2} s",
        elapsed.as_secs_f64()
    );
}

#[test]
fn killed_appenders_leave_a_prefix_and_the_others_every_record() {
    let seed = common::crash_seed();
    let mut rng = common::rng(seed);
    let dir = setup();
    let n = 3_000;
    let mut killed = 0;
    let mut finished = Vec::new();
    let mut prefixes = Vec::new();
    for round in 0..3 {
        let children: Vec<(usize, Child)> = (0..4)
            .map(|i| {
                let id = round * 10 + i;
                (id, spawn(dir.path(), "append", id, n))
            })
            .collect();
        let mut children: Vec<(usize, Option<Child>)> =
            children.into_iter().map(|(id, c)| (id, Some(c))).collect();
        // Kill two of them at random points.
        for (id, child) in children.iter_mut().take(2) {
            std::thread::sleep(Duration::from_millis(rng.random_range(20..320)));
            let mut c = child.take().expect("child");
            let _ = c.kill();
            if finish(c) {
                killed += 1;
                prefixes.push(*id);
            } else {
                finished.push(*id);
            }
        }
        for (id, child) in children {
            if let Some(c) = child {
                assert!(!finish(c));
                finished.push(id);
            }
        }
    }
    // One more after all the kills: appends where they stopped.
    assert!(!finish(spawn(dir.path(), "append", 99, 100)));
    finished.push(99);
    let got = records(dir.path());
    for id in &finished {
        let want = if *id == 99 { 100 } else { n };
        assert_eq!(
            by_partition(&got[&format!("a{id}")]),
            by_partition(&appender_records(want)),
            "seed {seed}: writer {id}, which finished"
        );
    }
    for id in &prefixes {
        let stored = got.get(&format!("a{id}")).cloned().unwrap_or_default();
        // Appends are sequential, so what landed is the first k appends, for some k.
        let all = appender_records(n);
        let k = (0..=n)
            .find(|&k| by_partition(&appender_records(k)) == by_partition(&stored))
            .unwrap_or_else(|| panic!("seed {seed}: writer {id}'s records are not a prefix"));
        assert!(stored.len() <= all.len());
        println!("killed writer {id}: its first {k} of {n} appends landed");
    }
    println!("seed {seed}: {killed} appender processes killed with SIGKILL");
}

#[test]
fn killed_transaction_processes_are_all_or_nothing_beside_plain_appenders() {
    let seed = common::crash_seed();
    let mut rng = common::rng(seed);
    let dir = setup();
    let n = 1_500;
    let txn_writers = 3;
    let mut children: Vec<(usize, Option<Child>)> = (0..txn_writers)
        .map(|id| (id, Some(spawn(dir.path(), "txn", id, n))))
        .collect();
    let appenders: Vec<Child> = (0..2)
        .map(|id| spawn(dir.path(), "append", id, 2_000))
        .collect();
    let mut killed = Vec::new();
    for (id, child) in children.iter_mut().take(2) {
        std::thread::sleep(Duration::from_millis(rng.random_range(10..610)));
        let mut c = child.take().expect("child");
        let _ = c.kill();
        if finish(c) {
            killed.push(*id);
        }
    }
    for (_, child) in children {
        if let Some(c) = child {
            assert!(!finish(c));
        }
    }
    for a in appenders {
        assert!(!finish(a), "an appender beside transactions");
    }
    // A transaction after the kills recovers whatever they left.
    assert!(!finish(spawn(dir.path(), "txn", 9, 5)));
    let got = records(dir.path());
    let log = Log::open_read_only(dir.path(), options()).expect("open");
    for id in (0..txn_writers).chain([9]) {
        let stored = got.get(&format!("t{id}")).cloned().unwrap_or_default();
        let parts = by_partition(&stored);
        let a: Vec<String> = parts.get(&0).cloned().unwrap_or_default();
        let b: Vec<String> = parts.get(&1).cloned().unwrap_or_default();
        let landed = a.len();
        let want_a: Vec<String> = (0..landed).map(|i| format!("{i}.a")).collect();
        let want_b: Vec<String> = (0..landed).map(|i| format!("{i}.b")).collect();
        assert_eq!(a, want_a, "seed {seed}: transactions of {id} not a prefix");
        assert_eq!(b, want_b, "seed {seed}: a transaction of {id} landed half");
        let committed = log
            .committed_offset(&format!("g{id}"), &TopicPartition::new(OFFSETS_TOPIC, 0))
            .expect("committed");
        assert_eq!(
            committed.unwrap_or(0),
            landed as u64,
            "seed {seed}: {id}'s offset and its landed transactions disagree"
        );
        if !killed.contains(&id) {
            assert_eq!(
                landed,
                if id == 9 { 5 } else { n },
                "seed {seed}: {id} finished"
            );
        }
        println!("transaction writer {id}: {landed} transactions landed");
    }
    for id in 0..2 {
        assert_eq!(
            by_partition(&got[&format!("a{id}")]),
            by_partition(&appender_records(2_000)),
            "seed {seed}: appender {id} beside transactions"
        );
    }
    println!("seed {seed}: transaction processes killed: {killed:?}");
}
