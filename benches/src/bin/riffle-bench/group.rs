//! `cargo run --release -p riffle-bench -- group`: many instances of one application on one
//! embedded log (docs/design.md §5, "The embedded coordinator"). Each instance is the
//! groupByKey-count sample under `--follow` in a child process of its own (this binary's hidden
//! `sample` subcommand) with its own state directory; they form one group on the log. Three
//! measurements, each beside its baseline in the same run:
//!
//! - **throughput**: N records written first, then 1, 2 and 4 instances (one stream thread each)
//!   started together; the time from the start until the group's committed offsets reach the
//!   input's end on every partition (polled every 20 ms), each instance's CPU time
//!   (`/proc/<pid>/stat`) and the records it processed (from the summary it prints when it
//!   stops), and the counts checked against a `HashMap` count of the input. One instance is the
//!   baseline;
//! - **failover**: 2 instances while this process appends a steady input; one is killed with
//!   SIGKILL (alternately, 1–1.5 s after the group settled), a record is appended to every input
//!   partition at once, and the time is measured from the kill until the committed offset of
//!   every input partition has reached its end after that record (polled every 10 ms): the
//!   survivor has processed what the dead instance left. Then the killed instance is started
//!   again on its state directory and the group left to settle. With 0 and 1 standby replicas;
//! - **rebalance**: 2 instances of several stream threads each over fewer tasks than threads,
//!   so some members are idle; an instance whose members get no task joins and then leaves,
//!   and an instance restarts (SIGTERM, then started again). The group's record is read every
//!   10 ms (`Log::describe_group`): the group epoch, the members, and whether a member of the
//!   instances not touched lost a task or had its member epoch moved (the member epoch moves
//!   whenever a member's tasks change, and a stream thread applies an assignment only when it
//!   moves); and the longest pause of their input partitions' committed offsets. A quiet window
//!   (3 s) with nothing done is the baseline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng};
use riffle::EmbeddedBackend;
use riffle::backend::GroupRecord;
use riffle_bench::proc_stats::process_cpu_time;
use riffle_cli::sample::{generate, latest_counts};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle_state_dir::TaskId;
use serde::Serialize;

use super::{check_writable, load_average, thousands, write_json_rows};

/// Arguments of `cargo run --release -p riffle-bench -- group`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The measurements to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "throughput,failover,rebalance"
    )]
    parts: Vec<Part>,
    /// Throughput: records written before the instances start.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Distinct keys (uniformly random).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Partitions of the input (throughput and failover).
    #[arg(long, default_value_t = 8)]
    partitions: u32,
    /// Throughput: the instance counts, each instance with one stream thread.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    instances: Vec<usize>,
    /// Throughput: rounds, each running every instance count in turn.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The sample's --store: `memory` or `persistent`.
    #[arg(long, default_value = "persistent")]
    store: String,
    /// The sample's --commit-interval-ms.
    #[arg(long, default_value_t = 100)]
    commit_interval_ms: u64,
    /// Failover: kills per standby setting.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Failover: the `num.standby.replicas` settings measured.
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    standbys: Vec<u32>,
    /// Failover and rebalance: records/s this process appends while the instances run.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    /// Rebalance: cycles, each a quiet window, an idle instance joining, the same leaving, and
    /// an instance restarting.
    #[arg(long, default_value_t = 5)]
    cycles: usize,
    /// Rebalance: partitions of the input (tasks).
    #[arg(long, default_value_t = 4)]
    rebalance_partitions: u32,
    /// Rebalance: stream threads per instance (members).
    #[arg(long, default_value_t = 3)]
    rebalance_threads: usize,
    /// Write every row as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the temporary directory (logs, state directories, each instance's stderr) and say
    /// where it is.
    #[arg(long)]
    keep: bool,
}

/// `--parts` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    /// Records/s and CPU per record with 1, 2 and 4 instances.
    Throughput,
    /// Time from a kill -9 until the survivor processed the dead instance's partitions.
    Failover,
    /// What a rebalance that moves nothing costs the instances it does not touch.
    Rebalance,
}

/// The input topic of every measurement.
const INPUT: &str = "in";

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        check_writable(path)?;
    }
    anyhow::ensure!(
        args.store == "memory" || args.store == "persistent",
        "--store is memory or persistent"
    );
    let root = tempfile::tempdir().context("creating a temporary directory")?;
    println!(
        "group: instances of the groupByKey-count sample on one log under {} (load average {})",
        root.path().display(),
        load_average()
    );
    let mut rows: Vec<serde_json::Value> = Vec::new();
    let mut stderr_files = Vec::new();
    if args.parts.contains(&Part::Throughput) {
        throughput(&args, root.path(), &mut rows, &mut stderr_files)?;
    }
    if args.parts.contains(&Part::Failover) {
        for &standbys in &super::distinct(&args.standbys, "--standbys")? {
            failover(&args, root.path(), standbys, &mut rows, &mut stderr_files)?;
        }
    }
    if args.parts.contains(&Part::Rebalance) {
        rebalance(&args, root.path(), &mut rows, &mut stderr_files)?;
    }
    report_stderr(&stderr_files);
    if let Some(path) = &args.json {
        write_json_rows(path, &rows)?;
    }
    if args.keep {
        let kept = root.keep();
        println!("kept {}", kept.display());
    }
    Ok(())
}

// ---- the instances -----------------------------------------------------------------------

/// What one instance's progress lines say.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// When the last progress line came.
    at: Option<Instant>,
    /// Changelog records applied to its stores so far: restores, and standbys' updates.
    restored: u64,
    /// Records it processed, from the summary it prints when it stops.
    processed_at_stop: Option<u64>,
}

/// How to start an instance.
#[derive(Clone, Debug)]
struct Spec {
    log_dir: PathBuf,
    app: String,
    output: String,
    state_dir: PathBuf,
    threads: usize,
    store: String,
    commit_interval_ms: u64,
    settings: Vec<String>,
    /// Its stderr goes here (appended).
    stderr: PathBuf,
}

/// One instance: the sample under `--follow`, a child process. Killed if dropped running, so
/// that a failed run leaves no process behind.
struct Instance {
    name: String,
    child: Option<Child>,
    pid: u32,
    progress: Arc<Mutex<Progress>>,
    reader: Option<JoinHandle<()>>,
}

/// The word before `marker` in `line`, parsed.
fn number_before<T: std::str::FromStr>(line: &str, marker: &str) -> Option<T> {
    let at = line.find(marker)?;
    line[..at].split_whitespace().last()?.parse().ok()
}

impl Instance {
    fn spawn(name: &str, spec: &Spec) -> anyhow::Result<Instance> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.stderr)
            .with_context(|| format!("opening {}", spec.stderr.display()))?;
        let mut child = Command::new(exe)
            .args(["sample", "group-by-key-count", "--log-dir"])
            .arg(&spec.log_dir)
            .args(["--input", INPUT, "--output", &spec.output])
            .args(["--application-id", &spec.app])
            .args(["--threads", &spec.threads.to_string()])
            .args(["--store", &spec.store])
            .args(["--commit-interval-ms", &spec.commit_interval_ms.to_string()])
            .args(["--follow", "--progress-every", "100ms", "--state-dir"])
            .arg(&spec.state_dir)
            .args(spec.settings.iter().flat_map(|s| ["--set", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting instance {name}"))?;
        let pid = child.id();
        let out = child.stdout.take().context("the instance's output")?;
        let progress = Arc::new(Mutex::new(Progress::default()));
        let shared = progress.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let mut p = shared.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(restored) = number_before(&line, " restored,") {
                    p.restored = restored;
                    p.at = Some(Instant::now());
                } else if line.starts_with("processed ")
                    && let Some(n) = number_before(&line, " records in ")
                {
                    p.processed_at_stop = Some(n);
                }
            }
        });
        Ok(Instance {
            name: name.to_owned(),
            child: Some(child),
            pid,
            progress,
            reader: Some(reader),
        })
    }

    fn progress(&self) -> Progress {
        *self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first progress figures printed after `after` (waiting up to `timeout` for them).
    fn progress_after(&self, after: Instant, timeout: Duration) -> Option<Progress> {
        let deadline = Instant::now() + timeout;
        loop {
            let p = self.progress();
            if p.at.is_some_and(|at| at > after) {
                return Some(p);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// CPU time (user + system) the instance used so far.
    fn cpu(&self) -> anyhow::Result<Duration> {
        let pid = i32::try_from(self.pid).context("a pid")?;
        process_cpu_time(Some(pid)).with_context(|| format!("CPU time of instance {}", self.name))
    }

    /// SIGKILL, and reaps it.
    fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .with_context(|| format!("killing instance {}", self.name))?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM (the sample closes the application and exits), waiting up to a minute; returns
    /// the records it processed, as it printed them.
    fn stop(&mut self) -> anyhow::Result<Option<u64>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        let status = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill")?;
        anyhow::ensure!(status.success(), "kill -TERM {} failed", self.pid);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "instance {} (pid {}) did not stop within 60 s of SIGTERM",
                    self.name,
                    self.pid
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        anyhow::ensure!(
            status.success(),
            "instance {} (pid {}) ended with {status} after SIGTERM",
            self.name,
            self.pid
        );
        Ok(self.progress().processed_at_stop)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Prints the warnings and errors the instances wrote, at most a few of each kind.
fn report_stderr(files: &[PathBuf]) {
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            // Drop the timestamp: lines of one kind then count together.
            let line = line.split_once(' ').map_or(line, |(_, rest)| rest).trim();
            if line.contains("WARN") || line.contains("ERROR") || line.starts_with("error") {
                let key: String = line.chars().take(200).collect();
                *lines.entry(key).or_default() += 1;
            }
        }
    }
    if lines.is_empty() {
        println!("the instances wrote no warning or error");
        return;
    }
    println!("warnings and errors the instances wrote (count, line):");
    for (line, n) in lines.iter().take(40) {
        println!("  {n:>5} {line}");
    }
}

// ---- the log, the input, the group -------------------------------------------------------

/// The log as this process opens it: it writes the input and reads offsets and the group; the
/// instances compact their changelogs.
fn open_log(dir: &Path) -> anyhow::Result<Log> {
    Log::open(
        dir,
        LogOptions::default().with_compaction_check_interval(None),
    )
    .with_context(|| format!("opening {}", dir.display()))
}

fn input_partitions(partitions: u32) -> Vec<TopicPartition> {
    (0..partitions)
        .map(|p| TopicPartition::new(INPUT, p))
        .collect()
}

/// The end offset of every partition.
fn end_offsets(log: &Log, tps: &[TopicPartition]) -> anyhow::Result<Vec<u64>> {
    tps.iter()
        .map(|tp| Ok(log.end_offset(tp)?))
        .collect::<anyhow::Result<_>>()
}

/// The application's committed offset of every partition (0 where it committed none).
fn committed(log: &Log, app: &str, tps: &[TopicPartition]) -> anyhow::Result<Vec<u64>> {
    tps.iter()
        .map(|tp| Ok(log.committed_offset(app, tp)?.unwrap_or(0)))
        .collect::<anyhow::Result<_>>()
}

/// Appends `rate` records/s to the input from a thread of this process, a batch per partition
/// every 10 ms, keeping a count per key.
struct Writer {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<anyhow::Result<(HashMap<String, i64>, u64)>>,
}

impl Writer {
    fn start(log: Log, partitions: u32, keys: u64, rate: u64, seed: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let tps = input_partitions(partitions);
            let mut batches: Vec<BatchBuilder> = tps
                .iter()
                .map(|_| BatchBuilder::new(Compression::None))
                .collect();
            let mut model: HashMap<String, i64> = HashMap::new();
            let mut written = 0u64;
            let start = Instant::now();
            while !stopped.load(Ordering::Relaxed) {
                let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
                let now_ms = now_ms();
                while written < due {
                    let key = format!("key-{}", rng.random_range(0..keys.max(1)));
                    let p = partition_for_key(key.as_bytes(), partitions) as usize;
                    batches[p].push(now_ms, Some(key.as_bytes()), Some(b"1"));
                    *model.entry(key).or_default() += 1;
                    written += 1;
                }
                for (tp, batch) in tps.iter().zip(&mut batches) {
                    log.append(tp, batch)?;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok((model, written))
        });
        Writer { stop, handle }
    }

    /// Stops writing; returns the count per key and the records written.
    fn finish(self) -> anyhow::Result<(HashMap<String, i64>, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("the input writer panicked"))?
    }
}

/// A key for each partition, in partition order (`marker-<n>`).
fn marker_keys(partitions: u32) -> Vec<String> {
    let mut keys: Vec<Option<String>> = vec![None; partitions as usize];
    let mut n = 0u64;
    while keys.iter().any(Option::is_none) {
        let key = format!("marker-{n}");
        let p = partition_for_key(key.as_bytes(), partitions) as usize;
        keys[p].get_or_insert(key);
        n += 1;
    }
    keys.into_iter().flatten().collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Waits until the application committed every partition up to its end now.
fn wait_caught_up(
    log: &Log,
    app: &str,
    tps: &[TopicPartition],
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let ends = end_offsets(log, tps)?;
    loop {
        let done = committed(log, app, tps)?;
        if done.iter().zip(&ends).all(|(c, e)| c >= e) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!(
                "application {app} did not commit up to the input's end within {timeout:?}: committed {done:?}, ends {ends:?}\n{}",
                describe(log, app)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The group's record and its members' liveness, as `riffle groups --describe` reads them.
struct GroupState {
    generation: u64,
    record: GroupRecord,
    /// Member id → (alive: its file lock is held, its process id if it heartbeated).
    files: BTreeMap<String, (bool, Option<u32>)>,
}

fn group_state(log: &Log, app: &str) -> anyhow::Result<Option<GroupState>> {
    let Some(view) = log.describe_group(app)? else {
        return Ok(None);
    };
    let record = GroupRecord::decode(&view.data)
        .map_err(|e| anyhow::anyhow!("the record of group {app} does not decode: {e}"))?;
    let files = view
        .members
        .iter()
        .map(|(id, (file, alive))| (id.clone(), (*alive, file.map(|f| f.pid))))
        .collect();
    Ok(Some(GroupState {
        generation: view.generation,
        record,
        files,
    }))
}

impl GroupState {
    /// Settled: `members` members, each alive and each in the record; every one's tasks as
    /// assigned and applied (target = current = owned, no warm-up); every task active on one
    /// member; and `owners` processes owning active tasks.
    fn settled(&self, tasks: usize, members: usize, owners: usize) -> bool {
        let r = &self.record;
        if r.members.len() != members
            || self.files.len() != members
            || r.members
                .keys()
                .any(|id| !self.files.get(id).is_some_and(|(alive, _)| *alive))
        {
            return false;
        }
        let mut active = BTreeSet::new();
        let mut count = 0;
        for m in r.members.values() {
            if m.target != m.current || m.owned != m.current || !m.current.warmup.is_empty() {
                return false;
            }
            count += m.current.active.len();
            active.extend(m.current.active.iter().copied());
        }
        count == tasks && active.len() == tasks && self.active_by_process().len() == owners
    }

    /// Active tasks by process (processes with none left out).
    fn active_by_process(&self) -> BTreeMap<String, BTreeSet<TaskId>> {
        let mut out: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
        for m in self.record.members.values() {
            if !m.current.active.is_empty() {
                out.entry(m.process.clone())
                    .or_default()
                    .extend(m.current.active.iter().copied());
            }
        }
        out
    }

    /// The process (state directory) whose members run in OS process `pid`.
    fn process_of_pid(&self, pid: u32) -> Option<String> {
        self.record
            .members
            .iter()
            .find(|(id, _)| self.files.get(*id).is_some_and(|(_, p)| *p == Some(pid)))
            .map(|(_, m)| m.process.clone())
    }
}

/// What the group looks like, for an error message: each member's liveness and tasks, and the
/// committed offsets against the input's ends.
fn describe(log: &Log, app: &str) -> String {
    let mut out = String::new();
    match group_state(log, app) {
        Ok(Some(g)) => {
            out.push_str(&format!(
                "group {app}: epoch {}, record generation {}\n",
                g.record.epoch, g.generation
            ));
            for (id, (alive, pid)) in &g.files {
                let m = g.record.members.get(id);
                out.push_str(&format!(
                    "  member {id} pid {pid:?} {}: {}\n",
                    if *alive { "alive" } else { "gone (lock free)" },
                    m.map_or_else(
                        || "not in the record".to_owned(),
                        |m| format!(
                            "process {} epoch {} current {:?} target {:?} owned {:?}",
                            m.process, m.epoch, m.current, m.target, m.owned
                        )
                    )
                ));
            }
            for (id, m) in &g.record.members {
                if !g.files.contains_key(id) {
                    out.push_str(&format!(
                        "  member {id} in the record without a file: process {} current {:?}\n",
                        m.process, m.current
                    ));
                }
            }
        }
        Ok(None) => out.push_str(&format!("no group {app}\n")),
        Err(e) => out.push_str(&format!("the group does not read: {e:#}\n")),
    }
    if let Some(partitions) = log.partitions(INPUT) {
        let tps = input_partitions(partitions);
        out.push_str(&format!(
            "committed {:?}, ends {:?}",
            committed(log, app, &tps).unwrap_or_default(),
            end_offsets(log, &tps).unwrap_or_default()
        ));
    }
    out
}

/// Waits until the group is [settled](GroupState::settled); returns how long that took.
fn wait_settled(
    log: &Log,
    app: &str,
    tasks: usize,
    members: usize,
    owners: usize,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if group_state(log, app)?.is_some_and(|g| g.settled(tasks, members, owners)) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!(
                "group {app} did not settle ({members} members, {tasks} tasks active on {owners} processes, every member's target applied) within {timeout:?}\n{}",
                describe(log, app)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `q` quantile of `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

// ---- throughput --------------------------------------------------------------------------

#[derive(Serialize, Debug)]
struct ThroughputRow {
    measurement: &'static str,
    instances: usize,
    round: usize,
    records: u64,
    seconds: f64,
    records_per_s: f64,
    /// When the group first settled (every instance owning tasks, every member's target
    /// applied), if it did before the input was committed.
    settled_s: Option<f64>,
    /// Each instance's CPU seconds (user + system) from its start until the input was
    /// committed.
    cpu_s: Vec<f64>,
    /// Each instance's records processed, from its summary.
    processed: Vec<u64>,
    /// Each instance's CPU per record it processed.
    cpu_us_per_record: Vec<f64>,
    /// All instances' CPU over the input's records.
    total_cpu_us_per_record: f64,
    counts_exact: bool,
    load_average: String,
}

#[derive(Serialize, Debug)]
struct ThroughputSummary {
    measurement: &'static str,
    instances: usize,
    runs: usize,
    median_records_per_s: f64,
    median_total_cpu_us_per_record: f64,
    /// Median records/s over the one-instance median.
    speedup: f64,
}

fn throughput(
    args: &Args,
    root: &Path,
    rows: &mut Vec<serde_json::Value>,
    stderr_files: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let counts = super::distinct(&args.instances, "--instances")?;
    let dir = root.join("throughput");
    println!(
        "\nthroughput: writing {} records over {} keys in {} partitions",
        thousands(args.records as f64),
        thousands(args.keys as f64),
        args.partitions
    );
    let expected = generate(&dir, INPUT, args.records, args.keys, args.partitions)?;
    let log = open_log(&dir)?;
    let backend = EmbeddedBackend::new(log.clone());
    let tps = input_partitions(args.partitions);
    let ends = end_offsets(&log, &tps)?;
    let total: u64 = ends.iter().sum();
    anyhow::ensure!(
        total == args.records,
        "wrote {total} records, not {}",
        args.records
    );
    let mut measured: Vec<ThroughputRow> = Vec::new();
    for round in 1..=args.rounds.max(1) {
        for &k in &counts {
            let app = format!("count-k{k}-r{round}");
            let output = format!("out-k{k}-r{round}");
            let stderr = dir.join(format!("{app}.stderr"));
            stderr_files.push(stderr.clone());
            let start = Instant::now();
            let mut instances = Vec::new();
            for i in 0..k {
                let spec = Spec {
                    log_dir: dir.clone(),
                    app: app.clone(),
                    output: output.clone(),
                    state_dir: dir.join(format!("state-{app}-{i}")),
                    threads: 1,
                    store: args.store.clone(),
                    commit_interval_ms: args.commit_interval_ms,
                    settings: Vec::new(),
                    stderr: stderr.clone(),
                };
                instances.push(Instance::spawn(&format!("{app}/{i}"), &spec)?);
            }
            let mut settled = None;
            loop {
                let done = committed(&log, &app, &tps)?;
                if done.iter().zip(&ends).all(|(c, e)| c >= e) {
                    break;
                }
                if settled.is_none()
                    && group_state(&log, &app)?
                        .is_some_and(|g| g.settled(tps.len(), k, k.min(tps.len())))
                {
                    settled = Some(start.elapsed().as_secs_f64());
                }
                if start.elapsed() > Duration::from_secs(600) {
                    bail!(
                        "{k} instance(s) did not commit the input within 600 s\n{}",
                        describe(&log, &app)
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let elapsed = start.elapsed().as_secs_f64();
            let cpu: Vec<f64> = instances
                .iter()
                .map(|i| i.cpu().map(|d| d.as_secs_f64()))
                .collect::<anyhow::Result<_>>()?;
            let mut processed = Vec::new();
            for instance in &mut instances {
                processed.push(instance.stop()?.unwrap_or(0));
            }
            let exact = latest_counts(&backend, &output)? == expected;
            let row = ThroughputRow {
                measurement: "throughput",
                instances: k,
                round,
                records: total,
                seconds: elapsed,
                records_per_s: total as f64 / elapsed,
                settled_s: settled,
                cpu_us_per_record: cpu
                    .iter()
                    .zip(&processed)
                    .map(|(c, &n)| if n > 0 { c * 1e6 / n as f64 } else { 0.0 })
                    .collect(),
                total_cpu_us_per_record: cpu.iter().sum::<f64>() * 1e6 / total as f64,
                cpu_s: cpu,
                processed,
                counts_exact: exact,
                load_average: load_average(),
            };
            println!(
                "round {round}, {k} instance(s): {} records in {:.2} s, {} records/s (group settled at {}); CPU s {:?}; processed {:?}; µs/record {:.3} (all instances); counts exact: {} (load {})",
                thousands(total as f64),
                row.seconds,
                thousands(row.records_per_s),
                row.settled_s
                    .map_or_else(|| "never".to_owned(), |t| format!("{t:.2} s")),
                row.cpu_s
                    .iter()
                    .map(|c| format!("{c:.2}"))
                    .collect::<Vec<_>>(),
                row.processed,
                row.total_cpu_us_per_record,
                if exact { "yes" } else { "NO" },
                row.load_average
            );
            anyhow::ensure!(
                exact,
                "{k} instance(s): the counts differ from a HashMap count of the input"
            );
            rows.push(serde_json::to_value(&row)?);
            measured.push(row);
        }
    }
    let summaries: Vec<ThroughputSummary> = counts
        .iter()
        .map(|&k| {
            let of_k: Vec<&ThroughputRow> = measured.iter().filter(|r| r.instances == k).collect();
            let rate: Vec<f64> = of_k.iter().map(|r| r.records_per_s).collect();
            let cpu: Vec<f64> = of_k.iter().map(|r| r.total_cpu_us_per_record).collect();
            ThroughputSummary {
                measurement: "throughput-summary",
                instances: k,
                runs: of_k.len(),
                median_records_per_s: median(&rate),
                median_total_cpu_us_per_record: median(&cpu),
                speedup: 0.0,
            }
        })
        .collect();
    let base = summaries
        .iter()
        .find(|s| s.instances == 1)
        .or(summaries.first())
        .map_or(0.0, |s| s.median_records_per_s);
    println!(
        "\n| instances | records/s (runs) | median | vs 1 | CPU µs/record, all instances (median) |"
    );
    println!("|---:|---|---:|---:|---:|");
    for mut s in summaries {
        s.speedup = if base > 0.0 {
            s.median_records_per_s / base
        } else {
            0.0
        };
        let runs: Vec<String> = measured
            .iter()
            .filter(|r| r.instances == s.instances)
            .map(|r| thousands(r.records_per_s))
            .collect();
        println!(
            "| {} | {} | {} | {:.2}× | {:.3} |",
            s.instances,
            runs.join(" / "),
            thousands(s.median_records_per_s),
            s.speedup,
            s.median_total_cpu_us_per_record
        );
        rows.push(serde_json::to_value(&s)?);
    }
    Ok(())
}

// ---- failover ----------------------------------------------------------------------------

#[derive(Serialize, Debug)]
struct KillRow {
    measurement: &'static str,
    standbys: u32,
    kill: usize,
    victim: String,
    /// The victim's active tasks at the kill.
    victim_tasks: Vec<String>,
    /// From the SIGKILL until the group's record gave the survivor every task (a step of the
    /// survivor declared the victim gone), as polled.
    reassigned_ms: Option<f64>,
    /// From the SIGKILL until every input partition's committed offset reached its end just
    /// after the kill (a record appended to each partition once the victim was dead).
    failover_ms: f64,
    /// Changelog records the survivor applied from just before the kill until just after the
    /// failover (restores, and standby updates), from its progress lines.
    survivor_restored: Option<u64>,
    /// From starting the killed instance again until the group settled.
    rejoin_settle_ms: f64,
    /// Changelog records the restarted instance applied until it settled.
    rejoined_restored: Option<u64>,
    load_average: String,
}

#[derive(Serialize, Debug)]
struct FailoverSummary {
    measurement: &'static str,
    standbys: u32,
    kills: usize,
    failover_p50_ms: f64,
    failover_p99_ms: f64,
    failover_max_ms: f64,
    failover_min_ms: f64,
    failover_mean_ms: f64,
    reassigned_p50_ms: f64,
    reassigned_max_ms: f64,
    survivor_restored_p50: f64,
    survivor_restored_max: f64,
    rejoin_settle_p50_ms: f64,
    rejoin_settle_max_ms: f64,
    records_written: u64,
    /// Keys counted fewer times than written (at_least_once: must be 0).
    keys_undercounted: usize,
    /// Keys counted more times than written (records processed again after a kill).
    keys_overcounted: usize,
    /// Records counted beyond those written, over all keys.
    extra_counts: i64,
}

fn failover(
    args: &Args,
    root: &Path,
    standbys: u32,
    rows: &mut Vec<serde_json::Value>,
    stderr_files: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let dir = root.join(format!("failover-{standbys}"));
    let log = open_log(&dir)?;
    log.create_topic(INPUT, args.partitions)?;
    let tps = input_partitions(args.partitions);
    let tasks = args.partitions as usize;
    let app = format!("failover-standbys-{standbys}");
    println!(
        "\nfailover, {standbys} standby replica(s): 2 instances × 1 thread, {} partitions, {} records/s written, {} kills",
        args.partitions, args.rate, args.kills
    );
    let writer = Writer::start(
        log.clone(),
        args.partitions,
        args.keys,
        args.rate,
        u64::from(standbys) + 11,
    );
    let spec = |slot: usize| {
        let stderr = dir.join(format!("instance-{slot}.stderr"));
        Spec {
            log_dir: dir.clone(),
            app: app.clone(),
            output: "out".to_owned(),
            state_dir: dir.join(format!("state-{slot}")),
            threads: 1,
            store: args.store.clone(),
            commit_interval_ms: args.commit_interval_ms,
            settings: vec![format!("num.standby.replicas={standbys}")],
            stderr,
        }
    };
    let names = ["a", "b"];
    stderr_files.extend((0..2).map(|s| spec(s).stderr));
    let mut instances = vec![
        Instance::spawn(names[0], &spec(0))?,
        Instance::spawn(names[1], &spec(1))?,
    ];
    wait_settled(&log, &app, tasks, 2, 2, Duration::from_secs(120))?;
    // The group settles at a heartbeat: waiting a whole number of heartbeat intervals would put
    // every kill at the same point of the survivor's interval. 1 s plus a random 0–500 ms
    // spreads the kills over it.
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(standbys) + 101);
    let pause = |rng: &mut rand::rngs::StdRng| {
        std::thread::sleep(Duration::from_millis(1000 + rng.random_range(0..500)));
    };
    pause(&mut rng);
    let markers = marker_keys(args.partitions);
    let mut marked: HashMap<String, i64> = HashMap::new();
    let mut kills = Vec::new();
    for kill in 1..=args.kills {
        let v = (kill - 1) % 2;
        let s = 1 - v;
        let group = group_state(&log, &app)?.context("the group's record")?;
        let victim_process = group.process_of_pid(instances[v].pid);
        let survivor_process = group
            .process_of_pid(instances[s].pid)
            .context("the survivor's process")?;
        let victim_tasks: Vec<String> = victim_process
            .and_then(|p| group.active_by_process().remove(&p))
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect();
        let survivor_before = instances[s].progress();
        let start = Instant::now();
        instances[v].kill9()?;
        // A record on every partition that the victim cannot have processed: without it, a
        // partition the victim had just committed up to its end would need no failover.
        for (tp, key) in tps.iter().zip(&markers) {
            let mut batch = BatchBuilder::new(Compression::None);
            batch.push(now_ms(), Some(key.as_bytes()), Some(b"1"));
            log.append(tp, &mut batch)?;
            *marked.entry(key.clone()).or_default() += 1;
        }
        let ends = end_offsets(&log, &tps)?;
        let mut reassigned = None;
        loop {
            if reassigned.is_none()
                && group_state(&log, &app)?.is_some_and(|g| {
                    g.active_by_process()
                        .get(&survivor_process)
                        .is_some_and(|t| t.len() == tasks)
                })
            {
                reassigned = Some(start.elapsed());
            }
            let done = committed(&log, &app, &tps)?;
            if done.iter().zip(&ends).all(|(c, e)| c >= e) {
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!(
                    "kill {kill} ({standbys} standbys): instance {} was killed, and 60 s later the survivor has not processed the input up to its ends just after the kill ({ends:?})\n{}",
                    names[v],
                    describe(&log, &app)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let failover = start.elapsed();
        let done_at = Instant::now();
        let survivor_after = instances[s].progress_after(done_at, Duration::from_secs(2));
        let survivor_restored = match (survivor_before.at, survivor_after) {
            (Some(_), Some(after)) => Some(after.restored.saturating_sub(survivor_before.restored)),
            _ => None,
        };
        let restart = Instant::now();
        instances[v] = Instance::spawn(names[v], &spec(v))?;
        wait_settled(&log, &app, tasks, 2, 2, Duration::from_secs(120))?;
        let rejoin_settle = restart.elapsed();
        let rejoined_restored = instances[v]
            .progress_after(Instant::now(), Duration::from_secs(2))
            .map(|p| p.restored);
        let row = KillRow {
            measurement: "failover-kill",
            standbys,
            kill,
            victim: names[v].to_owned(),
            victim_tasks,
            reassigned_ms: reassigned.map(|d| d.as_secs_f64() * 1e3),
            failover_ms: failover.as_secs_f64() * 1e3,
            survivor_restored,
            rejoin_settle_ms: rejoin_settle.as_secs_f64() * 1e3,
            rejoined_restored,
            load_average: load_average(),
        };
        println!(
            "kill {kill:>2}: {} (tasks {}); the survivor given them after {} ms, failed over in {:.0} ms, the survivor applied {} changelog records; restarted, settled in {:.0} ms, it applied {}",
            row.victim,
            row.victim_tasks.join(","),
            row.reassigned_ms
                .map_or_else(|| "?".to_owned(), |t| format!("{t:.0}")),
            row.failover_ms,
            row.survivor_restored
                .map_or_else(|| "?".to_owned(), |n| n.to_string()),
            row.rejoin_settle_ms,
            row.rejoined_restored
                .map_or_else(|| "?".to_owned(), |n| n.to_string()),
        );
        rows.push(serde_json::to_value(&row)?);
        kills.push(row);
        pause(&mut rng);
    }
    let (mut model, written) = writer.finish()?;
    for (key, n) in marked {
        *model.entry(key).or_default() += n;
    }
    wait_caught_up(&log, &app, &tps, Duration::from_secs(120))?;
    for instance in &mut instances {
        instance.stop()?;
    }
    let counts = latest_counts(&EmbeddedBackend::new(log.clone()), "out")?;
    let mut under = 0;
    let mut over = 0;
    let mut extra = 0i64;
    for (key, &n) in &model {
        let got = counts.get(key).copied().unwrap_or(0);
        if got < n {
            under += 1;
        } else if got > n {
            over += 1;
            extra += got - n;
        }
    }
    let times: Vec<f64> = kills.iter().map(|k| k.failover_ms).collect();
    let reassigned: Vec<f64> = kills.iter().filter_map(|k| k.reassigned_ms).collect();
    let restored: Vec<f64> = kills
        .iter()
        .filter_map(|k| k.survivor_restored.map(|n| n as f64))
        .collect();
    let settles: Vec<f64> = kills.iter().map(|k| k.rejoin_settle_ms).collect();
    let summary = FailoverSummary {
        measurement: "failover-summary",
        standbys,
        kills: kills.len(),
        failover_p50_ms: quantile(&times, 0.5),
        failover_p99_ms: quantile(&times, 0.99),
        failover_max_ms: quantile(&times, 1.0),
        failover_min_ms: quantile(&times, 0.0),
        failover_mean_ms: times.iter().sum::<f64>() / times.len().max(1) as f64,
        reassigned_p50_ms: quantile(&reassigned, 0.5),
        reassigned_max_ms: quantile(&reassigned, 1.0),
        survivor_restored_p50: quantile(&restored, 0.5),
        survivor_restored_max: quantile(&restored, 1.0),
        rejoin_settle_p50_ms: quantile(&settles, 0.5),
        rejoin_settle_max_ms: quantile(&settles, 1.0),
        records_written: written,
        keys_undercounted: under,
        keys_overcounted: over,
        extra_counts: extra,
    };
    println!(
        "{standbys} standby(s), {} kills: failover p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (min {:.0}, mean {:.0}); tasks given to the survivor p50 {:.0} ms, max {:.0} ms; survivor applied p50 {:.0}, max {:.0} changelog records; rejoin settled p50 {:.0} ms, max {:.0} ms; {} records written, {under} keys under-counted, {over} over-counted (+{extra})",
        summary.kills,
        summary.failover_p50_ms,
        summary.failover_p99_ms,
        summary.failover_max_ms,
        summary.failover_min_ms,
        summary.failover_mean_ms,
        summary.reassigned_p50_ms,
        summary.reassigned_max_ms,
        summary.survivor_restored_p50,
        summary.survivor_restored_max,
        summary.rejoin_settle_p50_ms,
        summary.rejoin_settle_max_ms,
        thousands(written as f64),
    );
    rows.push(serde_json::to_value(&summary)?);
    anyhow::ensure!(
        under == 0,
        "{under} keys were counted fewer times than written: a count was lost"
    );
    Ok(())
}

// ---- rebalance ---------------------------------------------------------------------------

/// What was done to the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Event {
    /// Nothing: the baseline window.
    Quiet,
    /// An instance whose members get no task joins.
    IdleJoins,
    /// It leaves (SIGTERM).
    IdleLeaves,
    /// An instance owning tasks restarts (SIGTERM, then started again on its state directory).
    Restart,
}

impl Event {
    fn label(self) -> &'static str {
        match self {
            Event::Quiet => "nothing (baseline)",
            Event::IdleJoins => "an idle instance joins",
            Event::IdleLeaves => "the idle instance leaves",
            Event::Restart => "an instance restarts",
        }
    }
}

#[derive(Serialize, Debug)]
struct RebalanceRow {
    measurement: &'static str,
    cycle: usize,
    event: Event,
    /// The group epoch before and after.
    epoch_before: u64,
    epoch_after: u64,
    /// The record's generation (one more per write) before and after.
    generation_before: u64,
    generation_after: u64,
    members_before: usize,
    members_after: usize,
    /// Active tasks per instance before and after (`a:0_0,0_1 b:0_2`).
    tasks_before: String,
    tasks_after: String,
    /// Tasks the instances not touched lost from a member's `current` or `owned` active set at
    /// some poll (each member and task counted once).
    untouched_tasks_lost: usize,
    /// Members of the untouched instances whose member epoch moved.
    untouched_member_epochs_moved: usize,
    /// Members of the untouched instances that left the record (fenced, rejoined).
    untouched_members_left: usize,
    /// The longest time the committed offset of an input partition of an untouched instance's
    /// tasks did not move.
    untouched_max_commit_gap_ms: f64,
    /// The longest interval between two polls of this process (a stall of the machine shows
    /// here, and lengthens the commit gap measured).
    max_poll_interval_ms: f64,
    /// From the start of the action until the group settled.
    settle_ms: f64,
    /// How long the action took (starting an instance; stopping one: SIGTERM until it exited).
    action_ms: f64,
    /// Polls of the record.
    polls: usize,
    load_average: String,
}

/// The instance names of the rebalance measurement, by process (state directory) id.
fn tasks_by_instance(g: &GroupState, names: &BTreeMap<String, String>) -> String {
    g.active_by_process()
        .iter()
        .map(|(process, tasks)| {
            format!(
                "{}:{}",
                names.get(process).map_or("?", String::as_str),
                tasks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Watches the group while `action` runs and until it settles with `members` members (and
/// `hold` more), polling the record every 10 ms.
#[allow(clippy::too_many_arguments)]
fn observe(
    log: &Log,
    app: &str,
    tps: &[TopicPartition],
    names: &BTreeMap<String, String>,
    untouched: &BTreeSet<String>,
    (tasks, members): (usize, usize),
    hold: Duration,
    action: impl FnOnce() -> anyhow::Result<()> + Send,
) -> anyhow::Result<(RebalanceRow, GroupState)> {
    let before = group_state(log, app)?.context("the group's record")?;
    // The untouched instances' members: their epoch and tasks before.
    let watched: BTreeMap<String, (u64, BTreeSet<TaskId>)> = before
        .record
        .members
        .iter()
        .filter(|(_, m)| untouched.contains(&m.process))
        .map(|(id, m)| (id.clone(), (m.epoch, m.current.active.clone())))
        .collect();
    let partitions: BTreeSet<u32> = watched
        .values()
        .flat_map(|(_, t)| t.iter().map(|t| t.partition))
        .collect();
    let watched_tps: Vec<TopicPartition> = tps
        .iter()
        .filter(|tp| partitions.contains(&tp.partition))
        .cloned()
        .collect();
    let mut last_moved: Vec<(u64, Instant)> = committed(log, app, &watched_tps)?
        .into_iter()
        .map(|c| (c, Instant::now()))
        .collect();
    let mut max_gap = Duration::ZERO;
    let mut lost: BTreeSet<(String, TaskId)> = BTreeSet::new();
    let mut epochs_moved: BTreeSet<String> = BTreeSet::new();
    let mut left: BTreeSet<String> = BTreeSet::new();
    let start = Instant::now();
    let mut settled_at: Option<Instant> = None;
    let mut action_done: Option<Instant> = None;
    let mut last_poll = start;
    let mut max_poll_interval = Duration::ZERO;
    let mut polls = 0;
    // The action runs on a thread of its own (stopping an instance waits for it to exit):
    // the record and the offsets are read all the while.
    let after = std::thread::scope(|scope| -> anyhow::Result<GroupState> {
        let mut action = Some(scope.spawn(action));
        loop {
            std::thread::sleep(Duration::from_millis(10));
            if action.as_ref().is_some_and(|a| a.is_finished())
                && let Some(done) = action.take()
            {
                done.join()
                    .map_err(|_| anyhow::anyhow!("the action panicked"))??;
                action_done = Some(Instant::now());
            }
            let now = Instant::now();
            max_poll_interval = max_poll_interval.max(now - last_poll);
            last_poll = now;
            let g = group_state(log, app)?.context("the group's record")?;
            polls += 1;
            for (id, (epoch, tasks)) in &watched {
                match g.record.members.get(id) {
                    None => {
                        left.insert(id.clone());
                    }
                    Some(m) => {
                        if m.epoch != *epoch {
                            epochs_moved.insert(id.clone());
                        }
                        for t in tasks {
                            if !m.current.active.contains(t) || !m.owned.active.contains(t) {
                                lost.insert((id.clone(), *t));
                            }
                        }
                    }
                }
            }
            for (c, (last, at)) in committed(log, app, &watched_tps)?
                .into_iter()
                .zip(&mut last_moved)
            {
                if c != *last {
                    max_gap = max_gap.max(now - *at);
                    *last = c;
                    *at = now;
                }
            }
            let settled = action.is_none() && g.settled(tasks, members, 2);
            match (settled, settled_at) {
                (true, None) => settled_at = Some(now),
                (false, Some(_)) => settled_at = None,
                _ => {}
            }
            if settled_at.is_some_and(|at| now.duration_since(at) >= hold) {
                return Ok(g);
            }
            if start.elapsed() > Duration::from_secs(120) {
                bail!(
                    "the group did not settle with {members} members within 120 s\n{}",
                    describe(log, app)
                );
            }
        }
    })?;
    let end = Instant::now();
    for (_, at) in &last_moved {
        max_gap = max_gap.max(end - *at);
    }
    let settle = settled_at.map_or(Duration::ZERO, |at| at.duration_since(start));
    let action_took = action_done.map_or(Duration::ZERO, |at| at.duration_since(start));
    let row = RebalanceRow {
        measurement: "rebalance",
        cycle: 0,
        event: Event::Quiet,
        epoch_before: before.record.epoch,
        epoch_after: after.record.epoch,
        generation_before: before.generation,
        generation_after: after.generation,
        members_before: before.record.members.len(),
        members_after: after.record.members.len(),
        tasks_before: tasks_by_instance(&before, names),
        tasks_after: tasks_by_instance(&after, names),
        untouched_tasks_lost: lost.len(),
        untouched_member_epochs_moved: epochs_moved.len(),
        untouched_members_left: left.len(),
        untouched_max_commit_gap_ms: max_gap.as_secs_f64() * 1e3,
        max_poll_interval_ms: max_poll_interval.as_secs_f64() * 1e3,
        settle_ms: settle.as_secs_f64() * 1e3,
        action_ms: action_took.as_secs_f64() * 1e3,
        polls,
        load_average: load_average(),
    };
    Ok((row, after))
}

fn rebalance(
    args: &Args,
    root: &Path,
    rows: &mut Vec<serde_json::Value>,
    stderr_files: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let dir = root.join("rebalance");
    let log = open_log(&dir)?;
    let partitions = args.rebalance_partitions;
    log.create_topic(INPUT, partitions)?;
    let tps = input_partitions(partitions);
    let tasks = partitions as usize;
    let threads = args.rebalance_threads;
    let app = "rebalance";
    println!(
        "\nrebalance: 2 instances × {threads} threads over {tasks} tasks, {} records/s written, {} cycles",
        args.rate, args.cycles
    );
    let writer = Writer::start(log.clone(), partitions, args.keys, args.rate, 23);
    let spec = |slot: &str| Spec {
        log_dir: dir.clone(),
        app: app.to_owned(),
        output: "out".to_owned(),
        state_dir: dir.join(format!("state-{slot}")),
        threads,
        store: args.store.clone(),
        commit_interval_ms: args.commit_interval_ms,
        settings: Vec::new(),
        stderr: dir.join(format!("instance-{slot}.stderr")),
    };
    stderr_files.extend(["a", "b", "c"].map(|s| spec(s).stderr));
    let mut a = Instance::spawn("a", &spec("a"))?;
    let mut b = Instance::spawn("b", &spec("b"))?;
    let two = 2 * threads;
    wait_settled(&log, app, tasks, two, 2, Duration::from_secs(120))?;
    std::thread::sleep(Duration::from_secs(1));
    let g = group_state(&log, app)?.context("the group's record")?;
    let process_a = g.process_of_pid(a.pid).context("instance a's process")?;
    let process_b = g.process_of_pid(b.pid).context("instance b's process")?;
    let names: BTreeMap<String, String> = [
        (process_a.clone(), "a".to_owned()),
        (process_b.clone(), "b".to_owned()),
    ]
    .into();
    let both: BTreeSet<String> = [process_a.clone(), process_b.clone()].into();
    let hold = Duration::from_millis(1500);
    let mut measured: Vec<RebalanceRow> = Vec::new();
    let mut names = names;
    for cycle in 1..=args.cycles {
        let mut record = |mut row: RebalanceRow, event: Event| -> anyhow::Result<()> {
            row.cycle = cycle;
            row.event = event;
            println!(
                "cycle {cycle}, {}: epoch {} → {}, generation {} → {}, members {} → {}, tasks [{}] → [{}]; untouched: {} tasks lost, {} member epochs moved, {} members left, longest commit gap {:.0} ms (longest poll interval {:.0} ms); settled after {:.0} ms (the action took {:.0} ms)",
                event.label(),
                row.epoch_before,
                row.epoch_after,
                row.generation_before,
                row.generation_after,
                row.members_before,
                row.members_after,
                row.tasks_before,
                row.tasks_after,
                row.untouched_tasks_lost,
                row.untouched_member_epochs_moved,
                row.untouched_members_left,
                row.untouched_max_commit_gap_ms,
                row.max_poll_interval_ms,
                row.settle_ms,
                row.action_ms
            );
            rows.push(serde_json::to_value(&row)?);
            measured.push(row);
            Ok(())
        };
        let (row, _) = observe(&log, app, &tps, &names, &both, (tasks, two), hold, || {
            std::thread::sleep(Duration::from_millis(1500));
            Ok(())
        })?;
        record(row, Event::Quiet)?;
        let mut c = None;
        let (row, g) = observe(
            &log,
            app,
            &tps,
            &names,
            &both,
            (tasks, 3 * threads),
            hold,
            || {
                c = Some(Instance::spawn("c", &spec("c"))?);
                Ok(())
            },
        )?;
        let mut c = c.context("instance c")?;
        if let Some(p) = g.process_of_pid(c.pid) {
            names.insert(p, "c".to_owned());
        }
        record(row, Event::IdleJoins)?;
        let (row, _) = observe(&log, app, &tps, &names, &both, (tasks, two), hold, || {
            c.stop().map(drop)
        })?;
        record(row, Event::IdleLeaves)?;
        // Restart a and b in turn; the other is the untouched one.
        let (target, other) = if cycle % 2 == 1 {
            (&mut a, &process_b)
        } else {
            (&mut b, &process_a)
        };
        let untouched: BTreeSet<String> = [other.clone()].into();
        let name = target.name.clone();
        let (row, _) = observe(
            &log,
            app,
            &tps,
            &names,
            &untouched,
            (tasks, two),
            hold,
            || {
                target.stop()?;
                *target = Instance::spawn(&name, &spec(&name))?;
                Ok(())
            },
        )?;
        record(row, Event::Restart)?;
    }
    let (model, written) = writer.finish()?;
    wait_caught_up(&log, app, &tps, Duration::from_secs(120))?;
    a.stop()?;
    b.stop()?;
    let exact = latest_counts(&EmbeddedBackend::new(log.clone()), "out")? == model;
    println!(
        "rebalance: {} records written; counts equal a HashMap count of the input: {}",
        thousands(written as f64),
        if exact { "yes" } else { "NO" }
    );
    println!(
        "\n| event | times | group epoch moved | record rewritten | untouched instances: tasks lost | member epochs moved | members left | longest commit gap (ms, median / max) | longest poll interval (ms, max) | settled after (ms, median) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for event in [
        Event::Quiet,
        Event::IdleJoins,
        Event::IdleLeaves,
        Event::Restart,
    ] {
        let of: Vec<&RebalanceRow> = measured.iter().filter(|r| r.event == event).collect();
        let gaps: Vec<f64> = of.iter().map(|r| r.untouched_max_commit_gap_ms).collect();
        let settles: Vec<f64> = of.iter().map(|r| r.settle_ms).collect();
        let polls: Vec<f64> = of.iter().map(|r| r.max_poll_interval_ms).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} / {:.0} | {:.0} | {:.0} |",
            event.label(),
            of.len(),
            of.iter()
                .filter(|r| r.epoch_after != r.epoch_before)
                .count(),
            of.iter()
                .filter(|r| r.generation_after != r.generation_before)
                .count(),
            of.iter().map(|r| r.untouched_tasks_lost).sum::<usize>(),
            of.iter()
                .map(|r| r.untouched_member_epochs_moved)
                .sum::<usize>(),
            of.iter().map(|r| r.untouched_members_left).sum::<usize>(),
            median(&gaps),
            quantile(&gaps, 1.0),
            quantile(&polls, 1.0),
            median(&settles)
        );
    }
    rows.push(serde_json::json!({
        "measurement": "rebalance-summary",
        "records_written": written,
        "counts_exact": exact,
    }));
    anyhow::ensure!(exact, "the counts differ from a HashMap count of the input");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_and_summary_lines_parse() {
        // As the sample prints them under --follow, and when it stops.
        let line = "12.3 s: 4567 records processed, 890 records/s, 1234 restored, compaction: 0 partitions cleaned, 0.0 MiB read and written, 0 records removed; caught up";
        assert_eq!(number_before::<u64>(line, " restored,"), Some(1234));
        let summary = "processed 2000000 records in 1.23 s: 1626016 records/s (interrupted)";
        assert_eq!(
            number_before::<u64>(summary, " records in "),
            Some(2_000_000)
        );
        assert_eq!(number_before::<u64>("no figures here", " restored,"), None);
    }

    #[test]
    fn marker_keys_cover_every_partition_in_order() {
        let keys = marker_keys(8);
        assert_eq!(keys.len(), 8);
        for (p, key) in keys.iter().enumerate() {
            assert_eq!(partition_for_key(key.as_bytes(), 8) as usize, p);
        }
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 10.0);
        assert_eq!(quantile(&v, 0.99), 20.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
