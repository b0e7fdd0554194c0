//! The processor API through the topology test driver: every context method, punctuation
//! against a model of Kafka's rules, stores, timestamps and headers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use riffle::{
    Consumed, Error, FixedKeyProcessor, FixedKeyProcessorContext, Headers, Processor,
    ProcessorContext, Produced, Record, Result, Serdes, Stores, StreamsBuilder, StreamsConfig,
    Topology, TopologyTestDriver, processor::FixedKeyRecord, processor::PunctuationType,
    processor::TimestampExtractorRef, testing::TestRecord,
};

/// A test driver for what `builder` built, as application `app`.
fn drive(builder: StreamsBuilder, app: &str) -> TopologyTestDriver {
    TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new(app)).unwrap()
}

fn strings() -> (riffle::SerdeRef<String>, riffle::SerdeRef<String>) {
    (Serdes::string(), Serdes::string())
}

/// What the context said while processing one record.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    meta: Option<(String, u32, u64)>,
    task: String,
    app: String,
    stream_time: i64,
    system_time: i64,
    timestamp: i64,
}

type Log = std::sync::Arc<std::sync::Mutex<Vec<Seen>>>;

struct Recorder {
    log: Log,
}

fn seen<K, V>(ctx: &ProcessorContext<'_, K, V>) -> Seen {
    Seen {
        meta: ctx
            .record_metadata()
            .map(|m| (m.topic.to_string(), m.partition, m.offset)),
        task: ctx.task_id().to_string(),
        app: ctx.application_id().to_owned(),
        stream_time: ctx.current_stream_time_ms(),
        system_time: ctx.current_system_time_ms(),
        timestamp: ctx.timestamp(),
    }
}

impl Processor<String, String, String, String> for Recorder {
    fn init(&mut self, ctx: &mut ProcessorContext<'_, String, String>) -> Result<()> {
        let log = self.log.clone();
        ctx.schedule(
            Duration::from_millis(1000),
            PunctuationType::WallClockTime,
            move |ctx, time| {
                log.lock().unwrap().push(seen(ctx));
                ctx.forward(Record::new("tick".into(), time.to_string(), time))
            },
        )?;
        Ok(())
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        self.log.lock().unwrap().push(seen(ctx));
        if record.value() == "left" {
            ctx.forward_to("left", record)
        } else {
            ctx.forward(record)
        }
    }
}

#[test]
fn the_context_tells_metadata_task_application_and_both_clocks() {
    let log: Log = Log::default();
    let recorder = log.clone();
    let mut topology = Topology::new();
    let (k, v) = strings();
    topology
        .add_source("src", Consumed::with(k.clone(), v.clone()), &["in"])
        .unwrap()
        .add_processor(
            "rec",
            move || Recorder {
                log: recorder.clone(),
            },
            &["src"],
        )
        .unwrap()
        .add_sink(
            "left",
            "left-out",
            Produced::with(k.clone(), v.clone()),
            &["rec"],
        )
        .unwrap()
        .add_sink(
            "all",
            "all-out",
            Produced::with(k.clone(), v.clone()),
            &["rec"],
        )
        .unwrap();
    let driver =
        TopologyTestDriver::with_wall_clock(topology, StreamsConfig::new("ctx-app"), 50_000)
            .unwrap();
    let input = driver.create_input_topic("in", k.clone(), v.clone());
    let left = driver.create_output_topic("left-out", k.clone(), v.clone());
    let all = driver.create_output_topic("all-out", k.clone(), v.clone());
    input.pipe_input_at("a".into(), "x".into(), 100).unwrap();
    input.pipe_input_at("b".into(), "left".into(), 70).unwrap();
    driver
        .advance_wall_clock_time(Duration::from_millis(999))
        .unwrap();
    assert!(all.read_key_value().unwrap() == Some(("a".into(), "x".into())));
    assert!(all.is_empty().unwrap(), "not due yet: 999 ms of 1000");
    driver
        .advance_wall_clock_time(Duration::from_millis(1))
        .unwrap();

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    let record = |offset, stream_time, timestamp| Seen {
        meta: Some(("in".into(), 0, offset)),
        task: "0_0".into(),
        app: "ctx-app".into(),
        stream_time,
        system_time: 50_000,
        timestamp,
    };
    assert_eq!(seen[0], record(0, 100, 100));
    assert_eq!(
        seen[1],
        record(1, 100, 70),
        "stream time is the largest timestamp, not the latest"
    );
    assert_eq!(
        seen[2],
        Seen {
            meta: None,
            task: "0_0".into(),
            app: "ctx-app".into(),
            stream_time: 100,
            system_time: 51_000,
            timestamp: 51_000,
        },
        "a punctuator has no input record; its time is the punctuation time"
    );
    let keys = |list: Vec<(String, String)>| list.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    assert_eq!(
        keys(left.read_key_values_to_list().unwrap()),
        ["a", "b", "tick"],
        "forward reaches every child, forward_to only the named one"
    );
    let tick = all.read_record().unwrap().expect("the punctuator's record");
    assert_eq!((tick.key.as_str(), tick.timestamp), ("tick", 51_000));
    assert!(all.is_empty().unwrap());
}

#[test]
fn misusing_the_context_is_an_error_naming_the_processor() {
    struct Bad(&'static str);
    impl Processor<String, String, String, String> for Bad {
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_, String, String>,
            record: Record<String, String>,
        ) -> Result<()> {
            match self.0 {
                "child" => ctx.forward_to("nobody", record),
                "store" => ctx.get_state_store::<String, i64>("missing").map(drop),
                "types" => ctx.get_state_store::<String, String>("counts").map(drop),
                _ => Err(Error::user("the processor's own error")),
            }
        }
    }
    for (case, expected) in [
        ("child", "not a child"),
        ("store", "not connected"),
        ("types", "does not hold"),
        ("user", "the processor's own error"),
    ] {
        let builder = StreamsBuilder::new();
        builder.add_state_store(Stores::key_value_store_builder(
            Stores::in_memory_key_value_store("counts"),
            Serdes::string(),
            Serdes::i64(),
        ));
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .process(move || Bad(case), &["counts"])
            .to("out", Produced::with(Serdes::string(), Serdes::string()));
        let driver = drive(builder, "bad");
        let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
        let err = input
            .pipe_input("k".into(), "v".into())
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{case}: {err}");
        assert!(
            err.contains("KSTREAM-PROCESSOR-0000000001"),
            "{case}: {err}"
        );
    }
}

/// Counts per key in a store; `commit()` after every record.
struct Counter;

impl Processor<String, String, String, i64> for Counter {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, i64>,
        record: Record<String, String>,
    ) -> Result<()> {
        let mut store = ctx.get_state_store::<String, i64>("counts")?;
        let n = store.get(record.key())?.unwrap_or(0) + 1;
        store.put(record.key(), &n)?;
        let key = record.key().clone();
        ctx.forward(record.with_key(key).with_value(n))
    }
}

#[test]
fn a_processor_store_matches_a_hashmap_and_reads_its_own_writes() {
    let builder = StreamsBuilder::new();
    builder.add_state_store(
        Stores::key_value_store_builder(
            Stores::persistent_key_value_store("counts"),
            Serdes::string(),
            Serdes::i64(),
        )
        .with_caching_enabled(),
    );
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(|| Counter, &["counts"])
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let driver = drive(builder, "c");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    let mut model: HashMap<String, i64> = HashMap::new();
    for i in 0..300u32 {
        let key = format!("k{}", (i * 7) % 23);
        *model.entry(key.clone()).or_default() += 1;
        input.pipe_input(key.clone(), "v".into()).unwrap();
        assert_eq!(
            out.read_key_value().unwrap(),
            Some((key.clone(), model[&key]))
        );
    }
    let store = driver.get_key_value_store::<String, i64>("counts").unwrap();
    let mut expected: Vec<(String, i64)> = model.into_iter().collect();
    expected.sort();
    assert_eq!(store.all().unwrap(), expected);
    assert_eq!(
        store.range(&"k10".into(), &"k13".into()).unwrap(),
        expected
            .iter()
            .filter(|(k, _)| k.as_str() >= "k10" && k.as_str() <= "k13")
            .cloned()
            .collect::<Vec<_>>(),
        "range is inclusive at both ends"
    );
    assert_eq!(store.approximate_num_entries().unwrap(), 23);
    assert!(
        driver
            .get_key_value_store::<String, String>("counts")
            .is_err()
    );
}

#[test]
fn put_if_absent_and_delete_return_what_was_there() {
    struct Ops;
    impl FixedKeyProcessor<String, String, String> for Ops {
        fn process(
            &mut self,
            ctx: &mut FixedKeyProcessorContext<'_, String, String>,
            record: FixedKeyRecord<String, String>,
        ) -> Result<()> {
            let mut store = ctx.get_state_store::<String, String>("kv")?;
            let said = match record.value().as_str() {
                "delete" => format!("{:?}", store.delete(record.key())?),
                v => format!("{:?}", store.put_if_absent(record.key(), &v.to_owned())?),
            };
            ctx.forward(record.with_value(said))
        }
    }
    let builder = StreamsBuilder::new();
    builder.add_state_store(
        Stores::key_value_store_builder(
            Stores::in_memory_key_value_store("kv"),
            Serdes::string(),
            Serdes::string(),
        )
        .with_logging_disabled(),
    );
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process_values(|| Ops, &["kv"])
        .to("out", Produced::with(Serdes::string(), Serdes::string()));
    let driver = drive(builder, "o");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
    for v in ["1", "2", "delete", "delete", "3"] {
        input.pipe_input("k".into(), v.into()).unwrap();
    }
    let said: Vec<String> = out
        .read_key_values_to_list()
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(said, ["None", "Some(\"1\")", "Some(\"1\")", "None", "None"]);
}

/// Forwards a record at each stream-time punctuation, with the punctuation time.
struct Ticker {
    interval: u64,
}

impl Processor<String, String, String, String> for Ticker {
    fn init(&mut self, ctx: &mut ProcessorContext<'_, String, String>) -> Result<()> {
        ctx.schedule(
            Duration::from_millis(self.interval),
            PunctuationType::StreamTime,
            |ctx, time| ctx.forward(Record::new("punctuate".into(), time.to_string(), time)),
        )?;
        Ok(())
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        ctx.forward(record)
    }
}

/// Kafka's rule, written out: stream time is the largest timestamp so far; the first
/// punctuation is due at 0; when stream time reaches the deadline the punctuator fires once,
/// with the stream time, and the next deadline is the first multiple of the interval after it.
fn punctuation_model(timestamps: &[i64], interval: i64) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let (mut stream_time, mut next) = (-1i64, 0i64);
    for (i, &ts) in timestamps.iter().enumerate() {
        stream_time = stream_time.max(ts);
        out.push((format!("r{i}"), ts));
        if stream_time >= next {
            out.push(("punctuate".into(), stream_time));
            next = (stream_time / interval + 1) * interval;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn stream_time_punctuation_fires_once_per_crossing_like_kafka(
        timestamps in proptest::collection::vec(0i64..5_000, 1..60),
        interval in 1u64..700,
    ) {
        let builder = StreamsBuilder::new();
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .process(move || Ticker { interval }, &[])
            .to("out", Produced::with(Serdes::string(), Serdes::string()));
        let driver = drive(builder, "p");
        let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
        for (i, &ts) in timestamps.iter().enumerate() {
            input.pipe_input_at(format!("r{i}"), "v".into(), ts).unwrap();
        }
        let got: Vec<(String, i64)> = out
            .read_records_to_list()
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.timestamp))
            .collect();
        prop_assert_eq!(got, punctuation_model(&timestamps, interval as i64));
    }
}

#[test]
fn a_cancelled_punctuator_stops_and_wall_clock_punctuators_fire_without_input() {
    struct Once;
    impl Processor<String, String, String, String> for Once {
        fn init(&mut self, ctx: &mut ProcessorContext<'_, String, String>) -> Result<()> {
            let fired = Rc::new(RefCell::new(0));
            let slot: Rc<RefCell<Option<riffle::processor::Cancellable>>> = Rc::default();
            let handle = slot.clone();
            let c = ctx.schedule(
                Duration::from_secs(1),
                PunctuationType::WallClockTime,
                move |ctx, time| {
                    *fired.borrow_mut() += 1;
                    if *fired.borrow() == 2
                        && let Some(c) = handle.borrow().as_ref()
                    {
                        c.cancel();
                    }
                    ctx.forward(Record::new("tick".into(), time.to_string(), time))
                },
            )?;
            *slot.borrow_mut() = Some(c);
            Ok(())
        }
        fn process(
            &mut self,
            _: &mut ProcessorContext<'_, String, String>,
            _: Record<String, String>,
        ) -> Result<()> {
            Ok(())
        }
    }
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(|| Once, &[])
        .to("out", Produced::with(Serdes::string(), Serdes::string()));
    let driver =
        TopologyTestDriver::with_wall_clock(builder.build().unwrap(), StreamsConfig::new("w"), 0)
            .unwrap();
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
    driver
        .advance_wall_clock_time(Duration::from_millis(3_500))
        .unwrap();
    driver
        .advance_wall_clock_time(Duration::from_millis(600))
        .unwrap();
    driver
        .advance_wall_clock_time(Duration::from_secs(10))
        .unwrap();
    let times: Vec<i64> = out
        .read_records_to_list()
        .unwrap()
        .into_iter()
        .map(|r| r.timestamp)
        .collect();
    assert_eq!(
        times,
        [3_500, 4_100],
        "a jump of 3.5 intervals fires once; the second firing cancels it"
    );
}

#[test]
fn headers_pass_through_dsl_operators_and_a_processor_can_change_them() {
    struct Tag;
    impl FixedKeyProcessor<String, String, String> for Tag {
        fn process(
            &mut self,
            ctx: &mut FixedKeyProcessorContext<'_, String, String>,
            mut record: FixedKeyRecord<String, String>,
        ) -> Result<()> {
            assert_eq!(ctx.headers(), record.headers());
            record
                .headers_mut()
                .remove(b"drop")
                .add("seen-by", Some(Bytes::from_static(b"tag")));
            ctx.forward(record)
        }
    }
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .map_values(|v| v.to_uppercase())
        .filter(|_, v| !v.is_empty())
        .process_values(|| Tag, &[])
        .to("out", Produced::with(Serdes::string(), Serdes::string()));
    let driver = drive(builder, "h");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
    let mut headers = Headers::new();
    headers
        .add("trace", Some(Bytes::from_static(b"t-1")))
        .add("drop", None)
        .add("trace", Some(Bytes::from_static(b"t-2")));
    input
        .pipe_record(TestRecord {
            key: "k".into(),
            value: "v".into(),
            timestamp: 5,
            headers,
        })
        .unwrap();
    input.pipe_input_at("plain".into(), "w".into(), 6).unwrap();
    let records = out.read_records_to_list().unwrap();
    let h: Vec<(String, Option<Bytes>)> = records[0]
        .headers
        .iter()
        .map(|h| (h.key_str().unwrap().to_owned(), h.value.clone()))
        .collect();
    assert_eq!(
        h,
        [
            ("trace".to_string(), Some(Bytes::from_static(b"t-1"))),
            ("trace".to_string(), Some(Bytes::from_static(b"t-2"))),
            ("seen-by".to_string(), Some(Bytes::from_static(b"tag"))),
        ]
    );
    assert_eq!((records[0].value.as_str(), records[0].timestamp), ("V", 5));
    assert_eq!(
        records[1].headers.len(),
        1,
        "only the tag: the input had none"
    );
}

#[test]
fn a_negative_timestamp_fails_by_default_naming_the_record_and_extractors_can_change_that() {
    let build = |consumed: Consumed<String, String>| {
        let builder = StreamsBuilder::new();
        builder
            .stream("in", consumed)
            .to("out", Produced::with(Serdes::string(), Serdes::string()));
        builder.build().unwrap()
    };
    let (k, v) = strings();
    let driver = TopologyTestDriver::new(
        build(Consumed::with(k.clone(), v.clone())),
        StreamsConfig::new("t"),
    )
    .unwrap();
    let input = driver.create_input_topic("in", k.clone(), v.clone());
    input.pipe_input_at("a".into(), "x".into(), 1).unwrap();
    let err = input.pipe_input_at("b".into(), "y".into(), -5).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidTimestamp { topic, partition: 0, offset: 1, timestamp: -5, .. } if topic == "in"),
        "{err}"
    );

    // Skipping: the record is dropped, the next one goes on.
    let mut config = StreamsConfig::new("t");
    config
        .set(
            "default.timestamp.extractor",
            "LogAndSkipOnInvalidTimestamp",
        )
        .unwrap();
    let driver =
        TopologyTestDriver::new(build(Consumed::with(k.clone(), v.clone())), config).unwrap();
    let input = driver.create_input_topic("in", k.clone(), v.clone());
    let out = driver.create_output_topic("out", k.clone(), v.clone());
    input.pipe_input_at("a".into(), "x".into(), -1).unwrap();
    input.pipe_input_at("b".into(), "y".into(), 2).unwrap();
    assert_eq!(
        out.read_key_values_to_list().unwrap(),
        [("b".to_string(), "y".to_string())]
    );

    // A source's own extractor: the value's length as the timestamp.
    let consumed = Consumed::with(k.clone(), v.clone()).with_timestamp_extractor(
        TimestampExtractorRef::from_fn(|r, _| r.value().map_or(0, |v| v.len() as i64 * 1000)),
    );
    let driver = TopologyTestDriver::new(build(consumed), StreamsConfig::new("t")).unwrap();
    let input = driver.create_input_topic("in", k.clone(), v.clone());
    let out = driver.create_output_topic("out", k, v);
    input.pipe_input_at("a".into(), "xyz".into(), 7).unwrap();
    assert_eq!(out.read_record().unwrap().unwrap().timestamp, 3000);
}

#[test]
fn the_low_level_api_checks_names_and_types_and_mixes_with_the_dsl() {
    let builder = StreamsBuilder::new();
    let counts = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream();
    let parent = counts.node_name();
    let mut topology = builder.build().unwrap();
    let err = topology
        .add_sink(
            "bad",
            "out",
            Produced::with(Serdes::string(), Serdes::string()),
            &[&parent],
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("takes") && err.contains("forwards") && err.contains("i64"),
        "{err}"
    );
    let err = topology
        .add_sink(
            "bad",
            "out",
            Produced::with(Serdes::string(), Serdes::i64()),
            &["nope"],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope"), "{err}");
    topology
        .add_sink(
            "counts",
            "out",
            Produced::with(Serdes::string(), Serdes::i64()),
            &[&parent],
        )
        .unwrap();
    let text = topology.describe().to_string();
    assert!(text.contains("Sink: counts (topic: out)"), "{text}");
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("mix")).unwrap();
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    input.pipe_input("a".into(), "1".into()).unwrap();
    input.pipe_input("a".into(), "2".into()).unwrap();
    assert_eq!(
        out.read_key_values_to_map().unwrap(),
        HashMap::from([("a".to_string(), 2)])
    );
    let store = driver
        .get_key_value_store::<String, i64>("KSTREAM-AGGREGATE-STATE-STORE-0000000001")
        .unwrap();
    assert_eq!(store.get(&"a".into()).unwrap(), Some(2));
}

#[test]
fn processors_sharing_a_store_are_one_sub_topology() {
    let mut topology = Topology::new();
    let (k, v) = strings();
    topology
        .add_source("a", Consumed::with(k.clone(), v.clone()), &["in-a"])
        .unwrap()
        .add_source("b", Consumed::with(k.clone(), v.clone()), &["in-b"])
        .unwrap()
        .add_processor("count-a", || Counter, &["a"])
        .unwrap()
        .add_processor("count-b", || Counter, &["b"])
        .unwrap()
        .add_state_store(
            Stores::key_value_store_builder(
                Stores::in_memory_key_value_store("counts"),
                Serdes::string(),
                Serdes::i64(),
            ),
            &["count-a"],
        )
        .unwrap()
        .connect_processor_and_state_stores("count-b", &["counts"])
        .unwrap()
        .add_sink(
            "out",
            "out",
            Produced::with(k.clone(), Serdes::i64()),
            &["count-a", "count-b"],
        )
        .unwrap();
    assert_eq!(topology.subtopology_count(), 1);
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("s")).unwrap();
    let a = driver.create_input_topic("in-a", k.clone(), v.clone());
    let b = driver.create_input_topic("in-b", k.clone(), v.clone());
    let out = driver.create_output_topic("out", k, Serdes::i64());
    a.pipe_input("x".into(), "1".into()).unwrap();
    b.pipe_input("x".into(), "1".into()).unwrap();
    assert_eq!(
        out.read_key_values_to_list().unwrap(),
        [("x".to_string(), 1), ("x".to_string(), 2)],
        "both processors count in the one store"
    );
}

#[test]
fn init_runs_before_the_first_record_and_close_when_the_driver_closes() {
    type Calls = std::sync::Arc<std::sync::Mutex<Vec<String>>>;
    struct Lifecycle(Calls);
    impl Processor<String, String, String, String> for Lifecycle {
        fn init(&mut self, _: &mut ProcessorContext<'_, String, String>) -> Result<()> {
            self.0.lock().unwrap().push("init".into());
            Ok(())
        }
        fn process(
            &mut self,
            _: &mut ProcessorContext<'_, String, String>,
            record: Record<String, String>,
        ) -> Result<()> {
            self.0
                .lock()
                .unwrap()
                .push(format!("process {}", record.key()));
            Ok(())
        }
        fn close(&mut self) {
            self.0.lock().unwrap().push("close".into());
        }
    }
    let calls = Calls::default();
    let made = calls.clone();
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(move || Lifecycle(made.clone()), &[]);
    let driver = drive(builder, "l");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    input.pipe_input("a".into(), "1".into()).unwrap();
    driver.close();
    assert_eq!(*calls.lock().unwrap(), ["init", "process a", "close"]);
}

#[test]
fn process_may_change_keys_and_repartitions_before_a_grouping_process_values_does_not() {
    struct Same;
    impl FixedKeyProcessor<String, String, String> for Same {
        fn process(
            &mut self,
            ctx: &mut FixedKeyProcessorContext<'_, String, String>,
            record: FixedKeyRecord<String, String>,
        ) -> Result<()> {
            ctx.forward(record)
        }
    }
    struct Rekey;
    impl Processor<String, String, String, String> for Rekey {
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_, String, String>,
            record: Record<String, String>,
        ) -> Result<()> {
            let key = record.value().clone();
            ctx.forward(record.with_key(key))
        }
    }
    let fixed = StreamsBuilder::new();
    fixed
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process_values(|| Same, &[])
        .group_by_key()
        .count();
    assert_eq!(fixed.build().unwrap().subtopology_count(), 1);

    let rekeyed = StreamsBuilder::new();
    rekeyed
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(|| Rekey, &[])
        .group_by_key()
        .count()
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let topology = rekeyed.build().unwrap();
    assert_eq!(
        topology.subtopology_count(),
        2,
        "a repartition topic after process"
    );
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("rk")).unwrap();
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    for (k, v) in [("a", "x"), ("b", "x"), ("c", "y")] {
        input.pipe_input(k.into(), v.into()).unwrap();
    }
    assert_eq!(
        out.read_key_values_to_map().unwrap(),
        HashMap::from([("x".to_string(), 2), ("y".to_string(), 1)]),
        "counted by the new key"
    );
}

#[test]
fn a_store_with_logging_disabled_has_no_changelog_and_an_enabled_one_has() {
    for logged in [true, false] {
        let builder = StreamsBuilder::new();
        let store = Stores::key_value_store_builder(
            Stores::in_memory_key_value_store("counts"),
            Serdes::string(),
            Serdes::i64(),
        );
        builder.add_state_store(if logged {
            store.with_logging_enabled(Default::default())
        } else {
            store.with_logging_disabled()
        });
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .process(|| Counter, &["counts"])
            .to("out", Produced::with(Serdes::string(), Serdes::i64()));
        let driver = drive(builder, "lg");
        let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
        input.pipe_input("a".into(), "1".into()).unwrap();
        input.pipe_input("a".into(), "2".into()).unwrap();
        let changelog = driver.read_raw("lg-counts-changelog", 0);
        if logged {
            let records = changelog.unwrap();
            assert_eq!(records.len(), 2, "caching off: every write is logged");
        } else {
            assert!(changelog.is_err(), "no changelog topic");
        }
    }
}
