//! `cargo run --release -p riffle-bench -- trickle`: R records a second, appended one at a time to
//! random partitions of an N-partition input of the embedded log, and what they cost one stream
//! thread owning every task — riffle's loop (fetch the ready partitions) beside Kafka Streams'
//! (fetch every task's input whenever anything moved) in the same run.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use riffle::config::SnapshotStrategy;
use riffle_bench::{IdleRun, IdleSettings, SeededRng, TrickleReport};
use serde::Serialize;

use super::{
    Fetch, Wakeup, distinct, load_average, ms, ms_cell, progress_bar, ratio, thousands,
    write_json_rows,
};

/// The targets at 100 records/s: the ready loop's share of a core, and how much less
/// than the scan-all loop it must use.
const TARGET_RATE: f64 = 100.0;
const TARGET_CPU_PERCENT: f64 = 1.0;
const TARGET_RATIO: f64 = 10.0;

/// A `--commit-interval-ms` value: a number, or `default` (StreamsConfig's).
#[derive(Clone, Copy, Debug, PartialEq)]
struct CommitInterval(Option<u64>);

impl FromStr for CommitInterval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "default" {
            return Ok(CommitInterval(None));
        }
        s.parse()
            .map(|ms| CommitInterval(Some(ms)))
            .map_err(|_| format!("{s:?} is neither a number of milliseconds nor `default`"))
    }
}

impl CommitInterval {
    fn label(self) -> String {
        self.0
            .map_or_else(|| "default".to_owned(), |ms| ms.to_string())
    }
}

/// Arguments of `cargo run --release -p riffle-bench -- trickle`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Partitions of the input topic, and so tasks, all on one stream thread.
    #[arg(long, default_value_t = 5_000,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    tasks: u32,
    /// Records per second, each appended alone to a random partition; one run per rate.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    rate: Vec<f64>,
    /// Seconds of appending per run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    seconds: u64,
    /// Seconds the thread runs idle before the trickle starts.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=600))]
    settle_seconds: u64,
    /// Fetch strategies, measured one after the other for each rate: `ready` fetches the
    /// partitions the log names as appended to; `scan-all` every task's input whenever the
    /// log's data version moved.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "ready,scan-all"
    )]
    fetch_strategy: Vec<Fetch>,
    /// When the idle thread wakes between records.
    #[arg(long, value_enum, default_value = "deadlines")]
    wakeup: Wakeup,
    /// The stream thread's poll_ms (only matters with `--wakeup every-poll`).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    poll_ms: u64,
    /// commit.interval.ms values, one run each: milliseconds or `default`.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    commit_interval_ms: Vec<CommitInterval>,
    /// Keep the embedded log in files in a temporary directory instead of in memory (the log
    /// keeps at most `LogOptions::max_open_files` segment files open, 512 by default).
    #[arg(long)]
    on_disk: bool,
    /// Before the trickle, one record to every partition, processed and committed, so every
    /// partition has a committed offset (an application that has run for a while).
    #[arg(long)]
    primed: bool,
    /// Seed of the random partition choice (every run gets the same partitions).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the rows to this file as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// One run, as written to the JSON file.
#[derive(Clone, Debug, Serialize)]
struct Row {
    tasks: u32,
    rate: f64,
    fetch_strategy: &'static str,
    wakeup: &'static str,
    /// `None`: StreamsConfig's default.
    commit_interval_ms: Option<u64>,
    on_disk: bool,
    primed: bool,
    poll_ms: u64,
    seconds: f64,
    appended: u64,
    records: u64,
    /// CPU time of the stream thread as a percentage of one core.
    cpu_percent: f64,
    cpu_ms: f64,
    cpu_us_per_record: f64,
    loops: u64,
    loops_per_sec: f64,
    commits: u64,
    commits_per_record: f64,
    snapshot_incremental_updates: u64,
    /// Append → processed, nearest-rank percentiles, in milliseconds.
    latency_p50_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    latency_max_ms: Option<f64>,
    cpu_source: &'static str,
    startup_ms: u64,
}

pub(super) fn run(args: Args) -> anyhow::Result<()> {
    let strategies = distinct(&args.fetch_strategy, "--fetch-strategy")?;
    let intervals = distinct(&args.commit_interval_ms, "--commit-interval-ms")?;
    anyhow::ensure!(!args.rate.is_empty(), "--rate needs at least one value");
    for &rate in &args.rate {
        anyhow::ensure!(
            rate.is_finite() && rate > 0.0 && rate <= 100_000.0,
            "--rate {rate}: expected records per second in (0, 100000]"
        );
    }
    if let Some(path) = &args.json {
        super::check_writable(path)?;
    }
    let duration = Duration::from_secs(args.seconds);
    let settle = Duration::from_secs(args.settle_seconds);
    let load_before = load_average();
    let mut combos: Vec<(f64, CommitInterval, Fetch)> = Vec::new();
    for &rate in &args.rate {
        for &interval in &intervals {
            combos.extend(strategies.iter().map(|&s| (rate, interval, s)));
        }
    }
    let bar = progress_bar(combos.len() as u64 * 100);
    let mut rows = Vec::new();
    for (i, &(rate, interval, fetch)) in combos.iter().enumerate() {
        let base = i as u64 * 100;
        let label = format!(
            "{rate} records/s, {}, commit interval {}",
            fetch.label(),
            interval.label()
        );
        bar.set_message(format!("{label}: starting {} tasks", args.tasks));
        let settings = IdleSettings {
            tasks: args.tasks,
            poll_ms: args.poll_ms,
            strategy: SnapshotStrategy::Incremental,
            idle_wakeup: args.wakeup.into(),
            fetch_strategy: fetch.into(),
            commit_interval_ms: interval.0,
            in_memory: !args.on_disk,
            checkpoints: false,
            startup_timeout: Duration::from_secs(600),
        };
        let mut run = IdleRun::start(&settings).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        if args.primed {
            bar.set_message(format!("{label}: priming"));
            run.prime().map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        }
        bar.set_message(format!("{label}: settling"));
        std::thread::sleep(settle);
        bar.set_message(format!("{label}: trickling"));
        // The same seed for every run: every strategy sees the same partitions.
        let mut rng = SeededRng::new(args.seed);
        let report = run
            .trickle(rate, duration, &mut rng, &mut |f| {
                bar.set_position(base + (f * 99.0) as u64)
            })
            .map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        let startup = run.startup();
        run.close()
            .map_err(|e| anyhow::anyhow!("{label}: closing: {e}"))?;
        bar.set_position(base + 100);
        rows.push(row(&args, (rate, interval, fetch), &report, startup));
    }
    bar.finish_and_clear();
    print_table(&rows);
    println!();
    print_targets(&rows);
    println!(
        "{} tasks on one stream thread{}, {} s of appends per run after {} s idle, wakeup {}, \
         log {}; CPU time from /proc/self/task/<tid>/{}; latency append → processed, watched \
         from the appending thread; load average before: {load_before}; after: {}",
        args.tasks,
        if args.primed {
            " (primed: every partition committed once)"
        } else {
            ""
        },
        args.seconds,
        args.settle_seconds,
        args.wakeup.label(),
        if args.on_disk { "on disk" } else { "in memory" },
        rows.first().map_or("schedstat", |r| r.cpu_source),
        load_average()
    );
    if let Some(path) = &args.json {
        write_json_rows(path, &rows)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn row(
    args: &Args,
    (rate, interval, fetch): (f64, CommitInterval, Fetch),
    r: &TrickleReport,
    startup: Duration,
) -> Row {
    let t = &r.thread;
    let per_record = |x: f64| x / (t.records.max(1) as f64);
    Row {
        tasks: args.tasks,
        rate,
        fetch_strategy: fetch.label(),
        wakeup: args.wakeup.label(),
        commit_interval_ms: interval.0,
        on_disk: args.on_disk,
        primed: args.primed,
        poll_ms: args.poll_ms,
        seconds: t.wall.as_secs_f64(),
        appended: r.appended,
        records: t.records,
        cpu_percent: t.cpu_percent(),
        cpu_ms: t.cpu.as_secs_f64() * 1_000.0,
        cpu_us_per_record: per_record(t.cpu.as_secs_f64() * 1e6),
        loops: t.loops,
        loops_per_sec: t.loops_per_sec(),
        commits: t.commits,
        commits_per_record: per_record(t.commits as f64),
        snapshot_incremental_updates: t.snapshot_incremental_updates,
        latency_p50_ms: ms(r.latencies.percentile(50.0)),
        latency_p99_ms: ms(r.latencies.percentile(99.0)),
        latency_max_ms: ms(r.latencies.max()),
        cpu_source: t.cpu_source,
        startup_ms: startup.as_millis() as u64,
    }
}

/// The ready row measured with the same rate and commit interval as `row`.
fn ready_of<'a>(rows: &'a [Row], row: &Row) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.fetch_strategy == "ready"
            && r.rate == row.rate
            && r.commit_interval_ms == row.commit_interval_ms
    })
}

fn print_table(rows: &[Row]) {
    println!(
        "{:>8}  {:<8}  {:>9}  {:>10}  {:>8}  {:>9}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>8}",
        "rec/s",
        "fetch",
        "commit ms",
        "CPU % core",
        "CPU ms",
        "µs/record",
        "records",
        "loops/s",
        "commits",
        "commit/r",
        "scan/ready",
        "p50 ms",
        "p99 ms"
    );
    for row in rows {
        let vs = match ready_of(rows, row) {
            Some(ready) if row.fetch_strategy != "ready" => {
                ratio(row.cpu_percent, ready.cpu_percent)
            }
            _ => String::new(),
        };
        println!(
            "{:>8}  {:<8}  {:>9}  {:>10.4}  {:>8.1}  {:>9.1}  {:>8}  {:>8.1}  {:>8}  {:>8.2}  {:>9}  {:>8}  {:>8}",
            row.rate,
            row.fetch_strategy,
            row.commit_interval_ms
                .map_or_else(|| "default".to_owned(), |ms| ms.to_string()),
            row.cpu_percent,
            row.cpu_ms,
            row.cpu_us_per_record,
            thousands(row.records as f64),
            row.loops_per_sec,
            thousands(row.commits as f64),
            row.commits_per_record,
            vs,
            ms_cell(row.latency_p50_ms),
            ms_cell(row.latency_p99_ms)
        );
    }
}

/// The targets, for the rows at 100 records/s with the default commit interval.
fn print_targets(rows: &[Row]) {
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let headline = rows.iter().find(|r| {
        r.rate == TARGET_RATE && r.fetch_strategy == "ready" && r.commit_interval_ms.is_none()
    });
    let Some(ready) = headline else { return };
    println!(
        "targets at {TARGET_RATE} records/s, {} tasks: ready {:.4} % of a core ≤ {TARGET_CPU_PERCENT} %: {}",
        ready.tasks,
        ready.cpu_percent,
        verdict(ready.cpu_percent <= TARGET_CPU_PERCENT)
    );
    let scan = rows.iter().find(|r| {
        r.fetch_strategy == "scan-all" && ready_of(rows, r).is_some_and(|x| std::ptr::eq(x, ready))
    });
    if let Some(scan) = scan {
        let ok = scan.cpu_percent >= TARGET_RATIO * ready.cpu_percent && scan.cpu_percent > 0.0;
        println!(
            "  scan-all {:.4} % / ready = {} ≥ {TARGET_RATIO}×: {}",
            scan.cpu_percent,
            ratio(scan.cpu_percent, ready.cpu_percent),
            verdict(ok)
        );
    }
}
