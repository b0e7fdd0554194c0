//! The application: [`StreamsApp`], Kafka Streams' `KafkaStreams` — built from a topology
//! against a backend, started, observed (metrics, interactive queries, key metadata,
//! idleness) and stopped; its threads are started, joined and replaced in `threads`.
//!
//! The app holds every part of the instance (`engine`'s: the wiring, the lifecycle, the metrics,
//! the query inboxes, the global tables; its own: the threads' supervision) and hands each
//! consumer only the parts it uses: a [`ShutdownHandle`] the lifecycle and the backend, a
//! [`MetadataHandle`] the wiring, a store view the wiring, the query inboxes and the lifecycle,
//! the metrics endpoint the metrics and the backend.

pub(crate) mod metadata;
pub(crate) mod producer;
pub(crate) mod query;
pub(crate) mod threads;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use riffle_state_dir::StateDirectory;

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
use crate::backend::group::{GroupInfo, SubtopologyInfo};
use crate::backend::{Backend, TopicKind};
use crate::config::{ProcessingGuarantee, StreamsConfig};
use crate::engine::global::{GlobalState, GlobalTables};
use crate::engine::instance::InstanceWiring;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::metrics::{InstanceMetrics, ThreadMetrics};
use crate::engine::query::QueryInbox;
use crate::engine::thread::ThreadParts;
use crate::processor::collector::TopicTable;
use crate::serdes::SerdeRef;
use crate::state::StoreDatabase;
use crate::telemetry::Metric;
use crate::telemetry::{MetricsReader, MetricsServer};
use crate::topology::{TopicRef, Topology, changelog_topic};
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
    metrics_server: Option<MetricsServer>,
}

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
        config.validate()?;
        if topology.nodes.is_empty() {
            return Err(Error::Topology(
                "the topology has no nodes; add a source".into(),
            ));
        }
        if config.processing_guarantee == ProcessingGuarantee::ExactlyOnce
            && !backend.supports_exactly_once()
        {
            return Err(Error::Config(
                "processing_guarantee exactly_once: this backend cannot commit atomically; use at_least_once".into(),
            ));
        }
        let app_id = config.application_id.clone();
        let (mut topics, subtopologies) = resolve_topics(&topology, &app_id, &*backend)?;
        add_dead_letter_queue(&mut topics, &config, &*backend)?;
        let state_dir = StateDirectory::open(&config.state_dir, &app_id)?;
        let store_db = open_store_database(&topology, &config, &state_dir)?;
        let group = GroupInfo {
            application_id: app_id.clone(),
            process_id: state_dir.process_id().to_owned(),
            subtopologies,
            user_endpoint: config
                .application_server
                .as_deref()
                .map(str::parse)
                .transpose()?,
            processing_guarantee: config.processing_guarantee,
        };
        let coordinator = backend.group_coordinator(&group)?;
        let global_state = GlobalState::open(
            &topology,
            &*backend,
            store_db.as_ref(),
            config.deserialization_exception_handler.clone(),
        )?;
        let threads = config.num_stream_threads;
        let parts = ThreadParts {
            globals: Arc::new(GlobalTables::new(global_state.stores().to_vec())),
            lifecycle: Arc::new(Lifecycle::new(threads)),
            metrics: Arc::new(InstanceMetrics::new(threads)),
            queries: Arc::new(QueryInbox::new(threads)),
            wiring: Arc::new(InstanceWiring {
                coordinator,
                group,
                config,
                topology,
                backend,
                topics: Arc::new(topics),
                state_dir,
                store_db,
            }),
        };
        Ok(StreamsApp {
            parts,
            supervision: Arc::new(Supervision::new()),
            global_state: Some(global_state),
            started: None,
            metrics_server: None,
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
        let wiring = &self.parts.wiring;
        if let Some(addr) = &wiring.config.metrics_http_addr {
            self.metrics_server = Some(MetricsServer::start(
                addr,
                &wiring.config.application_id,
                self.metrics_reader(),
            )?);
        }
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

    /// Where the Prometheus endpoint listens (`metrics_http_addr`), once started.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics_server.as_ref().map(|s| s.addr)
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
        if let Some(mut server) = self.metrics_server.take() {
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

/// Puts the dead-letter queue among the application's topics, creating it (one partition) if
/// it is missing.
pub(crate) fn add_dead_letter_queue(
    topics: &mut TopicTable,
    config: &StreamsConfig,
    backend: &dyn Backend,
) -> Result<()> {
    let Some(name) = &config.errors_dead_letter_queue_topic_name else {
        return Ok(());
    };
    let partitions = match backend.partitions(name)? {
        Some(p) => p,
        None => {
            tracing::info!(topic = %name, "creating the dead-letter queue");
            backend.create_topic(name, 1, TopicKind::User)?;
            1
        }
    };
    topics.insert(name, partitions);
    Ok(())
}

/// Checks that what a join reads on either side is co-partitioned: the user topics above both
/// sides must have one partition count (else an error naming two that differ), and a
/// repartition topic among them gets that count (Kafka Streams' co-partition groups). Returns
/// those repartition topics' counts.
fn copartition(
    topology: &Topology,
    backend: &dyn Backend,
) -> Result<std::collections::BTreeMap<TopicRef, u32>> {
    let mut forced = std::collections::BTreeMap::new();
    for &(a, b) in &topology.copartitioned {
        let mut group = topology.upstream_topics(a);
        group.extend(topology.upstream_topics(b));
        let mut external = Vec::new();
        for topic in &group {
            if let TopicRef::External(name) = topic
                && let Some(n) = backend.partitions(name)?
            {
                external.push((name, n));
            }
        }
        let Some(&(first, n)) = external.first() else {
            continue;
        };
        if let Some(&(other, m)) = external.iter().find(|(_, m)| *m != n) {
            return Err(Error::Topology(format!(
                "{first} has {n} partitions and {other} has {m}, but they are joined: \
                 joined topics must be co-partitioned (the same number of partitions)"
            )));
        }
        for topic in group {
            if let TopicRef::Repartition(_) = topic {
                forced.insert(topic, n);
            }
        }
    }
    Ok(forced)
}

/// Resolves partition counts: source topics must exist; a sub-topology has as many tasks as its
/// widest source; a repartition topic has as many partitions as the sub-topology writing it;
/// changelogs as many as their sub-topology. Creates internal topics and missing sink topics.
pub(crate) fn resolve_topics(
    topology: &Topology,
    app_id: &str,
    backend: &dyn Backend,
) -> Result<(TopicTable, Vec<SubtopologyInfo>)> {
    let subs = &topology.subtopologies;
    let forced = copartition(topology, backend)?;
    let mut counts: Vec<Option<u32>> = vec![None; subs.len()];
    let writer_of = |topic: &TopicRef| subs.iter().position(|s| s.sink_topics.contains(topic));
    for _ in 0..=subs.len() {
        for (i, sub) in subs.iter().enumerate() {
            if counts[i].is_some() {
                continue;
            }
            let mut max = Some(0u32);
            for topic in &sub.source_topics {
                let n = match topic {
                    TopicRef::External(name) => match backend.partitions(name)? {
                        Some(n) => Some(n),
                        None => {
                            return Err(Error::MissingSourceTopic {
                                topic: name.clone(),
                            });
                        }
                    },
                    TopicRef::Repartition(_) => match forced.get(topic) {
                        Some(&n) => Some(n),
                        None => writer_of(topic).and_then(|w| counts[w]),
                    },
                };
                max = match (max, n) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            counts[i] = max;
        }
    }
    let mut table = TopicTable::default();
    let mut infos = Vec::new();
    for (i, sub) in subs.iter().enumerate() {
        let n = counts[i].filter(|&n| n > 0).ok_or_else(|| {
            Error::Topology(format!(
                "cannot resolve the partition count of sub-topology {}",
                sub.id
            ))
        })?;
        for topic in &sub.source_topics {
            let name = topic.resolve(app_id);
            if let TopicRef::Repartition(_) = topic {
                backend.create_topic(&name, n, TopicKind::Repartition)?;
            }
            let partitions = backend.partitions(&name)?.unwrap_or(n);
            table.insert(&name, partitions);
        }
        for topic in &sub.sink_topics {
            let name = topic.resolve(app_id);
            let partitions = match backend.partitions(&name)? {
                Some(p) => p,
                None => {
                    let kind = match topic {
                        TopicRef::Repartition(_) => TopicKind::Repartition,
                        TopicRef::External(_) => TopicKind::User,
                    };
                    let p = match topic {
                        TopicRef::Repartition(_) => writer_of(topic)
                            .and_then(|_| subs.iter().position(|s| s.source_topics.contains(topic)))
                            .and_then(|reader| counts[reader])
                            .unwrap_or(n),
                        TopicRef::External(_) => n,
                    };
                    tracing::info!(topic = %name, partitions = p, "creating topic");
                    backend.create_topic(&name, p, kind)?;
                    p
                }
            };
            table.insert(&name, partitions);
        }
        for &s in &sub.stores {
            let store = &topology.stores[s];
            if store.logged && store.source_topic.is_none() {
                let name = changelog_topic(app_id, &store.name);
                let kind = match store.kind.retention_ms() {
                    Some(retention_ms) => TopicKind::WindowedChangelog { retention_ms },
                    None => TopicKind::Changelog,
                };
                backend.create_topic(&name, n, kind)?;
                table.insert(&name, n);
            }
        }
        let names = |f: fn(&TopicRef) -> bool, topics: &[TopicRef]| -> Vec<String> {
            topics
                .iter()
                .filter(|t| f(t))
                .map(|t| t.resolve(app_id))
                .collect()
        };
        let external = |t: &TopicRef| matches!(t, TopicRef::External(_));
        let repartition = |t: &TopicRef| matches!(t, TopicRef::Repartition(_));
        infos.push(SubtopologyInfo {
            id: sub.id,
            source_topics: names(external, &sub.source_topics),
            repartition_source_topics: names(repartition, &sub.source_topics),
            repartition_sink_topics: names(repartition, &sub.sink_topics),
            changelog_topics: sub
                .stores
                .iter()
                .filter(|&&s| topology.stores[s].has_changelog_topic())
                .map(|&s| changelog_topic(app_id, &topology.stores[s].name))
                .collect(),
            windowed_changelog_retention_ms: sub
                .stores
                .iter()
                .filter(|&&s| topology.stores[s].has_changelog_topic())
                .filter_map(|&s| {
                    let store = &topology.stores[s];
                    let retention = store.kind.retention_ms()?;
                    Some((changelog_topic(app_id, &store.name), retention))
                })
                .collect(),
            partitions: n,
        });
    }
    Ok((table, infos))
}

/// Opens the database of every persistent store in `<app dir>/stores/` if the topology has any
/// persistent store, and deletes the stores of tasks whose directory is gone (deleted by hand,
/// or by a cleanup that stopped between the two).
fn open_store_database(
    topology: &Topology,
    config: &StreamsConfig,
    state_dir: &StateDirectory,
) -> Result<Option<Arc<StoreDatabase>>> {
    if !topology.stores.iter().any(|s| s.persistent)
        && !topology.globals.iter().any(|g| g.persistent)
    {
        return Ok(None);
    }
    let db = StoreDatabase::open(&state_dir.app_dir().join("stores"), config.memory_budget())?;
    let dirs: std::collections::HashSet<_> = state_dir.list_task_dirs()?.into_iter().collect();
    for task in db.tasks() {
        if !dirs.contains(&task) {
            tracing::info!(%task, "deleting the stores of a task whose directory is gone");
            db.delete_task(task)?;
        }
    }
    Ok(Some(db))
}
