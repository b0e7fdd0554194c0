//! `cargo run --release -p riffle-bench -- throughput`: the groupByKey-count sample end to end;
//! `cargo run --release -p riffle-bench -- restore`: the state updater's restore rate.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};
use riffle_cli::sample::{Store, generate, latest_counts, topology};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use serde::Serialize;

use super::{count_process_wide, process_totals};

/// Arguments of `cargo run --release -p riffle-bench -- throughput`.
#[derive(clap::Args, Debug)]
pub(crate) struct ThroughputArgs {
    /// Records to generate.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Input partitions.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Stores to measure: memory, persistent.
    #[arg(long, value_delimiter = ',', default_value = "memory,persistent")]
    stores: Vec<String>,
    /// Guarantees to measure: at_least_once, exactly_once.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "at_least_once,exactly_once"
    )]
    guarantees: Vec<String>,
    /// Serdes of the words: string (the sample's), bytes (`Serdes::bytes()`: keys and values
    /// are slices of the fetched batches, no allocation per record).
    #[arg(long, value_delimiter = ',', default_value = "string")]
    serdes: Vec<String>,
    /// Extra options for the application, Kafka-style (repeatable), e.g.
    /// `--set metrics.recording.level=DEBUG`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct ThroughputRow {
    backend: &'static str,
    serdes: String,
    store: String,
    guarantee: String,
    records: u64,
    seconds: f64,
    records_per_sec: f64,
    allocs_per_record: f64,
    bytes_per_record: f64,
}

fn parse_store(s: &str) -> anyhow::Result<Store> {
    match s {
        "memory" => Ok(Store::Memory),
        "persistent" => Ok(Store::Persistent),
        other => bail!("unknown store {other:?}: expected memory or persistent"),
    }
}

/// One run of the sample over a fresh copy of the input; returns (seconds, allocations, bytes).
fn run_once(
    args: &ThroughputArgs,
    store: Store,
    serdes: &str,
    guarantee: &str,
    count_allocations: bool,
) -> anyhow::Result<(f64, u64, u64)> {
    let dir = tempfile::tempdir()?;
    let expected = generate(
        &dir.path().join("log"),
        "words",
        args.records,
        args.keys,
        args.partitions,
    )?;
    let log = Log::open(dir.path().join("log"), LogOptions::default())?;
    let mut config = StreamsConfig::new("throughput");
    config.num_stream_threads = args.threads;
    config.state_dir = dir.path().join("state");
    config.poll = Duration::from_millis(10);
    config.set("processing_guarantee", guarantee)?;
    if guarantee == "at_least_once" {
        config.commit_interval = Some(Duration::from_millis(1_000));
    }
    for setting in &args.settings {
        let (name, value) = setting
            .split_once('=')
            .with_context(|| format!("--set {setting}: expected NAME=VALUE"))?;
        config.set(name, value)?;
    }
    let topology = match serdes {
        "string" => topology("words", "counts", store)?,
        "bytes" => bytes_topology("words", "counts", store)?,
        other => bail!("unknown serdes {other:?}: expected string or bytes"),
    };
    let mut app = StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared())?;
    let bar = ProgressBar::new(args.records);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(format!(
        "{store:?}/{guarantee}{}",
        if count_allocations {
            " (counting allocations)"
        } else {
            ""
        }
    ));
    let (b0, c0) = process_totals();
    count_process_wide(count_allocations);
    let start = Instant::now();
    app.start()?;
    while !app.is_idle() && !app.is_shutting_down() {
        bar.set_position(app.records_processed().min(args.records));
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = app.close()?;
    let seconds = start.elapsed().as_secs_f64();
    count_process_wide(false);
    let (b1, c1) = process_totals();
    bar.finish_and_clear();
    if summary.records_processed != args.records {
        bail!(
            "processed {} records, expected {}",
            summary.records_processed,
            args.records
        );
    }
    if latest_counts(&EmbeddedBackend::new(log.clone()), "counts")? != expected {
        bail!("the counts differ from an independent HashMap count of the input");
    }
    Ok((seconds, c1 - c0, b1 - b0))
}

/// The sample over `Serdes::bytes()` keys and values.
fn bytes_topology(input: &str, output: &str, store: Store) -> riffle::Result<riffle::Topology> {
    use riffle::{Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder};
    let store_type = riffle_cli::sample::store_type(store);
    let builder = StreamsBuilder::new();
    builder
        .stream(input, Consumed::with(Serdes::bytes(), Serdes::bytes()))
        .group_by_key_with(Grouped::with(Serdes::bytes(), Serdes::bytes()))
        .count_with(Materialized::named("counts").with_store_type(store_type))
        .to_stream()
        .to(output, Produced::with(Serdes::bytes(), Serdes::i64()));
    builder.build()
}

pub(crate) fn throughput(args: ThroughputArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for serdes in &args.serdes {
        for store in &args.stores {
            for guarantee in &args.guarantees {
                let parsed = parse_store(store)?;
                let (seconds, _, _) = run_once(&args, parsed, serdes, guarantee, false)?;
                let (_, allocs, bytes) = run_once(&args, parsed, serdes, guarantee, true)?;
                let n = args.records as f64;
                rows.push(ThroughputRow {
                    backend: "embedded",
                    serdes: serdes.clone(),
                    store: store.clone(),
                    guarantee: guarantee.clone(),
                    records: args.records,
                    seconds,
                    records_per_sec: n / seconds,
                    allocs_per_record: allocs as f64 / n,
                    bytes_per_record: bytes as f64 / n,
                });
            }
        }
    }
    println!(
        "{:<7} {:<10} {:<14} {:>10} {:>8} {:>14} {:>12} {:>12}",
        "serdes", "store", "guarantee", "records", "s", "records/s", "allocs/rec", "B/rec"
    );
    for r in &rows {
        println!(
            "{:<7} {:<10} {:<14} {:>10} {:>8.2} {:>14.0} {:>12.3} {:>12.1}",
            r.serdes,
            r.store,
            r.guarantee,
            r.records,
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

/// Arguments of `cargo run --release -p riffle-bench -- restore`.
#[derive(clap::Args, Debug)]
pub(crate) struct RestoreArgs {
    /// Changelog records to restore.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Distinct keys among them.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Partitions (tasks), each restored by its thread's state updater.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Stream threads (each with its own state updater).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Stores to measure: memory, persistent.
    #[arg(long, value_delimiter = ',', default_value = "memory,persistent")]
    stores: Vec<String>,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct RestoreRow {
    store: String,
    records: u64,
    partitions: u32,
    threads: usize,
    seconds: f64,
    records_per_sec: f64,
}

pub(crate) fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for store in &args.stores {
        let parsed = parse_store(store)?;
        let dir = tempfile::tempdir()?;
        let log = Log::open(dir.path().join("log"), LogOptions::default())?;
        log.create_topic("words", args.partitions)?;
        // The changelog of the sample's `counts` store, as a previous run would have left it.
        let changelog = "restore-bench-counts-changelog";
        log.create_topic(changelog, args.partitions)?;
        let mut builder = BatchBuilder::new(Compression::None);
        for p in 0..args.partitions {
            let tp = TopicPartition::new(changelog, p);
            let per_partition = args.records / u64::from(args.partitions);
            for i in 0..per_partition {
                let key = format!("key-{}", (i * 7_919) % args.keys.max(1));
                builder.push(
                    0,
                    Some(key.as_bytes()),
                    Some(&((i / args.keys.max(1)) as i64 + 1).to_be_bytes()),
                );
                if builder.size_bytes() >= 256 << 10 {
                    log.append(&tp, &mut builder)?;
                }
            }
            if !builder.is_empty() {
                log.append(&tp, &mut builder)?;
            }
        }
        log.sync()?;
        let total = args.records / u64::from(args.partitions) * u64::from(args.partitions);
        let mut config = StreamsConfig::new("restore-bench");
        config.num_stream_threads = args.threads;
        config.state_dir = dir.path().join("state");
        config.poll = Duration::from_millis(5);
        let mut app = StreamsApp::new(
            topology("words", "counts", parsed)?,
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )?;
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} restoring {msg} [{bar:30}] {pos}/{len} ({per_sec})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(store.clone());
        let start = Instant::now();
        app.start()?;
        while !app.is_idle() && !app.is_shutting_down() {
            bar.set_position(app.records_restored().min(total));
            std::thread::sleep(Duration::from_millis(10));
        }
        let seconds = start.elapsed().as_secs_f64();
        let restored = app.records_restored();
        app.close()?;
        bar.finish_and_clear();
        if restored != total {
            bail!("restored {restored} records, expected {total}");
        }
        rows.push(RestoreRow {
            store: store.clone(),
            records: total,
            partitions: args.partitions,
            threads: args.threads,
            seconds,
            records_per_sec: total as f64 / seconds,
        });
    }
    println!(
        "{:<10} {:>10} {:>10} {:>8} {:>8} {:>14}",
        "store", "records", "partitions", "threads", "s", "records/s"
    );
    for r in &rows {
        println!(
            "{:<10} {:>10} {:>10} {:>8} {:>8.2} {:>14.0}",
            r.store, r.records, r.partitions, r.threads, r.seconds, r.records_per_sec
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
