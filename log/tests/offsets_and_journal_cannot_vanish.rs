//! A group's committed offsets and the transaction journal cannot vanish silently: `txn/lock`
//! keeps, in a second place, which groups wrote an offsets file (the group registry) and how
//! much of the journal was committed. Deleting or emptying either file is an `Error::Corrupt`
//! naming it, and `riffle_log::repair` acknowledges the loss explicitly, reporting it.

use std::path::Path;

use riffle_log::{
    BatchBuilder, Compression, CutAction, Error, Log, LogOptions, RepairOptions, TopicPartition,
    repair,
};

fn input() -> TopicPartition {
    TopicPartition::new("in", 0)
}

/// Topics `in` and `out`; group `app` commits offset 5 of `in` (a plain commit), and
/// `exactly-once` commits three transactions (offsets 1..=3 of `in`), left in the journal.
fn build(dir: &Path) {
    let log = Log::open(dir, LogOptions::default()).expect("open");
    log.create_topic("in", 1).expect("create");
    log.create_topic("out", 1).expect("create");
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..5 {
        b.push(i, Some(b"k"), Some(b"v"));
    }
    log.append(&input(), &mut b).expect("append");
    log.commit_offsets("app", &[(input(), 5)]).expect("commit");
    let out = TopicPartition::new("out", 0);
    for i in 0..3u64 {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(1, Some(b"k"), Some(format!("value {i}").as_bytes()));
        log.commit_transaction(
            "exactly-once",
            &mut [(out.clone(), &mut b)],
            &[(input(), i + 1)],
        )
        .expect("transaction");
    }
}

fn corrupt(err: Error, file: &Path, words: &[&str]) {
    let Error::Corrupt { path, .. } = &err else {
        panic!("expected Error::Corrupt, got {err}");
    };
    assert_eq!(path, file, "{err}");
    let text = err.to_string();
    for word in words {
        assert!(text.contains(word), "{text:?} lacks {word:?}");
    }
}

#[test]
fn a_deleted_group_offsets_file_is_an_error_and_repair_acknowledges_the_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let file = dir.path().join("groups/app.offsets");
    std::fs::remove_file(&file).expect("rm");
    // The log opens (the group's file is read when asked for), and the read fails, naming it.
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    let err = log
        .committed_offset("app", &input())
        .expect_err("lost offsets");
    corrupt(
        err,
        &file,
        &["\"app\"", "offsets file is missing", "riffle log repair"],
    );
    // A commit does not paper over it either.
    let err = log
        .commit_offsets("app", &[(input(), 1)])
        .expect_err("lost offsets");
    corrupt(err, &file, &["offsets file is missing"]);
    drop(log);
    let dry = repair(dir.path(), &RepairOptions::new().with_dry_run(true)).expect("dry run");
    let [cut] = &dry.cuts[..] else {
        panic!("{:#?}", dry.cuts)
    };
    assert_eq!((&cut.file, &cut.action), (&file, &CutAction::Missing));
    assert!(cut.to_string().contains("offsets are lost"), "{cut}");
    assert!(!file.exists(), "a dry run changes nothing");
    repair(dir.path(), &RepairOptions::new()).expect("repair");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    assert_eq!(log.committed_offset("app", &input()).expect("read"), None);
    // The other group's offsets are untouched.
    assert_eq!(
        log.committed_offset("exactly-once", &input())
            .expect("read"),
        Some(3)
    );
}

#[test]
fn an_emptied_group_offsets_file_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let file = dir.path().join("groups/app.offsets");
    std::fs::write(&file, b"").expect("empty");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    let err = log
        .committed_offset("app", &input())
        .expect_err("damaged offsets");
    corrupt(err, &file, &["too short"]);
}

#[test]
fn a_deleted_journal_is_an_error_and_repair_reports_the_lost_transactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let journal = dir.path().join("txn/journal");
    let len = std::fs::metadata(&journal).expect("meta").len();
    assert!(len > 0, "the transactions are still in the journal");
    std::fs::remove_file(&journal).expect("rm");
    let err = Log::open(dir.path(), LogOptions::default()).expect_err("lost transactions");
    corrupt(
        err,
        &journal,
        &[
            "missing or empty",
            &format!("first {len} bytes were committed"),
        ],
    );
    let report = repair(dir.path(), &RepairOptions::new()).expect("repair");
    let [cut] = &report.cuts[..] else {
        panic!("{:#?}", report.cuts)
    };
    assert_eq!((&cut.file, &cut.action), (&journal, &CutAction::Missing));
    assert!(
        cut.to_string()
            .contains(&format!("bytes 0..{len} are gone")),
        "{cut}"
    );
    // Acknowledged: the log opens, and the group goes on from what its file holds (nothing:
    // its offsets were all in the journal).
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    assert_eq!(
        log.committed_offset("exactly-once", &input())
            .expect("read"),
        None
    );
    assert_eq!(
        log.committed_offset("app", &input()).expect("read"),
        Some(5)
    );
}

#[test]
fn a_journal_emptied_by_a_checkpoint_is_not_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    // Opening replays and checkpoints: the journal is emptied, its claim lowered first.
    drop(Log::open(dir.path(), LogOptions::default()).expect("open"));
    assert_eq!(
        std::fs::metadata(dir.path().join("txn/journal"))
            .expect("meta")
            .len(),
        0
    );
    let log = Log::open(dir.path(), LogOptions::default()).expect("open again");
    assert_eq!(
        log.committed_offset("exactly-once", &input())
            .expect("read"),
        Some(3)
    );
    // And a journal deleted after that loses nothing: no error.
    drop(log);
    std::fs::remove_file(dir.path().join("txn/journal")).expect("rm");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    assert_eq!(
        log.committed_offset("exactly-once", &input())
            .expect("read"),
        Some(3)
    );
}

/// A repair that cuts a partition below a group's committed offset moves the offset back to
/// the new end and reports it (the application would otherwise stop: its offset is past the
/// end).
#[test]
fn a_repair_that_cuts_below_a_committed_offset_moves_it_back_and_reports_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    drop(Log::open(dir.path(), LogOptions::default()).expect("checkpoint"));
    let segment = dir.path().join("topics/in/0/00000000000000000000.log");
    let bytes = std::fs::read(&segment).expect("read");
    std::fs::write(&segment, &bytes[..bytes.len() - 3]).expect("cut");
    let report = repair(dir.path(), &RepairOptions::new()).expect("repair");
    let moved: Vec<_> = report
        .cuts
        .iter()
        .filter_map(|c| match &c.action {
            CutAction::MoveCommittedOffset { group, from, to } => Some((group.clone(), *from, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        moved,
        vec![("app".to_owned(), 5, 0), ("exactly-once".to_owned(), 3, 0)],
        "{:#?}",
        report.cuts
    );
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    assert_eq!(
        log.committed_offset("app", &input()).expect("read"),
        Some(0)
    );
}

/// Under `FsyncPolicy::Never` no transaction records the journal's committed length; a
/// `Log::sync` does (it fsyncs the whole journal first), so damage to a synced journal is an
/// error, never a torn tail dropped with its committed offsets. Found by
/// tests/random_damage_is_identical_or_named.rs.
#[test]
fn a_journal_synced_under_fsync_never_is_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions::default().with_fsync(riffle_log::FsyncPolicy::Never);
    {
        let log = Log::open(dir.path(), options.clone()).expect("open");
        log.create_topic("in", 1).expect("create");
        log.create_topic("out", 1).expect("create");
        let out = TopicPartition::new("out", 0);
        for i in 0..3u64 {
            let mut b = BatchBuilder::new(Compression::None);
            b.push(1, Some(b"k"), Some(b"v"));
            log.commit_transaction("eo", &mut [(out.clone(), &mut b)], &[(input(), i + 1)])
                .expect("transaction");
        }
        log.sync().expect("sync");
    }
    let journal = dir.path().join("txn/journal");
    let len = std::fs::metadata(&journal).expect("meta").len();
    let mut bytes = std::fs::read(&journal).expect("read");
    bytes[len as usize - 3] ^= 0x10;
    std::fs::write(&journal, &bytes).expect("write");
    let err = Log::open(dir.path(), options).expect_err("a damaged committed record");
    corrupt(
        err,
        &journal,
        &[&format!("every record below byte {len} was committed")],
    );
}
