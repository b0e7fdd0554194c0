//! An idle application on Kafka does next to nothing: its stream threads sleep until the fetch
//! watcher sees a partition grow (no re-fetching of every partition on a timer). Measures the
//! CPU time of the stream threads and of the watcher over an idle period (`docs/BENCHMARKS.md`).

// Reads /proc (procfs, a Linux-only dev-dependency).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{config, count_topology, latest_counts, produce_words, wait_for};
use procfs::process::Process;
use riffle::{StreamsApp, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

/// CPU time (user + system) of thread `tid` of this process, in clock ticks (1/100 s).
fn cpu_ticks(tid: u64) -> u64 {
    let tid = i32::try_from(tid).unwrap();
    let stat = Process::myself()
        .and_then(|me| me.task_from_tid(tid))
        .and_then(|task| task.stat())
        .unwrap();
    stat.utime + stat.stime
}

/// The tid of this process's thread named `name`.
fn tid_named(name: &str) -> Option<u64> {
    Process::myself().ok()?.tasks().ok()?.find_map(|task| {
        let task = task.ok()?;
        let comm = task.stat().ok()?.comm;
        // Linux truncates thread names to 15 bytes.
        (comm == name[..name.len().min(15)]).then(|| u64::try_from(task.tid).ok())?
    })
}

#[test]
fn idle_stream_threads_and_the_watcher_use_almost_no_cpu() {
    let broker = KafkaBroker::start().unwrap();
    let mut kafka = KafkaConfig::new(broker.bootstrap());
    // For comparison (docs/BENCHMARKS.md): RIFFLE_TEST_FETCH_POLL_MS=50 re-fetches every
    // partition of an idle thread every 50 ms, as riffle-kafka did before the watcher.
    if let Some(ms) = std::env::var("RIFFLE_TEST_FETCH_POLL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        kafka.fetch_poll_interval = Duration::from_millis(ms);
    }
    let backend = KafkaBackend::connect(kafka).unwrap();
    let expected = produce_words(&backend, "words", 8, 4_000, 200, 0);
    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        count_topology("words", "counts", StoreType::InMemory),
        config("idle", state.path(), 2),
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    wait_for("the input counted", Duration::from_secs(90), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let threads: Vec<u64> = app
        .thread_metrics()
        .iter()
        .map(|m| m.os_thread_id())
        .collect();
    let watcher = tid_named("riffle-kafka-fetch-watcher").expect("the watcher thread");
    let before: Vec<u64> = threads.iter().map(|&t| cpu_ticks(t)).collect();
    let watcher_before = cpu_ticks(watcher);
    let idle = Duration::from_secs(10);
    let started = Instant::now();
    std::thread::sleep(idle);
    let secs = started.elapsed().as_secs_f64();
    let share = |ticks: u64| ticks as f64 / 100.0 / secs * 100.0;
    for (i, (&t, b)) in threads.iter().zip(&before).enumerate() {
        let used = share(cpu_ticks(t) - b);
        println!(
            "stream thread {} (8 tasks between 2 threads): {used:.2} % CPU while idle",
            i + 1
        );
        assert!(
            used < 5.0,
            "stream thread {} used {used:.2} % CPU idle",
            i + 1
        );
    }
    let used = share(cpu_ticks(watcher) - watcher_before);
    println!("fetch watcher: {used:.2} % CPU while idle");
    assert!(used < 5.0, "the watcher used {used:.2} % CPU idle");
    app.close().unwrap();
}
