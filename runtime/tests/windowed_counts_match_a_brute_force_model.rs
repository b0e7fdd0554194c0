//! Windowed counts of all four window kinds, with both emit strategies, against a brute-force
//! replay of Kafka Streams' window rules (tests/window_model): random keys, timestamps, disorder
//! (some records beyond grace) and grace, on the test driver and on real stream threads; every
//! tombstone deletes a window the output holds (a session never emitted is never deleted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

mod window_model;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use riffle::log::{BatchBuilder, Compression, Log, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, SerdeRef, Serdes, SessionWindows,
    SlidingWindows, StreamsApp, StreamsBuilder, StreamsConfig, TimeWindows, Topology,
    TopologyTestDriver, Windowed, dsl::BufferConfig, dsl::StoreType, dsl::Suppressed,
    window::EmitStrategy,
};
use window_model::{Kind, Outcome, Spec, WKey};

/// How the topology turns its count into output.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Emit {
    Updates,
    Final,
    /// Updates, then `suppress(until_window_closes)`.
    Suppressed,
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n as u64)
}

fn key_serde(spec: &Spec) -> SerdeRef<Windowed<String>> {
    match spec.kind {
        Kind::Time { size, .. } => Serdes::time_windowed(Serdes::string(), ms(size)),
        Kind::Sliding { diff } => Serdes::time_windowed(Serdes::string(), ms(diff)),
        Kind::Session { .. } => Serdes::session_windowed(Serdes::string()),
    }
}

fn topology(spec: &Spec, emit: Emit, store: StoreType, caching: bool) -> Topology {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    let mut materialized = Materialized::named("counts").with_store_type(store);
    if !caching {
        materialized = materialized.with_caching_disabled();
    }
    let strategy = if emit == Emit::Final {
        EmitStrategy::on_window_close()
    } else {
        EmitStrategy::on_window_update()
    };
    let grace = ms(spec.grace);
    let table = match spec.kind {
        Kind::Time { size, advance } => grouped
            .windowed_by(TimeWindows::of_size_and_grace(ms(size), grace).advance_by(ms(advance)))
            .emit_strategy(strategy)
            .count_with(materialized),
        Kind::Sliding { diff } => grouped
            .windowed_by(SlidingWindows::of_time_difference_and_grace(
                ms(diff),
                grace,
            ))
            .emit_strategy(strategy)
            .count_with(materialized),
        Kind::Session { gap } => grouped
            .windowed_by(SessionWindows::of_inactivity_gap_and_grace(ms(gap), grace))
            .emit_strategy(strategy)
            .count_with(materialized),
    };
    let table = if emit == Emit::Suppressed {
        table.suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
    } else {
        table
    };
    table
        .to_stream()
        .to("out", Produced::with(key_serde(spec), Serdes::i64()));
    builder.build().unwrap()
}

fn wkey(w: &Windowed<String>) -> WKey {
    (w.key.clone(), w.window.start, w.window.end)
}

/// Checks the output of one task (in order) against the model's outcome.
fn check(
    spec: &Spec,
    emit: Emit,
    outcome: &Outcome,
    output: &[(Windowed<String>, Option<i64>)],
) -> Result<(), TestCaseError> {
    let mut per_window: BTreeMap<WKey, Vec<Option<i64>>> = BTreeMap::new();
    // The windows emitted and not deleted since, as a reader of the output sees them: a
    // tombstone deletes one of them, never a window the output did not hold (a session created
    // and merged away between two commits was never emitted, so its delete goes nowhere, as
    // Kafka's caching session store skips it).
    let mut live = std::collections::BTreeSet::new();
    for (i, (k, v)) in output.iter().enumerate() {
        per_window.entry(wkey(k)).or_default().push(*v);
        match v {
            Some(_) => {
                live.insert(wkey(k));
            }
            None => prop_assert!(
                live.remove(&wkey(k)),
                "output {} of {} deletes window {:?}, which the output does not hold",
                i,
                output.len(),
                wkey(k)
            ),
        }
    }
    match emit {
        Emit::Final | Emit::Suppressed => {
            // Each closed window exactly once, with its final count; nothing else.
            let emitted: BTreeMap<WKey, Vec<Option<i64>>> = per_window;
            let expected: BTreeMap<WKey, Vec<Option<i64>>> = spec
                .closed(outcome)
                .into_iter()
                .map(|(k, v)| (k, vec![Some(v)]))
                .collect();
            prop_assert_eq!(emitted, expected);
        }
        Emit::Updates => {
            for (w, values) in &per_window {
                let last = *values.last().unwrap();
                match outcome.finals.get(w) {
                    Some(&final_count) => {
                        prop_assert_eq!(last, Some(final_count), "window {:?}: {:?}", w, values);
                        // Every update is a count the window had: rising, within 1..=final.
                        let counts: Vec<i64> = values.iter().flatten().copied().collect();
                        prop_assert!(
                            counts.windows(2).all(|p| p[0] <= p[1])
                                || matches!(spec.kind, Kind::Session { .. }),
                            "window {:?}: {:?}",
                            w,
                            values
                        );
                        prop_assert!(counts.iter().all(|&c| (1..=final_count).contains(&c)));
                    }
                    None => {
                        prop_assert!(
                            outcome.removed.contains(w),
                            "window {:?} is not in the model: {:?}",
                            w,
                            values
                        );
                        prop_assert_eq!(last, None, "a merged-away session ends with a tombstone");
                    }
                }
            }
            for w in outcome.finals.keys() {
                prop_assert!(per_window.contains_key(w), "window {:?} never emitted", w);
            }
        }
    }
    Ok(())
}

/// Records: (key, timestamp) with mostly rising timestamps and some out of order.
fn records() -> impl Strategy<Value = Vec<(String, i64)>> {
    proptest::collection::vec(
        (0u8..3, 0i64..12, proptest::bool::weighted(0.15), 0i64..60),
        1..90,
    )
    .prop_map(|raw| {
        let mut base = 0i64;
        raw.into_iter()
            .map(|(k, step, late, back)| {
                base += step;
                let ts = if late { (base - back).max(0) } else { base };
                (format!("k{k}"), ts)
            })
            .collect()
    })
}

fn spec() -> impl Strategy<Value = Spec> {
    let kind = prop_oneof![
        (1i64..40).prop_map(|size| Kind::Time {
            size,
            advance: size
        }),
        (2i64..40, 1i64..40).prop_map(|(size, a)| Kind::Time {
            size,
            advance: a.min(size)
        }),
        (1i64..30).prop_map(|diff| Kind::Sliding { diff }),
        (1i64..20).prop_map(|gap| Kind::Session { gap }),
    ];
    (kind, 0i64..30).prop_map(|(kind, grace)| Spec { kind, grace })
}

/// Multiplies every time by `k`: with `k = 1000` the records span minutes, so the stores' 60 s
/// segments expire while the aggregations run (what they read must not depend on when).
fn scaled(spec: Spec, records: Vec<(String, i64)>, k: i64) -> (Spec, Vec<(String, i64)>) {
    let kind = match spec.kind {
        Kind::Time { size, advance } => Kind::Time {
            size: size * k,
            advance: advance * k,
        },
        Kind::Sliding { diff } => Kind::Sliding { diff: diff * k },
        Kind::Session { gap } => Kind::Session { gap: gap * k },
    };
    let records = records.into_iter().map(|(key, ts)| (key, ts * k)).collect();
    (
        Spec {
            kind,
            grace: spec.grace * k,
        },
        records,
    )
}

fn scale() -> impl Strategy<Value = i64> {
    prop_oneof![Just(1i64), Just(1_000i64)]
}

fn emit() -> impl Strategy<Value = Emit> {
    prop_oneof![
        Just(Emit::Updates),
        Just(Emit::Final),
        Just(Emit::Suppressed)
    ]
}

fn thread_emit() -> impl Strategy<Value = Emit> {
    emit()
}

fn run_driver(
    spec: &Spec,
    emit: Emit,
    store: StoreType,
    caching: bool,
    records: &[(String, i64)],
) -> (Vec<(Windowed<String>, Option<i64>)>, u64) {
    let driver = TopologyTestDriver::new(
        topology(spec, emit, store, caching),
        StreamsConfig::new("w"),
    )
    .unwrap();
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let output =
        driver.create_output_topic("out", key_serde(spec), Serdes::optional(Serdes::i64()));
    for (k, ts) in records {
        input.pipe_input_at(k.clone(), "v".into(), *ts).unwrap();
    }
    let out = output.read_key_values_to_list().unwrap();
    (out, driver.dropped_records())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The test driver (one task, a commit after every record) matches the model for every
    /// window kind and emit strategy, with caching on and off.
    #[test]
    fn the_test_driver_matches_the_model(
        spec in spec(),
        emit in emit(),
        caching in any::<bool>(),
        records in records(),
        scale in scale(),
    ) {
        let (spec, mut records) = scaled(spec, records, scale);
        if let Kind::Sliding { diff } = spec.kind {
            window_model::sliding_in_model_reach(&mut records, diff, spec.grace);
        }
        let outcome = spec.run(&records);
        let (output, dropped) = run_driver(&spec, emit, StoreType::InMemory, caching, &records);
        check(&spec, emit, &outcome, &output)?;
        if !matches!(spec.kind, Kind::Sliding { .. }) {
            prop_assert_eq!(dropped, outcome.dropped, "dropped-records");
        }
    }
}

/// One task's input (key, timestamp) in arrival order, per input partition.
type PerPartition = BTreeMap<u32, Vec<(String, i64)>>;

/// Runs the windowed count on two stream threads over the embedded log, `records` partitioned
/// by key over `partitions` (`configure` changes the configuration): each input partition's
/// records and, per input partition, the output its task wrote, in order.
#[allow(clippy::type_complexity)]
fn run_threads(
    spec: &Spec,
    emit: Emit,
    store: StoreType,
    caching: bool,
    records: &[(String, i64)],
    partitions: u32,
    configure: impl FnOnce(&mut StreamsConfig),
) -> (
    PerPartition,
    BTreeMap<u32, Vec<(Windowed<String>, Option<i64>)>>,
) {
    let log = Log::in_memory();
    log.create_topic("in", partitions).unwrap();
    let mut per_partition: PerPartition = BTreeMap::new();
    for (k, ts) in records {
        let p = partition_for_key(k.as_bytes(), partitions);
        per_partition.entry(p).or_default().push((k.clone(), *ts));
    }
    for (p, recs) in per_partition.iter_mut() {
        if let Kind::Sliding { diff } = spec.kind {
            window_model::sliding_in_model_reach(recs, diff, spec.grace);
        }
        let mut b = BatchBuilder::new(Compression::None);
        for (k, ts) in recs.iter() {
            b.push(*ts, Some(k.as_bytes()), Some(b"v"));
        }
        log.append(&TopicPartition::new("in", *p), &mut b).unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    let mut config = StreamsConfig::new("w");
    config.state_dir = state.path().to_owned();
    config.num_stream_threads = 2;
    configure(&mut config);
    let app = StreamsApp::new(
        topology(spec, emit, store, caching),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    app.run_until_idle().unwrap();
    let serde = key_serde(spec);
    let value = Serdes::optional(Serdes::i64());
    let mut output: BTreeMap<u32, Vec<(Windowed<String>, Option<i64>)>> = BTreeMap::new();
    for p in 0..log.partitions("out").unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new("out", p), 0, usize::MAX)
            .unwrap()
        {
            for r in batch.records() {
                let r = r.unwrap();
                let k = serde.deserialize(r.key().map(|b| &b[..])).unwrap();
                let v = value.deserialize(r.value().map(|b| &b[..])).unwrap();
                // Output is partitioned by the windowed key: regroup by input partition.
                let input = partition_for_key(k.key.as_bytes(), partitions);
                output.entry(input).or_default().push((k, v));
            }
        }
    }
    (per_partition, output)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Stream threads over the embedded log, with several partitions (stream time is per task)
    /// and the persistent store, caching on and off, commit on their own schedule: the last
    /// update of every window is the model's, and emit-on-close emits each closed window once.
    #[test]
    fn stream_threads_match_the_model(
        spec in spec(),
        emit in thread_emit(),
        records in records(),
        partitions in 1u32..4,
        persistent in any::<bool>(),
        caching in any::<bool>(),
        scale in scale(),
    ) {
        let (spec, records) = scaled(spec, records, scale);
        let store = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        let (per_partition, mut output) =
            run_threads(&spec, emit, store, caching, &records, partitions, |_| {});
        for (p, recs) in &per_partition {
            let outcome = spec.run(recs);
            let out = output.remove(p).unwrap_or_default();
            check(&spec, emit, &outcome, &out)?;
        }
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Session windows on stream threads that commit after a few records or after all of
    /// them (a small cache or a short interval commits early; `statestore_cache_max_bytes = 0`
    /// disables caching), over 1 and 3 partitions: every session's last update is the
    /// model's, and every tombstone deletes a session the output holds: a session created and
    /// merged away between two commits was never emitted and gets no tombstone.
    #[test]
    fn stream_threads_delete_only_the_sessions_they_emitted(
        gap in 1i64..20,
        grace in 0i64..30,
        records in records(),
        partitions in prop_oneof![Just(1u32), Just(3u32)],
        cache in prop_oneof![Just(0usize), Just(300usize), Just(3_000usize), Just(10usize << 20)],
        interval in prop_oneof![Just(1u64), Just(20u64), Just(30_000u64)],
        caching in any::<bool>(),
        persistent in any::<bool>(),
    ) {
        let spec = Spec { kind: Kind::Session { gap }, grace };
        let store = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        let (per_partition, mut output) =
            run_threads(&spec, Emit::Updates, store, caching, &records, partitions, |c| {
                c.statestore_cache_max_bytes = cache;
                c.commit_interval = Some(Duration::from_millis(interval));
            });
        for (p, recs) in &per_partition {
            let outcome = spec.run(recs);
            let out = output.remove(p).unwrap_or_default();
            check(&spec, Emit::Updates, &outcome, &out)?;
        }
    }
}
