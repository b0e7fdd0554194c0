//! A serde that refuses to serialize some values (a key or value starting with "bad", as
//! Kafka's JSON serdes refuse a value they cannot write), where records are written:
//!
//! - in a sink, the production exception handler decides (Kafka's
//!   `handleSerializationException`, origin key or value): under fail (the default) the run
//!   stops with an error naming the input record, the output topic and partition, the part
//!   and the serde's message; under continue that record is dropped, counted in
//!   `dropped-records` and sent to the dead-letter queue, and every other record is written
//!   exactly as a model of the input says;
//! - in a repartition topic, the same, naming the repartition topic;
//! - in a store (an aggregation's value, a processor-API store's), the processing exception
//!   handler decides, as Kafka's store serdes' exceptions inside a processor, with an error
//!   naming the store (and the processor, for the processor API).
//!
//! Through the test driver and through stream threads on the embedded log.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use riffle::errors::{
    DLQ_HEADERS, ErrorHandlerContext, ExceptionHandlerRef, HandlerResponse, SerdeError,
    SerializationExceptionOrigin,
};
use riffle::log::{Log, LogOptions, TopicPartition, partition_for_key};
use riffle::serde::Serde;
use riffle::{
    Consumed, EmbeddedBackend, Error, Grouped, Materialized, Processor, ProcessorContext, Produced,
    Record, SerdeRef, Serdes, Stores, StreamsApp, StreamsBuilder, StreamsConfig,
    TopologyTestDriver,
};

mod common;

/// Strings, refusing to serialize any that starts with "bad".
struct Picky;

impl Serde<String> for Picky {
    fn serialize(&self, value: &String, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        if value.starts_with("bad") {
            return Err(SerdeError::Unserializable {
                type_name: "Picky",
                reason: format!("refuses {value:?}"),
            });
        }
        out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<String, SerdeError> {
        Serdes::string().deserialize(bytes)
    }
}

fn picky() -> SerdeRef<String> {
    Arc::new(Picky)
}

fn bad(s: &str) -> bool {
    s.starts_with("bad")
}

/// `in` to `out` through a sink whose key and value serdes are [`Picky`].
fn sink_topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .to("out", Produced::with(picky(), picky()));
    builder.build().expect("topology")
}

/// What a production or processing handler was called with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    /// The input record's offset.
    offset: Option<u64>,
    origin: SerializationExceptionOrigin,
    /// The topic or store named by the error.
    target: String,
    partition: Option<u32>,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// A handler answering `response` and recording each serialization failure it sees.
fn recording(calls: &Calls, response: HandlerResponse) -> ExceptionHandlerRef {
    let calls = calls.clone();
    ExceptionHandlerRef::from_fn(move |context: &ErrorHandlerContext<'_>, error: &Error| {
        let call = match error {
            Error::Serialize {
                origin,
                topic,
                partition,
                ..
            } => Call {
                offset: context.offset,
                origin: *origin,
                target: topic.clone(),
                partition: *partition,
            },
            Error::SerializeState { store, origin, .. } => Call {
                offset: context.offset,
                origin: *origin,
                target: store.clone(),
                partition: None,
            },
            other => panic!("not a serialization failure: {other}"),
        };
        calls.lock().expect("calls").push(call);
        response
    })
}

/// Under continue, with a dead-letter queue and handlers recording what they see.
fn continuing(app_id: &str, calls: &Calls) -> StreamsConfig {
    let mut config = StreamsConfig::new(app_id);
    config.production_exception_handler = recording(calls, HandlerResponse::Continue);
    config.processing_exception_handler = recording(calls, HandlerResponse::Continue);
    config.errors_dead_letter_queue_topic_name = Some("dlq".into());
    config
}

fn header(record: &riffle::log::Record, name: &str) -> String {
    let value = record
        .headers()
        .find(|h| h.key == name.as_bytes())
        .and_then(|h| h.value)
        .unwrap_or_else(|| panic!("no header {name}"));
    String::from_utf8(value.to_vec()).expect("utf-8 header")
}

/// A key or value: good ones `k0`..`k3` / `v0`..`v9`, or a bad one.
fn part(prefix: &'static str, n: u8) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0..n).prop_map(move |i| format!("{prefix}{i}")),
        1 => (0..n).prop_map(move |i| format!("bad-{prefix}{i}")),
    ]
}

/// The handler call a bad record at `offset` makes in the sink to `out` of `partitions`: the
/// key is serialized first, so a bad key is the key's failure, without a partition (the
/// partition comes from the key's bytes).
fn sink_call(offset: u64, key: &str, value: &str, partitions: u32) -> Option<Call> {
    let (origin, partition) = if bad(key) {
        (SerializationExceptionOrigin::Key, None)
    } else if bad(value) {
        let partition = partition_for_key(key.as_bytes(), partitions);
        (SerializationExceptionOrigin::Value, Some(partition))
    } else {
        return None;
    };
    Some(Call {
        offset: Some(offset),
        origin,
        target: "out".into(),
        partition,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Under continue every good record reaches `out` in order and every bad one is dropped
    /// once: counted, handed to the handler with its origin, in the dead-letter queue as it
    /// was read with the error's name and message.
    #[test]
    fn under_continue_each_unserializable_record_is_dropped_once(
        inputs in proptest::collection::vec((part("k", 4), part("v", 10)), 1..40),
    ) {
        let calls = Calls::default();
        let driver = TopologyTestDriver::new(sink_topology(), continuing("sink", &calls))
            .expect("driver");
        let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
        for (k, v) in &inputs {
            topic.pipe_input(k.clone(), v.clone()).expect("continue");
        }
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
        let written = out.read_key_values_to_list().expect("out");
        let good: Vec<(String, String)> =
            inputs.iter().filter(|(k, v)| !bad(k) && !bad(v)).cloned().collect();
        prop_assert_eq!(written, good);
        let expected: Vec<Call> = inputs
            .iter()
            .enumerate()
            .filter_map(|(i, (k, v))| sink_call(i as u64, k, v, 1))
            .collect();
        prop_assert_eq!(driver.dropped_records(), expected.len() as u64);
        prop_assert_eq!(&*calls.lock().expect("calls"), &expected);
        let dlq = driver.read_raw("dlq", 0).expect("dlq");
        prop_assert_eq!(dlq.len(), expected.len());
        for (record, call) in dlq.iter().zip(&expected) {
            let offset = call.offset.expect("an input record");
            let (k, v) = &inputs[offset as usize];
            prop_assert_eq!(record.key().map(|b| b.to_vec()), Some(k.clone().into_bytes()));
            prop_assert_eq!(record.value().map(|b| b.to_vec()), Some(v.clone().into_bytes()));
            prop_assert_eq!(header(record, DLQ_HEADERS[0]), "riffle::Error::Serialize");
            prop_assert_eq!(header(record, DLQ_HEADERS[5]), offset.to_string());
            let message = header(record, DLQ_HEADERS[1]);
            let refused = if bad(k) { k } else { v };
            let expected = match call.origin {
                SerializationExceptionOrigin::Key => format!(
                    "cannot serialize the key of a record for topic out: Picky: cannot \
                     serialize: refuses {refused:?}"
                ),
                SerializationExceptionOrigin::Value => format!(
                    "cannot serialize the value of a record for topic out partition 0: Picky: \
                     cannot serialize: refuses {refused:?}"
                ),
            };
            prop_assert_eq!(message, expected);
        }
    }
}

/// Under fail (the default) the run stops at the bad record with an error naming the input
/// record, the output topic, the partition (for a value), the part and the serde's message.
#[test]
fn under_fail_an_unserializable_record_stops_the_run_naming_it() {
    for (key, value, origin, text) in [
        (
            "k1",
            "bad-v",
            SerializationExceptionOrigin::Value,
            "processing the record at in-0 offset 1 failed: cannot serialize the value of a \
             record for topic out partition 0: Picky: cannot serialize: refuses \"bad-v\"",
        ),
        (
            "bad-k",
            "v",
            SerializationExceptionOrigin::Key,
            "processing the record at in-0 offset 1 failed: cannot serialize the key of a \
             record for topic out: Picky: cannot serialize: refuses \"bad-k\"",
        ),
    ] {
        let driver =
            TopologyTestDriver::new(sink_topology(), StreamsConfig::new("fail")).expect("driver");
        let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
        topic
            .pipe_input("k0".to_owned(), "v0".to_owned())
            .expect("good");
        let err = topic
            .pipe_input(key.to_owned(), value.to_owned())
            .expect_err("fail is the default");
        assert_eq!(err.to_string(), text);
        assert_eq!(err.record_location(), Some(("in", 0, 1)));
        let Error::RecordFailed { source, .. } = &err else {
            panic!("{err:?}");
        };
        let Error::Serialize {
            origin: o,
            topic,
            source,
            ..
        } = &**source
        else {
            panic!("{source:?}");
        };
        assert_eq!((*o, topic.as_str()), (origin, "out"));
        assert!(matches!(source, SerdeError::Unserializable { .. }));
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
        assert_eq!(
            out.read_key_values_to_list().expect("out"),
            [("k0".to_owned(), "v0".to_owned())]
        );
    }
}

/// `in` re-keyed by its value, grouped with a [`Picky`] key serde (the repartition topic's
/// sink refuses bad keys), reduced to the latest value per key in store `latest` whose value
/// serde is [`Picky`] (the store refuses bad values: here values are `key/value` strings, bad
/// when the value part is).
fn stateful_topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .map(|k: String, v: String| (k.clone(), format!("{v}/{k}")))
        .group_by_key_with(Grouped::with(picky(), Serdes::string()))
        .reduce(
            |_, new| new,
            Materialized::named("latest").with_value_serde(picky()),
        )
        .to_stream()
        .to(
            "latest-out",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    builder.build().expect("topology")
}

/// A bad key fails at the repartition topic (the production handler); a good key with a bad
/// value fails at the store (the processing handler). Under continue the store holds the
/// latest good value per key (a `BTreeMap` model); under fail the error names the store.
#[test]
fn repartition_and_store_failures_meet_their_handlers() {
    let inputs = [
        ("k0", "v0"),
        ("bad-k", "v1"),
        ("k1", "bad-v"),
        ("k1", "v3"),
        ("k0", "bad-w"),
        ("k2", "v5"),
    ];
    let calls = Calls::default();
    let driver = TopologyTestDriver::new(stateful_topology(), continuing("stateful", &calls))
        .expect("driver");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    for (k, v) in inputs {
        topic.pipe_input(k.into(), v.into()).expect("continue");
    }
    let out = driver.create_output_topic("latest-out", Serdes::string(), Serdes::string());
    let mut model = BTreeMap::new();
    for (k, v) in inputs {
        if !bad(k) && !bad(v) {
            model.insert(k.to_owned(), format!("{v}/{k}"));
        }
    }
    let latest: BTreeMap<String, String> = out
        .read_key_values_to_map()
        .expect("latest-out")
        .into_iter()
        .collect();
    assert_eq!(latest, model);
    // The repartition topic's records are read from offsets of their own.
    let repartition = "stateful-latest-repartition".to_owned();
    let calls = calls.lock().expect("calls").clone();
    assert_eq!(
        calls,
        [
            Call {
                offset: Some(1),
                origin: SerializationExceptionOrigin::Key,
                target: repartition,
                partition: None,
            },
            Call {
                offset: Some(1),
                origin: SerializationExceptionOrigin::Value,
                target: "latest".into(),
                partition: None,
            },
            Call {
                offset: Some(3),
                origin: SerializationExceptionOrigin::Value,
                target: "latest".into(),
                partition: None,
            },
        ]
    );
    assert_eq!(driver.dropped_records(), 3);

    let driver = TopologyTestDriver::new(stateful_topology(), StreamsConfig::new("stateful-fail"))
        .expect("driver");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    topic.pipe_input("k0".into(), "v0".into()).expect("good");
    let err = topic
        .pipe_input("k1".into(), "bad-v".into())
        .expect_err("fail is the default");
    assert_eq!(
        err.to_string(),
        "processing the record at stateful-fail-latest-repartition-0 offset 1 failed: cannot \
         serialize a value for store latest: Picky: cannot serialize: refuses \"bad-v/k1\""
    );
}

/// The values per key of `topic`'s partitions, in order, and how many records it holds.
fn values_per_key(log: &Log, topic: &str) -> (HashMap<String, Vec<String>>, usize) {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    let mut n = 0;
    for p in 0..log.partitions(topic).unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new(topic, p), 0, usize::MAX)
            .expect("fetch")
        {
            for record in batch.records() {
                let record = record.expect("record");
                let text = |b: Option<Vec<u8>>| String::from_utf8(b.unwrap_or_default());
                let key = text(record.key().map(|b| b.to_vec())).expect("utf-8");
                let value = text(record.value().map(|b| b.to_vec())).expect("utf-8");
                out.entry(key).or_default().push(value);
                n += 1;
            }
        }
    }
    (out, n)
}

/// Stream threads over two partitions under continue: each key's good values reach `out` in
/// order, each bad record is dropped once (the production handler sees its origin, and the
/// value's partition of `out`), counted in `dropped-records-total` and sent to the dead-letter
/// queue. Under fail the application stops naming the record.
#[test]
fn stream_threads_drop_unserializable_records_once_or_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let inputs: Vec<(String, String)> = (0..600u32)
        .map(|i| {
            let key = if i % 37 == 5 {
                format!("bad-k{}", i % 3)
            } else {
                format!("k{}", i % 23)
            };
            let value = if i % 11 == 3 {
                format!("bad-v{i}")
            } else {
                format!("v{i}")
            };
            (key, value)
        })
        .collect();
    common::produce(&log, "in", 2, &inputs);
    log.create_topic("out", 2).expect("out");
    let calls = Calls::default();
    let mut config = continuing("threads", &calls);
    config.state_dir = dir.path().join("state");
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    let mut app = StreamsApp::new(
        sink_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.start().expect("start");
    common::wait_idle(&app);
    let dropped: f64 = app
        .metrics()
        .iter()
        .filter(|m| m.group == "stream-task-metrics" && m.name == "dropped-records-total")
        .map(|m| m.value)
        .sum();
    app.close().expect("continue");

    let mut model: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in inputs.iter().filter(|(k, v)| !bad(k) && !bad(v)) {
        model.entry(k.clone()).or_default().push(v.clone());
    }
    let (written, _) = values_per_key(&log, "out");
    assert_eq!(written, model, "each key's good values, in order");
    let bad_records: Vec<&(String, String)> =
        inputs.iter().filter(|(k, v)| bad(k) || bad(v)).collect();
    assert_eq!(dropped as usize, bad_records.len());
    let mut seen: Vec<(SerializationExceptionOrigin, Option<u32>)> = calls
        .lock()
        .expect("calls")
        .iter()
        .map(|c| (c.origin, c.partition))
        .collect();
    let mut expected: Vec<(SerializationExceptionOrigin, Option<u32>)> = bad_records
        .iter()
        .filter_map(|(k, v)| sink_call(0, k, v, 2).map(|c| (c.origin, c.partition)))
        .collect();
    seen.sort_by_key(|(o, p)| (*o == SerializationExceptionOrigin::Key, *p));
    expected.sort_by_key(|(o, p)| (*o == SerializationExceptionOrigin::Key, *p));
    assert_eq!(seen, expected);
    let (_, dead_letters) = values_per_key(&log, "dlq");
    assert_eq!(dead_letters, bad_records.len(), "each once");

    // Under fail: the thread stops at the first bad record of its partition.
    let log = Log::open(dir.path().join("log-fail"), LogOptions::default()).expect("log");
    let inputs =
        [("k0", "v0"), ("k0", "bad-v1"), ("k0", "v2")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    common::produce(&log, "in", 1, &inputs);
    log.create_topic("out", 1).expect("out");
    let mut config = StreamsConfig::new("threads-fail");
    config.state_dir = dir.path().join("state-fail");
    config.poll = Duration::from_millis(5);
    let mut app = StreamsApp::new(
        sink_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.start().expect("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !app.is_shutting_down() {
        assert!(Instant::now() < deadline, "still running");
        std::thread::sleep(Duration::from_millis(10));
    }
    let err = app.close().expect_err("fail is the default");
    assert_eq!(err.record_location(), Some(("in", 0, 1)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(
            "cannot serialize the value of a record for topic out partition 0: Picky: cannot \
             serialize: refuses \"bad-v1\""
        ),
        "{text}"
    );
}

/// Keeps each record's value in store `kept` (a [`Picky`] value serde) and forwards it.
struct Keeper;

impl Processor<String, String, String, String> for Keeper {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<String, String>,
    ) -> riffle::Result<()> {
        ctx.get_state_store::<String, String>("kept")?
            .put(record.key(), record.value())?;
        ctx.forward(record)
    }
}

/// A processor-API store's serde refusing a value: the processor's failure, named, for the
/// processing handler (as Kafka's store serdes' exceptions inside `process`).
#[test]
fn a_processor_store_refusing_a_value_fails_the_processor() {
    let topology = || {
        let builder = StreamsBuilder::new();
        builder.add_state_store(Stores::key_value_store_builder(
            Stores::persistent_key_value_store("kept"),
            Serdes::string(),
            picky(),
        ));
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .process(|| Keeper, &["kept"])
            .to("out", Produced::with(Serdes::string(), Serdes::string()));
        builder.build().expect("topology")
    };
    let driver = TopologyTestDriver::new(topology(), StreamsConfig::new("keeper")).expect("driver");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    input.pipe_input("a".into(), "v0".into()).expect("good");
    let err = input
        .pipe_input("a".into(), "bad-v1".into())
        .expect_err("fail is the default");
    let Error::RecordFailed {
        offset, processor, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        (*offset, processor.as_deref()),
        (1, Some("KSTREAM-PROCESSOR-0000000001"))
    );
    assert!(
        err.to_string().contains(
            "cannot serialize a value for store kept: Picky: cannot serialize: refuses \"bad-v1\""
        ),
        "{err}"
    );

    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut config = StreamsConfig::new("keeper-continue");
    let names = seen.clone();
    config.processing_exception_handler =
        ExceptionHandlerRef::from_fn(move |context: &ErrorHandlerContext<'_>, error: &Error| {
            let named = context.processor_node_id.map(str::to_owned);
            names
                .lock()
                .expect("names")
                .push((named, error.to_string()));
            HandlerResponse::Continue
        });
    let driver = TopologyTestDriver::new(topology(), config).expect("driver");
    let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    for v in ["v0", "bad-v1", "v2"] {
        input.pipe_input("a".into(), v.into()).expect("continue");
    }
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::string());
    let values: Vec<String> = out
        .read_key_values_to_list()
        .expect("out")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, ["v0", "v2"]);
    assert_eq!(driver.dropped_records(), 1);
    let seen = seen.lock().expect("names").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0.as_deref(), Some("KSTREAM-PROCESSOR-0000000001"));
    assert!(seen[0].1.contains("store kept"), "{}", seen[0].1);
    let kept = driver
        .get_key_value_store::<String, String>("kept")
        .expect("kept");
    assert_eq!(
        kept.get(&"a".to_owned()).expect("get"),
        Some("v2".to_owned())
    );
}
