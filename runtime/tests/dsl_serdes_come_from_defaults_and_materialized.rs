//! Where the DSL's serdes come from when a call names none, and what `Materialized` changes:
//!
//! - `riffle::json_default_serde!` gives `serde` types JSON as their default serde, so
//!   `group_by_key()` and `count()` take them (counts exact against a `HashMap`; the store's
//!   changelog keys are the keys' JSON);
//! - `Materialized::with(key_serde, value_serde)` (Kafka's `Materialized.with`) writes the
//!   store, and so its changelog, with those serdes (bytes written out by hand: Kafka's
//!   `IntegerSerde`, a JSON string);
//! - DSL stores are persistent unless told otherwise, as Kafka's: after a restart a default
//!   store restores nothing written before its checkpoint, an in-memory one restores all.

use std::collections::HashMap;

use proptest::prelude::*;
use riffle::dsl::StoreType;
use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, TopologyTestDriver,
};
use serde::{Deserialize, Serialize};

mod common;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct User {
    id: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PageView {
    page: String,
}

riffle::json_default_serde!(User, PageView);

fn views_topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream(
            "views",
            Consumed::with(Serdes::json::<User>(), Serdes::json::<PageView>()),
        )
        .group_by_key()
        .count_with(Materialized::named("views-per-user"))
        .to_stream()
        .to("counts", Produced::with(Serdes::json(), Serdes::i64()));
    builder.build().expect("topology")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// `group_by_key().count()` over JSON keys and values, with no serde named for the
    /// grouping: exact counts, and the changelog keyed by each user's JSON.
    #[test]
    fn json_default_serdes_group_and_count(users in proptest::collection::vec(0u32..6, 1..40)) {
        let driver = TopologyTestDriver::new(views_topology(), StreamsConfig::new("views"))
            .expect("driver");
        let views = driver.create_input_topic("views", Serdes::json(), Serdes::json());
        for (i, &id) in users.iter().enumerate() {
            views
                .pipe_input(User { id }, PageView { page: format!("/p{i}") })
                .expect("pipe");
        }
        let mut model: HashMap<User, i64> = HashMap::new();
        for &id in &users {
            *model.entry(User { id }).or_default() += 1;
        }
        let counts = driver.create_output_topic("counts", Serdes::json::<User>(), Serdes::i64());
        let counted: HashMap<User, i64> =
            counts.read_key_values_to_map().expect("counts").into_iter().collect();
        prop_assert_eq!(counted, model);
        let changelog = driver
            .read_raw("views-views-per-user-changelog", 0)
            .expect("changelog");
        for record in &changelog {
            let key = record.key().map(|k| k.to_vec()).unwrap_or_default();
            let text = String::from_utf8(key).expect("utf-8");
            prop_assert!(text.starts_with("{\"id\":") && text.ends_with('}'), "{}", text);
        }
    }
}

/// `Materialized::with` names the store's serdes: keys as JSON strings (`"k"`, quotes
/// included) though the grouping's are plain strings, counts as Kafka's 4-byte `IntegerSerde`
/// though the aggregation's own serde is JSON.
#[test]
fn materialized_with_writes_the_store_with_its_serdes() {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::string()))
        .aggregate(
            || 0i32,
            |_, _, n| n + 1,
            Materialized::with(Serdes::json::<String>(), Serdes::i32()),
            Serdes::json::<i32>(),
        )
        .to_stream()
        .to("out", Produced::with(Serdes::json(), Serdes::i32()));
    let topology = builder.build().expect("topology");
    let stores = topology.store_names();
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("mat")).expect("driver");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    for k in ["k", "k", "ab", "k"] {
        input.pipe_input(k.into(), "v".into()).expect("pipe");
    }
    let changelog = format!("mat-{}-changelog", stores[0]);
    let written: Vec<(Vec<u8>, Vec<u8>)> = driver
        .read_raw(&changelog, 0)
        .expect("changelog")
        .iter()
        .map(|r| {
            let bytes = |b: Option<Vec<u8>>| b.unwrap_or_default();
            (
                bytes(r.key().map(|k| k.to_vec())),
                bytes(r.value().map(|v| v.to_vec())),
            )
        })
        .collect();
    // The driver commits after each record: every update reaches the changelog.
    let expected: Vec<(Vec<u8>, Vec<u8>)> = [
        (&b"\"k\""[..], [0u8, 0, 0, 1]),
        (b"\"k\"", [0, 0, 0, 2]),
        (b"\"ab\"", [0, 0, 0, 1]),
        (b"\"k\"", [0, 0, 0, 3]),
    ]
    .iter()
    .map(|(k, v)| (k.to_vec(), v.to_vec()))
    .collect();
    assert_eq!(written, expected);
    let out = driver.create_output_topic("out", Serdes::json::<String>(), Serdes::i32());
    let counts = out.read_key_values_to_map().expect("out");
    assert_eq!(counts.get("k"), Some(&3));
    assert_eq!(counts.get("ab"), Some(&1));
}

/// A count in a store of `store_type` (`None`: the default), run twice on stream threads over
/// the same log and state directory: what the second run restored.
fn restored_on_restart(store_type: Option<StoreType>) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let records: Vec<(String, String)> = (0..200)
        .map(|i| (format!("k{}", i % 17), format!("v{i}")))
        .collect();
    common::produce(&log, "in", 2, &records);
    let topology = || {
        let builder = StreamsBuilder::new();
        let materialized = Materialized::named("counts");
        let materialized = match store_type {
            Some(t) => materialized.with_store_type(t),
            None => materialized,
        };
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .group_by_key()
            .count_with(materialized)
            .to_stream()
            .to("out", Produced::with(Serdes::string(), Serdes::i64()));
        builder.build().expect("topology")
    };
    let run = || {
        let mut config = StreamsConfig::new("restarts");
        config.state_dir = dir.path().join("state");
        config.poll = std::time::Duration::from_millis(5);
        let app = StreamsApp::new(
            topology(),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .expect("app");
        common::run_until_idle(app)
    };
    let (processed, _) = run();
    assert_eq!(processed, 200);
    let model = common::count_model(records.iter().map(|(k, _)| k.as_str()));
    assert_eq!(common::latest_longs(&log, "out"), model);
    let (processed, restored) = run();
    assert_eq!(processed, 0);
    restored
}

#[test]
fn dsl_stores_are_persistent_unless_told() {
    assert_eq!(
        restored_on_restart(None),
        0,
        "persistent: its checkpoint is current"
    );
    assert_eq!(restored_on_restart(Some(StoreType::Persistent)), 0);
    assert!(
        restored_on_restart(Some(StoreType::InMemory)) > 0,
        "in memory: restored from the changelog"
    );
}
