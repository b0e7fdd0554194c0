//! Several `Log` handles on one directory, as separate processes open it (each handle has its
//! own file descriptors, so the OS file locks exclude them from each other as they would
//! processes): random appends, fetches, commits, transactions, restarts and torn tails left by a
//! killed writer, against a model (one `Vec` per partition, one map of committed offsets).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::read_all;
use proptest::prelude::*;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

const TOPIC: &str = "t";
const PARTITIONS: u32 = 3;
const INPUT: &str = "in";
const INPUT_PARTITIONS: u32 = 2;
const GROUPS: [&str; 2] = ["app-a", "app-b"];

fn options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(600)
        .with_index_interval_bytes(100)
        .with_txn_journal_bytes(2_000)
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

fn batch(values: &[String]) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None);
    for (i, v) in values.iter().enumerate() {
        b.push(i as i64, Some(b"k"), Some(v.as_bytes()));
    }
    b
}

fn values(log: &Log, tp: &TopicPartition) -> Vec<String> {
    read_all(log, tp, 0, 1 << 20)
        .into_iter()
        .map(|(_, (_, _, v))| String::from_utf8(v.expect("value")).expect("utf-8"))
        .collect()
}

fn last_segment(dir: &Path, p: u32) -> PathBuf {
    let pdir = dir.join("topics").join(TOPIC).join(p.to_string());
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    segments.pop().expect("a segment")
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        h: usize,
        p: u32,
        n: usize,
    },
    Fetch {
        h: usize,
        p: u32,
    },
    /// Commits `offset` for input partition `ip`: handles committing different partitions
    /// of one group must never lose each other's.
    Commit {
        h: usize,
        g: usize,
        ip: u32,
        offset: u64,
    },
    Committed {
        h: usize,
        g: usize,
        ip: u32,
    },
    Txn {
        h: usize,
        g: usize,
        parts: Vec<(u32, usize)>,
        ip: u32,
        offset: u64,
    },
    Changes {
        h: usize,
    },
    Restart {
        h: usize,
    },
    /// A writer killed mid-batch left these bytes at the end of the active segment.
    TornTail {
        p: u32,
        bytes: usize,
    },
}

fn op(handles: usize) -> impl Strategy<Value = Op> {
    let h = 0..handles;
    prop_oneof![
        4 => (h.clone(), 0..PARTITIONS, 1..5usize).prop_map(|(h, p, n)| Op::Append { h, p, n }),
        2 => (h.clone(), 0..PARTITIONS).prop_map(|(h, p)| Op::Fetch { h, p }),
        2 => (h.clone(), 0..2usize, 0..INPUT_PARTITIONS, 0..100u64)
            .prop_map(|(h, g, ip, offset)| Op::Commit { h, g, ip, offset }),
        2 => (h.clone(), 0..2usize, 0..INPUT_PARTITIONS).prop_map(|(h, g, ip)| Op::Committed { h, g, ip }),
        3 => (
            h.clone(),
            0..2usize,
            proptest::collection::vec((0..PARTITIONS, 0..4usize), 1..3),
            0..INPUT_PARTITIONS,
            0..100u64
        )
            .prop_map(|(h, g, parts, ip, offset)| Op::Txn { h, g, parts, ip, offset }),
        2 => h.clone().prop_map(|h| Op::Changes { h }),
        1 => h.prop_map(|h| Op::Restart { h }),
        1 => (0..PARTITIONS, 1..70usize).prop_map(|(p, bytes)| Op::TornTail { p, bytes }),
    ]
}

struct World {
    dir: tempfile::TempDir,
    handles: Vec<Log>,
    /// Each handle's last seen append version, and the partitions appended to since.
    seen: Vec<(u64, BTreeSet<u32>)>,
    model: Vec<Vec<String>>,
    /// Committed offsets by (group, input partition).
    offsets: HashMap<(usize, u32), u64>,
    next_value: usize,
    /// A whole batch as a segment stores it (longer than any torn tail written).
    torn_template: Vec<u8>,
    /// Partitions whose active segment ends in a torn tail no writer has cut yet (a killed
    /// writer leaves at most one: the next one cuts it before writing).
    torn: BTreeSet<u32>,
}

/// The bytes of one stored batch of a few records (written through a scratch log).
fn batch_bytes() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), options()).expect("open");
    log.create_topic(TOPIC, 1).expect("create");
    log.append(&tp(0), &mut batch(&vec!["x".repeat(20); 4]))
        .expect("append");
    std::fs::read(last_segment(dir.path(), 0)).expect("read")
}

impl World {
    fn new(handles: usize) -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Log::open(dir.path(), options()).expect("open");
        first.create_topic(TOPIC, PARTITIONS).expect("create");
        first.create_topic(INPUT, INPUT_PARTITIONS).expect("create");
        let mut logs = vec![first];
        for _ in 1..handles {
            logs.push(Log::open(dir.path(), options()).expect("open"));
        }
        let seen = logs
            .iter()
            .map(|l| (l.append_version(), BTreeSet::new()))
            .collect();
        World {
            dir,
            handles: logs,
            seen,
            model: vec![Vec::new(); PARTITIONS as usize],
            offsets: HashMap::new(),
            next_value: 0,
            torn_template: batch_bytes(),
            torn: BTreeSet::new(),
        }
    }

    fn fresh(&mut self, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                self.next_value += 1;
                format!("v{}", self.next_value)
            })
            .collect()
    }

    fn appended(&mut self, p: u32) {
        for (_, since) in &mut self.seen {
            since.insert(p);
        }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append { h, p, n } => {
                let values = self.fresh(*n);
                let base = self.handles[*h]
                    .append(&tp(*p), &mut batch(&values))
                    .expect("append");
                assert_eq!(base, self.model[*p as usize].len() as u64, "{op:?}");
                self.torn.remove(p);
                self.model[*p as usize].extend(values);
                self.appended(*p);
            }
            Op::Fetch { h, p } => {
                let log = &self.handles[*h];
                assert_eq!(values(log, &tp(*p)), self.model[*p as usize], "{op:?}");
                assert_eq!(
                    log.end_offset(&tp(*p)).expect("end"),
                    self.model[*p as usize].len() as u64
                );
            }
            Op::Commit { h, g, ip, offset } => {
                self.handles[*h]
                    .commit_offsets(GROUPS[*g], &[(TopicPartition::new(INPUT, *ip), *offset)])
                    .expect("commit");
                self.offsets.insert((*g, *ip), *offset);
            }
            Op::Committed { h, g, ip } => {
                let got = self.handles[*h]
                    .committed_offset(GROUPS[*g], &TopicPartition::new(INPUT, *ip))
                    .expect("committed");
                assert_eq!(got, self.offsets.get(&(*g, *ip)).copied(), "{op:?}");
            }
            Op::Txn {
                h,
                g,
                parts,
                ip,
                offset,
            } => {
                let mut builders: Vec<(TopicPartition, BatchBuilder)> = Vec::new();
                let mut expected: BTreeMap<u32, Vec<String>> = BTreeMap::new();
                for &(p, n) in parts {
                    let values = self.fresh(n);
                    expected
                        .entry(p)
                        .or_default()
                        .extend(values.iter().cloned());
                    builders.push((tp(p), batch(&values)));
                }
                let mut refs: Vec<(TopicPartition, &mut BatchBuilder)> =
                    builders.iter_mut().map(|(t, b)| (t.clone(), b)).collect();
                self.handles[*h]
                    .commit_transaction(
                        GROUPS[*g],
                        &mut refs,
                        &[(TopicPartition::new(INPUT, *ip), *offset)],
                    )
                    .expect("transaction");
                for &(p, _) in parts {
                    self.torn.remove(&p);
                }
                for (p, values) in expected {
                    if !values.is_empty() {
                        self.appended(p);
                    }
                    self.model[p as usize].extend(values);
                }
                self.offsets.insert((*g, *ip), *offset);
            }
            Op::Changes { h } => {
                let (seen, since) = &self.seen[*h];
                let mut out = Vec::new();
                let log = &self.handles[*h];
                if let Some(now) = log.appended_since(*seen, &mut out) {
                    let named: BTreeSet<u32> = out
                        .iter()
                        .filter(|t| &*t.topic == TOPIC)
                        .map(|t| t.partition)
                        .collect();
                    assert!(
                        since.is_subset(&named),
                        "appended to {since:?} since {seen}, named {named:?}"
                    );
                    assert_eq!(now == *seen, since.is_empty(), "version moved iff appended");
                    self.seen[*h] = (now, BTreeSet::new());
                } else {
                    self.seen[*h] = (log.append_version(), BTreeSet::new());
                }
            }
            Op::Restart { h } => {
                self.handles[*h] = Log::open(self.dir.path(), options()).expect("reopen");
                self.torn.clear();
                self.seen[*h] = (self.handles[*h].append_version(), BTreeSet::new());
            }
            Op::TornTail { p, .. } if self.torn.contains(p) => {}
            Op::TornTail { p, bytes } => {
                self.torn.insert(*p);
                // The start of a real batch, cut short.
                let torn = &self.torn_template[..*bytes];
                // The killed writer held the partition's lock (handles that keep it between
                // appends let go within milliseconds); its death released it.
                let lock = lock_file(self.dir.path(), *p);
                lock.lock().expect("lock the partition");
                let path = last_segment(self.dir.path(), *p);
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .expect("open segment");
                f.write_all(torn).expect("write torn tail");
                drop(lock);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn handles_on_one_directory_agree_with_the_model(ops in proptest::collection::vec(op(3), 1..40)) {
        let mut world = World::new(3);
        for op in &ops {
            world.apply(op);
        }
        // Every handle, and a fresh one, sees the model.
        world.handles.push(Log::open(world.dir.path(), options()).expect("open"));
        for log in &world.handles {
            for p in 0..PARTITIONS {
                prop_assert_eq!(values(log, &tp(p)), world.model[p as usize].clone());
            }
            for (g, group) in GROUPS.iter().enumerate() {
                for ip in 0..INPUT_PARTITIONS {
                    let got = log.committed_offset(group, &TopicPartition::new(INPUT, ip)).expect("committed");
                    prop_assert_eq!(got, world.offsets.get(&(g, ip)).copied());
                }
            }
        }
    }
}

/// The partition's lock file, opened as another process would to take the lock.
fn lock_file(dir: &Path, p: u32) -> std::fs::File {
    std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(format!("topics/{TOPIC}/{p}/lock")))
        .expect("open lock file")
}

/// Whether another process could take the partition's lock right now.
fn lock_is_free(dir: &Path, p: u32) -> bool {
    let file = lock_file(dir, p);
    match file.try_lock() {
        Ok(()) => true,
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(e) => panic!("try_lock: {e:?}"),
    }
}

#[test]
fn a_handle_keeps_a_partition_lock_between_appends_and_lets_go_when_idle_or_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), options()).expect("open");
    log.create_topic(TOPIC, PARTITIONS).expect("create");
    log.append(&tp(0), &mut batch(&["a".to_owned()]))
        .expect("append");
    // Kept for the next append (a lease)...
    assert!(
        !lock_is_free(dir.path(), 0),
        "the lock is kept after an append"
    );
    // ...and released once the handle stops appending (5 ms idle; generous bound here).
    let start = Instant::now();
    while !lock_is_free(dir.path(), 0) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "an idle handle still holds the partition lock after 5 s"
        );
        thread::sleep(Duration::from_millis(1));
    }
    // Another process's write in between is seen by the next append (it catches up).
    let other = Log::open(dir.path(), options()).expect("open");
    other
        .append(&tp(0), &mut batch(&["b".to_owned()]))
        .expect("append");
    assert_eq!(
        log.append(&tp(0), &mut batch(&["c".to_owned()]))
            .expect("append"),
        2
    );
    // Dropping the handle releases its locks (at once, or as soon as its releaser, which may
    // be looking at that moment, lets go of the log).
    drop(log);
    drop(other);
    let start = Instant::now();
    while !lock_is_free(dir.path(), 0) {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "a dropped handle still holds the partition lock"
        );
        thread::sleep(Duration::from_micros(100));
    }
    let reader = Log::open(dir.path(), options()).expect("open");
    assert_eq!(values(&reader, &tp(0)), ["a", "b", "c"]);
}

#[test]
fn a_handle_appending_without_pause_lets_another_handle_write_in_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    Log::open(dir.path(), options())
        .expect("open")
        .create_topic(TOPIC, PARTITIONS)
        .expect("create");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (path, stop) = (dir.path().to_path_buf(), Arc::clone(&stop));
        thread::spawn(move || {
            let log = Log::open(&path, options()).expect("open");
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                log.append(&tp(0), &mut batch(&[format!("busy-{n}")]))
                    .expect("append");
                n += 1;
            }
            n
        })
    };
    thread::sleep(Duration::from_millis(50));
    let other = Log::open(dir.path(), options()).expect("open");
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let start = Instant::now();
        other
            .append(&tp(0), &mut batch(&[format!("other-{i}")]))
            .expect("append");
        slowest = slowest.max(start.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let busy_appends = busy.join().expect("busy writer");
    eprintln!("slowest append beside a busy handle: {slowest:?} ({busy_appends} busy appends)");
    // A lease is never renewed past 20 ms, so the other handle waits about that long at worst;
    // the bound is loose for a loaded machine.
    assert!(
        slowest < Duration::from_secs(2),
        "an append waited {slowest:?} behind a busy handle"
    );
    let reader = Log::open(dir.path(), options()).expect("open");
    let got = values(&reader, &tp(0));
    assert_eq!(got.len() as u64, busy_appends + 20);
    let others: Vec<&String> = got.iter().filter(|v| v.starts_with("other-")).collect();
    assert_eq!(others.len(), 20, "every append of the other handle landed");
}

#[test]
fn threads_with_their_own_handles_append_to_one_partition_densely() {
    let dir = tempfile::tempdir().expect("tempdir");
    Log::open(dir.path(), options())
        .expect("open")
        .create_topic(TOPIC, PARTITIONS)
        .expect("create");
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let path = dir.path().to_path_buf();
            thread::spawn(move || {
                let log = Log::open(&path, options()).expect("open");
                let mut bases = Vec::new();
                for i in 0..200 {
                    let values = vec![format!("w{w}-{i}"); 1 + i % 3];
                    bases.push((
                        log.append(&tp(0), &mut batch(&values)).expect("append"),
                        values,
                    ));
                }
                bases
            })
        })
        .collect();
    let mut expected: BTreeMap<u64, String> = BTreeMap::new();
    for writer in writers {
        for (base, values) in writer.join().expect("writer") {
            for (i, v) in values.into_iter().enumerate() {
                assert!(
                    expected.insert(base + i as u64, v).is_none(),
                    "offset taken twice"
                );
            }
        }
    }
    let reader = Log::open(dir.path(), options()).expect("open");
    let got: Vec<String> = values(&reader, &tp(0));
    assert_eq!(got, expected.into_values().collect::<Vec<_>>());
}

#[test]
fn a_read_only_handle_changes_no_file_and_sees_a_writers_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = Log::open(dir.path(), options()).expect("open");
    writer.create_topic(TOPIC, 1).expect("create");
    writer
        .append(&tp(0), &mut batch(&["a".to_owned(), "b".to_owned()]))
        .expect("append");
    writer
        .commit_transaction(
            "g",
            &mut [(tp(0), &mut batch(&["c".to_owned()]))],
            &[(tp(0), 2)],
        )
        .expect("txn");
    // A writer killed mid-batch: the read-only open must not cut this.
    let segment = last_segment(dir.path(), 0);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("open");
    f.write_all(&[0, 0, 1, 0, 9, 9]).expect("write");
    drop(f);
    let before = snapshot(dir.path());
    let reader = Log::open_read_only(dir.path(), options()).expect("open read-only");
    assert_eq!(values(&reader, &tp(0)), ["a", "b", "c"]);
    assert_eq!(
        reader.committed_offset("g", &tp(0)).expect("committed"),
        Some(2)
    );
    assert!(matches!(
        reader.append(&tp(0), &mut batch(&["x".to_owned()])),
        Err(riffle_log::Error::ReadOnly { .. })
    ));
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a read-only open changed a file"
    );
    // The writer's next append cuts the torn tail (it holds the lock) and the reader sees it.
    let version = reader.append_version();
    writer
        .append(&tp(0), &mut batch(&["d".to_owned()]))
        .expect("append");
    assert_ne!(
        reader.wait_for_append(version, Duration::from_secs(5)),
        version
    );
    assert_eq!(values(&reader, &tp(0)), ["a", "b", "c", "d"]);
    let mut out = Vec::new();
    assert!(reader.appended_since(version, &mut out).is_some());
    assert_eq!(out, [tp(0)]);
}

#[test]
fn a_waiting_handle_learns_of_another_handles_append_within_milliseconds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = Log::open(dir.path(), options()).expect("open");
    writer.create_topic(TOPIC, 1).expect("create");
    let reader = Arc::new(Log::open(dir.path(), options()).expect("open"));
    let seen = reader.append_version();
    let waiting = {
        let reader = Arc::clone(&reader);
        thread::spawn(move || {
            let v = reader.wait_for_append(seen, Duration::from_secs(10));
            (v, Instant::now())
        })
    };
    thread::sleep(Duration::from_millis(50));
    let appended = Instant::now();
    writer
        .append(&tp(0), &mut batch(&["a".to_owned()]))
        .expect("append");
    let (v, woke) = waiting.join().expect("waiter");
    assert_ne!(v, seen);
    assert!(
        woke.duration_since(appended) < Duration::from_millis(500),
        "woke {:?} after the append",
        woke.duration_since(appended)
    );
}

#[test]
fn two_handles_creating_one_topic_at_once_get_one_topic() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().expect("tempdir");
        let creators: Vec<_> = (0..2)
            .map(|_| {
                let path = dir.path().to_path_buf();
                thread::spawn(move || {
                    let log = Log::open(&path, options()).expect("open");
                    log.create_topic("fresh", 7).expect("create");
                    log.append(
                        &TopicPartition::new("fresh", 3),
                        &mut batch(&["x".to_owned()]),
                    )
                    .expect("append")
                })
            })
            .collect();
        let mut bases: Vec<u64> = creators
            .into_iter()
            .map(|c| c.join().expect("creator"))
            .collect();
        bases.sort();
        assert_eq!(bases, [0, 1]);
        let log = Log::open(dir.path(), options()).expect("open");
        assert_eq!(log.topics(), [("fresh".to_owned(), 7)]);
        let tmp = dir.path().join("tmp");
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .map(|d| d.map(|e| e.expect("entry").file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "staging directories left behind: {left:?}");
    }
}

/// Every file under `dir` with its content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
    }
    out
}
