//! An idle stream thread: one real stream thread over an empty input topic of the embedded log,
//! running a stateful topology, and the CPU time it uses while nothing arrives — or while
//! records trickle in one at a time ([`crate::trickle`]), and how long one record takes from
//! its append to being processed ([`crate::latency`]).
//!
//! What it must never do: measure its own work. The CPU time is the stream thread's alone
//! (`/proc/self/task/<tid>/schedstat`, read through `procfs`); appends and watching happen on the
//! calling thread.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
    Topology, config::FetchStrategy, config::IdleWakeup, config::SnapshotStrategy,
    metrics::ThreadMetrics,
};
use riffle_state_dir::{Checkpoint, Durability, StateDirectory, StateDirectoryConfig, TaskId};
use riffle_task_manager::BoxError;

use crate::latency::{Latencies, SeededRng, wait_for_count};
use crate::proc_stats::{current_tid, thread_cpu_time};

const INPUT: &str = "idle-bench-input";
const OUTPUT: &str = "idle-bench-counts";
const APPLICATION_ID: &str = "idle-bench";

/// The longest a record may take to be processed before a measurement gives up.
pub(crate) const PROCESS_TIMEOUT: Duration = Duration::from_secs(10);

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
        let checkpoint: Checkpoint = [(TopicPartition::new(changelog.as_str(), p), 0)]
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
    /// When the idle thread wakes: at its deadlines, or every `poll_ms` (Kafka Streams' loop).
    pub idle_wakeup: IdleWakeup,
    /// Which inputs a loop iteration fetches: the ready ones, or all of them whenever the log
    /// moved (Kafka Streams' loop).
    pub fetch_strategy: FetchStrategy,
    /// `commit.interval.ms`, if not the default.
    pub commit_interval_ms: Option<u64>,
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
    /// Commits in it.
    pub commits: u64,
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
pub(crate) struct Counters {
    loops: u64,
    full: u64,
    incremental: u64,
    unchanged: u64,
    pub(crate) records: u64,
    commits: u64,
}

/// A running application with one stream thread that owns every task, and nothing to process.
pub struct IdleRun {
    app: Option<StreamsApp>,
    /// The embedded log, to append input records to.
    log: Log,
    tasks: u32,
    batch: BatchBuilder,
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
        config.idle_wakeup = settings.idle_wakeup;
        config.fetch_strategy = settings.fetch_strategy;
        if let Some(ms) = settings.commit_interval_ms {
            config.set("commit.interval.ms", &ms.to_string())?;
        }
        let app = StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared())?;
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
            log,
            tasks: settings.tasks,
            batch: BatchBuilder::new(Compression::None),
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
            commits: m.commits(),
        }
    }

    /// The stream thread's OS thread id.
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// Input partitions (tasks).
    pub fn tasks(&self) -> u32 {
        self.tasks
    }

    /// Records the stream thread processed so far.
    pub(crate) fn records(&self) -> u64 {
        self.metrics.records()
    }

    /// The counters and CPU time of the stream thread now, to diff a measurement against.
    pub(crate) fn sample(&self) -> Result<(Duration, &'static str, Counters), BoxError> {
        let (cpu, source) = thread_cpu_time(self.tid)?;
        Ok((cpu, source, self.counters()))
    }

    /// Whether the application still runs.
    pub(crate) fn alive(&self) -> bool {
        self.app.as_ref().is_some_and(|a| !a.is_shutting_down())
    }

    /// Appends one record (key `key-<partition>`, value `1`) to input partition `partition`.
    pub fn append(&mut self, partition: u32) -> Result<(), BoxError> {
        let key = format!("key-{partition}");
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.batch.push(timestamp, Some(key.as_bytes()), Some(b"1"));
        self.log
            .append(&TopicPartition::new(INPUT, partition), &mut self.batch)
            .map_err(|e| format!("appending to {INPUT}-{partition}: {e}"))?;
        Ok(())
    }

    /// One record to every input partition, processed and committed, then idle again: every
    /// partition then has a committed offset and every task a store entry, as in an
    /// application that has run for a while (a commit's cost may grow with the offsets held).
    pub fn prime(&mut self) -> Result<(), BoxError> {
        let before = self.metrics.records();
        for p in 0..self.tasks {
            self.append(p)?;
        }
        let target = before + u64::from(self.tasks);
        let timeout = PROCESS_TIMEOUT + Duration::from_millis(u64::from(self.tasks));
        wait_for_count(|| self.metrics.records(), target, timeout).ok_or_else(|| {
            format!(
                "priming: {} records not processed within {timeout:?}",
                self.tasks
            )
        })?;
        let begun = Instant::now();
        while !self.app.as_ref().is_some_and(StreamsApp::is_idle) {
            if !self.alive() || begun.elapsed() > timeout {
                return Err("priming: the stream thread did not go idle again".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// How long a record takes from its append to being processed when the thread is idle:
    /// `samples` records, each to a random partition, `spacing` apart (the thread has gone
    /// back to sleep before the next one). Calls `progress` with the fraction done.
    pub fn first_record_latency(
        &mut self,
        samples: usize,
        spacing: Duration,
        rng: &mut SeededRng,
        progress: &mut dyn FnMut(f64),
    ) -> Result<Latencies, BoxError> {
        let mut latencies = Latencies::with_capacity(samples);
        for i in 0..samples {
            std::thread::sleep(spacing);
            if !self.alive() {
                return Err("the stream thread stopped during the latency measurement".into());
            }
            let partition = rng.below(self.tasks);
            let before = self.metrics.records();
            let appended = Instant::now();
            self.append(partition)?;
            let seen = wait_for_count(|| self.metrics.records(), before + 1, PROCESS_TIMEOUT)
                .ok_or_else(|| {
                    format!(
                        "the record appended to {INPUT}-{partition} was not processed within \
                         {PROCESS_TIMEOUT:?}"
                    )
                })?;
            latencies.push(seen.saturating_duration_since(appended));
            progress((i + 1) as f64 / samples as f64);
        }
        Ok(latencies)
    }

    /// Measures the stream thread for `duration`, calling `progress` with the fraction elapsed
    /// about ten times a second.
    pub fn measure(
        &self,
        duration: Duration,
        progress: &mut dyn FnMut(f64),
    ) -> Result<IdleReport, BoxError> {
        measure_thread(self.tid, duration, progress, &|| self.alive(), &|| {
            self.counters()
        })
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
    Ok(IdleReport::between(
        (cpu_before, before),
        (cpu_after, after),
        wall,
        cpu_source,
    ))
}

impl IdleReport {
    /// What happened between two samples of a thread's CPU time and counters, `wall` apart.
    pub(crate) fn between(
        (cpu_before, before): (Duration, Counters),
        (cpu_after, after): (Duration, Counters),
        wall: Duration,
        cpu_source: &'static str,
    ) -> IdleReport {
        IdleReport {
            wall,
            cpu: cpu_after.saturating_sub(cpu_before),
            cpu_source,
            loops: after.loops - before.loops,
            snapshot_full_rebuilds: after.full - before.full,
            snapshot_incremental_updates: after.incremental - before.incremental,
            snapshot_unchanged: after.unchanged - before.unchanged,
            records: after.records - before.records,
            commits: after.commits - before.commits,
        }
    }
}

/// The floor under any idle stream thread: a named thread that does nothing but the idle
/// loop's wait (`Log::wait_for_append` with a `poll` timeout on an embedded log nobody writes
/// to), measured like the stream thread. What a stream thread uses above it is its own work.
///
/// Then, as [`IdleRun::first_record_latency`] does for a stream thread, `samples` records are
/// appended `spacing` apart and each is timed from its append to the waiting thread's wake-up:
/// the floor under any first-record latency on this machine.
pub fn bare_wait(
    poll: Duration,
    duration: Duration,
    (samples, spacing): (usize, Duration),
    progress: &mut dyn FnMut(f64),
) -> Result<(IdleReport, Latencies), BoxError> {
    const TOPIC: &str = "bare-wait";
    let log = Log::in_memory();
    log.create_topic(TOPIC, 1)?;
    let stop = Arc::new(AtomicBool::new(false));
    let loops = Arc::new(AtomicU64::new(0));
    // Wake-ups that found a new append.
    let woken = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let thread = {
        let (stop, loops, woken, log) = (
            Arc::clone(&stop),
            Arc::clone(&loops),
            Arc::clone(&woken),
            log.clone(),
        );
        std::thread::Builder::new()
            .name("riffle-bench-bare-wait".to_owned())
            .spawn(move || {
                let _ = tid_tx.send(Some(current_tid()));
                let mut version = log.append_version();
                while !stop.load(Ordering::Acquire) {
                    loops.fetch_add(1, Ordering::Relaxed);
                    let now = log.wait_for_append(version, poll);
                    if now != version {
                        version = now;
                        woken.fetch_add(1, Ordering::Release);
                    }
                }
            })?
    };
    let measured = match tid_rx.recv() {
        Ok(Some(tid)) => {
            std::thread::sleep(poll * 10); // into its steady state
            let counters = || Counters {
                loops: loops.load(Ordering::Relaxed),
                ..Counters::default()
            };
            let steps = if samples > 0 { 0.8 } else { 1.0 };
            measure_thread(
                tid,
                duration,
                &mut |f| progress(f * steps),
                &|| true,
                &counters,
            )
            .and_then(|report| {
                let mut latencies = Latencies::with_capacity(samples);
                let mut batch = BatchBuilder::new(Compression::None);
                let tp = TopicPartition::new(TOPIC, 0);
                for i in 0..samples {
                    std::thread::sleep(spacing);
                    let before = woken.load(Ordering::Acquire);
                    let appended = Instant::now();
                    batch.push(0, None, Some(b"1"));
                    log.append(&tp, &mut batch)?;
                    let seen = wait_for_count(
                        || woken.load(Ordering::Acquire),
                        before + 1,
                        PROCESS_TIMEOUT,
                    )
                    .ok_or("the bare-wait thread did not wake for an append")?;
                    latencies.push(seen.saturating_duration_since(appended));
                    progress(steps + (1.0 - steps) * (i + 1) as f64 / samples as f64);
                }
                Ok((report, latencies))
            })
        }
        _ => Err("the bare-wait thread's OS thread id is unknown (no /proc?)".into()),
    };
    stop.store(true, Ordering::Release);
    log.wake_waiters();
    thread.join().map_err(|_| "the bare-wait thread panicked")?;
    measured
}
