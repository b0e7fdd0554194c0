//! Random appends and fetches against a plain `Vec` model, on an in-memory log and on a disk log
//! that is also reopened in the middle of the sequence.

mod common;

use common::{Model, records};
use proptest::prelude::*;
use riffle_log::{BatchBuilder, Compression, Error, Log, LogOptions, TopicPartition};

const PARTITIONS: u32 = 2;

#[derive(Debug, Clone)]
enum Op {
    Append {
        partition: u32,
        codec: Compression,
        records: Vec<Model>,
    },
    /// `offset` is taken modulo end offset + 2, so that the end and one past it are covered.
    Fetch {
        partition: u32,
        offset: u64,
        max_bytes: usize,
    },
    Commit {
        partition: u32,
        offset: u64,
    },
    Reopen,
}

fn bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        4 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some),
        1 => proptest::collection::vec(Just(b'x'), 100..400).prop_map(Some),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let codec = prop_oneof![
        Just(Compression::None),
        Just(Compression::Lz4),
        Just(Compression::Zstd),
        Just(Compression::Gzip),
        Just(Compression::Snappy)
    ];
    let record = (any::<i64>(), bytes(), bytes());
    prop_oneof![
        4 => (0..PARTITIONS, codec, proptest::collection::vec(record, 1..8))
            .prop_map(|(partition, codec, records)| Op::Append { partition, codec, records }),
        4 => (0..PARTITIONS, any::<u64>(), prop_oneof![Just(1usize), 1usize..3000, Just(1 << 20)])
            .prop_map(|(partition, offset, max_bytes)| Op::Fetch { partition, offset, max_bytes }),
        1 => (0..PARTITIONS, any::<u64>()).prop_map(|(partition, offset)| Op::Commit { partition, offset }),
        1 => Just(Op::Reopen),
    ]
}

/// Per partition: the records, and the base offset of every batch.
#[derive(Default)]
struct PartitionModel {
    records: Vec<Model>,
    batch_bases: Vec<u64>,
}

fn options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(700)
        .with_index_interval_bytes(100)
}

fn run(ops: &[Op], dir: Option<&std::path::Path>) -> Result<(), TestCaseError> {
    let open = || match dir {
        Some(dir) => Log::open(dir, options()).expect("open"),
        None => Log::in_memory_with_options(options()),
    };
    let mut log = open();
    log.create_topic("p", PARTITIONS).expect("create");
    let mut model: Vec<PartitionModel> =
        (0..PARTITIONS).map(|_| PartitionModel::default()).collect();
    let mut committed = vec![None; PARTITIONS as usize];
    let mut builder = BatchBuilder::new(Compression::None);
    for op in ops {
        match op {
            Op::Append {
                partition,
                codec,
                records,
            } => {
                let tp = TopicPartition::new("p", *partition);
                let m = &mut model[*partition as usize];
                if builder.compression() != *codec {
                    builder = BatchBuilder::new(*codec);
                }
                for (ts, k, v) in records {
                    builder.push(*ts, k.as_deref(), v.as_deref());
                }
                prop_assert_eq!(builder.len(), records.len());
                let base = log.append(&tp, &mut builder).expect("append");
                prop_assert!(builder.is_empty());
                prop_assert_eq!(base, m.records.len() as u64);
                m.batch_bases.push(base);
                m.records.extend(records.iter().cloned());
            }
            Op::Fetch {
                partition,
                offset,
                max_bytes,
            } => {
                let tp = TopicPartition::new("p", *partition);
                let m = &model[*partition as usize];
                let end = m.records.len() as u64;
                prop_assert_eq!(log.end_offset(&tp).expect("end"), end);
                let offset = offset % (end + 2);
                let fetched = log.fetch(&tp, offset, *max_bytes);
                if offset > end {
                    let is_out_of_range = matches!(fetched, Err(Error::OffsetOutOfRange { .. }));
                    prop_assert!(is_out_of_range);
                    continue;
                }
                let batches = fetched.expect("fetch");
                if offset == end {
                    prop_assert!(batches.is_empty());
                    continue;
                }
                prop_assert!(!batches.is_empty());
                let first = &batches[0];
                prop_assert!(first.base_offset() <= offset && offset <= first.last_offset());
                let mut next = first.base_offset();
                for batch in &batches {
                    prop_assert_eq!(batch.base_offset(), next);
                    prop_assert!(m.batch_bases.binary_search(&batch.base_offset()).is_ok());
                    prop_assert_eq!(batch.meta().topic_partition.partition, *partition);
                    for (o, record) in records(batch) {
                        prop_assert_eq!(o, next);
                        prop_assert_eq!(Some(&record), m.records.get(o as usize));
                        next += 1;
                    }
                    prop_assert_eq!(batch.last_offset() + 1, next);
                }
            }
            Op::Commit { partition, offset } => {
                let tp = TopicPartition::new("p", *partition);
                log.commit_offsets("g", &[(tp, *offset)]).expect("commit");
                committed[*partition as usize] = Some(*offset);
            }
            Op::Reopen => {
                if dir.is_some() {
                    drop(log);
                    log = open();
                }
            }
        }
        for p in 0..PARTITIONS {
            let tp = TopicPartition::new("p", p);
            prop_assert_eq!(
                log.committed_offset("g", &tp).expect("committed"),
                committed[p as usize]
            );
        }
    }
    Ok(())
}

proptest! {
    // 64 cases by default; PROPTEST_CASES=<n> for a longer run.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn in_memory_log_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops, None)?;
    }

    #[test]
    fn disk_log_matches_the_model_across_reopens(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().expect("tempdir");
        run(&ops, Some(dir.path()))?;
    }
}
