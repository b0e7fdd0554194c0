//! A log written before format 2 (fixtures/format1-log/, a real one) is refused on open, and by
//! `repair`, with an error naming the directory and the format, and not a byte of it changes; a new log gets the
//! `format` file, and a `format` file naming another version is refused too. A format 2 log whose
//! `format` file was deleted is not mistaken for format 1: the error names the missing file and
//! says how to put it back, and nothing changes until it is; `repair` writes it back and says
//! so (a dry run only says so).

mod common;

use std::path::{Path, PathBuf};

use common::{copy_dir, snapshot};
use riffle_log::{Error, Log, LogOptions, RepairOptions, repair};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1-log")
}

#[test]
fn a_format_1_log_is_refused_untouched_by_writable_and_read_only_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    copy_dir(&fixture(), &log_dir);
    let before = snapshot(&log_dir);
    for read_only in [false, true] {
        let options = LogOptions::default().with_read_only(read_only);
        let err = Log::open(&log_dir, options).expect_err("format 1 is refused");
        let Error::UnsupportedFormat { path, found, .. } = &err else {
            panic!("expected UnsupportedFormat, got {err}");
        };
        assert_eq!(path, &log_dir);
        assert!(found.contains("format 1"), "{found}");
        let text = err.to_string();
        assert!(
            text.contains(&log_dir.display().to_string())
                && text.contains("00000000000000000000.log")
                && text.contains("does not convert"),
            "{text}"
        );
        assert_eq!(snapshot(&log_dir), before, "read_only = {read_only}");
    }
    // `riffle log repair` would see damage from the first byte: it refuses too, cutting
    // nothing, dry run or not.
    for dry_run in [true, false] {
        let options = RepairOptions::new().with_dry_run(dry_run);
        let err = repair(&log_dir, &options).expect_err("repair refuses format 1");
        assert!(matches!(err, Error::UnsupportedFormat { .. }), "{err}");
        assert_eq!(snapshot(&log_dir), before, "repair, dry_run = {dry_run}");
    }
}

#[test]
fn a_new_log_is_stamped_format_2_and_another_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.create_topic("t", 1).expect("create");
    drop(log);
    let format = dir.path().join("format");
    assert_eq!(
        std::fs::read_to_string(&format).expect("format file"),
        "riffle-log format 2\n"
    );
    Log::open(dir.path(), LogOptions::default()).expect("reopens");
    std::fs::write(&format, "riffle-log format 3\n").expect("write");
    let err = Log::open(dir.path(), LogOptions::default()).expect_err("format 3");
    assert!(matches!(err, Error::UnsupportedFormat { .. }), "{err}");
    std::fs::write(&format, "garbage").expect("write");
    let err = Log::open(dir.path(), LogOptions::default()).expect_err("garbage");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[test]
fn a_deleted_format_file_is_named_as_missing_not_taken_for_format_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("t", 1).expect("create");
        let tp = riffle_log::TopicPartition::new("t", 0);
        common::append(
            &log,
            &tp,
            riffle_log::Compression::None,
            &common::simple(5, 0),
        );
    }
    let format = dir.path().join("format");
    std::fs::remove_file(&format).expect("delete format");
    let before = snapshot(dir.path());
    for read_only in [false, true] {
        let options = LogOptions::default().with_read_only(read_only);
        let err = Log::open(dir.path(), options).expect_err("the missing file is reported");
        let Error::Corrupt { path, reason, .. } = &err else {
            panic!("expected Corrupt, got {err}");
        };
        assert_eq!(path, &format);
        assert!(
            reason.contains("is missing") && reason.contains("riffle-log format 2"),
            "{reason}"
        );
        assert_eq!(snapshot(dir.path()), before, "read_only = {read_only}");
    }
    std::fs::write(&format, "riffle-log format 2\n").expect("write it back");
    let log = Log::open(dir.path(), LogOptions::default()).expect("opens again");
    let tp = riffle_log::TopicPartition::new("t", 0);
    assert_eq!(common::read_all(&log, &tp, 0, 1 << 20).len(), 5);
}

#[test]
fn repair_writes_back_a_deleted_format_file_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = riffle_log::TopicPartition::new("t", 0);
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("t", 1).expect("create");
        common::append(
            &log,
            &tp,
            riffle_log::Compression::None,
            &common::simple(5, 0),
        );
    }
    let format = dir.path().join("format");
    std::fs::remove_file(&format).expect("delete format");
    let before = snapshot(dir.path());
    let dry = repair(dir.path(), &RepairOptions::new().with_dry_run(true)).expect("dry run");
    let files = |r: &riffle_log::RepairReport| -> Vec<PathBuf> {
        r.restored.iter().map(|r| r.file.clone()).collect()
    };
    assert_eq!(files(&dry), vec![format.clone()]);
    assert_eq!(
        dry.restored[0].describe(true),
        format!(
            "would write back {}: `riffle-log format 2`, the format its segments hold",
            format.display()
        )
    );
    assert!(dry.cuts.is_empty(), "{:?}", dry.cuts);
    assert_eq!(snapshot(dir.path()), before, "a dry run changes nothing");
    let done = repair(dir.path(), &RepairOptions::new()).expect("repair");
    assert_eq!(files(&done), vec![format.clone()]);
    assert!(done.cuts.is_empty(), "{:?}", done.cuts);
    assert_eq!(
        std::fs::read_to_string(&format).expect("written back"),
        "riffle-log format 2\n"
    );
    let log = Log::open(dir.path(), LogOptions::default()).expect("opens");
    assert_eq!(common::read_all(&log, &tp, 0, 1 << 20).len(), 5);
    drop(log);
    // Nothing left to restore.
    let again = repair(dir.path(), &RepairOptions::new()).expect("repair again");
    assert!(again.restored.is_empty() && again.cuts.is_empty());
    // A format 1 log is still refused, not stamped.
    let old = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture(), &old.path().join("log"));
    let err = repair(&old.path().join("log"), &RepairOptions::new()).expect_err("format 1");
    assert!(matches!(err, Error::UnsupportedFormat { .. }), "{err}");
    assert!(!old.path().join("log").join("format").exists());
}
