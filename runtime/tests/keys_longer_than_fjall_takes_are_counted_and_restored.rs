//! fjall keys are at most 65,535 bytes; the log takes records of any size up to its batch
//! limit. Keys of 70,000 and 200,000 bytes (two of them sharing all but their last byte, so
//! their first 65,499 bytes too, as the store's layout cuts them: runtime/src/state/long_keys.rs)
//! are counted on persistent stores, key-value and window alike, exactly as a `HashMap` count of
//! the input says: after a clean restart (read back from fjall), and after the stores were
//! deleted with the checkpoints kept (restored from the changelogs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use common::run_persistent_count as run;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, TimeWindows, Topology, Windowed, dsl::StoreType,
};

/// Keys of every kind: short ones, 70,000 bytes, 200,000 bytes, and two of 70,000 bytes that
/// differ only in their last byte.
fn keys() -> Vec<String> {
    let long = |len: usize, last: char| {
        let mut key: String = (0..len - 1)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        key.push(last);
        key
    };
    vec![
        "k0".to_owned(),
        "k1".to_owned(),
        long(70_000, 'x'),
        long(70_000, 'y'),
        long(200_000, 'z'),
        long(65_499, 'w'),
    ]
}

/// `n` records cycling over [`keys`].
fn input(n: usize) -> Vec<(String, String)> {
    let keys = keys();
    (0..n)
        .map(|i| (keys[(i * 7 + i / 3) % keys.len()].clone(), String::new()))
        .collect()
}

/// The count's output against the model, naming keys by length and last byte.
fn assert_counts(log: &Log, all: &[(String, String)], when: &str) {
    let name = |k: &String| format!("{} bytes ending {:?}", k.len(), k.chars().last());
    let got: BTreeMap<String, i64> = common::latest_longs(log, "out")
        .iter()
        .map(|(k, v)| (name(k), *v))
        .collect();
    let want: BTreeMap<String, i64> = common::count_model(all.iter().map(|(k, _)| k.as_str()))
        .iter()
        .map(|(k, v)| (name(k), *v))
        .collect();
    assert_eq!(got, want, "{when}");
}

#[test]
fn a_70000_and_a_200000_byte_key_are_counted_on_a_persistent_store_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let mut all = input(60);
    common::produce(&log, "in", 2, &all);
    assert_eq!(run(&log, &state), (60, 0));
    assert_counts(&log, &all, "the first run");

    // A clean restart: the counts are read back from fjall.
    let more = input(25);
    common::produce(&log, "in", 2, &more);
    all.extend(more);
    assert_eq!(run(&log, &state), (25, 0), "nothing to restore");
    assert_counts(&log, &all, "after a clean restart");

    // The stores deleted, the checkpoints kept: every task restores from its changelog.
    std::fs::remove_dir_all(state.join("durable").join("stores")).unwrap();
    let more = input(13);
    common::produce(&log, "in", 2, &more);
    all.extend(more);
    let (processed, restored) = run(&log, &state);
    assert_eq!(processed, 13);
    assert!(restored > 0, "restored from the changelogs");
    assert_counts(&log, &all, "after restoring from the changelogs");
}

const SIZE: u64 = 100;

fn windowed_topology() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .windowed_by(TimeWindows::of_size_and_grace(
            Duration::from_millis(SIZE),
            Duration::from_millis(1_000_000),
        ))
        .count_with(Materialized::named("windows").with_store_type(StoreType::Persistent))
        .to_stream()
        .to(
            "out",
            Produced::with(
                Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE)),
                Serdes::i64(),
            ),
        );
    builder.build().unwrap()
}

fn run_windowed(log: &Log, state: &Path) {
    let mut config = StreamsConfig::new("windows");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 1;
    let app = StreamsApp::new(
        windowed_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    app.run_until_idle().unwrap();
}

/// `n` records over [`keys`] from time `from`, 13 ms apart.
fn timed(from: i64, n: usize) -> Vec<(String, i64)> {
    let keys = keys();
    (0..n)
        .map(|i| {
            (
                keys[(i * 5 + i / 4) % keys.len()].clone(),
                from + 13 * i as i64,
            )
        })
        .collect()
}

fn append(log: &Log, records: &[(String, i64)]) {
    for (k, ts) in records {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(*ts, Some(k.as_bytes()), Some(b"v"));
        log.append(&TopicPartition::new("in", 0), &mut b).unwrap();
    }
}

/// The latest count of every (key length and last byte, window start) in the output, and the
/// model's.
fn window_counts(log: &Log, all: &[(String, i64)]) -> [BTreeMap<(usize, char, i64), i64>; 2] {
    let serde = Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE));
    let name = |k: &str| (k.len(), k.chars().last().unwrap_or_default());
    let mut got = BTreeMap::new();
    for batch in log
        .fetch(&TopicPartition::new("out", 0), 0, usize::MAX)
        .unwrap()
    {
        for r in batch.records() {
            let r = r.unwrap();
            let k: Windowed<String> = serde.deserialize(r.key().map(|b| &b[..])).unwrap();
            let v = i64::from_be_bytes(r.value().unwrap()[..].try_into().unwrap());
            let (len, last) = name(&k.key);
            got.insert((len, last, k.window.start), v);
        }
    }
    let mut want: HashMap<(usize, char, i64), i64> = HashMap::new();
    for (k, ts) in all {
        let (len, last) = name(k);
        *want.entry((len, last, ts - ts % SIZE as i64)).or_default() += 1;
    }
    [got, want.into_iter().collect()]
}

#[test]
fn long_keys_are_counted_per_window_on_a_persistent_window_store_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let log = Log::in_memory();
    log.create_topic("in", 1).unwrap();
    let mut all = timed(0, 40);
    append(&log, &all);
    run_windowed(&log, &state);
    let [got, want] = window_counts(&log, &all);
    assert_eq!(got, want, "the first run");

    // Again, into windows already counted (the grace is long): read back from fjall.
    let more = timed(5, 30);
    append(&log, &more);
    all.extend(more);
    run_windowed(&log, &state);
    let [got, want] = window_counts(&log, &all);
    assert_eq!(got, want, "after a clean restart");

    // The stores deleted: the window store restores from its changelog.
    std::fs::remove_dir_all(state.join("windows").join("stores")).unwrap();
    let more = timed(9, 20);
    append(&log, &more);
    all.extend(more);
    run_windowed(&log, &state);
    let [got, want] = window_counts(&log, &all);
    assert_eq!(got, want, "after restoring from the changelog");
}
