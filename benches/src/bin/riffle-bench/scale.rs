//! `cargo run --release -p riffle-bench -- scale`: the groupByKey-count sample with many tasks, on
//! the file-backed embedded log with persistent stores: start-up time, records/s, the time to
//! restore every task, and the process's threads, open files and RSS (peaks sampled every 20 ms).
//!
//! This process generates each task count's input and checks the counts against a `HashMap`
//! count; the application runs in child processes (this binary with the hidden `--one`), one
//! to count and one to restore, so the peaks are the application's alone and one run's never
//! count in another's (memory an allocator keeps after a run would).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};
use riffle_bench::proc_stats::footprint;
use riffle_cli::sample::{Store, generate, latest_counts, topology};
use riffle_log::{Log, LogOptions};
use serde::{Deserialize, Serialize};

/// Arguments of `cargo run --release -p riffle-bench -- scale`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Task counts to measure (the input's partitions: one stateful task each).
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000,20000")]
    tasks: Vec<u32>,
    /// Input records per task.
    #[arg(long, default_value_t = 100)]
    records_per_task: u64,
    /// Distinct keys per task.
    #[arg(long, default_value_t = 50)]
    keys_per_task: u64,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// `statestore_memory_max_bytes`, in MiB.
    #[arg(long, default_value_t = 256)]
    memory_mib: u64,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run one phase of the application over the input in this log directory and print what
    /// it measured as JSON (what the parent runs).
    #[arg(long, hide = true)]
    one: Option<PathBuf>,
    /// The phase `--one` runs: count, restore.
    #[arg(long, hide = true, default_value = "count")]
    phase: String,
}

/// One task count's measurements.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Row {
    tasks: u32,
    threads: usize,
    records: u64,
    memory_budget_mib: u64,
    /// From `StreamsApp::new` to the first record processed.
    startup_s: f64,
    /// From `StreamsApp::new` to every record processed.
    run_s: f64,
    records_per_sec: f64,
    /// With the state directory deleted, from `StreamsApp::new` to every task restored.
    restore_s: f64,
    records_restored: u64,
    /// Peaks over both runs.
    peak_os_threads: u64,
    peak_open_files: u64,
    peak_rss_mib: f64,
    /// The RSS peak of each run: counting, restoring.
    peak_rss_count_mib: f64,
    peak_rss_restore_mib: f64,
    /// The targets: OS threads ≤ stream threads + 8, RSS ≤ budget + 64 MiB.
    threads_within_target: bool,
    rss_within_target: bool,
}

/// Samples this process's threads, open files and RSS until stopped; keeps the peaks.
struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<[AtomicU64; 3]>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
        let handle = {
            let (stop, peaks) = (stop.clone(), peaks.clone());
            std::thread::Builder::new()
                .name("bench-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let now = footprint(None);
                        // Less this sampler itself.
                        let threads = now.threads.saturating_sub(1);
                        peaks[0].fetch_max(threads, Ordering::Relaxed);
                        peaks[1].fetch_max(now.open_files, Ordering::Relaxed);
                        peaks[2].fetch_max(now.rss_kib, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                })
                .ok()
        };
        Sampler {
            stop,
            peaks,
            handle,
        }
    }

    /// (threads, open files, RSS KiB) peaks.
    fn finish(mut self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        (
            self.peaks[0].load(Ordering::Relaxed),
            self.peaks[1].load(Ordering::Relaxed),
            self.peaks[2].load(Ordering::Relaxed),
        )
    }
}

fn config(args: &Args, state: PathBuf) -> anyhow::Result<StreamsConfig> {
    let mut config = StreamsConfig::new("scale");
    config.num_stream_threads = args.threads;
    config.state_dir = state;
    config.poll = Duration::from_millis(10);
    config.commit_interval = Some(Duration::from_millis(1_000));
    config.statestore_memory_max_bytes = args.memory_mib << 20;
    Ok(config)
}

/// Runs the app until idle; (seconds to the first record, seconds to idle).
fn run_app(app: &mut StreamsApp, created: Instant) -> anyhow::Result<(f64, f64)> {
    app.start()?;
    let mut first = None;
    while !app.is_idle() && !app.is_shutting_down() {
        if first.is_none() && app.records_processed() > 0 {
            first = Some(created.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let idle = created.elapsed().as_secs_f64();
    Ok((first.unwrap_or(idle), idle))
}

/// What one child process measured.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
struct Phase {
    first_s: f64,
    idle_s: f64,
    processed: u64,
    restored: u64,
    threads: u64,
    files: u64,
    rss_kib: u64,
}

/// One phase in this process: `count` the input, or `restore` every task after the state
/// directory is deleted.
fn one(args: &Args, log_dir: &std::path::Path) -> anyhow::Result<Phase> {
    let log = Log::open(log_dir, LogOptions::default())?;
    let state = log_dir.with_extension("state");
    if args.phase == "restore" {
        std::fs::remove_dir_all(&state).with_context(|| format!("deleting {}", state.display()))?;
    }
    let sampler = Sampler::start();
    let created = Instant::now();
    let mut app = StreamsApp::new(
        topology("words", "counts", Store::Persistent)?,
        config(args, state)?,
        EmbeddedBackend::new(log).shared(),
    )?;
    let (first_s, idle_s) = run_app(&mut app, created)?;
    let restored = app.records_restored();
    let summary = app.close()?;
    let (threads, files, rss_kib) = sampler.finish();
    Ok(Phase {
        first_s,
        idle_s,
        processed: summary.records_processed,
        restored,
        threads,
        files,
        rss_kib,
    })
}

/// Runs `phase` of `tasks` in a child process.
fn child(args: &Args, tasks: u32, log_dir: &std::path::Path, phase: &str) -> anyhow::Result<Phase> {
    eprintln!("{tasks} tasks: {phase}");
    let exe = std::env::current_exe().context("finding this binary")?;
    let output = Command::new(&exe)
        .args(["scale", "--tasks", &tasks.to_string()])
        .arg("--one")
        .arg(log_dir)
        .args(["--phase", phase])
        .args(["--threads", &args.threads.to_string()])
        .args(["--memory-mib", &args.memory_mib.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running a child process")?;
    if !output.status.success() {
        bail!(
            "{tasks} tasks, {phase}: the child failed ({})",
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .with_context(|| format!("{tasks} tasks, {phase}: reading the child's row from {line:?}"))
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if let Some(log_dir) = &args.one {
        let phase = one(&args, log_dir)?;
        println!("{}", serde_json::to_string(&phase)?);
        return Ok(());
    }
    if let Some(path) = &args.json {
        super::check_writable(path)?;
    }
    let mut rows = Vec::new();
    for &tasks in &args.tasks {
        let dir = tempfile::tempdir()?;
        let log_dir = dir.path().join("log");
        let records = args.records_per_task * u64::from(tasks);
        let keys = args.keys_per_task * u64::from(tasks);
        eprintln!("{tasks} tasks: generating {records} records over {keys} keys");
        let expected = generate(&log_dir, "words", records, keys, tasks)?;
        let count = child(&args, tasks, &log_dir, "count")?;
        if count.processed != records {
            bail!(
                "{tasks} tasks: processed {} records, expected {records}",
                count.processed
            );
        }
        let restore = child(&args, tasks, &log_dir, "restore")?;
        let log = Log::open(&log_dir, LogOptions::default())?;
        if latest_counts(&EmbeddedBackend::new(log), "counts")? != expected {
            bail!(
                "{tasks} tasks: the counts differ from an independent HashMap count of the input"
            );
        }
        let threads = count.threads.max(restore.threads);
        let rss_mib = count.rss_kib.max(restore.rss_kib) as f64 / 1024.0;
        rows.push(Row {
            tasks,
            threads: args.threads,
            records,
            memory_budget_mib: args.memory_mib,
            startup_s: count.first_s,
            run_s: count.idle_s,
            records_per_sec: records as f64 / count.idle_s,
            restore_s: restore.idle_s,
            records_restored: restore.restored,
            peak_os_threads: threads,
            peak_open_files: count.files.max(restore.files),
            peak_rss_mib: rss_mib,
            peak_rss_count_mib: count.rss_kib as f64 / 1024.0,
            peak_rss_restore_mib: restore.rss_kib as f64 / 1024.0,
            threads_within_target: threads <= args.threads as u64 + 8,
            rss_within_target: rss_mib <= (args.memory_mib + 64) as f64,
        });
    }
    println!(
        "{:>7} {:>10} {:>9} {:>8} {:>12} {:>10} {:>8} {:>7} {:>9} {:>17}  targets (threads, RSS)",
        "tasks",
        "records",
        "start s",
        "run s",
        "records/s",
        "restore s",
        "threads",
        "files",
        "RSS MiB",
        "(count, restore)"
    );
    for r in &rows {
        println!(
            "{:>7} {:>10} {:>9.2} {:>8.2} {:>12} {:>10.2} {:>8} {:>7} {:>9.0} {:>17}  {}, {}",
            r.tasks,
            r.records,
            r.startup_s,
            r.run_s,
            super::thousands(r.records_per_sec),
            r.restore_s,
            r.peak_os_threads,
            r.peak_open_files,
            r.peak_rss_mib,
            format!(
                "({:.0}, {:.0})",
                r.peak_rss_count_mib, r.peak_rss_restore_mib
            ),
            if r.threads_within_target {
                "met"
            } else {
                "MISSED"
            },
            if r.rss_within_target { "met" } else { "MISSED" },
        );
    }
    println!(
        "load average: {}; budget {} MiB, {} stream threads",
        super::load_average(),
        args.memory_mib,
        args.threads
    );
    if let Some(path) = &args.json {
        super::write_json_rows(path, &rows)?;
    }
    Ok(())
}
