//! Windowed state across restarts on real stream threads: window stores come back from their
//! checkpoint or their changelog, emit-on-close never emits a window twice, caching collapses
//! a window's updates between commits, and late records show in the dropped-records metric.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod window_model;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use riffle::log::{BatchBuilder, Compression, Log, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, Serdes, SessionWindows, StreamsApp,
    StreamsBuilder, StreamsConfig, TimeWindows, Topology, Windowed, dsl::StoreType,
    window::EmitStrategy,
};
use window_model::{Kind, Spec};

const SIZE: u64 = 100;
const GRACE: u64 = 20;

fn topology(store: StoreType, emit: EmitStrategy, session: bool) -> Topology {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    let materialized = Materialized::named("windows").with_store_type(store);
    let (table, serde) = if session {
        (
            grouped
                .windowed_by(SessionWindows::of_inactivity_gap_and_grace(
                    Duration::from_millis(SIZE),
                    Duration::from_millis(GRACE),
                ))
                .emit_strategy(emit)
                .count_with(materialized),
            Serdes::session_windowed(Serdes::string()),
        )
    } else {
        (
            grouped
                .windowed_by(TimeWindows::of_size_and_grace(
                    Duration::from_millis(SIZE),
                    Duration::from_millis(GRACE),
                ))
                .emit_strategy(emit)
                .count_with(materialized),
            Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE)),
        )
    };
    table
        .to_stream()
        .to("out", Produced::with(serde, Serdes::i64()));
    builder.build().unwrap()
}

fn spec(session: bool) -> Spec {
    Spec {
        kind: if session {
            Kind::Session { gap: SIZE as i64 }
        } else {
            Kind::Time {
                size: SIZE as i64,
                advance: SIZE as i64,
            }
        },
        grace: GRACE as i64,
    }
}

/// Appends `records` to the one-partition input.
fn append(log: &Log, records: &[(String, i64)]) {
    let mut b = BatchBuilder::new(Compression::None);
    for (k, ts) in records {
        b.push(*ts, Some(k.as_bytes()), Some(b"v"));
    }
    log.append(&TopicPartition::new("in", 0), &mut b).unwrap();
}

/// Input for one phase: 3 keys, bursts of 10 records 7 ms apart every 200 ms (sessions of a
/// 100 ms gap end between bursts), every 7th record 60 ms back.
fn phase(from: i64, n: i64) -> Vec<(String, i64)> {
    (0..n)
        .map(|i| {
            let ts = from + (i / 10) * 200 + (i % 10) * 7;
            let ts = if i % 7 == 3 { (ts - 60).max(0) } else { ts };
            (format!("k{}", i % 3), ts)
        })
        .collect()
}

fn run(log: &Log, state: &Path, topology: Topology, commit_ms: u64) -> u64 {
    let mut config = StreamsConfig::new("windows");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 1;
    config
        .set("commit.interval.ms", &commit_ms.to_string())
        .unwrap();
    let app =
        StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared()).unwrap();
    let metrics = app.thread_metrics();
    app.run_until_idle().unwrap();
    metrics.iter().map(|m| m.dropped_records()).sum()
}

/// Every output record, in order: (window, value or tombstone).
fn output(log: &Log, session: bool) -> Vec<((String, i64, i64), Option<i64>)> {
    let serde = if session {
        Serdes::session_windowed(Serdes::string())
    } else {
        Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE))
    };
    let mut out = Vec::new();
    for p in 0..log.partitions("out").unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new("out", p), 0, usize::MAX)
            .unwrap()
        {
            for r in batch.records() {
                let r = r.unwrap();
                let k: Windowed<String> = serde.deserialize(r.key().map(|b| &b[..])).unwrap();
                let v = r
                    .value()
                    .map(|b| i64::from_be_bytes(b[..].try_into().unwrap()));
                out.push(((k.key, k.window.start, k.window.end), v));
            }
        }
    }
    out
}

/// Runs two phases with a restart between, and checks the output against the model over both.
/// `fresh_state`: the second run starts from an empty state directory (restoring from the
/// changelog) rather than the first run's (its checkpoint, for a persistent store).
fn two_phases(store: StoreType, emit: EmitStrategy, session: bool, fresh_state: bool) {
    let log = Log::in_memory();
    log.create_topic("in", 1).unwrap();
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    let a = phase(0, 300);
    let b = phase(6_000, 300);
    append(&log, &a);
    run(&log, first.path(), topology(store, emit, session), 50);
    append(&log, &b);
    let state = if fresh_state {
        second.path()
    } else {
        first.path()
    };
    run(&log, state, topology(store, emit, session), 50);

    let all: Vec<(String, i64)> = a.into_iter().chain(b).collect();
    let spec = spec(session);
    let outcome = spec.run(&all);
    let out = output(&log, session);
    if emit == EmitStrategy::OnWindowClose {
        let mut emitted: BTreeMap<(String, i64, i64), Vec<Option<i64>>> = BTreeMap::new();
        for (w, v) in out {
            emitted.entry(w).or_default().push(v);
        }
        let expected: BTreeMap<_, _> = spec
            .closed(&outcome)
            .into_iter()
            .map(|(w, v)| (w, vec![Some(v)]))
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(
            emitted, expected,
            "each closed window once, across the restart"
        );
    } else {
        let mut latest = BTreeMap::new();
        for (w, v) in out {
            match v {
                Some(v) => latest.insert(w, v),
                None => latest.remove(&w),
            };
        }
        assert_eq!(latest, outcome.finals, "the latest update of every window");
    }
}

#[test]
fn a_persistent_window_store_resumes_from_its_checkpoint() {
    two_phases(
        StoreType::Persistent,
        EmitStrategy::OnWindowUpdate,
        false,
        false,
    );
}

#[test]
fn a_persistent_window_store_in_a_new_state_directory_restores_from_its_changelog() {
    two_phases(
        StoreType::Persistent,
        EmitStrategy::OnWindowUpdate,
        false,
        true,
    );
}

#[test]
fn an_in_memory_window_store_restores_from_its_changelog() {
    two_phases(
        StoreType::InMemory,
        EmitStrategy::OnWindowUpdate,
        false,
        false,
    );
}

#[test]
fn a_session_store_restores_from_its_changelog() {
    two_phases(
        StoreType::InMemory,
        EmitStrategy::OnWindowUpdate,
        true,
        false,
    );
    two_phases(
        StoreType::Persistent,
        EmitStrategy::OnWindowUpdate,
        true,
        true,
    );
}

#[test]
fn emit_on_close_emits_each_window_once_across_a_restart() {
    for store in [StoreType::InMemory, StoreType::Persistent] {
        two_phases(store, EmitStrategy::OnWindowClose, false, false);
        two_phases(store, EmitStrategy::OnWindowClose, false, true);
        two_phases(store, EmitStrategy::OnWindowClose, true, false);
    }
}

/// With caching on and one commit for the whole run, a window's updates collapse into one; the
/// late records are counted as dropped.
#[test]
fn caching_collapses_a_windows_updates_between_commits_and_late_records_are_counted() {
    let log = Log::in_memory();
    log.create_topic("in", 1).unwrap();
    let mut records: Vec<(String, i64)> = (0..100).map(|i| ("k".to_string(), i)).collect();
    records.push(("k".into(), 500));
    records.push(("k".into(), 5)); // [0,100) closed at 120: dropped
    append(&log, &records);
    let state = tempfile::tempdir().unwrap();
    let dropped = run(
        &log,
        state.path(),
        topology(StoreType::InMemory, EmitStrategy::OnWindowUpdate, false),
        600_000,
    );
    assert_eq!(
        output(&log, false),
        [
            (("k".to_string(), 0, 100), Some(100)),
            (("k".to_string(), 500, 600), Some(1))
        ]
    );
    assert_eq!(dropped, 1);
}

/// `with_caching_disabled` forwards every update, windowed or not, even within one commit.
#[test]
fn caching_disabled_forwards_every_update_within_one_commit() {
    let log = Log::in_memory();
    log.create_topic("in", 1).unwrap();
    let records: Vec<(String, i64)> = (0..50).map(|i| ("k".to_string(), i)).collect();
    append(&log, &records);
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    grouped
        .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_millis(
            SIZE,
        )))
        .count_with(Materialized::named("windowed").with_caching_disabled())
        .to_stream()
        .to(
            "out",
            Produced::with(
                Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE)),
                Serdes::i64(),
            ),
        );
    grouped
        .count_with(Materialized::named("plain").with_caching_disabled())
        .to_stream()
        .to("plain", Produced::with(Serdes::string(), Serdes::i64()));
    let state = tempfile::tempdir().unwrap();
    run(&log, state.path(), builder.build().unwrap(), 600_000);
    let windowed: Vec<i64> = output(&log, false).iter().filter_map(|(_, v)| *v).collect();
    assert_eq!(windowed, (1..=50).collect::<Vec<_>>());
    let plain = log
        .fetch(&TopicPartition::new("plain", 0), 0, usize::MAX)
        .unwrap()
        .iter()
        .map(|b| b.records().count())
        .sum::<usize>();
    assert_eq!(plain, 50);
}

/// Sessions of a 10 s gap without grace, emitted on close: what comes out is the same whether
/// the input is processed in one run or split by a restart (a commit, segments dropped, the
/// stores reopened), and equals the model. The two inputs are where it once differed: a session
/// closing on a segment boundary that was dropped before it was emitted, and a late record that
/// could reach a closed session only while its segment was still in the cache.
#[test]
fn session_results_do_not_depend_on_where_a_restart_falls() {
    let gap = 10_000;
    let spec = Spec {
        kind: Kind::Session { gap },
        grace: 0,
    };
    let cases: [&[(&str, i64)]; 2] = [
        &[("a", 59_999), ("b", 69_999), ("b", 70_000), ("b", 95_000)],
        &[("a", 50_000), ("a", 70_000), ("a", 60_000), ("a", 95_000)],
    ];
    for case in cases {
        let records: Vec<(String, i64)> = case.iter().map(|(k, t)| (k.to_string(), *t)).collect();
        let expected: BTreeMap<(String, i64, i64), i64> = spec.closed(&spec.run(&records));
        assert!(!expected.is_empty());
        for split in 1..records.len() {
            for store in [StoreType::InMemory, StoreType::Persistent] {
                let log = Log::in_memory();
                log.create_topic("in", 1).unwrap();
                let state = tempfile::tempdir().unwrap();
                let topology = || session_topology(gap, store);
                append(&log, &records[..split]);
                run(&log, state.path(), topology(), 50);
                append(&log, &records[split..]);
                run(&log, state.path(), topology(), 50);
                let got: BTreeMap<(String, i64, i64), i64> = output(&log, true)
                    .into_iter()
                    .map(|(w, v)| (w, v.unwrap()))
                    .collect();
                assert_eq!(got, expected, "{case:?} split after {split}, {store:?}");
                assert_eq!(
                    output(&log, true).len(),
                    expected.len(),
                    "each session once"
                );
            }
        }
    }
}

fn session_topology(gap: i64, store: StoreType) -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .windowed_by(SessionWindows::of_inactivity_gap_with_no_grace(
            Duration::from_millis(gap as u64),
        ))
        .emit_strategy(EmitStrategy::on_window_close())
        .count_with(Materialized::named("sessions").with_store_type(store))
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::session_windowed(Serdes::string()), Serdes::i64()),
        );
    builder.build().unwrap()
}
