//! `kill -9` the windowed-count sample under exactly-once at random points (start-up and
//! restoring, processing, commits, shutdown) while its timestamped input grows between runs, and
//! restart it until a run drains the input and exits normally. Final results (`--emit final`)
//! are written when stream time closes a window, inside the transaction that commits the input
//! offsets and the store's changelog: the output topic must then hold every window the input's
//! stream time closed exactly once, with the count a plain replay of the input gives — no final
//! result lost, none repeated, none of a window still open — with the in-memory store
//! (restored from the changelog on every start) and the persistent one (checkpointed).
//!
//! The input: 100 keys, one record a millisecond of event time, 5 % out of order (half within
//! grace, half beyond it: some dropped, some still in a later window). The embedded log's
//! transactions are all or nothing, so reading the output topic reads committed data only.
//!
//! `RIFFLE_CRASH_KILLS` sets the kill points per store (default 20); `RIFFLE_CRASH_SEED` replays
//! a failing seed (each store's scenario prints its seed).

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::{Fixture, kill_and_restart_with, kills, rng, seed};
use rand::Rng;
use rand::rngs::StdRng;

/// CI's kill points per store.
const CI_KILLS: usize = 20;
/// The first timestamp: 2024-01-01T00:00:00Z.
const BASE_MS: i64 = 1_704_067_200_000;
/// Grace of the windows, in milliseconds.
const GRACE_MS: i64 = 500;

/// Window flags and the model's (size, advance) in milliseconds.
struct Windows {
    flags: &'static [&'static str],
    size: i64,
    advance: i64,
}

/// The input generator: timestamps rise by a millisecond a record across chunks.
struct Input {
    next: i64,
    /// Every record appended, by partition, in order.
    partitions: Vec<Vec<(String, i64)>>,
}

impl Input {
    fn append(&mut self, fixture: &Fixture, rng: &mut StdRng, size: i64) -> usize {
        let n = rng.random_range(8_000..30_000);
        let records: Vec<(String, i64)> = (0..n)
            .map(|i| {
                let nominal = self.next + i as i64;
                let ts = if rng.random_bool(0.05) {
                    let delay = if rng.random_bool(0.5) {
                        rng.random_range(1..=GRACE_MS)
                    } else {
                        rng.random_range(GRACE_MS + 1..=GRACE_MS + 2 * size)
                    };
                    nominal - delay
                } else {
                    nominal
                };
                (format!("key-{}", rng.random_range(0..100)), ts)
            })
            .collect();
        self.next += n as i64;
        let written = fixture.append_timestamped(&records);
        for (all, more) in self.partitions.iter_mut().zip(written) {
            all.extend(more);
        }
        n
    }
}

/// Time windows of `size` every `advance` with grace, replayed per partition (stream time is
/// per task): each window stream time closed (end + grace at most the partition's largest
/// timestamp), as `key@start/end`, with the records that arrived while it was open (its end
/// after stream time - grace).
fn closed_windows(
    partitions: &[Vec<(String, i64)>],
    size: i64,
    advance: i64,
) -> BTreeMap<String, i64> {
    let mut closed = BTreeMap::new();
    for records in partitions {
        let mut stream_time = i64::MIN;
        let mut counts: BTreeMap<(String, i64), i64> = BTreeMap::new();
        for (key, ts) in records {
            stream_time = stream_time.max(*ts);
            // Every start (a multiple of the advance) with start <= ts < start + size, from the
            // last one down.
            let mut start = ts - ts.rem_euclid(advance);
            while start > ts - size && start >= 0 {
                if start + size > stream_time - GRACE_MS {
                    *counts.entry((key.clone(), start)).or_default() += 1;
                }
                start -= advance;
            }
        }
        for ((key, start), count) in counts {
            let end = start + size;
            if end + GRACE_MS <= stream_time {
                closed.insert(format!("{key}@{start}/{end}"), count);
            }
        }
    }
    closed
}

fn final_results_survive_kill_9(store: &str, windows: &Windows) {
    let scenario = format!(
        "kill -9 windowed-count {} --emit final exactly_once --store {store}",
        windows.flags.join(" ")
    );
    let seed = seed(&scenario);
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    let start = Instant::now();
    let mut input = Input {
        next: BASE_MS,
        partitions: vec![Vec::new(); common::PARTITIONS as usize],
    };
    let grace = format!("{GRACE_MS}ms");
    let mut flags: Vec<&str> = windows.flags.to_vec();
    flags.extend(["--grace", &grace, "--emit", "final"]);
    let report = kill_and_restart_with(
        &fixture,
        kills(CI_KILLS),
        &mut rng,
        seed,
        &mut |rng| input.append(&fixture, rng, windows.size),
        &|extra| fixture.windowed_sample(store, "exactly_once", &flags, extra),
    );
    let expected = closed_windows(&input.partitions, windows.size, windows.advance);
    let window_size = format!("{}ms", windows.size);
    let got = fixture.output_windows(&window_size);
    let mut problems = Vec::new();
    for (window, count) in &expected {
        match got.get(window).map(Vec::as_slice) {
            Some([c]) if c == count => {}
            Some(values) => {
                problems.push(format!("{window}: closed with {count}, written {values:?}"))
            }
            None => problems.push(format!("{window}: closed with {count}, lost")),
        }
    }
    for (window, values) in &got {
        if !expected.contains_key(window) {
            problems.push(format!(
                "{window}: not closed by the input, written {values:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{scenario}, seed {seed}: {} of {} closed windows differ ({report:?}): {:?}",
        problems.len(),
        expected.len(),
        &problems[..problems.len().min(20)]
    );
    assert!(
        expected.len() > 100,
        "only {} windows closed",
        expected.len()
    );
    println!(
        "{scenario}: {report:?}; {} windows closed, each written once with its count; {:.1} s",
        expected.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn kill_9_under_exactly_once_writes_every_closed_window_once_with_the_in_memory_store() {
    final_results_survive_kill_9(
        "memory",
        &Windows {
            flags: &["--window", "2s"],
            size: 2_000,
            advance: 2_000,
        },
    );
}

#[test]
fn kill_9_under_exactly_once_writes_every_closed_window_once_with_the_persistent_store() {
    final_results_survive_kill_9(
        "persistent",
        &Windows {
            flags: &["--window", "2s", "--advance", "1s"],
            size: 2_000,
            advance: 1_000,
        },
    );
}
