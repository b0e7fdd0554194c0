//! Open file handles stay bounded whatever the partition count: a log of 20,000 partitions
//! (40,000 segment and index files) is created, appended to, fetched from, reopened and read
//! again in a process limited to 1,024 open files (`ulimit -n 1024`), and the process never
//! holds more than `max_open_files` (512), plus the lock files a lock keeps pinned open (at
//! most the 128 partitions leased at once, log/src/lease.rs: more of them stay leased while the
//! releaser thread lags on a loaded machine), plus a few handles.

// Reads /proc (procfs, a Linux-only dev-dependency).
#![cfg(target_os = "linux")]

mod common;

use std::process::Command;

use common::{append, simple};
use riffle_log::{Compression, Log, LogOptions, TopicPartition};

const PARTITIONS: u32 = 20_000;
const CHILD: &str = "RIFFLE_OPEN_FILES_CHILD";

/// This process's open file descriptors, from `/proc/self/fd` (counting the one that reads it).
fn open_files() -> usize {
    procfs::process::Process::myself()
        .and_then(|me| me.fd_count())
        .unwrap_or(0)
}

/// The work, run in the child under `ulimit -n 1024`; returns the most files seen open.
fn twenty_thousand_partitions(dir: &std::path::Path) -> usize {
    let mut peak = open_files();
    let log = Log::open(dir, LogOptions::default()).expect("open");
    log.create_topic("wide", PARTITIONS)
        .expect("create 20,000 partitions");
    peak = peak.max(open_files());
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new("wide", p);
        append(&log, &tp, Compression::None, &simple(2, i64::from(p)));
        if p % 1000 == 0 {
            peak = peak.max(open_files());
        }
    }
    log.commit_offsets("g", &[])
        .expect("commit (fsyncs every partition)");
    peak = peak.max(open_files());
    drop(log);
    let log = Log::open(dir, LogOptions::default()).expect("reopen");
    peak = peak.max(open_files());
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new("wide", p);
        let batches = log.fetch(&tp, 0, 1 << 20).expect("fetch");
        let records: usize = batches.iter().map(|b| b.record_count() as usize).sum();
        assert_eq!(records, 2, "partition {p}");
        if p % 1000 == 0 {
            peak = peak.max(open_files());
        }
    }
    peak
}

#[test]
fn twenty_thousand_partitions_open_append_and_fetch_under_ulimit_1024() {
    if std::env::var_os(CHILD).is_some() {
        let dir = std::env::var_os(CHILD).expect("dir");
        let before = open_files();
        let peak = twenty_thousand_partitions(std::path::Path::new(&dir));
        println!("open files: {before} before, at most {peak} with {PARTITIONS} partitions");
        assert!(peak <= before + 512 + 128 + 16, "{peak} files open");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let output = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 1024 && exec \"$0\" twenty_thousand_partitions_open_append_and_fetch_under_ulimit_1024 --exact --nocapture")
        .arg(&exe)
        .env(CHILD, dir.path())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("open files:"))
        .unwrap_or_default();
    eprintln!("{line}");
    assert!(line.contains("20000 partitions"), "{stdout}");
}
