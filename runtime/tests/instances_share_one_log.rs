//! Many instances (real processes) of one application on one embedded log form one group: they
//! share the tasks, a task runs in one instance at a time, a dead instance's tasks move to the
//! living, and a stopped one that comes back is fenced.
//!
//! Each instance is this test binary run again with `RIFFLE_INSTANCE` set (the `instance` test
//! below then runs the application instead of testing). The application counts records per key
//! with the processor API and writes, for every record it processes, a line to a ledger: the
//! record's partition and offset, the instance's incarnation and the time. The checks are
//! against an independent model (a `HashMap` count of what the test produced) and the ledger:
//! a record processed twice must have been processed first by an incarnation the test killed or
//! stopped in between — otherwise two live instances processed it.
//!
//! `RIFFLE_GROUP_KILLS` sets the kills of the kill -9 test (default 20); `RIFFLE_GROUP_SEED`
//! replays one (the test prints its seed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::{Rng, SeedableRng, rngs::StdRng};
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    EmbeddedBackend, Processor, ProcessorContext, Produced, Record, Result, Serdes, Stores,
    StreamsApp, StreamsBuilder, StreamsConfig,
};

const APP: &str = "ledger-count";
const STORE: &str = "counts";
const PARTITIONS: u32 = 6;
const KEYS: u64 = 60;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

// ---- the instance ------------------------------------------------------------------------

/// Counts per key; writes a ledger line per record.
struct LedgerCount {
    ledger: std::fs::File,
    incarnation: String,
}

impl Processor<String, String, String, String> for LedgerCount {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        let meta = ctx.record_metadata().expect("a source record");
        let line = format!(
            "{} {} {} {}\n",
            meta.partition,
            meta.offset,
            self.incarnation,
            now_ns()
        );
        self.ledger.write_all(line.as_bytes()).expect("ledger");
        let mut store = ctx.get_state_store::<String, i64>(STORE)?;
        let count = store.get(record.key())?.unwrap_or(0) + 1;
        store.put(record.key(), &count)?;
        ctx.forward(Record::new(
            record.key().clone(),
            count.to_string(),
            record.timestamp(),
        ))
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for an instance"))
}

/// Runs when this binary is an instance; a no-op test otherwise.
#[test]
fn instance() {
    if std::env::var("RIFFLE_INSTANCE").is_err() {
        return;
    }
    let dir = PathBuf::from(env("RIFFLE_INSTANCE_DIR"));
    let incarnation = env("RIFFLE_INSTANCE");
    let log = Log::open(dir.join("log"), LogOptions::default()).unwrap();
    let ledger_path = dir.join("ledgers").join(format!("{incarnation}.ledger"));
    let builder = StreamsBuilder::new();
    builder.add_state_store(
        Stores::key_value_store_builder(
            Stores::persistent_key_value_store(STORE),
            Serdes::string(),
            Serdes::i64(),
        )
        .with_caching_enabled(),
    );
    let incarnation_name = incarnation.clone();
    builder
        .stream(
            "in",
            riffle::Consumed::with(Serdes::string(), Serdes::string()),
        )
        .process(
            move || LedgerCount {
                ledger: std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&ledger_path)
                    .unwrap(),
                incarnation: incarnation_name.clone(),
            },
            &[STORE],
        )
        .to("out", Produced::with(Serdes::string(), Serdes::string()));
    let topology = builder.build().unwrap();
    let mut config = StreamsConfig::new(APP);
    config.state_dir = PathBuf::from(env("RIFFLE_INSTANCE_STATE"));
    config.num_stream_threads = env("RIFFLE_INSTANCE_THREADS").parse().unwrap();
    config
        .set("processing.guarantee", &env("RIFFLE_INSTANCE_GUARANTEE"))
        .unwrap();
    config.set("commit.interval.ms", "100").unwrap();
    config
        .set("group.streams.session.timeout.ms", "2000")
        .unwrap();
    config
        .set("group.streams.heartbeat.interval.ms", "200")
        .unwrap();
    config
        .set("num.standby.replicas", &env("RIFFLE_INSTANCE_STANDBYS"))
        .unwrap();
    if let Ok(lag) = std::env::var("RIFFLE_INSTANCE_RECOVERY_LAG") {
        config.set("acceptable.recovery.lag", &lag).unwrap();
    }
    let mut app = StreamsApp::new(topology, config, EmbeddedBackend::new(log).shared()).unwrap();
    app.start().unwrap();
    let stop = dir.join(format!("stop-{incarnation}"));
    // Stops when asked, or when the test is gone (its directory removed). Meanwhile says how
    // many records it restored so far.
    let restored_path = dir.join(format!("restored-{incarnation}"));
    let tmp = dir.join(format!("restored-{incarnation}.tmp"));
    while !stop.exists() && dir.exists() {
        if std::fs::write(&tmp, app.records_restored().to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &restored_path);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let restored = app.records_restored();
    let fenced: u64 = app.thread_metrics().iter().map(|t| t.fenced()).sum();
    app.close().unwrap();
    println!("RESTORED {restored} FENCED {fenced}");
}

// ---- the harness -------------------------------------------------------------------------

/// The tests of this file run one at a time: each starts several processes, and two at once on
/// a small machine could starve an instance past its session timeout.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One run of an instance; killed if dropped running (a failed test leaves no process behind).
struct Instance {
    name: String,
    child: Option<Child>,
    dir: PathBuf,
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Clone, Copy)]
struct Spec<'a> {
    guarantee: &'a str,
    threads: u32,
    standbys: u32,
    /// `acceptable.recovery.lag`, if not the default.
    recovery_lag: Option<u64>,
}

/// What the test did to an incarnation, and when.
#[derive(Default)]
struct Events {
    /// Incarnation → when it was killed or stopped: the time before the signal was sent and
    /// the time after it took effect (the process died or stopped somewhere between).
    stopped: HashMap<String, Vec<(u128, u128)>>,
}

impl Instance {
    fn spawn(dir: &Path, name: &str, state: &str, spec: Spec<'_>) -> Instance {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["instance", "--exact", "--nocapture", "--test-threads=1"])
            .env("RIFFLE_INSTANCE", name)
            .env("RIFFLE_INSTANCE_DIR", dir)
            .env("RIFFLE_INSTANCE_STATE", dir.join(state))
            .env("RIFFLE_INSTANCE_THREADS", spec.threads.to_string())
            .env("RIFFLE_INSTANCE_GUARANTEE", spec.guarantee)
            .env("RIFFLE_INSTANCE_STANDBYS", spec.standbys.to_string())
            .env(
                "RIFFLE_INSTANCE_RECOVERY_LAG",
                spec.recovery_lag.unwrap_or(10_000).to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Instance {
            name: name.to_owned(),
            child: Some(child),
            dir: dir.to_path_buf(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {}", self.pid());
    }

    fn kill9(mut self, events: &mut Events) {
        let before = now_ns();
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        events
            .stopped
            .entry(self.name.clone())
            .or_default()
            .push((before, now_ns()));
    }

    /// The records it restored so far, as it last said.
    fn restored_so_far(&self) -> u64 {
        std::fs::read_to_string(self.dir.join(format!("restored-{}", self.name)))
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// Stops it gracefully; returns (records restored, fenced count) as it printed them.
    fn stop(mut self) -> (u64, u64) {
        std::fs::write(self.dir.join(format!("stop-{}", self.name)), b"").unwrap();
        let out = self.child.take().unwrap().wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "instance {} failed ({}): {stdout}\n{stderr}",
            self.name,
            out.status
        );
        let line = stdout
            .lines()
            .find_map(|l| l.find("RESTORED").map(|at| &l[at..]))
            .unwrap_or_else(|| panic!("instance {} printed no summary: {stdout}", self.name));
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields[1].parse().unwrap(), fields[3].parse().unwrap())
    }
}

/// The log, the producer and the model.
struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    log: Log,
    model: HashMap<String, i64>,
    produced: u64,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("ledgers")).unwrap();
        let log = Log::open(dir.join("log"), LogOptions::default()).unwrap();
        log.create_topic("in", PARTITIONS).unwrap();
        log.create_topic("out", PARTITIONS).unwrap();
        Fixture {
            _tmp: tmp,
            dir,
            log,
            model: HashMap::new(),
            produced: 0,
        }
    }

    /// Appends `n` records over the keys, one batch per partition.
    fn produce(&mut self, n: u64) {
        self.produce_keyed(n, |i| format!("k{}", i % KEYS));
    }

    /// `rounds` rounds of `n` records `pause` apart, then waits until all are committed.
    fn produce_in_rounds(&mut self, rounds: u32, n: u64, pause: Duration) {
        for _ in 0..rounds {
            self.produce(n);
            std::thread::sleep(pause);
        }
        self.wait_committed(Duration::from_secs(60));
    }

    /// Appends `n` records, each of a key of its own (a changelog record each).
    fn produce_distinct(&mut self, n: u64) {
        self.produce_keyed(n, |i| format!("d{i}"));
    }

    /// Appends `n` records, record `i` (counting from the first ever produced) under `key(i)`,
    /// one batch per partition.
    fn produce_keyed(&mut self, n: u64, key: impl Fn(u64) -> String) {
        let mut batches: Vec<BatchBuilder> = (0..PARTITIONS)
            .map(|_| BatchBuilder::new(Compression::None))
            .collect();
        for _ in 0..n {
            let i = self.produced;
            self.produced += 1;
            let key = key(i);
            let p = partition_for_key(key.as_bytes(), PARTITIONS);
            batches[p as usize].push(0, Some(key.as_bytes()), Some(i.to_string().as_bytes()));
            *self.model.entry(key).or_default() += 1;
        }
        for (p, b) in batches.iter_mut().enumerate() {
            if !b.is_empty() {
                self.log
                    .append(&TopicPartition::new("in", p as u32), b)
                    .unwrap();
            }
        }
    }

    /// Waits until the application committed everything produced.
    fn wait_committed(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let done = (0..PARTITIONS).all(|p| {
                let tp = TopicPartition::new("in", p);
                let end = self.log.end_offset(&tp).unwrap();
                self.log.committed_offset(APP, &tp).unwrap().unwrap_or(0) >= end
            });
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the application did not commit all {} records within {timeout:?}",
                self.produced
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last count per key in `out` (read committed: a fresh handle).
    fn output_counts(&self) -> HashMap<String, i64> {
        let mut counts = HashMap::new();
        for p in 0..PARTITIONS {
            let tp = TopicPartition::new("out", p);
            let end = self.log.end_offset(&tp).unwrap();
            let mut at = 0;
            while at < end {
                let batches = self.log.fetch(&tp, at, 1 << 20).unwrap();
                let Some(last) = batches.last().map(|b| b.last_offset()) else {
                    break;
                };
                for batch in &batches {
                    for r in batch.records() {
                        let r = r.unwrap();
                        if r.offset() < at {
                            continue;
                        }
                        let key = String::from_utf8_lossy(r.key().unwrap()).into_owned();
                        let value: i64 =
                            String::from_utf8_lossy(r.value().unwrap()).parse().unwrap();
                        counts.insert(key, value);
                    }
                }
                at = last + 1;
            }
        }
        counts
    }

    /// Every ledger line: (partition, offset) → [(time, incarnation)], by time.
    fn ledger(&self) -> BTreeMap<(u32, u64), Vec<(u128, String)>> {
        let mut out: BTreeMap<(u32, u64), Vec<(u128, String)>> = BTreeMap::new();
        for entry in std::fs::read_dir(self.dir.join("ledgers")).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                if f.len() != 4 {
                    continue; // a line cut by kill -9
                }
                out.entry((f[0].parse().unwrap(), f[1].parse().unwrap()))
                    .or_default()
                    .push((f[3].parse().unwrap(), f[2].to_owned()));
            }
        }
        for v in out.values_mut() {
            v.sort();
        }
        out
    }

    /// No record was processed by two live instances: every record processed more than once
    /// was processed first by an incarnation killed or stopped before the next processed it.
    /// Returns the records processed more than once.
    fn check_ledger(&self, events: &Events) -> usize {
        let ledger = self.ledger();
        assert_eq!(
            ledger.len() as u64,
            self.produced,
            "every record produced is in the ledger"
        );
        let mut repeated = 0;
        for ((p, o), entries) in &ledger {
            if entries.len() > 1 {
                repeated += 1;
            }
            for pair in entries.windows(2) {
                let [(t1, a), (t2, b)] = pair else { continue };
                // `a` may have processed it up to when the signal took effect, and `b` only
                // after it was sent.
                let a_stopped_between = events
                    .stopped
                    .get(a)
                    .is_some_and(|ts| ts.iter().any(|(sent, done)| t1 <= done && sent <= t2));
                assert!(
                    a_stopped_between,
                    "record in-{p}@{o} was processed by {a} at {t1} and again by {b} at {t2}, \
                     though {a} was neither killed nor stopped in between: two live instances \
                     processed it"
                );
            }
        }
        repeated
    }
}

fn seed() -> u64 {
    std::env::var("RIFFLE_GROUP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

/// Produces `per_tick` records every `tick` on a thread until stopped.
fn background_producer(
    fixture: Arc<std::sync::Mutex<Fixture>>,
    per_tick: u64,
    tick: Duration,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>, Arc<AtomicU64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (s, c) = (stop.clone(), count.clone());
    let handle = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            fixture.lock().unwrap().produce(per_tick);
            c.fetch_add(per_tick, Ordering::Relaxed);
            std::thread::sleep(tick);
        }
    });
    (stop, handle, count)
}

// ---- the tests ---------------------------------------------------------------------------

/// Two instances started as a new user would (same application id, own state directories)
/// split the tasks and count exactly: no record is processed twice.
#[test]
fn two_instances_split_the_tasks_and_count_exactly() {
    let _serial = one_at_a_time();
    let mut f = Fixture::new();
    let spec = Spec {
        guarantee: "at_least_once",
        threads: 2,
        standbys: 0,
        recovery_lag: None,
    };
    let a = Instance::spawn(&f.dir, "a", "state-a", spec);
    let b = Instance::spawn(&f.dir, "b", "state-b", spec);
    f.produce_in_rounds(20, 500, Duration::from_millis(50));
    a.stop();
    b.stop();
    assert_eq!(f.output_counts(), f.model);
    assert_eq!(
        f.check_ledger(&Events::default()),
        0,
        "no record processed twice"
    );
    let by: std::collections::HashSet<String> = f
        .ledger()
        .values()
        .flat_map(|v| v.iter().map(|(_, i)| i.clone()))
        .collect();
    assert_eq!(by.len(), 2, "both instances processed records: {by:?}");
}

/// Scale out 1 → 2 → 4 and back to 1 while producing, under exactly_once: exact counts, and no
/// record processed twice (a moving task is committed and closed before it starts elsewhere).
#[test]
fn scale_out_and_in_while_producing_counts_exactly() {
    let _serial = one_at_a_time();
    let fixture = Arc::new(std::sync::Mutex::new(Fixture::new()));
    let dir = fixture.lock().unwrap().dir.clone();
    let spec = Spec {
        guarantee: "exactly_once",
        threads: 1,
        standbys: 0,
        recovery_lag: None,
    };
    let (stop, producer, _) = background_producer(fixture.clone(), 60, Duration::from_millis(20));
    let pause = || std::thread::sleep(Duration::from_millis(1500));
    let mut running = vec![Instance::spawn(&dir, "i0", "state-0", spec)];
    pause();
    running.push(Instance::spawn(&dir, "i1", "state-1", spec));
    pause();
    running.push(Instance::spawn(&dir, "i2", "state-2", spec));
    running.push(Instance::spawn(&dir, "i3", "state-3", spec));
    pause();
    for _ in 0..3 {
        running.pop().unwrap().stop();
        pause();
    }
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let f = fixture.lock().unwrap();
    f.wait_committed(Duration::from_secs(60));
    running.pop().unwrap().stop();
    assert_eq!(f.output_counts(), f.model);
    assert_eq!(
        f.check_ledger(&Events::default()),
        0,
        "no record processed twice"
    );
    println!("scale 1 → 2 → 4 → 1: {} records, exact", f.produced);
}

fn kill_9_again_and_again(guarantee: &str) {
    let _serial = one_at_a_time();
    let seed = seed();
    println!("kill -9 {guarantee}: seed {seed} (RIFFLE_GROUP_SEED replays it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let kills: usize = std::env::var("RIFFLE_GROUP_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let fixture = Arc::new(std::sync::Mutex::new(Fixture::new()));
    let dir = fixture.lock().unwrap().dir.clone();
    let spec = Spec {
        guarantee,
        threads: 2,
        standbys: 0,
        recovery_lag: None,
    };
    let mut events = Events::default();
    let mut incarnations = 0;
    let spawn = |slot: usize, incarnations: &mut usize| {
        *incarnations += 1;
        Instance::spawn(
            &dir,
            &format!("s{slot}-{incarnations}"),
            &format!("state-{slot}"),
            spec,
        )
    };
    let mut slots: Vec<Instance> = (0..3).map(|s| spawn(s, &mut incarnations)).collect();
    let (stop, producer, _) = background_producer(fixture.clone(), 30, Duration::from_millis(20));
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        let slot = rng.random_range(0..slots.len());
        let replacement = spawn(slot, &mut incarnations);
        let victim = std::mem::replace(&mut slots[slot], replacement);
        victim.kill9(&mut events);
    }
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let f = fixture.lock().unwrap();
    f.wait_committed(Duration::from_secs(120));
    for i in slots {
        i.stop();
    }
    let got = f.output_counts();
    if guarantee == "exactly_once" {
        assert_eq!(got, f.model, "exactly_once counts are exact (seed {seed})");
    } else {
        for (k, n) in &f.model {
            assert!(
                got.get(k).copied().unwrap_or(0) >= *n,
                "key {k}: counted {:?} < {n} produced (seed {seed})",
                got.get(k)
            );
        }
    }
    let repeated = f.check_ledger(&events);
    println!(
        "kill -9 {guarantee}: {kills} kills over 3 instances × 2 threads, {} records, {repeated} processed again after a kill",
        f.produced
    );
}

/// 3 instances × 2 threads counting under load; a random instance is killed with -9 and
/// restarted, again and again: exactly_once counts are exact, and no record is processed by two
/// live instances.
#[test]
fn kill_9_random_instances_under_exactly_once_counts_exactly() {
    kill_9_again_and_again("exactly_once");
}

/// The same under at_least_once: counts never lower.
#[test]
fn kill_9_random_instances_under_at_least_once_never_loses_a_count() {
    kill_9_again_and_again("at_least_once");
}

/// An instance stopped (SIGSTOP) past its session is declared gone and its tasks move; when it
/// continues (SIGCONT) it is fenced — it processes nothing its successor owns — and rejoins.
#[test]
fn a_stopped_instance_is_fenced_and_rejoins() {
    let _serial = one_at_a_time();
    for guarantee in ["at_least_once", "exactly_once"] {
        let fixture = Arc::new(std::sync::Mutex::new(Fixture::new()));
        let dir = fixture.lock().unwrap().dir.clone();
        let spec = Spec {
            guarantee,
            threads: 2,
            standbys: 0,
            recovery_lag: None,
        };
        let a = Instance::spawn(&dir, "a", "state-a", spec);
        let b = Instance::spawn(&dir, "b", "state-b", spec);
        let (stop, producer, _) =
            background_producer(fixture.clone(), 30, Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(1500));
        let mut events = Events::default();
        let sent = now_ns();
        a.signal("-STOP");
        // `kill` returns once the signal is sent; a stop takes effect within milliseconds.
        std::thread::sleep(Duration::from_millis(100));
        events
            .stopped
            .entry("a".into())
            .or_default()
            .push((sent, now_ns()));
        // Past the 3 s session: b takes every task.
        std::thread::sleep(Duration::from_millis(6000));
        let continued = now_ns();
        a.signal("-CONT");
        std::thread::sleep(Duration::from_millis(3000));
        stop.store(true, Ordering::Relaxed);
        producer.join().unwrap();
        let f = fixture.lock().unwrap();
        f.wait_committed(Duration::from_secs(60));
        let (_, fenced_a) = a.stop();
        b.stop();
        let ledger = f.ledger();
        let a_after = ledger
            .values()
            .flatten()
            .filter(|(t, i)| i == "a" && *t > continued)
            .count();
        assert!(fenced_a > 0, "{guarantee}: the stopped instance was fenced");
        assert!(
            a_after > 0,
            "{guarantee}: the stopped instance rejoined and processed again"
        );
        let got = f.output_counts();
        if guarantee == "exactly_once" {
            assert_eq!(got, f.model, "exactly_once: exact");
        } else {
            for (k, n) in &f.model {
                assert!(
                    got.get(k).copied().unwrap_or(0) >= *n,
                    "key {k} lost a count"
                );
            }
        }
        f.check_ledger(&events);
        println!(
            "SIGSTOP {guarantee}: fenced {fenced_a} time(s), rejoined, {a_after} records after"
        );
    }
}

/// With `num.standby.replicas=1`, the survivor of a kill -9 restores only what its standby
/// had not applied; without standbys it restores the dead instance's whole state.
#[test]
fn a_standby_makes_failover_restore_almost_nothing() {
    let _serial = one_at_a_time();
    let mut restored = Vec::new();
    for standbys in [0, 1] {
        let mut f = Fixture::new();
        let spec = Spec {
            guarantee: "at_least_once",
            threads: 1,
            standbys,
            recovery_lag: None,
        };
        let a = Instance::spawn(&f.dir, "a", "state-a", spec);
        let b = Instance::spawn(&f.dir, "b", "state-b", spec);
        f.produce_in_rounds(20, 1000, Duration::from_millis(20));
        // Let standbys catch up with the last commit's changelog records.
        std::thread::sleep(Duration::from_millis(1500));
        let before = b.restored_so_far();
        let mut events = Events::default();
        a.kill9(&mut events);
        f.produce(600);
        f.wait_committed(Duration::from_secs(60));
        let (b_restored, _) = b.stop();
        let b_restored = b_restored - before;
        for (k, n) in &f.model {
            assert!(f.output_counts().get(k).copied().unwrap_or(0) >= *n);
        }
        println!("standbys {standbys}: the survivor restored {b_restored} records on failover");
        restored.push(b_restored);
    }
    assert!(
        restored[0] > 0,
        "without a standby the survivor restores the dead instance's state"
    );
    assert!(
        restored[1] * 10 <= restored[0],
        "with a standby it restores far less: {restored:?}"
    );
}

/// A stateful task that would move to an instance far behind on its changelog (more than
/// `acceptable.recovery.lag`) is first warmed up there while it stays active where it is; once
/// the warm-up caught up it moves, and the counts stay exact.
#[test]
fn a_lagging_instance_warms_up_before_it_takes_tasks() {
    let _serial = one_at_a_time();
    let mut f = Fixture::new();
    let spec = Spec {
        guarantee: "exactly_once",
        threads: 1,
        standbys: 0,
        recovery_lag: Some(10),
    };
    let a = Instance::spawn(&f.dir, "a", "state-a", spec);
    // A changelog long enough that a warm-up takes a few heartbeats to catch up.
    f.produce_distinct(60_000);
    f.wait_committed(Duration::from_secs(60));
    let b = Instance::spawn(&f.dir, "b", "state-b", spec);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut warmed, mut settled) = (false, false);
    while !settled {
        assert!(
            Instant::now() < deadline,
            "the group did not settle with both instances active (warm-ups seen: {warmed})"
        );
        std::thread::sleep(Duration::from_millis(2));
        let Some(view) = f.log.describe_group(APP).unwrap() else {
            continue;
        };
        let record = riffle::backend::GroupRecord::decode(&view.data).unwrap();
        warmed |= record
            .members
            .values()
            .any(|m| !m.target.warmup.is_empty() || !m.current.warmup.is_empty());
        let processes: std::collections::HashSet<&str> = record
            .members
            .values()
            .filter(|m| !m.current.active.is_empty())
            .map(|m| m.process.as_str())
            .collect();
        settled = processes.len() == 2
            && record
                .members
                .values()
                .all(|m| m.target == m.current && m.target.warmup.is_empty());
    }
    if !warmed {
        let view = f.log.describe_group(APP).unwrap().unwrap();
        panic!(
            "tasks moving to the empty instance were not warmed up first: {}",
            String::from_utf8_lossy(&view.data)
        );
    }
    f.produce(2000);
    f.wait_committed(Duration::from_secs(60));
    a.stop();
    b.stop();
    assert_eq!(f.output_counts(), f.model);
    assert_eq!(
        f.check_ledger(&Events::default()),
        0,
        "no record processed twice"
    );
}
