//! A topic's metadata files on the in-memory backend (log/src/topic_meta.rs): the `partitions`
//! file's two forms, and every damage to `partitions` or `config` as an `Error::Corrupt` naming
//! the file — never a topic the next writer replaces — and the metadata repair.

use crate::error::Error;
use crate::fuzzing::MemDir;
use crate::options::LogOptions;
use crate::topic_config::TopicConfig;
use crate::topic_meta::TopicMeta;
use riffle_record::{BatchBuilder, Compression, TopicPartition};

fn parse(text: &str) -> Result<TopicMeta, (u64, String)> {
    TopicMeta::parse(text.as_bytes())
}

fn config(pairs: &[(&str, &str)]) -> TopicConfig {
    TopicConfig::from_pairs(pairs.iter().copied()).expect("config")
}

#[test]
fn the_count_alone_and_the_count_with_its_config_both_parse() {
    for old in ["3\n", "3", " 3 \n\n", "\n3\n"] {
        let meta = parse(old).expect(old);
        assert_eq!((meta.count, meta.config), (3, None), "{old:?}");
    }
    let defaults = parse("2\nconfig\n").expect("defaults");
    assert_eq!(
        (defaults.count, defaults.config),
        (2, Some(TopicConfig::default()))
    );
    let c = config(&[("cleanup.policy", "compact"), ("retention.ms", "1000")]);
    let meta = TopicMeta {
        count: 4,
        config: Some(c.clone()),
    };
    let text = meta.render();
    assert_eq!(text, "4\nconfig cleanup.policy=compact retention.ms=1000\n");
    assert_eq!(parse(&text), Ok(meta));
    assert_eq!(
        TopicMeta {
            count: 1,
            config: None
        }
        .render(),
        "1\n"
    );
}

#[test]
fn a_bad_partitions_file_is_refused_with_its_line_and_byte() {
    for (text, at, words) in [
        ("", 0, "empty"),
        ("0\n", 0, "positive partition count"),
        ("two\n", 0, "\"two\""),
        ("3\nhello\n", 2, "line 2"),
        ("3\nconfig retention.ms\n", 2, "not key=value"),
        (
            "3\nconfig min.insync.replicas=2\n",
            2,
            "min.insync.replicas",
        ),
        ("3\nconfig retention.ms=-5\n", 2, "retention.ms"),
        ("3\nconfig\nconfig\n", 9, "a second `config` line"),
    ] {
        let (position, reason) = parse(text).expect_err(text);
        assert_eq!(position, at, "{text:?}: {reason}");
        assert!(reason.contains(words), "{text:?}: {reason}");
    }
    let (position, reason) = TopicMeta::parse(b"3\n\xff").expect_err("utf-8");
    assert_eq!((position, reason.as_str()), (2, "not UTF-8"));
}

/// A log in memory with topic `t` of `count` partitions (config `c`), `n` records in each.
fn build(count: u32, c: &TopicConfig, n: usize) -> MemDir {
    let dir = MemDir::new();
    let log = dir.open(LogOptions::default()).expect("open");
    log.create_topic_with("t", count, c).expect("create");
    for p in 0..count {
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..n {
            b.push(i as i64, Some(b"k"), Some(format!("v{i}").as_bytes()));
        }
        log.append(&TopicPartition::new("t", p), &mut b)
            .expect("append");
    }
    dir
}

/// Opening `dir` fails with `Error::Corrupt` naming `topics/t/<file>` and each of `words`.
fn corrupt(dir: &MemDir, file: &str, words: &[&str]) {
    let before = dir.snapshot();
    for read_only in [true, false] {
        let err = dir
            .open(LogOptions::default().with_read_only(read_only))
            .expect_err("damaged metadata must not open");
        let Error::Corrupt { path, .. } = &err else {
            panic!("expected Error::Corrupt, got {err}");
        };
        assert_eq!(path, &dir.root().join("topics/t").join(file), "{err}");
        let text = err.to_string();
        for word in words {
            assert!(text.contains(word), "{text:?} lacks {word:?}");
        }
    }
    assert_eq!(dir.snapshot(), before, "a failed open changed files");
}

fn records(dir: &MemDir, p: u32) -> usize {
    let log = dir.open(LogOptions::default()).expect("open");
    let tp = TopicPartition::new("t", p);
    let mut n = 0;
    for batch in log.fetch(&tp, 0, 1 << 20).expect("fetch") {
        n += batch.records().count();
    }
    n
}

/// `repair_topic_metadata` restores what it says, and the topic then opens with every record.
fn repaired(dir: &MemDir, expect: &[(&str, &str)]) {
    let before = dir.snapshot();
    let (dry, left) = dir
        .repair_topic_metadata("t", true)
        .expect("dry run")
        .expect("a topic");
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(dir.snapshot(), before, "a dry run changed files");
    let (done, _) = dir
        .repair_topic_metadata("t", false)
        .expect("repair")
        .expect("a topic");
    assert_eq!(dry, done);
    let lines: Vec<String> = done.iter().map(|r| r.describe(false)).collect();
    assert_eq!(lines.len(), expect.len(), "{lines:?}");
    for (line, (file, words)) in lines.iter().zip(expect) {
        let path = dir.root().join("topics/t").join(file);
        assert!(
            line.contains(&path.display().to_string()) && line.contains(words),
            "{line:?} lacks {file} or {words:?}"
        );
    }
    let (again, _) = dir
        .repair_topic_metadata("t", false)
        .expect("again")
        .expect("a topic");
    assert!(
        again.is_empty(),
        "a second repair restores nothing: {again:?}"
    );
}

#[test]
fn a_missing_partitions_file_is_corrupt_and_no_writer_replaces_the_topic() {
    let dir = build(2, &TopicConfig::default(), 5);
    // A handle that has not seen the topic yet (opened before it existed elsewhere).
    let other = MemDir::new();
    let blind = other.open(LogOptions::default()).expect("open");
    for (rel, bytes) in dir.snapshot() {
        other.write(&rel, &bytes);
    }
    other.remove("topics/t/partitions");
    let err = blind
        .create_topic("t", 1)
        .expect_err("must not replace the topic");
    assert!(matches!(&err, Error::Corrupt { path, .. } if path.ends_with("topics/t/partitions")));
    assert!(
        err.to_string().contains("partitions 0 to 1 (2 segments"),
        "{err}"
    );
    assert_eq!(blind.partitions("t"), None);
    dir.remove("topics/t/partitions");
    corrupt(
        &dir,
        "partitions",
        &[
            "partition count is missing",
            "partitions 0 to 1 (2 segments,",
            "writes it back from the directories (2 partitions)",
        ],
    );
    repaired(
        &dir,
        &[(
            "partitions",
            "2 partitions, from the directories (partitions 0 to 1",
        )],
    );
    assert_eq!(
        dir.read("topics/t/partitions").as_deref(),
        Some(&b"2\nconfig\n"[..])
    );
    assert_eq!((records(&dir, 0), records(&dir, 1)), (5, 5));
}

#[test]
fn a_count_that_disagrees_with_the_directories_is_corrupt_naming_both() {
    let dir = build(2, &TopicConfig::default(), 3);
    dir.write("topics/t/partitions", b"1\nconfig\n");
    corrupt(
        &dir,
        "partitions",
        &[
            "says 1 partition,",
            "partitions 0 to 1",
            "topics/t/1 is past the count",
        ],
    );
    repaired(
        &dir,
        &[(
            "partitions",
            "2 partitions, from the directories (partitions 0 to 1 (2 segments",
        )],
    );
    assert_eq!((records(&dir, 0), records(&dir, 1)), (3, 3));
    // More than the directories: the last partition deleted, or the count raised.
    dir.write("topics/t/partitions", b"3\nconfig\n");
    let why = [
        "says 3 partitions",
        "topics/t/2 is missing, deleted with the records it held or the count changed",
        "write 2 back (`riffle log repair` never lowers a count); if it was deleted, create it",
    ];
    corrupt(&dir, "partitions", &why);
    let (restored, left) = dir
        .repair_topic_metadata("t", false)
        .expect("repair")
        .expect("topic");
    assert!(restored.is_empty(), "{restored:?}");
    assert_eq!(left.len(), 1, "{left:?}");
    for words in why {
        assert!(left[0].reason.contains(words), "{}", left[0]);
    }
    // Deleted, as the message says: an empty directory, which repair gives a segment.
    dir.create_dir("topics/t/2");
    corrupt(&dir, "2", &["no segment"]);
    dir.write("topics/t/2/00000000000000000000.log", b"");
    assert_eq!(
        dir.open(LogOptions::default())
            .expect("open")
            .partitions("t"),
        Some(3)
    );
    // A gap below the last directory is a deleted partition: the count is kept.
    dir.write("topics/t/partitions", b"5\nconfig\n");
    dir.write("topics/t/4/00000000000000000000.log", b"");
    corrupt(
        &dir,
        "partitions",
        &[
            "topics/t/3 is missing (deleted",
            "recreates it empty, keeping the count 5",
        ],
    );
    let (restored, left) = dir
        .repair_topic_metadata("t", false)
        .expect("repair")
        .expect("topic");
    assert!(
        restored.is_empty() && left.is_empty(),
        "{restored:?} {left:?}"
    );
    dir.write("topics/t/3/00000000000000000000.log", b"");
    assert_eq!(
        dir.open(LogOptions::default())
            .expect("open")
            .partitions("t"),
        Some(5)
    );
}

#[test]
fn a_deleted_or_changed_config_is_corrupt_and_written_back_from_the_record() {
    let c = config(&[("retention.ms", "60000"), ("cleanup.policy", "compact")]);
    let dir = build(1, &c, 2);
    assert_eq!(
        dir.read("topics/t/partitions").as_deref(),
        Some(&b"1\nconfig cleanup.policy=compact retention.ms=60000\n"[..])
    );
    dir.remove("topics/t/config");
    corrupt(
        &dir,
        "config",
        &[
            "the file is missing",
            "cleanup.policy=compact retention.ms=60000",
        ],
    );
    repaired(
        &dir,
        &[("config", "cleanup.policy=compact retention.ms=60000, as")],
    );
    dir.write("topics/t/config", b"retention.ms=1\n");
    corrupt(&dir, "config", &["it says retention.ms=1,"]);
    repaired(&dir, &[("config", "it said retention.ms=1")]);
    dir.write("topics/t/config", b"retention.ms=soon\n");
    corrupt(
        &dir,
        "config",
        &["line 1 (retention.ms)", "writes it back from the record"],
    );
    repaired(&dir, &[("config", "it did not parse")]);
    let log = dir.open(LogOptions::default()).expect("open");
    assert_eq!(log.topic_config("t").expect("config"), Some(c));
    // A topic created with the defaults has no `config` file; one that appears is a change.
    let plain = build(1, &TopicConfig::default(), 1);
    plain.write("topics/t/config", b"retention.ms=5\n");
    corrupt(&plain, "config", &["the defaults (no override)"]);
}

#[test]
fn a_count_alone_keeps_its_meaning_and_a_bad_config_without_record_cannot_be_restored() {
    let c = config(&[("retention.ms", "60000")]);
    let dir = build(2, &c, 1);
    dir.write("topics/t/partitions", b"2\n");
    let log = dir
        .open(LogOptions::default())
        .expect("the count alone is valid");
    assert_eq!(log.topic_config("t").expect("config"), Some(c));
    drop(log);
    dir.remove("topics/t/config");
    let log = dir
        .open(LogOptions::default())
        .expect("nothing records a config");
    assert_eq!(
        log.topic_config("t").expect("config"),
        Some(TopicConfig::default())
    );
    drop(log);
    dir.write("topics/t/config", b"nonsense");
    corrupt(
        &dir,
        "config",
        &[
            "not key=value",
            "nothing records what it held",
            "retention.ms=-1",
        ],
    );
    let (restored, left) = dir
        .repair_topic_metadata("t", false)
        .expect("repair")
        .expect("topic");
    assert!(restored.is_empty(), "{restored:?}");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].file, dir.root().join("topics/t/config"));
    assert!(
        left[0].to_string().contains("cleanup.policy=delete"),
        "{}",
        left[0]
    );
}

#[test]
fn a_directory_without_partitions_or_metadata_is_no_topic_and_is_replaced() {
    for leftover in [None, Some("config")] {
        let dir = MemDir::new();
        dir.create_dir("topics/t");
        if let Some(file) = leftover {
            dir.write(&format!("topics/t/{file}"), b"retention.ms=1\n");
        }
        let log = dir.open(LogOptions::default()).expect("open");
        assert!(log.topics().is_empty());
        assert_eq!(dir.repair_topic_metadata("t", true).expect("repair"), None);
        log.create_topic("t", 2).expect("create over it");
        assert_eq!(log.partitions("t"), Some(2));
        assert_eq!(
            log.topic_config("t").expect("config"),
            Some(TopicConfig::default())
        );
    }
}

#[test]
fn partitions_that_cannot_be_told_are_left_and_reported() {
    let dir = build(3, &TopicConfig::default(), 1);
    dir.remove("topics/t/partitions");
    // Partition 1 lost its segments too: the directories do not show the count for sure.
    for name in dir.list("topics/t/1") {
        dir.remove(&format!("topics/t/1/{name}"));
    }
    let (restored, left) = dir
        .repair_topic_metadata("t", false)
        .expect("repair")
        .expect("topic");
    assert!(restored.is_empty(), "{restored:?}");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].file, dir.root().join("topics/t/partitions"));
    assert!(
        left[0].reason.contains("it was missing")
            && left[0].reason.contains("topics/t/1 holds no segment"),
        "{}",
        left[0]
    );
}

#[test]
fn a_lowered_count_and_a_deleted_config_are_both_restored_count_first() {
    let c = config(&[("retention.ms", "60000")]);
    let dir = build(2, &c, 1);
    dir.write("topics/t/partitions", b"1\nconfig retention.ms=60000\n");
    dir.remove("topics/t/config");
    repaired(
        &dir,
        &[
            ("partitions", "2 partitions, from the directories"),
            ("config", "retention.ms=60000, as"),
        ],
    );
    assert_eq!(
        dir.read("topics/t/partitions").as_deref(),
        Some(&b"2\nconfig retention.ms=60000\n"[..])
    );
    let log = dir.open(LogOptions::default()).expect("open");
    assert_eq!(log.topic_config("t").expect("config"), Some(c));
}
