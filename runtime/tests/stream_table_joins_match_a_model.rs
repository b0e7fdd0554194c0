//! Tables read from topics and stream–table joins, against a model: a `HashMap` table replayed
//! in arrival order (Kafka Streams' rules: a table record replaces its key's row, a record
//! without a value deletes it, one without a key is dropped; a stream record joins the row its
//! key has when it arrives; table updates emit nothing). Checked record by record in the test
//! driver by proptest, and on stream threads over the file-backed log across restarts, where
//! the table's store is restored from its source topic (no changelog topic of its own: the
//! topology is built with Kafka's `reuse.ktable.source.topics`; without it, the default,
//! topology_optimization_as_kafkas.rs restores a table from its own changelog).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::{longs_per_key, produce_longs, two_thread_config, wait_idle};
use proptest::prelude::*;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Joined, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, Topology, TopologyTestDriver, dsl::StoreType, query::QueryableStoreTypes,
    query::StoreQueryParameters, testing::TestRecord,
};

/// The joins under test, over a table of `i64` rows read from `table` and a stream of `i64`
/// values from `stream`:
/// - `inner`: stream ⋈ table, `value * 1000 + row`;
/// - `left`: stream ⟕ table, `-1` for no row;
/// - `even`: stream ⋈ table.filter(row is even);
/// - `mapped`: stream ⋈ table.map_values(row * 10);
/// - `materialized`: stream ⟕ table.map_values_with(row + 1, store `plus-one`);
/// - `updates`: the table's updates (`to_stream`), deletes as nulls;
/// - `even-updates`: the filtered table's updates (a filtered-out row is a delete).
fn topology(store_type: StoreType) -> Topology {
    let builder = StreamsBuilder::new();
    let table = builder.table(
        "table",
        Consumed::with(Serdes::string(), Serdes::i64()),
        Materialized::named("rows").with_store_type(store_type),
    );
    let stream = builder.stream("stream", Consumed::with(Serdes::string(), Serdes::i64()));
    let out = || Produced::with(Serdes::string(), Serdes::i64());
    stream
        .join(&table, |v, row| v * 1000 + row)
        .to("inner", out());
    stream
        .left_join(&table, |v, row| v * 1000 + row.unwrap_or(-1))
        .to("left", out());
    let even = table.filter(|_, row| row % 2 == 0);
    stream
        .join(&even, |v, row| v * 1000 + row)
        .to("even", out());
    stream
        .join(
            &table.map_values(|row| row * 10, Serdes::i64()),
            |v, row| v * 1000 + row,
        )
        .to("mapped", out());
    let plus_one = table.map_values_with(
        |row| row + 1,
        Serdes::i64(),
        Materialized::named("plus-one").with_store_type(store_type),
    );
    stream
        .left_join(&plus_one, |v, row| v * 1000 + row.unwrap_or(-1))
        .to("materialized", out());
    let nullable = || Produced::with(Serdes::string(), Serdes::optional(Serdes::i64()));
    table
        .map_values(Some, Serdes::optional(Serdes::i64()))
        .to_stream()
        .to("updates", nullable());
    even.map_values(Some, Serdes::optional(Serdes::i64()))
        .to_stream()
        .to("even-updates", nullable());
    let mut config = StreamsConfig::new("enrich-test");
    config
        .set("topology.optimization", "reuse.ktable.source.topics")
        .expect("an optimization");
    builder.build_with(&config).expect("topology")
}

/// One input record: a table row (`None`: a delete) or a stream value.
#[derive(Clone, Debug)]
enum Input {
    Table(u8, Option<i64>),
    Stream(u8, i64),
}

fn key(k: u8) -> String {
    format!("k{k}")
}

/// An output record: key, value (`None`: a delete), timestamp.
type Output = (String, Option<i64>, i64);

/// Kafka's rules replayed in arrival order: what each output topic holds, record by record
/// (key, value, timestamp), and the table at the end.
#[derive(Default)]
struct Model {
    table: HashMap<String, i64>,
    outputs: BTreeMap<&'static str, Vec<Output>>,
}

impl Model {
    fn emit(&mut self, topic: &'static str, key: &str, value: Option<i64>, ts: i64) {
        self.outputs
            .entry(topic)
            .or_default()
            .push((key.to_owned(), value, ts));
    }

    fn apply(&mut self, input: &Input, ts: i64) {
        match *input {
            Input::Table(k, row) => {
                let k = key(k);
                let old = match row {
                    Some(row) => self.table.insert(k.clone(), row),
                    None => self.table.remove(&k),
                };
                // A delete of a key the table did not hold goes nowhere (Kafka's caching store
                // skips it).
                if row.is_some() || old.is_some() {
                    self.emit("updates", &k, row, ts);
                    self.emit("even-updates", &k, row.filter(|r| r % 2 == 0), ts);
                }
            }
            Input::Stream(k, v) => {
                let k = key(k);
                let row = self.table.get(&k).copied();
                if let Some(row) = row {
                    self.emit("inner", &k, Some(v * 1000 + row), ts);
                    self.emit("mapped", &k, Some(v * 1000 + row * 10), ts);
                    if row % 2 == 0 {
                        self.emit("even", &k, Some(v * 1000 + row), ts);
                    }
                }
                self.emit("left", &k, Some(v * 1000 + row.unwrap_or(-1)), ts);
                self.emit(
                    "materialized",
                    &k,
                    Some(v * 1000 + row.map_or(-1, |r| r + 1)),
                    ts,
                );
            }
        }
    }
}

const OUTPUTS: [&str; 7] = [
    "inner",
    "left",
    "even",
    "mapped",
    "materialized",
    "updates",
    "even-updates",
];

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        2 => (0u8..6, prop::option::weighted(0.8, 0i64..9)).prop_map(|(k, v)| Input::Table(k, v)),
        3 => (0u8..6, 0i64..9).prop_map(|(k, v)| Input::Stream(k, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every join kind and table operation, record by record, against the model; timestamps
    /// out of order (a table has no notion of late records without versioned stores).
    #[test]
    fn the_test_driver_joins_as_the_model_does(
        inputs in prop::collection::vec((input(), 0i64..50), 1..60)
    ) {
        let driver = TopologyTestDriver::new(topology(StoreType::InMemory), StreamsConfig::new("joins"))
            .expect("driver");
        let table = driver.create_input_topic("table", Serdes::string(), Serdes::i64());
        let stream = driver.create_input_topic("stream", Serdes::string(), Serdes::i64());
        let mut model = Model::default();
        for (input, ts) in &inputs {
            match *input {
                Input::Table(k, Some(row)) => table.pipe_input_at(key(k), row, *ts).expect("pipe"),
                Input::Table(k, None) => table.pipe_tombstone_at(key(k), *ts).expect("pipe"),
                Input::Stream(k, v) => stream.pipe_input_at(key(k), v, *ts).expect("pipe"),
            }
            model.apply(input, *ts);
        }
        for topic in OUTPUTS {
            let out = driver.create_output_topic(topic, Serdes::string(), Serdes::optional(Serdes::i64()));
            let got: Vec<_> = out
                .read_records_to_list()
                .expect("read")
                .into_iter()
                .map(|r| (r.key, r.value, r.timestamp))
                .collect();
            let want = model.outputs.remove(topic).unwrap_or_default();
            prop_assert_eq!(got, want, "topic {}", topic);
        }
        let rows = driver
            .get_key_value_store::<String, i64>("rows")
            .expect("the table's store");
        let mut stored: Vec<_> = rows.all().expect("all");
        stored.sort();
        let mut want: Vec<_> = model.table.iter().map(|(k, v)| (k.clone(), *v)).collect();
        want.sort();
        prop_assert_eq!(&stored, &want);
        let plus_one = driver
            .get_key_value_store::<String, i64>("plus-one")
            .expect("the materialized map_values' store");
        let mut stored: Vec<_> = plus_one.all().expect("all");
        stored.sort();
        let want: Vec<_> = want.into_iter().map(|(k, v)| (k, v + 1)).collect();
        prop_assert_eq!(stored, want);
    }
}

/// Kafka's `suppress(untilTimeLimit(limit, unbounded))` over a table's updates, replayed: each
/// update (or delete) is buffered under its key, keeping the time the key was first buffered
/// and the latest value and timestamp; after each record the suppression's stream time (the
/// largest timestamp it has seen) evicts, oldest buffer time first (then by key), every key
/// buffered at least `limit` ago, emitting its latest value.
fn suppressed_model(updates: &[Output], limit: i64) -> Vec<Output> {
    let mut observed = i64::MIN;
    let mut buffer: BTreeMap<String, (i64, Option<i64>, i64)> = BTreeMap::new();
    let mut out = Vec::new();
    for (k, v, ts) in updates {
        observed = observed.max(*ts);
        let since = buffer.get(k).map_or(*ts, |(since, _, _)| *since);
        buffer.insert(k.clone(), (since, *v, *ts));
        loop {
            let oldest = buffer
                .iter()
                .min_by_key(|(k, (since, _, _))| (*since, (*k).clone()))
                .map(|(k, (since, _, _))| (k.clone(), *since));
            match oldest {
                Some((k, since)) if since <= observed.saturating_sub(limit) => {
                    let (_, v, ts) = buffer.remove(&k).expect("present");
                    out.push((k, v, ts));
                }
                _ => break,
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A table read from a topic, suppressed until a time limit: its updates and deletes come
    /// out rate-limited per key as the replay has them, out-of-order timestamps included.
    #[test]
    fn a_suppressed_table_emits_each_keys_latest_row_once_its_time_limit_passes(
        rows in prop::collection::vec(
            (0u8..5, prop::option::weighted(0.8, 0i64..9), 0i64..8),
            1..60,
        ),
        limit in 0i64..15,
    ) {
        // Timestamps rise by 2 a record, each up to 7 late: keys stay buffered a while and
        // some updates arrive out of order.
        let rows: Vec<(u8, Option<i64>, i64)> = rows
            .into_iter()
            .enumerate()
            .map(|(i, (k, row, late))| (k, row, (2 * i as i64 - late).max(0)))
            .collect();
        let builder = StreamsBuilder::new();
        builder
            .table(
                "table",
                Consumed::with(Serdes::string(), Serdes::i64()),
                Materialized::named("rows"),
            )
            .map_values(Some, Serdes::optional(Serdes::i64()))
            .suppress(riffle::dsl::Suppressed::until_time_limit(
                Duration::from_millis(limit as u64),
                riffle::dsl::BufferConfig::unbounded(),
            ))
            .to_stream()
            .to("out", Produced::with(Serdes::string(), Serdes::optional(Serdes::i64())));
        let driver = TopologyTestDriver::new(builder.build().expect("topology"), StreamsConfig::new("suppressed"))
            .expect("driver");
        let table = driver.create_input_topic("table", Serdes::string(), Serdes::i64());
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::optional(Serdes::i64()));
        let mut updates = Vec::new();
        let mut present = std::collections::HashSet::new();
        for (k, row, ts) in &rows {
            match row {
                Some(row) => table.pipe_input_at(key(*k), *row, *ts).expect("pipe"),
                None => table.pipe_tombstone_at(key(*k), *ts).expect("pipe"),
            }
            // What the table forwards: a delete only of a key it held.
            let held = match row {
                Some(_) => !present.insert(key(*k)),
                None => present.remove(&key(*k)),
            };
            if row.is_some() || held {
                updates.push((key(*k), *row, *ts));
            }
        }
        let got: Vec<Output> = out
            .read_records_to_list()
            .expect("read")
            .into_iter()
            .map(|r| (r.key, r.value, r.timestamp))
            .collect();
        prop_assert_eq!(got, suppressed_model(&updates, limit));
    }
}

#[test]
fn a_stream_whose_key_changed_is_repartitioned_before_it_joins() {
    let builder = StreamsBuilder::new();
    let table = builder.table(
        "table",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::new(),
    );
    let stream = builder.stream("stream", Consumed::with(Serdes::string(), Serdes::string()));
    // Keyed by value: the row to join is the one of the stream record's value.
    let rekeyed = stream.select_key(|_, v| v.clone());
    let unrepartitioned = StreamsBuilder::new();
    {
        let t = unrepartitioned.table(
            "table",
            Consumed::with(Serdes::string(), Serdes::string()),
            Materialized::new(),
        );
        unrepartitioned
            .stream("stream", Consumed::with(Serdes::string(), Serdes::string()))
            .select_key(|_, v| v.clone())
            .join(&t, |v, row| format!("{v}:{row}"))
            .to("out", Produced::with(Serdes::string(), Serdes::string()));
    }
    let error = unrepartitioned
        .build()
        .expect_err("a key change needs Joined");
    assert!(error.to_string().contains("Joined::with"), "{error}");

    rekeyed
        .join_with(
            &table,
            |k, v, row| format!("{k}/{v}:{row}"),
            Joined::with(Serdes::string(), Serdes::string()).named("by-value"),
        )
        .to("out", Produced::with(Serdes::string(), Serdes::string()));
    let topology = builder.build().expect("topology");
    assert_eq!(topology.subtopology_count(), 2, "{}", topology.describe());
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("rekey")).expect("driver");
    let table = driver.create_input_topic("table", Serdes::string(), Serdes::string());
    let stream = driver.create_input_topic("stream", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
    table.pipe_input_at("b".into(), "row-b".into(), 1).unwrap();
    stream.pipe_input_at("x".into(), "a".into(), 2).unwrap();
    stream.pipe_input_at("y".into(), "b".into(), 3).unwrap();
    assert_eq!(
        out.read_records_to_list().unwrap(),
        vec![TestRecord::new("b".to_owned(), "b/b:row-b".to_owned(), 3)]
    );
}

#[test]
fn a_table_from_an_aggregation_joins_through_its_store() {
    let builder = StreamsBuilder::new();
    let stream = builder.stream("s", Consumed::with(Serdes::string(), Serdes::i64()));
    let table = builder.table(
        "t",
        Consumed::with(Serdes::string(), Serdes::i64()),
        Materialized::new(),
    );
    // The count's node comes first among the stream's children, so a record meets the count
    // that includes it.
    let counts = stream.group_by_key().count();
    stream
        .join(&counts, |v, n| v * 100 + n)
        .join(&table, |v, row| v * 100 + row)
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let topology = builder.build().expect("an aggregation's table joins");
    assert_eq!(topology.subtopology_count(), 1, "{}", topology.describe());
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("agg-join")).unwrap();
    let s = driver.create_input_topic("s", Serdes::string(), Serdes::i64());
    let t = driver.create_input_topic("t", Serdes::string(), Serdes::i64());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    s.pipe_input_at("a".into(), 1, 1).unwrap();
    t.pipe_input_at("a".into(), 7, 2).unwrap();
    s.pipe_input_at("a".into(), 2, 3).unwrap();
    s.pipe_input_at("b".into(), 3, 4).unwrap();
    assert_eq!(
        out.read_records_to_list().unwrap(),
        vec![TestRecord::new("a".to_owned(), (2 * 100 + 2) * 100 + 7, 3)]
    );
}

// ---- on stream threads, over the file-backed log ----

fn app(log: &Log, state: &std::path::Path, store_type: StoreType) -> StreamsApp {
    let config = two_thread_config("enrich-test", state);
    StreamsApp::new(
        topology(store_type),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app")
}

/// Appends `n` table rows (some deletes) or stream records, over 40 keys, and applies them
/// to the model.
fn phase(log: &Log, model: &mut Model, ts: &mut i64, n: u64, tables: bool) {
    let mut rows = Vec::new();
    let mut values = Vec::new();
    for i in 0..n {
        let k = ((i * 7 + n) % 40) as u8;
        let input = if tables {
            let row = (i % 11 != 3).then_some(((i * 13 + n) % 97) as i64);
            Input::Table(k, row)
        } else {
            Input::Stream(k, (i % 50) as i64)
        };
        *ts += 1;
        match input {
            Input::Table(k, row) => rows.push((key(k), row, *ts)),
            Input::Stream(k, v) => values.push((key(k), Some(v), *ts)),
        }
        model.apply(&input, *ts);
    }
    produce_longs(log, "table", 3, &rows);
    produce_longs(log, "stream", 3, &values);
    if tables {
        // A record without a key: dropped when processed, skipped when restored.
        let mut keyless = BatchBuilder::new(Compression::None);
        keyless.push(*ts, None, Some(&5i64.to_be_bytes()[..]));
        log.append(&TopicPartition::new("table", 0), &mut keyless)
            .expect("append");
    }
}

/// Runs phases of input on a fresh application each (a restart between phases): table rows
/// first, then stream records, so what each stream record meets is the model's table at that
/// point whatever the threads' interleaving.
fn phases_on_threads(store_type: StoreType, lose_state: bool) {
    phases_on_threads_with(store_type, lose_state, [300, 500, 15, 500]);
}

/// As [`phases_on_threads`], with `sizes`: the rows and stream records of run 1, the rows
/// changed while the application is down, the stream records of run 2.
fn phases_on_threads_with(store_type: StoreType, lose_state: bool, sizes: [u64; 4]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut model = Model::default();
    let mut ts = 0;
    // Run 1: rows, then stream records once the rows are in.
    phase(&log, &mut model, &mut ts, sizes[0], true);
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    wait_idle(&running);
    phase(&log, &mut model, &mut ts, sizes[1], false);
    wait_idle(&running);
    running.close().expect("close");
    if lose_state {
        std::fs::remove_dir_all(&state).expect("remove the state directory");
    }
    // A few rows change while the application is down; run 2 restores the table from its
    // source topic up to the committed offsets (an in-memory store, or a lost state
    // directory) or opens it as it was, then processes the new rows, then new stream records.
    phase(&log, &mut model, &mut ts, sizes[2], true);
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    wait_idle(&running);
    // Every row of run 1 is in the table's topic below the committed offsets: an in-memory
    // or lost store restores them all (and plus-one's changelog: a record per key per commit
    // that changed it), a kept persistent store none (its recorded position is the committed
    // offset).
    let restored = running.records_restored();
    match (store_type, lose_state) {
        (StoreType::Persistent, false) => assert_eq!(restored, 0),
        _ => assert!(restored >= sizes[0], "restored {restored}"),
    }
    let rows = running
        .store(StoreQueryParameters::from_name_and_type(
            "rows",
            QueryableStoreTypes::key_value::<String, i64>(),
        ))
        .expect("the table's store");
    let mut queried: Vec<_> = rows.all().expect("all");
    queried.sort();
    let mut want: Vec<_> = model.table.iter().map(|(k, v)| (k.clone(), *v)).collect();
    want.sort();
    assert_eq!(
        queried, want,
        "the table after its restoration and new rows"
    );
    phase(&log, &mut model, &mut ts, sizes[3], false);
    wait_idle(&running);
    running.close().expect("close");

    for topic in ["inner", "left", "even", "mapped", "materialized"] {
        let mut want: BTreeMap<String, Vec<Option<i64>>> = BTreeMap::new();
        for (k, v, _) in model.outputs.get(topic).into_iter().flatten() {
            want.entry(k.clone()).or_default().push(*v);
        }
        assert_eq!(longs_per_key(&log, topic), want, "{topic} ({store_type:?})");
    }
    let topics: Vec<String> = log.topics().into_iter().map(|(t, _)| t).collect();
    assert!(
        !topics.iter().any(|t| t.contains("rows-changelog")),
        "the table's store has no changelog topic of its own: {topics:?}"
    );
    assert!(
        topics.iter().any(|t| t.contains("plus-one-changelog")),
        "a materialized map_values is logged: {topics:?}"
    );
}

#[test]
fn stream_threads_join_as_the_model_across_restarts_in_memory() {
    phases_on_threads(StoreType::InMemory, false);
}

#[test]
fn stream_threads_join_as_the_model_across_restarts_persistent() {
    phases_on_threads(StoreType::Persistent, false);
}

#[test]
fn a_persistent_table_whose_state_directory_is_lost_is_restored_from_its_topic() {
    phases_on_threads(StoreType::Persistent, true);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Random amounts of rows and stream records in each phase, in memory or on disk, with or
    /// without the state directory lost: the joins' outputs per key are the model's.
    #[test]
    fn stream_threads_join_random_phases_as_the_model(
        sizes in prop::array::uniform4(0u64..120),
        persistent in any::<bool>(),
        lose_state in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        phases_on_threads_with(store_type, lose_state, sizes);
    }
}

#[test]
fn joining_topics_of_different_partition_counts_is_an_error_naming_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    log.create_topic("table", 2).expect("table");
    log.create_topic("stream", 3).expect("stream");
    let mut config = StreamsConfig::new("copartition");
    config.state_dir = dir.path().join("state");
    let error = StreamsApp::new(
        topology(StoreType::InMemory),
        config,
        EmbeddedBackend::new(log).shared(),
    )
    .map(|_| ())
    .expect_err("not co-partitioned");
    let message = error.to_string();
    assert!(
        message.contains("stream has 3 partitions and table has 2")
            && message.contains("co-partitioned"),
        "{message}"
    );
}

#[test]
fn a_suppressed_key_updated_while_buffered_keeps_the_time_it_was_first_buffered() {
    let updates = vec![
        (key(0), Some(1), 5),
        (key(0), Some(2), 10),
        (key(1), Some(3), 15),
    ];
    assert_eq!(
        suppressed_model(&updates, 10),
        vec![(key(0), Some(2), 10)],
        "k0 buffered at 5 goes at stream time 15 with its latest row"
    );
    let builder = StreamsBuilder::new();
    builder
        .table(
            "table",
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::named("rows"),
        )
        .suppress(riffle::dsl::Suppressed::until_time_limit(
            Duration::from_millis(10),
            riffle::dsl::BufferConfig::unbounded(),
        ))
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("kept")).unwrap();
    let table = driver.create_input_topic("table", Serdes::string(), Serdes::i64());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    for (k, v, ts) in &updates {
        table.pipe_input_at(k.clone(), v.unwrap(), *ts).unwrap();
    }
    assert_eq!(
        out.read_records_to_list().unwrap(),
        vec![TestRecord::new(key(0), 2, 10)]
    );
}
