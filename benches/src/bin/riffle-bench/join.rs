//! `cargo run --release -p riffle-bench -- join`: a stream–table join end to end on the embedded
//! log, beside the same stream through a `map_values` alone (the baseline) in the same run.
//!
//! The table (`--table-keys` rows, `customer-<i>` → a region number) is loaded by a first run
//! of the application; then the stream (`--records` orders, each for a uniformly random
//! customer, its amount as value) is written, and a second run is timed from its first record
//! processed to its last (allocations are counted from its start, so an in-memory table's
//! restoration counts in them).
//! Every output record is checked against the join computed independently from the generated
//! rows.
//!
//! `--kinds stream-global` runs the same stream against the customers as a global table
//! (`join_global`, the stream's key as lookup key). `--kinds foreign-key` makes the orders a
//! table keyed by order id (`--records` updates of `--records / 2` orders, so half of them
//! change an order, its customer too) joined by foreign key with the customers
//! (`join_foreign`), beside the same table through a `map_values` (its baseline); each order's
//! last output is checked against the join of its last update.
//!
//! Then a stream–stream windowed join (`--kinds stream-stream`): `--records` records, half
//! impressions and half clicks alternately, one per ms of event time, each for one of
//! `--window-keys` ads, joined within ±`--window-ms` (an inner join), beside a `map_values` of
//! the two streams merged. The input is written first and the run timed from its first record
//! processed to its last. The grace period covers the whole input, so every pair in the windows
//! joins whatever order a task reads its two partitions in, and the outputs are checked
//! against the pairs counted independently (their number and a checksum of their values).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng};
use riffle::{
    Consumed, EmbeddedBackend, JoinWindows, Materialized, Produced, Serdes, StreamsApp,
    StreamsBuilder, StreamsConfig, Topology, dsl::StoreType, dsl::StreamJoined, producer::Producer,
    producer::ProducerConfig, producer::ProducerRecord,
};
use riffle_cli::sample::{Store, store_type};
use riffle_log::{Log, LogOptions, TopicPartition};
use serde::Serialize;

use super::{count_process_wide, process_totals};

/// Arguments of `cargo run --release -p riffle-bench -- join`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Stream records (orders).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Table rows (customers), the stream's keys.
    #[arg(long, default_value_t = 100_000)]
    table_keys: u64,
    /// Partitions of both topics.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Table stores to measure: memory, persistent.
    #[arg(long, value_delimiter = ',', default_value = "memory,persistent")]
    stores: Vec<String>,
    /// Rounds (each measures the baseline and the join in turn).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Which joins to measure: stream-table, stream-global, foreign-key, stream-stream.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "stream-table,stream-stream"
    )]
    kinds: Vec<String>,
    /// Keys of the stream–stream join's records.
    #[arg(long, default_value_t = 10_000)]
    window_keys: u64,
    /// The stream–stream join's time difference, in ms.
    #[arg(long, default_value_t = 5_000)]
    window_ms: u64,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct Row {
    topology: &'static str,
    store: String,
    round: usize,
    records: u64,
    table_keys: u64,
    /// Output records (checked against the independent join).
    outputs: u64,
    seconds: f64,
    records_per_sec: f64,
    allocs_per_record: f64,
    bytes_per_record: f64,
}

/// What a run of the table joins measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `orders ⋈ customers` (a table), or its baseline.
    StreamTable,
    /// `orders ⋈ customers` (a global table).
    StreamGlobal,
    /// The orders table joined by foreign key with the customers, or its baseline.
    ForeignKey,
}

/// The join of `kind` (`store`: the tables' stores), or its baseline (`None`): the same input
/// and output without the join. Outputs are `amount * 1000 + region`, to `joined`.
fn join_topology(kind: Kind, store: Option<Store>) -> riffle::Result<Topology> {
    let builder = StreamsBuilder::new();
    let longs = || Consumed::with(Serdes::string(), Serdes::i64());
    let out = || Produced::with(Serdes::string(), Serdes::i64());
    // The baseline's table in memory, named explicitly (DSL stores are persistent unless
    // told), as docs/BENCHMARKS.md's figures measure it.
    let materialized = |name: &str| match store {
        Some(store) => Materialized::named(name).with_store_type(store_type(store)),
        None => Materialized::named(name).with_store_type(StoreType::InMemory),
    };
    match (kind, store) {
        (Kind::StreamTable | Kind::StreamGlobal, None) => {
            builder
                .stream("orders", longs())
                .map_values(|amount| amount * 1000)
                .to("joined", out());
        }
        (Kind::StreamTable, Some(_)) => {
            let customers = builder.table("customers", longs(), materialized("customers"));
            builder
                .stream("orders", longs())
                .join(&customers, |amount, region| amount * 1000 + region)
                .to("joined", out());
        }
        (Kind::StreamGlobal, Some(_)) => {
            let customers = builder.global_table("customers", longs(), materialized("customers"));
            builder
                .stream("orders", longs())
                .join_global(
                    &customers,
                    |k, _| k.clone(),
                    |amount, region| amount * 1000 + region,
                )
                .to("joined", out());
        }
        (Kind::ForeignKey, None) => {
            builder
                .table("orders", longs(), materialized("orders"))
                .map_values(|v| (v % 1000) * 1000, Serdes::i64())
                .to_stream()
                .to("joined", out());
        }
        (Kind::ForeignKey, Some(_)) => {
            let customers = builder.table("customers", longs(), materialized("customers"));
            builder
                .table("orders", longs(), materialized("orders"))
                .join_foreign(
                    &customers,
                    |_, v| Some(format!("customer-{}", v / 1000)),
                    |v, region| (v % 1000) * 1000 + region,
                    Serdes::i64(),
                )
                .to_stream()
                .to("joined", out());
        }
    }
    builder.build()
}

fn producer(log: &Log) -> Producer<String, i64> {
    let config = ProducerConfig::default()
        .with_batch_size(256 << 10)
        .with_linger(Duration::from_secs(1));
    Producer::with_config(
        EmbeddedBackend::new(log.clone()).shared(),
        Serdes::string(),
        Serdes::i64(),
        config,
    )
}

/// Starts `app` and times it from its first record processed until it has processed `records`
/// and is idle: (seconds, allocations, bytes), the allocations counted from the start.
fn timed(
    app: &mut StreamsApp,
    records: u64,
    count_allocations: bool,
) -> anyhow::Result<(f64, u64, u64)> {
    let (b0, c0) = process_totals();
    count_process_wide(count_allocations);
    app.start()?;
    while app.records_processed() == 0 {
        if app.is_shutting_down() {
            bail!("the application stopped");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let start = Instant::now();
    while app.records_processed() < records || !app.is_idle() {
        if app.is_shutting_down() {
            bail!("the application stopped");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let seconds = start.elapsed().as_secs_f64();
    count_process_wide(false);
    let (b1, c1) = process_totals();
    Ok((seconds, c1 - c0, b1 - b0))
}

fn wait_idle(app: &StreamsApp) -> anyhow::Result<()> {
    while !app.is_idle() {
        if app.is_shutting_down() {
            bail!("the application stopped");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// One run: (seconds, allocations, bytes) of processing the orders.
fn run_once(
    args: &Args,
    kind: Kind,
    store: Option<Store>,
    count_allocations: bool,
) -> anyhow::Result<(f64, u64, u64, u64)> {
    let dir = tempfile::tempdir()?;
    let log = Log::open(dir.path().join("log"), LogOptions::default())?;
    log.create_topic("customers", args.partitions)?;
    log.create_topic("orders", args.partitions)?;
    let mut rows = HashMap::new();
    let mut p = producer(&log);
    for i in 0..args.table_keys {
        let (key, region) = (format!("customer-{i}"), (i % 7) as i64);
        p.send_record(
            "customers",
            ProducerRecord::new(&key, &region).with_timestamp(i as i64),
        )?;
        rows.insert(key, region);
    }
    p.close()?;
    let mut config = StreamsConfig::new("join-bench");
    config.num_stream_threads = args.threads;
    config.state_dir = dir.path().join("state");
    config.poll = Duration::from_millis(10);
    config.commit_interval = Some(Duration::from_millis(1_000));
    let topology = || join_topology(kind, store);
    // Run 1 loads the table and commits it.
    let mut app = StreamsApp::new(
        topology()?,
        config.clone(),
        EmbeddedBackend::new(log.clone()).shared(),
    )?;
    app.start()?;
    wait_idle(&app)?;
    app.close()?;

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut p = producer(&log);
    // Stream joins: per customer, the sum of its outputs. The foreign-key join: per order, its
    // last output.
    let mut expected: HashMap<String, i64> = HashMap::new();
    let orders = (args.records / 2).max(1);
    for i in 0..args.records {
        let customer = rng.random_range(0..args.table_keys.max(1));
        let amount = (i % 1000) as i64;
        let region = if store.is_some() {
            rows[&format!("customer-{customer}")]
        } else {
            0
        };
        let (key, value) = match kind {
            Kind::ForeignKey => {
                let key = format!("order-{}", rng.random_range(0..orders));
                expected.insert(key.clone(), amount * 1000 + region);
                (key, customer as i64 * 1000 + amount)
            }
            _ => {
                let key = format!("customer-{customer}");
                *expected.entry(key.clone()).or_default() += amount * 1000 + region;
                (key, amount)
            }
        };
        p.send_record(
            "orders",
            ProducerRecord::new(&key, &value).with_timestamp((args.table_keys + i) as i64),
        )?;
    }
    p.close()?;
    log.sync()?;
    // Run 2 processes the stream: timed from its first record processed (an in-memory table
    // is restored from its topic before that) to the last.
    let mut app = StreamsApp::new(
        topology()?,
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )?;
    let (seconds, allocations, bytes) = timed(&mut app, args.records, count_allocations)?;
    app.close()?;
    // Every output against the independent join: per key, the sum of its values.
    let mut got: HashMap<String, i64> = HashMap::new();
    let mut outputs = 0;
    for partition in 0..log.partitions("joined").context("no output topic")? {
        let tp = TopicPartition::new("joined", partition);
        for batch in log.fetch(&tp, 0, usize::MAX)? {
            for record in batch.records() {
                let record = record?;
                let key = String::from_utf8(record.key().context("a keyless output")?.to_vec())?;
                let value = record.value().context("a null output")?;
                let value = i64::from_be_bytes(value[..].try_into()?);
                match kind {
                    Kind::ForeignKey => got.insert(key, value),
                    _ => Some(*got.entry(key).and_modify(|v| *v += value).or_insert(value)),
                };
                outputs += 1;
            }
        }
    }
    let all = kind == Kind::ForeignKey || outputs == args.records;
    if !all || got != expected {
        bail!(
            "{outputs} outputs for {} orders, or their values differ from the independent join",
            args.records
        );
    }
    Ok((seconds, allocations, bytes, outputs))
}

/// The stream–stream join: impressions ⋈ clicks within ±`window_ms`, `impression * 31 +
/// click`; `None`: the baseline, both streams merged through a `map_values`.
fn windowed_topology(
    store: Option<Store>,
    window_ms: u64,
    grace_ms: u64,
) -> riffle::Result<Topology> {
    let builder = StreamsBuilder::new();
    let impressions = builder.stream(
        "impressions",
        Consumed::with(Serdes::string(), Serdes::i64()),
    );
    let clicks = builder.stream("clicks", Consumed::with(Serdes::string(), Serdes::i64()));
    let out = Produced::with(Serdes::string(), Serdes::i64());
    match store {
        Some(store) => impressions
            .join_stream(
                &clicks,
                |i, c| i.wrapping_mul(31).wrapping_add(*c),
                JoinWindows::of_time_difference_and_grace(
                    Duration::from_millis(window_ms),
                    Duration::from_millis(grace_ms),
                ),
                StreamJoined::with(Serdes::string(), Serdes::i64(), Serdes::i64())
                    .with_store_type(store_type(store)),
            )
            .to("joined", out),
        None => impressions
            .merge(&clicks)
            .map_values(|v| v.wrapping_mul(31))
            .to("joined", out),
    }
    builder.build()
}

/// One side's records of a key: (timestamp, value).
type Timed = Vec<(i64, i64)>;

/// One run of the stream–stream join (or its baseline): (seconds, allocations, bytes, outputs).
fn run_windowed_once(
    args: &Args,
    store: Option<Store>,
    count_allocations: bool,
) -> anyhow::Result<(f64, u64, u64, u64)> {
    let dir = tempfile::tempdir()?;
    let log = Log::open(dir.path().join("log"), LogOptions::default())?;
    log.create_topic("impressions", args.partitions)?;
    log.create_topic("clicks", args.partitions)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut p = producer(&log);
    // Each key's impressions and clicks (timestamp, value), for the independent count.
    let mut by_key: HashMap<String, (Timed, Timed)> = HashMap::new();
    for i in 0..args.records {
        let key = format!("ad-{}", rng.random_range(0..args.window_keys.max(1)));
        let (ts, value) = (i as i64, (i % 1000) as i64);
        let topic = if i % 2 == 0 { "impressions" } else { "clicks" };
        let sides = by_key.entry(key.clone()).or_default();
        if i % 2 == 0 {
            &mut sides.0
        } else {
            &mut sides.1
        }
        .push((ts, value));
        p.send_record(topic, ProducerRecord::new(&key, &value).with_timestamp(ts))?;
    }
    p.close()?;
    log.sync()?;
    let window = args.window_ms as i64;
    let (mut pairs, mut checksum) = (0u64, 0i64);
    for (impressions, clicks) in by_key.values() {
        if store.is_none() {
            for (_, v) in impressions.iter().chain(clicks) {
                pairs += 1;
                checksum = checksum.wrapping_add(v.wrapping_mul(31));
            }
            continue;
        }
        for (ti, vi) in impressions {
            for (tc, vc) in clicks {
                if (ti - tc).abs() <= window {
                    pairs += 1;
                    checksum = checksum.wrapping_add(vi.wrapping_mul(31).wrapping_add(*vc));
                }
            }
        }
    }
    let mut config = StreamsConfig::new("join-bench");
    config.num_stream_threads = args.threads;
    config.state_dir = dir.path().join("state");
    config.poll = Duration::from_millis(10);
    config.commit_interval = Some(Duration::from_millis(1_000));
    let topology = windowed_topology(store, args.window_ms, args.records)?;
    let mut app = StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared())?;
    let (seconds, allocations, bytes) = timed(&mut app, args.records, count_allocations)?;
    app.close()?;
    let (mut outputs, mut got) = (0u64, 0i64);
    for partition in 0..log.partitions("joined").context("no output topic")? {
        let tp = TopicPartition::new("joined", partition);
        for batch in log.fetch(&tp, 0, usize::MAX)? {
            for record in batch.records() {
                let record = record?;
                let value = record.value().context("a null output")?;
                got = got.wrapping_add(i64::from_be_bytes(value[..].try_into()?));
                outputs += 1;
            }
        }
    }
    if outputs != pairs || got != checksum {
        bail!(
            "{outputs} outputs (checksum {got}) where the independent count has {pairs} \
             (checksum {checksum})"
        );
    }
    Ok((seconds, allocations, bytes, outputs))
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let n = args.records as f64;
    let stores: Vec<Store> = args
        .stores
        .iter()
        .map(|s| match s.as_str() {
            "memory" => Ok(Store::Memory),
            "persistent" => Ok(Store::Persistent),
            other => bail!("unknown store {other:?}: expected memory or persistent"),
        })
        .collect::<anyhow::Result<_>>()?;
    for round in 0..args.rounds {
        let mut measure =
            |topology: &'static str, label: String, store: Option<Store>, windowed| {
                let once = |count| match windowed {
                    None => run_windowed_once(&args, store, count),
                    Some(kind) => run_once(&args, kind, store, count),
                };
                let (seconds, _, _, outputs) = once(false)?;
                let (_, allocs, bytes, _) = once(true)?;
                rows.push(Row {
                    topology,
                    store: label,
                    round,
                    records: args.records,
                    outputs,
                    table_keys: match windowed {
                        None => args.window_keys,
                        Some(_) => args.table_keys,
                    },
                    seconds,
                    records_per_sec: n / seconds,
                    allocs_per_record: allocs as f64 / n,
                    bytes_per_record: bytes as f64 / n,
                });
                anyhow::Ok(())
            };
        let kinds = |k: &str| args.kinds.iter().any(|a| a == k);
        let table = Some(Kind::StreamTable);
        if kinds("stream-table") || kinds("stream-global") {
            measure("map_values", "-".into(), None, table)?;
        }
        for (name, topology, kind) in [
            ("stream-table", "stream-table join", Kind::StreamTable),
            ("stream-global", "stream-global join", Kind::StreamGlobal),
        ] {
            if kinds(name) {
                for (label, store) in args.stores.iter().zip(&stores) {
                    measure(topology, label.clone(), Some(*store), Some(kind))?;
                }
            }
        }
        if kinds("foreign-key") {
            let fk = Some(Kind::ForeignKey);
            measure("table map_values", "-".into(), None, fk)?;
            for (label, store) in args.stores.iter().zip(&stores) {
                measure("foreign-key join", label.clone(), Some(*store), fk)?;
            }
        }
        if kinds("stream-stream") {
            measure("merge+map_values", "-".into(), None, None)?;
            for (label, store) in args.stores.iter().zip(&stores) {
                measure("stream-stream join", label.clone(), Some(*store), None)?;
            }
        }
    }
    println!(
        "{:<20} {:<10} {:>5} {:>10} {:>10} {:>8} {:>14} {:>12} {:>10}",
        "topology", "store", "round", "records", "outputs", "s", "records/s", "allocs/rec", "B/rec"
    );
    for r in &rows {
        println!(
            "{:<20} {:<10} {:>5} {:>10} {:>10} {:>8.2} {:>14.0} {:>12.3} {:>10.1}",
            r.topology,
            r.store,
            r.round,
            r.records,
            r.outputs,
            r.seconds,
            r.records_per_sec,
            r.allocs_per_record,
            r.bytes_per_record
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
