//! `cargo run --release -p riffle-bench -- idle`: the CPU share of one idle stream thread with N
//! tasks, riffle's loop beside Kafka Streams' (a full snapshot rebuild on every poll, KAFKA-21171),
//! and the latency of a record arriving at the idle thread.

use std::path::PathBuf;
use std::time::Duration;

use riffle::config::FetchStrategy;
use riffle_bench::{IdleReport, IdleRun, IdleSettings, Latencies, SeededRng};
use serde::Serialize;

use super::{
    Strategy, Wakeup, distinct, load_average, ms, ms_cell, progress_bar, ratio, thousands,
    write_json_rows,
};

/// The targets at the largest task count: the idle thread's share of a core, and how
/// much less than the full-rebuild row it must use.
const TARGET_CPU_PERCENT: f64 = 0.02;
const TARGET_RATIO: f64 = 20.0;

/// Arguments of `cargo run --release -p riffle-bench -- idle`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Task counts: partitions of the empty input topic, all on one stream thread.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    tasks: Vec<u32>,
    /// The stream thread's poll_ms: the longest a poll blocks while data may come (and, with
    /// `--wakeup every-poll`, how often an idle thread wakes).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    poll_ms: u64,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    seconds: u64,
    /// Seconds the thread runs idle before the measurement starts.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=600))]
    settle_seconds: u64,
    /// Rows, measured one after the other for each task count. `incremental` is riffle's loop:
    /// incremental snapshot, asleep until its next deadline. `full-rebuild` is Kafka Streams'
    /// loop: the snapshot rebuilt on every poll, waking every poll_ms.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "incremental,full-rebuild"
    )]
    strategy: Vec<Strategy>,
    /// Wake every row's idle thread this way instead (to show the other combinations).
    #[arg(long, value_enum)]
    wakeup: Option<Wakeup>,
    /// Write a checkpoint for every task before starting (a process restarting with local
    /// state), so the state directory's local offset map holds every task, as in KAFKA-21171's
    /// application with persistent stores.
    #[arg(long)]
    checkpoints: bool,
    /// Keep the embedded log in files in a temporary directory instead of in memory (the log
    /// keeps at most `LogOptions::max_open_files` segment files open, 512 by default). Idle,
    /// the log is only asked for its data version.
    #[arg(long)]
    on_disk: bool,
    /// After the CPU measurement of each run, append this many records one at a time to random
    /// partitions of the idle thread's input and time each append → processed (0: skip).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    latency_samples: u64,
    /// Milliseconds between two latency samples (the thread goes back to sleep in between).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(200..=60_000))]
    latency_spacing_ms: u64,
    /// Seed of the random partition choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the rows to this file as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// One run, as written to the JSON file. The floor (a thread doing only the idle wait) is the
/// row with strategy `bare-wait` and 0 tasks.
#[derive(Clone, Debug, Serialize)]
struct Row {
    tasks: u32,
    strategy: &'static str,
    /// `idle_wakeup`: `deadlines` or `every-poll` (the bare wait wakes every poll_ms).
    wakeup: &'static str,
    checkpoints: bool,
    on_disk: bool,
    poll_ms: u64,
    seconds: f64,
    /// CPU time of the stream thread as a percentage of one core.
    cpu_percent: f64,
    cpu_ms: f64,
    loops: u64,
    loops_per_sec: f64,
    commits: u64,
    snapshot_full_rebuilds: u64,
    snapshot_incremental_updates: u64,
    snapshot_unchanged: u64,
    records: u64,
    cpu_source: &'static str,
    startup_ms: u64,
    /// Records appended to the idle thread after the CPU measurement, one at a time.
    latency_samples: usize,
    /// Append → processed, nearest-rank percentiles, in milliseconds.
    latency_p50_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    latency_max_ms: Option<f64>,
    /// Every sample, in the order taken, in milliseconds.
    latency_all_ms: Vec<f64>,
}

pub(super) fn run(args: Args) -> anyhow::Result<()> {
    let tasks = distinct(&args.tasks, "--tasks")?;
    let strategies = distinct(&args.strategy, "--strategy")?;
    if let Some(path) = &args.json {
        super::check_writable(path)?;
    }
    let duration = Duration::from_secs(args.seconds);
    let settle = Duration::from_secs(args.settle_seconds);
    let spacing = Duration::from_millis(args.latency_spacing_ms);
    let samples = args.latency_samples as usize;
    let mut rng = SeededRng::new(args.seed);
    let load_before = load_average();
    let runs = (tasks.len() * strategies.len()) as u64 + 1;
    let bar = progress_bar(runs * 100);
    bar.set_message("bare wait (the floor)");
    let poll = Duration::from_millis(args.poll_ms);
    let (floor, floor_latencies) =
        riffle_bench::bare_wait(poll, duration, (samples, spacing), &mut |f| {
            bar.set_position((f * 99.0) as u64)
        })
        .map_err(|e| anyhow::anyhow!("measuring the bare wait: {e}"))?;
    let mut rows = vec![row(
        (0, "bare-wait", "every-poll"),
        &args,
        &floor,
        Duration::ZERO,
        &floor_latencies,
    )];
    // Out of 100 steps per run: the CPU measurement, then the latency samples.
    let cpu_steps = if samples > 0 { 80.0 } else { 99.0 };
    for (i, (&n, &strategy)) in tasks
        .iter()
        .flat_map(|n| strategies.iter().map(move |s| (n, s)))
        .enumerate()
    {
        let base = (i as u64 + 1) * 100;
        let wakeup = args.wakeup.unwrap_or(match strategy {
            Strategy::Incremental => Wakeup::Deadlines,
            Strategy::FullRebuild => Wakeup::EveryPoll,
        });
        let label = format!("{n} tasks {} / {}", strategy.label(), wakeup.label());
        bar.set_message(format!("{label}: starting"));
        let settings = IdleSettings {
            tasks: n,
            poll_ms: args.poll_ms,
            strategy: strategy.into(),
            idle_wakeup: wakeup.into(),
            fetch_strategy: FetchStrategy::Ready,
            commit_interval_ms: None,
            in_memory: !args.on_disk,
            checkpoints: args.checkpoints,
            startup_timeout: Duration::from_secs(600),
        };
        let mut run = IdleRun::start(&settings).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        bar.set_message(format!("{label}: settling"));
        std::thread::sleep(settle);
        bar.set_message(format!("{label}: measuring CPU"));
        let report = run
            .measure(duration, &mut |f| {
                bar.set_position(base + (f * cpu_steps) as u64)
            })
            .map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        bar.set_message(format!("{label}: measuring latency"));
        let latencies = run
            .first_record_latency(samples, spacing, &mut rng, &mut |f| {
                bar.set_position(base + (cpu_steps + f * (99.0 - cpu_steps)) as u64)
            })
            .map_err(|e| anyhow::anyhow!("{label}: latency: {e}"))?;
        let startup = run.startup();
        run.close()
            .map_err(|e| anyhow::anyhow!("{label}: closing: {e}"))?;
        bar.set_position(base + 100);
        rows.push(row(
            (n, strategy.label(), wakeup.label()),
            &args,
            &report,
            startup,
            &latencies,
        ));
    }
    bar.finish_and_clear();
    print_table(&rows);
    println!();
    print_targets(&rows);
    println!(
        "poll_ms {}, {} s measured per run after {} s idle; CPU time from /proc/self/task/<tid>/{}; \
         latency: {} records per run, {} ms apart, to random partitions (seed {}), after the CPU \
         measurement; log {}; load average before: {load_before}; after: {}",
        args.poll_ms,
        args.seconds,
        args.settle_seconds,
        rows.first().map_or("schedstat", |r| r.cpu_source),
        samples,
        args.latency_spacing_ms,
        args.seed,
        if args.on_disk { "on disk" } else { "in memory" },
        load_average()
    );
    if let Some(path) = &args.json {
        write_json_rows(path, &rows)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn row(
    (tasks, strategy, wakeup): (u32, &'static str, &'static str),
    args: &Args,
    r: &IdleReport,
    startup: Duration,
    latencies: &Latencies,
) -> Row {
    Row {
        tasks,
        strategy,
        wakeup,
        checkpoints: args.checkpoints && tasks > 0,
        on_disk: args.on_disk && tasks > 0,
        poll_ms: args.poll_ms,
        seconds: r.wall.as_secs_f64(),
        cpu_percent: r.cpu_percent(),
        cpu_ms: r.cpu.as_secs_f64() * 1_000.0,
        loops: r.loops,
        loops_per_sec: r.loops_per_sec(),
        commits: r.commits,
        snapshot_full_rebuilds: r.snapshot_full_rebuilds,
        snapshot_incremental_updates: r.snapshot_incremental_updates,
        snapshot_unchanged: r.snapshot_unchanged,
        records: r.records,
        cpu_source: r.cpu_source,
        startup_ms: startup.as_millis() as u64,
        latency_samples: latencies.len(),
        latency_p50_ms: ms(latencies.percentile(50.0)),
        latency_p99_ms: ms(latencies.percentile(99.0)),
        latency_max_ms: ms(latencies.max()),
        latency_all_ms: latencies
            .samples()
            .iter()
            .map(|d| d.as_secs_f64() * 1_000.0)
            .collect(),
    }
}

/// The row of `strategy` with `tasks` tasks.
fn find<'a>(rows: &'a [Row], tasks: u32, strategy: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.tasks == tasks && r.strategy == strategy)
}

/// The runs, each with its CPU share above the floor (the bare-wait row), and for full rebuild
/// the ratios to the incremental run with as many tasks: gross, and above the floor.
fn print_table(rows: &[Row]) {
    let floor = find(rows, 0, "bare-wait").map_or(0.0, |r| r.cpu_percent);
    println!(
        "{:>6}  {:<12}  {:<10}  {:>10}  {:>11}  {:>8}  {:>7}  {:>7}  {:>8}  {:>9}  {:>9}  {:>10}  {:>8}  {:>8}",
        "tasks",
        "strategy",
        "wakeup",
        "CPU % core",
        "above floor",
        "CPU ms",
        "loops",
        "loops/s",
        "rebuilds",
        "unchanged",
        "full/incr",
        "above floor",
        "p50 ms",
        "p99 ms"
    );
    for row in rows {
        let (gross, net) = match find(rows, row.tasks, "incremental") {
            Some(i) if row.strategy == "full-rebuild" => (
                ratio(row.cpu_percent, i.cpu_percent),
                ratio(row.cpu_percent - floor, i.cpu_percent - floor),
            ),
            _ => (String::new(), String::new()),
        };
        let tasks = if row.strategy == "bare-wait" {
            "-".to_owned()
        } else {
            row.tasks.to_string()
        };
        println!(
            "{:>6}  {:<12}  {:<10}  {:>10.4}  {:>11.4}  {:>8.2}  {:>7}  {:>7.1}  {:>8}  {:>9}  {:>9}  {:>10}  {:>8}  {:>8}",
            tasks,
            row.strategy,
            row.wakeup,
            row.cpu_percent,
            row.cpu_percent - floor,
            row.cpu_ms,
            thousands(row.loops as f64),
            row.loops_per_sec,
            thousands(row.snapshot_full_rebuilds as f64),
            thousands(row.snapshot_unchanged as f64),
            gross,
            net,
            ms_cell(row.latency_p50_ms),
            ms_cell(row.latency_p99_ms)
        );
    }
}

/// The targets at the largest task count measured with both strategies.
fn print_targets(rows: &[Row]) {
    let floor = find(rows, 0, "bare-wait").map(|r| r.cpu_percent);
    let largest = rows
        .iter()
        .filter(|r| find(rows, r.tasks, "incremental").is_some())
        .map(|r| r.tasks)
        .max();
    let Some(n) = largest else { return };
    let Some(incremental) = find(rows, n, "incremental") else {
        return;
    };
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let cpu = incremental.cpu_percent;
    println!(
        "targets at {n} tasks ({}): incremental {cpu:.4} % of a core ≤ {TARGET_CPU_PERCENT} %: {}",
        incremental.wakeup,
        verdict(cpu <= TARGET_CPU_PERCENT)
    );
    if let Some(full) = find(rows, n, "full-rebuild") {
        let ok = full.cpu_percent >= TARGET_RATIO * cpu && full.cpu_percent > 0.0;
        println!(
            "  full-rebuild ({}) {:.4} % / incremental = {} ≥ {TARGET_RATIO}×: {}",
            full.wakeup,
            full.cpu_percent,
            ratio(full.cpu_percent, cpu),
            verdict(ok)
        );
    }
    if let Some(floor) = floor {
        println!(
            "  below the bare {} ms wait ({floor:.4} %): {}",
            incremental.poll_ms,
            verdict(cpu < floor)
        );
    }
}
