//! The ports of Kafka Streams' examples (`riffle_examples::{word_count, word_count_processor,
//! page_views, sessions, router, activity}`), each checked as Kafka's own tests check them — in
//! the topology test driver, against a model — and then run on the embedded log (files, two
//! stream threads, three partitions) and on a real Kafka 4.4 broker, where each gives the test
//! driver's output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::backend::{Backend, TopicKind};
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{EmbeddedBackend, Serdes, StreamsApp, StreamsConfig, Topology, TopologyTestDriver};
use riffle_examples::activity::{self, Activity};
use riffle_examples::page_views::{
    self, PageView, RegionCount, UserProfile, WindowedPageViewByRegion,
};
use riffle_examples::router::{self, Order};
use riffle_examples::sessions::{self, Session};
use riffle_examples::{word_count, word_count_processor};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

const PARTITIONS: u32 = 3;

// ---- WordCountDemo ----

/// Kafka's WordCountDemoTest, case by case.
#[test]
fn word_count_demo_as_kafkas_test_checks_it() {
    let driver =
        TopologyTestDriver::new(word_count::topology().unwrap(), StreamsConfig::new("wc")).unwrap();
    let input = driver.create_input_topic(
        word_count::INPUT,
        Serdes::optional(Serdes::string()),
        Serdes::string(),
    );
    let output = driver.create_output_topic(word_count::OUTPUT, Serdes::string(), Serdes::i64());
    input.pipe_input_value("Hello".into()).unwrap();
    assert_eq!(output.read_key_value().unwrap(), Some(("hello".into(), 1)));
    assert!(output.is_empty().unwrap());
    input
        .pipe_value_list([
            "Apache Kafka Streams Example".to_string(),
            "Using Kafka Streams Test Utils".to_string(),
            "Reading and Writing Kafka Topic".to_string(),
        ])
        .unwrap();
    let expected: HashMap<String, i64> = [
        ("apache", 1),
        ("kafka", 3),
        ("streams", 2),
        ("example", 1),
        ("using", 1),
        ("test", 1),
        ("utils", 1),
        ("reading", 1),
        ("and", 1),
        ("writing", 1),
        ("topic", 1),
    ]
    .into_iter()
    .map(|(w, c)| (w.to_string(), c))
    .collect();
    assert_eq!(output.read_key_values_to_map().unwrap(), expected);
    assert_eq!(
        driver.dropped_records(),
        0,
        "null keys are the demo's normal input"
    );
}

fn lines() -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(7);
    let words = [
        "Kafka", "riffle", "stream", "TABLE", "join", "window", "state", "log",
    ];
    let seps = [" ", ", ", "  ", "; ", "-"];
    (0..600)
        .map(|_| {
            let n = rng.random_range(1..8);
            let mut line = String::new();
            for i in 0..n {
                if i > 0 {
                    line.push_str(seps[rng.random_range(0..seps.len())]);
                }
                line.push_str(words[rng.random_range(0..words.len())]);
            }
            line
        })
        .collect()
}

fn word_count_model(lines: &[String]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for line in lines {
        for word in word_count::split_words(&line.to_lowercase()) {
            *counts.entry(word).or_insert(0) += 1;
        }
    }
    counts
}

fn word_count_in_driver(lines: &[String]) -> BTreeMap<String, i64> {
    let driver =
        TopologyTestDriver::new(word_count::topology().unwrap(), StreamsConfig::new("wc")).unwrap();
    let input = driver.create_input_topic(
        word_count::INPUT,
        Serdes::optional(Serdes::string()),
        Serdes::string(),
    );
    let output = driver.create_output_topic(word_count::OUTPUT, Serdes::string(), Serdes::i64());
    input.pipe_value_list(lines.iter().cloned()).unwrap();
    output
        .read_key_values_to_map()
        .unwrap()
        .into_iter()
        .collect()
}

// ---- WordCountProcessorDemo ----

/// Kafka's test of the demo's processor: five words, one punctuation, each word's count as a
/// string stamped with the punctuation time.
#[test]
fn word_count_processor_demo_forwards_counts_on_the_wall_clock() {
    let driver = TopologyTestDriver::with_wall_clock(
        word_count_processor::topology().unwrap(),
        StreamsConfig::new("wcp"),
        0,
    )
    .unwrap();
    let input = driver.create_input_topic(
        word_count_processor::INPUT,
        Serdes::optional(Serdes::string()),
        Serdes::string(),
    );
    let output = driver.create_output_topic(
        word_count_processor::OUTPUT,
        Serdes::string(),
        Serdes::string(),
    );
    input
        .pipe_input_value("Alpha Beta Gamma Alpha Gamma".into())
        .unwrap();
    assert!(output.is_empty().unwrap(), "nothing before the punctuation");
    driver
        .advance_wall_clock_time(word_count_processor::EVERY)
        .unwrap();
    let mut forwarded: Vec<(String, String, i64)> = output
        .read_records_to_list()
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.value, r.timestamp))
        .collect();
    forwarded.sort();
    assert_eq!(
        forwarded,
        [
            ("alpha".to_string(), "2".to_string(), 1_000),
            ("beta".to_string(), "1".to_string(), 1_000),
            ("gamma".to_string(), "2".to_string(), 1_000),
        ]
    );
}

// ---- the router: split() and a TopicNameExtractor ----

fn orders() -> Vec<(String, Order)> {
    let mut rng = StdRng::seed_from_u64(5);
    (0..900)
        .map(|i| {
            let order = Order {
                region: router::REGIONS[rng.random_range(0..3)].to_string(),
                amount: rng.random_range(-200..1_500),
            };
            (format!("order-{i}"), order)
        })
        .collect()
}

fn router_topics() -> Vec<String> {
    let mut topics = vec!["orders-large".to_string(), "orders-refunds".to_string()];
    topics.extend(router::REGIONS.iter().map(|r| format!("orders-{r}")));
    topics
}

/// Each output topic's records, sorted.
type Routed = BTreeMap<String, Vec<(String, Order)>>;

fn router_model(orders: &[(String, Order)]) -> Routed {
    let mut out: Routed = router_topics()
        .into_iter()
        .map(|t| (t, Vec::new()))
        .collect();
    for (id, order) in orders {
        out.get_mut(&router::route(order))
            .unwrap()
            .push((id.clone(), order.clone()));
    }
    for records in out.values_mut() {
        records.sort();
    }
    out
}

fn router_in_driver(orders: &[(String, Order)]) -> Routed {
    let driver =
        TopologyTestDriver::new(router::topology().unwrap(), StreamsConfig::new("router")).unwrap();
    let input = driver.create_input_topic(router::ORDERS, Serdes::string(), Serdes::json());
    for (i, (id, order)) in orders.iter().enumerate() {
        input
            .pipe_input_at(id.clone(), order.clone(), i as i64)
            .unwrap();
    }
    router_topics()
        .into_iter()
        .map(|t| {
            let topic = driver.create_output_topic(&t, Serdes::string(), Serdes::json::<Order>());
            let mut records = topic.read_key_values_to_list().unwrap();
            records.sort();
            (t, records)
        })
        .collect()
}

#[test]
fn the_router_sends_each_order_where_the_rules_say() {
    let orders = orders();
    assert_eq!(router_in_driver(&orders), router_model(&orders));
}

// ---- a cogroup of three streams ----

type ActivityInput = (
    Vec<(String, String)>,
    Vec<(String, String)>,
    Vec<(String, i64)>,
);

/// Clicks (keyed by session), cart additions and purchases of 20 customers.
fn activity_input() -> ActivityInput {
    let mut rng = StdRng::seed_from_u64(9);
    let customer = |rng: &mut StdRng| format!("c{}", rng.random_range(0..20));
    let clicks = (0..700)
        .map(|i| {
            (
                format!("session-{}", i % 37),
                format!("{}:/p{i}", customer(&mut rng)),
            )
        })
        .collect();
    let carts = (0..300)
        .map(|i| (customer(&mut rng), format!("item-{i}")))
        .collect();
    let purchases = (0..200)
        .map(|_| (customer(&mut rng), rng.random_range(100..10_000)))
        .collect();
    (clicks, carts, purchases)
}

fn activity_model((clicks, carts, purchases): &ActivityInput) -> BTreeMap<String, Activity> {
    let mut out: BTreeMap<String, Activity> = BTreeMap::new();
    for (_, click) in clicks {
        out.entry(click.split(':').next().unwrap().to_string())
            .or_default()
            .clicks += 1;
    }
    for (c, _) in carts {
        out.entry(c.clone()).or_default().cart_items += 1;
    }
    for (c, cents) in purchases {
        let a = out.entry(c.clone()).or_default();
        a.purchases += 1;
        a.spent += cents;
    }
    out
}

fn activity_in_driver((clicks, carts, purchases): &ActivityInput) -> BTreeMap<String, Activity> {
    let driver = TopologyTestDriver::new(
        activity::topology().unwrap(),
        StreamsConfig::new("activity"),
    )
    .unwrap();
    let c = driver.create_input_topic(activity::CLICKS, Serdes::string(), Serdes::string());
    let k = driver.create_input_topic(activity::CARTS, Serdes::string(), Serdes::string());
    let p = driver.create_input_topic(activity::PURCHASES, Serdes::string(), Serdes::i64());
    let out = driver.create_output_topic(
        activity::SUMMARIES,
        Serdes::string(),
        Serdes::json::<Activity>(),
    );
    for (session, click) in clicks {
        c.pipe_input(session.clone(), click.clone()).unwrap();
    }
    for (customer, item) in carts {
        k.pipe_input(customer.clone(), item.clone()).unwrap();
    }
    for (customer, cents) in purchases {
        p.pipe_input(customer.clone(), *cents).unwrap();
    }
    out.read_key_values_to_list().unwrap().into_iter().collect()
}

#[test]
fn the_cogroup_of_three_streams_folds_each_customers_activity() {
    let input = activity_input();
    assert_eq!(activity_in_driver(&input), activity_model(&input));
}

// ---- the page-view demo ----

const VIEW_WINDOW: Duration = Duration::from_secs(5);
const VIEW_ADVANCE: Duration = Duration::from_secs(1);
/// Longer than the input's span: records a repartition topic interleaves are never late.
const VIEW_GRACE: Duration = Duration::from_secs(600);

fn page_view_topology() -> Topology {
    page_views::topology(VIEW_WINDOW, VIEW_ADVANCE, VIEW_GRACE).unwrap()
}

/// Users 0..40 (users 30.. have no profile), regions by user; views 10–30 ms apart.
/// Profiles and views, each keyed by user.
type PageViewInput = (Vec<(String, UserProfile)>, Vec<(String, PageView)>);

fn page_view_input() -> PageViewInput {
    let regions = ["EU", "US", "APAC"];
    let profiles = (0..30)
        .map(|u| {
            let profile = UserProfile {
                region: regions[u % 3].to_string(),
                timestamp: u as i64,
            };
            (format!("user-{u}"), profile)
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(11);
    let mut ts = 1_000;
    let views = (0..1_500)
        .map(|i| {
            ts += rng.random_range(10..30);
            let user = format!("user-{}", rng.random_range(0..40));
            let view = PageView {
                user: user.clone(),
                page: format!("/page/{}", i % 17),
                timestamp: ts,
            };
            (user, view)
        })
        .collect();
    (profiles, views)
}

/// Counts per (window start, region), by brute force over the hopping windows.
fn page_view_model(
    profiles: &[(String, UserProfile)],
    views: &[(String, PageView)],
) -> BTreeMap<WindowedPageViewByRegion, i64> {
    let regions: HashMap<&str, &str> = profiles
        .iter()
        .map(|(u, p)| (u.as_str(), p.region.as_str()))
        .collect();
    let (size, advance) = (
        VIEW_WINDOW.as_millis() as i64,
        VIEW_ADVANCE.as_millis() as i64,
    );
    let mut out = BTreeMap::new();
    for (user, view) in views {
        let region = regions.get(user.as_str()).copied().unwrap_or("UNKNOWN");
        let mut start = 0;
        while start <= view.timestamp {
            if view.timestamp < start + size {
                let key = WindowedPageViewByRegion {
                    window_start: start,
                    region: region.to_string(),
                };
                *out.entry(key).or_insert(0) += 1;
            }
            start += advance;
        }
    }
    out
}

fn page_views_in_driver(
    profiles: &[(String, UserProfile)],
    views: &[(String, PageView)],
) -> BTreeMap<WindowedPageViewByRegion, i64> {
    let driver = TopologyTestDriver::new(page_view_topology(), StreamsConfig::new("pv")).unwrap();
    let users = driver.create_input_topic(page_views::PROFILES, Serdes::string(), Serdes::json());
    let input = driver.create_input_topic(page_views::VIEWS, Serdes::string(), Serdes::json());
    let output = driver.create_output_topic(
        page_views::OUTPUT,
        Serdes::json::<WindowedPageViewByRegion>(),
        Serdes::json::<RegionCount>(),
    );
    for (user, profile) in profiles {
        users
            .pipe_input_at(user.clone(), profile.clone(), profile.timestamp)
            .unwrap();
    }
    for (user, view) in views {
        input
            .pipe_input_at(user.clone(), view.clone(), view.timestamp)
            .unwrap();
    }
    let mut out = BTreeMap::new();
    for (key, count) in output.read_key_values_to_list().unwrap() {
        assert_eq!(key.region, count.region);
        out.insert(key, count.count);
    }
    out
}

#[test]
fn page_view_demo_counts_regions_in_hopping_windows_as_the_model() {
    let (profiles, views) = page_view_input();
    let model = page_view_model(&profiles, &views);
    assert!(
        model.keys().any(|k| k.region == "UNKNOWN"),
        "some views have no profile"
    );
    assert_eq!(page_views_in_driver(&profiles, &views), model);
}

// ---- sessionization ----

const GAP: Duration = Duration::from_millis(300);
const SESSION_GRACE: Duration = Duration::from_millis(100);

fn session_topology() -> Topology {
    sessions::topology(GAP, SESSION_GRACE).unwrap()
}

/// Clicks of 12 users, timestamps rising by 0–120 ms (sessions of several clicks, gaps of more
/// than 300 ms between some), then one late-enough click per partition from a `flush-` user,
/// which closes every other session.
fn clicks() -> Vec<(String, String, i64)> {
    let mut rng = StdRng::seed_from_u64(3);
    let mut ts = 0;
    let mut out: Vec<(String, String, i64)> = (0..1_200)
        .map(|i| {
            ts += rng.random_range(0..120);
            (
                format!("u{}", rng.random_range(0..12)),
                format!("/p{}", i % 9),
                ts,
            )
        })
        .collect();
    let end = ts + 10 * GAP.as_millis() as i64;
    let mut covered = [false; PARTITIONS as usize];
    for i in 0.. {
        let user = format!("flush-{i}");
        let p = partition_for_key(user.as_bytes(), PARTITIONS) as usize;
        if !covered[p] {
            covered[p] = true;
            out.push((user, "/".into(), end));
        }
        if covered.iter().all(|c| *c) {
            break;
        }
    }
    out
}

/// Every session but the `flush-` users', by brute force: a click within the gap of the
/// session's last click extends it.
fn session_model(clicks: &[(String, String, i64)]) -> Vec<(String, Session)> {
    let mut per_user: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for (user, page, ts) in clicks {
        per_user.entry(user).or_default().push((*ts, page));
    }
    let gap = GAP.as_millis() as i64;
    let mut out = Vec::new();
    for (user, user_clicks) in per_user {
        if user.starts_with("flush-") {
            continue;
        }
        let mut current: Option<Session> = None;
        for (ts, page) in user_clicks {
            match &mut current {
                Some(s) if ts - s.end <= gap => {
                    s.end = ts;
                    s.clicks += 1;
                    s.pages.push(page.to_string());
                }
                _ => {
                    if let Some(s) = current.take() {
                        out.push((user.to_string(), s));
                    }
                    current = Some(Session {
                        start: ts,
                        end: ts,
                        clicks: 1,
                        pages: vec![page.to_string()],
                    });
                }
            }
        }
        out.extend(current.map(|s| (user.to_string(), s)));
    }
    out.sort();
    out
}

fn sessions_in_driver(clicks: &[(String, String, i64)]) -> Vec<(String, Session)> {
    let driver =
        TopologyTestDriver::new(session_topology(), StreamsConfig::new("sessions")).unwrap();
    let input = driver.create_input_topic(sessions::CLICKS, Serdes::string(), Serdes::string());
    let output = driver.create_output_topic(sessions::SESSIONS, Serdes::string(), Serdes::json());
    for (user, page, ts) in clicks {
        input
            .pipe_input_at(user.clone(), page.clone(), *ts)
            .unwrap();
    }
    let mut out = output.read_key_values_to_list().unwrap();
    out.sort();
    out
}

#[test]
fn sessionization_emits_each_final_session_once_as_the_model() {
    let clicks = clicks();
    let model = session_model(&clicks);
    assert!(
        model.len() > 40 && model.iter().any(|(_, s)| s.clicks > 3),
        "the input makes sessions of several clicks: {}",
        model.len()
    );
    assert_eq!(sessions_in_driver(&clicks), model);
}

// ---- on the embedded log and on Kafka ----

/// Appends `(key, value, timestamp)` records to `topic` (created with three partitions),
/// keyed records by murmur2, null keys round-robin.
/// A record to produce: key (`None`: null), value, timestamp.
type Raw = (Option<Vec<u8>>, Vec<u8>, i64);

fn produce(backend: &dyn Backend, topic: &str, records: &[Raw]) {
    produce_to(backend, topic, PARTITIONS, records);
}

/// As [`produce`], to a topic of `partitions`.
fn produce_to(backend: &dyn Backend, topic: &str, partitions: u32, records: &[Raw]) {
    if backend.partitions(topic).unwrap().is_none() {
        backend
            .create_topic(topic, partitions, TopicKind::User)
            .unwrap();
    }
    let partitions = backend.partitions(topic).unwrap().unwrap();
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (i, (k, v, ts)) in records.iter().enumerate() {
        let p = match k {
            Some(k) => partition_for_key(k, partitions) as usize,
            None => i % partitions as usize,
        };
        builders[p].push(*ts, k.as_deref(), Some(v));
        if builders[p].len() >= 200 {
            backend
                .append(&TopicPartition::new(topic, p as u32), &mut builders[p])
                .unwrap();
        }
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            backend
                .append(&TopicPartition::new(topic, p as u32), b)
                .unwrap();
        }
    }
}

fn encode<T: 'static>(serde: &riffle::SerdeRef<T>, value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    serde.serialize(value, &mut out).expect("serializes");
    out
}

/// Every record of `topic` decoded, in offset order per partition.
fn read_all<K: 'static, V: 'static>(
    backend: &dyn Backend,
    topic: &str,
    key: &riffle::SerdeRef<K>,
    value: &riffle::SerdeRef<V>,
) -> Vec<(K, V)> {
    let mut out = Vec::new();
    for p in 0..backend.partitions(topic).unwrap().unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        let mut at = 0;
        loop {
            let batches = backend.fetch(&tp, at, 1 << 20).unwrap();
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for r in batch.records() {
                    let r = r.unwrap();
                    if r.offset() >= at {
                        at = r.offset() + 1;
                        let k = key.deserialize(r.key().map(|b| &b[..])).unwrap();
                        let v = value.deserialize(r.value().map(|b| &b[..])).unwrap();
                        out.push((k, v));
                    }
                }
            }
        }
    }
    out
}

fn config(app: &str, state: &std::path::Path) -> StreamsConfig {
    let mut config = StreamsConfig::new(app);
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.heartbeat_interval = Duration::from_millis(300);
    config.commit_interval = Some(Duration::from_millis(200));
    config.poll = Duration::from_millis(20);
    config
}

/// Runs `topology` as `app` on `backend` until `done(output)` holds (at most two minutes),
/// a little longer so nothing more comes, and returns the output then.
fn run_until<T: PartialEq>(
    backend: &Arc<dyn Backend>,
    app: &str,
    topology: Topology,
    output: impl Fn() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(topology, config(app, state.path()), backend.clone()).unwrap();
    app.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done(&output()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    app.close().unwrap();
    output()
}

/// Runs `topology` as `app` on `backend` until `topic`, read as a table (each key's latest
/// value), equals `expected` (at most two minutes); returns that table.
fn run_until_table<K, V>(
    backend: &Arc<dyn Backend>,
    app: &str,
    topology: Topology,
    (topic, key, value): (&str, &riffle::SerdeRef<K>, &riffle::SerdeRef<V>),
    expected: &BTreeMap<K, V>,
) -> BTreeMap<K, V>
where
    K: Ord + 'static,
    V: PartialEq + 'static,
{
    let table = || -> BTreeMap<K, V> {
        read_all(&**backend, topic, key, value)
            .into_iter()
            .collect()
    };
    run_until(backend, app, topology, table, |t| t == expected)
}

/// Each ported example on `backend` gives the test driver's output.
fn examples_on(backend: Arc<dyn Backend>, name: &str) {
    let id = if name == "Kafka" { "kafka" } else { "log" };
    // WordCountDemo: unkeyed lines.
    let lines = lines();
    let expected = word_count_in_driver(&lines);
    assert_eq!(expected, word_count_model(&lines));
    let records_of_lines: Vec<_> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (None, l.as_bytes().to_vec(), i as i64))
        .collect();
    produce(&*backend, word_count::INPUT, &records_of_lines);
    let (s, l) = (Serdes::string(), Serdes::i64());
    let topology = word_count::topology().unwrap();
    let output = (word_count::OUTPUT, &s, &l);
    let got = run_until_table(&backend, &format!("wc-{id}"), topology, output, &expected);
    assert_eq!(got, expected, "WordCountDemo on {name}");

    // The page-view demo: profiles first, then views.
    let (profiles, views) = page_view_input();
    let expected = page_views_in_driver(&profiles, &views);
    let (string, profile, view) = (
        Serdes::string(),
        Serdes::json::<UserProfile>(),
        Serdes::json::<PageView>(),
    );
    let records: Vec<_> = profiles
        .iter()
        .map(|(u, p)| (Some(encode(&string, u)), encode(&profile, p), p.timestamp))
        .collect();
    produce(&*backend, page_views::PROFILES, &records);
    backend
        .create_topic(page_views::VIEWS, PARTITIONS, TopicKind::User)
        .unwrap();
    let (wk, rc) = (
        Serdes::json::<WindowedPageViewByRegion>(),
        Serdes::json::<RegionCount>(),
    );
    let table = || -> BTreeMap<WindowedPageViewByRegion, i64> {
        read_all(&*backend, page_views::OUTPUT, &wk, &rc)
            .into_iter()
            .map(|(k, c)| (k, c.count))
            .collect()
    };
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        page_view_topology(),
        config(&format!("pv-{id}"), state.path()),
        backend.clone(),
    )
    .unwrap();
    app.start().unwrap();
    // The views come once every profile is in the table, as in the driver.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !app.is_idle() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let records: Vec<_> = views
        .iter()
        .map(|(u, v)| (Some(encode(&string, u)), encode(&view, v), v.timestamp))
        .collect();
    produce(&*backend, page_views::VIEWS, &records);
    let deadline = Instant::now() + Duration::from_secs(120);
    while table() != expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    app.close().unwrap();
    assert_eq!(table(), expected, "the page-view demo on {name}");

    // Sessionization with final results.
    let clicks = clicks();
    let expected = sessions_in_driver(&clicks);
    let records: Vec<_> = clicks
        .iter()
        .map(|(u, p, ts)| (Some(u.as_bytes().to_vec()), p.as_bytes().to_vec(), *ts))
        .collect();
    produce(&*backend, sessions::CLICKS, &records);
    let session = Serdes::json::<Session>();
    let output = || {
        let mut out = read_all(&*backend, sessions::SESSIONS, &string, &session);
        out.sort();
        out
    };
    let got = run_until(
        &backend,
        &format!("sessions-{id}"),
        session_topology(),
        output,
        |o| o.len() >= expected.len(),
    );
    assert_eq!(got, expected, "sessionization on {name}");

    // WordCountProcessorDemo: every word's count, forwarded each second; on an input of one
    // partition, as the demo's counts are per task.
    let one_partition = "streams-plaintext-input-single";
    produce_to(&*backend, one_partition, 1, &records_of_lines);
    let expected: BTreeMap<String, String> = word_count_model(&lines)
        .into_iter()
        .map(|(w, c)| (w, c.to_string()))
        .collect();
    let topology = word_count_processor::topology_reading(one_partition).unwrap();
    let output = (word_count_processor::OUTPUT, &string, &string);
    let got = run_until_table(&backend, &format!("wcp-{id}"), topology, output, &expected);
    assert_eq!(got, expected, "WordCountProcessorDemo on {name}");

    // The router: its topics exist, as Kafka's producer needs them to.
    let orders = orders();
    let expected = router_in_driver(&orders);
    for topic in router_topics() {
        backend
            .create_topic(&topic, PARTITIONS, TopicKind::User)
            .unwrap();
    }
    let order = Serdes::json::<Order>();
    let records: Vec<_> = orders
        .iter()
        .enumerate()
        .map(|(i, (id, o))| (Some(id.as_bytes().to_vec()), encode(&order, o), i as i64))
        .collect();
    produce(&*backend, router::ORDERS, &records);
    let routed = || -> Routed {
        router_topics()
            .into_iter()
            .map(|t| {
                let mut records = read_all(&*backend, &t, &string, &order);
                records.sort();
                (t, records)
            })
            .collect()
    };
    let got = run_until(
        &backend,
        &format!("router-{id}"),
        router::topology().unwrap(),
        routed,
        |r| *r == expected,
    );
    assert_eq!(got, expected, "the router on {name}");

    // The cogroup of three streams.
    let input = activity_input();
    let expected = activity_in_driver(&input);
    let text = |pairs: &[(String, String)]| -> Vec<_> {
        pairs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| (Some(k.as_bytes().to_vec()), v.as_bytes().to_vec(), i as i64))
            .collect()
    };
    produce(&*backend, activity::CLICKS, &text(&input.0));
    produce(&*backend, activity::CARTS, &text(&input.1));
    let purchases: Vec<_> = input
        .2
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            (
                Some(k.as_bytes().to_vec()),
                v.to_be_bytes().to_vec(),
                i as i64,
            )
        })
        .collect();
    produce(&*backend, activity::PURCHASES, &purchases);
    let summary = Serdes::json::<Activity>();
    let topology = activity::topology().unwrap();
    let output = (activity::SUMMARIES, &string, &summary);
    let got = run_until_table(
        &backend,
        &format!("activity-{id}"),
        topology,
        output,
        &expected,
    );
    assert_eq!(got, expected, "the cogroup of three streams on {name}");
}

#[test]
fn ported_examples_give_the_drivers_output_on_the_embedded_log_and_on_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    examples_on(EmbeddedBackend::new(log).shared(), "the embedded log");

    let broker = KafkaBroker::start().unwrap();
    let kafka = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap()))
        .unwrap()
        .shared();
    examples_on(kafka, "Kafka");
}
