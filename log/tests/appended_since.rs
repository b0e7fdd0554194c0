//! `Log::appended_since` names the partitions appended to since a version, or says it cannot.

use riffle_log::{BatchBuilder, Compression, Log, TopicPartition};

fn append(log: &Log, tp: &TopicPartition) {
    let mut batch = BatchBuilder::new(Compression::None);
    batch.push(0, Some(b"k"), Some(b"v"));
    log.append(tp, &mut batch).expect("append");
}

#[test]
fn names_exactly_the_partitions_appended_to_since_a_version() {
    let log = Log::in_memory();
    log.create_topic("t", 8).expect("create");
    let tp = |p| TopicPartition::new("t", p);
    let mut out = Vec::new();
    let v0 = log.append_version();
    assert_eq!(log.appended_since(v0, &mut out), Some(v0));
    assert!(out.is_empty(), "nothing appended, nothing named");

    append(&log, &tp(3));
    append(&log, &tp(5));
    let v2 = log.appended_since(v0, &mut out).expect("remembered");
    assert_eq!(v2, log.append_version());
    assert_eq!(out, vec![tp(3), tp(5)]);

    out.clear();
    append(&log, &tp(1));
    assert_eq!(log.appended_since(v2, &mut out), Some(log.append_version()));
    assert_eq!(out, vec![tp(1)]);
}

#[test]
fn a_reader_too_far_behind_is_told_to_look_everywhere() {
    let log = Log::in_memory();
    log.create_topic("t", 2).expect("create");
    let v0 = log.append_version();
    for _ in 0..5_000 {
        append(&log, &TopicPartition::new("t", 1));
    }
    let mut out = Vec::new();
    assert_eq!(log.appended_since(v0, &mut out), None);
    assert!(out.is_empty());
    // A recent version is still answered.
    let recent = log.append_version() - 10;
    assert_eq!(
        log.appended_since(recent, &mut out),
        Some(log.append_version())
    );
    assert_eq!(out.len(), 10);
}

#[test]
fn a_transaction_names_every_partition_it_wrote() {
    let log = Log::in_memory();
    log.create_topic("a", 1).expect("create");
    log.create_topic("b", 1).expect("create");
    let v0 = log.append_version();
    let mut first = BatchBuilder::new(Compression::None);
    first.push(0, Some(b"k"), Some(b"v"));
    let mut second = BatchBuilder::new(Compression::None);
    second.push(0, Some(b"k"), Some(b"v"));
    let mut batches = [
        (TopicPartition::new("a", 0), &mut first),
        (TopicPartition::new("b", 0), &mut second),
    ];
    log.commit_transaction("g", &mut batches, &[])
        .expect("commit");
    let mut out = Vec::new();
    log.appended_since(v0, &mut out).expect("remembered");
    out.sort_by(|x, y| x.topic.cmp(&y.topic));
    assert_eq!(
        out,
        vec![TopicPartition::new("a", 0), TopicPartition::new("b", 0)]
    );
}
