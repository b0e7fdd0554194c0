//! The log's cleaner thread, one per writable log handle, holding the log weakly (it stops
//! when the last handle goes). Two jobs on their own schedules:
//! - every [`LogOptions::retention_check_interval`](crate::LogOptions::retention_check_interval)
//!   it runs [`Log::enforce_retention`], which deletes the sealed segments that `retention.ms`
//!   and `retention.bytes` no longer keep (Kafka's `log.retention.check.interval.ms` task);
//! - every [`LogOptions::compaction_check_interval`](crate::LogOptions::compaction_check_interval)
//!   it runs [`Log::compact`], which cleans the compacted topics' partitions that are due
//!   (Kafka's log cleaner), sleeping between partitions to keep to
//!   [`LogOptions::cleaner_io_bytes_per_sec`](crate::LogOptions::cleaner_io_bytes_per_sec).
//!
//! One thread: the cleaner uses at most one core. Several processes' cleaners serialize on the
//! partitions' locks, and work another one already did is seen and skipped.

use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::log::{Log, Shared};

/// The stop signal of a log's cleaner thread.
#[derive(Debug, Default)]
pub(crate) struct Cleaner {
    stop: Mutex<bool>,
    wake: Condvar,
}

/// Milliseconds since the epoch, the clock retention compares record timestamps with.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Cleaner {
    /// Starts the thread for `log`: retention every `retention` and compaction every
    /// `compaction` (`None`: never), each the first time one interval after opening.
    pub(crate) fn start(
        self: &Arc<Self>,
        log: Weak<Shared>,
        retention: Option<Duration>,
        compaction: Option<Duration>,
        io_limit: Option<u64>,
    ) {
        let cleaner = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("riffle-log-cleaner".into())
            .spawn(move || cleaner.run(&log, retention, compaction, io_limit));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the log cleaner thread; retention and compaction run only when asked (Log::enforce_retention, Log::compact)");
        }
    }

    /// The log handle is going away.
    pub(crate) fn stop(&self) {
        *self.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }

    /// Sleeps up to `d`; `true` if the log is going away.
    fn sleep(&self, d: Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        let (stop, _) = self
            .wake
            .wait_timeout_while(stop, d, |stop| !*stop)
            .unwrap_or_else(PoisonError::into_inner);
        *stop
    }

    fn run(
        &self,
        log: &Weak<Shared>,
        retention: Option<Duration>,
        compaction: Option<Duration>,
        io_limit: Option<u64>,
    ) {
        let now = Instant::now();
        let mut next_retention = retention.map(|d| now + d);
        let mut next_compaction = compaction.map(|d| now + d);
        loop {
            let Some(next) = next_retention.into_iter().chain(next_compaction).min() else {
                return;
            };
            if self.sleep(next.saturating_duration_since(Instant::now())) {
                return;
            }
            let Some(shared) = log.upgrade() else {
                return;
            };
            let log = Log { shared };
            let now = Instant::now();
            if let (Some(at), Some(every)) = (next_retention, retention)
                && at <= now
            {
                self.retention_pass(&log);
                next_retention = Some(Instant::now() + every);
            }
            if let (Some(at), Some(every)) = (next_compaction, compaction)
                && at <= now
            {
                if self.compaction_pass(&log, io_limit) {
                    return;
                }
                next_compaction = Some(Instant::now() + every);
            }
            // If this was the last handle, the log closes here (and stops this loop).
            drop(log);
        }
    }

    fn retention_pass(&self, log: &Log) {
        match log.enforce_retention(now_ms()) {
            Ok(report) if report.segments_deleted > 0 => {
                tracing::info!(
                    segments = report.segments_deleted,
                    bytes = report.bytes_freed,
                    partitions = report.partitions,
                    "retention deleted old segments"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "retention failed; it is tried again at the next check")
            }
        }
    }

    /// One compaction pass, throttled; `true` if the log is going away.
    fn compaction_pass(&self, log: &Log, io_limit: Option<u64>) -> bool {
        let started = Instant::now();
        let mut io = 0u64;
        let mut stopping = false;
        let mut throttle = |bytes: u64| {
            io += bytes;
            if let Some(limit) = io_limit.filter(|&l| l > 0) {
                let due = Duration::from_secs_f64(io as f64 / limit as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    stopping |= self.sleep(wait);
                }
            }
        };
        match log.compact_with(now_ms(), &mut throttle) {
            Ok(report) if report.partitions > 0 => {
                tracing::info!(
                    partitions = report.partitions,
                    segments = report.segments_cleaned,
                    bytes_before = report.bytes_before,
                    bytes_after = report.bytes_after,
                    records_removed = report.records_removed,
                    "compaction cleaned partitions"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "compaction failed; it is tried again at the next check")
            }
        }
        stopping
    }
}
