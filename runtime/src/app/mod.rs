//! The application: [`StreamsApp`], Kafka Streams' `KafkaStreams` — built from a topology
//! against a backend (`build`), started, observed (metrics, interactive queries, key metadata,
//! idleness) and stopped; its threads are started, joined and replaced in `threads`.
//!
//! The app holds every part of the instance (`engine`'s: the wiring, the lifecycle, the metrics,
//! the query inboxes, the global tables; its own: the threads' supervision and the HTTP server)
//! and hands each consumer only the parts it uses: a [`ShutdownHandle`] the lifecycle and the
//! backend, a [`MetadataHandle`] the wiring, a store view the wiring, the query inboxes and the
//! lifecycle, the `/metrics` route the metrics and the backend.

mod build;
pub(crate) mod metadata;
pub(crate) mod producer;
pub(crate) mod query;
pub(crate) mod threads;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) use crate::app::build::{add_dead_letter_queue, resolve_topics};
use crate::app::metadata::KeyQueryMetadata;
use crate::app::metadata::MetadataHandle;
use crate::app::metadata::StreamsMetadata;
use crate::app::metadata::all_instances;
use crate::app::query::QueryableStoreType;
use crate::app::query::StoreQueryParameters;
use crate::app::query::ViewSource;
use crate::app::threads::{
    StreamThreadExceptionResponse, Supervision, spawn_stream_thread, start_global_thread,
};
use crate::backend::Backend;
use crate::backend::group::GroupInfo;
use crate::config::StreamsConfig;
use crate::engine::global::GlobalState;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::metrics::ThreadMetrics;
use crate::engine::thread::ThreadParts;
use crate::http::{HttpOptions, HttpRequest, HttpResponse, HttpServer, Routes};
use crate::serdes::SerdeRef;
use crate::telemetry::Metric;
use crate::telemetry::{METRICS_PATH, MetricsReader, metrics_route};
use crate::topology::Topology;
use crate::types::error::{Error, Result};

/// A handle that asks a running application to stop (e.g. from a Ctrl-C handler).
#[derive(Clone)]
pub struct ShutdownHandle {
    lifecycle: Arc<Lifecycle>,
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShutdownHandle")
    }
}

impl ShutdownHandle {
    /// Asks every stream thread to commit and stop.
    pub fn shutdown(&self) {
        self.lifecycle.shut_down(&*self.backend);
    }
}

/// What a finished run did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunSummary {
    /// Records processed by all threads (input and repartition records).
    pub records_processed: u64,
    /// Wall time from start to the end of the run.
    pub elapsed: Duration,
}

/// A running (or ready) riffle application: Kafka Streams' `KafkaStreams`.
pub struct StreamsApp {
    /// The instance's parts, as every stream thread is given them.
    parts: ThreadParts,
    /// The threads' handles, the exception handler, the replacements.
    supervision: Arc<Supervision>,
    /// The global tables, until `start` hands them to the global thread.
    global_state: Option<GlobalState>,
    started: Option<Instant>,
    /// The routes the application added, until `start` hands them to the server.
    http_routes: Routes,
    /// The listeners the application added, until `start` hands them to the server.
    http_listeners: Vec<TcpListener>,
    /// The HTTP server, once started, if it listens anywhere.
    http_server: Option<HttpServer>,
    /// Where `metrics_http_addr` listens, once started.
    metrics_addr: Option<SocketAddr>,
}

/// How many handlers of the HTTP server run at once: scrapes and the application's routes
/// (which may wait on the stream threads, up to a query's 10 s) share them.
const HTTP_HANDLER_THREADS: usize = 4;

impl std::fmt::Debug for StreamsApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsApp")
            .field("application_id", &self.parts.wiring.config.application_id)
            .finish()
    }
}

impl StreamsApp {
    /// Resolves `topology` against `backend`: checks the source topics, creates the internal
    /// topics, and locks the state directory.
    pub fn new(
        topology: Topology,
        config: StreamsConfig,
        backend: Arc<dyn Backend>,
    ) -> Result<StreamsApp> {
        let (parts, global_state) = build::build(topology, config, backend)?;
        Ok(StreamsApp {
            parts,
            supervision: Arc::new(Supervision::new()),
            global_state: Some(global_state),
            started: None,
            http_routes: Routes::default(),
            http_listeners: Vec::new(),
            http_server: None,
            metrics_addr: None,
        })
    }

    /// Sets what happens when a stream thread dies of an error or a panic in user code
    /// (Kafka Streams' `StreamsUncaughtExceptionHandler`). The default shuts the client down.
    pub fn set_uncaught_exception_handler(
        &mut self,
        handler: impl Fn(&Error) -> StreamThreadExceptionResponse + Send + Sync + 'static,
    ) -> Result<()> {
        self.supervision.set_handler(Arc::new(handler));
        Ok(())
    }

    /// Starts the stream threads.
    pub fn start(&mut self) -> Result<()> {
        if self.started.is_some() {
            return Err(Error::IllegalState(
                "the application was already started".into(),
            ));
        }
        self.started = Some(Instant::now());
        self.start_http()?;
        let wiring = &self.parts.wiring;
        if let Some(state) = self.global_state.take().filter(|s| !s.is_empty()) {
            start_global_thread(&self.parts, &self.supervision, state)?;
        }
        let count = wiring.config.num_stream_threads;
        let names: Vec<String> = (0..count)
            .map(|_| {
                self.supervision
                    .next_thread_name(&wiring.config.application_id)
            })
            .collect();
        for name in &names {
            wiring.coordinator.register(name);
        }
        wiring.backend.wake_waiters();
        for (slot, name) in names.into_iter().enumerate() {
            spawn_stream_thread(&self.parts, &self.supervision, slot, name)?;
        }
        Ok(())
    }

    /// Adds a route to the instance's HTTP server, before [`StreamsApp::start`]: `handler`
    /// answers the requests whose path is under `prefix` (`/counts/` takes `/counts/<key>`;
    /// `/status` takes `/status` and `/status/…`; the longest prefix wins), whatever their
    /// method. The server listens at `metrics_http_addr` and at every listener added with
    /// [`StreamsApp::add_http_listener`], and answers `/metrics` itself. A handler may block
    /// (an interactive query waits for the stream threads): the server runs it on one of its
    /// few handler threads, never on the one that serves the connections. A prefix not
    /// starting with `/`, one already taken (`/metrics` is), or a call after `start` is an
    /// error.
    pub fn add_http_route(
        &mut self,
        prefix: &str,
        handler: impl Fn(&HttpRequest) -> HttpResponse + Send + Sync + 'static,
    ) -> Result<()> {
        self.refuse_once_started("an HTTP route")?;
        if prefix == METRICS_PATH {
            return Err(Error::Config(format!(
                "HTTP route {prefix:?}: the metrics' route"
            )));
        }
        self.http_routes.add(prefix, Arc::new(handler))
    }

    /// Has the instance's HTTP server also listen on `listener`, before
    /// [`StreamsApp::start`]; for an address the application needs to know before the
    /// application exists (its `application_server`, when port 0 picked the port). Every
    /// address the server listens at answers every route and `/metrics`.
    pub fn add_http_listener(&mut self, listener: TcpListener) -> Result<()> {
        self.refuse_once_started("an HTTP listener")?;
        self.http_listeners.push(listener);
        Ok(())
    }

    fn refuse_once_started(&self, what: &str) -> Result<()> {
        match self.started {
            Some(_) => Err(Error::IllegalState(format!(
                "{what} is added before the application starts"
            ))),
            None => Ok(()),
        }
    }

    /// Starts the HTTP server if it listens anywhere: at `metrics_http_addr`, and on the
    /// listeners the application added.
    fn start_http(&mut self) -> Result<()> {
        let config = &self.parts.wiring.config;
        let mut listeners = Vec::new();
        if let Some(addr) = &config.metrics_http_addr {
            listeners.push(TcpListener::bind(addr).map_err(|e| {
                Error::Config(format!("metrics_http_addr {addr}: cannot listen: {e}"))
            })?);
        }
        let metrics_listens = !listeners.is_empty();
        listeners.append(&mut self.http_listeners);
        if listeners.is_empty() {
            if !self.http_routes.is_empty() {
                return Err(Error::Config(format!(
                    "HTTP routes {:?} were added, but the server listens nowhere: set \
                     metrics_http_addr or add a listener",
                    self.http_routes
                )));
            }
            return Ok(());
        }
        let mut routes = std::mem::take(&mut self.http_routes);
        routes.add(METRICS_PATH, metrics_route(self.metrics_reader()))?;
        let options = HttpOptions {
            header_read_timeout: config.http_header_read_timeout,
            handler_threads: HTTP_HANDLER_THREADS,
        };
        let server = HttpServer::start(&config.application_id, listeners, routes, options)
            .map_err(|e| Error::Config(format!("starting the HTTP server: {e}")))?;
        if metrics_listens {
            self.metrics_addr = server.addrs().first().copied();
        }
        tracing::info!(addrs = ?server.addrs(), "serving HTTP, Prometheus' metrics at /metrics");
        self.http_server = Some(server);
        Ok(())
    }

    /// Every metric now, under Kafka Streams' names: per thread (`stream-thread-metrics`:
    /// `process-total`, `poll-`, `commit-` and `punctuate-` totals and latencies), per task
    /// (`stream-task-metrics`: `process-total`, `dropped-records-total`, `records-lag` per
    /// input partition), per store (`stream-state-metrics`, `stream-record-cache-metrics`),
    /// restoration (`stream-state-updater-metrics`) and riffle's offset-sum snapshot counters.
    /// Records lag asks the backend for each input's end offset.
    pub fn metrics(&self) -> Vec<Metric> {
        self.metrics_reader().collect()
    }

    /// What telemetry reads the metrics from: the metric sources, and the backend for the
    /// inputs' end offsets.
    fn metrics_reader(&self) -> MetricsReader {
        let wiring = &self.parts.wiring;
        MetricsReader {
            metrics: self.parts.metrics.clone(),
            backend: wiring.backend.clone(),
            recording_level: wiring.config.metrics_recording_level,
        }
    }

    /// A read-only view of the store `params` names, over every task of this instance (Kafka
    /// Streams' `KafkaStreams#store`):
    /// `app.store(StoreQueryParameters::from_name_and_type("counts",
    /// QueryableStoreTypes::key_value::<String, i64>()))` gives a
    /// [`crate::query::ReadOnlyKeyValueStore`]; [`crate::query::QueryableStoreTypes::window_store`] and
    /// [`crate::query::QueryableStoreTypes::session_store`] give window and session views. An unknown
    /// store, one of other key or value types or of another kind is
    /// [`Error::InvalidStateStore`]; so is a query while a task holding the store restores, or
    /// once the application stopped.
    pub fn store<T: QueryableStoreType>(
        &self,
        params: StoreQueryParameters<T>,
    ) -> Result<T::Store> {
        let source = ViewSource {
            wiring: self.parts.wiring.clone(),
            queries: self.parts.queries.clone(),
            lifecycle: self.parts.lifecycle.clone(),
        };
        T::view(&source, &params.name)
    }

    /// Where `key` of store `store` lives (Kafka Streams' `queryMetadataForKey`): its
    /// partition, and the instances running its task as active and standby, by their
    /// `application_server`. `key_serde` must be the serde the store's input is keyed with (the
    /// key's partition is the default partitioner's over its bytes). On Kafka the instances
    /// come from the broker's latest heartbeat answer, so the active host is `None` during a
    /// rebalance; on the embedded log this instance holds every key. An unknown store is
    /// [`Error::InvalidStateStore`].
    pub fn query_metadata_for_key<K: 'static>(
        &self,
        store: &str,
        key: &K,
        key_serde: &SerdeRef<K>,
    ) -> Result<KeyQueryMetadata> {
        self.metadata_handle()
            .query_metadata_for_key(store, key, key_serde)
    }

    /// The two metadata calls for another thread ([`crate::query::MetadataHandle`]).
    pub fn metadata_handle(&self) -> MetadataHandle {
        MetadataHandle {
            wiring: self.parts.wiring.clone(),
        }
    }

    /// Every instance of the application with an `application_server`, and the input
    /// partitions of its active and standby tasks (Kafka Streams'
    /// `metadataForAllStreamsClients`).
    pub fn metadata_for_all_streams_clients(&self) -> Result<Vec<StreamsMetadata>> {
        all_instances(&self.parts.wiring)
    }

    /// Where the HTTP server listens for `metrics_http_addr` (Prometheus' `/metrics`, and the
    /// application's routes), once started.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Every address the HTTP server listens at, once started: `metrics_http_addr`'s first,
    /// then the listeners the application added. Empty when it does not run.
    pub fn http_addrs(&self) -> Vec<SocketAddr> {
        self.http_server
            .as_ref()
            .map_or_else(Vec::new, |s| s.addrs().to_vec())
    }

    /// A handle that stops the application from another thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            lifecycle: self.parts.lifecycle.clone(),
            backend: self.parts.wiring.backend.clone(),
        }
    }

    /// The group as the coordinator was told about it: topology, process id.
    pub fn group_info(&self) -> &GroupInfo {
        &self.parts.wiring.group
    }

    /// Stream threads replaced after they died.
    pub fn threads_replaced(&self) -> u64 {
        self.supervision.threads_replaced()
    }

    /// Changelog records restored into stores so far, by all threads (the global thread's
    /// restore of the global tables included).
    pub fn records_restored(&self) -> u64 {
        self.parts
            .metrics
            .threads
            .iter()
            .map(|m| m.records_restored.load(Ordering::Relaxed))
            .sum::<u64>()
            + self.parts.globals.records_restored()
    }

    /// Records processed so far by all threads.
    pub fn records_processed(&self) -> u64 {
        self.parts.metrics.records_processed.load(Ordering::Relaxed)
    }

    /// The counters of each stream thread.
    pub fn thread_metrics(&self) -> Vec<Arc<ThreadMetrics>> {
        self.parts.metrics.threads.clone()
    }

    /// Whether the application was asked to stop, or stopped on an error.
    pub fn is_shutting_down(&self) -> bool {
        self.parts.lifecycle.is_shutting_down()
    }

    /// Whether every thread is caught up with every input and has committed.
    pub fn is_idle(&self) -> bool {
        let current = self.parts.wiring.backend.data_version();
        self.parts.globals.idle_at(current) && self.parts.lifecycle.threads_idle_at(current)
    }

    /// Starts (if needed), runs until every input is drained and committed, then closes.
    pub fn run_until_idle(mut self) -> Result<RunSummary> {
        if self.started.is_none() {
            self.start()?;
        }
        while !self.is_idle() && !self.is_shutting_down() {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.close()
    }

    /// Waits until [`StreamsApp::shutdown_handle`] or an error stops the application, then
    /// closes it.
    pub fn wait(mut self) -> Result<RunSummary> {
        if self.started.is_none() {
            self.start()?;
        }
        while !self.is_shutting_down() {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.close()
    }

    /// Commits and stops every thread. Returns the first error a thread met.
    pub fn close(mut self) -> Result<RunSummary> {
        if let Some(mut server) = self.http_server.take() {
            server.stop();
        }
        self.parts.lifecycle.shut_down(&*self.parts.wiring.backend);
        // Panics are caught inside the threads, so a join error cannot happen; the first
        // thread error is the application's.
        let first_error = self
            .supervision
            .join_all()
            .into_iter()
            .find_map(Result::err);
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(RunSummary {
            records_processed: self.records_processed(),
            elapsed: self.started.map(|s| s.elapsed()).unwrap_or_default(),
        })
    }
}

impl Drop for StreamsApp {
    fn drop(&mut self) {
        self.parts.lifecycle.shut_down(&*self.parts.wiring.backend);
        self.supervision.join_all();
    }
}
