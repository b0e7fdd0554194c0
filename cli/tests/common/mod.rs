//! Shared by the crash tests: a log directory with an input topic written through riffle-log,
//! the `riffle sample group-by-key-count` (or `windowed-count`) child process, the model (a
//! plain `HashMap`-style count of the input) and the counts read back with `riffle consume
//! --latest-per-key` (every windowed count, for `windowed-count`).

#![allow(dead_code)] // each test binary uses a different part of it

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};

/// The input topic.
pub(crate) const INPUT: &str = "events";
/// The output topic.
pub(crate) const OUTPUT: &str = "counts";
/// The application id (so the changelog is `crash-app-counts-changelog`).
pub(crate) const APP: &str = "crash-app";
/// The changelog of the sample's `counts` store.
pub(crate) const CHANGELOG: &str = "crash-app-counts-changelog";
/// Partitions of the input topic (so four tasks, `0_0` … `0_3`).
pub(crate) const PARTITIONS: u32 = 4;
/// Records per input batch (per partition).
const RECORDS_PER_BATCH: usize = 150;

/// Counts per key.
pub(crate) type Counts = BTreeMap<String, i64>;

/// A temporary directory with `log/` and `state/`.
pub(crate) struct Fixture {
    _root: tempfile::TempDir,
    pub(crate) log_dir: PathBuf,
    pub(crate) state_dir: PathBuf,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let root = tempfile::tempdir().expect("tempdir");
        let log_dir = root.path().join("log");
        let state_dir = root.path().join("state");
        Fixture {
            _root: root,
            log_dir,
            state_dir,
        }
    }

    /// A fixture whose log and state live in `log_dir` and `state_dir` (file systems of a
    /// test's choosing).
    pub(crate) fn with_dirs(log_dir: PathBuf, state_dir: PathBuf) -> Fixture {
        Fixture {
            _root: tempfile::tempdir().expect("tempdir"),
            log_dir,
            state_dir,
        }
    }

    /// The directory of task `task` (`"0_1"`) in the state directory.
    pub(crate) fn task_dir(&self, task: &str) -> PathBuf {
        self.state_dir.join(APP).join(task)
    }

    /// The last segment file of `topic`'s partition `partition`.
    pub(crate) fn last_segment(&self, topic: &str, partition: u32) -> PathBuf {
        let dir = self
            .log_dir
            .join("topics")
            .join(topic)
            .join(partition.to_string());
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        segments.sort();
        segments
            .pop()
            .unwrap_or_else(|| panic!("no segment in {}", dir.display()))
    }

    /// Appends `records` random records over `keys` keys to the input topic (created with
    /// [`PARTITIONS`] partitions if missing), synced; returns the model of what it wrote.
    pub(crate) fn append_input(&self, rng: &mut StdRng, records: usize, keys: u32) -> Counts {
        let records: Vec<String> = (0..records)
            .map(|_| format!("key-{}", rng.random_range(0..keys)))
            .collect();
        self.append_keys(&records)
    }

    /// Appends one record per key in `keys` (in order) to the input topic, synced; returns
    /// their counts.
    pub(crate) fn append_keys(&self, keys: &[String]) -> Counts {
        let log = Log::open(&self.log_dir, LogOptions::default()).expect("open the log");
        log.create_topic(INPUT, PARTITIONS)
            .expect("create the input");
        let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
            .map(|_| BatchBuilder::new(Compression::None))
            .collect();
        let mut counts = Counts::new();
        let now = now_ms();
        for (i, key) in keys.iter().enumerate() {
            let p = partition_for_key(key.as_bytes(), PARTITIONS);
            let builder = &mut builders[p as usize];
            builder.push(now + i as i64, Some(key.as_bytes()), Some(b"1"));
            if builder.len() >= RECORDS_PER_BATCH {
                log.append(&TopicPartition::new(INPUT, p), builder)
                    .expect("append input");
            }
            *counts.entry(key.clone()).or_default() += 1;
        }
        for (p, builder) in builders.iter_mut().enumerate() {
            log.append(&TopicPartition::new(INPUT, p as u32), builder)
                .expect("append input");
        }
        log.sync().expect("sync the input");
        counts
    }

    /// Appends `records` (key, timestamp) in order to the input topic (created with
    /// [`PARTITIONS`] partitions if missing), synced; returns them by partition, in the order
    /// each partition got them.
    pub(crate) fn append_timestamped(&self, records: &[(String, i64)]) -> Vec<Vec<(String, i64)>> {
        let log = Log::open(&self.log_dir, LogOptions::default()).expect("open the log");
        log.create_topic(INPUT, PARTITIONS)
            .expect("create the input");
        let mut builders: Vec<BatchBuilder> = (0..PARTITIONS)
            .map(|_| BatchBuilder::new(Compression::None))
            .collect();
        let mut by_partition = vec![Vec::new(); PARTITIONS as usize];
        for (key, ts) in records {
            let p = partition_for_key(key.as_bytes(), PARTITIONS);
            let builder = &mut builders[p as usize];
            builder.push(*ts, Some(key.as_bytes()), Some(b"1"));
            if builder.len() >= RECORDS_PER_BATCH {
                log.append(&TopicPartition::new(INPUT, p), builder)
                    .expect("append input");
            }
            by_partition[p as usize].push((key.clone(), *ts));
        }
        for (p, builder) in builders.iter_mut().enumerate() {
            log.append(&TopicPartition::new(INPUT, p as u32), builder)
                .expect("append input");
        }
        log.sync().expect("sync the input");
        by_partition
    }

    /// `riffle sample windowed-count` over this fixture, with the window flags `windows`.
    pub(crate) fn windowed_sample(
        &self,
        store: &str,
        guarantee: &str,
        windows: &[&str],
        extra: &[String],
    ) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_riffle"));
        cmd.args(["sample", "windowed-count", "--log-dir"])
            .arg(&self.log_dir)
            .args(["--input", INPUT, "--output", OUTPUT, "--state-dir"])
            .arg(&self.state_dir)
            .args(["--application-id", APP, "--store", store])
            .args(["--processing-guarantee", guarantee])
            .args(windows)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Every record of the output topic, read by `riffle consume --key-serde windowed-string
    /// --window-size SIZE --value-serde long`: each `key@start/end` with the counts written for
    /// it, in order.
    pub(crate) fn output_windows(&self, window_size: &str) -> BTreeMap<String, Vec<i64>> {
        let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
            .args(["consume", "--log-dir"])
            .arg(&self.log_dir)
            .args(["--topic", OUTPUT, "--from-beginning"])
            .args([
                "--key-serde",
                "windowed-string",
                "--window-size",
                window_size,
            ])
            .args(["--value-serde", "long"])
            .output()
            .expect("run riffle consume");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "riffle consume failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut windows: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for line in stdout.lines() {
            let (key, value) = line.split_once('\t').expect("key<TAB>value");
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("{line:?}: not a count"));
            windows.entry(key.to_owned()).or_default().push(value);
        }
        windows
    }

    /// The sum of the application's committed input offsets, read from its group offsets file
    /// (FORMAT.md) without opening the log, so a torn tail a kill left is for the sample to find.
    /// Only steers when to kill and how kills are reported: 0 if the file is absent or not in
    /// the format this knows.
    pub(crate) fn committed_input(&self) -> u64 {
        let path = self.log_dir.join("groups").join(format!("{APP}.offsets"));
        let bytes = std::fs::read(path).unwrap_or_default();
        let be = |at: usize, n: usize| -> Option<u64> {
            let field = bytes.get(at..at.checked_add(n)?)?;
            Some(field.iter().fold(0, |acc, &b| (acc << 8) | u64::from(b)))
        };
        let parse = || -> Option<u64> {
            if bytes.get(..4)? != b"RFGO" {
                return None;
            }
            let mut at = 10;
            let mut sum = 0;
            for _ in 0..be(6, 4)? {
                let topic_len = be(at, 2)? as usize;
                let topic = bytes.get(at + 2..at + 2 + topic_len)?;
                at += 2 + topic_len + 4;
                if topic == INPUT.as_bytes() {
                    sum += be(at, 8)?;
                }
                at += 8;
            }
            Some(sum)
        };
        parse().unwrap_or(0)
    }

    /// The bytes in the output topic's segments: they grow at every commit that flushed counts,
    /// whatever the processing guarantee.
    pub(crate) fn output_bytes(&self) -> u64 {
        let dir = self.log_dir.join("topics").join(OUTPUT);
        let Ok(partitions) = std::fs::read_dir(dir) else {
            return 0;
        };
        partitions
            .flatten()
            .filter_map(|p| std::fs::read_dir(p.path()).ok())
            .flat_map(|files| files.flatten())
            .filter(|f| f.path().extension().is_some_and(|e| e == "log"))
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// `riffle sample group-by-key-count` over this fixture.
    pub(crate) fn sample(&self, store: &str, guarantee: &str, extra: &[String]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_riffle"));
        cmd.args(["sample", "group-by-key-count", "--log-dir"])
            .arg(&self.log_dir)
            .args(["--input", INPUT, "--output", OUTPUT, "--state-dir"])
            .arg(&self.state_dir)
            .args(["--application-id", APP, "--store", store])
            .args(["--processing-guarantee", guarantee])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// The counts in the output topic, latest per key, read by `riffle consume`.
    pub(crate) fn output_counts(&self) -> Counts {
        let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
            .args(["consume", "--log-dir"])
            .arg(&self.log_dir)
            .args(["--topic", OUTPUT, "--from-beginning", "--latest-per-key"])
            .args(["--value-serde", "long"])
            .output()
            .expect("run riffle consume");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "riffle consume failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .map(|line| {
                let (key, value) = line.split_once('\t').expect("key<TAB>value");
                let value = value
                    .parse()
                    .unwrap_or_else(|_| panic!("{line:?}: not a count"));
                (key.to_owned(), value)
            })
            .collect()
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Adds `more` into `model`.
pub(crate) fn merge(model: &mut Counts, more: &Counts) {
    for (key, n) in more {
        *model.entry(key.clone()).or_default() += n;
    }
}

/// The seed from `RIFFLE_CRASH_SEED`, or a fresh one; printed so a failure can be replayed.
pub(crate) fn seed(scenario: &str) -> u64 {
    let seed = match std::env::var("RIFFLE_CRASH_SEED") {
        Ok(s) => s.parse().expect("RIFFLE_CRASH_SEED: a u64"),
        Err(_) => rand::rng().random(),
    };
    println!("{scenario}: seed {seed} (replay with RIFFLE_CRASH_SEED={seed})");
    seed
}

/// Kill points per crash scenario: `RIFFLE_CRASH_KILLS`, or `default`.
pub(crate) fn kills(default: usize) -> usize {
    std::env::var("RIFFLE_CRASH_KILLS")
        .map(|s| s.parse().expect("RIFFLE_CRASH_KILLS: a count"))
        .unwrap_or(default)
}

/// Panics, showing the run's output, unless it exited successfully without a panic or an
/// error logged.
pub(crate) fn assert_clean_exit(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("panicked") && !stderr.contains("ERROR"),
        "{what} failed ({}):\nstdout: {}\nstderr: {stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
    );
}

/// Runs `cmd` to its end; panics unless it succeeded. Returns its stderr.
pub(crate) fn run_to_end(what: &str, mut cmd: Command) -> String {
    let out = cmd.output().expect("spawn riffle");
    assert_clean_exit(what, &out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// How a run that was to be killed ended.
pub(crate) enum Ending {
    /// SIGKILLed after this long.
    Killed(Duration),
    /// It drained its input and exited on its own first, after this long.
    Exited(Duration),
}

/// When to SIGKILL a run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KillAt {
    /// This long after it started.
    After(Duration),
    /// This long after its first commit appended to the output (or `limit` after it started,
    /// whichever comes first), so the kill lands while it processes and commits.
    AfterFirstCommit { delay: Duration, limit: Duration },
}

/// Spawns `cmd` and SIGKILLs it at `at`. A run that ends before (or while) it is killed must have
/// succeeded; one that fails or panics fails the test with its output.
pub(crate) fn run_and_kill(what: &str, fixture: &Fixture, mut cmd: Command, at: KillAt) -> Ending {
    let output = fixture.output_bytes();
    let start = Instant::now();
    let mut child: Child = cmd.spawn().expect("spawn riffle");
    let mut deadline = match at {
        KillAt::After(after) => Some(start + after),
        KillAt::AfterFirstCommit { .. } => None,
    };
    // Poll rather than sleep: a child that fails early is reported at once.
    let mut exited = None;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            exited = Some(status);
            break;
        }
        let now = Instant::now();
        match (deadline, at) {
            (Some(d), _) if now >= d => break,
            (None, KillAt::AfterFirstCommit { delay, limit }) => {
                if fixture.output_bytes() != output {
                    deadline = Some(now + delay);
                } else if now >= start + limit {
                    break;
                }
            }
            _ => {}
        }
        let sleep = deadline.map_or(Duration::from_micros(500), |d| {
            d.saturating_duration_since(now)
                .min(Duration::from_millis(2))
        });
        std::thread::sleep(sleep);
    }
    if exited.is_none() {
        // SIGKILL; a child that exited in between is reaped by the wait below.
        let _ = child.kill();
    }
    let elapsed = start.elapsed();
    let out = child.wait_with_output().expect("wait for riffle");
    if out.status.signal() == Some(9) {
        // Up to the kill, it must not have panicked or logged an error either.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("ERROR"),
            "{what}: a panic or an error before the kill:\n{stderr}"
        );
        return Ending::Killed(elapsed);
    }
    assert_clean_exit(what, &out);
    Ending::Exited(elapsed)
}

/// What a kill-and-restart scenario went through.
#[derive(Debug, Default)]
pub(crate) struct CrashReport {
    /// Runs SIGKILLed before they committed input offsets (starting, restoring, processing, or
    /// in their first commit between appending and committing offsets).
    pub(crate) kills_before_an_offset_commit: usize,
    /// Runs SIGKILLed after committing some of their input but not all.
    pub(crate) kills_mid_input: usize,
    /// Runs SIGKILLed after committing all of their input (while shutting down).
    pub(crate) kills_after_the_last_commit: usize,
    /// Runs that drained their input and exited before their kill.
    pub(crate) clean_exits: usize,
    /// Input records.
    pub(crate) records: usize,
}

impl CrashReport {
    pub(crate) fn kills(&self) -> usize {
        self.kills_before_an_offset_commit + self.kills_mid_input + self.kills_after_the_last_commit
    }
}

/// The kill-9 scenario: `kills` times, maybe append a chunk of input (always when the last run
/// drained it), start the sample with randomized threads, commit interval, cache size and
/// checkpoint delta, and SIGKILL it after a random delay bounded by how long a clean run lately
/// took, so the kill lands anywhere from start-up (restoring) through processing, commits and
/// checkpoints to shutdown. Runs without new input leave what the kill left (a torn tail, say)
/// for the sample itself to recover. Then one last run must drain the input and exit normally.
/// Returns the model of all the input and what happened.
pub(crate) fn kill_and_restart(
    fixture: &Fixture,
    store: &str,
    guarantee: &str,
    kills: usize,
    rng: &mut StdRng,
    seed: u64,
) -> (Counts, CrashReport) {
    let mut model = Counts::new();
    let report = kill_and_restart_with(
        fixture,
        kills,
        rng,
        seed,
        &mut |rng| {
            let records = rng.random_range(5_000..20_000);
            merge(&mut model, &fixture.append_input(rng, records, 1_000));
            records
        },
        &|extra| fixture.sample(store, guarantee, extra),
    );
    (model, report)
}

/// [`kill_and_restart`] for any sample: `append` appends a chunk of input and returns how many
/// records it wrote; `sample` makes the command of a run with the randomized `extra` flags.
pub(crate) fn kill_and_restart_with(
    fixture: &Fixture,
    kills: usize,
    rng: &mut StdRng,
    seed: u64,
    append: &mut dyn FnMut(&mut StdRng) -> usize,
    sample: &dyn Fn(&[String]) -> Command,
) -> CrashReport {
    let mut report = CrashReport::default();
    let mut max_delay = Duration::from_millis(300);
    let mut round = 0;
    let mut drained = true;
    while report.kills() < kills {
        round += 1;
        assert!(
            round <= kills * 4 + 10,
            "seed {seed}: only {} kills landed in {round} rounds",
            report.kills()
        );
        if drained || rng.random_bool(0.5) {
            report.records += append(rng);
        }
        let extra = random_settings(rng);
        let at = if rng.random_bool(0.4) {
            KillAt::After(Duration::from_micros(
                rng.random_range(0..=max_delay.as_micros() as u64),
            ))
        } else {
            KillAt::AfterFirstCommit {
                delay: Duration::from_micros(rng.random_range(0..=8_000)),
                limit: max_delay,
            }
        };
        let what = format!("seed {seed}, round {round}, {extra:?}, kill {at:?}");
        let before = fixture.committed_input();
        let ending = run_and_kill(&what, fixture, sample(&extra), at);
        let after = fixture.committed_input();
        match ending {
            Ending::Killed(_) => {
                let end = report.records as u64;
                if after == before {
                    report.kills_before_an_offset_commit += 1;
                    // Start-up (restoring a growing changelog) may now take longer than the last
                    // clean run did: let later kills reach the processing too.
                    max_delay = max_delay.mul_f64(1.5).min(Duration::from_secs(5));
                } else if after < end {
                    report.kills_mid_input += 1;
                } else {
                    report.kills_after_the_last_commit += 1;
                }
                drained = after == end;
            }
            Ending::Exited(took) => {
                report.clean_exits += 1;
                max_delay = took;
                drained = true;
            }
        }
    }
    let extra = random_settings(rng);
    let what = format!("seed {seed}, the last run, {extra:?}");
    run_to_end(&what, sample(&extra));
    report
}

/// Randomized threads, commit interval, cache size and checkpoint delta for one run.
fn random_settings(rng: &mut StdRng) -> Vec<String> {
    let threads = rng.random_range(1..=3u32);
    let commit = [5u32, 20, 100][rng.random_range(0..3)];
    let cache = [1_024u32, 65_536, 10 << 20][rng.random_range(0..3)];
    let delta = [0u32, 500, 10_000][rng.random_range(0..3)];
    vec![
        "--threads".into(),
        threads.to_string(),
        "--commit-interval-ms".into(),
        commit.to_string(),
        "--set".into(),
        format!("statestore_cache_max_bytes={cache}"),
        "--set".into(),
        format!("checkpoint_offset_delta={delta}"),
    ]
}

/// Under at-least-once a crash may only add: every key of the input is in the output with at
/// least its model count, and nothing else is.
pub(crate) fn assert_at_least(model: &Counts, got: &Counts, seed: u64) {
    let missing: Vec<_> = model
        .iter()
        .filter(|(k, n)| got.get(*k).is_none_or(|g| g < n))
        .map(|(k, n)| format!("{k}: model {n}, output {:?}", got.get(k)))
        .collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: {} keys counted lower than the input holds: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    let extra: Vec<_> = got.keys().filter(|k| !model.contains_key(*k)).collect();
    assert!(
        extra.is_empty(),
        "seed {seed}: keys not in the input: {extra:?}"
    );
}

/// Exact counts: the output equals the model, key by key.
pub(crate) fn assert_exact(model: &Counts, got: &Counts, context: &str) {
    let diff: Vec<_> = model
        .keys()
        .chain(got.keys())
        .filter(|k| model.get(*k) != got.get(*k))
        .map(|k| format!("{k}: model {:?}, output {:?}", model.get(k), got.get(k)))
        .collect();
    assert!(
        diff.is_empty(),
        "{context}: {} keys differ from the model: {:?}",
        diff.len(),
        &diff[..diff.len().min(20)]
    );
}

/// A fresh RNG from `seed`.
pub(crate) fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `path`'s length.
pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len()
}

/// Runs the `riffle` binary with `args`, `stdin` on its standard input; waits for it.
pub(crate) fn riffle_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn riffle");
    let mut input = child.stdin.take().expect("stdin");
    // riffle may exit before reading it all (on an error): a broken pipe is fine.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("riffle")
}

/// Runs `riffle` with `args` and `stdin`, asserts it succeeded, and returns its standard output.
pub(crate) fn riffle_ok(args: &[&str], stdin: &[u8]) -> String {
    let out = riffle_with_stdin(args, stdin);
    assert!(
        out.status.success(),
        "riffle {args:?} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}
