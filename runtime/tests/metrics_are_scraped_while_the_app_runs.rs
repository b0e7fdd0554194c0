//! The metrics endpoint of a running application (`metrics_http_addr`): Prometheus' text
//! format over HTTP with Kafka Streams' metric names, values that move with the input — records
//! processed per thread and per task, store puts and gets, commits, polls — a records lag of 0
//! once the application is caught up, the same numbers from `StreamsApp::metrics()`, and no
//! endpoint once the application is closed; at the `DEBUG` recording level, store put and get
//! latencies per store.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use riffle::log::{Log, LogOptions};
use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};

mod common;

/// `GET path` → (status line, body).
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("headers, then a body");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// Sums every sample of `family` (all label sets).
fn sum(body: &str, family: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            let bare = name.split('{').next()?;
            (bare == family).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

fn samples(body: &str, family: &str) -> usize {
    body.lines()
        .filter(|l| l.split('{').next() == Some(family))
        .count()
}

fn wait_idle(app: &StreamsApp) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !app.is_idle() {
        assert!(Instant::now() < deadline, "never idle");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn keys(n: usize, offset: usize) -> Vec<(String, String)> {
    (offset..offset + n)
        .map(|i| (format!("key-{}", i % 97), "v".to_owned()))
        .collect()
}

#[test]
fn prometheus_scrapes_metrics_that_move_with_the_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    common::produce(&log, "in", 4, &keys(2_000, 0));
    let mut config = StreamsConfig::new("metrics");
    config.state_dir = dir.path().join("state");
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    config.commit_interval = Some(Duration::from_millis(20));
    config
        .set("metrics.http.addr", "127.0.0.1:0")
        .expect("Kafka-style name");
    let mut app = StreamsApp::new(
        common::persistent_count_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.start().expect("start");
    let addr = app.metrics_addr().expect("the endpoint listens");
    wait_idle(&app);

    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(
        body.contains("# TYPE kafka_streams_stream_thread_metrics_process counter"),
        "{body}"
    );
    assert_eq!(
        samples(&body, "kafka_streams_stream_thread_metrics_process_total"),
        2
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_thread_metrics_process_total"),
        2_000.0
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_task_metrics_process_total"),
        2_000.0
    );
    assert_eq!(
        samples(&body, "kafka_streams_stream_task_metrics_records_lag"),
        4
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_task_metrics_records_lag"),
        0.0
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_state_metrics_put_total"),
        2_000.0
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_state_metrics_get_total"),
        2_000.0
    );
    assert!(sum(&body, "kafka_streams_stream_thread_metrics_commit_total") >= 1.0);
    assert!(sum(&body, "kafka_streams_stream_thread_metrics_poll_total") >= 1.0);
    assert!(
        sum(
            &body,
            "kafka_streams_stream_thread_metrics_commit_latency_max"
        ) > 0.0
    );
    assert!(
        sum(
            &body,
            "kafka_streams_riffle_offset_sum_snapshot_metrics_unchanged_refresh_total"
        ) >= 1.0,
        "{body}"
    );
    let commits = sum(&body, "kafka_streams_stream_thread_metrics_commit_total");
    // At the default INFO recording level store reads and writes are not timed.
    assert_eq!(
        samples(&body, "kafka_streams_stream_state_metrics_put_latency_avg"),
        0
    );

    // More input: the counters move by exactly that much.
    common::produce(&log, "in", 4, &keys(1_000, 2_000));
    wait_idle(&app);
    let (_, body) = get(addr, "/metrics");
    assert_eq!(
        sum(&body, "kafka_streams_stream_thread_metrics_process_total"),
        3_000.0
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_task_metrics_process_total"),
        3_000.0
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_state_metrics_put_total"),
        3_000.0
    );
    assert_eq!(
        sum(&body, "kafka_streams_stream_task_metrics_records_lag"),
        0.0
    );
    assert!(sum(&body, "kafka_streams_stream_thread_metrics_commit_total") > commits);
    // 97 keys, 3,000 reads: every read after a key's first in a commit hits the cache.
    let ratio = sum(
        &body,
        "kafka_streams_stream_record_cache_metrics_hit_ratio_avg",
    );
    assert!(ratio > 0.0, "{body}");

    // The same numbers in process.
    let metrics = app.metrics();
    let total = |group: &str| -> f64 {
        metrics
            .iter()
            .filter(|m| m.group == group && m.name == "process-total")
            .map(|m| m.value)
            .sum()
    };
    assert_eq!(total("stream-thread-metrics"), 3_000.0, "{metrics:?}");
    assert_eq!(total("stream-task-metrics"), 3_000.0, "{metrics:?}");

    let (status, _) = get(addr, "/nothing");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    app.close().expect("close");
    assert!(
        TcpStream::connect(addr).is_err(),
        "the endpoint stops with the app"
    );
}

#[test]
fn the_debug_recording_level_times_every_store_read_and_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    common::produce(&log, "in", 4, &keys(2_000, 0));
    let mut config = StreamsConfig::new("debug-metrics");
    config.state_dir = dir.path().join("state");
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    config.commit_interval = Some(Duration::from_millis(20));
    config
        .set("metrics.recording.level", "DEBUG")
        .expect("Kafka-style name");
    assert!(config.set("metrics.recording.level", "LOUD").is_err());
    let mut app = StreamsApp::new(
        common::persistent_count_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.start().expect("start");
    wait_idle(&app);
    // The last writes reach the metrics at a commit.
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let metrics = app.metrics();
        let puts: f64 = metrics
            .iter()
            .filter(|m| m.name == "put-total")
            .map(|m| m.value)
            .sum();
        if puts == 2_000.0 || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let per_store = |name: &str| -> Vec<f64> {
        metrics
            .iter()
            .filter(|m| m.group == "stream-state-metrics" && m.name == name)
            .map(|m| m.value)
            .collect()
    };
    // One store per task, four tasks.
    for name in [
        "put-latency-avg",
        "put-latency-max",
        "get-latency-avg",
        "get-latency-max",
    ] {
        let values = per_store(name);
        assert_eq!(values.len(), 4, "{name}: {metrics:?}");
        assert!(values.iter().all(|v| *v > 0.0), "{name}: {values:?}");
    }
    for (avg, max) in [
        ("put-latency-avg", "put-latency-max"),
        ("get-latency-avg", "get-latency-max"),
    ] {
        for (a, m) in per_store(avg).iter().zip(per_store(max)) {
            assert!(*a <= m, "{avg} {a} above {max} {m}");
        }
    }
    app.close().expect("close");
}
