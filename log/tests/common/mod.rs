//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use rand::Rng as _;
use riffle_log::{BatchBuilder, Compression, FetchedBatch, Log, TopicPartition};

/// One record as the tests model it.
pub(crate) type Model = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Appends one batch of `records` with `codec`; returns its base offset.
pub(crate) fn append(log: &Log, tp: &TopicPartition, codec: Compression, records: &[Model]) -> u64 {
    let mut b = BatchBuilder::new(codec);
    for (ts, k, v) in records {
        b.push(*ts, k.as_deref(), v.as_deref());
    }
    log.append(tp, &mut b).expect("append")
}

/// Every record from `from` to the end, as `(offset, model)`, fetched `max_bytes` at a time.
pub(crate) fn read_all(
    log: &Log,
    tp: &TopicPartition,
    from: u64,
    max_bytes: usize,
) -> Vec<(u64, Model)> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let batches = log.fetch(tp, next, max_bytes).expect("fetch");
        if batches.is_empty() {
            return out;
        }
        for batch in &batches {
            for r in records(batch) {
                if r.0 >= next {
                    next = r.0 + 1;
                    out.push(r);
                }
            }
            // A compacted batch's offsets after its last record hold nothing.
            next = next.max(batch.last_offset() + 1);
        }
    }
}

/// A batch's records as models.
pub(crate) fn records(batch: &FetchedBatch) -> Vec<(u64, Model)> {
    batch
        .records()
        .map(|r| {
            let r = r.expect("record decodes");
            let bytes = |b: Option<&bytes::Bytes>| b.map(|b| b.to_vec());
            (
                r.offset(),
                (r.timestamp(), bytes(r.key()), bytes(r.value())),
            )
        })
        .collect()
}

/// `n` simple records `k<i>` → `v<i>` with timestamps from `ts`.
pub(crate) fn simple(n: usize, ts: i64) -> Vec<Model> {
    (0..n)
        .map(|i| {
            (
                ts + i as i64,
                Some(format!("k{i}").into_bytes()),
                Some(format!("value-{i}").into_bytes()),
            )
        })
        .collect()
}

/// Copies the directory tree `from` into `to` (created if missing).
pub(crate) fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Every file under `dir` with its content, sorted by path: what "changed no byte" compares.
pub(crate) fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

/// The seed of a test that kills processes at random points: `RIFFLE_CRASH_SEED` replays one,
/// else the clock picks it. Printed with the way to replay it.
pub(crate) fn crash_seed() -> u64 {
    let seed = std::env::var("RIFFLE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("seed {seed} (replay with RIFFLE_CRASH_SEED={seed})");
    seed
}

/// The random numbers of a test that kills processes at random points, replayable from its
/// seed ([`crash_seed`]).
pub(crate) type Rng = rand::rngs::StdRng;

/// The generator for `seed`.
pub(crate) fn rng(seed: u64) -> Rng {
    rand::SeedableRng::seed_from_u64(seed)
}

/// This test binary again, as a child process that runs only its test `child` (which reads
/// what to do from the environment the caller adds); its output is discarded.
pub(crate) fn child_command() -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().expect("current exe"));
    command
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::null());
    command
}

/// A child process that a test kills with SIGKILL at random points and starts again, beside
/// another child (an appender) that runs to its end.
pub(crate) struct KilledChild<F: FnMut() -> std::process::Child> {
    child: std::process::Child,
    spawn: F,
    /// How often it was killed.
    pub(crate) kills: usize,
}

impl<F: FnMut() -> std::process::Child> KilledChild<F> {
    pub(crate) fn start(mut spawn: F) -> Self {
        KilledChild {
            child: spawn(),
            spawn,
            kills: 0,
        }
    }

    /// One step of the test's loop: one time in 40, while it runs, kills it after a pause of
    /// up to 3 ms and starts it again.
    pub(crate) fn maybe_kill(&mut self, rng: &mut Rng) {
        if rng.random_ratio(1, 40) && self.child.try_wait().expect("wait").is_none() {
            std::thread::sleep(std::time::Duration::from_micros(rng.random_range(0..3_000)));
            self.child.kill().expect("kill");
            let status = self.child.wait().expect("wait");
            assert!(exited_or_killed(status), "{status:?}");
            self.kills += 1;
            self.child = (self.spawn)();
        }
    }

    /// Whether `appender` finished (it must have succeeded) and this one has ended too,
    /// finished or killed: either way the log must hold together.
    pub(crate) fn both_ended(&mut self, appender: &mut std::process::Child) -> bool {
        let Some(status) = appender.try_wait().expect("wait") else {
            return false;
        };
        assert!(status.success(), "the appender failed: {status:?}");
        let Some(status) = self.child.try_wait().expect("wait") else {
            return false;
        };
        assert!(
            exited_or_killed(status),
            "the killed child failed: {status:?}"
        );
        true
    }
}

fn exited_or_killed(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.success() || status.signal() == Some(9)
}

/// Panics if a compaction's swap left a file in the partition directory `dir` (a
/// `.log.cleaned` file or the `cleaning` file).
pub(crate) fn assert_no_swap_leftovers(dir: &std::path::Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".cleaned") || n == "cleaning"),
        "{names:?}"
    );
}
