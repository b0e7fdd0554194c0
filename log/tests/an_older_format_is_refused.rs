//! A log written before format 2 (fixtures/format1-log/, a real one) is refused on open, and by
//! `repair`, with an error naming the directory and the format, and not a byte of it changes; a new log gets the
//! `format` file, and a `format` file naming another version is refused too.

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
