//! A corrupt log is never read as if it were whole: `riffle consume` exits non-zero naming the
//! file, the byte position and the offsets; `riffle log repair --dry-run` prints the cut and
//! changes nothing; `riffle log repair` makes the cut, and consume then prints exactly the
//! records before the damage. The damage reproduced: a deleted middle segment, a sealed
//! segment cut mid-batch, a deleted last segment, a flipped byte mid-active-segment followed by
//! intact records, a flipped byte in the fsynced last batch (below the recovery point), a
//! flipped byte in the middle of the transaction journal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

fn riffle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .expect("run riffle")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// 1,000 records `k<i>\tv<i>` in batches of 10 over small segments; the segment files.
fn build(dir: &Path) -> Vec<PathBuf> {
    let options = LogOptions::default().with_segment_bytes(4096);
    let log = Log::open(dir, options).expect("open");
    log.create_topic("events", 1).expect("create");
    let tp = TopicPartition::new("events", 0);
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..1000 {
        b.push(
            1,
            Some(format!("k{i}").as_bytes()),
            Some(format!("v{i}").as_bytes()),
        );
        if b.len() == 10 {
            log.append(&tp, &mut b).expect("append");
        }
    }
    log.sync().expect("sync");
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir.join("topics/events/0"))
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 4, "{segments:?}");
    segments
}

fn base(segment: &Path) -> u64 {
    segment
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("a segment name")
}

fn consume(dir: &Path) -> Output {
    let dir = dir.to_str().expect("utf-8 path");
    riffle(&[
        "consume",
        "--log-dir",
        dir,
        "--topic",
        "events",
        "--from-beginning",
    ])
}

/// consume fails naming `file` and each of `words`; a dry run prints cuts and changes nothing;
/// the repair cuts; consume then prints exactly records `0..kept`.
fn fails_until_repaired(dir: &Path, file: &Path, words: &[&str], kept: u64) {
    let out = consume(dir);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "consume exited 0 on a corrupt log:\n{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "consume printed records of a corrupt log"
    );
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    for word in words {
        assert!(stderr.contains(word), "{stderr:?} lacks {word:?}");
    }
    let d = dir.to_str().expect("utf-8 path");
    let before = std::fs::read_dir(file.parent().expect("dir"))
        .expect("dir")
        .count();
    let dry = riffle(&["log", "repair", "--log-dir", d, "--dry-run"]);
    let (dry_out, dry_err) = text(&dry);
    assert!(dry.status.success(), "{dry_err}");
    assert!(dry_out.contains("would "), "{dry_out}");
    assert!(dry_out.contains("nothing was changed"), "{dry_out}");
    assert!(
        !consume(dir).status.success(),
        "the dry run repaired the log"
    );
    assert_eq!(
        std::fs::read_dir(file.parent().expect("dir"))
            .expect("dir")
            .count(),
        before
    );
    let repair = riffle(&["log", "repair", "--log-dir", d]);
    let (repair_out, repair_err) = text(&repair);
    assert!(repair.status.success(), "{repair_err}");
    assert!(repair_out.contains("cuts removed"), "{repair_out}");
    let out = consume(dir);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let expected: Vec<String> = (0..kept).map(|i| format!("k{i}\tv{i}")).collect();
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn a_deleted_middle_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path());
    std::fs::remove_file(&segs[1]).expect("delete");
    let (b1, b2) = (base(&segs[1]), base(&segs[2]));
    fails_until_repaired(
        dir.path(),
        &segs[0],
        &[&format!("offsets {b1}..{b2} are in no segment")],
        b1,
    );
}

#[test]
fn a_sealed_segment_cut_mid_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path());
    let len = std::fs::metadata(&segs[1]).expect("meta").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segs[1])
        .expect("open");
    file.set_len(len / 2 + 7).expect("cut");
    drop(file);
    let out = consume(dir.path());
    let (_, stderr) = text(&out);
    assert!(stderr.contains("sealed segment"), "{stderr}");
    // What stays: the whole batches before the cut.
    let d = dir.path().to_str().expect("utf-8");
    assert!(riffle(&["log", "repair", "--log-dir", d]).status.success());
    let (stdout, _) = text(&consume(dir.path()));
    let kept = stdout.lines().count() as u64;
    assert!(kept > base(&segs[1]) && kept < base(&segs[2]), "{kept}");
    assert_eq!(kept % 10, 0, "whole batches only");
}

#[test]
fn a_deleted_last_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path());
    let last = segs.last().expect("segments");
    std::fs::remove_file(last).expect("delete");
    let b = base(last);
    fails_until_repaired(
        dir.path(),
        &segs[segs.len() - 2],
        &[&format!("offsets from {b} on are missing")],
        b,
    );
}

#[test]
fn a_flipped_byte_mid_active_segment_followed_by_intact_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path());
    let last = segs.last().expect("segments");
    let mut bytes = std::fs::read(last).expect("read");
    assert!(
        bytes.len() > 400,
        "several batches in the active segment: {}",
        bytes.len()
    );
    bytes[100] ^= 0x01; // inside the first batch
    std::fs::write(last, &bytes).expect("write");
    let b = base(last);
    fails_until_repaired(
        dir.path(),
        last,
        &[
            "at byte 0",
            &format!("offset {b} expected there"),
            "intact data follows",
            "1000",
        ],
        b,
    );
}

#[test]
fn a_flipped_byte_in_the_middle_of_the_transaction_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("txn/journal");
    let (input, out) = (
        TopicPartition::new("in", 0),
        TopicPartition::new("events", 0),
    );
    let mut bounds = vec![0u64];
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("in", 1).expect("create");
        log.create_topic("events", 1).expect("create");
        for i in 0..3u64 {
            let mut b = BatchBuilder::new(Compression::None);
            b.push(
                1,
                Some(format!("k{i}").as_bytes()),
                Some(format!("v{i}").as_bytes()),
            );
            log.commit_transaction(
                "app",
                &mut [(out.clone(), &mut b)],
                &[(input.clone(), i + 1)],
            )
            .expect("transaction");
            bounds.push(std::fs::metadata(&journal).expect("meta").len());
        }
    }
    let mut bytes = std::fs::read(&journal).expect("read");
    bytes[bounds[1] as usize + 25] ^= 0x02;
    std::fs::write(&journal, &bytes).expect("write");
    let d = dir.path().to_str().expect("utf-8");
    // A writer's open replays the journal: it must fail, not drop the later transactions.
    let mut produce = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["produce", "--log-dir", d, "--topic", "events"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn produce");
    drop(produce.stdin.take());
    let produced = produce.wait_with_output().expect("produce");
    let (_, stderr) = text(&produced);
    assert!(
        !produced.status.success(),
        "the open dropped intact transactions:\n{stderr}"
    );
    assert!(stderr.contains(&journal.display().to_string()), "{stderr}");
    assert!(
        stderr.contains(&format!("at byte {}", bounds[1])),
        "{stderr}"
    );
    assert!(!stderr.contains("never committed"), "{stderr}");
    assert_eq!(
        std::fs::read(&journal).expect("read"),
        bytes,
        "the failed open changed the journal"
    );
    let repair = riffle(&["log", "repair", "--log-dir", d]);
    let (repair_out, repair_err) = text(&repair);
    assert!(repair.status.success(), "{repair_err}");
    assert!(
        repair_out.contains(&format!(
            "drop bytes {}..{} of {}",
            bounds[1],
            bounds[2],
            journal.display()
        )),
        "{repair_out}"
    );
    let (stdout, stderr) = text(&consume(dir.path()));
    assert_eq!(stdout.lines().count(), 3, "{stderr}");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    assert_eq!(
        log.committed_offset("app", &input).expect("offset"),
        Some(3)
    );
}

#[test]
fn a_flipped_byte_in_the_fsynced_last_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path());
    let last = segs.last().expect("segments");
    let mut bytes = std::fs::read(last).expect("read");
    let at = bytes.len() - 10;
    bytes[at] ^= 0x01; // inside the last batch: nothing intact follows it
    std::fs::write(last, &bytes).expect("write");
    let d = dir.path().to_str().expect("utf-8 path");
    let dry = riffle(&["log", "repair", "--log-dir", d, "--dry-run"]);
    let (dry_out, _) = text(&dry);
    assert!(
        dry_out.contains("offsets 990..1000") && dry_out.contains("10 in the damaged batch"),
        "{dry_out}"
    );
    assert!(
        dry_out.contains("move the recovery point") && dry_out.contains("from 1000 back to 990"),
        "{dry_out}"
    );
    fails_until_repaired(
        dir.path(),
        last,
        &[
            "below offset 1000 was fsynced",
            "not a torn write",
            "offsets 990..1000",
        ],
        990,
    );
}
