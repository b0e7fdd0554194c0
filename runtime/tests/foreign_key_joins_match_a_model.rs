//! Foreign-key table joins (KIP-213) against a model: two `HashMap` tables replayed in arrival
//! order and, for each left key, its joined row: the left row joined with the right row of the
//! foreign key it names (inner: none without one; left: with nothing). In the test driver, by
//! proptest, after every record: the result (each key's last output, a delete removing it, and
//! the materialized join's store) is the model's, and the record emitted only for the keys it
//! could change (its own key; for a right row, the left keys naming its key before or after).
//! On stream threads over the file-backed log, with the tables on different partition counts,
//! across a restart: the result at the end; and over 3 partitions with customers deleted and
//! created again, and orders moving between them, several times within one commit (written in
//! bursts while the threads run): the result at the end. Kafka Streams' own scenario of a
//! foreign key changing is checked record by record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use common::{produce_longs, table_of_longs, two_thread_config, wait_idle};
use proptest::prelude::*;
use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, KTable, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, Topology, TopologyTestDriver, dsl::StoreType, dsl::TableJoined,
    query::QueryableStoreTypes, query::StoreQueryParameters, testing::TestRecord,
};

/// A left row: an order's amount, whose foreign key is the customer `c<amount % 10>`, or none
/// when the amount is negative.
fn foreign_key(amount: i64) -> Option<String> {
    (amount >= 0).then(|| format!("c{}", amount % 10))
}

const JOINS: [(&str, bool, bool); 4] = [
    // (output topic, left join, materialized)
    ("inner", false, false),
    ("left", true, false),
    ("inner-materialized", false, true),
    ("left-materialized", true, true),
];

fn joined(amount: i64, customer: Option<i64>) -> i64 {
    amount * 1000 + customer.unwrap_or(-1)
}

/// Orders (key `o<n>`, an amount) joined by foreign key with customers (key `c<n>`, a number):
/// each join of [`JOINS`] to its topic, deletes as nulls; a materialized join in store
/// `<topic>-store`.
fn topology(store_type: StoreType) -> Topology {
    let builder = StreamsBuilder::new();
    let orders = builder.table(
        "orders",
        Consumed::with(Serdes::string(), Serdes::i64()),
        Materialized::named("orders-rows").with_store_type(store_type),
    );
    let customers = builder.table(
        "customers",
        Consumed::with(Serdes::string(), Serdes::i64()),
        Materialized::named("customers-rows").with_store_type(store_type),
    );
    let fk = |_: &String, amount: &i64| foreign_key(*amount);
    for (topic, left, materialized) in JOINS {
        let m = || Materialized::named(format!("{topic}-store")).with_store_type(store_type);
        let table: KTable<String, i64> = match (left, materialized) {
            (false, false) => {
                orders.join_foreign(&customers, fk, |a, c| joined(a, Some(c)), Serdes::i64())
            }
            (false, true) => orders.join_foreign_with(
                &customers,
                fk,
                |a, c| joined(a, Some(c)),
                Serdes::i64(),
                TableJoined::new(),
                m(),
            ),
            (true, false) => orders.left_join_foreign(&customers, fk, joined, Serdes::i64()),
            // Named: its topics and subscription store are `fk-left-…`.
            (true, true) => orders.left_join_foreign_with(
                &customers,
                fk,
                joined,
                Serdes::i64(),
                TableJoined::named("fk-left"),
                m(),
            ),
        };
        table
            .map_values(Some, Serdes::optional(Serdes::i64()))
            .to_stream()
            .to(
                topic,
                Produced::with(Serdes::string(), Serdes::optional(Serdes::i64())),
            );
    }
    builder.build().expect("topology")
}

#[derive(Clone, Copy, Debug)]
enum Input {
    /// An order's amount (`None`: deleted).
    Order(u8, Option<i64>),
    /// A customer's number (`None`: deleted).
    Customer(u8, Option<i64>),
}

fn order(o: u8) -> String {
    format!("o{o}")
}

fn customer(c: u8) -> String {
    format!("c{c}")
}

#[derive(Default)]
struct Model {
    orders: HashMap<String, i64>,
    customers: HashMap<String, i64>,
}

impl Model {
    /// The joined rows of the left or inner join.
    fn result(&self, left: bool) -> BTreeMap<String, i64> {
        self.orders
            .iter()
            .filter_map(|(k, &amount)| {
                let c = foreign_key(amount).and_then(|fk| self.customers.get(&fk).copied());
                (left || c.is_some()).then(|| (k.clone(), joined(amount, c)))
            })
            .collect()
    }

    /// Applies `input`; returns the left keys it may change.
    fn apply(&mut self, input: Input) -> BTreeSet<String> {
        match input {
            Input::Order(o, amount) => {
                match amount {
                    Some(a) => self.orders.insert(order(o), a),
                    None => self.orders.remove(&order(o)),
                };
                BTreeSet::from([order(o)])
            }
            Input::Customer(c, number) => {
                let naming = |m: &Self| -> BTreeSet<String> {
                    m.orders
                        .iter()
                        .filter(|(_, a)| foreign_key(**a) == Some(customer(c)))
                        .map(|(k, _)| k.clone())
                        .collect()
                };
                match number {
                    Some(n) => self.customers.insert(customer(c), n),
                    None => self.customers.remove(&customer(c)),
                };
                naming(self)
            }
        }
    }
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        3 => (0u8..6, prop::option::weighted(0.8, -3i64..30)).prop_map(|(o, a)| Input::Order(o, a)),
        2 => (0u8..10, prop::option::weighted(0.8, 0i64..9)).prop_map(|(c, n)| Input::Customer(c, n)),
    ]
}

/// Applies output records to a result table: a value sets its key, a null deletes it.
fn apply_outputs(
    result: &mut BTreeMap<String, i64>,
    records: &[TestRecord<String, Option<i64>>],
) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for r in records {
        keys.insert(r.key.clone());
        match r.value {
            Some(v) => result.insert(r.key.clone(), v),
            None => result.remove(&r.key),
        };
    }
    keys
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_test_driver_joins_by_foreign_key_as_the_model_does(
        inputs in prop::collection::vec((input(), 0i64..40), 1..60)
    ) {
        let driver = TopologyTestDriver::new(topology(StoreType::InMemory), StreamsConfig::new("fk"))
            .expect("driver");
        let orders = driver.create_input_topic("orders", Serdes::string(), Serdes::i64());
        let customers = driver.create_input_topic("customers", Serdes::string(), Serdes::i64());
        let outs: Vec<_> = JOINS
            .iter()
            .map(|(t, _, _)| driver.create_output_topic(t, Serdes::string(), Serdes::optional(Serdes::i64())))
            .collect();
        let mut results = vec![BTreeMap::new(); JOINS.len()];
        let mut model = Model::default();
        for (i, (input, ts)) in inputs.iter().enumerate() {
            match *input {
                Input::Order(o, Some(a)) => orders.pipe_input_at(order(o), a, *ts).expect("pipe"),
                Input::Order(o, None) => orders.pipe_tombstone_at(order(o), *ts).expect("pipe"),
                Input::Customer(c, Some(n)) => customers.pipe_input_at(customer(c), n, *ts).expect("pipe"),
                Input::Customer(c, None) => customers.pipe_tombstone_at(customer(c), *ts).expect("pipe"),
            }
            let affected = model.apply(*input);
            for (j, (topic, left, _)) in JOINS.iter().enumerate() {
                let records = outs[j].read_records_to_list().expect("read");
                let keys = apply_outputs(&mut results[j], &records);
                prop_assert_eq!(&results[j], &model.result(*left), "{} after input {}: {:?}", topic, i, input);
                prop_assert!(keys.is_subset(&affected), "{} emitted for {:?}, not only {:?}", topic, keys, affected);
            }
        }
        // Each subscription store holds one subscription per order with a foreign key, under
        // its current one (Kafka's CombinedKey: the key's length, the key, the order): one left
        // under an old foreign key would be a leak.
        let mut want: BTreeSet<Vec<u8>> = BTreeSet::new();
        for (o, amount) in &model.orders {
            if let Some(fk) = foreign_key(*amount) {
                let mut key = (fk.len() as u32).to_be_bytes().to_vec();
                key.extend(fk.as_bytes());
                key.extend(o.as_bytes());
                want.insert(key);
            }
        }
        let stores = topology(StoreType::InMemory).store_names();
        let subscriptions: Vec<&String> = stores.iter().filter(|s| s.contains("SUBSCRIPTION-STATE-STORE") || s.ends_with("-subscription-store")).collect();
        prop_assert_eq!(subscriptions.len(), JOINS.len());
        for store in subscriptions {
            let mut kept = BTreeSet::new();
            for record in driver.read_raw(&format!("fk-{store}-changelog"), 0).expect("changelog") {
                let key = record.key().expect("key").to_vec();
                match record.value() {
                    Some(_) => kept.insert(key),
                    None => kept.remove(&key),
                };
            }
            prop_assert_eq!(&kept, &want, "{}", store);
        }
        for (topic, left, materialized) in JOINS {
            if materialized {
                let stored: BTreeMap<String, i64> = driver
                    .get_key_value_store::<String, i64>(&format!("{topic}-store"))
                    .expect("store")
                    .all()
                    .expect("all")
                    .into_iter()
                    .collect();
                prop_assert_eq!(stored, model.result(left), "store of {}", topic);
            }
        }
    }
}

/// Kafka Streams' scenario (`KTableKTableForeignKeyJoinIntegrationTest`, in spirit): a left row
/// whose foreign key changes leaves its old right row; updates of that row no longer reach it,
/// and its new right row's do.
#[test]
fn a_row_whose_foreign_key_changes_follows_its_new_right_row_only() {
    let driver = TopologyTestDriver::new(
        topology(StoreType::InMemory),
        StreamsConfig::new("fk-change"),
    )
    .expect("driver");
    let orders = driver.create_input_topic("orders", Serdes::string(), Serdes::i64());
    let customers = driver.create_input_topic("customers", Serdes::string(), Serdes::i64());
    let inner =
        driver.create_output_topic("inner", Serdes::string(), Serdes::optional(Serdes::i64()));
    let left =
        driver.create_output_topic("left", Serdes::string(), Serdes::optional(Serdes::i64()));
    customers.pipe_input_at(customer(1), 7, 1).unwrap();
    customers.pipe_input_at(customer(2), 8, 2).unwrap();
    orders.pipe_input_at(order(0), 11, 3).unwrap(); // -> c1
    orders.pipe_input_at(order(0), 12, 4).unwrap(); // -> c2
    customers.pipe_input_at(customer(1), 70, 5).unwrap(); // no longer o0's
    customers.pipe_input_at(customer(2), 80, 6).unwrap();
    orders.pipe_input_at(order(0), 13, 7).unwrap(); // -> c3, which does not exist
    orders.pipe_input_at(order(0), -1, 8).unwrap(); // no foreign key
    orders.pipe_tombstone_at(order(0), 9).unwrap();
    let r = |v: Option<i64>, ts| TestRecord::new(order(0), v, ts);
    assert_eq!(
        inner.read_records_to_list().unwrap(),
        vec![
            r(Some(11_007), 3),
            r(Some(12_008), 4),
            r(Some(12_080), 6),
            // The new foreign key has no row: the inner join's row goes.
            r(None, 7),
            // No foreign key: the old one's subscription is deleted and answers with nothing
            // (Kafka's DELETE_KEY_AND_PROPAGATE), which deletes the row again.
            r(None, 8),
        ]
    );
    assert_eq!(
        left.read_records_to_list().unwrap(),
        vec![
            r(Some(11_007), 3),
            r(Some(12_008), 4),
            r(Some(12_080), 6),
            r(Some(13_000 - 1), 7),
            r(Some(-1_001), 8),
            r(None, 9),
        ]
    );
}

/// An inner join's answer "no right row" to a deleted order carries the larger of the delete's
/// and the right row's timestamps, as every answer does (Kafka reads the right row for it too).
#[test]
fn a_deleted_rows_answer_carries_the_right_rows_timestamp() {
    let driver =
        TopologyTestDriver::new(topology(StoreType::InMemory), StreamsConfig::new("fk-ts"))
            .expect("driver");
    let orders = driver.create_input_topic("orders", Serdes::string(), Serdes::i64());
    let customers = driver.create_input_topic("customers", Serdes::string(), Serdes::i64());
    let inner =
        driver.create_output_topic("inner", Serdes::string(), Serdes::optional(Serdes::i64()));
    customers.pipe_input_at(customer(1), 7, 50).unwrap();
    orders.pipe_input_at(order(0), 11, 10).unwrap();
    orders.pipe_tombstone_at(order(0), 20).unwrap();
    assert_eq!(
        inner.read_records_to_list().unwrap(),
        vec![
            TestRecord::new(order(0), Some(11_007), 50),
            TestRecord::new(order(0), None, 50),
        ]
    );
}

#[test]
fn a_foreign_key_join_is_named_as_kafka_names_it() {
    let builder = StreamsBuilder::new();
    let t = |topic: &str| {
        builder.table(
            topic,
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::new(),
        )
    };
    let (a, b) = (t("a"), t("b"));
    a.join_foreign(&b, |_, v| Some(v.to_string()), |x, y| x + y, Serdes::i64())
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let description = builder.build().expect("topology").describe().to_string();
    for name in [
        "Processor: KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007",
        "topic: KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
        "Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011 (stores: [KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010, b-STATE-STORE-0000000003])",
        "Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013 (stores: [KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010])",
        "topic: KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
        "Processor: KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017",
        "Processor: KTABLE-FK-JOIN-OUTPUT-0000000018",
    ] {
        assert!(description.contains(name), "{name} in\n{description}");
    }
    // Named, the join's parts are named after it (and the generated indexes still taken).
    let description = topology(StoreType::InMemory).describe().to_string();
    for name in [
        "Processor: fk-left-subscription-registration-processor",
        "Sink: fk-left-subscription-registration-sink (topic: fk-left-subscription-registration-topic)",
        "Source: fk-left-subscription-registration-source (topics: [fk-left-subscription-registration-topic])",
        "Processor: fk-left-subscription-receive (stores: [customers-rows, fk-left-subscription-store])",
        "Processor: fk-left-foreign-join-subscription (stores: [fk-left-subscription-store])",
        "Sink: fk-left-subscription-response-sink (topic: fk-left-subscription-response-topic)",
        "Processor: fk-left-subscription-response-resolver",
        "Processor: fk-left-result (stores: [left-materialized-store])",
    ] {
        assert!(description.contains(name), "{name} in\n{description}");
    }
}

// ---- on stream threads, over the file-backed log ----

fn app(log: &Log, state: &std::path::Path, store_type: StoreType) -> StreamsApp {
    let config = two_thread_config("fk-threads", state);
    StreamsApp::new(
        topology(store_type),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app")
}

/// `n` orders and customers, updates and deletes.
fn generated(n: u64, seed: u64) -> Vec<Input> {
    (0..n)
        .map(|i| {
            let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed * 7_919) % 10_007;
            if x % 3 == 0 {
                Input::Customer((x % 10) as u8, (x % 11 != 4).then_some((x % 9) as i64))
            } else {
                Input::Order((x % 60) as u8, (x % 13 != 5).then_some((x % 40) as i64 - 4))
            }
        })
        .collect()
}

/// Writes `inputs`: orders on 3 partitions, customers on 2.
fn phase(log: &Log, model: &mut Model, ts: &mut i64, inputs: &[Input]) {
    let (mut orders, mut customers) = (Vec::new(), Vec::new());
    for &input in inputs {
        *ts += 1;
        match input {
            Input::Order(o, a) => orders.push((order(o), a, *ts)),
            Input::Customer(c, n) => customers.push((customer(c), n, *ts)),
        }
        model.apply(input);
    }
    produce_longs(log, "orders", 3, &orders);
    produce_longs(log, "customers", 2, &customers);
}

/// The three phases: written before the first run, during it, and between the runs.
fn foreign_key_joins_on_threads(store_type: StoreType, phases: [&[Input]; 3]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut model = Model::default();
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
    for (topic, left, materialized) in JOINS {
        let want = model.result(left);
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
    }
    running.close().expect("close");
}

#[test]
fn stream_threads_join_by_foreign_key_as_the_model_across_a_restart_in_memory() {
    let inputs = [
        generated(1_500, 1),
        generated(1_500, 2),
        generated(1_000, 3),
    ];
    foreign_key_joins_on_threads(StoreType::InMemory, [&inputs[0], &inputs[1], &inputs[2]]);
}

#[test]
fn stream_threads_join_by_foreign_key_as_the_model_across_a_restart_persistent() {
    let inputs = [
        generated(1_500, 1),
        generated(1_500, 2),
        generated(1_000, 3),
    ];
    foreign_key_joins_on_threads(StoreType::Persistent, [&inputs[0], &inputs[1], &inputs[2]]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Random orders and customers, foreign keys moving, on stream threads across a restart:
    /// the joins' results at the end are the model's.
    #[test]
    fn stream_threads_join_random_tables_by_foreign_key_as_the_model(
        phases in prop::array::uniform3(prop::collection::vec(input(), 0..150)),
        persistent in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        foreign_key_joins_on_threads(store_type, [&phases[0], &phases[1], &phases[2]]);
    }
}

// ---- right rows deleted and created again within one commit ----

/// An order's amount whose foreign key is mostly `c0`..`c2` (the customers a burst flaps),
/// sometimes none.
fn near_amount() -> impl Strategy<Value = i64> {
    prop_oneof![1 => -3i64..0, 3 => 0i64..3, 2 => 10i64..13, 2 => 20i64..23]
}

/// A few inputs meant to land in one commit: a customer created, deleted and maybe created
/// again, orders moving to it or away, or deleted and created again.
fn burst() -> impl Strategy<Value = Vec<Input>> {
    let step = prop_oneof![
        // A customer deleted and created again (or created and deleted).
        2 => (0u8..3, 0i64..9, any::<bool>(), any::<bool>()).prop_map(|(c, n, first, again)| {
            let mut steps = vec![Input::Customer(c, first.then_some(n)), Input::Customer(c, (!first).then_some(n))];
            if again {
                steps.push(Input::Customer(c, Some(n + 1)));
            }
            steps
        }),
        // An order moving to another foreign key (or deleted and created again).
        3 => (0u8..4, prop::option::weighted(0.8, near_amount()), near_amount())
            .prop_map(|(o, a, b)| vec![Input::Order(o, a), Input::Order(o, Some(b))]),
        1 => (0u8..4, prop::option::weighted(0.8, near_amount())).prop_map(|(o, a)| vec![Input::Order(o, a)]),
        // A customer created or deleted alone (its undoing comes in a later burst).
        2 => (0u8..3, prop::option::weighted(0.5, 0i64..9)).prop_map(|(c, n)| vec![Input::Customer(c, n)]),
    ];
    prop::collection::vec(step, 1..4).prop_map(|steps| steps.concat())
}

/// Pipes `bursts` into the test driver record by record: after each, every join's result is
/// the model's (the final left table joined with the final right table).
fn bursts_in_the_test_driver(bursts: &[Vec<Input>]) -> Result<(), TestCaseError> {
    let driver = TopologyTestDriver::new(
        topology(StoreType::InMemory),
        StreamsConfig::new("fk-bursts"),
    )
    .expect("driver");
    let orders = driver.create_input_topic("orders", Serdes::string(), Serdes::i64());
    let customers = driver.create_input_topic("customers", Serdes::string(), Serdes::i64());
    let outs: Vec<_> = JOINS
        .iter()
        .map(|(t, _, _)| {
            driver.create_output_topic(t, Serdes::string(), Serdes::optional(Serdes::i64()))
        })
        .collect();
    let mut results = vec![BTreeMap::new(); JOINS.len()];
    let mut model = Model::default();
    let mut ts = 0;
    for input in bursts.iter().flatten() {
        ts += 1;
        match *input {
            Input::Order(o, Some(a)) => orders.pipe_input_at(order(o), a, ts).expect("pipe"),
            Input::Order(o, None) => orders.pipe_tombstone_at(order(o), ts).expect("pipe"),
            Input::Customer(c, Some(n)) => {
                customers.pipe_input_at(customer(c), n, ts).expect("pipe")
            }
            Input::Customer(c, None) => customers.pipe_tombstone_at(customer(c), ts).expect("pipe"),
        }
        model.apply(*input);
        for (j, (topic, left, _)) in JOINS.iter().enumerate() {
            apply_outputs(
                &mut results[j],
                &outs[j].read_records_to_list().expect("read"),
            );
            prop_assert_eq!(
                &results[j],
                &model.result(*left),
                "{} after {:?}",
                topic,
                input
            );
        }
    }
    Ok(())
}

/// Writes `bursts` to 3 partitions of each table while two stream threads run, one burst at a
/// time, each followed by its pause in milliseconds (commits every 20 ms: a commit holds
/// several bursts, and an order's subscription, sent at the commit of the thread running the
/// order's task, often reaches the customer's task between the customer's create and its
/// delete); once idle, every join's result and materialized store is the model's.
fn bursts_on_threads(store_type: StoreType, bursts: &[(Vec<Input>, u64)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let mut model = Model::default();
    let mut ts = 0;
    log.create_topic("orders", 3).expect("orders");
    log.create_topic("customers", 3).expect("customers");
    let mut running = StreamsApp::new(
        topology(store_type),
        two_thread_config("fk-bursts", &dir.path().join("state")),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    running.start().expect("start");
    for (burst, pause) in bursts {
        phase(&log, &mut model, &mut ts, burst);
        std::thread::sleep(std::time::Duration::from_millis(*pause));
    }
    wait_idle(&running);
    for (topic, left, materialized) in JOINS {
        let want = model.result(left);
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
    }
    running.close().expect("close");
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// Customers deleted and created again next to orders moving between them, record by
    /// record in the test driver: each join's result is the model's after every record.
    #[test]
    fn the_test_driver_joins_flapping_right_rows_as_the_model(
        bursts in prop::collection::vec(burst(), 1..20),
    ) {
        bursts_in_the_test_driver(&bursts)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(10)))]

    /// The same bursts on stream threads, several in one commit, over 3 partitions: no order
    /// keeps a row joined with a customer deleted since.
    #[test]
    fn stream_threads_join_flapping_right_rows_as_the_model(
        bursts in prop::collection::vec((burst(), 0u64..8), 20..60),
        persistent in any::<bool>(),
    ) {
        let store_type = if persistent { StoreType::Persistent } else { StoreType::InMemory };
        bursts_on_threads(store_type, &bursts);
    }
}
