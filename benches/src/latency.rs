//! Per-record latency, append → processed, as the benches see it from outside the stream
//! thread: the calling thread appends a record and watches `ThreadMetrics::records` move.
//!
//! What it owns: [`wait_for_count`] (how the watching is done, and so the measurement's
//! resolution), [`Latencies`] (samples and their percentiles) and [`SeededRng`] (the seeded
//! choice of partitions, so a run can be repeated).
//!
//! What it must never do: spin. On a machine with few cores, a watcher spinning right after
//! its append holds the very core the woken stream thread is queued on (the kernel wakes a
//! thread on its waker's core), and the measurement becomes the watcher's time slice — on the
//! 2-core dev box a spinning watcher measured 1–2 ms where sleeping in [`SLEEP_STEP`] steps
//! measures tenths of one. So the watcher only sleeps.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

/// How long the watcher sleeps between looks (plus the kernel's timer slack, 50 µs by default
/// on Linux): the resolution of every latency measured here.
pub const SLEEP_STEP: Duration = Duration::from_micros(20);

/// Waits until `counter` reaches `target` or `timeout` passes; returns when it was seen (up to
/// one [`SLEEP_STEP`] plus timer slack after it happened).
pub fn wait_for_count(
    counter: impl Fn() -> u64,
    target: u64,
    timeout: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    loop {
        let now = Instant::now();
        if counter() >= target {
            return Some(now);
        }
        if now.saturating_duration_since(start) >= timeout {
            return None;
        }
        std::thread::sleep(SLEEP_STEP);
    }
}

/// Latency samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latencies {
    samples: Vec<Duration>,
}

impl Latencies {
    /// No samples yet, room for `n`.
    pub fn with_capacity(n: usize) -> Self {
        Latencies {
            samples: Vec::with_capacity(n),
        }
    }

    /// Adds one sample.
    pub fn push(&mut self, latency: Duration) {
        self.samples.push(latency);
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The `p`-th percentile (0–100) by nearest rank: the smallest sample with at least `p` %
    /// of the samples at or below it (so with 40 samples p99 is the largest). `None` when
    /// there are no samples.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let n = sorted.len();
        if n == 0 {
            return None;
        }
        let rank = ((p.clamp(0.0, 100.0) / 100.0) * n as f64).ceil() as usize;
        sorted.get(rank.clamp(1, n) - 1).copied()
    }

    /// The largest sample.
    pub fn max(&self) -> Option<Duration> {
        self.samples.iter().max().copied()
    }

    /// The samples, in the order taken.
    pub fn samples(&self) -> &[Duration] {
        &self.samples
    }
}

/// A seeded generator (`rand`'s `StdRng`): the partitions records go to are random but the
/// same for the same seed.
#[derive(Clone, Debug)]
pub struct SeededRng(StdRng);

impl SeededRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng(StdRng::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n`, uniformly (0 when `n` is 0).
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn percentiles_by_nearest_rank_match_a_sorted_vec() {
        let mut l = Latencies::default();
        assert_eq!(l.percentile(50.0), None);
        for ms in [5u64, 1, 4, 2, 3, 10, 9, 8, 7, 6] {
            l.push(Duration::from_millis(ms));
        }
        assert_eq!(l.percentile(50.0), Some(Duration::from_millis(5)));
        assert_eq!(l.percentile(90.0), Some(Duration::from_millis(9)));
        assert_eq!(l.percentile(99.0), Some(Duration::from_millis(10)));
        assert_eq!(l.percentile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(l.max(), Some(Duration::from_millis(10)));
        assert_eq!(l.len(), 10);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SeededRng::new(7);
        let mut seen = [false; 10];
        for _ in 0..1_000 {
            let x = rng.below(10);
            assert!(x < 10);
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(rng.below(0), 0);
        assert_eq!(SeededRng::new(1).next_u64(), SeededRng::new(1).next_u64());
    }

    #[test]
    fn wait_for_count_sees_a_count_already_reached_and_times_out_otherwise() {
        let counter = AtomicU64::new(3);
        assert!(wait_for_count(|| counter.load(Ordering::Acquire), 3, Duration::ZERO).is_some());
        let start = Instant::now();
        assert!(
            wait_for_count(
                || counter.load(Ordering::Acquire),
                4,
                Duration::from_millis(5)
            )
            .is_none()
        );
        assert!(start.elapsed() >= Duration::from_millis(5));
    }
}
