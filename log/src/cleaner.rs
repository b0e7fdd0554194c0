//! The log's cleaner thread: every [`LogOptions::retention_check_interval`]
//! (crate::LogOptions::retention_check_interval) it runs [`Log::enforce_retention`], which
//! deletes the sealed segments that `retention.ms` and `retention.bytes` no longer keep (as
//! Kafka's `log.retention.check.interval.ms` task does). One per writable log handle; several
//! processes' cleaners serialize on the partitions' locks, and a deletion another one already
//! made is seen and skipped. It holds the log weakly: it stops when the last handle goes.
//!
//! Compaction (`cleanup.policy=compact`) is not built yet: compacted topics keep everything.

use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Starts the thread for `log`, looking every `interval` (the first look after one).
    pub(crate) fn start(self: &Arc<Self>, log: Weak<Shared>, interval: Duration) {
        let cleaner = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("riffle-log-cleaner".into())
            .spawn(move || cleaner.run(&log, interval));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the log cleaner thread; retention runs only when asked (Log::enforce_retention)");
        }
    }

    /// The log handle is going away.
    pub(crate) fn stop(&self) {
        *self.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }

    fn run(&self, log: &Weak<Shared>, interval: Duration) {
        loop {
            {
                let stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
                let (stop, _) = self
                    .wake
                    .wait_timeout_while(stop, interval, |stop| !*stop)
                    .unwrap_or_else(PoisonError::into_inner);
                if *stop {
                    return;
                }
            }
            let Some(shared) = log.upgrade() else {
                return;
            };
            let log = Log { shared };
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
            // If this was the last handle, the log closes here (and stops this loop).
            drop(log);
        }
    }
}
