//! `Log::delete_topic` with two handles on one directory, as two processes open it (each handle
//! has its own file descriptors, so the OS file locks exclude them as they would processes):
//! the deleting handle waits out the other's lease, the other's next append fails with
//! `TopicDeleted` instead of writing into files that are no longer the topic's, and after that
//! it sees the directory as it is now — no topic, then a topic created again under the name,
//! empty. The groups' offsets of the topic go with it; other topics and offsets stay. A lock
//! file with garbage in it is corruption naming the file, not a deletion, and changes nothing.

mod common;

use common::read_all;
use riffle_log::{BatchBuilder, Compression, Error, Log, LogOptions, TopicPartition};

fn batch(values: &[&str]) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None);
    for (i, v) in values.iter().enumerate() {
        b.push(i as i64, Some(b"k"), Some(v.as_bytes()));
    }
    b
}

#[test]
fn a_deleted_topic_is_gone_for_every_handle_and_can_be_created_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Log::open(dir.path(), LogOptions::default()).expect("open a");
    let b = Log::open(dir.path(), LogOptions::default()).expect("open b");
    a.create_topic("t", 2).expect("create t");
    a.create_topic("u", 1).expect("create u");
    let (t0, t1, u0) = (
        TopicPartition::new("t", 0),
        TopicPartition::new("t", 1),
        TopicPartition::new("u", 0),
    );
    a.append(&t0, &mut batch(&["a1", "a2"])).expect("append");
    // b appends too, and may keep the partition's lock as a lease.
    b.append(&t0, &mut batch(&["b1"])).expect("append");
    b.append(&t1, &mut batch(&["b2"])).expect("append");
    a.append(&u0, &mut batch(&["u1"])).expect("append");
    a.commit_offsets("g", &[(t0.clone(), 3), (t1.clone(), 1), (u0.clone(), 1)])
        .expect("commit");

    a.delete_topic("t").expect("delete");
    assert_eq!(a.partitions("t"), None);
    assert!(!dir.path().join("topics").join("t").exists());
    let tmp: Vec<_> = std::fs::read_dir(dir.path().join("tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "leftovers: {tmp:?}");
    for log in [&a, &b] {
        assert_eq!(log.committed_offset("g", &t0).expect("offset"), None);
        assert_eq!(log.committed_offset("g", &t1).expect("offset"), None);
        assert_eq!(log.committed_offset("g", &u0).expect("offset"), Some(1));
    }
    assert!(matches!(
        a.delete_topic("t"),
        Err(Error::UnknownTopic { .. })
    ));

    // b still had it open: its write fails, then it sees the topic gone.
    let err = b
        .append(&t0, &mut batch(&["lost?"]))
        .expect_err("the topic was deleted");
    assert!(
        matches!(&err, Error::TopicDeleted { topic } if topic == "t"),
        "{err}"
    );
    assert_eq!(b.partitions("t"), None);

    // Created again (with another partition count): empty, for both handles.
    a.create_topic("t", 3).expect("recreate");
    assert_eq!(b.partitions("t"), Some(3));
    let t2 = TopicPartition::new("t", 2);
    b.append(&t2, &mut batch(&["new"]))
        .expect("append to the new topic");
    for log in [&a, &b] {
        assert_eq!(log.end_offset(&t0).expect("end"), 0);
        let values: Vec<Vec<u8>> = read_all(log, &t2, 0, 1 << 20)
            .into_iter()
            .filter_map(|(_, (_, _, value))| value)
            .collect();
        assert_eq!(values, [b"new".to_vec()]);
    }
    assert_eq!(
        read_all(&a, &u0, 0, 1 << 20).len(),
        1,
        "the other topic is untouched"
    );

    // Reopened, the directory says the same.
    drop((a, b));
    let c = Log::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(c.topics(), [("t".to_owned(), 3), ("u".to_owned(), 1)]);
    assert_eq!(c.committed_offsets("g").expect("offsets"), [(u0, 1)]);
}

#[test]
fn a_garbage_lock_file_is_corruption_naming_it_not_a_deleted_topic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = TopicPartition::new("input", 0);
    {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("input", 1).expect("create");
        log.append(&tp, &mut batch(&["a", "b"])).expect("append");
    }
    let lock = dir.path().join("topics/input/0/lock");
    std::fs::write(&lock, b"this is not a lock record").expect("garbage");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    let err = log
        .append(&tp, &mut batch(&["c"]))
        .expect_err("the garbage is reported");
    let Error::Corrupt { path, reason, .. } = &err else {
        panic!("expected Corrupt, got {err}");
    };
    assert_eq!(path, &lock);
    assert!(reason.contains("not a partition lock record"), "{reason}");
    assert_eq!(
        read_all(&log, &tp, 0, 1 << 20).len(),
        2,
        "nothing lost or added"
    );
    drop(log);
    // Deleted as the error says, the file is recreated by the next writer.
    std::fs::remove_file(&lock).expect("delete the lock file");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.append(&tp, &mut batch(&["c"])).expect("append");
    assert_eq!(read_all(&log, &tp, 0, 1 << 20).len(), 3);
}
