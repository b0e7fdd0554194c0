//! Table–table joins (inner, left, outer; unmaterialized and materialized) against a model: two
//! `HashMap` tables replayed in arrival order, each key's joined row computed from both tables'
//! rows, and Kafka Streams' rules for when an update of either table emits (`KTableKTableInner-`,
//! `Left-`, `Right-` and `OuterJoin`: an inner join emits while the other table has the key, a
//! left join's left side unless both it and the right have nothing, its right side while the
//! left has the key, an outer join unless neither has anything; the emitted row is the key's
//! joined row after the update, a delete when there is none, with the larger of the two rows'
//! timestamps). Grouped aggregations of join results check the old values a join sends.
//! Record by record in the test driver by proptest; on stream threads over the file-backed log,
//! where commits collapse updates, each key's last output and the grouped sums; and with
//! `statestore_cache_max_bytes = 0` (caching disabled) record by record on stream threads too,
//! as Kafka's uncached joins emit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{produce_longs, table_of_longs, two_thread_config, wait_idle};
use proptest::prelude::*;
use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, KTable, Materialized, Produced, Serdes, StreamsApp,
    StreamsBuilder, StreamsConfig, Topology, TopologyTestDriver, dsl::StoreType,
    query::QueryableStoreTypes, query::StoreQueryParameters,
};

const NONE: i64 = -1;

/// The joiners, for all kinds: `left * 100 + right`, a missing side as -1.
fn joined(l: Option<i64>, r: Option<i64>) -> i64 {
    l.unwrap_or(NONE) * 100 + r.unwrap_or(NONE)
}

/// A joined row's group: its parity.
fn parity(v: i64) -> String {
    format!("p{}", v.rem_euclid(2))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Inner,
    Left,
    Outer,
}

/// The joins under test: output topic, kind, whether a grouped sum reads it, whether it is
/// materialized. With a left and an outer join among them, both tables send old values to
/// every join of them (as Kafka's `sendOldValues` on a table's source).
const JOINS: [(&str, Kind, bool, bool); 6] = [
    ("inner", Kind::Inner, true, false),
    ("left", Kind::Left, true, false),
    ("left-plain", Kind::Left, false, false),
    ("outer", Kind::Outer, false, false),
    ("outer-materialized", Kind::Outer, false, true),
    ("left-materialized", Kind::Left, true, true),
];

/// Each join of [`JOINS`] to its topic (deletes as nulls), and with `grouping`, for those with
/// a grouped sum, the sum of its rows per parity to `<topic>-sums` (store `<topic>-sums`).
fn topology(store_type: StoreType, grouping: bool) -> Topology {
    let builder = StreamsBuilder::new();
    let read = |topic: &str| {
        builder.table(
            topic,
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::named(format!("{topic}-rows")).with_store_type(store_type),
        )
    };
    let (left, right) = (read("left-rows"), read("right-rows"));
    for (topic, kind, grouped, materialized) in JOINS {
        let m = || Materialized::named(format!("{topic}-store")).with_store_type(store_type);
        let table: KTable<String, i64> = match (kind, materialized) {
            (Kind::Inner, false) => {
                left.join(&right, |l, r| joined(Some(l), Some(r)), Serdes::i64())
            }
            (Kind::Inner, true) => {
                left.join_with(&right, |l, r| joined(Some(l), Some(r)), Serdes::i64(), m())
            }
            (Kind::Left, false) => left.left_join(&right, |l, r| joined(Some(l), r), Serdes::i64()),
            (Kind::Left, true) => {
                left.left_join_with(&right, |l, r| joined(Some(l), r), Serdes::i64(), m())
            }
            (Kind::Outer, false) => left.outer_join(&right, joined, Serdes::i64()),
            (Kind::Outer, true) => left.outer_join_with(&right, joined, Serdes::i64(), m()),
        };
        table
            .map_values(Some, Serdes::optional(Serdes::i64()))
            .to_stream()
            .to(
                topic,
                Produced::with(Serdes::string(), Serdes::optional(Serdes::i64())),
            );
        if grouped && grouping {
            table
                .group_by(
                    |_, v| (parity(v), v * v),
                    Grouped::with(Serdes::string(), Serdes::i64()),
                )
                .reduce(
                    |a, v| a + v,
                    |a, v| a - v,
                    Materialized::named(format!("{topic}-sums")).with_store_type(store_type),
                )
                .to_stream()
                .to(
                    &format!("{topic}-sums"),
                    Produced::with(Serdes::string(), Serdes::i64()),
                );
        }
    }
    builder.build().expect("topology")
}

#[derive(Clone, Copy, Debug)]
enum Input {
    /// A row of the left (`true`) or right table; `None` deletes.
    Row(bool, u8, Option<i64>),
}

fn key(k: u8) -> String {
    format!("k{k}")
}

/// An output: key, value (`None`: a delete), timestamp.
type Output = (String, Option<i64>, i64);

#[derive(Default)]
struct Model {
    /// A grouping reads the joins [`JOINS`] marks.
    grouping: bool,
    /// The tables' caches are disabled (`statestore_cache_max_bytes = 0`): every update goes
    /// downstream, a delete of a key the table did not hold too (Kafka's uncached `KTable`).
    uncached: bool,
    left: HashMap<String, (i64, i64)>,
    right: HashMap<String, (i64, i64)>,
    outputs: BTreeMap<String, Vec<Output>>,
    /// Per joined topic with a grouped sum: parity → (sum, timestamp).
    sums: BTreeMap<String, BTreeMap<String, (i64, i64)>>,
}

impl Model {
    /// The key's joined row of `kind` from the tables as they are.
    fn row(&self, kind: Kind, k: &str) -> Option<i64> {
        let (l, r) = (
            self.left.get(k).map(|x| x.0),
            self.right.get(k).map(|x| x.0),
        );
        let joins = match kind {
            Kind::Inner => l.is_some() && r.is_some(),
            Kind::Left => l.is_some(),
            Kind::Outer => l.is_some() || r.is_some(),
        };
        joins.then(|| joined(l, r))
    }

    fn apply(&mut self, input: Input, ts: i64) {
        let Input::Row(is_left, k, row) = input;
        let k = key(k);
        let before: Vec<Option<i64>> = JOINS.iter().map(|j| self.row(j.1, &k)).collect();
        let (this, other) = if is_left {
            (&mut self.left, &self.right)
        } else {
            (&mut self.right, &self.left)
        };
        let old = match row {
            Some(v) => this.insert(k.clone(), (v, ts)),
            None => this.remove(&k),
        };
        // A delete of a key the table did not hold goes nowhere (Kafka's caching store skips
        // it); without a cache it goes on, as Kafka's uncached table forwards every update.
        if row.is_none() && old.is_none() && !self.uncached {
            return;
        }
        let other = other.get(&k).copied();
        for (i, (topic, kind, grouped, _)) in JOINS.into_iter().enumerate() {
            let grouped = grouped && self.grouping;
            let old_sent = old.is_some();
            let emits = match (kind, is_left) {
                (Kind::Inner, _) | (Kind::Left, false) => other.is_some(),
                (Kind::Left, true) | (Kind::Outer, _) => {
                    other.is_some() || row.is_some() || old_sent
                }
            };
            if !emits {
                continue;
            }
            let ts = other.map_or(ts, |(_, t)| t.max(ts));
            let after = self.row(kind, &k);
            self.outputs
                .entry(topic.to_owned())
                .or_default()
                .push((k.clone(), after, ts));
            if grouped {
                let sums = self.sums.entry(topic.to_owned()).or_default();
                group_update(sums, after, before[i], ts);
            }
        }
    }
}

/// A grouped reduce (sum of squares) of a joined table's update from `old` to `new` at `ts`
/// (Kafka's `KTableRepartitionMap` then `KTableReduce`); the stores' end states are compared.
fn group_update(
    sums: &mut BTreeMap<String, (i64, i64)>,
    new: Option<i64>,
    old: Option<i64>,
    ts: i64,
) {
    let mut apply = |g: String, add: Option<i64>, sub: Option<i64>| {
        let before = sums.get(&g).copied();
        let rest = match (sub, before) {
            (Some(s), Some((a, _))) => Some(a - s),
            (_, b) => b.map(|(a, _)| a),
        };
        let agg = match (add, rest) {
            (Some(v), Some(r)) => r + v,
            (Some(v), None) => v,
            (None, Some(r)) => r,
            (None, None) => return,
        };
        sums.insert(g, (agg, before.map_or(ts, |(_, t)| t.max(ts))));
    };
    match (new, old) {
        (Some(n), Some(o)) if parity(n) == parity(o) => apply(parity(n), Some(n * n), Some(o * o)),
        (n, o) => {
            if let Some(o) = o {
                apply(parity(o), None, Some(o * o));
            }
            if let Some(n) = n {
                apply(parity(n), Some(n * n), None);
            }
        }
    }
}

fn input() -> impl Strategy<Value = Input> {
    (any::<bool>(), 0u8..5, prop::option::weighted(0.7, 0i64..9))
        .prop_map(|(l, k, v)| Input::Row(l, k, v))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every join, record by record: each output (value or delete, timestamp) in order, the
    /// materialized joins' stores, and the grouped sums of joined rows.
    #[test]
    fn the_test_driver_joins_tables_as_the_model_does(
        inputs in prop::collection::vec((input(), 0i64..40), 1..50),
        grouping in any::<bool>(),
    ) {
        let driver = TopologyTestDriver::new(topology(StoreType::InMemory, grouping), StreamsConfig::new("tt"))
            .expect("driver");
        let left = driver.create_input_topic("left-rows", Serdes::string(), Serdes::i64());
        let right = driver.create_input_topic("right-rows", Serdes::string(), Serdes::i64());
        let mut model = Model { grouping, ..Model::default() };
        for (input, ts) in &inputs {
            let Input::Row(is_left, k, row) = *input;
            let topic = if is_left { &left } else { &right };
            match row {
                Some(v) => topic.pipe_input_at(key(k), v, *ts).expect("pipe"),
                None => topic.pipe_tombstone_at(key(k), *ts).expect("pipe"),
            }
            model.apply(*input, *ts);
        }
        for (topic, _, grouped, materialized) in JOINS {
            let out = driver.create_output_topic(topic, Serdes::string(), Serdes::optional(Serdes::i64()));
            let got: Vec<Output> = out
                .read_records_to_list()
                .expect("read")
                .into_iter()
                .map(|r| (r.key, r.value, r.timestamp))
                .collect();
            let want = model.outputs.remove(topic).unwrap_or_default();
            prop_assert_eq!(&got, &want, "topic {}", topic);
            if materialized {
                let mut stored = driver
                    .get_key_value_store::<String, i64>(&format!("{topic}-store"))
                    .expect("store")
                    .all()
                    .expect("all");
                stored.sort();
                let kind = JOINS.iter().find(|j| j.0 == topic).expect("join").1;
                let mut keys: Vec<String> = model.left.keys().chain(model.right.keys()).cloned().collect();
                keys.sort();
                keys.dedup();
                let want: Vec<(String, i64)> = keys
                    .into_iter()
                    .filter_map(|k| model.row(kind, &k).map(|v| (k, v)))
                    .collect();
                prop_assert_eq!(stored, want, "store of {}", topic);
            }
            if grouped && grouping {
                let sums = format!("{topic}-sums");
                let mut stored = driver
                    .get_key_value_store::<String, i64>(&sums)
                    .expect("store")
                    .all()
                    .expect("all");
                stored.sort();
                let want: Vec<(String, i64)> = model
                    .sums
                    .get(topic)
                    .into_iter()
                    .flatten()
                    .map(|(g, (a, _))| (g.clone(), *a))
                    .collect();
                prop_assert_eq!(stored, want, "{}", sums);
            }
        }
    }
}

/// The join's nodes and store are named as Kafka Streams names them.
#[test]
fn a_table_join_is_named_as_kafka_names_it() {
    let builder = StreamsBuilder::new();
    let t = |topic: &str| {
        builder.table(
            topic,
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::new(),
        )
    };
    let (a, b) = (t("a"), t("b"));
    a.join_with(&b, |x, y| x + y, Serdes::i64(), Materialized::new())
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let description = builder.build().expect("topology").describe().to_string();
    for name in [
        "Processor: KTABLE-JOINTHIS-0000000008 (stores: [b-STATE-STORE-0000000003])",
        "Processor: KTABLE-JOINOTHER-0000000009 (stores: [a-STATE-STORE-0000000000])",
        "Processor: KTABLE-MERGE-0000000007 (stores: [KTABLE-MERGE-STATE-STORE-0000000006])",
    ] {
        assert!(description.contains(name), "{name} in\n{description}");
    }
}

#[test]
fn joining_tables_of_different_partition_counts_is_an_error_naming_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    log.create_topic("left-rows", 2).expect("left");
    log.create_topic("right-rows", 3).expect("right");
    let mut config = StreamsConfig::new("tt-copartition");
    config.state_dir = dir.path().join("state");
    let error = StreamsApp::new(
        topology(StoreType::InMemory, true),
        config,
        EmbeddedBackend::new(log).shared(),
    )
    .map(|_| ())
    .expect_err("not co-partitioned");
    let message = error.to_string();
    assert!(
        message.contains("left-rows")
            && message.contains("right-rows")
            && message.contains("co-partitioned"),
        "{message}"
    );
}

// ---- on stream threads, over the file-backed log ----

fn app(log: &Log, state: &std::path::Path, store_type: StoreType) -> StreamsApp {
    let config = two_thread_config("tt-threads", state);
    StreamsApp::new(
        topology(store_type, true),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app")
}

/// `n` updates and deletes of both tables over 30 keys, spread over both.
fn generated(n: u64, seed: u64) -> Vec<Input> {
    (0..n)
        .map(|i| {
            let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed * 7919) % 10_007;
            let row = (x % 7 != 2).then_some((x % 13) as i64);
            Input::Row((x / 31) % 2 == 0, (x % 30) as u8, row)
        })
        .collect()
}

/// Writes `inputs`, both tables in one go each (so a commit often has updates of one key on
/// both sides), and applies them to the model in order (the model's end state does not depend
/// on how the two tables' records interleave).
fn phase(log: &Log, model: &mut Model, ts: &mut i64, inputs: &[Input]) {
    let (mut left, mut right) = (Vec::new(), Vec::new());
    for &input in inputs {
        *ts += 1;
        let Input::Row(is_left, k, row) = input;
        if is_left {
            left.push((key(k), row, *ts));
        } else {
            right.push((key(k), row, *ts));
        }
        model.apply(input, *ts);
    }
    produce_longs(log, "left-rows", 3, &left);
    produce_longs(log, "right-rows", 3, &right);
}

/// Each join's rows at the end (its topic's last row per key, and a materialized join's store)
/// and each grouped sum are the model's, across a restart.
/// The three phases: written before the first run, during it, and between the runs.
fn joins_on_threads(store_type: StoreType, phases: [&[Input]; 3]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut model = Model {
        grouping: true,
        ..Model::default()
    };
    let mut ts = 0;
    phase(&log, &mut model, &mut ts, phases[0]);
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    phase(&log, &mut model, &mut ts, phases[1]);
    wait_idle(&running);
    running.close().expect("close");
    phase(&log, &mut model, &mut ts, phases[2]);
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    wait_idle(&running);
    let mut keys: Vec<String> = model
        .left
        .keys()
        .chain(model.right.keys())
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    for (topic, kind, grouped, materialized) in JOINS {
        let want: BTreeMap<String, i64> = keys
            .iter()
            .filter_map(|k| model.row(kind, k).map(|v| (k.clone(), v)))
            .collect();
        assert_eq!(
            table_of_longs(&log, topic),
            want,
            "{topic} ({store_type:?})"
        );
        if materialized {
            let queried: BTreeMap<String, i64> = running
                .store(StoreQueryParameters::from_name_and_type(
                    format!("{topic}-store"),
                    QueryableStoreTypes::key_value::<String, i64>(),
                ))
                .expect("store")
                .all()
                .expect("all")
                .into_iter()
                .collect();
            assert_eq!(queried, want, "{topic}-store ({store_type:?})");
        }
        if grouped {
            // The joined rows' squares, summed per parity.
            let mut sums: BTreeMap<String, i64> = BTreeMap::new();
            for v in want.values() {
                *sums.entry(parity(*v)).or_default() += v * v;
            }
            let queried: BTreeMap<String, i64> = running
                .store(StoreQueryParameters::from_name_and_type(
                    format!("{topic}-sums"),
                    QueryableStoreTypes::key_value::<String, i64>(),
                ))
                .expect("store")
                .all()
                .expect("all")
                .into_iter()
                .filter(|(_, s)| *s != 0)
                .collect();
            sums.retain(|_, s| *s != 0);
            assert_eq!(queried, sums, "{topic}-sums ({store_type:?})");
        }
    }
    running.close().expect("close");
}

#[test]
fn stream_threads_join_tables_as_the_model_across_a_restart_in_memory() {
    let inputs = [
        generated(1_500, 1),
        generated(1_500, 2),
        generated(1_000, 3),
    ];
    joins_on_threads(StoreType::InMemory, [&inputs[0], &inputs[1], &inputs[2]]);
}

#[test]
fn stream_threads_join_tables_as_the_model_across_a_restart_persistent() {
    let inputs = [
        generated(1_500, 1),
        generated(1_500, 2),
        generated(1_000, 3),
    ];
    joins_on_threads(StoreType::Persistent, [&inputs[0], &inputs[1], &inputs[2]]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Random updates and deletes over few keys, on stream threads across a restart: the joins'
    /// rows and the grouped sums at the end are the model's.
    #[test]
    fn stream_threads_join_random_tables_as_the_model(
        phases in prop::array::uniform3(prop::collection::vec(input(), 0..150)),
        persistent in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        joins_on_threads(store_type, [&phases[0], &phases[1], &phases[2]]);
    }
}

// ---- with caching disabled: record by record, on stream threads too ----

/// Every record of `topic`, per key in offset order: value (`None`: a delete) and timestamp.
fn outputs_per_key(log: &Log, topic: &str) -> BTreeMap<String, Vec<(Option<i64>, i64)>> {
    let mut out: BTreeMap<String, Vec<(Option<i64>, i64)>> = BTreeMap::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        let tp = riffle::log::TopicPartition::new(topic, p);
        for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
            for record in batch.records() {
                let record = record.expect("record");
                let key = String::from_utf8(record.key().expect("key").to_vec()).expect("utf8");
                let value = record
                    .value()
                    .map(|v| i64::from_be_bytes(v[..].try_into().expect("8 bytes")));
                out.entry(key)
                    .or_default()
                    .push((value, record.timestamp()));
            }
        }
    }
    out
}

/// The model's outputs of `topic`, per key in order.
fn model_per_key(model: &Model, topic: &str) -> BTreeMap<String, Vec<(Option<i64>, i64)>> {
    let mut out: BTreeMap<String, Vec<(Option<i64>, i64)>> = BTreeMap::new();
    for (k, v, ts) in model.outputs.get(topic).into_iter().flatten() {
        out.entry(k.clone()).or_default().push((*v, *ts));
    }
    out
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    /// `statestore_cache_max_bytes = 0` in the test driver: every update of either table,
    /// deletes of absent keys included, joins the other table as it is at that record, as
    /// Kafka Streams' uncached joins do.
    #[test]
    fn the_test_driver_without_a_cache_joins_every_update(
        inputs in prop::collection::vec((input(), 0i64..40), 1..50),
    ) {
        let mut config = StreamsConfig::new("tt-uncached");
        config.statestore_cache_max_bytes = 0;
        let driver = TopologyTestDriver::new(topology(StoreType::InMemory, true), config)
            .expect("driver");
        let left = driver.create_input_topic("left-rows", Serdes::string(), Serdes::i64());
        let right = driver.create_input_topic("right-rows", Serdes::string(), Serdes::i64());
        let mut model = Model { grouping: true, uncached: true, ..Model::default() };
        for (input, ts) in &inputs {
            let Input::Row(is_left, k, row) = *input;
            let topic = if is_left { &left } else { &right };
            match row {
                Some(v) => topic.pipe_input_at(key(k), v, *ts).expect("pipe"),
                None => topic.pipe_tombstone_at(key(k), *ts).expect("pipe"),
            }
            model.apply(*input, *ts);
        }
        for (topic, _, _, _) in JOINS {
            let out = driver.create_output_topic(topic, Serdes::string(), Serdes::optional(Serdes::i64()));
            let got: Vec<Output> = out
                .read_records_to_list()
                .expect("read")
                .into_iter()
                .map(|r| (r.key, r.value, r.timestamp))
                .collect();
            let want = model.outputs.remove(topic).unwrap_or_default();
            prop_assert_eq!(&got, &want, "topic {}", topic);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(10)))]

    /// `statestore_cache_max_bytes = 0` on stream threads over 3 partitions, both tables
    /// written before the start and interleaved (timestamps rising in input order, so each
    /// task processes them in that order), commits every 20 ms or 30 s: each key's outputs of
    /// every join are Kafka's per-record sequence — each update joined with the other table's
    /// row at that moment, never a combination of the two tables that did not exist — and the
    /// grouped sums and materialized stores end as the model's.
    #[test]
    fn stream_threads_without_a_cache_join_every_update_as_the_model(
        inputs in prop::collection::vec(input(), 1..150),
        persistent in any::<bool>(),
        short_commits in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let mut model = Model { grouping: true, uncached: true, ..Model::default() };
        let mut ts = 0;
        phase(&log, &mut model, &mut ts, &inputs);
        let mut config = two_thread_config("tt-uncached", &dir.path().join("state"));
        config.statestore_cache_max_bytes = 0;
        if !short_commits {
            config.commit_interval = Some(std::time::Duration::from_secs(30));
        }
        let mut running = StreamsApp::new(
            topology(store_type, true),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .expect("app");
        running.start().expect("start");
        wait_idle(&running);
        for (topic, kind, grouped, materialized) in JOINS {
            prop_assert_eq!(outputs_per_key(&log, topic), model_per_key(&model, topic), "topic {}", topic);
            let mut keys: Vec<String> = model.left.keys().chain(model.right.keys()).cloned().collect();
            keys.sort();
            keys.dedup();
            let want: BTreeMap<String, i64> = keys
                .iter()
                .filter_map(|k| model.row(kind, k).map(|v| (k.clone(), v)))
                .collect();
            if materialized {
                let queried: BTreeMap<String, i64> = running
                    .store(StoreQueryParameters::from_name_and_type(
                        format!("{topic}-store"),
                        QueryableStoreTypes::key_value::<String, i64>(),
                    ))
                    .expect("store")
                    .all()
                    .expect("all")
                    .into_iter()
                    .collect();
                prop_assert_eq!(&queried, &want, "{}-store", topic);
            }
            if grouped {
                let sums: BTreeMap<String, i64> = model
                    .sums
                    .get(topic)
                    .into_iter()
                    .flatten()
                    .map(|(g, (a, _))| (g.clone(), *a))
                    .collect();
                let queried: BTreeMap<String, i64> = running
                    .store(StoreQueryParameters::from_name_and_type(
                        format!("{topic}-sums"),
                        QueryableStoreTypes::key_value::<String, i64>(),
                    ))
                    .expect("store")
                    .all()
                    .expect("all")
                    .into_iter()
                    .collect();
                prop_assert_eq!(&queried, &sums, "{}-sums", topic);
            }
        }
        running.close().expect("close");
    }
}
