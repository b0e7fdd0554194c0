//! Poison records and the exception handlers (KIP-1033, KIP-1034): records whose value is not
//! UTF-8 (the string serde fails: `deserialization_exception_handler`) and records whose value
//! makes the application's `map_values` panic (`processing_exception_handler`), at random
//! positions among good ones. Under `continue` each is skipped once, counted in
//! `dropped-records`, and sent to the dead-letter queue as it was read with KIP-1034's headers,
//! and the good records' counts are exact against a `HashMap` count. Records the application
//! turns into a value larger than `max.request.size` meet the production exception handler:
//! under `continue` only that write is dropped (the record is still counted) and the input
//! record goes to the dead-letter queue. Under `fail` the run stops
//! with an error naming the record, and a thread replaced after dying on a record that fails
//! again stops the application rather than replaying it forever.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use rand::{Rng as _, SeedableRng as _};
use riffle::log::{Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Error, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
    TopologyTestDriver, errors::DLQ_HEADERS, errors::StreamThreadExceptionResponse,
};

mod common;

/// One input record: a good one, one the serde refuses, one the application panics on, one
/// whose echo is too large to write.
#[derive(Clone, Copy, Debug)]
enum Input {
    Good(u8),
    NotUtf8(u8),
    Boom(u8),
    TooBig(u8),
}

/// The `max.request.size` of these tests; "big" is echoed as a value of twice as many bytes.
const MAX_REQUEST_SIZE: usize = 2048;

impl Input {
    fn key(self) -> String {
        let (Input::Good(k) | Input::NotUtf8(k) | Input::Boom(k) | Input::TooBig(k)) = self;
        format!("k{k}")
    }

    fn value(self) -> Vec<u8> {
        match self {
            Input::Good(_) => b"ok".to_vec(),
            Input::NotUtf8(_) => vec![0xff, 0xfe, b'x'],
            Input::Boom(_) => b"boom".to_vec(),
            Input::TooBig(_) => b"big".to_vec(),
        }
    }

    fn is_good(self) -> bool {
        matches!(self, Input::Good(_))
    }

    /// Whether it is counted: a record whose echo cannot be written is still counted.
    fn is_counted(self) -> bool {
        matches!(self, Input::Good(_) | Input::TooBig(_))
    }
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        8 => (0u8..12).prop_map(Input::Good),
        1 => (0u8..12).prop_map(Input::NotUtf8),
        1 => (0u8..12).prop_map(Input::Boom),
        1 => (0u8..12).prop_map(Input::TooBig),
    ]
}

/// `stream(in).mapValues(panics on "boom")`, then to `echo` (a "big" value echoed larger than
/// `max.request.size`) and `groupByKey().count().toStream().to(out)`.
fn topology() -> riffle::Topology {
    let builder = StreamsBuilder::new();
    let checked = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .map_values(|v: String| {
            assert!(v != "boom", "the application cannot take {v:?}");
            v
        });
    checked
        .map_values(|v: String| {
            if v == "big" {
                "x".repeat(2 * MAX_REQUEST_SIZE)
            } else {
                v
            }
        })
        .to("echo", Produced::with(Serdes::string(), Serdes::string()));
    checked
        .group_by_key()
        .count()
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().expect("topology")
}

fn continuing(app_id: &str) -> StreamsConfig {
    let mut config = StreamsConfig::new(app_id);
    config
        .set("default.deserialization.exception.handler", "continue")
        .and_then(|c| {
            c.set(
                "processing.exception.handler",
                "org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler",
            )
        })
        .and_then(|c| c.set("default.production.exception.handler", "continue"))
        .and_then(|c| c.set("max.request.size", &MAX_REQUEST_SIZE.to_string()))
        .and_then(|c| c.set("errors.dead.letter.queue.topic.name", "dlq"))
        .expect("Kafka's names");
    config
}

/// The default handlers (fail), with this test's `max.request.size`.
fn failing(app_id: &str) -> StreamsConfig {
    let mut config = StreamsConfig::new(app_id);
    config.max_request_size = MAX_REQUEST_SIZE;
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

fn count_model(inputs: &[Input]) -> HashMap<String, i64> {
    common::count_model(
        inputs
            .iter()
            .filter(|i| i.is_counted())
            .map(|i| i.key())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Under continue: exact counts of the good records, each poison record in the
    /// dead-letter queue once, in order, raw, with the headers naming its error and origin.
    #[test]
    fn under_continue_each_poison_record_is_skipped_once_into_the_dead_letter_queue(
        inputs in proptest::collection::vec(input(), 1..80),
    ) {
        let driver = TopologyTestDriver::new(topology(), continuing("poison")).expect("driver");
        let topic = driver.create_input_topic("in", Serdes::bytes(), Serdes::bytes());
        for i in &inputs {
            topic
                .pipe_input(Bytes::from(i.key()), Bytes::from(i.value()))
                .expect("a poison record never stops the run under continue");
        }
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
        let counts = out.read_key_values_to_map().expect("out");
        prop_assert_eq!(counts, count_model(&inputs));
        let echo = driver.create_output_topic("echo", Serdes::string(), Serdes::string());
        let echoed = echo.read_key_values_to_list().expect("echo");
        let good: Vec<(String, String)> = inputs
            .iter()
            .filter(|i| i.is_good())
            .map(|i| (i.key(), "ok".to_owned()))
            .collect();
        prop_assert_eq!(echoed, good, "the echo of every good record, none of the big ones");
        let poison: Vec<(u64, Input)> = inputs
            .iter()
            .enumerate()
            .filter(|(_, i)| !i.is_good())
            .map(|(offset, i)| (offset as u64, *i))
            .collect();
        prop_assert_eq!(driver.dropped_records(), poison.len() as u64);
        let dlq = driver.read_raw("dlq", 0).expect("dlq");
        prop_assert_eq!(dlq.len(), poison.len());
        for (record, (offset, input)) in dlq.iter().zip(&poison) {
            prop_assert_eq!(record.key().map(|k| k.to_vec()), Some(input.key().into_bytes()));
            prop_assert_eq!(record.value().map(|v| v.to_vec()), Some(input.value()));
            prop_assert_eq!(header(record, DLQ_HEADERS[3]), "in");
            prop_assert_eq!(header(record, DLQ_HEADERS[4]), "0");
            prop_assert_eq!(header(record, DLQ_HEADERS[5]), offset.to_string());
            let (kind, message) = (header(record, DLQ_HEADERS[0]), header(record, DLQ_HEADERS[1]));
            match input {
                Input::NotUtf8(_) => {
                    prop_assert_eq!(kind, "riffle::Error::Deserialize");
                    prop_assert!(message.contains(&format!("in-0 offset {offset}")), "{}", message);
                }
                Input::TooBig(_) => {
                    prop_assert_eq!(kind, "riffle::Error::RecordTooLarge");
                    prop_assert!(message.contains("for echo-0 is larger than max_request_size (2048 bytes)"), "{}", message);
                }
                _ => {
                    prop_assert_eq!(kind, "riffle::Error::Panicked");
                    prop_assert!(message.contains("the application cannot take \"boom\""), "{}", message);
                }
            }
            prop_assert!(!header(record, DLQ_HEADERS[2]).is_empty());
        }
    }
}

#[test]
fn under_fail_a_poison_record_stops_the_run_naming_it() {
    for (poison, kind) in [
        (Input::NotUtf8(1), "deserialize"),
        (Input::Boom(1), "process"),
        (Input::TooBig(1), "produce"),
    ] {
        let driver = TopologyTestDriver::new(topology(), failing("fail")).expect("driver");
        let topic = driver.create_input_topic("in", Serdes::bytes(), Serdes::bytes());
        for i in [Input::Good(0), Input::Good(1)] {
            topic
                .pipe_input(Bytes::from(i.key()), Bytes::from(i.value()))
                .expect("good");
        }
        let err = topic
            .pipe_input(Bytes::from(poison.key()), Bytes::from(poison.value()))
            .expect_err("fail is the default");
        assert_eq!(err.record_location(), Some(("in", 0, 2)), "{kind}: {err}");
        let text = err.to_string();
        assert!(text.contains("in-0 offset 2"), "{kind}: {text}");
        if let Error::RecordFailed { source, .. } = &err {
            assert!(
                matches!(
                    (kind, &**source),
                    ("process", Error::Panicked { .. }) | ("produce", Error::RecordTooLarge { .. })
                ),
                "{kind}: {source}"
            );
        } else {
            assert!(matches!(err, Error::Deserialize { .. }), "{kind}: {err}");
        }
    }
}

/// A count's output made too large when a commit flushes the cache: there is no input record,
/// so under continue the dead-letter record has no key or value and names only the error;
/// under fail the run stops with the error naming the topic.
#[test]
fn a_too_large_record_from_a_cache_flush_meets_the_production_handler() {
    let topology = || {
        let builder = StreamsBuilder::new();
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .group_by_key()
            .count()
            .to_stream()
            .map_values(|n: i64| {
                if n == 3 {
                    "x".repeat(2 * MAX_REQUEST_SIZE)
                } else {
                    n.to_string()
                }
            })
            .to("sized", Produced::with(Serdes::string(), Serdes::string()));
        builder.build().expect("topology")
    };
    let pipe = |driver: &TopologyTestDriver| -> riffle::Result<()> {
        let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
        for _ in 0..4 {
            topic.pipe_input("a".to_owned(), "v".to_owned())?;
        }
        Ok(())
    };

    let driver = TopologyTestDriver::new(topology(), continuing("flush")).expect("driver");
    pipe(&driver).expect("continue");
    let sized = driver.create_output_topic("sized", Serdes::string(), Serdes::string());
    let written = sized.read_key_values_to_list().expect("sized");
    assert_eq!(
        written,
        [("a", "1"), ("a", "2"), ("a", "4")].map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert_eq!(driver.dropped_records(), 1);
    let dlq = driver.read_raw("dlq", 0).expect("dlq");
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!((dlq[0].key(), dlq[0].value()), (None, None));
    assert_eq!(
        header(&dlq[0], DLQ_HEADERS[0]),
        "riffle::Error::RecordTooLarge"
    );
    assert!(dlq[0].headers().all(|h| h.key != DLQ_HEADERS[3].as_bytes()));

    let driver = TopologyTestDriver::new(topology(), failing("flush-fail")).expect("driver");
    let err = pipe(&driver).expect_err("fail is the default");
    assert!(matches!(err, Error::RecordTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("for sized-0"), "{err}");
}

/// Real stream threads over two partitions: exact counts, each poison record in the
/// dead-letter queue once.
#[test]
fn stream_threads_skip_poison_records_once_and_count_the_rest_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
    let inputs: Vec<Input> = (0..3000)
        .map(|_| {
            let k: u8 = rng.random_range(0..40);
            match rng.random_range(0..50) {
                0 => Input::NotUtf8(k),
                1 => Input::Boom(k),
                2 => Input::TooBig(k),
                _ => Input::Good(k),
            }
        })
        .collect();
    let raw: Vec<(String, Vec<u8>)> = inputs.iter().map(|i| (i.key(), i.value())).collect();
    common::produce_raw(&log, "in", 2, &raw);
    let mut config = continuing("poison-threads");
    config.state_dir = dir.path().join("state");
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    let app = StreamsApp::new(
        topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    common::run_until_idle(app);
    assert_eq!(common::latest_longs(&log, "out"), count_model(&inputs));
    let poison = inputs.iter().filter(|i| !i.is_good()).count();
    let mut seen = std::collections::HashSet::new();
    let tp = TopicPartition::new("dlq", 0);
    for batch in log.fetch(&tp, 0, usize::MAX).expect("dlq") {
        for record in batch.records() {
            let record = record.expect("record");
            let origin = (
                header(&record, DLQ_HEADERS[4]),
                header(&record, DLQ_HEADERS[5]),
            );
            assert!(
                seen.insert(origin.clone()),
                "{origin:?} twice in the dead-letter queue"
            );
        }
    }
    assert_eq!(seen.len(), poison, "every poison record once");
}

/// Under fail with `ReplaceThread`, the replacement meets the same record and fails again: the
/// application stops after one replacement instead of looping.
#[test]
fn a_replaced_thread_failing_on_the_same_record_stops_the_application() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let raw: Vec<(String, Vec<u8>)> = [Input::Good(0), Input::NotUtf8(0), Input::Good(1)]
        .iter()
        .map(|i| (i.key(), i.value()))
        .collect();
    common::produce_raw(&log, "in", 1, &raw);
    let mut config = StreamsConfig::new("poison-replace");
    config.state_dir = dir.path().join("state");
    config.poll = Duration::from_millis(5);
    let mut app = StreamsApp::new(
        topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.set_uncaught_exception_handler(|_| StreamThreadExceptionResponse::ReplaceThread)
        .expect("handler");
    app.start().expect("start");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !app.is_shutting_down() {
        assert!(
            std::time::Instant::now() < deadline,
            "still running after {} replacements",
            app.threads_replaced()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(app.threads_replaced(), 1, "replaced once, then stopped");
    let err = app
        .close()
        .expect_err("the application stopped on the record");
    assert_eq!(err.record_location(), Some(("in", 0, 1)), "{err}");
}
