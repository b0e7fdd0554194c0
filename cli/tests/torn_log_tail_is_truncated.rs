//! Torn log tails, as a crash mid-write leaves them. A batch cut in the middle
//! (its header promises more bytes than the file holds) or garbage after the last batch is
//! truncated when the sample opens the log, with a warning naming the segment file and the
//! offset, and the counts are right:
//!
//! - a torn *input* tail is what a producer that crashed mid-append leaves: that batch was never
//!   acknowledged, its records are gone from the input, and the counts are exactly those of the
//!   records the log still holds; input appended afterwards lands at the truncated offset and is
//!   counted;
//! - a torn *output* or *changelog* tail is what a sample killed mid-commit leaves: the torn
//!   batches belong to a commit that never completed (a commit fsyncs its batches before it
//!   commits the input offsets), so nothing committed is lost and the counts stay exact. Under
//!   exactly-once the same holds, and a torn last record of the transaction journal is ignored
//!   (that transaction never committed).

mod common;

use std::io::Write;
use std::path::PathBuf;

use common::{
    CHANGELOG, Counts, Fixture, INPUT, OUTPUT, PARTITIONS, assert_exact, file_len, merge, rng,
    run_to_end, seed,
};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};

/// Keys that the partitioner puts on `partition`.
fn keys_on(partition: u32, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("key-{i}"))
        .filter(|k| partition_for_key(k.as_bytes(), PARTITIONS) == partition)
        .take(n)
        .collect()
}

/// A torn tail to make, once nothing opens the log any more (opening it truncates them).
struct Tear {
    segment: PathBuf,
    /// The offset of the torn batch: the end offset once it is truncated.
    offset: u64,
    kind: TearKind,
}

enum TearKind {
    /// Cut the file to this length: in the middle of its last batch.
    CutAt(u64),
    /// Append bytes that are no batch.
    Garbage,
}

impl Tear {
    /// Appends one batch of `records` (key, value) to `topic`'s `partition` without an fsync,
    /// to be cut in the middle, as a crash mid-write would leave it.
    fn cut_batch(
        fixture: &Fixture,
        topic: &str,
        partition: u32,
        records: &[(String, Vec<u8>)],
    ) -> Tear {
        let log = Log::open(&fixture.log_dir, LogOptions::default()).expect("open the log");
        let segment = fixture.last_segment(topic, partition);
        let before = file_len(&segment);
        let mut batch = BatchBuilder::new(Compression::None);
        for (key, value) in records {
            batch.push(common::now_ms(), Some(key.as_bytes()), Some(value));
        }
        let offset = log
            .append(&TopicPartition::new(topic, partition), &mut batch)
            .expect("append");
        // Not fsynced: a write a crash cuts short was never made durable (a batch below the
        // partition's recovery point is corruption, never a torn tail).
        let after = file_len(&segment);
        Tear {
            segment,
            offset,
            kind: TearKind::CutAt(before + (after - before) / 2),
        }
    }

    /// Garbage after `topic`'s `partition`'s last batch.
    fn garbage(fixture: &Fixture, topic: &str, partition: u32) -> Tear {
        let log = Log::open(&fixture.log_dir, LogOptions::default()).expect("open the log");
        let offset = log
            .end_offset(&TopicPartition::new(topic, partition))
            .expect("end offset");
        Tear {
            segment: fixture.last_segment(topic, partition),
            offset,
            kind: TearKind::Garbage,
        }
    }

    fn make(&self) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.segment)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.segment.display()));
        match self.kind {
            TearKind::CutAt(len) => file.set_len(len),
            TearKind::Garbage => {
                let garbage: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8).collect();
                file.write_all(&garbage)
            }
        }
        .unwrap_or_else(|e| panic!("tearing {}: {e}", self.segment.display()));
    }
}

/// Panics unless `stderr` has the log's warning for the tear's segment and offset.
fn assert_warned(stderr: &str, tear: &Tear, seed: u64) {
    let (path, offset) = (tear.segment.display().to_string(), tear.offset);
    let warned = stderr.lines().any(|line| {
        line.contains("truncating the torn tail")
            && line.contains(&path)
            && line.contains(&format!("(offset {offset};"))
    });
    assert!(
        warned,
        "seed {seed}: no warning names {path} at offset {offset}:\n{stderr}"
    );
}

#[test]
fn a_torn_input_tail_is_truncated_and_the_records_the_log_still_holds_are_counted_exactly() {
    let seed = seed("torn input tail");
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    let args = ["--threads", "2", "--commit-interval-ms", "20"].map(String::from);
    let mut model = fixture.append_input(&mut rng, 6_000, 200);

    // A producer crashed mid-append on partition 0 (a batch of new and known keys, cut in the
    // middle), and one on partition 1 had written only garbage.
    let torn: Vec<(String, Vec<u8>)> = keys_on(0, 300)
        .into_iter()
        .map(|k| (k, b"1".to_vec()))
        .collect();
    let tears = [
        Tear::cut_batch(&fixture, INPUT, 0, &torn),
        Tear::garbage(&fixture, INPUT, 1),
    ];
    tears.iter().for_each(Tear::make);

    let stderr = run_to_end(
        "the run over the torn input",
        fixture.sample("memory", "at_least_once", &args),
    );
    for tear in &tears {
        assert_warned(&stderr, tear, seed);
    }
    // The torn batch's records are gone: exactly the records the log still holds are counted.
    assert_exact(
        &model,
        &fixture.output_counts(),
        &format!("seed {seed}: after the torn input"),
    );

    // Input appended since lands at the truncated offsets and is counted.
    merge(&mut model, &fixture.append_input(&mut rng, 6_000, 200));
    let stderr = run_to_end(
        "the run after",
        fixture.sample("memory", "at_least_once", &args),
    );
    assert!(!stderr.contains("truncating"), "{stderr}");
    assert_exact(
        &model,
        &fixture.output_counts(),
        &format!("seed {seed}: after more input"),
    );
}

/// A clean run, then the tails a sample killed mid-commit leaves: on partition 0 a changelog
/// batch and an output batch cut in the middle (with counts far too high, so they would show if
/// they were read), on partition 1 garbage after the changelog's and the output's last batch.
/// The next run over more input must truncate all four and count exactly.
fn torn_output_and_changelog_tails(store: &str, guarantee: &str) {
    let seed = seed(&format!(
        "torn output and changelog tails, --store {store} --processing-guarantee {guarantee}"
    ));
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    let args = ["--threads", "2", "--commit-interval-ms", "20"].map(String::from);
    let mut model = fixture.append_input(&mut rng, 6_000, 200);
    run_to_end("the first run", fixture.sample(store, guarantee, &args));
    assert_exact(&model, &fixture.output_counts(), "after the first run");

    let bogus: Vec<(String, Vec<u8>)> = keys_on(0, 50)
        .into_iter()
        .map(|k| (k, 1_000_000i64.to_be_bytes().to_vec()))
        .collect();
    let tears = [
        Tear::cut_batch(&fixture, CHANGELOG, 0, &bogus),
        Tear::cut_batch(&fixture, OUTPUT, 0, &bogus),
        Tear::garbage(&fixture, CHANGELOG, 1),
        Tear::garbage(&fixture, OUTPUT, 1),
    ];
    merge(&mut model, &fixture.append_input(&mut rng, 6_000, 200));
    tears.iter().for_each(Tear::make);
    // Under exactly-once, a crash mid-commit may also have torn the transaction journal's last
    // record: that transaction never committed, and recovery ignores it.
    let journal = fixture.log_dir.join("txn").join("journal");
    let journal_tear = (guarantee == "exactly_once").then(|| {
        let position = std::fs::metadata(&journal).map_or(0, |m| m.len());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&journal)
            .expect("open the transaction journal");
        file.write_all(b"RFTX\x00\x00\x01\x00torn")
            .expect("tear the journal");
        position
    });
    let stderr = run_to_end(
        "the run over the torn tails",
        fixture.sample(store, guarantee, &args),
    );
    for tear in &tears {
        assert_warned(&stderr, tear, seed);
    }
    if let Some(position) = journal_tear {
        let path = journal.display().to_string();
        assert!(
            stderr.lines().any(|l| l.contains("transaction journal")
                && l.contains(&path)
                && l.contains(&format!("at byte {position}"))),
            "seed {seed}: no warning names {path} at byte {position}:\n{stderr}"
        );
    }
    let got: Counts = fixture.output_counts();
    assert_exact(&model, &got, &format!("seed {seed}: after the torn tails"));
}

#[test]
fn torn_output_and_changelog_tails_are_truncated_and_counts_stay_exact_with_the_in_memory_store() {
    torn_output_and_changelog_tails("memory", "at_least_once");
}

#[test]
fn torn_output_and_changelog_tails_are_truncated_and_counts_stay_exact_with_the_persistent_store() {
    torn_output_and_changelog_tails("persistent", "at_least_once");
}

#[test]
fn torn_output_and_changelog_tails_are_truncated_and_counts_stay_exact_under_exactly_once() {
    torn_output_and_changelog_tails("memory", "exactly_once");
    torn_output_and_changelog_tails("persistent", "exactly_once");
}
