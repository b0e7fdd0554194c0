//! Seed inputs for the targets that read raw files: real files written by the log (segments of
//! each codec, a transaction journal, group-offsets files) and checkpoints as `Checkpoint`
//! writes them, each behind the target's mode byte; topic directories for `topic_meta`; the
//! second records (slots, a group registry, `start` files) and segments with a recovery point.
//! The structured targets (`records`, `offset_index`, the model half of `txn_journal`) build
//! valid files themselves and need none.

use riffle_log::fuzzing::{MemDir, encode_start, group_registry_entry, write_slots};
use riffle_log::{BatchBuilder, Compression, LogOptions, TopicPartition};
use riffle_state_dir::Checkpoint;

use crate::{TOPIC, fix_segment_crcs, tp};

/// `(target, seed name, bytes)` for every seed.
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    // Segments: a few batches of each codec, and one segment per codec.
    let codecs = [
        Compression::None,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Gzip,
        Compression::Snappy,
    ];
    let mut segments = Vec::new();
    let mixed = segment(&codecs);
    segments.push(("mixed".to_owned(), mixed));
    for c in codecs {
        segments.push((format!("{c:?}").to_lowercase(), segment(&[c, c])));
    }
    for (name, seg) in &segments {
        for (flags, what) in [(0u8, "raw"), (1, "fixed"), (9, "sealed")] {
            let mut input = vec![flags];
            input.extend_from_slice(seg);
            out.push(("segment_reader", format!("{name}-{what}"), input));
        }
    }
    // A journal of three transactions, as raw input (mode 1) and with CRCs fixed (mode 3).
    let journal = journal();
    for mode in [1u8, 3] {
        let mut input = vec![mode];
        input.extend_from_slice(&journal);
        out.push(("txn_journal", format!("journal-{mode}"), input));
    }
    // Group offsets files, as the log writes them.
    for (i, entries) in [
        vec![],
        vec![("t", 0, 5)],
        vec![("orders", 0, 0), ("orders", 7, u64::MAX), ("t", 3, 42)],
    ]
    .into_iter()
    .enumerate()
    {
        let dir = MemDir::new();
        let log = dir.open(LogOptions::default()).expect("open");
        for (t, _, _) in &entries {
            log.create_topic(t, 8).expect("topic");
        }
        let offsets: Vec<_> = entries
            .iter()
            .map(|&(t, p, o)| (TopicPartition::new(t, p), o))
            .collect();
        log.commit_offsets("g", &offsets).expect("commit");
        let mut input = vec![0u8];
        input.extend_from_slice(&dir.read("groups/g.offsets").unwrap_or_default());
        out.push(("group_offsets", format!("offsets-{i}"), input));
    }
    // The second records: slots as the log writes them (once, twice), a group registry, start
    // files (checksummed, and an older log's), and for the structured modes a few bytes.
    let once = write_slots(&[], 42).unwrap_or_default();
    let twice = write_slots(&once, 4242).unwrap_or_default();
    let registry: Vec<u8> = ["app", "exactly-once", "g"]
        .iter()
        .flat_map(|g| group_registry_entry(g))
        .collect();
    for (mode, name, bytes) in [
        (0u8, "slots-once", once),
        (0, "slots-twice", twice),
        (
            1,
            "slot-writes",
            vec![0, 3, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ),
        (2, "registry", registry),
        (
            3,
            "registry-writes",
            b"\x02\x03app\x01g\x05torn\x09".to_vec(),
        ),
        (4, "start", encode_start(1234)),
        (4, "start-older", b"1234\n".to_vec()),
        (5, "start-writes", 1_000_000u64.to_le_bytes().to_vec()),
    ] {
        let mut input = vec![mode];
        input.extend_from_slice(&bytes);
        out.push(("durability_records", name.to_owned(), input));
    }
    // A segment with a recovery point at its end (reads), one past it (an error), a torn second
    // write of the slots, a start file, and a cut segment.
    for (name, seg) in segments.iter().take(3) {
        let end = fix_segment_crcs(&mut seg.clone(), 0);
        let cut = &seg[..seg.len() - 10];
        for (flags, point, what, seg) in [
            (0b0000_0010u8, end, "at-end", &seg[..]),
            (0b0000_0010, end + 1, "past-end", &seg[..]),
            (0b0000_0110, end / 2, "torn-slot", &seg[..]),
            (0b0000_1010, end, "with-start", &seg[..]),
            (0b0000_0010, end / 2, "cut", cut),
        ] {
            let mut input = vec![flags];
            input.extend_from_slice(&point.to_be_bytes());
            input.push(3);
            input.extend_from_slice(&[0, 0]);
            input.extend_from_slice(seg);
            out.push(("recovery_point", format!("{name}-{what}"), input));
        }
    }
    // Checkpoints, as `Checkpoint::to_text` renders them, and Kafka's unknown-offset sentinel.
    let cp: Checkpoint = [
        (TopicPartition::new("app-store-changelog", 3), 1200),
        (TopicPartition::new("app-other-changelog", 0), 17),
    ]
    .into_iter()
    .collect();
    for (i, text) in [
        cp.to_text(),
        Checkpoint::new().to_text(),
        "0\n2\na 0 -2\nb 1 5\n".to_owned(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut input = vec![0u8];
        input.extend_from_slice(text.as_bytes());
        out.push(("checkpoint", format!("checkpoint-{i}"), input));
    }
    // Topic directories (mode 0): partitions 0..3 with segments, and `partitions` files as the
    // log writes them (with and without the config line), a config file, damaged variants.
    for (name, dirs, segments, flags, partitions, config) in [
        ("whole", 0b111u8, 0b111u8, 1u8, "3\nconfig\n", ""),
        ("count-alone", 0b11, 0b11, 1, "2\n", ""),
        (
            "config",
            0b1,
            0b1,
            3,
            "1\nconfig cleanup.policy=compact retention.ms=1000\n",
            "cleanup.policy=compact\nretention.ms=1000\n",
        ),
        ("no-partitions-file", 0b11, 0b11, 0, "", ""),
        ("count-below", 0b11, 0b11, 1, "1\nconfig\n", ""),
        ("gap", 0b101, 0b101, 1, "3\nconfig\n", ""),
        ("bare", 0, 0, 2, "", "retention.ms=1\n"),
    ] {
        let mut input = vec![0u8, dirs, segments, flags, partitions.len() as u8];
        input.extend_from_slice(partitions.as_bytes());
        input.extend_from_slice(config.as_bytes());
        out.push(("topic_meta", format!("dir-{name}"), input));
    }
    out
}

fn batch(c: Compression, n: u32) -> BatchBuilder {
    let mut b = BatchBuilder::new(c);
    for i in 0..n {
        let key = format!("key-{}", i % 3);
        let value = format!("value {i} {}", "x".repeat(i as usize % 7));
        let value = (i % 5 != 4).then_some(value);
        b.push(
            1_700_000_000_000 + i64::from(i),
            Some(key.as_bytes()),
            value.as_deref().map(str::as_bytes),
        );
    }
    b
}

/// The active segment of a partition after one batch per codec in `codecs`.
fn segment(codecs: &[Compression]) -> Vec<u8> {
    let dir = MemDir::new();
    let log = dir.open(LogOptions::default()).expect("open");
    log.create_topic(TOPIC, 1).expect("topic");
    for (i, c) in codecs.iter().enumerate() {
        log.append(&tp(0), &mut batch(*c, 3 + i as u32))
            .expect("append");
    }
    dir.read("topics/t/0/00000000000000000000.log")
        .unwrap_or_default()
}

/// A journal of three transactions (no checkpoint empties it).
fn journal() -> Vec<u8> {
    let dir = MemDir::new();
    let log = dir
        .open(LogOptions::default().with_txn_journal_bytes(u64::MAX))
        .expect("open");
    log.create_topic(TOPIC, 3).expect("topic");
    for (i, c) in [Compression::None, Compression::Lz4, Compression::Zstd]
        .into_iter()
        .enumerate()
    {
        let mut a = batch(c, 2);
        let mut b = batch(Compression::None, 1);
        let p = i as u32;
        log.commit_transaction(
            if i == 1 { "g2" } else { "g1" },
            &mut [(tp(p), &mut a), (tp((p + 1) % 3), &mut b)],
            &[(tp(0), 10 * i as u64 + 1)],
        )
        .expect("commit");
    }
    dir.read("txn/journal").unwrap_or_default()
}
