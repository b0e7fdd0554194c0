//! `KTable::group_by` and `KGroupedTable`'s count, reduce and aggregate, against a model: a
//! `HashMap` table replayed in arrival order, and per group the aggregate Kafka Streams'
//! `KTableAggregate` keeps (a row's old value subtracted from its old group, then its new value
//! added to its new group; a deleted row subtracted; an emptied group keeping its aggregate).
//! Checked record by record in the test driver by proptest (each update's outputs in Kafka's
//! order, with their timestamps), and on stream threads over the file-backed log across a
//! restart (each group's last output and the stores, since caching collapses updates between
//! commits); with `statestore_cache_max_bytes = 0`, every output in order on stream threads too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::{table_of_longs, two_thread_config, wait_idle};
use proptest::prelude::*;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, Topology, TopologyTestDriver, dsl::StoreType, query::QueryableStoreTypes,
    query::StoreQueryParameters,
};

/// A row's group: its value modulo 3.
fn group(v: i64) -> String {
    format!("g{}", v.rem_euclid(3))
}

/// Over a table of `i64` rows read from `rows`, grouped by [`group`] of the value:
/// - `counts`: rows per group (store `counts`);
/// - `even-sums`: the sum of the even rows per group (a filter before the grouping; store
///   `even-sums`);
/// - `squares`: the sum of the rows' squares per group (a `map_values` before the grouping,
///   an aggregate; store `squares`);
/// - `count-parity`: the rows' count of each key of `events`, grouped by the count's parity
///   and summed (a stream aggregation's table grouped: its old values come from its store).
///
/// `caching: false` keeps every write of the rows' store (each goes downstream with the write
/// before it as its old value).
fn topology(store_type: StoreType, caching: bool) -> Topology {
    let builder = StreamsBuilder::new();
    let rows = Materialized::named("rows").with_store_type(store_type);
    let rows = if caching {
        rows
    } else {
        rows.with_caching_disabled()
    };
    let table = builder.table(
        "rows",
        Consumed::with(Serdes::string(), Serdes::i64()),
        rows,
    );
    let by_group = || Grouped::with(Serdes::string(), Serdes::i64());
    let out = || Produced::with(Serdes::string(), Serdes::i64());
    table
        .group_by(|_, v| (group(v), v), by_group())
        .count_with(Materialized::named("counts").with_store_type(store_type))
        .to_stream()
        .to("counts", out());
    table
        .filter(|_, v| v % 2 == 0)
        .group_by(|_, v| (group(v), v), by_group())
        .reduce(
            |agg, v| agg + v,
            |agg, v| agg - v,
            Materialized::named("even-sums").with_store_type(store_type),
        )
        .to_stream()
        .to("even-sums", out());
    table
        .map_values(|v| (v, v * v), Serdes::json())
        .group_by(|_, (v, sq)| (group(v), sq), by_group())
        .aggregate(
            || 0i64,
            |_, sq, agg| agg + sq,
            |_, sq, agg| agg - sq,
            Materialized::named("squares").with_store_type(store_type),
            Serdes::i64(),
        )
        .to_stream()
        .to("squares", out());
    builder
        .stream("events", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .group_by(|_, n| (format!("p{}", n % 2), n), by_group())
        .reduce(
            |agg, n| agg + n,
            |agg, n| agg - n,
            Materialized::named("parity"),
        )
        .to_stream()
        .to("count-parity", out());
    builder.build().expect("topology")
}

#[derive(Clone, Debug)]
enum Input {
    /// A row (`None`: a delete).
    Row(u8, Option<i64>),
    /// An event of a key, counted.
    Event(u8),
}

fn key(k: u8) -> String {
    format!("k{k}")
}

/// An output record: key, value, timestamp.
type Output = (String, i64, i64);

/// One grouped aggregation of the model: per group its aggregate and timestamp.
#[derive(Default)]
struct Grouping {
    groups: BTreeMap<String, (i64, i64)>,
}

impl Grouping {
    /// Kafka's `KTableAggregate`/`KTableReduce` for one repartitioned update at `ts`: returns
    /// the group's new aggregate and timestamp. `init`: the aggregate a first value is added to
    /// (`None`: a reduce, whose first value is the start).
    fn apply(
        &mut self,
        group: &str,
        new: Option<i64>,
        old: Option<i64>,
        ts: i64,
        init: Option<i64>,
    ) -> (i64, i64) {
        let before = self.groups.get(group).copied();
        let rest = match (old, before) {
            (Some(old), Some((agg, _))) => Some(agg - old),
            (_, agg) => agg.map(|(a, _)| a),
        };
        let agg = match (new, rest, init) {
            (Some(new), Some(rest), _) => rest + new,
            (Some(new), None, Some(init)) => init + new,
            (Some(new), None, None) => new,
            (None, Some(rest), _) => rest,
            (None, None, _) => unreachable!("an update with neither value is never sent"),
        };
        let ts = before.map_or(ts, |(_, t)| t.max(ts));
        self.groups.insert(group.to_owned(), (agg, ts));
        (agg, ts)
    }

    /// A row of the grouped table changed from `old` to `new` (each `(group, value)`): the
    /// outputs Kafka Streams' repartition map and aggregation emit, in order.
    fn update(
        &mut self,
        new: Option<(String, i64)>,
        old: Option<(String, i64)>,
        ts: i64,
        init: Option<i64>,
        out: &mut Vec<Output>,
    ) {
        match (new, old) {
            (Some((ng, nv)), Some((og, ov))) if ng == og => {
                let (agg, t) = self.apply(&ng, Some(nv), Some(ov), ts, init);
                out.push((ng, agg, t));
            }
            (new, old) => {
                if let Some((og, ov)) = old {
                    let (agg, t) = self.apply(&og, None, Some(ov), ts, init);
                    out.push((og, agg, t));
                }
                if let Some((ng, nv)) = new {
                    let (agg, t) = self.apply(&ng, Some(nv), None, ts, init);
                    out.push((ng, agg, t));
                }
            }
        }
    }
}

#[derive(Default)]
struct Model {
    rows: HashMap<String, i64>,
    /// Each key's event count and its timestamp (the largest of its events').
    events: HashMap<String, (i64, i64)>,
    counts: Grouping,
    even_sums: Grouping,
    squares: Grouping,
    parity: Grouping,
    outputs: BTreeMap<&'static str, Vec<Output>>,
}

impl Model {
    fn apply(&mut self, input: &Input, ts: i64) {
        match *input {
            Input::Row(k, row) => {
                let old = match row {
                    Some(v) => self.rows.insert(key(k), v),
                    None => self.rows.remove(&key(k)),
                };
                let by = |v: Option<i64>| v.map(|v| (group(v), v));
                let even = |v: Option<i64>| v.filter(|v| v % 2 == 0).map(|v| (group(v), v));
                let square = |v: Option<i64>| v.map(|v| (group(v), v * v));
                let mut out = Vec::new();
                self.counts.update(
                    by(row).map(|(g, _)| (g, 1)),
                    by(old).map(|(g, _)| (g, 1)),
                    ts,
                    Some(0),
                    &mut out,
                );
                self.outputs.entry("counts").or_default().append(&mut out);
                self.even_sums
                    .update(even(row), even(old), ts, None, &mut out);
                self.outputs
                    .entry("even-sums")
                    .or_default()
                    .append(&mut out);
                self.squares
                    .update(square(row), square(old), ts, Some(0), &mut out);
                self.outputs.entry("squares").or_default().append(&mut out);
            }
            Input::Event(k) => {
                let (n, count_ts) = self.events.entry(key(k)).or_insert((0, ts));
                *n += 1;
                *count_ts = (*count_ts).max(ts);
                let (new, old, ts) = (*n, *n - 1, *count_ts);
                let parity = |n: i64| (format!("p{}", n % 2), n);
                let mut out = Vec::new();
                self.parity.update(
                    Some(parity(new)),
                    (old > 0).then(|| parity(old)),
                    ts,
                    None,
                    &mut out,
                );
                self.outputs
                    .entry("count-parity")
                    .or_default()
                    .append(&mut out);
            }
        }
    }
}

const OUTPUTS: [&str; 4] = ["counts", "even-sums", "squares", "count-parity"];

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        4 => (0u8..6, prop::option::weighted(0.75, -4i64..12)).prop_map(|(k, v)| Input::Row(k, v)),
        1 => (0u8..4).prop_map(Input::Event),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Each row update, delete (of a present or absent row) and event, against the model:
    /// every output in order with its value and timestamp, and the stores at the end.
    #[test]
    fn the_test_driver_aggregates_grouped_tables_as_the_model_does(
        inputs in prop::collection::vec((input(), 0i64..40), 1..60)
    ) {
        let driver = TopologyTestDriver::new(topology(StoreType::InMemory, true), StreamsConfig::new("grouped"))
            .expect("driver");
        let rows = driver.create_input_topic("rows", Serdes::string(), Serdes::i64());
        let events = driver.create_input_topic("events", Serdes::string(), Serdes::string());
        let mut model = Model::default();
        for (input, ts) in &inputs {
            match *input {
                Input::Row(k, Some(v)) => rows.pipe_input_at(key(k), v, *ts).expect("pipe"),
                Input::Row(k, None) => rows.pipe_tombstone_at(key(k), *ts).expect("pipe"),
                Input::Event(k) => events.pipe_input_at(key(k), "e".into(), *ts).expect("pipe"),
            }
            model.apply(input, *ts);
        }
        for topic in OUTPUTS {
            let out = driver.create_output_topic(topic, Serdes::string(), Serdes::i64());
            let got: Vec<Output> = out
                .read_records_to_list()
                .expect("read")
                .into_iter()
                .map(|r| (r.key, r.value, r.timestamp))
                .collect();
            let want = model.outputs.remove(topic).unwrap_or_default();
            prop_assert_eq!(got, want, "topic {}", topic);
        }
        for (store, grouping) in [("counts", &model.counts), ("even-sums", &model.even_sums), ("squares", &model.squares), ("parity", &model.parity)] {
            let mut stored = driver
                .get_key_value_store::<String, i64>(store)
                .expect("store")
                .all()
                .expect("all");
            stored.sort();
            let want: Vec<(String, i64)> = grouping.groups.iter().map(|(g, (a, _))| (g.clone(), *a)).collect();
            prop_assert_eq!(stored, want, "store {}", store);
        }
    }
}

/// The repartition topic's records are Kafka's `ChangedSerializer` bytes: a row moving between
/// groups sends its old value (flag 0) to the old group and its new value (flag 1) to the new;
/// one staying in its group sends both at once (varint length of the new value, new, old,
/// flag 2).
#[test]
fn the_repartition_topic_carries_kafkas_change_format() {
    let builder = StreamsBuilder::new();
    builder
        .table(
            "rows",
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::new(),
        )
        .group_by(
            |_, v| (group(v), v),
            Grouped::with(Serdes::string(), Serdes::i64()),
        )
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    let topology = builder.build().expect("topology");
    let description = topology.describe().to_string();
    assert!(
        description.contains("KTABLE-SELECT-0000000003")
            && description.contains("KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition")
            && description.contains("KTABLE-AGGREGATE-0000000007"),
        "{description}"
    );
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("fmt")).expect("driver");
    let rows = driver.create_input_topic("rows", Serdes::string(), Serdes::i64());
    rows.pipe_input_at("a".into(), 1, 1).unwrap(); // g1 +1
    rows.pipe_input_at("a".into(), 2, 2).unwrap(); // g1 -1, g2 +2
    rows.pipe_input_at("a".into(), 5, 3).unwrap(); // g2: -2 +5
    let topic = "fmt-KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition";
    let got: Vec<(Vec<u8>, Vec<u8>)> = driver
        .read_raw(topic, 0)
        .expect("the repartition topic")
        .iter()
        .map(|r| (r.key().unwrap().to_vec(), r.value().unwrap().to_vec()))
        .collect();
    let long = |v: i64| v.to_be_bytes().to_vec();
    let with = |mut bytes: Vec<u8>, flag: u8| {
        bytes.push(flag);
        bytes
    };
    let mut both = vec![16u8]; // zig-zag varint of 8
    both.extend(long(5));
    both.extend(long(2));
    both.push(2);
    assert_eq!(
        got,
        vec![
            (b"g1".to_vec(), with(long(1), 1)),
            (b"g1".to_vec(), with(long(1), 0)),
            (b"g2".to_vec(), with(long(2), 1)),
            (b"g2".to_vec(), both),
        ]
    );
}

#[test]
fn grouping_a_windowed_table_is_an_error_at_build() {
    let builder = StreamsBuilder::new();
    builder
        .stream("s", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .windowed_by(riffle::TimeWindows::of_size_with_no_grace(
            Duration::from_secs(1),
        ))
        .count()
        .group_by(
            |w, n| (w.key, n),
            Grouped::with(Serdes::string(), Serdes::i64()),
        )
        .count();
    let error = builder
        .build()
        .expect_err("a windowed table sends no old values");
    assert!(
        error.to_string().contains("cannot send old values"),
        "{error}"
    );
}

// ---- on stream threads, over the file-backed log ----

fn produce(log: &Log, topic: &str, partitions: u32, records: &[(String, Option<Vec<u8>>, i64)]) {
    if log.partitions(topic).is_none() {
        log.create_topic(topic, partitions).expect("create topic");
    }
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (k, v, ts) in records {
        let p = partition_for_key(k.as_bytes(), partitions) as usize;
        builders[p].push(*ts, Some(k.as_bytes()), v.as_deref());
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            log.append(&TopicPartition::new(topic, p as u32), b)
                .expect("append");
        }
    }
}

fn app(log: &Log, state: &std::path::Path, store_type: StoreType, caching: bool) -> StreamsApp {
    let config = two_thread_config("grouped-test", state);
    StreamsApp::new(
        topology(store_type, caching),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app")
}

/// `n` row updates and deletes over 50 keys and events over 20, applied to the model.
fn phase(log: &Log, model: &mut Model, ts: &mut i64, n: u64, seed: u64) {
    let (mut rows, mut events) = (Vec::new(), Vec::new());
    for i in 0..n {
        *ts += 1;
        let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed) % 1_000;
        let input = if x % 5 == 0 {
            Input::Event((x % 20) as u8)
        } else {
            Input::Row((x % 50) as u8, (x % 9 != 1).then_some((x % 23) as i64 - 5))
        };
        match &input {
            Input::Row(k, v) => rows.push((key(*k), v.map(|v| v.to_be_bytes().to_vec()), *ts)),
            Input::Event(k) => events.push((key(*k), Some(b"e".to_vec()), *ts)),
        }
        model.apply(&input, *ts);
    }
    produce(log, "rows", 3, &rows);
    produce(log, "events", 3, &events);
}

/// Two runs with input between and during them; each group's last output and the stores
/// must be the model's aggregates.
fn grouped_on_threads(store_type: StoreType, caching: bool) {
    grouped_on_threads_with(store_type, caching, [(2_000, 1), (1_000, 2), (1_000, 3)]);
}

/// As [`grouped_on_threads`], with the phases' sizes and seeds: written before the first run,
/// during it, and between the runs.
fn grouped_on_threads_with(store_type: StoreType, caching: bool, phases: [(u64, u64); 3]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut model = Model::default();
    let mut ts = 0;
    phase(&log, &mut model, &mut ts, phases[0].0, phases[0].1);
    let mut running = app(&log, &state, store_type, caching);
    running.start().expect("start");
    phase(&log, &mut model, &mut ts, phases[1].0, phases[1].1);
    wait_idle(&running);
    running.close().expect("close");
    phase(&log, &mut model, &mut ts, phases[2].0, phases[2].1);
    let mut running = app(&log, &state, store_type, caching);
    running.start().expect("start");
    wait_idle(&running);
    // Caching collapses a key's updates between commits (as in Kafka Streams), so a group that
    // rows entered and left within one commit may never have been created: groups at 0 are
    // left out on both sides.
    let nonzero = |m: BTreeMap<String, i64>| -> BTreeMap<String, i64> {
        m.into_iter().filter(|(_, a)| *a != 0).collect()
    };
    for (store, topic, grouping) in [
        ("counts", "counts", &model.counts),
        ("even-sums", "even-sums", &model.even_sums),
        ("squares", "squares", &model.squares),
        ("parity", "count-parity", &model.parity),
    ] {
        let want: BTreeMap<String, i64> = nonzero(
            grouping
                .groups
                .iter()
                .map(|(g, (a, _))| (g.clone(), *a))
                .collect(),
        );
        let queried: BTreeMap<String, i64> = running
            .store(StoreQueryParameters::from_name_and_type(
                store,
                QueryableStoreTypes::key_value::<String, i64>(),
            ))
            .expect("store")
            .all()
            .expect("all")
            .into_iter()
            .collect();
        assert_eq!(nonzero(queried), want, "store {store} ({store_type:?})");
        assert_eq!(
            nonzero(table_of_longs(&log, topic)),
            want,
            "topic {topic} ({store_type:?})"
        );
    }
    running.close().expect("close");
}

#[test]
fn stream_threads_aggregate_grouped_tables_as_the_model_across_a_restart_in_memory() {
    grouped_on_threads(StoreType::InMemory, true);
}

#[test]
fn stream_threads_aggregate_grouped_tables_as_the_model_with_the_rows_cache_disabled() {
    grouped_on_threads(StoreType::InMemory, false);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Random phase sizes and inputs, in memory or on disk, with or without the rows' cache:
    /// each group's last output and store are the model's.
    #[test]
    fn stream_threads_aggregate_random_phases_as_the_model(
        phases in prop::array::uniform3((0u64..300, any::<u64>())),
        persistent in any::<bool>(),
        caching in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        grouped_on_threads_with(store_type, caching, phases);
    }
}

#[test]
fn stream_threads_aggregate_grouped_tables_as_the_model_across_a_restart_persistent() {
    grouped_on_threads(StoreType::Persistent, true);
}

/// Two aggregations of one named grouping (a table's and a stream's) read its repartition
/// topic once each, as Kafka reuses it: every update is counted once, not once per aggregation.
#[test]
fn two_aggregations_of_a_named_grouping_share_its_repartition_topic() {
    let builder = StreamsBuilder::new();
    let by_group = builder
        .table(
            "rows",
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::new(),
        )
        .group_by(
            |_, v| (group(v), v),
            Grouped::with(Serdes::string(), Serdes::i64()).named("by-group"),
        );
    by_group
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    by_group
        .reduce(|a, v| a + v, |a, v| a - v, Materialized::new())
        .to_stream()
        .to("sums", Produced::with(Serdes::string(), Serdes::i64()));
    let by_word = builder
        .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by(
            |_, w| w.clone(),
            Grouped::with(Serdes::string(), Serdes::string()).named("by-word"),
        );
    by_word.count().to_stream().to(
        "word-counts",
        Produced::with(Serdes::string(), Serdes::i64()),
    );
    by_word
        .reduce(|a, w| format!("{a}{w}"), Materialized::new())
        .to_stream()
        .to(
            "word-concat",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    let topology = builder.build().expect("topology");
    let description = topology.describe().to_string();
    assert_eq!(
        description.matches("Sink: ").count() - 4,
        2,
        "one sink per named grouping:\n{description}"
    );
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("shared")).expect("driver");
    let rows = driver.create_input_topic("rows", Serdes::string(), Serdes::i64());
    let words = driver.create_input_topic("words", Serdes::string(), Serdes::string());
    rows.pipe_input_at("a".into(), 1, 1).unwrap();
    rows.pipe_input_at("b".into(), 4, 2).unwrap();
    rows.pipe_input_at("a".into(), 7, 3).unwrap();
    words.pipe_input_at("x".into(), "w".into(), 4).unwrap();
    words.pipe_input_at("y".into(), "w".into(), 5).unwrap();
    let latest = |topic: &str| -> BTreeMap<String, i64> {
        driver
            .create_output_topic(topic, Serdes::string(), Serdes::i64())
            .read_key_values_to_map()
            .unwrap()
            .into_iter()
            .collect()
    };
    assert_eq!(latest("counts"), BTreeMap::from([("g1".to_owned(), 2)]));
    assert_eq!(latest("sums"), BTreeMap::from([("g1".to_owned(), 11)]));
    assert_eq!(latest("word-counts"), BTreeMap::from([("w".to_owned(), 2)]));
    let concat = driver
        .create_output_topic("word-concat", Serdes::string(), Serdes::string())
        .read_key_values_to_map()
        .unwrap();
    assert_eq!(concat.get("w").map(String::as_str), Some("ww"));
}

/// The outputs of `topic` in `log`, in offset order: key, 8-byte value, timestamp.
fn outputs_of(log: &Log, topic: &str) -> Vec<Output> {
    let mut out = Vec::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new(topic, p), 0, usize::MAX)
            .expect("fetch")
        {
            for record in batch.records() {
                let record = record.expect("record");
                let key = String::from_utf8(record.key().expect("key").to_vec()).expect("utf8");
                let value = record.value().expect("value");
                let value = i64::from_be_bytes(value[..].try_into().expect("8 bytes"));
                out.push((key, value, record.timestamp()));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(8)
    ))]

    /// `statestore_cache_max_bytes = 0` disables every store's cache, as Kafka Streams does:
    /// on stream threads that commit every 20 ms or every 30 s (one partition per topic, so the
    /// order of every output is the input's), each row update and event is forwarded at once
    /// and every aggregation emits one update per update it takes: each output, in order, with
    /// its value and timestamp, is the record-by-record model's.
    #[test]
    fn stream_threads_without_a_cache_emit_every_update_as_the_model(
        inputs in prop::collection::vec((input(), 0i64..40), 1..80),
        persistent in any::<bool>(),
        short_commits in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let mut model = Model::default();
        let (mut rows, mut events) = (Vec::new(), Vec::new());
        for (input, ts) in &inputs {
            match input {
                Input::Row(k, v) => rows.push((key(*k), v.map(|v| v.to_be_bytes().to_vec()), *ts)),
                Input::Event(k) => events.push((key(*k), Some(b"e".to_vec()), *ts)),
            }
            model.apply(input, *ts);
        }
        produce(&log, "rows", 1, &rows);
        produce(&log, "events", 1, &events);
        let mut config = two_thread_config("grouped-uncached", &dir.path().join("state"));
        config.statestore_cache_max_bytes = 0;
        if !short_commits {
            config.commit_interval = Some(Duration::from_secs(30));
        }
        // The rows' store keeps its cache enabled: the configuration disables it.
        let app = StreamsApp::new(
            topology(store_type, true),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .expect("app");
        app.run_until_idle().expect("run");
        for topic in OUTPUTS {
            let want = model.outputs.remove(topic).unwrap_or_default();
            prop_assert_eq!(outputs_of(&log, topic), want, "topic {}", topic);
        }
    }
}
