//! `riffle sample enrich`: orders joined with a customers table, then a windowed total per
//! region, on the embedded log or on Kafka, checked against an independent computation:
//!
//! ```text
//! customers = table(customers)                        customer -> region
//! stream(orders)                                      customer -> amount
//!     .join(customers, (amount, region))              (a stream–table join)
//!     .map((customer, (amount, region)) -> (region, amount))
//!     .groupByKey()                                   (through a repartition topic)
//!     .windowedBy(TimeWindows.ofSizeAndGrace(window, grace))
//!     .reduce(+)
//!     .toStream().to(totals)                          region@window -> total
//! ```
//!
//! The customers are written first and the application runs until it holds them all; then the
//! orders are written while it runs, so each order meets the table as it finally is whatever
//! the threads' timing (a stream–table join reads the table as of when the order is processed).
//! Some orders are for customers the table does not have: the inner join drops them. The
//! check: the latest total of every (region, window) in the output equals the sum of its
//! orders' amounts computed from the generated data, and there is no other window. A digest of
//! the totals is printed, the same on both backends for the same flags.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::backend::{Backend, TopicKind};
use riffle::log::TopicPartition;
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, TimeWindows, Topology, producer::Producer, producer::ProducerConfig,
    producer::ProducerRecord,
};
use riffle_log::{Log, LogOptions};

use super::{Store, store_type};
use crate::duration::{parse_duration_ms, parse_duration_or_zero_ms};

/// The first order's timestamp: 2024-01-01T00:00:00Z.
const BASE_TIMESTAMP_MS: i64 = 1_704_067_200_000;

/// Arguments of the enrich sample.
#[derive(clap::Args, Debug)]
pub struct EnrichArgs {
    /// Run on an Apache Kafka 4.x cluster instead of the embedded log (topics and application
    /// named after the run).
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap_servers: Option<String>,
    /// Orders to generate.
    #[arg(long, default_value_t = 200_000)]
    orders: u64,
    /// Customers in the table.
    #[arg(long, default_value_t = 10_000)]
    customers: u64,
    /// Regions the customers are spread over.
    #[arg(long, default_value_t = 8)]
    regions: u64,
    /// The share of orders for customers the table does not have (dropped by the join).
    #[arg(long, default_value_t = 0.02)]
    unknown: f64,
    /// Partitions of the orders and customers topics.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// The event time the orders span.
    #[arg(long, value_parser = parse_duration_ms, default_value = "1h")]
    span: i64,
    /// Tumbling windows of the totals.
    #[arg(long, value_parser = parse_duration_ms, default_value = "5m")]
    window: i64,
    /// How late an order may be for its window. The repartition topic interleaves the
    /// orders of all join tasks, so its records are out of order by the threads' skew; the
    /// default (Kafka's old default grace, a day) keeps every order.
    #[arg(long, value_parser = parse_duration_or_zero_ms, default_value = "1d")]
    grace: i64,
    /// Where the table and the totals are stored.
    #[arg(long, value_enum, default_value = "persistent")]
    store: Store,
    /// `at_least_once` or `exactly_once`.
    #[arg(long, default_value = "at_least_once")]
    processing_guarantee: String,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The seed of the generated data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// How many of the largest totals to print.
    #[arg(long, default_value_t = 5)]
    top: usize,
}

/// The generated data: each customer's region, and the orders (customer, amount, timestamp)
/// in the order they are written.
struct Generated {
    regions: Vec<String>,
    orders: Vec<(String, i64, i64)>,
}

fn customer(i: u64) -> String {
    format!("customer-{i}")
}

fn generate(args: &EnrichArgs) -> Generated {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let regions = (0..args.customers)
        .map(|_| format!("region-{}", rng.random_range(0..args.regions.max(1))))
        .collect();
    let n = args.orders.max(1);
    let orders = (0..args.orders)
        .map(|i| {
            let who = if rng.random_bool(args.unknown.clamp(0.0, 1.0)) {
                format!("unknown-{}", rng.random_range(0..1_000))
            } else {
                customer(rng.random_range(0..args.customers.max(1)))
            };
            let amount = rng.random_range(1..=500);
            let ts =
                BASE_TIMESTAMP_MS + (i128::from(i) * i128::from(args.span) / i128::from(n)) as i64;
            (who, amount, ts)
        })
        .collect();
    Generated { regions, orders }
}

/// The totals the output must end with: (region, window start) → sum of amounts.
fn expected(args: &EnrichArgs, data: &Generated) -> BTreeMap<(String, i64), i64> {
    let region: BTreeMap<String, &String> = data
        .regions
        .iter()
        .enumerate()
        .map(|(i, r)| (customer(i as u64), r))
        .collect();
    let mut totals = BTreeMap::new();
    for (who, amount, ts) in &data.orders {
        if let Some(r) = region.get(who) {
            let start = ts - ts.rem_euclid(args.window);
            *totals.entry(((*r).clone(), start)).or_insert(0) += amount;
        }
    }
    totals
}

/// The sample's topology over `customers`, `orders` and `totals`.
fn topology(args: &EnrichArgs, topics: &Topics) -> riffle::Result<Topology> {
    let builder = StreamsBuilder::new();
    let customers = builder.table(
        &topics.customers,
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::named("customers").with_store_type(store_type(args.store)),
    );
    builder
        .stream(
            &topics.orders,
            Consumed::with(Serdes::string(), Serdes::i64()),
        )
        .join(&customers, |amount, region| (region, amount))
        .map(|_customer, (region, amount)| (region, amount))
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::i64()).named("by-region"))
        .windowed_by(TimeWindows::of_size_and_grace(
            ms(args.window),
            ms(args.grace),
        ))
        .reduce(
            |a, b| a + b,
            Materialized::named("totals").with_store_type(store_type(args.store)),
        )
        .to_stream()
        .to(
            &topics.totals,
            Produced::with(
                Serdes::time_windowed(Serdes::string(), ms(args.window)),
                Serdes::i64(),
            ),
        );
    builder.build()
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0) as u64)
}

struct Topics {
    customers: String,
    orders: String,
    totals: String,
}

fn producer<V: 'static>(
    backend: Arc<dyn Backend>,
    value: riffle::SerdeRef<V>,
) -> Producer<String, V> {
    let config = ProducerConfig::default()
        .with_batch_size(256 << 10)
        .with_linger(Duration::from_millis(50));
    Producer::with_config(backend, Serdes::string(), value, config)
}

/// Waits until the application has processed `n` records in all.
fn wait_processed(app: &StreamsApp, n: u64, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while app.records_processed() < n {
        if app.is_shutting_down() {
            bail!("the application stopped while {what}");
        }
        if Instant::now() > deadline {
            bail!(
                "{what}: {} of {n} records processed after 10 minutes",
                app.records_processed()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Runs the sample: on Kafka with `--bootstrap-servers`, else on an embedded log in a
/// temporary directory.
pub(crate) fn enrich(args: EnrichArgs) -> anyhow::Result<()> {
    let _temp;
    let (backend, topics, application_id, state_dir, on) = match &args.bootstrap_servers {
        Some(servers) => {
            let (backend, run) = super::kafka::connect(servers, None)?;
            let topics = Topics {
                customers: format!("riffle-sample-customers-{run}"),
                orders: format!("riffle-sample-orders-{run}"),
                totals: format!("riffle-sample-region-totals-{run}"),
            };
            _temp = tempfile::tempdir().context("creating a temporary state directory")?;
            let state = _temp.path().to_owned();
            (
                backend.shared(),
                topics,
                format!("enrich-{run}"),
                state,
                servers.clone(),
            )
        }
        None => {
            _temp = tempfile::tempdir().context("creating a temporary directory")?;
            let log = Log::open(_temp.path().join("log"), LogOptions::default())?;
            let topics = Topics {
                customers: "customers".into(),
                orders: "orders".into(),
                totals: "region-totals".into(),
            };
            let state = _temp.path().join("state");
            let backend = EmbeddedBackend::new(log).shared();
            (
                backend,
                topics,
                "enrich".to_owned(),
                state,
                "the embedded log".to_owned(),
            )
        }
    };
    let data = generate(&args);
    for topic in [&topics.customers, &topics.orders] {
        backend.create_topic(topic, args.partitions, TopicKind::User)?;
    }
    println!(
        "enriching {} orders with {} customers over {} regions into {} ({} ms windows) on {on}",
        args.orders, args.customers, args.regions, topics.totals, args.window
    );
    let mut customers = producer(backend.clone(), Serdes::string());
    for (i, region) in data.regions.iter().enumerate() {
        let key = customer(i as u64);
        let record = ProducerRecord::new(&key, region).with_timestamp(0);
        customers.send_record(&topics.customers, record)?;
    }
    customers.close()?;

    let mut config = StreamsConfig::new(application_id);
    config.num_stream_threads = args.threads;
    config.state_dir = state_dir;
    config.poll = Duration::from_millis(10);
    config.commit_interval = Some(Duration::from_millis(200));
    config.set("processing_guarantee", &args.processing_guarantee)?;
    let mut app = StreamsApp::new(topology(&args, &topics)?, config, backend.clone())?;
    let start = Instant::now();
    app.start()?;
    wait_processed(&app, args.customers, "loading the customers")?;

    let mut orders = producer(backend.clone(), Serdes::i64());
    for (who, amount, ts) in &data.orders {
        orders.send_record(
            &topics.orders,
            ProducerRecord::new(who, amount).with_timestamp(*ts),
        )?;
    }
    orders.close()?;
    let want = expected(&args, &data);
    let joined = data
        .orders
        .iter()
        .filter(|(who, _, _)| who.starts_with("customer-"))
        .count() as u64;
    // The customers, the orders, and the joined orders again from the repartition topic.
    wait_processed(
        &app,
        args.customers + args.orders + joined,
        "processing the orders",
    )?;
    let summary = app.close()?;
    let elapsed = start.elapsed();
    let got = read_totals(backend.as_ref(), &topics.totals, args.window)?;
    println!(
        "processed {} records in {:.2} s: {joined} orders joined, {} dropped for unknown customers",
        summary.records_processed,
        elapsed.as_secs_f64(),
        args.orders - joined
    );
    let mut top: Vec<_> = got.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!("{} region windows; largest totals:", got.len());
    for ((region, start), total) in top.iter().take(args.top) {
        println!("  {region}@{start}\t{total}");
    }
    let digest = digest(&got);
    println!("digest of the totals: {digest:016x}");
    let mut problems = Vec::new();
    for (w, total) in &want {
        match got.get(w) {
            Some(t) if t == total => {}
            Some(t) => problems.push(format!("{}@{}: total {t}, orders sum to {total}", w.0, w.1)),
            None => problems.push(format!("{}@{}: orders sum to {total}, no total", w.0, w.1)),
        }
    }
    for (w, t) in &got {
        if !want.contains_key(w) {
            problems.push(format!(
                "{}@{}: total {t} for a window without orders",
                w.0, w.1
            ));
        }
    }
    println!(
        "totals equal the orders summed per region and window from the generated data: {}",
        if problems.is_empty() { "yes" } else { "NO" }
    );
    if !problems.is_empty() {
        for p in problems.iter().take(20) {
            println!("  {p}");
        }
        bail!(
            "the totals differ from the generated data in {} places",
            problems.len()
        );
    }
    Ok(())
}

/// Every (region, window start) of `topic` with its latest total.
fn read_totals(
    backend: &dyn Backend,
    topic: &str,
    window: i64,
) -> anyhow::Result<BTreeMap<(String, i64), i64>> {
    let keys = Serdes::time_windowed(Serdes::string(), ms(window));
    let values = Serdes::i64();
    let mut totals = BTreeMap::new();
    let Some(partitions) = backend.partitions(topic)? else {
        return Ok(totals);
    };
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        super::for_each_record(backend, &tp, |record| {
            let at = || format!("{tp} offset {}", record.offset());
            let key = keys
                .deserialize(record.key().map(|k| &k[..]))
                .with_context(|| format!("{}: not a windowed key", at()))?;
            let total = values
                .deserialize(record.value().map(|v| &v[..]))
                .with_context(|| format!("{}: not an 8-byte total", at()))?;
            totals.insert((key.key, key.window.start), total);
            Ok(())
        })?;
    }
    Ok(totals)
}

/// FNV-1a over the totals in order: equal totals give equal digests on any backend.
fn digest(totals: &BTreeMap<(String, i64), i64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for ((region, start), total) in totals {
        eat(region.as_bytes());
        eat(&start.to_be_bytes());
        eat(&total.to_be_bytes());
    }
    h
}
