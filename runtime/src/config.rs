//! Application configuration, with Kafka Streams' names where they apply.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use riffle_record::Compression;
pub use riffle_task_manager::SnapshotStrategy;

use crate::state::MIN_MEMORY_BUDGET;
use crate::state::MemoryBudget;
use crate::types::error::{Error, Result};
use crate::types::handlers::ExceptionHandlerRef;
use crate::types::handlers::Handlers;
use crate::types::host::HostInfo;
use crate::types::timestamp::TimestampExtractorRef;

/// The default commit interval under at-least-once (Kafka Streams' default).
const AT_LEAST_ONCE_COMMIT_INTERVAL: Duration = Duration::from_secs(30);
/// The default commit interval under exactly-once (Kafka Streams' default).
const EXACTLY_ONCE_COMMIT_INTERVAL: Duration = Duration::from_millis(100);

/// What a commit promises about records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProcessingGuarantee {
    /// Every record is processed at least once; after a crash, work since the last commit is
    /// done again.
    #[default]
    AtLeastOnce,
    /// A commit's outputs, changelog writes and offsets become visible together.
    ExactlyOnce,
}

impl FromStr for ProcessingGuarantee {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "at_least_once" => Ok(ProcessingGuarantee::AtLeastOnce),
            "exactly_once" | "exactly_once_v2" => Ok(ProcessingGuarantee::ExactlyOnce),
            other => Err(Error::Config(format!(
                "processing_guarantee must be at_least_once or exactly_once, not {other:?}"
            ))),
        }
    }
}

/// Where reading a source partition starts when the application has no committed offset for
/// it, or its committed offset is out of the partition's range (`auto.offset.reset`).
/// Repartition topics always start at the earliest offset, as in Kafka Streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AutoOffsetReset {
    /// The partition's first offset (Kafka Streams' default).
    #[default]
    Earliest,
    /// The partition's end: only records written after the task started.
    Latest,
    /// No reset: the task fails with [`Error::NoOffsetForPartition`].
    None,
}

impl FromStr for AutoOffsetReset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "earliest" => Ok(AutoOffsetReset::Earliest),
            "latest" => Ok(AutoOffsetReset::Latest),
            "none" => Ok(AutoOffsetReset::None),
            other => Err(Error::Config(format!(
                "auto_offset_reset must be earliest, latest or none, not {other:?}"
            ))),
        }
    }
}

/// Which metrics are recorded (`metrics.recording.level`), as in Kafka Streams: at `INFO`
/// (the default) the per-record store metrics are not, at `DEBUG` every store read and write
/// is timed (`put-latency-*`, `get-latency-*` of `stream-state-metrics`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum RecordingLevel {
    /// Thread, task, cache and restoration metrics, store counts and flush latency.
    #[default]
    Info,
    /// Also each store read's and write's latency: a clock read around every one.
    Debug,
    /// As `Debug` (Kafka's `TRACE` adds metrics riffle does not have).
    Trace,
}

impl FromStr for RecordingLevel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "INFO" => Ok(RecordingLevel::Info),
            "DEBUG" => Ok(RecordingLevel::Debug),
            "TRACE" => Ok(RecordingLevel::Trace),
            _ => Err(Error::Config(format!(
                "metrics_recording_level must be INFO, DEBUG or TRACE, not {s:?}"
            ))),
        }
    }
}

/// Which input partitions a stream thread fetches in a loop iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FetchStrategy {
    /// Only the partitions the backend says may have new data (and those whose last fetch
    /// returned some): an iteration's work grows with the partitions that have data, not with
    /// the tasks owned.
    #[default]
    Ready,
    /// Every input partition of every task, whenever the backend's data version moved — the
    /// loop before `Ready` (and Kafka Streams' `poll` of all assigned partitions), kept as a
    /// baseline for `cargo run --release -p riffle-bench -- trickle`.
    ScanAll,
}

impl FromStr for FetchStrategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ready" => Ok(FetchStrategy::Ready),
            "scan-all" | "scan_all" => Ok(FetchStrategy::ScanAll),
            other => Err(Error::Config(format!(
                "fetch_strategy must be ready or scan-all, not {other:?}"
            ))),
        }
    }
}

/// When an idle stream thread wakes up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IdleWakeup {
    /// At its earliest deadline (heartbeat, commit of dirty state, cleanup), or when the
    /// backend signals data or the thread is woken: an idle thread costs next to nothing.
    #[default]
    Deadlines,
    /// Also every `poll_ms`, as a Kafka Streams thread returns from `poll` — the baseline the
    /// idle benchmark compares with.
    EveryPoll,
}

impl FromStr for IdleWakeup {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "deadlines" => Ok(IdleWakeup::Deadlines),
            "every-poll" | "every_poll" => Ok(IdleWakeup::EveryPoll),
            other => Err(Error::Config(format!(
                "idle_wakeup must be deadlines or every-poll, not {other:?}"
            ))),
        }
    }
}

/// Which of Kafka Streams' topology optimizations [`crate::StreamsBuilder::build_with`] applies
/// (`topology.optimization`): `none` (Kafka's default, and what
/// [`crate::StreamsBuilder::build`] applies), `all`, or a comma-separated list of
/// `reuse.ktable.source.topics`, `merge.repartition.topics` and `single.store.self.join`.
///
/// - `reuse.ktable.source.topics`: a table read by `StreamsBuilder::table` uses its source topic
///   as its store's changelog (no `-changelog` topic of its own);
/// - `merge.repartition.topics`: the repartition topics of the groupings and joins after one
///   key-changing operation become one topic;
/// - `single.store.self.join`: accepted, not applied (riffle's stream–stream self-join keeps its
///   two stores; see docs/porting.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TopologyOptimization {
    /// `reuse.ktable.source.topics`.
    pub reuse_ktable_source_topics: bool,
    /// `merge.repartition.topics`.
    pub merge_repartition_topics: bool,
    /// `single.store.self.join` (accepted, not applied).
    pub single_store_self_join: bool,
}

impl TopologyOptimization {
    /// `none`: no optimization (Kafka Streams' default).
    pub fn none() -> Self {
        Self::default()
    }

    /// `all`: every optimization.
    pub fn all() -> Self {
        TopologyOptimization {
            reuse_ktable_source_topics: true,
            merge_repartition_topics: true,
            single_store_self_join: true,
        }
    }
}

impl FromStr for TopologyOptimization {
    type Err = Error;
    /// Kafka's rule (`StreamsConfig.verifyTopologyOptimizationConfigs`): `none` or `all` alone,
    /// or a list of the named optimizations, separated by commas.
    fn from_str(s: &str) -> Result<Self> {
        let names: Vec<&str> = s.split(',').map(str::trim).collect();
        let alone = names.iter().any(|n| matches!(*n, "none" | "all"));
        if alone && names.len() > 1 {
            return Err(Error::Config(format!(
                "topology.optimization {s:?}: none and all cannot be listed with others"
            )));
        }
        let mut o = TopologyOptimization::none();
        for name in names {
            match name {
                "none" => {}
                "all" => o = TopologyOptimization::all(),
                "reuse.ktable.source.topics" => o.reuse_ktable_source_topics = true,
                "merge.repartition.topics" => o.merge_repartition_topics = true,
                "single.store.self.join" => o.single_store_self_join = true,
                other => {
                    return Err(Error::Config(format!(
                        "topology.optimization: unknown optimization {other:?} (none, all, \
                         reuse.ktable.source.topics, merge.repartition.topics, \
                         single.store.self.join)"
                    )));
                }
            }
        }
        Ok(o)
    }
}

/// The configuration of a riffle application.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StreamsConfig {
    /// Names the consumer group, the state directory and the internal topics.
    pub application_id: String,
    /// How many stream threads run tasks.
    pub num_stream_threads: usize,
    /// How often a stream thread commits (`commit.interval.ms`); `None`, the default, is
    /// Kafka Streams' default for the processing guarantee: 30 s, or 100 ms under exactly-once.
    /// [`StreamsConfig::commit_interval`] gives the interval in force.
    pub commit_interval: Option<Duration>,
    /// The longest a stream thread's poll blocks while data may come (`poll.ms`); an idle
    /// thread sleeps to its next deadline unless [`IdleWakeup::EveryPoll`] is set.
    pub poll: Duration,
    /// Where task state lives: `<state_dir>/<application_id>/`.
    pub state_dir: PathBuf,
    /// At-least-once or exactly-once.
    pub processing_guarantee: ProcessingGuarantee,
    /// How the offset-sum snapshot is refreshed (`incremental` or `full-rebuild`).
    pub snapshot_strategy: SnapshotStrategy,
    /// Which partitions a loop iteration fetches (`ready` or `scan-all`).
    pub fetch_strategy: FetchStrategy,
    /// When an idle stream thread wakes (`deadlines` or `every-poll`).
    pub idle_wakeup: IdleWakeup,
    /// How often a stream thread heartbeats to its group coordinator (a Kafka broker may ask
    /// for more often, never less).
    pub heartbeat_interval: Duration,
    /// How often task offsets are resent even if the assignment did not change.
    pub task_offset_interval: Duration,
    /// A warm-up task whose changelog lag is at most this many records is caught up; its
    /// offsets are sent at the next heartbeat (Kafka's `acceptable.recovery.lag`). A Kafka
    /// broker's own value takes precedence.
    pub acceptable_recovery_lag: u64,
    /// How many standby replicas of each stateful task the embedded log's group keeps, on other
    /// instances (`num.standby.replicas`; on Kafka the broker's
    /// `group.streams.num.standby.replicas` decides).
    pub num_standby_replicas: u32,
    /// The most warm-up tasks the embedded log's group places at once (`max.warmup.replicas`).
    pub max_warmup_replicas: u32,
    /// How long an instance of a group on the embedded log may stay silent before the others
    /// declare it gone and take its tasks (`group.streams.session.timeout.ms`; a process that
    /// dies is seen at once, through its file lock). On Kafka the broker's setting decides.
    pub group_session_timeout: Duration,
    /// How often the members of a group on the embedded log heartbeat
    /// (`group.streams.heartbeat.interval.ms`): it bounds how long a task move waits.
    pub group_heartbeat_interval: Duration,
    /// How long an unowned task directory is kept before cleanup (`state.cleanup.delay.ms`).
    pub state_cleanup_delay: Duration,
    /// The most bytes one fetch of one partition returns.
    pub fetch_max_bytes: usize,
    /// An outgoing batch is appended once it holds this many bytes.
    pub batch_max_bytes: usize,
    /// Compression of outgoing batches.
    pub compression: Compression,
    /// Bytes the store caches of a stream thread may hold before it commits early (within the
    /// memory budget's share for record caches, an eighth of `statestore_memory_max_bytes`).
    pub statestore_cache_max_bytes: usize,
    /// One memory budget for every persistent store of the instance, whatever the number of
    /// tasks: fjall's block cache, the write buffers (half, at least 64 MiB: the stores'
    /// write-back tables and fjall's memtables) and riffle's record caches (see docs/design.md,
    /// "One database for every store"). At least 96 MiB.
    pub statestore_memory_max_bytes: u64,
    /// A commit writes a task's checkpoint once its changelog offsets moved this much since the
    /// last one (Kafka Streams uses 10,000); closing a task always writes it. A persistent store
    /// holding writes it has not written back to disk yet is checkpointed at the position it
    /// wrote back (docs/design.md, "A task's key-value store writes back"). Lower values make
    /// a replaced thread's tasks resume with less to restore, at the cost of an fsync per task
    /// per commit.
    pub checkpoint_offset_delta: u64,
    /// The timestamps of input records (`default.timestamp.extractor`), unless a source has
    /// its own ([`crate::Consumed::with_timestamp_extractor`]): the record's own by default,
    /// failing on a negative one (Kafka's `FailOnInvalidTimestamp`).
    pub default_timestamp_extractor: TimestampExtractorRef,
    /// What a record whose key or value cannot be deserialized does
    /// (`default.deserialization.exception.handler`): fail (the default) or continue.
    pub deserialization_exception_handler: ExceptionHandlerRef,
    /// What a record the application's code fails or panics on does
    /// (`processing.exception.handler`): fail (the default) or continue.
    pub processing_exception_handler: ExceptionHandlerRef,
    /// What a record that cannot be written does (`default.production.exception.handler`): a
    /// record a sink or repartition writes that is larger than `max_request_size`. Fail (the
    /// default, Kafka's `DefaultProductionExceptionHandler`) or continue, dropping that one
    /// write. A changelog record that cannot be written always fails: skipping it would leave
    /// the store and its changelog apart.
    pub production_exception_handler: ExceptionHandlerRef,
    /// The largest record riffle writes, in bytes, counted as Kafka's producer counts it
    /// against `max.request.size` (the batch header, the record and its headers); larger ones
    /// go to `production_exception_handler`. Kafka's default, 1 MiB, fits a broker's default
    /// `message.max.bytes`.
    pub max_request_size: usize,
    /// Where records a handler skips go, as they were read, with headers naming the error
    /// (`errors.dead.letter.queue.topic.name`, KIP-1034; created with one partition if
    /// missing). `None`, the default: nowhere.
    pub errors_dead_letter_queue_topic_name: Option<String>,
    /// Where a source partition without a committed offset, or with one out of its range,
    /// starts (`auto.offset.reset`): earliest (the default), latest or none.
    pub auto_offset_reset: AutoOffsetReset,
    /// Where the instance's HTTP server listens while the application runs (`host:port`;
    /// port 0 picks one, see [`crate::StreamsApp::metrics_addr`]): the metrics in Prometheus'
    /// format at `/metrics`, and the routes the application adds
    /// ([`crate::StreamsApp::add_http_route`]). `None`, the default: the server listens only
    /// where the application asks ([`crate::StreamsApp::add_http_listener`]), and does not
    /// run if it asks nowhere.
    pub metrics_http_addr: Option<String>,
    /// How long a client of the HTTP server may take to send a complete request head,
    /// counted from when it connects or was last answered on a kept-alive connection; then it
    /// is disconnected (`riffle.http.header.read.timeout.ms`; Kafka Streams serves no HTTP).
    /// A client that sends half a request, or keeps a connection open and sends nothing,
    /// holds it no longer. 10 s by default; not zero.
    pub http_header_read_timeout: Duration,
    /// Which metrics are recorded (`metrics.recording.level`): `INFO` (the default) or
    /// `DEBUG`, which also times every store read and write.
    pub metrics_recording_level: RecordingLevel,
    /// Where this instance answers interactive queries, `host:port` (`application.server`):
    /// told to the group so that [`crate::StreamsApp::query_metadata_for_key`] on any
    /// instance names the one holding a key. riffle answers no queries itself; an application
    /// can, from a route of the instance's HTTP server ([`crate::StreamsApp::add_http_route`],
    /// [`crate::StreamsApp::add_http_listener`] for this address). `None`, the
    /// default: this instance is not named.
    pub application_server: Option<String>,
    /// How often, in wall-clock time, a stream–stream left or outer join looks for unmatched
    /// records whose windows closed, to emit them (Kafka Streams' internal
    /// `emit.interval.ms.kstreams.outer.join.spurious.results.fix`, 1 s). Zero looks on every
    /// record that moves the join's stream time.
    pub outer_join_emit_interval: Duration,
    /// How often, at most, a stream thread purges the repartition topics it reads up to the
    /// offsets it committed (`repartition.purge.interval.ms`, 30 s): the backend deletes the
    /// records below them (Kafka's `deleteRecords`), so repartition topics stay small.
    pub repartition_purge_interval: Duration,
    /// The topology optimizations [`crate::StreamsBuilder::build_with`] applies
    /// (`topology.optimization`): none by default, as in Kafka Streams.
    pub topology_optimization: TopologyOptimization,
}

impl StreamsConfig {
    /// Kafka Streams' defaults, for `application_id`.
    pub fn new(application_id: impl Into<String>) -> Self {
        StreamsConfig {
            application_id: application_id.into(),
            num_stream_threads: 1,
            commit_interval: None,
            poll: Duration::from_millis(100),
            state_dir: std::env::temp_dir().join("riffle-streams"),
            processing_guarantee: ProcessingGuarantee::AtLeastOnce,
            snapshot_strategy: SnapshotStrategy::Incremental,
            fetch_strategy: FetchStrategy::Ready,
            idle_wakeup: IdleWakeup::Deadlines,
            heartbeat_interval: Duration::from_secs(5),
            task_offset_interval: Duration::from_secs(60),
            acceptable_recovery_lag: 10_000,
            num_standby_replicas: 0,
            max_warmup_replicas: 2,
            group_session_timeout: Duration::from_secs(10),
            group_heartbeat_interval: Duration::from_millis(500),
            state_cleanup_delay: Duration::from_secs(600),
            outer_join_emit_interval: Duration::from_secs(1),
            repartition_purge_interval: Duration::from_secs(30),
            topology_optimization: TopologyOptimization::none(),
            fetch_max_bytes: 1 << 20,
            batch_max_bytes: 64 << 10,
            compression: Compression::None,
            statestore_cache_max_bytes: 10 << 20,
            statestore_memory_max_bytes: 256 << 20,
            checkpoint_offset_delta: 10_000,
            default_timestamp_extractor: TimestampExtractorRef::default(),
            deserialization_exception_handler: ExceptionHandlerRef::default(),
            processing_exception_handler: ExceptionHandlerRef::default(),
            production_exception_handler: ExceptionHandlerRef::default(),
            max_request_size: 1 << 20,
            errors_dead_letter_queue_topic_name: None,
            auto_offset_reset: AutoOffsetReset::Earliest,
            metrics_http_addr: None,
            http_header_read_timeout: Duration::from_secs(10),
            metrics_recording_level: RecordingLevel::Info,
            application_server: None,
        }
    }

    /// The commit interval in force: [`StreamsConfig::commit_interval`] if set, else Kafka
    /// Streams' default for the processing guarantee (the same whether the guarantee was set
    /// by field or with [`StreamsConfig::set`]).
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval
            .unwrap_or(match self.processing_guarantee {
                ProcessingGuarantee::AtLeastOnce => AT_LEAST_ONCE_COMMIT_INTERVAL,
                ProcessingGuarantee::ExactlyOnce => EXACTLY_ONCE_COMMIT_INTERVAL,
            })
    }

    /// Sets one option by its name: Kafka's dotted name (`num.stream.threads`) or riffle's
    /// underscored one (`num_stream_threads`). Durations are given in milliseconds under
    /// their Kafka names (`commit.interval.ms`, `poll.ms`, `heartbeat.interval.ms`,
    /// `task.offset.interval.ms`, `state.cleanup.delay.ms`, and the embedded log's group
    /// settings by the broker's names, `group.streams.session.timeout.ms` and
    /// `group.streams.heartbeat.interval.ms`) and riffle's own
    /// (`riffle.http.header.read.timeout.ms`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut Self> {
        fn parse<T: FromStr>(name: &str, value: &str) -> Result<T> {
            value
                .parse()
                .map_err(|_| Error::Config(format!("{name}: cannot parse {value:?}")))
        }
        fn millis(name: &str, value: &str) -> Result<Duration> {
            parse(name, value).map(Duration::from_millis)
        }
        match name.replace('.', "_").as_str() {
            "application_id" => self.application_id = value.to_owned(),
            "num_stream_threads" => self.num_stream_threads = parse(name, value)?,
            "commit_interval_ms" => self.commit_interval = Some(millis(name, value)?),
            "poll_ms" => self.poll = millis(name, value)?,
            "state_dir" => self.state_dir = PathBuf::from(value),
            "processing_guarantee" => self.processing_guarantee = value.parse()?,
            "snapshot_strategy" => {
                self.snapshot_strategy = value
                    .parse()
                    .map_err(|_| Error::Config(format!("{name}: unknown strategy {value:?}")))?
            }
            "fetch_strategy" => self.fetch_strategy = value.parse()?,
            "idle_wakeup" => self.idle_wakeup = value.parse()?,
            "heartbeat_interval_ms" => self.heartbeat_interval = millis(name, value)?,
            "task_offset_interval_ms" => self.task_offset_interval = millis(name, value)?,
            "acceptable_recovery_lag" => self.acceptable_recovery_lag = parse(name, value)?,
            "num_standby_replicas" | "group_streams_num_standby_replicas" => {
                self.num_standby_replicas = parse(name, value)?
            }
            "max_warmup_replicas" => self.max_warmup_replicas = parse(name, value)?,
            "group_streams_session_timeout_ms" => self.group_session_timeout = millis(name, value)?,
            "group_streams_heartbeat_interval_ms" => {
                self.group_heartbeat_interval = millis(name, value)?
            }
            "repartition_purge_interval_ms" => {
                self.repartition_purge_interval = millis(name, value)?
            }
            "state_cleanup_delay_ms" => self.state_cleanup_delay = millis(name, value)?,
            "outer_join_emit_interval_ms"
            | "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__" => {
                self.outer_join_emit_interval = millis(name, value)?
            }
            "fetch_max_bytes" => self.fetch_max_bytes = parse(name, value)?,
            "batch_max_bytes" => self.batch_max_bytes = parse(name, value)?,
            "checkpoint_offset_delta" => self.checkpoint_offset_delta = parse(name, value)?,
            "statestore_cache_max_bytes" => self.statestore_cache_max_bytes = parse(name, value)?,
            "statestore_memory_max_bytes" => self.statestore_memory_max_bytes = parse(name, value)?,
            "default_timestamp_extractor" => self.default_timestamp_extractor = value.parse()?,
            "default_deserialization_exception_handler" | "deserialization_exception_handler" => {
                self.deserialization_exception_handler = value.parse()?
            }
            "processing_exception_handler" | "default_processing_exception_handler" => {
                self.processing_exception_handler = value.parse()?
            }
            "production_exception_handler" | "default_production_exception_handler" => {
                self.production_exception_handler = value.parse()?
            }
            "max_request_size" | "producer_max_request_size" => {
                self.max_request_size = parse(name, value)?
            }
            "metrics_http_addr" => {
                self.metrics_http_addr = (!value.is_empty()).then(|| value.to_owned())
            }
            "riffle_http_header_read_timeout_ms" | "http_header_read_timeout_ms" => {
                self.http_header_read_timeout = millis(name, value)?
            }
            "metrics_recording_level" => self.metrics_recording_level = value.parse()?,
            "application_server" => {
                self.application_server = (!value.is_empty()).then(|| value.to_owned())
            }
            "auto_offset_reset" | "consumer_auto_offset_reset" => {
                self.auto_offset_reset = value.parse()?
            }
            "errors_dead_letter_queue_topic_name" => {
                self.errors_dead_letter_queue_topic_name =
                    (!value.is_empty()).then(|| value.to_owned())
            }
            "topology_optimization" => self.topology_optimization = value.parse()?,
            "compression" | "compression_type" => {
                self.compression = value
                    .parse()
                    .map_err(|_| Error::Config(format!("{name}: unknown codec {value:?}")))?
            }
            _ => return Err(Error::Config(format!("unknown option {name:?}"))),
        }
        Ok(self)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(server) = &self.application_server {
            server.parse::<HostInfo>()?.check_reachable()?;
        }
        let id = &self.application_id;
        let valid = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid || id == "." || id == ".." {
            return Err(Error::Config(format!(
                "application_id {id:?} must be non-empty and use only [a-zA-Z0-9._-]"
            )));
        }
        if self.num_stream_threads == 0 {
            return Err(Error::Config(
                "num_stream_threads must be at least 1".into(),
            ));
        }
        if self.group_heartbeat_interval.is_zero()
            || self.group_session_timeout <= self.group_heartbeat_interval
        {
            return Err(Error::Config(format!(
                "group.streams.session.timeout.ms ({} ms) must be above \
                 group.streams.heartbeat.interval.ms ({} ms), which must be above 0: otherwise \
                 a live instance would be declared gone between two heartbeats",
                self.group_session_timeout.as_millis(),
                self.group_heartbeat_interval.as_millis()
            )));
        }
        if self.http_header_read_timeout.is_zero() {
            return Err(Error::Config(
                "riffle.http.header.read.timeout.ms must be above 0: every client would be \
                 disconnected before it could ask anything"
                    .into(),
            ));
        }
        if self.max_request_size < 1024 {
            return Err(Error::Config(format!(
                "max_request_size {} is below 1024 bytes: no record would fit",
                self.max_request_size
            )));
        }
        if self.statestore_memory_max_bytes < MIN_MEMORY_BUDGET {
            return Err(Error::Config(format!(
                "statestore_memory_max_bytes {} is below {} (96 MiB): fjall's write buffers alone \
                 need 64 MiB",
                self.statestore_memory_max_bytes, MIN_MEMORY_BUDGET
            )));
        }
        Ok(())
    }

    /// The memory budget of the stores, split.
    pub(crate) fn memory_budget(&self) -> MemoryBudget {
        let wanted =
            (self.statestore_cache_max_bytes as u64).saturating_mul(self.num_stream_threads as u64);
        MemoryBudget::split(self.statestore_memory_max_bytes, wanted)
    }

    /// The record cache of one stream thread: its `statestore_cache_max_bytes`, within the
    /// budget's share.
    pub(crate) fn thread_cache_max_bytes(&self) -> usize {
        let share = self.memory_budget().record_caches / self.num_stream_threads.max(1) as u64;
        usize::try_from(share).unwrap_or(usize::MAX)
    }
}

/// A stream thread's handlers are its configuration's.
impl Handlers {
    pub(crate) fn of(config: &StreamsConfig) -> Self {
        Handlers {
            deserialization: config.deserialization_exception_handler.clone(),
            processing: config.processing_exception_handler.clone(),
            production: config.production_exception_handler.clone(),
            dead_letter_queue: config.errors_dead_letter_queue_topic_name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_guarantee_sets_the_default_commit_interval_by_field_or_by_name() {
        let mut by_field = StreamsConfig::new("a");
        assert_eq!(by_field.commit_interval(), Duration::from_secs(30));
        by_field.processing_guarantee = ProcessingGuarantee::ExactlyOnce;
        let mut by_name = StreamsConfig::new("a");
        by_name
            .set("processing.guarantee", "exactly_once_v2")
            .unwrap();
        assert_eq!(by_field.commit_interval(), Duration::from_millis(100));
        assert_eq!(by_name.commit_interval(), Duration::from_millis(100));
        // An explicit interval wins whatever the order.
        by_name.set("commit.interval.ms", "250").unwrap();
        by_name
            .set("processing.guarantee", "at_least_once")
            .unwrap();
        assert_eq!(by_name.commit_interval(), Duration::from_millis(250));
    }

    #[test]
    fn the_embedded_group_settings_take_kafka_names_and_are_checked() {
        let mut c = StreamsConfig::new("a");
        c.set("num.standby.replicas", "1").unwrap();
        c.set("max.warmup.replicas", "3").unwrap();
        c.set("group.streams.session.timeout.ms", "4000").unwrap();
        c.set("group.streams.heartbeat.interval.ms", "250").unwrap();
        assert_eq!(c.num_standby_replicas, 1);
        assert_eq!(c.max_warmup_replicas, 3);
        assert_eq!(c.group_session_timeout, Duration::from_secs(4));
        assert_eq!(c.group_heartbeat_interval, Duration::from_millis(250));
        c.validate().unwrap();
        c.set("group.streams.num.standby.replicas", "2").unwrap();
        assert_eq!(c.num_standby_replicas, 2);
        // A session no longer than a heartbeat would declare live instances gone.
        c.set("group.streams.session.timeout.ms", "250").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("group.streams.session.timeout.ms"), "{e}");
    }

    #[test]
    fn durations_are_set_in_milliseconds_under_kafka_names() {
        let mut c = StreamsConfig::new("a");
        c.set("poll.ms", "7").unwrap();
        c.set("heartbeat.interval.ms", "300").unwrap();
        c.set("task.offset.interval.ms", "1000").unwrap();
        c.set("state_cleanup_delay_ms", "5").unwrap();
        c.set("fetch.strategy", "scan-all").unwrap();
        c.set("idle.wakeup", "every-poll").unwrap();
        c.set("riffle.http.header.read.timeout.ms", "250").unwrap();
        assert_eq!(c.poll, Duration::from_millis(7));
        assert_eq!(c.heartbeat_interval, Duration::from_millis(300));
        assert_eq!(c.task_offset_interval, Duration::from_secs(1));
        assert_eq!(c.state_cleanup_delay, Duration::from_millis(5));
        assert_eq!(c.fetch_strategy, FetchStrategy::ScanAll);
        assert_eq!(c.idle_wakeup, IdleWakeup::EveryPoll);
        assert_eq!(c.http_header_read_timeout, Duration::from_millis(250));
        c.set("http_header_read_timeout_ms", "0").unwrap();
        assert!(c.validate().is_err(), "a zero header timeout is refused");
        let err = c.set("poll.ms", "soon").unwrap_err().to_string();
        assert!(err.contains("poll.ms") && err.contains("soon"), "{err}");
        assert!(c.set("no.such.option", "1").is_err());
    }

    #[test]
    fn topology_optimization_takes_kafkas_values() {
        let mut c = StreamsConfig::new("a");
        assert_eq!(c.topology_optimization, TopologyOptimization::none());
        c.set("topology.optimization", "all").unwrap();
        assert_eq!(c.topology_optimization, TopologyOptimization::all());
        c.set(
            "topology.optimization",
            "reuse.ktable.source.topics, merge.repartition.topics",
        )
        .unwrap();
        let o = c.topology_optimization;
        assert!(o.reuse_ktable_source_topics && o.merge_repartition_topics);
        assert!(!o.single_store_self_join);
        c.set("topology.optimization", "none").unwrap();
        assert_eq!(c.topology_optimization, TopologyOptimization::none());
        for bad in ["all,none", "none,merge.repartition.topics", "fast", ""] {
            assert!(c.set("topology.optimization", bad).is_err(), "{bad:?}");
        }
    }
}
