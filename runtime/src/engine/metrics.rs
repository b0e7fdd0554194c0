//! The counters of a stream thread, readable from any thread while it runs, and an instance's
//! metric sources ([`InstanceMetrics`]: every thread's counters, the task and store registry,
//! the records processed), which the stream threads write and `telemetry` and the application
//! read.
//!
//! Writes are relaxed atomic adds on the thread's own slot: no lock and no allocation on the
//! record path. Readers get plain numbers through the getters.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;

/// Counters of one stream thread, readable while it runs ([`crate::StreamsApp::thread_metrics`]).
#[derive(Debug, Default)]
pub struct ThreadMetrics {
    /// The thread's name (`<application_id>-StreamThread-<n>`), set when it starts.
    name: Mutex<String>,
    /// Each loop's fetch phase.
    pub(crate) poll: Latency,
    /// Time spent processing records, in nanoseconds.
    pub(crate) process_nanos: AtomicU64,
    pub(crate) commit: Latency,
    pub(crate) punctuate: Latency,
    /// Changelog records the restoring tasks have left (published by the state updater).
    pub(crate) restore_remaining: Arc<AtomicU64>,
    pub(crate) loops: AtomicU64,
    pub(crate) records: AtomicU64,
    pub(crate) dropped_records: AtomicU64,
    pub(crate) commits: AtomicU64,
    /// Times the thread was fenced and closed its tasks dirty (exactly-once).
    pub(crate) fenced: AtomicU64,
    pub(crate) snapshot_changes: AtomicU64,
    pub(crate) records_restored: AtomicU64,
    pub(crate) snapshot_unchanged: AtomicU64,
    pub(crate) snapshot_full_rebuilds: AtomicU64,
    pub(crate) snapshot_incremental_updates: AtomicU64,
    os_thread_id: AtomicU64,
}

impl ThreadMetrics {
    /// The thread's name; empty before it started.
    pub fn name(&self) -> String {
        self.name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_name(&self, name: &str) {
        *self.name.lock().unwrap_or_else(PoisonError::into_inner) = name.to_owned();
    }

    /// (records processed, nanoseconds spent processing them).
    pub(crate) fn process_time(&self) -> (u64, f64) {
        (
            self.records(),
            self.process_nanos.load(Ordering::Relaxed) as f64,
        )
    }

    /// Loop iterations so far.
    pub fn loops(&self) -> u64 {
        self.loops.load(Ordering::Relaxed)
    }

    /// Records processed so far.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Records dropped so far (Kafka's `dropped-records`): late for every window they belong
    /// to, counted once per window they missed.
    pub fn dropped_records(&self) -> u64 {
        self.dropped_records.load(Ordering::Relaxed)
    }

    /// Commits done so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Times the thread was fenced (another producer or member took its place) and closed
    /// its tasks dirty.
    pub fn fenced(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }

    /// Changelog records restored into this thread's stores so far.
    pub fn records_restored(&self) -> u64 {
        self.records_restored.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that changed the snapshot.
    pub fn snapshot_changes(&self) -> u64 {
        self.snapshot_changes.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that returned at once because nothing changed.
    pub fn snapshot_unchanged(&self) -> u64 {
        self.snapshot_unchanged.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that rebuilt it from scratch.
    pub fn snapshot_full_rebuilds(&self) -> u64 {
        self.snapshot_full_rebuilds.load(Ordering::Relaxed)
    }

    /// Offset-sum snapshot refreshes that re-evaluated only the changed tasks.
    pub fn snapshot_incremental_updates(&self) -> u64 {
        self.snapshot_incremental_updates.load(Ordering::Relaxed)
    }

    /// The OS thread id (Linux tid), for reading the thread's CPU time; 0 until known.
    pub fn os_thread_id(&self) -> u64 {
        self.os_thread_id.load(Ordering::Relaxed)
    }

    pub(crate) fn set_os_thread_id(&self) {
        #[cfg(target_os = "linux")]
        let tid = u64::try_from(rustix::thread::gettid().as_raw_nonzero().get()).unwrap_or(0);
        #[cfg(not(target_os = "linux"))]
        let tid = 0;
        self.os_thread_id.store(tid, Ordering::Relaxed);
    }
}

/// The length of one sample window of the latency averages and maxima: Kafka's
/// `metrics.sample.window.ms` default.
const SAMPLE_WINDOW: Duration = Duration::from_secs(30);

/// The sample window `now` falls in, counted from 1 (0 marks an empty slot).
fn sample_window() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    start.elapsed().as_secs() / SAMPLE_WINDOW.as_secs() + 1
}

/// One sample window's events.
#[derive(Debug, Default)]
struct Sample {
    /// The window these figures are of (0: none yet).
    window: AtomicU64,
    count: AtomicU64,
    nanos: AtomicU64,
    max_nanos: AtomicU64,
}

/// A latency, as Kafka's metrics keep one: a count since the start (`-total`), and the average
/// and maximum over the current and the previous 30 s sample window (Kafka's two samples of
/// `metrics.sample.window.ms`), in nanoseconds. Written by one thread at a time (its stream
/// thread, or the thread running its task), read by any.
#[derive(Debug, Default)]
pub(crate) struct Latency {
    count: AtomicU64,
    samples: [Sample; 2],
}

impl Latency {
    pub(crate) fn record(&self, elapsed: Duration) {
        let nanos = elapsed.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.record_in(sample_window(), 1, nanos, nanos);
    }

    /// Adds `count` events taking `nanos` in all and at most `max_nanos` each.
    pub(crate) fn record_many(&self, count: u64, nanos: u64, max_nanos: u64) {
        if count == 0 {
            return;
        }
        self.record_in(sample_window(), count, nanos, max_nanos);
    }

    fn record_in(&self, window: u64, count: u64, nanos: u64, max_nanos: u64) {
        self.count.fetch_add(count, Ordering::Relaxed);
        let sample = &self.samples[(window % 2) as usize];
        if sample.window.load(Ordering::Relaxed) != window {
            // The slot's window is over: it starts again (only this thread writes it).
            sample.count.store(0, Ordering::Relaxed);
            sample.nanos.store(0, Ordering::Relaxed);
            sample.max_nanos.store(0, Ordering::Relaxed);
            sample.window.store(window, Ordering::Release);
        }
        sample.count.fetch_add(count, Ordering::Relaxed);
        sample.nanos.fetch_add(nanos, Ordering::Relaxed);
        sample.max_nanos.fetch_max(max_nanos, Ordering::Relaxed);
    }

    /// (count since the start, average in ms, maximum in ms over the last two windows; 0
    /// when none fell in them).
    pub(crate) fn read(&self) -> (u64, f64, f64) {
        self.read_at(sample_window())
    }

    fn read_at(&self, now: u64) -> (u64, f64, f64) {
        let (mut count, mut nanos, mut max) = (0u64, 0u64, 0u64);
        for sample in &self.samples {
            let window = sample.window.load(Ordering::Acquire);
            if window != 0 && window + 1 >= now {
                count += sample.count.load(Ordering::Relaxed);
                nanos += sample.nanos.load(Ordering::Relaxed);
                max = max.max(sample.max_nanos.load(Ordering::Relaxed));
            }
        }
        let avg = if count > 0 {
            nanos as f64 / count as f64
        } else {
            0.0
        };
        (
            self.count.load(Ordering::Relaxed),
            avg / 1e6,
            max as f64 / 1e6,
        )
    }
}

/// One task's counters (Kafka Streams' `stream-task-metrics`).
#[derive(Debug)]
pub(crate) struct TaskMetrics {
    pub(crate) thread: String,
    pub(crate) processed: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// Each input partition and the next offset the task will process there.
    pub(crate) consumed: Vec<(TopicPartition, AtomicU64)>,
}

/// One store's counters (`stream-state-metrics`, `stream-record-cache-metrics`).
#[derive(Debug, Default)]
pub(crate) struct StoreMetrics {
    pub(crate) puts: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) hits: AtomicU64,
    pub(crate) flush: Latency,
    /// Timed only at the `DEBUG` recording level.
    pub(crate) put: Latency,
    pub(crate) get: Latency,
}

/// A store of a task, by (task, store name): the thread running it and its counters.
pub(crate) type StoreEntry = ((TaskId, String), (String, Arc<StoreMetrics>));

/// The tasks and stores of this instance, by task.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) tasks: Mutex<BTreeMap<TaskId, Arc<TaskMetrics>>>,
    pub(crate) stores: Mutex<BTreeMap<StoreEntryKey, StoreEntryValue>>,
}

type StoreEntryKey = (TaskId, String);
type StoreEntryValue = (String, Arc<StoreMetrics>);

impl Registry {
    /// A task started on `thread` with `inputs` and stores `stores` (names and counters).
    pub(crate) fn task_started(
        &self,
        task: TaskId,
        thread: &str,
        inputs: Vec<TopicPartition>,
        stores: &[(String, Arc<StoreMetrics>)],
    ) -> Arc<TaskMetrics> {
        let metrics = Arc::new(TaskMetrics {
            thread: thread.to_owned(),
            processed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            consumed: inputs
                .into_iter()
                .map(|tp| (tp, AtomicU64::new(0)))
                .collect(),
        });
        lock(&self.tasks).insert(task, metrics.clone());
        let mut all = lock(&self.stores);
        for (name, store) in stores {
            all.insert((task, name.clone()), (thread.to_owned(), store.clone()));
        }
        metrics
    }

    /// The task left this thread: its metrics go with it.
    pub(crate) fn task_stopped(&self, task: TaskId) {
        lock(&self.tasks).remove(&task);
        lock(&self.stores).retain(|(t, _), _| *t != task);
    }
}

/// What an application instance's metrics are read from: each stream thread slot's counters,
/// the running tasks' and stores' counters, and the records every thread processed.
#[derive(Debug)]
pub(crate) struct InstanceMetrics {
    /// By thread slot; a replacement thread takes over its slot's counters.
    pub(crate) threads: Vec<Arc<ThreadMetrics>>,
    /// The tasks' and stores' metrics.
    pub(crate) registry: Registry,
    /// Records processed by all threads.
    pub(crate) records_processed: AtomicU64,
}

impl InstanceMetrics {
    /// Zeroed counters for `threads` stream thread slots.
    pub(crate) fn new(threads: usize) -> InstanceMetrics {
        InstanceMetrics {
            threads: (0..threads)
                .map(|_| Arc::new(ThreadMetrics::default()))
                .collect(),
            registry: Registry::default(),
            records_processed: AtomicU64::new(0),
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_averages_and_maxima_cover_the_last_two_sample_windows() {
        let l = Latency::default();
        assert_eq!(l.read_at(1), (0, 0.0, 0.0));
        l.record_in(1, 1, 9_000_000, 9_000_000);
        l.record_in(1, 1, 1_000_000, 1_000_000);
        assert_eq!(l.read_at(1), (2, 5.0, 9.0));
        l.record_in(2, 2, 4_000_000, 3_000_000);
        // Windows 1 and 2: four events, 14 ms in all, 9 ms the largest.
        assert_eq!(l.read_at(2), (4, 3.5, 9.0));
        // Window 3 replaces window 1's slot: its 9 ms is forgotten.
        l.record_in(3, 1, 1_000_000, 1_000_000);
        assert_eq!(l.read_at(3), (5, 5.0 / 3.0, 3.0));
        // Nothing for two windows: the total stays, the rest is 0.
        assert_eq!(l.read_at(5), (5, 0.0, 0.0));
    }
}
