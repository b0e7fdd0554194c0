//! `cargo run --release -p riffle-bench -- kafka`: the groupByKey-count sample on a Kafka cluster
//! under at_least_once and exactly_once, one commit interval for both, over the same input in one
//! run — records/s, and CPU per record of this process and (with `--broker-pid`) of the broker.
//!
//! The input is written once; each run is a new application (its own id, output topic and
//! state directory) reading it from the start, the guarantees alternating so that drift on a
//! shared machine falls on both. Every run's counts are read back (read_committed) and checked
//! against a count of the input.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use riffle::backend::{Backend, TopicKind};
use riffle::{StreamsApp, StreamsConfig};
use riffle_bench::proc_stats::process_cpu_time;
use riffle_cli::sample::{Store, latest_counts, topology};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use serde::Serialize;

/// Arguments of `cargo run --release -p riffle-bench -- kafka`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The cluster, `host:port[,host:port…]` (e.g. a broker from kafka/testkit/start-broker.sh).
    #[arg(long)]
    bootstrap_servers: String,
    /// Kafka client properties (`name=value` lines, as Kafka's tools read `--command-config`):
    /// `security.protocol`, `sasl.*`, `ssl.*`.
    #[arg(long, value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// Records of the input.
    #[arg(long, default_value_t = 300_000)]
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
    /// The commit interval of both guarantees, in milliseconds (Kafka Streams' default under
    /// exactly_once is 100).
    #[arg(long, default_value_t = 100)]
    commit_interval_ms: u64,
    /// The store of the counts.
    #[arg(long, value_enum, default_value = "memory")]
    store: Store,
    /// Runs per guarantee.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The broker's process id, to measure its CPU time too (`broker.pid` in the directory of
    /// kafka/testkit/start-broker.sh).
    #[arg(long)]
    broker_pid: Option<u32>,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct Row {
    guarantee: &'static str,
    run: usize,
    records: u64,
    seconds: f64,
    records_per_sec: f64,
    commits: u64,
    /// The stream threads' mean commit time (flush, changelog and output writes, offsets: one
    /// transaction under exactly_once), in milliseconds, over the last sample windows.
    commit_ms_avg: f64,
    /// The longest commit in those windows, in milliseconds.
    commit_ms_max: f64,
    /// CPU time of this process (the stream threads, the fetch watcher) per record.
    riffle_cpu_us_per_record: f64,
    /// CPU time of the broker per record (`None` without `--broker-pid`).
    broker_cpu_us_per_record: Option<f64>,
}

fn kafka_config(args: &Args) -> anyhow::Result<KafkaConfig> {
    let mut config = KafkaConfig::new(args.bootstrap_servers.as_str());
    if let Some(path) = &args.command_config {
        config.load_properties(path)?;
    }
    Ok(config)
}

/// `utime + stime` of `/proc/<pid>/stat` (clock ticks, 10 ms), in seconds: of process `pid`, or
/// of this process for `None`.
fn cpu_seconds(pid: Option<u32>) -> anyhow::Result<f64> {
    let path = pid.map_or("/proc/self/stat".to_owned(), |p| format!("/proc/{p}/stat"));
    let pid = pid
        .map(i32::try_from)
        .transpose()
        .with_context(|| format!("{path}: not a process id"))?;
    let spent = process_cpu_time(pid).with_context(|| format!("reading {path}"))?;
    Ok(spent.as_secs_f64())
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        super::check_writable(path)?;
    }
    let servers = &args.bootstrap_servers;
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut reader_config = kafka_config(&args)?;
    reader_config.read_committed = true;
    let reader = KafkaBackend::connect(reader_config)
        .with_context(|| format!("connecting to Kafka at {servers}"))?;
    let input = format!("riffle-bench-words-{run_id}");
    let expected = generate(&reader, &input, &args)?;
    println!(
        "riffle-bench kafka: {} records over {} keys in {} partitions on {servers}; {} stream threads, {:?} store, commit interval {} ms, {} runs per guarantee; load average {}",
        args.records,
        args.keys,
        args.partitions,
        args.threads,
        args.store,
        args.commit_interval_ms,
        args.runs,
        super::load_average()
    );
    let mut rows = Vec::new();
    for run in 0..args.runs {
        let order: [&'static str; 2] = if run % 2 == 0 {
            ["at_least_once", "exactly_once"]
        } else {
            ["exactly_once", "at_least_once"]
        };
        for guarantee in order {
            let row = run_once(&args, &reader, &input, &expected, guarantee, run, run_id)?;
            println!(
                "  {guarantee:<14} run {run}: {:>6.2} s, {:>9} records/s, {:>4} commits of {:.1} ms (max {:.1}), riffle {:.2} µs CPU/record{}",
                row.seconds,
                super::thousands(row.records_per_sec),
                row.commits,
                row.commit_ms_avg,
                row.commit_ms_max,
                row.riffle_cpu_us_per_record,
                row.broker_cpu_us_per_record
                    .map(|b| format!(", broker {b:.2} µs CPU/record"))
                    .unwrap_or_default()
            );
            rows.push(row);
        }
    }
    let median = |guarantee: &str, f: &dyn Fn(&Row) -> f64| {
        let mut values: Vec<f64> = rows
            .iter()
            .filter(|r| r.guarantee == guarantee)
            .map(f)
            .collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!("medians:");
    for guarantee in ["at_least_once", "exactly_once"] {
        println!(
            "  {guarantee:<14} {:>9} records/s, commits of {:.1} ms, riffle {:.2} µs CPU/record{}",
            super::thousands(median(guarantee, &|r| r.records_per_sec)),
            median(guarantee, &|r| r.commit_ms_avg),
            median(guarantee, &|r| r.riffle_cpu_us_per_record),
            if args.broker_pid.is_some() {
                format!(
                    ", broker {:.2} µs CPU/record",
                    median(guarantee, &|r| r
                        .broker_cpu_us_per_record
                        .unwrap_or(f64::NAN))
                )
            } else {
                String::new()
            }
        );
    }
    println!(
        "exactly_once / at_least_once: {} of the records/s",
        super::ratio(
            median("exactly_once", &|r| r.records_per_sec),
            median("at_least_once", &|r| r.records_per_sec)
        )
    );
    if let Some(path) = &args.json {
        super::write_json_rows(path, &rows)?;
        println!("rows written to {}", path.display());
    }
    Ok(())
}

/// Writes the input (timestamps of now, so the broker's retention keeps it); returns the count
/// per key.
fn generate(
    backend: &KafkaBackend,
    topic: &str,
    args: &Args,
) -> anyhow::Result<HashMap<String, i64>> {
    backend.create_topic(topic, args.partitions, TopicKind::User)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut producer = riffle_cli::sample::bulk_producer(backend.clone().shared());
    let mut expected = HashMap::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let one = "1".to_owned();
    for i in 0..args.records {
        let key = format!("key-{}", rng.random_range(0..args.keys.max(1)));
        producer.send_record(
            topic,
            riffle::producer::ProducerRecord::new(&key, &one).with_timestamp(now + i as i64),
        )?;
        *expected.entry(key).or_insert(0) += 1;
    }
    producer.close()?;
    Ok(expected)
}

fn run_once(
    args: &Args,
    reader: &KafkaBackend,
    input: &str,
    expected: &HashMap<String, i64>,
    guarantee: &'static str,
    run: usize,
    run_id: u64,
) -> anyhow::Result<Row> {
    let name = format!("riffle-bench-{run_id}-{guarantee}-{run}");
    let output = format!("{name}-counts");
    let dir = tempfile::tempdir()?;
    let mut config = StreamsConfig::new(name.clone());
    config.num_stream_threads = args.threads;
    config.state_dir = dir.path().to_owned();
    config.poll = Duration::from_millis(10);
    config.commit_interval = Some(Duration::from_millis(args.commit_interval_ms));
    config.set("processing_guarantee", guarantee)?;
    let backend = KafkaBackend::connect(kafka_config(args)?)?;
    let mut app = StreamsApp::new(
        topology(input, &output, args.store)?,
        config,
        backend.shared(),
    )?;
    let broker = args.broker_pid;
    let cpu_before = cpu_seconds(None)?;
    let broker_before = broker.map(|pid| cpu_seconds(Some(pid))).transpose()?;
    let started = Instant::now();
    app.start()?;
    let deadline = started + Duration::from_secs(600);
    while app.records_processed() < args.records {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name}: {} of {} records after 10 minutes",
            app.records_processed(),
            args.records
        );
        anyhow::ensure!(!app.is_shutting_down(), "{name} stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let commits: u64 = app.thread_metrics().iter().map(|m| m.commits()).sum();
    let metrics = app.metrics();
    let commit_latency = |name: &str| -> Vec<f64> {
        metrics
            .iter()
            .filter(|m| m.name == name && m.value > 0.0)
            .map(|m| m.value)
            .collect()
    };
    let averages = commit_latency("commit-latency-avg");
    let commit_ms_avg = averages.iter().sum::<f64>() / averages.len().max(1) as f64;
    let commit_ms_max = commit_latency("commit-latency-max")
        .into_iter()
        .fold(0.0, f64::max);
    let summary = app.close()?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(None)? - cpu_before;
    let broker_cpu = match (broker, broker_before) {
        (Some(pid), Some(before)) => Some(cpu_seconds(Some(pid))? - before),
        _ => None,
    };
    reader.wait_until_stable(&output, Duration::from_secs(30))?;
    let counts = latest_counts(reader, &output)?;
    anyhow::ensure!(
        counts == *expected,
        "{name}: the counts in {output} differ from a count of the input ({} keys against {})",
        counts.len(),
        expected.len()
    );
    let records = summary.records_processed;
    let per_record = |s: f64| s * 1e6 / records.max(1) as f64;
    Ok(Row {
        guarantee,
        run,
        records,
        seconds,
        records_per_sec: records as f64 / seconds,
        commits,
        commit_ms_avg,
        commit_ms_max,
        riffle_cpu_us_per_record: per_record(cpu),
        broker_cpu_us_per_record: broker_cpu.map(per_record),
    })
}
