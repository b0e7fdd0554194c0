//! Records trickling into an idle application: R records a second, one at a time, each to a
//! random partition of the [`IdleRun`]'s input topic, and what that costs the stream thread
//! (CPU, loop iterations, commits) and each record (append → processed).
//!
//! What it must never do: batch records to keep up. Each record is its own append at its
//! scheduled time (`start + i / R`), so a thread that spends O(tasks) per record shows it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use riffle_task_manager::BoxError;

use crate::idle::{IdleReport, IdleRun, PROCESS_TIMEOUT};
use crate::latency::{Latencies, SLEEP_STEP, SeededRng};

/// What one trickle found.
#[derive(Clone, Debug, PartialEq)]
pub struct TrickleReport {
    /// The stream thread over the run, from the first append until the last record was
    /// processed.
    pub thread: IdleReport,
    /// Records appended.
    pub appended: u64,
    /// Append → processed, per record.
    pub latencies: Latencies,
}

impl IdleRun {
    /// Appends `rate` records a second for `duration`, one at a time to random partitions, and
    /// measures the stream thread until the last one was processed. Calls `progress` with the
    /// fraction of the appends done.
    pub fn trickle(
        &mut self,
        rate: f64,
        duration: Duration,
        rng: &mut SeededRng,
        progress: &mut dyn FnMut(f64),
    ) -> Result<TrickleReport, BoxError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("a trickle needs a positive rate, not {rate}").into());
        }
        let total = (rate * duration.as_secs_f64()).round() as u64;
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut latencies = Latencies::with_capacity(total as usize);
        // Appended, not yet seen processed: (sequence number, when appended).
        let mut pending: VecDeque<(u64, Instant)> = VecDeque::new();
        let (cpu_before, cpu_source, before) = self.sample()?;
        let start = Instant::now();
        let mut appended = 0u64;
        let mut last_progress = start;
        loop {
            let now = Instant::now();
            let done = self.records() - before.records;
            while pending.front().is_some_and(|&(seq, _)| seq < done) {
                if let Some((_, at)) = pending.pop_front() {
                    latencies.push(now.saturating_duration_since(at));
                }
            }
            if appended == total && pending.is_empty() {
                break;
            }
            let due = start + interval.mul_f64(appended as f64);
            if appended < total && now >= due {
                let partition = rng.below(self.tasks());
                let at = Instant::now();
                self.append(partition)?;
                pending.push_back((appended, at));
                appended += 1;
                continue;
            }
            if let Some(&(seq, at)) = pending.front()
                && now.saturating_duration_since(at) > PROCESS_TIMEOUT
            {
                return Err(format!(
                    "record {seq} of the trickle was not processed within {PROCESS_TIMEOUT:?}"
                )
                .into());
            }
            if now.saturating_duration_since(last_progress) >= Duration::from_millis(100) {
                last_progress = now;
                progress(appended as f64 / total.max(1) as f64);
                if !self.alive() {
                    return Err("the stream thread stopped during the trickle".into());
                }
            }
            // Never spin: see crate::latency.
            if !pending.is_empty() {
                std::thread::sleep(SLEEP_STEP);
            } else if appended < total {
                std::thread::sleep(due.saturating_duration_since(now));
            }
        }
        let (cpu_after, _, after) = self.sample()?;
        progress(1.0);
        Ok(TrickleReport {
            thread: IdleReport::between(
                (cpu_before, before),
                (cpu_after, after),
                start.elapsed(),
                cpu_source,
            ),
            appended,
            latencies,
        })
    }
}
