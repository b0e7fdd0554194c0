//! A log closed and reopened keeps its topics, data, end offsets and committed offsets.

mod common;

use common::{append, read_all, simple};
use riffle_log::{Compression, Error, Log, LogOptions, TopicPartition};

#[test]
fn data_end_offsets_and_committed_offsets_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a0 = TopicPartition::new("orders", 0);
    let a1 = TopicPartition::new("orders", 1);
    let b0 = TopicPartition::new("payments", 0);
    let mut expected = Vec::new();
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("orders", 2).expect("create");
        log.create_topic("payments", 1).expect("create");
        for (i, codec) in [
            Compression::None,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Gzip,
            Compression::Snappy,
        ]
        .into_iter()
        .enumerate()
        {
            let recs = simple(5, 1000 * i as i64);
            let base = append(&log, &a0, codec, &recs);
            assert_eq!(base, 5 * i as u64);
            expected.extend(
                recs.into_iter()
                    .enumerate()
                    .map(|(j, r)| (base + j as u64, r)),
            );
        }
        append(&log, &b0, Compression::None, &simple(1, 0));
        log.commit_offsets("app", &[(a0.clone(), 7), (b0.clone(), 1)])
            .expect("commit");
        log.commit_offsets("app", &[(a0.clone(), 9)])
            .expect("commit");
    }
    let log = Log::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(
        log.topics(),
        vec![("orders".to_owned(), 2), ("payments".to_owned(), 1)]
    );
    assert_eq!(log.end_offset(&a0).expect("end"), 25);
    assert_eq!(log.end_offset(&a1).expect("end"), 0);
    assert_eq!(log.end_offset(&b0).expect("end"), 1);
    assert_eq!(read_all(&log, &a0, 0, 1), expected);
    assert_eq!(read_all(&log, &a0, 0, 1 << 20), expected);
    assert_eq!(
        log.committed_offset("app", &a0).expect("committed"),
        Some(9)
    );
    assert_eq!(
        log.committed_offset("app", &b0).expect("committed"),
        Some(1)
    );
    assert_eq!(log.committed_offset("app", &a1).expect("committed"), None);
    assert_eq!(log.committed_offset("other", &a0).expect("committed"), None);
    // Appends continue where the log ended.
    assert_eq!(append(&log, &a0, Compression::None, &simple(1, 0)), 25);
}

#[test]
fn create_topic_is_idempotent_and_rejects_other_counts_and_bad_names() {
    let log = Log::in_memory();
    log.create_topic("t", 3).expect("create");
    log.create_topic("t", 3).expect("same count is ok");
    assert!(matches!(
        log.create_topic("t", 4),
        Err(Error::PartitionCountMismatch {
            existing: 3,
            requested: 4,
            ..
        })
    ));
    for bad in ["", ".", "..", "a/b", "a\\b", "a b", "x\0"] {
        assert!(
            matches!(log.create_topic(bad, 1), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
    }
    let tp = TopicPartition::new("t", 0);
    for bad in ["", ".", "..", "g/h"] {
        assert!(matches!(
            log.commit_offsets(bad, &[(tp.clone(), 1)]),
            Err(Error::InvalidName { .. })
        ));
    }
    assert_eq!(log.partitions("t"), Some(3));
    assert_eq!(log.partitions("u"), None);
    assert!(matches!(
        log.end_offset(&TopicPartition::new("u", 0)),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(
        log.end_offset(&TopicPartition::new("t", 3)),
        Err(Error::UnknownPartition { partition: 3, .. })
    ));
}

#[test]
fn fetch_at_end_is_empty_and_past_end_is_out_of_range() {
    let log = Log::in_memory();
    log.create_topic("t", 1).expect("create");
    let tp = TopicPartition::new("t", 0);
    assert!(log.fetch(&tp, 0, 100).expect("fetch").is_empty());
    append(&log, &tp, Compression::None, &simple(3, 0));
    assert!(log.fetch(&tp, 3, 100).expect("fetch").is_empty());
    let err = log.fetch(&tp, 4, 100).expect_err("out of range");
    assert!(matches!(
        err,
        Error::OffsetOutOfRange {
            offset: 4,
            end: 3,
            ..
        }
    ));
    assert!(err.to_string().contains("t-0"), "{err}");
}

#[test]
fn a_damaged_group_offsets_file_is_an_error_naming_it_and_a_leftover_temp_file_is_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = TopicPartition::new("t", 0);
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("t", 1).expect("create");
        log.commit_offsets("good", &[(tp.clone(), 4)])
            .expect("commit");
        log.commit_offsets("bad", &[(tp.clone(), 4)])
            .expect("commit");
    }
    let groups = dir.path().join("groups");
    std::fs::write(groups.join("good.offsets.tmp"), b"half-written").expect("write tmp");
    let bad = groups.join("bad.offsets");
    let mut bytes = std::fs::read(&bad).expect("read");
    bytes[12] ^= 1;
    std::fs::write(&bad, bytes).expect("write");

    let log = Log::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(log.committed_offset("good", &tp).expect("good"), Some(4));
    let err = log.committed_offset("bad", &tp).expect_err("corrupt");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("bad.offsets"), "{err}");
}

/// The longest names the log takes work on disk, whatever this process's id: a 249-byte topic
/// is created, written, read back after a reopen and deleted (its staging and deletion
/// directories add a pid and a counter to its name); a 243-byte group commits and reads back
/// its offsets (its file adds `.offsets.tmp`); one byte more is refused up front.
#[test]
fn the_longest_names_work_on_disk_and_one_byte_more_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topic = "t".repeat(249);
    let group = "g".repeat(243);
    let tp = TopicPartition::new(topic.as_str(), 0);
    let recs = simple(10, 0);
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic(&topic, 1).expect("a 249-byte topic");
        append(&log, &tp, Compression::None, &recs);
        log.commit_offsets(&group, &[(tp.clone(), 7)])
            .expect("a 243-byte group");
        log.sync().expect("sync");
        assert!(matches!(
            log.create_topic(&"t".repeat(250), 1),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            log.commit_offsets(&"g".repeat(244), &[(tp.clone(), 1)]),
            Err(Error::InvalidName { .. })
        ));
    }
    let log = Log::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(read_all(&log, &tp, 0, 1 << 20).len(), recs.len());
    assert_eq!(log.committed_offset(&group, &tp).expect("offset"), Some(7));
    log.delete_topic(&topic).expect("delete the 249-byte topic");
    assert_eq!(log.partitions(&topic), None);
}
