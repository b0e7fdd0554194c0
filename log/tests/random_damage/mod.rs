//! The log `random_damage_is_identical_or_named.rs` damages: built once per fsync policy, and
//! what it holds as the log's API reads it back.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use riffle_log::{
    BatchBuilder, Compression, Error, FsyncPolicy, Log, LogOptions, TopicConfig, TopicPartition,
};

/// One record as read back: offset, timestamp, key, value, headers.
pub(crate) type Rec = (
    u64,
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Option<Vec<u8>>)>,
);

/// What a log holds, as its API shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Content {
    pub(crate) topics: Vec<(String, u32)>,
    pub(crate) configs: BTreeMap<String, TopicConfig>,
    /// Per partition: start offset, end offset, the records from the start offset.
    pub(crate) partitions: BTreeMap<TopicPartition, (u64, u64, Vec<Rec>)>,
    pub(crate) groups: BTreeMap<String, Vec<(TopicPartition, u64)>>,
}

/// A log built once, and what it holds; `appended` has every record ever appended to each
/// partition (from offset 0, deleted ones included).
pub(crate) struct Built {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) options: LogOptions,
    pub(crate) content: Content,
    pub(crate) appended: BTreeMap<TopicPartition, Vec<Rec>>,
}

const GROUPS: [&str; 3] = ["app", "eo", "eo2"];

fn options(fsync: FsyncPolicy) -> LogOptions {
    LogOptions::default()
        .with_fsync(fsync)
        .with_segment_bytes(700)
        .with_index_interval_bytes(150)
        .with_txn_journal_bytes(1 << 20)
        // No cleaner thread: retention or compaction must not run while a case reads.
        .with_retention_check_interval(None)
        .with_compaction_check_interval(None)
}

/// Appends one batch of `n` records (codec, headers, null keys and values varying with `seed`)
/// and returns them as read back.
fn append(log: &Log, tp: &TopicPartition, seed: usize, n: usize) -> Vec<Rec> {
    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Gzip,
        Compression::Snappy,
    ];
    let mut b = BatchBuilder::new(CODECS[seed % CODECS.len()]);
    let recs = records(seed, n);
    push(&mut b, &recs);
    let base = log.append(tp, &mut b).expect("append");
    recs.into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.0 = base + i as u64;
            r
        })
        .collect()
}

/// `n` records for batch `seed` (offsets 0..n: the caller sets them).
fn records(seed: usize, n: usize) -> Vec<Rec> {
    (0..n)
        .map(|i| {
            let j = seed * 7 + i;
            let key = (!j.is_multiple_of(5)).then(|| format!("key-{}", j % 11).into_bytes());
            let value = (j % 9 != 4).then(|| format!("value {seed}/{i} {}", "x".repeat(j % 40)));
            let headers = match j % 3 {
                0 => Vec::new(),
                1 => vec![(b"trace".to_vec(), Some(format!("t{j}").into_bytes()))],
                _ => vec![(b"a".to_vec(), None), (b"b".to_vec(), Some(Vec::new()))],
            };
            let ts = 1_700_000_000_000 + j as i64;
            (0, ts, key, value.map(String::into_bytes), headers)
        })
        .collect()
}

fn push(b: &mut BatchBuilder, recs: &[Rec]) {
    for (_, ts, k, v, h) in recs {
        let headers = h.iter().map(|(k, v)| (&k[..], v.as_deref()));
        b.push_with_headers(*ts, k.as_deref(), v.as_deref(), headers);
    }
}

/// A transaction of `group`: one batch to each of `outputs`, committing `offsets`.
fn transaction(
    log: &Log,
    appended: &mut BTreeMap<TopicPartition, Vec<Rec>>,
    group: &str,
    seed: usize,
    outputs: &[TopicPartition],
    offsets: &[(TopicPartition, u64)],
) {
    let recs: Vec<Vec<Rec>> = (0..outputs.len())
        .map(|i| records(seed + i, 1 + (seed + i) % 3))
        .collect();
    let mut builders: Vec<BatchBuilder> = recs
        .iter()
        .map(|r| {
            let mut b = BatchBuilder::new(Compression::None);
            push(&mut b, r);
            b
        })
        .collect();
    let mut batches: Vec<(TopicPartition, &mut BatchBuilder)> =
        outputs.iter().cloned().zip(builders.iter_mut()).collect();
    let bases = log
        .commit_transaction(group, &mut batches, offsets)
        .expect("transaction");
    for ((tp, base), recs) in outputs.iter().zip(bases).zip(recs) {
        let out = appended.entry(tp.clone()).or_default();
        for (i, mut r) in recs.into_iter().enumerate() {
            r.0 = base + i as u64;
            out.push(r);
        }
    }
}

fn build(fsync: FsyncPolicy) -> Built {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(fsync);
    let log = Log::open(dir.path(), options.clone()).expect("open");
    log.create_topic("events", 3).expect("create");
    let config = TopicConfig::from_pairs([("retention.ms", "604800000"), ("segment.bytes", "900")])
        .expect("config");
    log.create_topic_with("in", 2, &config).expect("create");
    log.create_topic("out", 1).expect("create");
    let tp = TopicPartition::new;
    let mut appended: BTreeMap<TopicPartition, Vec<Rec>> = BTreeMap::new();
    for seed in 0..24 {
        let p = tp("events", (seed % 3) as u32);
        let recs = append(&log, &p, seed, 1 + seed % 4);
        appended.entry(p).or_default().extend(recs);
    }
    for seed in 0..16 {
        for p in 0..2 {
            let p = tp("in", p);
            let recs = append(&log, &p, 100 + seed, 2);
            appended.entry(p).or_default().extend(recs);
        }
    }
    log.commit_offsets("app", &[(tp("events", 0), 5), (tp("in", 0), 7)])
        .expect("commit");
    // A purge inside the first segment (it stays, with records below the start), and one
    // past the first segments of the other partition (they go).
    log.delete_records(&tp("in", 0), 3).expect("purge");
    log.delete_records(&tp("in", 1), 21).expect("purge");
    let outputs = [tp("out", 0), tp("events", 2)];
    for i in 0..3 {
        let offsets = [(tp("in", 0), 8 + i as u64)];
        transaction(&log, &mut appended, "eo", 200 + i, &outputs, &offsets);
    }
    // A plain commit of a group with offsets in the journal checkpoints: `eo`'s file.
    log.commit_offsets("eo", &[(tp("in", 1), 22)])
        .expect("commit");
    for i in 0..3 {
        let offsets = [(tp("in", 0), 11 + i as u64), (tp("in", 1), 23)];
        transaction(&log, &mut appended, "eo", 300 + i, &outputs, &offsets);
    }
    for i in 0..2 {
        let offsets = [(tp("events", 1), 2 + i as u64)];
        transaction(&log, &mut appended, "eo2", 400 + i, &outputs[..1], &offsets);
    }
    for seed in 24..30 {
        let p = tp("events", (seed % 3) as u32);
        let recs = append(&log, &p, seed, 2);
        appended.entry(p).or_default().extend(recs);
    }
    log.commit_offsets("app", &[(tp("events", 1), 3)])
        .expect("commit");
    log.sync().expect("sync");
    drop(log);
    // Read-only: a writable open would checkpoint the journal (and empty it).
    let read_only = options.clone().with_read_only(true);
    let content = read(dir.path(), &read_only, &appended).expect("the undamaged log reads");
    assert!(
        std::fs::metadata(dir.path().join("txn/journal"))
            .expect("journal")
            .len()
            > 0,
        "transactions are left in the journal"
    );
    assert_eq!(content.partitions[&tp("in", 0)].0, 3);
    assert_eq!(content.partitions[&tp("in", 1)].0, 21);
    for (tp, recs) in &appended {
        let (start, end, read) = &content.partitions[tp];
        assert_eq!(*end, recs.len() as u64, "{tp}");
        assert_eq!(
            &recs[*start as usize..],
            &read[..],
            "{tp}: the undamaged log"
        );
    }
    let expected_groups: BTreeMap<String, Vec<(TopicPartition, u64)>> = [
        (
            "app",
            vec![(tp("events", 0), 5), (tp("events", 1), 3), (tp("in", 0), 7)],
        ),
        ("eo", vec![(tp("in", 0), 13), (tp("in", 1), 23)]),
        ("eo2", vec![(tp("events", 1), 3)]),
    ]
    .into_iter()
    .map(|(g, o)| (g.to_owned(), o))
    .collect();
    assert_eq!(content.groups, expected_groups);
    Built {
        dir,
        options,
        content,
        appended,
    }
}

pub(crate) fn built(fsync: FsyncPolicy) -> &'static Built {
    static EVERY_COMMIT: OnceLock<Built> = OnceLock::new();
    static NEVER: OnceLock<Built> = OnceLock::new();
    let cell = match fsync {
        FsyncPolicy::Never => &NEVER,
        _ => &EVERY_COMMIT,
    };
    cell.get_or_init(|| build(fsync))
}

/// Opens the log in `dir` and reads everything the model says it holds.
pub(crate) fn read(
    dir: &Path,
    options: &LogOptions,
    appended: &BTreeMap<TopicPartition, Vec<Rec>>,
) -> riffle_log::Result<Content> {
    let log = Log::open(dir, options.clone())?;
    read_open(&log, appended)
}

pub(crate) fn read_open(
    log: &Log,
    appended: &BTreeMap<TopicPartition, Vec<Rec>>,
) -> riffle_log::Result<Content> {
    let mut partitions = BTreeMap::new();
    let mut configs = BTreeMap::new();
    for tp in appended.keys() {
        let start = log.start_offset(tp)?;
        let end = log.end_offset(tp)?;
        let mut recs = Vec::new();
        let mut next = start;
        while next < end {
            let batches = log.fetch(tp, next, 1 << 12)?;
            if batches.is_empty() {
                break;
            }
            for batch in &batches {
                for r in batch.records() {
                    let r = r?;
                    let bytes = |b: Option<&bytes::Bytes>| b.map(|b| b.to_vec());
                    let headers = r
                        .headers()
                        .map(|h| (h.key.to_vec(), h.value.map(|v| v.to_vec())))
                        .collect();
                    if r.offset() >= next {
                        recs.push((
                            r.offset(),
                            r.timestamp(),
                            bytes(r.key()),
                            bytes(r.value()),
                            headers,
                        ));
                    }
                }
                next = next.max(batch.last_offset() + 1);
            }
        }
        partitions.insert(tp.clone(), (start, end, recs));
        if !configs.contains_key(&*tp.topic) {
            let config = log
                .topic_config(&tp.topic)?
                .ok_or_else(|| Error::UnknownTopic {
                    topic: tp.topic.to_string(),
                })?;
            configs.insert(tp.topic.to_string(), config);
        }
    }
    let mut groups = BTreeMap::new();
    for g in GROUPS {
        groups.insert(g.to_owned(), log.committed_offsets(g)?);
    }
    Ok(Content {
        topics: log.topics(),
        configs,
        partitions,
        groups,
    })
}
