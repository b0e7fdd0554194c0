//! Global tables and stream–global-table joins against a model: a `HashMap` table replayed in
//! arrival order, each stream record joined with the row of the key it computes (inner: none
//! without a row; left: with nothing). Record by record in the test driver by proptest; on
//! stream threads over the file-backed log, where the global thread restores every partition
//! before the stream threads start (so records already in the log meet the whole table) and
//! follows the topic after, across a restart; a global topic needs no co-partitioning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::{longs_per_key, produce_longs, two_thread_config, wait_idle};
use proptest::prelude::*;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Error, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, Topology, TopologyTestDriver, dsl::StoreType, testing::TestRecord,
};

/// Orders (key: order id, value: a product id as `p<n>`) joined with the products global table
/// (key: product id, value: a price):
/// - `priced`: inner, `order * 1000 + price`;
/// - `all`: left, `-1` for an unknown product;
/// - `keyed`: inner with the key-aware joiner, the order id's length added.
fn topology() -> Topology {
    topology_with(StoreType::InMemory)
}

fn topology_with(store_type: StoreType) -> Topology {
    let builder = StreamsBuilder::new();
    let products = builder.global_table(
        "products",
        Consumed::with(Serdes::string(), Serdes::i64()),
        Materialized::named("products-store").with_store_type(store_type),
    );
    let orders = builder.stream("orders", Consumed::with(Serdes::string(), Serdes::i64()));
    let product = |_: &String, v: &i64| format!("p{}", v % 10);
    let out = || Produced::with(Serdes::string(), Serdes::i64());
    orders
        .join_global(&products, product, |v, price| v * 1000 + price)
        .to("priced", out());
    orders
        .left_join_global(&products, product, |v, price| {
            v * 1000 + price.unwrap_or(-1)
        })
        .to("all", out());
    orders
        .join_global_with_key(&products, product, |k, v, price| {
            v * 1000 + price + k.len() as i64
        })
        .to("keyed", out());
    builder.build().expect("topology")
}

#[derive(Clone, Debug)]
enum Input {
    /// A product's price (`None`: deleted).
    Product(u8, Option<i64>),
    /// An order: its id and value (its product is the value modulo 10).
    Order(u8, i64),
}

fn product(p: u8) -> String {
    format!("p{p}")
}

fn order(o: u8) -> String {
    format!("order-{o}")
}

type Output = (String, i64, i64);

#[derive(Default)]
struct Model {
    products: HashMap<String, i64>,
    outputs: BTreeMap<&'static str, Vec<Output>>,
}

impl Model {
    fn apply(&mut self, input: &Input, ts: i64) {
        match *input {
            Input::Product(p, price) => {
                match price {
                    Some(price) => self.products.insert(product(p), price),
                    None => self.products.remove(&product(p)),
                };
            }
            Input::Order(o, v) => {
                let k = order(o);
                let price = self.products.get(&format!("p{}", v % 10)).copied();
                let mut emit = |topic, value| {
                    self.outputs
                        .entry(topic)
                        .or_default()
                        .push((k.clone(), value, ts))
                };
                if let Some(price) = price {
                    emit("priced", v * 1000 + price);
                    emit("keyed", v * 1000 + price + k.len() as i64);
                }
                emit("all", v * 1000 + price.unwrap_or(-1));
            }
        }
    }
}

const OUTPUTS: [&str; 3] = ["priced", "all", "keyed"];

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        2 => (0u8..10, prop::option::weighted(0.8, 0i64..100)).prop_map(|(p, v)| Input::Product(p, v)),
        3 => (0u8..20, 0i64..100).prop_map(|(o, v)| Input::Order(o, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every join, record by record: the outputs in order with their values and timestamps.
    #[test]
    fn the_test_driver_joins_the_global_table_as_the_model_does(
        inputs in prop::collection::vec((input(), 0i64..50), 1..60)
    ) {
        let driver = TopologyTestDriver::new(topology(), StreamsConfig::new("global"))
            .expect("driver");
        let products = driver.create_input_topic("products", Serdes::string(), Serdes::i64());
        let orders = driver.create_input_topic("orders", Serdes::string(), Serdes::i64());
        let mut model = Model::default();
        for (input, ts) in &inputs {
            match *input {
                Input::Product(p, Some(price)) => products.pipe_input_at(product(p), price, *ts).expect("pipe"),
                Input::Product(p, None) => products.pipe_tombstone_at(product(p), *ts).expect("pipe"),
                Input::Order(o, v) => orders.pipe_input_at(order(o), v, *ts).expect("pipe"),
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
            prop_assert_eq!(got, model.outputs.remove(topic).unwrap_or_default(), "topic {}", topic);
        }
    }
}

#[test]
fn a_global_table_is_described_apart_from_the_tasks() {
    let description = topology().describe().to_string();
    assert!(
        description.contains("Global store: products-store (topic: products"),
        "{description}"
    );
    assert!(!description.contains("topics: [products]"), "{description}");
}

// ---- on stream threads, over the file-backed log ----

/// Each key's values in `topic`, in offset order (the joins write no tombstones).
fn read(log: &Log, topic: &str) -> BTreeMap<String, Vec<i64>> {
    longs_per_key(log, topic)
        .into_iter()
        .map(|(k, values)| (k, values.into_iter().flatten().collect()))
        .collect()
}

fn app(log: &Log, state: &std::path::Path, store_type: StoreType) -> StreamsApp {
    let config = two_thread_config("global-threads", state);
    StreamsApp::new(
        topology_with(store_type),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app")
}

/// `n` product rows (some deletes) or orders, applied to the model; products on 3 partitions,
/// orders on 2 (a global table needs no co-partitioning).
fn phase(log: &Log, model: &mut Model, ts: &mut i64, n: u64, products: bool) {
    let mut records = Vec::new();
    for i in 0..n {
        *ts += 1;
        let x = i.wrapping_mul(2_654_435_761).wrapping_add(n * 31) % 1_000;
        let input = if products {
            Input::Product((x % 10) as u8, (x % 7 != 3).then_some((x % 97) as i64))
        } else {
            Input::Order((x % 40) as u8, (x % 100) as i64)
        };
        match &input {
            Input::Product(p, price) => records.push((product(*p), *price, *ts)),
            Input::Order(o, v) => records.push((order(*o), Some(*v), *ts)),
        }
        model.apply(&input, *ts);
    }
    if products {
        produce_longs(log, "products", 3, &records);
    } else {
        produce_longs(log, "orders", 2, &records);
    }
}

/// Runs: products then orders before the start, products then orders while running, then a
/// restart with products changed while down; the persistent store reads on from where it was,
/// the in-memory one reads the topic again. Then the topic is recreated with a few rows: the
/// persistent store's positions are past its end, so it is wiped and read again.
fn global_joins_on_threads(store_type: StoreType) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut model = Model::default();
    let mut ts = 0;
    // Products, then orders, all in the log before the start: the global thread restores
    // every product before any stream thread processes an order.
    phase(&log, &mut model, &mut ts, 200, true);
    phase(&log, &mut model, &mut ts, 300, false);
    let mut keyless = BatchBuilder::new(Compression::None);
    keyless.push(ts, None, Some(&5i64.to_be_bytes()[..]));
    log.append(&TopicPartition::new("products", 1), &mut keyless)
        .expect("append");
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    assert_eq!(running.records_restored(), 201, "every product record read");
    wait_idle(&running);
    // While running: the global thread follows the products, then orders meet them.
    phase(&log, &mut model, &mut ts, 50, true);
    wait_idle(&running);
    phase(&log, &mut model, &mut ts, 300, false);
    wait_idle(&running);
    running.close().expect("close");
    // Down, products change; at the restart they are read before orders.
    phase(&log, &mut model, &mut ts, 30, true);
    phase(&log, &mut model, &mut ts, 200, false);
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    let restored = running.records_restored();
    match store_type {
        StoreType::Persistent => assert_eq!(restored, 30, "only the products since the last run"),
        _ => assert_eq!(restored, 281, "every product record again"),
    }
    wait_idle(&running);
    running.close().expect("close");
    for topic in OUTPUTS {
        let mut want: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (k, v, _) in model.outputs.get(topic).into_iter().flatten() {
            want.entry(k.clone()).or_default().push(*v);
        }
        assert_eq!(read(&log, topic), want, "{topic} ({store_type:?})");
    }
    // The topic recreated with 3 rows: whatever the store kept is not its table any more.
    log.delete_topic("products").expect("delete");
    model.products.clear();
    phase(&log, &mut model, &mut ts, 3, true);
    phase(&log, &mut model, &mut ts, 100, false);
    let mut running = app(&log, &state, store_type);
    running.start().expect("start");
    assert_eq!(
        running.records_restored(),
        3,
        "the recreated topic's records"
    );
    wait_idle(&running);
    running.close().expect("close");
    for topic in OUTPUTS {
        let mut want: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (k, v, _) in model.outputs.get(topic).into_iter().flatten() {
            want.entry(k.clone()).or_default().push(*v);
        }
        assert_eq!(
            read(&log, topic),
            want,
            "{topic} after the topic was recreated ({store_type:?})"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Random phases of products and orders while the application runs, waiting for it to be
    /// idle between them (the global thread included), in memory or on disk: the joins'
    /// outputs per key are the model's.
    #[test]
    fn stream_threads_join_random_phases_with_the_global_table(
        phases in prop::collection::vec((any::<bool>(), 0u64..150), 1..6),
        persistent in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        log.create_topic("products", 3).expect("products");
        log.create_topic("orders", 2).expect("orders");
        let mut model = Model::default();
        let mut ts = 0;
        let mut running = app(&log, &dir.path().join("state"), store_type);
        running.start().expect("start");
        for (products, n) in phases {
            phase(&log, &mut model, &mut ts, n, products);
            wait_idle(&running);
        }
        running.close().expect("close");
        for topic in OUTPUTS {
            let mut want: BTreeMap<String, Vec<i64>> = BTreeMap::new();
            for (k, v, _) in model.outputs.get(topic).into_iter().flatten() {
                want.entry(k.clone()).or_default().push(*v);
            }
            prop_assert_eq!(read(&log, topic), want, "{} ({:?})", topic, store_type);
        }
    }
}

#[test]
fn stream_threads_join_the_global_table_as_the_model_across_restarts_in_memory() {
    global_joins_on_threads(StoreType::InMemory);
}

#[test]
fn stream_threads_join_a_persistent_global_table_that_reads_on_from_its_positions() {
    global_joins_on_threads(StoreType::Persistent);
}

#[test]
fn a_missing_global_topic_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    log.create_topic("orders", 1).expect("orders");
    let mut config = StreamsConfig::new("global-missing");
    config.state_dir = dir.path().join("state");
    let error = StreamsApp::new(topology(), config, EmbeddedBackend::new(log).shared())
        .map(|_| ())
        .expect_err("no products topic");
    assert!(
        matches!(&error, Error::MissingSourceTopic { topic } if topic == "products"),
        "{error}"
    );
}

#[test]
fn a_stream_record_meets_the_global_row_piped_before_it() {
    let driver = TopologyTestDriver::new(topology(), StreamsConfig::new("order")).expect("driver");
    let products = driver.create_input_topic("products", Serdes::string(), Serdes::i64());
    let orders = driver.create_input_topic("orders", Serdes::string(), Serdes::i64());
    let priced = driver.create_output_topic("priced", Serdes::string(), Serdes::i64());
    orders.pipe_input_at(order(1), 3, 1).unwrap();
    products.pipe_input_at(product(3), 7, 2).unwrap();
    orders.pipe_input_at(order(2), 13, 3).unwrap();
    products.pipe_tombstone_at(product(3), 4).unwrap();
    orders.pipe_input_at(order(3), 23, 5).unwrap();
    assert_eq!(
        priced.read_records_to_list().unwrap(),
        vec![TestRecord::new(order(2), 13_007, 3)]
    );
}

/// A global record whose value does not decode (3 bytes for an `i64`): under `continue` it is
/// skipped and the rest of the table is read; under `fail`, the default, the application does
/// not start, with an error naming the record (Kafka's global thread hands such records to the
/// deserialization exception handler too).
#[test]
fn a_global_record_that_does_not_decode_meets_the_deserialization_handler() {
    for continue_ in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        let mut model = Model::default();
        let mut ts = 0;
        phase(&log, &mut model, &mut ts, 20, true);
        let mut bad = BatchBuilder::new(Compression::None);
        bad.push(ts, Some(b"p-bad"), Some(&b"xyz"[..]));
        log.append(&TopicPartition::new("products", 2), &mut bad)
            .expect("append");
        phase(&log, &mut model, &mut ts, 20, true);
        phase(&log, &mut model, &mut ts, 50, false);
        let mut config = StreamsConfig::new("global-poison");
        config.state_dir = dir.path().join("state");
        config.poll = Duration::from_millis(5);
        if continue_ {
            config.deserialization_exception_handler =
                riffle::errors::ExceptionHandlerRef::log_and_continue();
        }
        let mut running = StreamsApp::new(
            topology(),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .expect("app");
        let started = running.start();
        if !continue_ {
            let error = started.expect_err("the default handler fails the restore");
            let message = error.to_string();
            assert!(
                message.contains("products-2") && message.contains("offset"),
                "{message}"
            );
            continue;
        }
        started.expect("start");
        wait_idle(&running);
        running.close().expect("close");
        let mut want: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (k, v, _) in model.outputs.get("all").into_iter().flatten() {
            want.entry(k.clone()).or_default().push(*v);
        }
        assert_eq!(read(&log, "all"), want, "every good product was read");
    }
}

/// The restore reads up to the end offsets the global thread found when it began: products
/// appended without pause meanwhile do not keep `start` from returning (they are followed
/// after).
#[test]
fn start_returns_while_the_global_topic_keeps_growing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    log.create_topic("orders", 2).expect("orders");
    let mut model = Model::default();
    let mut ts = 0;
    phase(&log, &mut model, &mut ts, 2_000, true);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let records: Vec<_> = (0..200)
                    .map(|i| (product((i % 10) as u8), Some(i64::from(i)), 1))
                    .collect();
                produce_longs(&log, "products", 3, &records);
                n += 1;
            }
            n
        })
    };
    let mut running = app(&log, &dir.path().join("state"), StoreType::InMemory);
    let started = Instant::now();
    running.start().expect("start");
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let batches = writer.join().expect("writer");
    assert!(batches > 0, "the writer ran");
    assert!(took < Duration::from_secs(30), "start took {took:?}");
    wait_idle(&running);
    running.close().expect("close");
}
