//! The two hooks the Kafka backend uses: a builder's records section goes out behind a Kafka
//! batch header as it is, and a Kafka batch's records section comes back as a `FetchedBatch`.

use std::sync::Arc;

use bytes::Bytes;
use riffle_log::{
    BatchBuilder, BatchMeta, Compression, FetchedBatch, TimestampType, TopicPartition,
};

fn meta(base_offset: u64, record_count: u32, first_timestamp: i64) -> Arc<BatchMeta> {
    Arc::new(BatchMeta {
        topic_partition: TopicPartition::new("t", 3),
        base_offset,
        record_count,
        first_timestamp,
        max_timestamp: first_timestamp,
        timestamp_type: TimestampType::CreateTime,
        leader_epoch: 7,
        compression: Compression::None,
    })
}

#[test]
fn a_builders_records_section_reads_back_as_a_kafka_batch() {
    let mut b = BatchBuilder::new(Compression::Zstd);
    assert!(b.records_section().is_empty());
    b.push(1_000, Some(b"k1"), Some(b"v1"));
    b.push(1_005, None, None);
    b.push(990, Some(b""), Some(b"v3"));
    assert_eq!((b.first_timestamp(), b.max_timestamp()), (1_000, 1_005));
    let section = Bytes::copy_from_slice(b.records_section());
    let batch = FetchedBatch::from_parts(meta(100, 3, b.first_timestamp()), 2, section);
    assert_eq!((batch.base_offset(), batch.last_offset()), (100, 102));
    let records: Vec<_> = batch.records().collect::<Result<_, _>>().expect("decodes");
    let seen: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.offset(),
                r.timestamp(),
                r.key().cloned(),
                r.value().cloned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                100,
                1_000,
                Some(Bytes::from_static(b"k1")),
                Some(Bytes::from_static(b"v1"))
            ),
            (101, 1_005, None, None),
            (
                102,
                990,
                Some(Bytes::new()),
                Some(Bytes::from_static(b"v3"))
            ),
        ]
    );
    b.clear();
    assert_eq!((b.first_timestamp(), b.max_timestamp()), (0, 0));
    assert!(b.records_section().is_empty());
}

/// Kafka's v2 record layout, encoded by hand (not by riffle-log): length, attributes,
/// timestamp delta, offset delta, key, value, headers — all zig-zag varints.
fn kafka_record(offset_delta: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let zz = |v: usize| (v as u8) << 1;
    let mut body = vec![0, 0, offset_delta << 1, zz(key.len())];
    body.extend_from_slice(key);
    body.push(zz(value.len()));
    body.extend_from_slice(value);
    body.push(0);
    let mut out = vec![zz(body.len())];
    out.extend(body);
    out
}

#[test]
fn a_compacted_kafka_batch_with_offset_gaps_keeps_its_offsets() {
    // Compaction removed the records at deltas 1, 2 and 4 of a 6-record batch.
    let mut section = kafka_record(0, b"a", b"1");
    section.extend(kafka_record(3, b"b", b"2"));
    section.extend(kafka_record(5, b"c", b"3"));
    let batch = FetchedBatch::from_parts(meta(40, 3, 0), 5, Bytes::from(section));
    assert_eq!(
        batch.last_offset(),
        45,
        "the next fetch starts after the batch's span"
    );
    let offsets: Vec<u64> = batch
        .records()
        .map(|r| r.map(|r| r.offset()))
        .collect::<Result<_, _>>()
        .expect("decodes");
    assert_eq!(offsets, vec![40, 43, 45]);
}

#[test]
fn an_offset_delta_past_the_batch_is_a_corrupt_record_not_a_panic() {
    let section = kafka_record(9, b"a", b"1");
    let batch = FetchedBatch::from_parts(meta(0, 1, 0), 0, Bytes::from(section));
    let err = batch
        .records()
        .next()
        .expect("one item")
        .expect_err("rejected");
    assert!(err.to_string().contains("offset delta 9"), "{err}");
    let truncated = FetchedBatch::from_parts(meta(0, 2, 0), 1, Bytes::from_static(&[0x40, 0]));
    assert!(truncated.records().next().expect("one item").is_err());
}

/// A batch sealed for a Kafka Produce request (base offset 0, leader epoch -1, LZ4) goes into
/// the log as it is: the segment holds its bytes with only the base offset and the leader
/// epoch changed (both outside the CRC), and it reads back record for record. A transactional,
/// damaged or cut batch is refused, naming the partition, and nothing is written.
#[test]
fn a_batch_sealed_for_kafka_is_appended_without_re_encoding() {
    use riffle_log::{Log, LogOptions};
    use riffle_record::{Placement, ProducerFields};

    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.create_topic("moved", 1).expect("create");
    let tp = TopicPartition::new("moved", 0);
    let mut first = BatchBuilder::new(Compression::None);
    first.push(1, Some(b"before"), Some(b"x"));
    assert_eq!(log.append(&tp, &mut first).expect("append"), 0);

    let mut b = BatchBuilder::new(Compression::Lz4);
    b.push(10, Some(b"k1"), Some(b"v1"));
    b.push(11, Some(b"k2"), None);
    b.push(12, None, Some(b"v3"));
    let for_kafka = Placement {
        base_offset: 0,
        leader_epoch: -1,
        producer: None,
    };
    let sealed = b.seal(&tp, for_kafka).expect("seal").to_vec();

    // Refused, nothing written: transactional, a flipped byte, a cut batch.
    let txn = Placement {
        producer: Some(ProducerFields {
            producer_id: 7,
            epoch: 0,
            base_sequence: 0,
        }),
        ..for_kafka
    };
    let mut transactional = b.seal(&tp, txn).expect("seal").to_vec();
    let mut damaged = sealed.clone();
    *damaged.last_mut().expect("bytes") ^= 1;
    let mut cut = sealed[..sealed.len() - 1].to_vec();
    for (what, bytes) in [
        ("transactional", &mut transactional),
        ("damaged", &mut damaged),
        ("cut", &mut cut),
    ] {
        let err = log.append_sealed(&tp, bytes).expect_err(what);
        assert!(
            matches!(err, riffle_log::Error::InvalidBatch { .. })
                && err.to_string().contains("moved-0"),
            "{what}: {err}"
        );
        assert_eq!(log.end_offset(&tp).expect("end"), 1, "{what}");
    }

    let mut moved = sealed.clone();
    assert_eq!(
        log.append_sealed(&tp, &mut moved).expect("append sealed"),
        1
    );
    assert_eq!(log.end_offset(&tp).expect("end"), 4);
    log.sync().expect("sync");
    let segment =
        std::fs::read(dir.path().join("topics/moved/0/00000000000000000000.log")).expect("segment");
    let stored = &segment[segment.len() - sealed.len()..];
    assert_eq!(
        &stored[..8],
        &1u64.to_be_bytes(),
        "the base offset, set by the log"
    );
    assert_eq!(&stored[12..16], &0i32.to_be_bytes(), "leader epoch 0");
    assert_eq!(&stored[8..12], &sealed[8..12]);
    assert_eq!(
        &stored[16..],
        &sealed[16..],
        "every other byte as sealed for Kafka"
    );

    let batches = log.fetch(&tp, 1, 1 << 20).expect("fetch");
    let records: Vec<_> = batches
        .iter()
        .flat_map(|b| b.records())
        .map(|r| r.expect("record"))
        .collect();
    let got: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.offset(),
                r.timestamp(),
                r.key().map(|k| k.to_vec()),
                r.value().map(|v| v.to_vec()),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, 10, Some(b"k1".to_vec()), Some(b"v1".to_vec())),
            (2, 11, Some(b"k2".to_vec()), None),
            (3, 12, None, Some(b"v3".to_vec())),
        ]
    );
}
