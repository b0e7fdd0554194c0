//! `riffle bench idle`: the CPU share of one idle stream thread with N tasks, per strategy.

use std::path::PathBuf;
use std::time::Duration;

use riffle_benches::{IdleReport, IdleRun, IdleSettings};
use serde::Serialize;

use super::{Strategy, distinct, load_average, progress_bar, thousands, write_json_rows};

/// Arguments of `riffle bench idle`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Task counts: partitions of the empty input topic, all on one stream thread.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    tasks: Vec<u32>,
    /// The stream thread's poll_ms: how long an idle loop iteration waits for data.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    poll_ms: u64,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    seconds: u64,
    /// Seconds the thread runs idle before the measurement starts.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=600))]
    settle_seconds: u64,
    /// Strategies, measured one after the other for each task count.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "incremental,full-rebuild"
    )]
    strategy: Vec<Strategy>,
    /// Write a checkpoint for every task before starting (a process restarting with local
    /// state), so the state directory's local offset map holds every task, as in KAFKA-21171's
    /// application with persistent stores.
    #[arg(long)]
    checkpoints: bool,
    /// Keep the embedded log in files in a temporary directory instead of in memory (about six
    /// open files per task: mind `ulimit -n`). Idle, the log is only asked for its data version.
    #[arg(long)]
    on_disk: bool,
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
    checkpoints: bool,
    poll_ms: u64,
    seconds: f64,
    /// CPU time of the stream thread as a percentage of one core.
    cpu_percent: f64,
    cpu_ms: f64,
    loops: u64,
    loops_per_sec: f64,
    snapshot_full_rebuilds: u64,
    snapshot_incremental_updates: u64,
    snapshot_unchanged: u64,
    records: u64,
    cpu_source: &'static str,
    startup_ms: u64,
}

pub(super) fn run(args: Args) -> anyhow::Result<()> {
    let tasks = distinct(&args.tasks, "--tasks")?;
    let strategies = distinct(&args.strategy, "--strategy")?;
    if let Some(path) = &args.json {
        super::check_writable(path)?;
    }
    let duration = Duration::from_secs(args.seconds);
    let settle = Duration::from_secs(args.settle_seconds);
    let load_before = load_average();
    let runs = (tasks.len() * strategies.len()) as u64 + 1;
    let bar = progress_bar(runs * 100);
    bar.set_message("bare wait (the floor)");
    let poll = Duration::from_millis(args.poll_ms);
    let floor =
        riffle_benches::bare_wait(poll, duration, &mut |f| bar.set_position((f * 99.0) as u64))
            .map_err(|e| anyhow::anyhow!("measuring the bare wait: {e}"))?;
    let mut rows = vec![row(
        0,
        "bare-wait",
        false,
        args.poll_ms,
        &floor,
        Duration::ZERO,
    )];
    for (i, (&n, &strategy)) in tasks
        .iter()
        .flat_map(|n| strategies.iter().map(move |s| (n, s)))
        .enumerate()
    {
        let base = (i as u64 + 1) * 100;
        let label = strategy.label();
        bar.set_message(format!("{n} tasks {label}: starting"));
        let settings = IdleSettings {
            tasks: n,
            poll_ms: args.poll_ms,
            strategy: strategy.into(),
            in_memory: !args.on_disk,
            checkpoints: args.checkpoints,
            startup_timeout: Duration::from_secs(600),
        };
        let run =
            IdleRun::start(&settings).map_err(|e| anyhow::anyhow!("{n} tasks {label}: {e}"))?;
        bar.set_message(format!("{n} tasks {label}: settling"));
        std::thread::sleep(settle);
        bar.set_message(format!("{n} tasks {label}: measuring"));
        let report = run
            .measure(duration, &mut |f| {
                bar.set_position(base + (f * 99.0) as u64)
            })
            .map_err(|e| anyhow::anyhow!("{n} tasks {label}: {e}"))?;
        let startup = run.startup();
        run.close()
            .map_err(|e| anyhow::anyhow!("{n} tasks {label}: closing: {e}"))?;
        bar.set_position(base + 100);
        rows.push(row(
            n,
            strategy.label(),
            args.checkpoints,
            args.poll_ms,
            &report,
            startup,
        ));
    }
    bar.finish_and_clear();
    print_table(&rows);
    println!();
    println!(
        "poll_ms {}, {} s measured per run after {} s idle; CPU time from /proc/self/task/<tid>/{}; \
         load average before: {load_before}; after: {}",
        args.poll_ms,
        args.seconds,
        args.settle_seconds,
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
    tasks: u32,
    strategy: &'static str,
    checkpoints: bool,
    poll_ms: u64,
    r: &IdleReport,
    startup: Duration,
) -> Row {
    Row {
        tasks,
        strategy,
        checkpoints,
        poll_ms,
        seconds: r.wall.as_secs_f64(),
        cpu_percent: r.cpu_percent(),
        cpu_ms: r.cpu.as_secs_f64() * 1_000.0,
        loops: r.loops,
        loops_per_sec: r.loops_per_sec(),
        snapshot_full_rebuilds: r.snapshot_full_rebuilds,
        snapshot_incremental_updates: r.snapshot_incremental_updates,
        snapshot_unchanged: r.snapshot_unchanged,
        records: r.records,
        cpu_source: r.cpu_source,
        startup_ms: startup.as_millis() as u64,
    }
}

/// The runs, each with its CPU share above the floor (the bare-wait row), and for full rebuild
/// the ratios to the incremental run with as many tasks: gross, and above the floor.
fn print_table(rows: &[Row]) {
    let floor = rows
        .iter()
        .find(|r| r.strategy == "bare-wait")
        .map_or(0.0, |r| r.cpu_percent);
    println!(
        "{:>6}  {:<12}  {:>10}  {:>11}  {:>8}  {:>7}  {:>7}  {:>8}  {:>9}  {:>9}  {:>10}",
        "tasks",
        "strategy",
        "CPU % core",
        "above floor",
        "CPU ms",
        "loops",
        "loops/s",
        "rebuilds",
        "unchanged",
        "full/incr",
        "above floor"
    );
    for row in rows {
        let incremental = rows
            .iter()
            .find(|r| r.tasks == row.tasks && r.strategy == "incremental");
        let (gross, net) = match incremental {
            Some(i) if row.strategy == "full-rebuild" => {
                let ratio = |a: f64, b: f64| {
                    if b > 0.0 {
                        format!("{:.1}×", a / b)
                    } else {
                        "-".to_owned()
                    }
                };
                (
                    ratio(row.cpu_percent, i.cpu_percent),
                    ratio(row.cpu_percent - floor, i.cpu_percent - floor),
                )
            }
            _ => (String::new(), String::new()),
        };
        let tasks = if row.strategy == "bare-wait" {
            "-".to_owned()
        } else {
            row.tasks.to_string()
        };
        println!(
            "{:>6}  {:<12}  {:>10.3}  {:>11.3}  {:>8.1}  {:>7}  {:>7.1}  {:>8}  {:>9}  {:>9}  {:>10}",
            tasks,
            row.strategy,
            row.cpu_percent,
            row.cpu_percent - floor,
            row.cpu_ms,
            thousands(row.loops as f64),
            row.loops_per_sec,
            thousands(row.snapshot_full_rebuilds as f64),
            thousands(row.snapshot_unchanged as f64),
            gross,
            net
        );
    }
}
