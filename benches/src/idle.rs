//! An idle stream thread: one real stream thread over an empty input topic of the embedded log,
//! running a stateful topology, and the CPU time it uses while nothing arrives.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, Produced, Serdes, SnapshotStrategy, StreamsApp, StreamsBuilder,
    StreamsConfig, ThreadMetrics, Topology,
};
use riffle_state_dir::{
    ChangelogPartition, Checkpoint, Durability, StateDirectory, StateDirectoryConfig, TaskId,
};
use riffle_task_manager::BoxError;

use crate::cpu::thread_cpu_time;

const INPUT: &str = "idle-bench-input";
const OUTPUT: &str = "idle-bench-counts";
const APPLICATION_ID: &str = "idle-bench";

/// One checkpoint per task (offset 0 of its changelog partition), written before the application
/// opens the directory; the directory lock is released again on return.
fn write_checkpoints(
    state_dir: &Path,
    application_id: &str,
    topology: &Topology,
    tasks: u32,
) -> Result<(), BoxError> {
    let config = StateDirectoryConfig {
        durability: Durability::Buffered,
        ..StateDirectoryConfig::default()
    };
    let dir = StateDirectory::open_with(state_dir, application_id, config)?;
    let store = topology
        .store_names()
        .into_iter()
        .next()
        .ok_or("the idle topology has no store")?;
    let changelog = format!("{application_id}-{store}-changelog");
    for p in 0..tasks {
        let checkpoint: Checkpoint = [(ChangelogPartition::new(changelog.as_str(), p), 0)]
            .into_iter()
            .collect();
        dir.write_checkpoint(TaskId::new(0, p), &checkpoint)?;
    }
    Ok(())
}

/// `stream(input).groupByKey().count().toStream().to(output)`: the application profiled in KAFKA-21171.
/// Its count store is logged, so every task has a changelog partition.
pub fn idle_topology(input: &str, output: &str) -> riffle::Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream(input, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to(output, Produced::with(Serdes::string(), Serdes::i64()));
    builder.build()
}

/// How to set up one idle run.
#[derive(Clone, Debug)]
pub struct IdleSettings {
    /// Input partitions, and so tasks (all on the one stream thread).
    pub tasks: u32,
    /// The stream thread's `poll_ms`.
    pub poll_ms: u64,
    /// The offset-sum snapshot's strategy.
    pub strategy: SnapshotStrategy,
    /// Keep the log in memory instead of files in a temporary directory.
    pub in_memory: bool,
    /// Write a checkpoint for every task before starting, as a process restarting with local
    /// state finds them: the state directory's local offset map then holds every task.
    pub checkpoints: bool,
    /// Give up if the thread has not taken its tasks within this long.
    pub startup_timeout: Duration,
}

/// What one idle measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct IdleReport {
    /// Wall time measured.
    pub wall: Duration,
    /// CPU time the stream thread used in it.
    pub cpu: Duration,
    /// Where the CPU time was read (`schedstat` or `stat`).
    pub cpu_source: &'static str,
    /// Loop iterations in it.
    pub loops: u64,
    /// Snapshot refreshes that rebuilt from scratch in it.
    pub snapshot_full_rebuilds: u64,
    /// Snapshot refreshes that re-evaluated only changed tasks in it.
    pub snapshot_incremental_updates: u64,
    /// Snapshot refreshes that returned at once in it.
    pub snapshot_unchanged: u64,
    /// Records processed in it (0 for an idle thread).
    pub records: u64,
}

impl IdleReport {
    /// CPU time as a percentage of one core.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }

    /// Loop iterations per second.
    pub fn loops_per_sec(&self) -> f64 {
        self.loops as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// The loop and snapshot counters of a thread.
#[derive(Clone, Copy, Default)]
struct Counters {
    loops: u64,
    full: u64,
    incremental: u64,
    unchanged: u64,
    records: u64,
}

/// A running application with one stream thread that owns every task, and nothing to process.
pub struct IdleRun {
    app: Option<StreamsApp>,
    metrics: Arc<ThreadMetrics>,
    tid: u64,
    startup: Duration,
    // Last: files go after the application has closed.
    _root: tempfile::TempDir,
}

impl std::fmt::Debug for IdleRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleRun")
            .field("tid", &self.tid)
            .finish_non_exhaustive()
    }
}

impl IdleRun {
    /// Creates the topics, starts the application and waits until its stream thread has taken
    /// all its tasks and gone idle.
    pub fn start(settings: &IdleSettings) -> Result<Self, BoxError> {
        if settings.tasks == 0 {
            return Err("an idle run needs at least one task (input partition)".into());
        }
        let begun = Instant::now();
        let root = tempfile::Builder::new()
            .prefix("riffle-idle-bench-")
            .tempdir()?;
        let log = if settings.in_memory {
            Log::in_memory()
        } else {
            Log::open(root.path().join("log"), LogOptions::default())?
        };
        log.create_topic(INPUT, settings.tasks)?;
        let topology = idle_topology(INPUT, OUTPUT)?;
        let state_dir = root.path().join("state");
        if settings.checkpoints {
            write_checkpoints(&state_dir, APPLICATION_ID, &topology, settings.tasks)?;
        }
        let mut config = StreamsConfig::new(APPLICATION_ID);
        config.num_stream_threads = 1;
        config.poll = Duration::from_millis(settings.poll_ms);
        config.state_dir = state_dir;
        config.snapshot_strategy = settings.strategy;
        let app = StreamsApp::new(topology, config, EmbeddedBackend::new(log).shared())?;
        let stateful = app
            .group_info()
            .subtopologies
            .iter()
            .all(|s| !s.changelog_topics.is_empty());
        if !stateful {
            return Err("the idle topology has a sub-topology without a changelog".into());
        }
        let metrics = app
            .thread_metrics()
            .first()
            .cloned()
            .ok_or("the application has no stream thread")?;
        let mut run = IdleRun {
            app: Some(app),
            metrics,
            tid: 0,
            startup: Duration::ZERO,
            _root: root,
        };
        let app = run.app.as_mut().ok_or("application already closed")?;
        app.start()?;
        // Idle means: assigned (the first heartbeat), every task created and restored, one fetch
        // round that found nothing, and waiting for data.
        while !app.is_idle() {
            if app.is_shutting_down() {
                return Err("the application stopped while starting".into());
            }
            if begun.elapsed() > settings.startup_timeout {
                return Err(format!(
                    "the stream thread did not go idle within {:?}",
                    settings.startup_timeout
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        run.tid = run.metrics.os_thread_id();
        if run.tid == 0 {
            return Err("the stream thread's OS thread id is unknown (no /proc?)".into());
        }
        run.startup = begun.elapsed();
        Ok(run)
    }

    /// How long [`start`](Self::start) took (topics, tasks, restoration).
    pub fn startup(&self) -> Duration {
        self.startup
    }

    fn counters(&self) -> Counters {
        let m = &self.metrics;
        Counters {
            loops: m.loops(),
            full: m.snapshot_full_rebuilds(),
            incremental: m.snapshot_incremental_updates(),
            unchanged: m.snapshot_unchanged(),
            records: m.records(),
        }
    }

    /// Measures the stream thread for `duration`, calling `progress` with the fraction elapsed
    /// about ten times a second.
    pub fn measure(
        &self,
        duration: Duration,
        progress: &mut dyn FnMut(f64),
    ) -> Result<IdleReport, BoxError> {
        let alive = || self.app.as_ref().is_some_and(|a| !a.is_shutting_down());
        measure_thread(self.tid, duration, progress, &alive, &|| self.counters())
    }

    /// Stops the application, returning the first error a thread met.
    pub fn close(mut self) -> Result<(), BoxError> {
        if let Some(app) = self.app.take() {
            app.close()?;
        }
        Ok(())
    }
}

/// CPU time and counters of thread `tid` over `duration`.
fn measure_thread(
    tid: u64,
    duration: Duration,
    progress: &mut dyn FnMut(f64),
    alive: &dyn Fn() -> bool,
    counters: &dyn Fn() -> Counters,
) -> Result<IdleReport, BoxError> {
    let (cpu_before, cpu_source) = thread_cpu_time(tid)?;
    let (before, start) = (counters(), Instant::now());
    while start.elapsed() < duration {
        let left = duration.saturating_sub(start.elapsed());
        std::thread::sleep(left.min(Duration::from_millis(100)));
        progress((start.elapsed().as_secs_f64() / duration.as_secs_f64()).min(1.0));
        if !alive() {
            return Err("the measured thread stopped during the measurement".into());
        }
    }
    let (cpu_after, _) = thread_cpu_time(tid)?;
    let (after, wall) = (counters(), start.elapsed());
    Ok(IdleReport {
        wall,
        cpu: cpu_after.saturating_sub(cpu_before),
        cpu_source,
        loops: after.loops - before.loops,
        snapshot_full_rebuilds: after.full - before.full,
        snapshot_incremental_updates: after.incremental - before.incremental,
        snapshot_unchanged: after.unchanged - before.unchanged,
        records: after.records - before.records,
    })
}

/// The floor under any idle stream thread: a named thread that does nothing but the idle
/// loop's wait (`Log::wait_for_append` with a `poll` timeout on an embedded log nobody writes
/// to), measured like the stream thread. What a stream thread uses above it is its own work.
pub fn bare_wait(
    poll: Duration,
    duration: Duration,
    progress: &mut dyn FnMut(f64),
) -> Result<IdleReport, BoxError> {
    let log = Log::in_memory();
    let stop = Arc::new(AtomicBool::new(false));
    let loops = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let thread = {
        let (stop, loops) = (Arc::clone(&stop), Arc::clone(&loops));
        std::thread::Builder::new()
            .name("riffle-bench-bare-wait".to_owned())
            .spawn(move || {
                let _ = tid_tx.send(current_tid());
                let version = log.append_version();
                while !stop.load(Ordering::Acquire) {
                    loops.fetch_add(1, Ordering::Relaxed);
                    log.wait_for_append(version, poll);
                }
            })?
    };
    let result = match tid_rx.recv() {
        Ok(Some(tid)) => {
            std::thread::sleep(poll * 10); // into its steady state
            let counters = || Counters {
                loops: loops.load(Ordering::Relaxed),
                ..Counters::default()
            };
            measure_thread(tid, duration, progress, &|| true, &counters)
        }
        _ => Err("the bare-wait thread's OS thread id is unknown (no /proc?)".into()),
    };
    stop.store(true, Ordering::Release);
    thread.join().map_err(|_| "the bare-wait thread panicked")?;
    result
}

/// The Linux tid of the calling thread, from `/proc/thread-self`.
fn current_tid() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}
