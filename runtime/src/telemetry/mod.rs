//! An application's metrics under Kafka Streams' names — threads, tasks, record caches and
//! stores, restoration, and riffle's offset-sum snapshot counters — read in process
//! ([`crate::StreamsApp::metrics`]) and exported in Prometheus' text format at `/metrics` on
//! the instance's HTTP server.
//!
//! Nothing here is touched per record. The stream threads keep plain counters and publish them
//! into relaxed atomics once per loop iteration (records processed, fetches), per commit (store
//! and cache counters, commit and flush latencies) or per punctuation; a reader sums the
//! atomics. Registering a task or a store (a mutex over a map) happens when the task starts
//! and ends.
//!
//! Telemetry owns the reading and the export: a [`MetricsReader`] is what it is given of an
//! instance — the metric sources the threads write (`InstanceMetrics`), the backend for the
//! inputs' end offsets, and the recording level — and [`metrics_route`] answers Prometheus'
//! scrapes from one, as a route of the HTTP server (runtime/src/http/).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use riffle_state_dir::TaskId;

use crate::backend::Backend;
use crate::config::RecordingLevel;
use crate::engine::metrics::{InstanceMetrics, StoreEntry, TaskMetrics, lock};
use crate::http::{HttpHandler, HttpRequest, HttpResponse};

/// Where Prometheus scrapes.
pub(crate) const METRICS_PATH: &str = "/metrics";

/// One metric's current value, as [`crate::StreamsApp::metrics`] reads it: Kafka Streams'
/// group (`stream-thread-metrics`, …) and name (`process-total`, …), its tags (`thread-id`,
/// `task-id`, …) and its value. Names ending in `-total` are counters; the rest are gauges.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Metric {
    /// The metric group.
    pub group: &'static str,
    /// The metric's name.
    pub name: &'static str,
    /// Its tags, in a fixed order.
    pub tags: Vec<(&'static str, String)>,
    /// Its value.
    pub value: f64,
}

impl Metric {
    fn new(
        group: &'static str,
        name: &'static str,
        tags: &[(&'static str, &str)],
        value: f64,
    ) -> Self {
        Metric {
            group,
            name,
            tags: tags.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            value,
        }
    }

    /// Whether it only grows.
    pub fn is_counter(&self) -> bool {
        self.name.ends_with("-total")
    }
}

/// What an instance's metrics are read from.
#[derive(Clone)]
pub(crate) struct MetricsReader {
    /// What the stream threads count.
    pub(crate) metrics: Arc<InstanceMetrics>,
    /// Asked for each input partition's end offset (records lag).
    pub(crate) backend: Arc<dyn Backend>,
    /// Store latencies are read at `DEBUG` only.
    pub(crate) recording_level: RecordingLevel,
}

impl MetricsReader {
    /// Every metric of the application now. Records lag asks the backend for each input
    /// partition's end offset.
    pub(crate) fn collect(&self) -> Vec<Metric> {
        collect(&self.metrics, &*self.backend, self.recording_level)
    }
}

fn collect(
    metrics: &InstanceMetrics,
    backend: &dyn Backend,
    recording_level: RecordingLevel,
) -> Vec<Metric> {
    let mut out = Vec::new();
    const THREAD: &str = "stream-thread-metrics";
    for m in &metrics.threads {
        let name = m.name();
        if name.is_empty() {
            continue;
        }
        let tags = [("thread-id", name.as_str())];
        let records = m.records() as f64;
        out.push(Metric::new(THREAD, "process-total", &tags, records));
        let (_, process_ns) = m.process_time();
        out.push(Metric::new(
            THREAD,
            "process-latency-avg",
            &tags,
            if records > 0.0 {
                process_ns / records / 1e6
            } else {
                0.0
            },
        ));
        for (latency, total, avg_name, max_name) in [
            (
                &m.poll,
                "poll-total",
                "poll-latency-avg",
                "poll-latency-max",
            ),
            (
                &m.commit,
                "commit-total",
                "commit-latency-avg",
                "commit-latency-max",
            ),
            (
                &m.punctuate,
                "punctuate-total",
                "punctuate-latency-avg",
                "punctuate-latency-max",
            ),
        ] {
            let (count, avg, max) = latency.read();
            out.push(Metric::new(THREAD, total, &tags, count as f64));
            out.push(Metric::new(THREAD, avg_name, &tags, avg));
            out.push(Metric::new(THREAD, max_name, &tags, max));
        }
        out.push(Metric::new(
            THREAD,
            "dropped-records-total",
            &tags,
            m.dropped_records() as f64,
        ));
        const RESTORE: &str = "stream-state-updater-metrics";
        out.push(Metric::new(
            RESTORE,
            "restore-total",
            &tags,
            m.records_restored() as f64,
        ));
        out.push(Metric::new(
            RESTORE,
            "restore-remaining-records-total",
            &tags,
            m.restore_remaining.load(Ordering::Relaxed) as f64,
        ));
        const SNAPSHOT: &str = "riffle-offset-sum-snapshot-metrics";
        out.push(Metric::new(
            SNAPSHOT,
            "unchanged-refresh-total",
            &tags,
            m.snapshot_unchanged() as f64,
        ));
        out.push(Metric::new(
            SNAPSHOT,
            "incremental-update-total",
            &tags,
            m.snapshot_incremental_updates() as f64,
        ));
        out.push(Metric::new(
            SNAPSHOT,
            "full-rebuild-total",
            &tags,
            m.snapshot_full_rebuilds() as f64,
        ));
    }
    const TASK: &str = "stream-task-metrics";
    let tasks: Vec<(TaskId, Arc<TaskMetrics>)> = lock(&metrics.registry.tasks)
        .iter()
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    for (task, m) in tasks {
        let task = task.to_string();
        let tags = [("thread-id", m.thread.as_str()), ("task-id", task.as_str())];
        out.push(Metric::new(
            TASK,
            "process-total",
            &tags,
            m.processed.load(Ordering::Relaxed) as f64,
        ));
        out.push(Metric::new(
            TASK,
            "dropped-records-total",
            &tags,
            m.dropped.load(Ordering::Relaxed) as f64,
        ));
        for (tp, consumed) in &m.consumed {
            let Ok(end) = backend.end_offset(tp) else {
                continue;
            };
            let lag = end.saturating_sub(consumed.load(Ordering::Relaxed));
            let partition = tp.partition.to_string();
            out.push(Metric::new(
                TASK,
                "records-lag",
                &[
                    ("thread-id", m.thread.as_str()),
                    ("task-id", task.as_str()),
                    ("topic", &tp.topic),
                    ("partition", partition.as_str()),
                ],
                lag as f64,
            ));
        }
    }
    let stores: Vec<StoreEntry> = lock(&metrics.registry.stores)
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for ((task, store), (thread, m)) in stores {
        let task = task.to_string();
        let tags = [
            ("thread-id", thread.as_str()),
            ("task-id", task.as_str()),
            ("store", store.as_str()),
        ];
        const STATE: &str = "stream-state-metrics";
        let gets = m.gets.load(Ordering::Relaxed);
        out.push(Metric::new(
            STATE,
            "put-total",
            &tags,
            m.puts.load(Ordering::Relaxed) as f64,
        ));
        out.push(Metric::new(STATE, "get-total", &tags, gets as f64));
        let (flushes, avg, max) = m.flush.read();
        out.push(Metric::new(STATE, "flush-total", &tags, flushes as f64));
        out.push(Metric::new(STATE, "flush-latency-avg", &tags, avg));
        out.push(Metric::new(STATE, "flush-latency-max", &tags, max));
        if recording_level >= RecordingLevel::Debug {
            for (latency, avg_name, max_name) in [
                (&m.put, "put-latency-avg", "put-latency-max"),
                (&m.get, "get-latency-avg", "get-latency-max"),
            ] {
                let (_, avg, max) = latency.read();
                out.push(Metric::new(STATE, avg_name, &tags, avg));
                out.push(Metric::new(STATE, max_name, &tags, max));
            }
        }
        let hits = m.hits.load(Ordering::Relaxed);
        out.push(Metric::new(
            "stream-record-cache-metrics",
            "hit-ratio-avg",
            &[
                ("thread-id", thread.as_str()),
                ("task-id", task.as_str()),
                ("record-cache-id", store.as_str()),
            ],
            if gets > 0 {
                hits as f64 / gets as f64
            } else {
                0.0
            },
        ));
    }
    out
}

/// Prometheus' name of a metric: `kafka_streams_<group>_<name>`, dashes as underscores, a
/// counter without its `-total` (the encoder adds `_total`).
fn prometheus_name(m: &Metric) -> String {
    let name = m.name.strip_suffix("-total").unwrap_or(m.name);
    format!("kafka_streams_{}_{}", m.group, name).replace('-', "_")
}

/// The metrics as one scrape's families.
#[derive(Debug)]
struct Scrape(Vec<Metric>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let mut families: BTreeMap<String, Vec<&Metric>> = BTreeMap::new();
        for m in &self.0 {
            families.entry(prometheus_name(m)).or_default().push(m);
        }
        for (name, metrics) in families {
            let counter = metrics.first().is_some_and(|m| m.is_counter());
            let help = format!("Kafka Streams' {} {}", metrics[0].group, metrics[0].name);
            let kind = if counter {
                ConstCounter::new(0.0f64).metric_type()
            } else {
                ConstGauge::new(0.0f64).metric_type()
            };
            let mut family = encoder.encode_descriptor(&name, &help, None, kind)?;
            for m in metrics {
                let labels: Vec<(String, String)> = m
                    .tags
                    .iter()
                    .map(|(k, v)| (k.replace('-', "_"), v.clone()))
                    .collect();
                let sample = family.encode_family(&labels)?;
                if counter {
                    ConstCounter::new(m.value).encode(sample)?;
                } else {
                    ConstGauge::new(m.value).encode(sample)?;
                }
            }
        }
        Ok(())
    }
}

/// `metrics` in the OpenMetrics text format Prometheus scrapes.
pub(crate) fn encode_prometheus(metrics: Vec<Metric>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape(metrics)));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::warn!(error = %e, "encoding the metrics failed");
    }
    out
}

/// The `/metrics` route of the instance's HTTP server: Prometheus' text format, read from
/// `reader` at each scrape (records lag asks the backend, so it runs on the server's handler
/// threads). Only `GET` and `HEAD` of `/metrics` itself; other methods are 405.
pub(crate) fn metrics_route(reader: MetricsReader) -> HttpHandler {
    Arc::new(move |request: &HttpRequest| {
        if request.path() != METRICS_PATH {
            return HttpResponse::text(404, format!("not found: GET {METRICS_PATH}\n"));
        }
        if !request.is_read() {
            return HttpResponse::text(405, format!("{METRICS_PATH} answers GET\n"))
                .with_header("Allow", "GET, HEAD");
        }
        HttpResponse::new(
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            encode_prometheus(reader.collect()),
        )
    })
}
