//! The operators ported from Kafka Streams (`split`, `repartition`, `to_table`, `print`, `to`
//! with a `StreamPartitioner` or a `TopicNameExtractor`, `Named`) against plain models: in the
//! topology test driver, and `split` and `repartition` on stream threads over the embedded log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use riffle::dsl::{Branched, Printed, Repartitioned};
use riffle::log::{Log, TopicPartition, partition_for_key};
use riffle::processor::RecordContext;
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Named, Processor, ProcessorContext, Produced, Record,
    Serdes, StreamsApp, StreamsBuilder, StreamsConfig, TopologyTestDriver,
};

fn strings_longs() -> Consumed<String, i64> {
    Consumed::with(Serdes::string(), Serdes::i64())
}

fn produced() -> Produced<String, i64> {
    Produced::with(Serdes::string(), Serdes::i64())
}

/// Which branch the model sends `v` to: the first predicate that holds, else the default.
fn branch_of(v: i64) -> &'static str {
    if v < 0 {
        "neg"
    } else if v % 2 == 0 {
        "even"
    } else if v % 3 == 0 {
        "three"
    } else {
        "other"
    }
}

/// `in` split four ways: `neg` (named), even (unnamed, position 2, mapped ×10 by a function),
/// multiples of 3 (taken by a consumer), the default. Every branch goes to its own topic.
fn split_topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    let branches = builder
        .stream("in", strings_longs())
        .split_named(Named::as_("s-"))
        .branch_with(|_, v| *v < 0, Branched::as_("neg"))
        .branch_with(
            |_, v| v % 2 == 0,
            Branched::with_function(|s| s.map_values(|v| v * 10)),
        )
        .branch_with(
            |_, v| v % 3 == 0,
            Branched::with_consumer(|s| s.to("three", produced())).with_name("three"),
        )
        .default_branch();
    let mut names: Vec<&str> = branches.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["s-0", "s-2", "s-neg"],
        "a consumer's branch is not in the map"
    );
    branches["s-neg"].to("neg", produced());
    branches["s-2"].to("even", produced());
    branches["s-0"].to("other", produced());
    builder.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn split_sends_each_record_to_its_first_matching_branch_or_the_default(
        records in proptest::collection::vec((0u8..6, -40i64..40), 0..120),
    ) {
        let driver = TopologyTestDriver::new(split_topology(), StreamsConfig::new("split")).unwrap();
        let input = driver.create_input_topic("in", Serdes::string(), Serdes::i64());
        let mut model: BTreeMap<&str, Vec<(String, i64)>> = BTreeMap::new();
        for (i, &(k, v)) in records.iter().enumerate() {
            input.pipe_input_at(format!("k{k}"), v, i as i64).unwrap();
            let out = if branch_of(v) == "even" { v * 10 } else { v };
            model.entry(branch_of(v)).or_default().push((format!("k{k}"), out));
        }
        for topic in ["neg", "even", "three", "other"] {
            let out = driver.create_output_topic(topic, Serdes::string(), Serdes::i64());
            let got = out.read_key_values_to_list().unwrap();
            let want = model.remove(topic).unwrap_or_default();
            prop_assert_eq!(got, want, "topic {}", topic);
        }
    }

    #[test]
    fn to_table_holds_the_latest_value_per_key_and_a_null_deletes(
        records in proptest::collection::vec((0u8..8, proptest::option::weighted(0.75, 0i64..100)), 1..100),
        rekey in any::<bool>(),
    ) {
        let builder = StreamsBuilder::new();
        let values = Serdes::optional(Serdes::i64());
        let mut stream = builder.stream("in", Consumed::with(Serdes::string(), values.clone()));
        if rekey {
            // A new key: the table reads a repartition topic.
            stream = stream.select_key(|k, _| format!("{k}!"));
        }
        stream
            .to_table_with(Serdes::string(), values.clone(), Materialized::named("latest"))
            .to_stream()
            .to("changes", Produced::with(Serdes::string(), values.clone()));
        let topology = builder.build().unwrap();
        prop_assert_eq!(topology.subtopology_count(), if rekey { 2 } else { 1 });
        let driver = TopologyTestDriver::new(topology, StreamsConfig::new("to-table")).unwrap();
        let input = driver.create_input_topic("in", Serdes::string(), values.clone());
        let mut model = BTreeMap::new();
        for (i, (k, v)) in records.iter().enumerate() {
            input.pipe_input_at(format!("k{k}"), *v, i as i64).unwrap();
            let key = if rekey { format!("k{k}!") } else { format!("k{k}") };
            match v {
                Some(v) => { model.insert(key, *v); }
                None => { model.remove(&key); }
            }
        }
        let store = driver.get_key_value_store::<String, Option<i64>>("latest").unwrap();
        let state: BTreeMap<String, i64> = store
            .all()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.expect("a deleted key is not in the store")))
            .collect();
        prop_assert_eq!(&state, &model);
        // The changes, replayed, give the same table.
        let changes = driver.create_output_topic("changes", Serdes::string(), values);
        let mut replay = BTreeMap::new();
        for (k, v) in changes.read_key_values_to_list().unwrap() {
            match v {
                Some(v) => { replay.insert(k, v); }
                None => { replay.remove(&k); }
            }
        }
        prop_assert_eq!(replay, model);
    }

    #[test]
    fn to_dynamic_writes_each_record_to_the_topic_its_extractor_names(
        records in proptest::collection::vec((0u8..6, 0i64..60), 1..80),
    ) {
        let builder = StreamsBuilder::new();
        builder.stream("in", strings_longs()).to_dynamic(
            |_: &String, v: Option<&i64>, ctx: &RecordContext<'_>| {
                format!("{}-{}", ctx.topic().unwrap_or("none"), v.map_or(-1, |v| v % 3))
            },
            produced().with_name("router"),
        );
        let driver = TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("dyn")).unwrap();
        let input = driver.create_input_topic("in", Serdes::string(), Serdes::i64());
        let mut model: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        for &(k, v) in &records {
            input.pipe_input(format!("k{k}"), v).unwrap();
            model.entry(format!("in-{}", v % 3)).or_default().push((format!("k{k}"), v));
        }
        for (topic, expected) in &model {
            let out = driver.create_output_topic(topic, Serdes::string(), Serdes::i64());
            prop_assert_eq!(&out.read_key_values_to_list().unwrap(), expected);
        }
    }
}

#[test]
fn repartition_in_the_driver_passes_every_record_through_its_topic() {
    let seen = Arc::new(AtomicU32::new(u32::MAX));
    let partitions = seen.clone();
    let builder = StreamsBuilder::new();
    builder
        .stream("in", strings_longs())
        .select_key(|_, v| format!("v{v}"))
        .repartition_with(
            Repartitioned::with(Serdes::string(), Serdes::i64())
                .with_name("by-value")
                .with_number_of_partitions(4)
                .with_stream_partitioner(move |_: &str, _: &String, _: Option<&i64>, n: u32| {
                    partitions.store(n, Ordering::Relaxed);
                    Some(0)
                }),
        )
        .to("out", produced());
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("rep")).unwrap();
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::i64());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    let mut model = Vec::new();
    for i in 0..50i64 {
        input.pipe_input(format!("k{}", i % 4), i).unwrap();
        model.push((format!("v{i}"), i));
    }
    assert_eq!(out.read_key_values_to_list().unwrap(), model);
    assert_eq!(
        seen.load(Ordering::Relaxed),
        1,
        "every topic of the driver has one partition"
    );
    let topic = format!("{}-by-value-repartition", driver.application_id());
    assert_eq!(driver.read_raw(&topic, 0).unwrap().len(), 50);
}

#[test]
fn print_writes_kafkas_format_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, mapped) = (dir.path().join("plain.txt"), dir.path().join("mapped.txt"));
    let builder = StreamsBuilder::new();
    let stream = builder.stream("in", strings_longs());
    stream.print(Printed::to_file(&plain).unwrap());
    stream
        .filter_named(|_, v| v % 2 == 0, Named::as_("evens"))
        .print(
            Printed::to_file(&mapped)
                .unwrap()
                .with_label("even")
                .with_key_value_mapper(|k, v| format!("{k}={v}"))
                .with_name("print-evens"),
        );
    let topology = builder.build().unwrap();
    let text = topology.describe().to_string();
    assert!(
        text.contains("Processor: KSTREAM-PRINTER-0000000001"),
        "{text}"
    );
    assert!(
        text.contains("Processor: print-evens (stores: [])"),
        "{text}"
    );
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("print")).unwrap();
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::i64());
    let (mut want_plain, mut want_mapped) = (String::new(), String::new());
    for i in 0..20i64 {
        let key = format!("k{}", i % 3);
        input.pipe_input(key.clone(), i).unwrap();
        // The default label is the printing stream's node name.
        want_plain.push_str(&format!("[KSTREAM-SOURCE-0000000000]: {key}, {i}\n"));
        if i % 2 == 0 {
            want_mapped.push_str(&format!("[even]: {key}={i}\n"));
        }
    }
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), want_plain);
    assert_eq!(std::fs::read_to_string(&mapped).unwrap(), want_mapped);
    assert!(Printed::<String, i64>::to_file("").is_err());
    let err = Printed::<String, i64>::to_file(dir.path().join("no/such/dir/file"))
        .err()
        .expect("a path that cannot be written");
    assert!(err.to_string().contains("no/such/dir/file"), "{err}");
}

#[test]
fn named_operations_take_the_given_names_and_keep_kafkas_numbering() {
    struct Id;
    impl Processor<String, i64, String, i64> for Id {
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_, String, i64>,
            r: Record<String, i64>,
        ) -> riffle::Result<()> {
            ctx.forward(r)
        }
    }
    let builder = StreamsBuilder::new();
    let a = builder.stream("a", strings_longs());
    let b = builder.stream("b", strings_longs());
    a.merge_named(&b, Named::as_("merge"))
        .filter_named(|_, v| *v > 0, Named::as_("positive"))
        .filter_not_named(|_, v| *v > 100, Named::as_("small"))
        .map_values_named(|v| v + 1, Named::as_("plus-one"))
        .map_named(|k, v| (k, v), Named::as_("same"))
        .flat_map_named(|k, v| [(k, v)], Named::as_("one"))
        .flat_map_values_named(|v| [v], Named::as_("one-value"))
        .select_key_named(|k, _| k.clone(), Named::as_("key"))
        .peek_named(|_, _| {}, Named::as_("look"))
        .process_named(|| Id, Named::as_("id"), &[])
        .to("out", produced().with_name("write"));
    a.foreach_named(|_, _| {}, Named::as_("each"));
    let topology = builder.build().unwrap();
    let text = topology.describe().to_string();
    for name in [
        "merge",
        "positive",
        "small",
        "plus-one",
        "same",
        "one",
        "one-value",
        "key",
        "look",
        "id",
        "each",
    ] {
        assert!(
            text.contains(&format!("Processor: {name} (stores: [])")),
            "{name}: {text}"
        );
    }
    assert!(text.contains("Sink: write (topic: out)"), "{text}");
    // A named operation takes a counter value too, as in Kafka: the sink after it is the 2nd.
    let builder = StreamsBuilder::new();
    let s = builder.stream("a", strings_longs());
    s.filter_named(|_, _| true, Named::as_("x"))
        .to("out", produced());
    let text = builder.build().unwrap().describe().to_string();
    assert!(text.contains("Sink: KSTREAM-SINK-0000000002"), "{text}");

    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("named")).unwrap();
    let input = driver.create_input_topic("a", Serdes::string(), Serdes::i64());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    for v in [-1, 5, 200, 7] {
        input.pipe_input("k".into(), v).unwrap();
    }
    let values: Vec<i64> = out
        .read_key_values_to_list()
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, [6, 8], "the named operations still do their work");
}

#[test]
fn invalid_and_duplicate_names_fail_the_build() {
    let builder = StreamsBuilder::new();
    let s = builder.stream("a", strings_longs());
    s.filter_named(|_, _| true, Named::as_("has space"));
    let err = builder.build().expect_err("an illegal name").to_string();
    assert!(err.contains("\"has space\" is illegal"), "{err}");

    let builder = StreamsBuilder::new();
    let s = builder.stream("a", strings_longs());
    s.filter_named(|_, _| true, Named::as_("twice"));
    s.peek_named(|_, _| {}, Named::as_("twice"));
    let err = builder.build().expect_err("a name taken").to_string();
    assert!(err.contains("\"twice\" already exists"), "{err}");

    let builder = StreamsBuilder::new();
    let s = builder.stream("a", strings_longs());
    s.repartition_with(Repartitioned::with(Serdes::string(), Serdes::i64()).with_name("r"));
    s.repartition_with(Repartitioned::with(Serdes::string(), Serdes::i64()).with_name("r"));
    let err = builder
        .build()
        .expect_err("one topic, two writers")
        .to_string();
    assert!(err.contains("r-repartition"), "{err}");
}

// ---- on stream threads, over the embedded log ----

fn produce_longs(log: &Log, topic: &str, partitions: u32, records: &[(String, i64)]) {
    let records: Vec<(String, Option<i64>, i64)> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| (k.clone(), Some(*v), i as i64))
        .collect();
    common::produce_longs(log, topic, partitions, &records);
}

/// Every record of `topic`: (partition, key, value).
fn read_longs(log: &Log, topic: &str) -> Vec<(u32, String, i64)> {
    let mut out = Vec::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new(topic, p), 0, usize::MAX)
            .unwrap()
        {
            for record in batch.records() {
                let record = record.unwrap();
                let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                let value: [u8; 8] = record.value().unwrap()[..].try_into().unwrap();
                out.push((p, key, i64::from_be_bytes(value)));
            }
        }
    }
    out
}

fn app(topology: riffle::Topology, log: &Log, state: &std::path::Path, id: &str) -> StreamsApp {
    let mut config = StreamsConfig::new(id);
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.poll = std::time::Duration::from_millis(5);
    StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared()).unwrap()
}

fn records(n: i64) -> Vec<(String, i64)> {
    (0..n)
        .map(|i| (format!("k{}", (i * 7) % 23), (i * 37) % 81 - 40))
        .collect()
}

#[test]
fn split_on_stream_threads_matches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::in_memory();
    let input = records(600);
    produce_longs(&log, "in", 3, &input);
    app(split_topology(), &log, dir.path(), "split-threads")
        .run_until_idle()
        .unwrap();
    for (topic, branch) in [
        ("neg", "neg"),
        ("even", "even"),
        ("three", "three"),
        ("other", "other"),
    ] {
        let mut got: Vec<(String, i64)> = read_longs(&log, topic)
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect();
        let mut want: Vec<(String, i64)> = input
            .iter()
            .filter(|(_, v)| branch_of(*v) == branch)
            .map(|(k, v)| (k.clone(), if branch == "even" { v * 10 } else { *v }))
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "topic {topic}");
    }
}

/// Forwards each value with the partition it was read from as its key's suffix.
struct WithPartition;

impl Processor<String, i64, String, i64> for WithPartition {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, i64>,
        r: Record<String, i64>,
    ) -> riffle::Result<()> {
        let partition = ctx.record_metadata().map_or(u32::MAX, |m| m.partition);
        let key = format!("{}@{partition}", r.key());
        ctx.forward(r.with_key(key))
    }
}

#[test]
fn repartition_with_a_stream_partitioner_puts_each_record_on_the_partition_it_chose() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::in_memory();
    let input = records(500);
    produce_longs(&log, "in", 2, &input);
    // Non-negative values choose partition `v % 5`; negative ones leave it to the default.
    let chosen = |v: i64, n: u32| (v >= 0).then(|| (v as u32) % n);
    let builder = StreamsBuilder::new();
    builder
        .stream("in", strings_longs())
        .repartition_with(
            Repartitioned::with(Serdes::string(), Serdes::i64())
                .with_number_of_partitions(5)
                .with_stream_partitioner(move |_: &str, _: &String, v: Option<&i64>, n: u32| {
                    v.and_then(|v| chosen(*v, n))
                }),
        )
        .process(|| WithPartition, &[])
        .to("out", produced());
    let topology = builder.build().unwrap();
    let text = topology.describe().to_string();
    assert!(
        text.contains(
            "Sink: KSTREAM-SINK-0000000002 (topic: KSTREAM-REPARTITION-0000000001-repartition)"
        ),
        "{text}"
    );
    app(topology, &log, dir.path(), "rep-threads")
        .run_until_idle()
        .unwrap();
    assert_eq!(
        log.partitions("rep-threads-KSTREAM-REPARTITION-0000000001-repartition"),
        Some(5)
    );
    let mut got: Vec<(String, i64)> = read_longs(&log, "out")
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect();
    let mut want: Vec<(String, i64)> = input
        .iter()
        .map(|(k, v)| {
            let p = chosen(*v, 5).unwrap_or_else(|| partition_for_key(k.as_bytes(), 5));
            (format!("{k}@{p}"), *v)
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_produced_stream_partitioner_chooses_the_partition_of_each_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::in_memory();
    let input = records(300);
    produce_longs(&log, "in", 2, &input);
    log.create_topic("out", 4).unwrap();
    let builder = StreamsBuilder::new();
    builder.stream("in", strings_longs()).to(
        "out",
        produced().with_stream_partitioner(|_: &str, _: &String, v: Option<&i64>, n: u32| {
            v.map(|v| v.rem_euclid(n as i64) as u32)
        }),
    );
    app(builder.build().unwrap(), &log, dir.path(), "produced")
        .run_until_idle()
        .unwrap();
    let got = read_longs(&log, "out");
    assert_eq!(got.len(), input.len());
    for (p, _, v) in got {
        assert_eq!(p as i64, v.rem_euclid(4), "value {v}");
    }
}

#[test]
fn a_topic_name_extractor_naming_a_missing_topic_stops_the_app_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::in_memory();
    produce_longs(&log, "in", 1, &records(10));
    let builder = StreamsBuilder::new();
    builder.stream("in", strings_longs()).to_dynamic(
        |_: &String, _: Option<&i64>, _: &RecordContext<'_>| "nowhere".to_owned(),
        produced(),
    );
    let mut app = app(builder.build().unwrap(), &log, dir.path(), "dyn-missing");
    app.set_uncaught_exception_handler(|_| {
        riffle::errors::StreamThreadExceptionResponse::ShutdownClient
    })
    .unwrap();
    let err = app.run_until_idle().expect_err("no topic nowhere");
    let message = err.to_string();
    assert!(
        message.contains("topic nowhere does not exist"),
        "{message}"
    );
    assert!(message.contains("in-0 offset 0"), "{message}");
    assert_eq!(log.partitions("nowhere"), None, "not created");
}

#[test]
fn a_repartition_topic_given_a_partition_count_needs_at_least_one() {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", strings_longs())
        .repartition_with(
            Repartitioned::with(Serdes::string(), Serdes::i64()).with_number_of_partitions(0),
        )
        .to("out", produced());
    let err = builder.build().expect_err("zero partitions").to_string();
    assert!(err.contains("0 partitions"), "{err}");
}

#[test]
fn a_partition_out_of_range_fails_naming_the_sink_the_topic_and_the_record() {
    let mut topology = riffle::Topology::new();
    topology
        .add_source("read", consumed_longs(), &["in"])
        .unwrap()
        .add_sink(
            "write",
            "out",
            produced()
                .with_stream_partitioner(|_: &str, _: &String, _: Option<&i64>, n: u32| Some(n)),
            &["read"],
        )
        .unwrap();
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("range")).unwrap();
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::i64());
    let err = input
        .pipe_input("k".into(), 1)
        .expect_err("partition 1 of a one-partition topic");
    let message = err.to_string();
    assert!(message.contains("processor write"), "{message}");
    assert!(
        message.contains("partition 1 of out, which has 1 partitions"),
        "{message}"
    );
    assert!(message.contains("in-0 offset 0"), "{message}");
}

fn consumed_longs() -> Consumed<String, i64> {
    strings_longs()
}
