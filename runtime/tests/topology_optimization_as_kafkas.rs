//! `topology.optimization` as Kafka Streams applies it (`StreamsBuilder::build_with`; `build()`
//! is Kafka's `build()`, no optimization): on stream threads over the file-backed log, the
//! internal topics each setting creates (`reuse.ktable.source.topics`: no changelog topic for a
//! source table; `merge.repartition.topics`: one repartition topic for the two groupings of one
//! key change), the outputs against models (a `HashMap` table, count and sum), and a restart
//! after the state directory is lost restoring the table from the right topic: its own
//! changelog without the reuse (the source topic purged, so only the changelog can give it
//! back), the source topic with it (no changelog topic exists). The `describe()` texts of each
//! setting are in describe_matches_kafkas_text.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{produce_longs, table_of_longs, two_thread_config, wait_idle};
use riffle::log::{Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, Topology, dsl::StoreType, query::QueryableStoreTypes,
    query::StoreQueryParameters,
};

const APP: &str = "opt";

/// The table `prices` (store `prices-store`); `orders` joined with it into `totals`; and the
/// orders re-keyed by their key's first letter, counted into `counts` and summed into `sums`
/// (two groupings of one key change, unnamed: Kafka names their topics after their stores).
fn builder(store_type: StoreType) -> StreamsBuilder {
    let builder = StreamsBuilder::new();
    let longs = || Consumed::with(Serdes::string(), Serdes::i64());
    let out = || Produced::with(Serdes::string(), Serdes::i64());
    let prices = builder.table(
        "prices",
        longs(),
        Materialized::named("prices-store").with_store_type(store_type),
    );
    let orders = builder.stream("orders", longs());
    orders
        .join(&prices, |quantity, price| quantity * price)
        .to("totals", out());
    let by_letter = orders.select_key(|k, _| k[..1].to_owned());
    let grouped = || Grouped::with(Serdes::string(), Serdes::i64());
    by_letter
        .group_by_key_with(grouped())
        .count()
        .to_stream()
        .to("counts", out());
    by_letter
        .group_by_key_with(grouped())
        .reduce(|a, b| a + b, Materialized::named("sums"))
        .to_stream()
        .to("sums", out());
    builder
}

fn topology(config: &StreamsConfig, store_type: StoreType) -> Topology {
    builder(store_type).build_with(config).expect("topology")
}

fn config(optimization: &str, state: &std::path::Path) -> StreamsConfig {
    let mut config = two_thread_config(APP, state);
    config
        .set("topology.optimization", optimization)
        .expect("a valid optimization");
    config
}

/// The application's internal topics on `log`.
fn internal_topics(log: &Log) -> BTreeSet<String> {
    log.topics()
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| t.starts_with(&format!("{APP}-")))
        .collect()
}

/// The internal topics Kafka creates for the topology under each setting: the count's store is
/// `KSTREAM-AGGREGATE-STATE-STORE-0000000006` (after the table's two nodes, the orders' source,
/// the join, its sink and the key selector).
fn expected_topics(reuse: bool, merge: bool) -> BTreeSet<String> {
    let count_store = "KSTREAM-AGGREGATE-STATE-STORE-0000000006";
    let mut topics = vec![
        format!("{count_store}-changelog"),
        "sums-changelog".to_owned(),
        format!("{count_store}-repartition"),
    ];
    if !reuse {
        topics.push("prices-store-changelog".to_owned());
    }
    if !merge {
        topics.push("sums-repartition".to_owned());
    }
    topics.into_iter().map(|t| format!("{APP}-{t}")).collect()
}

/// The models: the table; per letter the count and the sum of the orders; per order key the
/// join's outputs (quantity times the key's price, for an order whose key has one).
#[derive(Default)]
struct Model {
    prices: BTreeMap<String, i64>,
    counts: BTreeMap<String, i64>,
    sums: BTreeMap<String, i64>,
    totals: BTreeMap<String, Vec<Option<i64>>>,
}

/// Table rows over 30 keys, every seventh a delete, from timestamp `ts` on.
fn rows(model: &mut Model, n: i64, ts: &mut i64) -> Vec<(String, Option<i64>, i64)> {
    (0..n)
        .map(|i| {
            let key = format!("{}{}", ["a", "b", "c"][(i % 3) as usize], i % 30);
            let price = (i % 7 != 3).then_some(i * 13 % 101);
            match price {
                Some(p) => model.prices.insert(key.clone(), p),
                None => model.prices.remove(&key),
            };
            *ts += 1;
            (key, price, *ts)
        })
        .collect()
}

fn orders(model: &mut Model, n: i64, ts: &mut i64) -> Vec<(String, Option<i64>, i64)> {
    (0..n)
        .map(|i| {
            let key = format!("{}{}", ["a", "b", "c", "d"][(i % 4) as usize], i % 17);
            let quantity = i % 9 + 1;
            let letter = key[..1].to_owned();
            if let Some(price) = model.prices.get(&key) {
                let total = quantity * price;
                model
                    .totals
                    .entry(key.clone())
                    .or_default()
                    .push(Some(total));
            }
            *model.counts.entry(letter.clone()).or_default() += 1;
            *model.sums.entry(letter).or_default() += quantity;
            *ts += 1;
            (key, Some(quantity), *ts)
        })
        .collect()
}

fn app(log: &Log, config: StreamsConfig, store_type: StoreType) -> StreamsApp {
    let topology = topology(&config, store_type);
    StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared()).expect("app")
}

/// The table's store as the running `app` holds it.
fn queried_prices(app: &StreamsApp) -> BTreeMap<String, i64> {
    let store = app
        .store(StoreQueryParameters::from_name_and_type(
            "prices-store",
            QueryableStoreTypes::key_value::<String, i64>(),
        ))
        .expect("the table's store");
    store.all().expect("all").into_iter().collect()
}

/// Runs the topology built with `optimization`: rows and orders, a restart with the state
/// directory lost (and, without the reuse, the table's source topic purged), more orders.
/// Checks the internal topics, the outputs against the models, and the table restored.
fn run(optimization: &str, reuse: bool, merge: bool, store_type: StoreType) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let state = dir.path().join("state");
    let mut model = Model::default();
    let mut ts = 0;
    produce_longs(&log, "prices", 3, &rows(&mut model, 120, &mut ts));
    log.create_topic("orders", 3).expect("orders");
    let mut running = app(&log, config(optimization, &state), store_type);
    running.start().expect("start");
    wait_idle(&running);
    produce_longs(&log, "orders", 3, &orders(&mut model, 200, &mut ts));
    wait_idle(&running);
    assert_eq!(queried_prices(&running), model.prices, "{optimization}");
    running.close().expect("close");
    assert_eq!(
        internal_topics(&log),
        expected_topics(reuse, merge),
        "{optimization}"
    );

    std::fs::remove_dir_all(&state).expect("remove the state directory");
    if !reuse {
        // Only the store's own changelog can give the table back now.
        for p in 0..3 {
            let tp = TopicPartition::new("prices", p);
            let end = log.end_offset(&tp).expect("end offset");
            log.delete_records(&tp, end).expect("purge");
        }
        let changelog = format!("{APP}-prices-store-changelog");
        assert_eq!(
            table_of_longs(&log, &changelog),
            model.prices,
            "{optimization}"
        );
    }
    let mut running = app(&log, config(optimization, &state), store_type);
    running.start().expect("start");
    wait_idle(&running);
    assert!(running.records_restored() > 0, "{optimization}");
    assert_eq!(
        queried_prices(&running),
        model.prices,
        "{optimization}: the table restored"
    );
    produce_longs(&log, "orders", 3, &orders(&mut model, 100, &mut ts));
    wait_idle(&running);
    running.close().expect("close");
    assert_eq!(
        internal_topics(&log),
        expected_topics(reuse, merge),
        "{optimization}"
    );
    assert_eq!(
        table_of_longs(&log, "counts"),
        model.counts,
        "{optimization}"
    );
    assert_eq!(table_of_longs(&log, "sums"), model.sums, "{optimization}");
    // The orders after the restart met the restored table.
    assert_eq!(
        common::longs_per_key(&log, "totals"),
        model.totals,
        "{optimization}"
    );
}

#[test]
fn none_gives_the_table_its_own_changelog_and_each_grouping_its_topic() {
    run("none", false, false, StoreType::InMemory);
    run("none", false, false, StoreType::Persistent);
}

#[test]
fn all_reuses_the_source_topic_and_merges_the_repartition_topics() {
    run("all", true, true, StoreType::InMemory);
    run("all", true, true, StoreType::Persistent);
}

#[test]
fn each_optimization_alone() {
    run(
        "reuse.ktable.source.topics",
        true,
        false,
        StoreType::Persistent,
    );
    run(
        "merge.repartition.topics",
        false,
        true,
        StoreType::Persistent,
    );
}

#[test]
fn build_is_kafkas_build_without_optimization() {
    let text = |t: Topology| t.describe().to_string();
    let built = text(builder(StoreType::InMemory).build().expect("topology"));
    let none = StreamsConfig::new(APP);
    assert_eq!(built, text(topology(&none, StoreType::InMemory)));
    let all = config("all", std::path::Path::new("unused"));
    assert_ne!(built, text(topology(&all, StoreType::InMemory)));
    let err = StreamsConfig::new(APP)
        .set("topology.optimization", "all,reuse.ktable.source.topics")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("topology.optimization"), "{err}");
}
