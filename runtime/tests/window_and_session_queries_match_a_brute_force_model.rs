//! Interactive queries of window and session stores on a running application: a hopping
//! windowed count (persistent store) and a session windowed count (in-memory store) over four
//! tasks on two stream threads, read through `app.store(.. window_store / session_store ..)`,
//! give every window and session of the brute-force model of Kafka's window rules (one model
//! run per partition, records in arrival order, late records included) — by key, by key range,
//! by time range and whole, in both directions — while the application runs and after more
//! input; asking for a store as the wrong kind is an `InvalidStateStore` error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod window_model;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Error, Materialized, Serdes, SessionWindows, StreamsApp,
    StreamsBuilder, StreamsConfig, TimeWindows, Topology, Windowed, dsl::StoreType,
    query::QueryableStoreTypes, query::StoreQueryParameters,
};
use window_model::{Kind, Spec, WKey};

const PARTITIONS: u32 = 4;
const SIZE: i64 = 100;
const ADVANCE: i64 = 50;
const GAP: i64 = 30;
const GRACE: i64 = 40;

fn ms(v: i64) -> Duration {
    Duration::from_millis(v as u64)
}

fn topology() -> Topology {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    // Retention far past the input's time span: the store keeps every window the model has.
    grouped
        .windowed_by(TimeWindows::of_size_and_grace(ms(SIZE), ms(GRACE)).advance_by(ms(ADVANCE)))
        .count_with(
            Materialized::named("hopping")
                .with_store_type(StoreType::Persistent)
                .with_retention(Duration::from_secs(3_600)),
        );
    grouped
        .windowed_by(SessionWindows::of_inactivity_gap_and_grace(
            ms(GAP),
            ms(GRACE),
        ))
        .count_with(
            Materialized::named("sessions")
                .with_store_type(StoreType::InMemory)
                .with_retention(Duration::from_secs(3_600)),
        );
    builder.build().unwrap()
}

/// `n` records over 23 keys, timestamps mostly rising from `start`, about one in ten up to 60 ms
/// late (some beyond the grace period: dropped).
fn input(rng: &mut rand::rngs::StdRng, n: usize, start: i64) -> Vec<(String, i64)> {
    let mut base = start;
    (0..n)
        .map(|_| {
            base += rng.random_range(0..6);
            let ts = if rng.random_bool(0.1) {
                (base - rng.random_range(0..60)).max(0)
            } else {
                base
            };
            (format!("k{}", rng.random_range(0..23)), ts)
        })
        .collect()
}

fn append(log: &Log, records: &[(String, i64)]) {
    let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (k, ts) in records {
        let p = partition_for_key(k.as_bytes(), PARTITIONS) as usize;
        builders[p].push(*ts, Some(k.as_bytes()), Some(b"v"));
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            log.append(&TopicPartition::new("in", p as u32), b).unwrap();
        }
    }
}

/// The model's windows (or sessions) of every partition: each partition is one task, with its
/// own stream time, seeing its records in arrival order.
fn model(spec: &Spec, records: &[(String, i64)]) -> BTreeMap<WKey, i64> {
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        let mine: Vec<(String, i64)> = records
            .iter()
            .filter(|(k, _)| partition_for_key(k.as_bytes(), PARTITIONS) == p)
            .cloned()
            .collect();
        out.extend(spec.run(&mine).finals);
    }
    out
}

fn wkey(w: &Windowed<String>) -> WKey {
    (w.key.clone(), w.window.start, w.window.end)
}

fn as_model(found: Vec<(Windowed<String>, i64)>) -> Vec<(WKey, i64)> {
    found.into_iter().map(|(w, v)| (wkey(&w), v)).collect()
}

fn wait_idle(app: &StreamsApp) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !app.is_idle() {
        assert!(Instant::now() < deadline, "never idle");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn window_and_session_queries_give_the_models_windows_while_the_app_runs() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    log.create_topic("in", PARTITIONS).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1a);
    let mut written = input(&mut rng, 3_000, 0);
    append(&log, &written);
    let mut config = StreamsConfig::new("window-queries");
    config.state_dir = dir.path().join("state");
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    let mut app = StreamsApp::new(
        topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();

    let as_kv = app.store(StoreQueryParameters::from_name_and_type(
        "hopping",
        QueryableStoreTypes::key_value::<String, i64>(),
    ));
    let err = as_kv.expect_err("a window store is not a key-value store");
    assert!(
        err.to_string()
            .contains("is a window store, not a key-value store"),
        "{err}"
    );
    let as_window = app.store(StoreQueryParameters::from_name_and_type(
        "sessions",
        QueryableStoreTypes::window_store::<String, i64>(),
    ));
    let err = as_window.expect_err("a session store is not a window store");
    assert!(
        err.to_string()
            .contains("is a session store, not a window store"),
        "{err}"
    );
    let wrong_values = app.store(StoreQueryParameters::from_name_and_type(
        "hopping",
        QueryableStoreTypes::window_store::<String, String>(),
    ));
    assert!(matches!(wrong_values, Err(Error::InvalidStateStore { .. })));

    let windows = app
        .store(StoreQueryParameters::from_name_and_type(
            "hopping",
            QueryableStoreTypes::window_store::<String, i64>(),
        ))
        .unwrap();
    let sessions = app
        .store(StoreQueryParameters::from_name_and_type(
            "sessions",
            QueryableStoreTypes::session_store::<String, i64>(),
        ))
        .unwrap();
    let hopping = Spec {
        kind: Kind::Time {
            size: SIZE,
            advance: ADVANCE,
        },
        grace: GRACE,
    };
    let session = Spec {
        kind: Kind::Session { gap: GAP },
        grace: GRACE,
    };
    app.start().unwrap();
    for round in 0..2 {
        wait_idle(&app);
        let expected = model(&hopping, &written);
        assert!(
            expected.len() > 500,
            "round {round}: {} windows",
            expected.len()
        );
        let all: Vec<(WKey, i64)> = expected.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(as_model(windows.all().unwrap()), all, "round {round}");
        let mut backward = all.clone();
        backward.reverse();
        assert_eq!(as_model(windows.backward_all().unwrap()), backward);
        for key in (0..23).map(|k| format!("k{k}")) {
            let mine: Vec<(i64, i64)> = expected
                .iter()
                .filter(|((k, _, _), _)| *k == key)
                .map(|((_, start, _), v)| (*start, *v))
                .collect();
            assert_eq!(
                windows.fetch(&key, i64::MIN, i64::MAX).unwrap(),
                mine,
                "round {round}: {key}"
            );
            let (from, to) = (1_000, 2_000);
            let within: Vec<(i64, i64)> = mine
                .iter()
                .filter(|(s, _)| (from..=to).contains(s))
                .copied()
                .collect();
            assert_eq!(windows.fetch(&key, from, to).unwrap(), within, "{key}");
            let mut back = within.clone();
            back.reverse();
            assert_eq!(windows.backward_fetch(&key, from, to).unwrap(), back);
            if let Some(&(start, count)) = mine.get(mine.len() / 2) {
                assert_eq!(windows.fetch_window(&key, start).unwrap(), Some(count));
                assert_eq!(windows.fetch_window(&key, start + 1).unwrap(), None);
            }
        }
        let (kf, kt, tf, tt) = ("k10".to_owned(), "k15".to_owned(), 500, 4_000);
        let ranged: Vec<(WKey, i64)> = all
            .iter()
            .filter(|((k, s, _), _)| *k >= kf && *k <= kt && (tf..=tt).contains(s))
            .cloned()
            .collect();
        assert_eq!(
            as_model(windows.fetch_range(&kf, &kt, tf, tt).unwrap()),
            ranged
        );
        let timed: Vec<(WKey, i64)> = all
            .iter()
            .filter(|((_, s, _), _)| (tf..=tt).contains(s))
            .cloned()
            .collect();
        assert_eq!(as_model(windows.fetch_all(tf, tt).unwrap()), timed);
        assert_eq!(
            windows.fetch(&"absent".to_owned(), 0, i64::MAX).unwrap(),
            vec![]
        );

        let expected = model(&session, &written);
        assert!(
            expected.len() > 100,
            "round {round}: {} sessions",
            expected.len()
        );
        for key in (0..23).map(|k| format!("k{k}")) {
            let mine: Vec<(WKey, i64)> = expected
                .iter()
                .filter(|((k, _, _), _)| *k == key)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            assert_eq!(
                as_model(sessions.fetch(&key).unwrap()),
                mine,
                "round {round}: {key}"
            );
            let mut back = mine.clone();
            back.reverse();
            assert_eq!(as_model(sessions.backward_fetch(&key).unwrap()), back);
            // The sessions a record at 1,500 with the gap could join.
            let (earliest_end, latest_start) = (1_500 - GAP, 1_500 + GAP);
            let near: Vec<(WKey, i64)> = mine
                .iter()
                .filter(|((_, s, e), _)| *e >= earliest_end && *s <= latest_start)
                .cloned()
                .collect();
            assert_eq!(
                as_model(
                    sessions
                        .find_sessions(&key, earliest_end, latest_start)
                        .unwrap()
                ),
                near
            );
            if let Some(((_, start, end), count)) = mine.first() {
                assert_eq!(
                    sessions.fetch_session(&key, *start, *end).unwrap(),
                    Some(*count)
                );
                assert_eq!(sessions.fetch_session(&key, *start, end + 1).unwrap(), None);
            }
        }
        let (kf, kt) = ("k3".to_owned(), "k7".to_owned());
        let ranged: Vec<(WKey, i64)> = expected
            .iter()
            .filter(|((k, _, _), _)| *k >= kf && *k <= kt)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(as_model(sessions.fetch_range(&kf, &kt).unwrap()), ranged);

        // More input while it runs, later in time.
        let more = input(&mut rng, 2_000, written.iter().map(|r| r.1).max().unwrap());
        append(&log, &more);
        written.extend(more);
    }
    app.close().unwrap();
    let err = windows
        .fetch(&"k1".to_owned(), 0, i64::MAX)
        .expect_err("the application stopped");
    assert!(matches!(err, Error::InvalidStateStore { .. }), "{err}");
    assert!(sessions.fetch(&"k1".to_owned()).is_err());
}
