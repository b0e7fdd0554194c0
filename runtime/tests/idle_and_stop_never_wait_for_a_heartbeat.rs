//! A stream thread never sleeps until its next heartbeat with something to report:
//!
//! - Stopping an application ends the threads' idle wait at once, even when the stop lands
//!   between a thread's look at its stop flag and the start of its wait: the thread read the
//!   backend's wake count before it looked, and the wait returns as soon as the count moved.
//! - An application is idle as soon as its threads are, even when an append lands between a
//!   thread's reading of the data version and its asking which partitions changed: the thread
//!   reports itself idle at the version it took the changes up to, the one its wait is for.
//!
//! The windows are widened on purpose by a backend that delegates to the embedded one but, once
//! armed, takes 300 ms to answer `data_version` (the call a thread makes right after it looked
//! at its stop flag), or appends a record to an unread topic when asked which partitions
//! changed. The heartbeat interval is a minute, so a thread that sleeps through either shows
//! as a wait of a minute instead of milliseconds.

mod common;

use riffle::backend::{Backend, GroupCoordinator, GroupInfo, TopicKind};
use riffle::batch::{BatchBuilder, Compression, FetchedBatch, TopicPartition};
use riffle::log::Log;
use riffle::{
    Consumed, EmbeddedBackend, Produced, Result, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The embedded backend, slow to say its data version while `slow` is set, and appending to
/// an unread topic first when asked which partitions changed while `append_in_look` is set.
struct SlowToLook {
    inner: EmbeddedBackend,
    slow: AtomicBool,
    /// Set by a `data_version` call that found `slow` set, when it starts sleeping.
    looking: AtomicBool,
    append_in_look: AtomicBool,
}

const LOOK: Duration = Duration::from_millis(300);

impl Backend for SlowToLook {
    fn create_topic(&self, topic: &str, partitions: u32, kind: TopicKind) -> Result<()> {
        self.inner.create_topic(topic, partitions, kind)
    }
    fn partitions(&self, topic: &str) -> Result<Option<u32>> {
        self.inner.partitions(topic)
    }
    fn fetch(
        &self,
        tp: &TopicPartition,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Vec<FetchedBatch>> {
        self.inner.fetch(tp, offset, max_bytes)
    }
    fn append(&self, tp: &TopicPartition, batch: &mut BatchBuilder) -> Result<u64> {
        self.inner.append(tp, batch)
    }
    fn end_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.inner.end_offset(tp)
    }
    fn start_offset(&self, tp: &TopicPartition) -> Result<u64> {
        self.inner.start_offset(tp)
    }
    fn delete_records(&self, tp: &TopicPartition, offset: u64) -> Result<()> {
        self.inner.delete_records(tp, offset)
    }
    fn offset_for_timestamp(&self, tp: &TopicPartition, timestamp: i64) -> Result<u64> {
        self.inner.offset_for_timestamp(tp, timestamp)
    }
    fn commit_offsets(
        &self,
        group: &str,
        member: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        self.inner.commit_offsets(group, member, offsets)
    }
    fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        self.inner.committed_offset(group, tp)
    }
    fn data_version(&self) -> u64 {
        if self.slow.swap(false, Ordering::AcqRel) {
            self.looking.store(true, Ordering::Release);
            std::thread::sleep(LOOK);
        }
        self.inner.data_version()
    }
    fn wait_for_data(&self, seen: u64, woken: u64, timeout: Duration) -> u64 {
        self.inner.wait_for_data(seen, woken, timeout)
    }
    fn wake_waiters(&self) {
        self.inner.wake_waiters()
    }
    fn wake_count(&self) -> u64 {
        self.inner.wake_count()
    }
    fn changed_partitions(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        if self.append_in_look.swap(false, Ordering::AcqRel) {
            let mut batch = BatchBuilder::new(Compression::None);
            batch.push(0, Some(b"k"), Some(b"v"));
            self.inner
                .append(&TopicPartition::new("unread", 0), &mut batch)
                .expect("append to the unread topic");
        }
        self.inner.changed_partitions(seen, out)
    }
    fn group_coordinator(&self, group: &GroupInfo) -> Result<Arc<dyn GroupCoordinator>> {
        self.inner.group_coordinator(group)
    }
}

/// The sample's count on `backend`, one stream thread, heartbeats a minute apart, started
/// and idle; the records it counted.
fn started_count(
    backend: &Arc<SlowToLook>,
    log: &Log,
    state: &std::path::Path,
) -> (StreamsApp, Vec<(String, String)>) {
    let records: Vec<(String, String)> = (0..300)
        .map(|i| (format!("k{}", i % 17), "v".into()))
        .collect();
    common::produce(log, "in", 2, &records);
    backend
        .create_topic("unread", 1, TopicKind::User)
        .expect("create the unread topic");
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let mut config = StreamsConfig::new("never-waits-for-a-heartbeat");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 1;
    config.heartbeat_interval = Duration::from_secs(60);
    let backend_dyn: Arc<dyn Backend> = backend.clone();
    let mut app =
        StreamsApp::new(builder.build().expect("topology"), config, backend_dyn).expect("app");
    app.start().expect("start");
    common::wait_idle(&app);
    (app, records)
}

fn slow_to_look(log: &Log) -> Arc<SlowToLook> {
    Arc::new(SlowToLook {
        inner: EmbeddedBackend::new(log.clone()),
        slow: AtomicBool::new(false),
        looking: AtomicBool::new(false),
        append_in_look: AtomicBool::new(false),
    })
}

#[test]
fn a_stop_between_the_look_and_the_wait_ends_the_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::in_memory();
    let backend = slow_to_look(&log);
    let (app, records) = started_count(&backend, &log, &dir.path().join("state"));

    // Wake the idle thread; it runs through its loop and, past its stop flag, looks slowly.
    backend.slow.store(true, Ordering::Release);
    backend.wake_waiters();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !backend.looking.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the thread did not wake");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The thread is inside `data_version` now (it sleeps there for 300 ms): stop.
    let started = Instant::now();
    let summary = app.close().expect("close");
    let took = started.elapsed();
    println!("close took {took:?}");
    assert!(
        took < Duration::from_secs(20),
        "close took {took:?}: the stream thread slept through the stop until its heartbeat"
    );
    assert_eq!(summary.records_processed, records.len() as u64);
    let model = common::count_model(records.iter().map(|(k, _)| k.as_str()));
    assert_eq!(common::latest_longs(&log, "out"), model);
}

#[test]
fn an_append_between_reading_the_version_and_the_changes_leaves_the_app_idle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::in_memory();
    let backend = slow_to_look(&log);
    let (app, records) = started_count(&backend, &log, &dir.path().join("state"));

    // Move the data version so the idle thread looks again; while it asks which partitions
    // changed, another record lands (in a topic it does not read).
    backend.append_in_look.store(true, Ordering::Release);
    let mut batch = BatchBuilder::new(Compression::None);
    batch.push(0, Some(b"k"), Some(b"v"));
    backend
        .append(&TopicPartition::new("unread", 0), &mut batch)
        .expect("append");
    let started = Instant::now();
    while backend.append_in_look.load(Ordering::Acquire) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the thread did not look"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Nothing is left to do: the application is idle at once, not at the next heartbeat.
    while !app.is_idle() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not idle after {:?}: the thread reported an older version than it waits for",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("idle again after {:?}", started.elapsed());
    let summary = app.close().expect("close");
    assert_eq!(summary.records_processed, records.len() as u64);
}
