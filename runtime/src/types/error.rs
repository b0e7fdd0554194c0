//! The runtime's errors.

use riffle_state_dir::TaskId;

/// A failure while decoding or encoding a key or value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SerdeError {
    /// The bytes are not a valid encoding of the type.
    #[error("{type_name}: {reason}")]
    Invalid {
        /// The type that was being decoded.
        type_name: &'static str,
        /// Why the bytes do not decode.
        reason: String,
    },
    /// The serde does not accept a null key or value.
    #[error(
        "{type_name}: unexpected null (a null key or value reads as `None` with a nullable serde: `Serdes::optional(..)`)"
    )]
    UnexpectedNull {
        /// The type that was being decoded.
        type_name: &'static str,
    },
    /// The value cannot be encoded: its serde refused it (a JSON map with keys that are not
    /// strings, a list longer than its 4-byte length field).
    #[error("{type_name}: cannot serialize: {reason}")]
    Unserializable {
        /// The type that was being encoded.
        type_name: &'static str,
        /// Why it cannot be encoded.
        reason: String,
    },
}

/// Which part of a record could not be serialized (Kafka's
/// `ProductionExceptionHandler.SerializationExceptionOrigin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SerializationExceptionOrigin {
    /// The key.
    Key,
    /// The value.
    Value,
}

impl std::fmt::Display for SerializationExceptionOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SerializationExceptionOrigin::Key => "key",
            SerializationExceptionOrigin::Value => "value",
        })
    }
}

/// ` partition N`, or nothing for a partition not chosen yet.
fn partition_suffix(partition: &Option<u32>) -> String {
    partition.map_or_else(String::new, |p| format!(" partition {p}"))
}

/// Everything that can go wrong in a riffle application.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The embedded log failed.
    #[cfg(feature = "embedded")]
    #[error(transparent)]
    Log(#[from] riffle_log::Error),
    /// A fetched batch or record does not decode, or a batch does not encode.
    #[error(transparent)]
    Record(#[from] riffle_record::Error),
    /// The state directory failed.
    #[error(transparent)]
    StateDir(#[from] riffle_state_dir::Error),
    /// The task manager rejected an operation.
    #[error(transparent)]
    TaskManager(#[from] riffle_task_manager::Error),
    /// A record's key or value could not be decoded by its serde.
    #[error(
        "cannot decode the {part} of the record at {topic}-{partition} offset {offset}: {source}"
    )]
    Deserialize {
        /// `key` or `value`.
        part: &'static str,
        /// The record's topic.
        topic: String,
        /// The record's partition.
        partition: u32,
        /// The record's offset.
        offset: u64,
        /// What the serde said.
        source: SerdeError,
    },
    /// A record's key or value could not be serialized for a topic (a sink, a repartition
    /// topic, a producer): its serde failed. In a sink it goes to the production exception
    /// handler (Kafka's `handleSerializationException`). The partition is `None` when the key
    /// failed, since the partition comes from the key's bytes.
    #[error(
        "cannot serialize the {origin} of a record for topic {topic}{}: {source}",
        partition_suffix(partition)
    )]
    Serialize {
        /// The key or the value.
        origin: SerializationExceptionOrigin,
        /// The topic the record was for.
        topic: String,
        /// The partition it was for, when known.
        partition: Option<u32>,
        /// What the serde said.
        source: SerdeError,
    },
    /// A key or value could not be serialized for a store (a write, a read's key, a query's
    /// key): its serde failed. Inside a processor it goes to the processing exception handler,
    /// as Kafka's store serdes' exceptions do.
    #[error("cannot serialize a {origin} for store {store}: {source}")]
    SerializeState {
        /// The store.
        store: String,
        /// The key or the value.
        origin: SerializationExceptionOrigin,
        /// What the serde said.
        source: SerdeError,
    },
    /// A changelog record could not be applied while restoring a store.
    #[error(
        "cannot restore store {store} of task {task} from {topic}-{partition} offset {offset}: {reason}"
    )]
    Restore {
        /// The task being restored.
        task: TaskId,
        /// The store being restored.
        store: String,
        /// The changelog topic.
        topic: String,
        /// The changelog partition.
        partition: u32,
        /// The changelog offset.
        offset: u64,
        /// Why it failed.
        reason: String,
    },
    /// A state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store holds bytes its serde cannot read.
    #[error("store {store} of task {task} holds a value its serde cannot read: {source}")]
    CorruptState {
        /// The store.
        store: String,
        /// The task owning the store.
        task: TaskId,
        /// What the serde said.
        source: SerdeError,
    },
    /// A record's timestamp was refused by the timestamp extractor.
    #[error(
        "invalid timestamp {timestamp} of the record at {topic}-{partition} offset {offset}: {reason}"
    )]
    InvalidTimestamp {
        /// The record's topic.
        topic: String,
        /// The record's partition.
        partition: u32,
        /// The record's offset.
        offset: u64,
        /// The timestamp the record carries.
        timestamp: i64,
        /// Why it was refused.
        reason: String,
    },
    /// A processor failed: what it returned from `process`, `init` or a punctuator.
    #[error("processor {processor} of task {task}: {source}")]
    Processor {
        /// The processor's node name.
        processor: String,
        /// The task it runs in.
        task: TaskId,
        /// What it returned.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An error of the application's own code (a processor, a punctuator), made with
    /// [`Error::user`]; the runtime adds which processor and task it came from.
    #[error("{0}")]
    User(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A processor used its context wrongly (an unknown child or store, a store of other
    /// types).
    #[error("processor {processor}: {reason}")]
    ProcessorContext {
        /// The processor's node name.
        processor: String,
        /// What was wrong.
        reason: String,
    },
    /// The topology is not valid (missing topics, serde mismatches, ...).
    #[error("invalid topology: {0}")]
    Topology(String),
    /// A source topic does not exist.
    #[error(
        "source topic {topic} does not exist; create it first (e.g. `riffle produce --topic {topic}`)"
    )]
    MissingSourceTopic {
        /// The missing topic.
        topic: String,
    },
    /// A store cannot be queried (Kafka's `InvalidStateStoreException`): no such store, not
    /// of the types asked, migrating (a local task holding it is restoring), or the
    /// application is not running.
    #[error("store {store} cannot be queried: {reason}")]
    InvalidStateStore {
        /// The store's name.
        store: String,
        /// Why.
        reason: String,
    },
    /// A producer's topic does not exist.
    #[error("topic {topic} does not exist; create it first")]
    UnknownTopic {
        /// The topic.
        topic: String,
    },
    /// The configuration is not valid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// User code panicked in a stream thread.
    #[error("stream thread {thread} panicked: {message}")]
    ThreadPanicked {
        /// The thread's name.
        thread: String,
        /// The panic message.
        message: String,
    },
    /// The application is not in a state that allows the call.
    #[error("illegal application state: {0}")]
    IllegalState(String),
    /// The application's code failed on one input record and its processing exception handler
    /// said fail (`processing_exception_handler`), or a record it made could not be written
    /// and its production exception handler said fail: which input record, which processor
    /// (if it has a name), what failed.
    #[error("processing the record at {topic}-{partition} offset {offset} failed: {source}")]
    RecordFailed {
        /// The record's topic.
        topic: String,
        /// Its partition.
        partition: u32,
        /// Its offset.
        offset: u64,
        /// The processor that failed, if it has a name (processor-API nodes).
        processor: Option<String>,
        /// What failed: a processor's error, [`Error::Panicked`], [`Error::RecordTooLarge`] or
        /// [`Error::Serialize`].
        source: Box<Error>,
    },
    /// A record larger than `max_request_size` (Kafka's `RecordTooLargeException`): which
    /// topic-partition it was for, its size and the limit.
    #[error(
        "a record of {size} bytes for {topic}-{partition} is larger than max_request_size ({max} bytes)"
    )]
    RecordTooLarge {
        /// The topic it was written to.
        topic: String,
        /// The partition.
        partition: u32,
        /// Its size as counted against the limit.
        size: usize,
        /// `max_request_size`.
        max: usize,
    },
    /// A source partition has no committed offset, or one out of its range, and
    /// `auto_offset_reset` is `none` (Kafka's `NoOffsetForPartitionException`).
    #[error("no valid offset for {topic}-{partition}, and auto_offset_reset is none: {reason}")]
    NoOffsetForPartition {
        /// The source topic.
        topic: String,
        /// Its partition.
        partition: u32,
        /// No committed offset, or which offset is out of which range.
        reason: String,
    },
    /// A source partition's position is past the partition's end on a backend that never
    /// loses records below a committed offset (the embedded log fsyncs a partition before the
    /// offsets that point past its records): records the group had processed are gone, and
    /// `auto_offset_reset` (for offsets never committed, or deleted by retention or
    /// `delete_records`) would process the partition again silently.
    #[error(
        "group {group:?}'s position in {topic}-{partition} is offset {offset}, past the \
         partition's end {end}: records the group had processed are gone (the log lost data it \
         had made durable); auto_offset_reset does not apply. `riffle log repair` reports the \
         loss and moves the group's offset back to the end explicitly"
    )]
    OffsetPastEnd {
        /// The group (the application id).
        group: String,
        /// The source topic.
        topic: String,
        /// Its partition.
        partition: u32,
        /// The committed (or reached) offset.
        offset: u64,
        /// The partition's end offset.
        end: u64,
    },
    /// The application's code panicked on a record (a DSL function or a processor).
    #[error("panicked: {message}")]
    Panicked {
        /// The panic message.
        message: String,
    },
    /// A backend other than the embedded log (e.g. a Kafka cluster) failed; `kind` says how,
    /// so a caller can react to fencing or authorization without downcasting, and the source
    /// says which broker, topic-partition or group.
    #[error("{source}")]
    Backend {
        /// What kind of failure it is.
        kind: BackendErrorKind,
        /// The backend's own error.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl Error {
    /// A backend's error of `kind`.
    pub fn backend(
        kind: BackendErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Backend {
            kind,
            source: source.into(),
        }
    }

    /// The input record an error is about — (topic, partition, offset) — for a record that
    /// could not be deserialized or processed.
    pub fn record_location(&self) -> Option<(&str, u32, u64)> {
        match self {
            Error::Deserialize {
                topic,
                partition,
                offset,
                ..
            }
            | Error::RecordFailed {
                topic,
                partition,
                offset,
                ..
            } => Some((topic, *partition, *offset)),
            _ => None,
        }
    }

    /// The error's kind, as a dead-letter record's `__streams.errors.exception` header names
    /// it (`riffle::Error::Deserialize`, …).
    pub(crate) fn kind_name(&self) -> String {
        let debug = format!("{self:?}");
        let end = debug
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(debug.len());
        format!("riffle::Error::{}", &debug[..end])
    }

    /// An error of the application's own code, to return from a processor or punctuator.
    pub fn user(source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::User(source.into())
    }

    /// Whether a fetch failed because its offset is outside the partition (below its start or
    /// past its end), on either backend.
    pub fn is_offset_out_of_range(&self) -> bool {
        #[cfg(feature = "embedded")]
        if let Error::Log(riffle_log::Error::OffsetOutOfRange { .. }) = self {
            return true;
        }
        matches!(
            self,
            Error::Backend {
                kind: BackendErrorKind::OffsetOutOfRange,
                ..
            }
        )
    }

    /// The kind of a backend's error (`None` for every other error).
    pub fn backend_kind(&self) -> Option<BackendErrorKind> {
        match self {
            Error::Backend { kind, .. } => Some(*kind),
            #[cfg(feature = "embedded")]
            Error::Log(riffle_log::Error::Fenced { .. }) => Some(BackendErrorKind::Fenced),
            _ => None,
        }
    }
}

/// How a backend failed, as far as the application's reaction goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// Another instance took this one's place (a fenced member or producer, a stale epoch):
    /// this instance must give up its tasks and rejoin, never write on.
    Fenced,
    /// Authentication or authorization failed: the credentials or ACLs must change.
    Authorization,
    /// The backend is unreachable or not ready (a broker down, a leader moving, a timeout);
    /// trying again later may work.
    Unavailable,
    /// The backend refused the request itself (an unsupported version, a record too large, an
    /// invalid request or configuration).
    Rejected,
    /// The group forbids going on (e.g. a changed topology under the same application id).
    Group,
    /// A fetch's offset is outside the partition (Kafka's `OFFSET_OUT_OF_RANGE`).
    OffsetOutOfRange,
    /// Anything else.
    Other,
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure inside a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The persistent store's storage engine failed.
    #[error("store {store} at {path}: {reason}")]
    Backend {
        /// The store's name.
        store: String,
        /// Where the store lives.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The store holds bytes that cannot be its values.
    #[error("store {store} holds a corrupt value: {reason}")]
    Corrupt {
        /// The store's name.
        store: String,
        /// What is wrong.
        reason: String,
    },
}
