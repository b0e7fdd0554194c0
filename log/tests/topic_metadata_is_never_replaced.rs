//! A topic's metadata files (`topics/<t>/partitions`, `topics/<t>/config`; log/FORMAT.md,
//! *Directory layout*) on disk: a missing, edited or garbled one is an `Error::Corrupt` naming
//! the file and what the directory holds, for every open and every writer — never a topic
//! whose creation "did not finish" that the next writer replaces — and not a byte changes;
//! `repair` writes back what the directories (or the record in `partitions`) show, reports it,
//! and the log then reads every record; what cannot be told is reported and left. A directory
//! with neither metadata nor partitions is still no topic, and a creation replaces it.

mod common;

use std::path::{Path, PathBuf};

use common::{append, read_all, simple, snapshot};
use riffle_log::{
    Compression, Error, Log, LogOptions, RepairOptions, RestoreAction, TopicConfig, TopicPartition,
    repair,
};

const TOPIC: &str = "input";

fn tdir(dir: &Path) -> PathBuf {
    dir.join("topics").join(TOPIC)
}

/// Topic `input` of `partitions` partitions (config `config`) with `per` records in each,
/// over small segments; synced.
fn build(dir: &Path, partitions: u32, config: &TopicConfig, per: usize) {
    let options = LogOptions::default().with_segment_bytes(1024);
    let log = Log::open(dir, options).expect("open");
    log.create_topic_with(TOPIC, partitions, config)
        .expect("create");
    for p in 0..partitions {
        let tp = TopicPartition::new(TOPIC, p);
        for i in 0..per / 10 {
            append(&log, &tp, Compression::None, &simple(10, i as i64));
        }
    }
    log.sync().expect("sync");
}

/// What the metadata errors and reports say the topic directory holds: "partitions 0 to 2 (K
/// segments, B bytes)", counted here from the files.
fn holds(dir: &Path, names: &str) -> String {
    let segments: Vec<(PathBuf, Vec<u8>)> = snapshot(&tdir(dir))
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|x| x == "log"))
        .collect();
    let bytes: usize = segments.iter().map(|(_, b)| b.len()).sum();
    format!("{names} ({} segments, {bytes} bytes)", segments.len())
}

/// Every record of every partition, read back from a fresh read-only open.
fn count_all(dir: &Path) -> usize {
    let log = Log::open_read_only(dir, LogOptions::default()).expect("open read-only");
    let partitions = log.partitions(TOPIC).expect("the topic");
    (0..partitions)
        .map(|p| read_all(&log, &TopicPartition::new(TOPIC, p), 0, 1 << 20).len())
        .sum()
}

/// Every open (writable and read-only) fails with `Error::Corrupt` about `file`, saying each
/// of `words`; no file changes.
fn open_is_corrupt(dir: &Path, file: &Path, words: &[&str]) -> String {
    let before = snapshot(dir);
    let mut message = String::new();
    for read_only in [false, true] {
        let options = LogOptions::default().with_read_only(read_only);
        let err = Log::open(dir, options).expect_err("damaged metadata must not open");
        let Error::Corrupt { path, .. } = &err else {
            panic!("expected Error::Corrupt, got {err}");
        };
        assert_eq!(path, file, "{err}");
        message = err.to_string();
        for word in words {
            assert!(message.contains(word), "{message:?} lacks {word:?}");
        }
    }
    assert_eq!(snapshot(dir), before, "a failed open changed files");
    message
}

/// A dry run reports exactly `lines` (restored files, as printed) and changes nothing; the
/// repair does and reports the same; a second repair finds nothing.
fn repairs(dir: &Path, lines: &[String]) -> riffle_log::RepairReport {
    let before = snapshot(dir);
    let dry = repair(dir, &RepairOptions::new().with_dry_run(true)).expect("dry run");
    let said: Vec<String> = dry.restored.iter().map(|r| r.describe(true)).collect();
    let would: Vec<String> = lines
        .iter()
        .map(
            |l| match (l.strip_prefix("wrote back "), l.strip_prefix("rewrote ")) {
                (Some(rest), _) => format!("would write back {rest}"),
                (_, Some(rest)) => format!("would rewrite {rest}"),
                _ => panic!("not a restored file: {l}"),
            },
        )
        .collect();
    assert_eq!(said, would);
    assert!(dry.unrestorable.is_empty(), "{:?}", dry.unrestorable);
    assert_eq!(snapshot(dir), before, "a dry run changed files");
    let done = repair(dir, &RepairOptions::new()).expect("repair");
    let said: Vec<String> = done.restored.iter().map(|r| r.describe(false)).collect();
    assert_eq!(said, lines);
    let again = repair(dir, &RepairOptions::new()).expect("repair again");
    assert!(
        again.restored.is_empty() && again.cuts.is_empty(),
        "{again:?}"
    );
    done
}

#[test]
fn a_deleted_partitions_file_stops_every_writer_and_repair_writes_it_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // A handle opened before the topic existed, so it has not loaded it: as a producer that
    // meets the topic for the first time.
    let blind = Log::open(dir, LogOptions::default()).expect("open");
    build(dir, 3, &TopicConfig::default(), 200);
    let meta = tdir(dir).join("partitions");
    std::fs::remove_file(&meta).expect("rm partitions");
    let before = snapshot(dir);
    let err = blind
        .create_topic(TOPIC, 1)
        .expect_err("a writer must not replace the topic");
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if path == &meta),
        "{err}"
    );
    assert_eq!(blind.partitions(TOPIC), None);
    drop(blind);
    assert_eq!(snapshot(dir), before, "the writer changed files");
    let holds = holds(dir, "partitions 0 to 2");
    open_is_corrupt(
        dir,
        &meta,
        &[
            &format!(
                "the topic's partition count is missing, but the directory holds {holds}: the \
                 topic exists"
            ),
            "neither guessed nor replaced",
            "`riffle log repair` writes it back from the directories (3 partitions)",
        ],
    );
    repairs(
        dir,
        &[format!(
            "wrote back {}: 3 partitions, from the directories ({holds}); recorded config: \
             the defaults (there is no `config` file)",
            meta.display()
        )],
    );
    assert_eq!(std::fs::read_to_string(&meta).expect("read"), "3\nconfig\n");
    assert_eq!(count_all(dir), 600);
}

#[test]
fn a_count_edited_down_is_corrupt_naming_the_file_and_the_directories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    build(dir, 2, &TopicConfig::default(), 100);
    let meta = tdir(dir).join("partitions");
    // 2 → 1: a reader would silently skip partition 1.
    std::fs::write(&meta, "1\nconfig\n").expect("edit");
    let holds = holds(dir, "partitions 0 to 1");
    open_is_corrupt(
        dir,
        &meta,
        &[&format!(
            "it says 1 partition, but the directory holds {holds}: {} is past the count (was the \
             file changed?); `riffle log repair` rewrites the count to 2, as the directories show",
            tdir(dir).join("1").display()
        )],
    );
    let done = repairs(
        dir,
        &[format!(
            "rewrote {}: 2 partitions, from the directories ({holds}); it said 1",
            meta.display()
        )],
    );
    assert_eq!(done.restored[0].action, RestoreAction::Rewrite);
    assert_eq!(std::fs::read_to_string(&meta).expect("read"), "2\nconfig\n");
    assert_eq!(count_all(dir), 200);
}

#[test]
fn a_count_edited_up_is_corrupt_and_repair_does_not_guess() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    build(dir, 1, &TopicConfig::default(), 50);
    let meta = tdir(dir).join("partitions");
    std::fs::write(&meta, "3\nconfig\n").expect("edit");
    let (p1, p2) = (tdir(dir).join("1"), tdir(dir).join("2"));
    let why = format!(
        "it says 3 partitions, but the directory holds {}: {} and {} are missing, deleted with \
         the records they held or the count changed, which cannot be told: if the count was \
         changed, write 1 back (`riffle log repair` never lowers a count); if they were \
         deleted, create them as empty directories, and `riffle log repair` recreates their \
         segments empty",
        holds(dir, "partition 0"),
        p1.display(),
        p2.display()
    );
    open_is_corrupt(dir, &meta, &[&why]);
    // Repair neither lowers the count nor makes partitions up: it reports and changes nothing.
    let before = snapshot(dir);
    let report = repair(dir, &RepairOptions::new()).expect("repair");
    assert!(
        report.restored.is_empty() && report.cuts.is_empty(),
        "{report:?}"
    );
    assert_eq!(
        report
            .unrestorable
            .iter()
            .map(|u| u.to_string())
            .collect::<Vec<_>>(),
        [format!("cannot restore {}: {why}", meta.display())]
    );
    assert_eq!(snapshot(dir), before);
    // As the message says, if they were deleted: empty directories, which repair fills.
    std::fs::create_dir(&p1).expect("mkdir");
    std::fs::create_dir(&p2).expect("mkdir");
    let report = repair(dir, &RepairOptions::new()).expect("repair");
    assert!(report.unrestorable.is_empty(), "{report:?}");
    let missing: Vec<&Path> = report.cuts.iter().map(|c| c.file.as_path()).collect();
    assert_eq!(missing, [p1.as_path(), p2.as_path()]);
    assert_eq!(count_all(dir), 50);
}

#[test]
fn garbage_in_the_partitions_file_is_corrupt_and_rebuilt_from_the_directories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    build(dir, 2, &TopicConfig::default(), 30);
    let meta = tdir(dir).join("partitions");
    for garbage in [&b"\x00\x07zz"[..], b"2\nretention.ms=5\n", b"-2\n", b""] {
        std::fs::write(&meta, garbage).expect("garble");
        open_is_corrupt(
            dir,
            &meta,
            &[
                "; the directory holds partitions 0 to 1 (",
                "`riffle log repair` rewrites it from the directories (2 partitions)",
            ],
        );
    }
    let done = repair(dir, &RepairOptions::new()).expect("repair");
    assert_eq!(done.restored.len(), 1);
    assert_eq!(done.restored[0].action, RestoreAction::Rewrite);
    assert!(
        done.restored[0]
            .detail
            .ends_with("; it did not parse (byte 0: empty: expected a positive partition count)"),
        "{}",
        done.restored[0].detail
    );
    assert_eq!(count_all(dir), 60);
}

#[test]
fn a_deleted_config_is_corrupt_and_written_back_from_the_record() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config =
        TopicConfig::from_pairs([("cleanup.policy", "compact"), ("segment.bytes", "2048")])
            .expect("config");
    build(dir, 2, &config, 40);
    let meta = tdir(dir).join("partitions");
    assert_eq!(
        std::fs::read_to_string(&meta).expect("read"),
        "2\nconfig cleanup.policy=compact segment.bytes=2048\n"
    );
    let file = tdir(dir).join("config");
    std::fs::remove_file(&file).expect("rm config");
    open_is_corrupt(
        dir,
        &file,
        &[
            "the file is missing (the defaults would apply)",
            "records that the topic was created with cleanup.policy=compact segment.bytes=2048",
        ],
    );
    repairs(
        dir,
        &[format!(
            "wrote back {}: cleanup.policy=compact segment.bytes=2048, as {} records the topic \
             was created with; it was missing",
            file.display(),
            meta.display()
        )],
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "cleanup.policy=compact\nsegment.bytes=2048\n"
    );
    let log = Log::open_read_only(dir, LogOptions::default()).expect("open");
    assert_eq!(log.topic_config(TOPIC).expect("config"), Some(config));
    drop(log);
    assert_eq!(count_all(dir), 80);
}

#[test]
fn a_partitions_file_of_the_count_alone_stays_valid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = TopicConfig::from_pairs([("retention.ms", "86400000")]).expect("config");
    build(dir, 2, &config, 20);
    std::fs::write(tdir(dir).join("partitions"), "2\n").expect("count alone");
    let log = Log::open(dir, LogOptions::default()).expect("opens");
    assert_eq!(log.topic_config(TOPIC).expect("config"), Some(config));
    drop(log);
    let again = repair(dir, &RepairOptions::new()).expect("repair");
    assert!(again.restored.is_empty() && again.unrestorable.is_empty() && again.cuts.is_empty());
    assert_eq!(count_all(dir), 40);
}

#[test]
fn a_directory_without_metadata_or_partitions_is_no_topic_and_is_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    Log::open(dir, LogOptions::default()).expect("open");
    std::fs::create_dir_all(tdir(dir)).expect("mkdir");
    std::fs::write(tdir(dir).join("config"), "retention.ms=1\n").expect("a stray config");
    let log = Log::open(dir, LogOptions::default()).expect("opens");
    assert!(log.topics().is_empty());
    let report = repair(dir, &RepairOptions::new().with_dry_run(true)).expect("repair");
    assert!(report.restored.is_empty() && report.unrestorable.is_empty());
    let err = repair(dir, &RepairOptions::new().with_topic(TOPIC)).expect_err("no such topic");
    assert!(matches!(err, Error::UnknownTopic { .. }), "{err}");
    log.create_topic(TOPIC, 2).expect("created over it");
    assert_eq!(log.partitions(TOPIC), Some(2));
    assert_eq!(
        log.topic_config(TOPIC).expect("config"),
        Some(TopicConfig::default())
    );
    assert!(!tdir(dir).join("config").exists());
}

#[test]
fn partitions_that_cannot_be_told_are_reported_and_left() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    build(dir, 3, &TopicConfig::default(), 10);
    let meta = tdir(dir).join("partitions");
    std::fs::remove_file(&meta).expect("rm partitions");
    std::fs::remove_dir_all(tdir(dir).join("1")).expect("rm partition 1");
    open_is_corrupt(
        dir,
        &meta,
        &[
            "partitions 0 and 2 (",
            "cannot tell the count: write it into the file by hand",
        ],
    );
    let before = snapshot(dir);
    let report = repair(dir, &RepairOptions::new()).expect("repair");
    assert!(
        report.restored.is_empty() && report.cuts.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.unrestorable.len(), 1);
    assert_eq!(
        report.unrestorable[0].to_string(),
        format!(
            "cannot restore {}: it was missing, and the directory holds {}, not partitions 0 to \
             N-1, so the count cannot be told: write the partition count into it by hand",
            meta.display(),
            holds(dir, "partitions 0 and 2")
        )
    );
    assert_eq!(snapshot(dir), before, "nothing is cut or written");
}
