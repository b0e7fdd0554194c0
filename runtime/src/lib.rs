//! # riffle
//!
//! A stream-processing runtime in the class of Kafka Streams. Write an application with the DSL
//! ([`StreamsBuilder`] → [`KStream`] → [`KGroupedStream`] → [`KTable`]), build it into a
//! [`Topology`], and run it as a [`StreamsApp`] over a [`backend::Backend`]: the embedded,
//! durable log by default ([`EmbeddedBackend`]), or an Apache Kafka cluster.
//!
//! ```
//! use riffle::{Consumed, EmbeddedBackend, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig};
//! use riffle::log::{BatchBuilder, Compression, Log, TopicPartition};
//!
//! // An input topic with two words in the embedded log (in memory here).
//! let log = Log::in_memory();
//! log.create_topic("words", 1).unwrap();
//! let mut batch = BatchBuilder::new(Compression::None);
//! batch.push(0, Some(b"riffle"), Some(b"1"));
//! batch.push(0, Some(b"riffle"), Some(b"2"));
//! log.append(&TopicPartition::new("words", 0), &mut batch).unwrap();
//!
//! // Count them per key.
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
//!     .group_by_key()
//!     .count()
//!     .to_stream()
//!     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
//! let topology = builder.build().unwrap();
//!
//! let state = tempfile::tempdir().unwrap();
//! let mut config = StreamsConfig::new("word-count");
//! config.state_dir = state.path().to_owned();
//! let app = StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared()).unwrap();
//! let summary = app.run_until_idle().unwrap();
//! assert_eq!(summary.records_processed, 2);
//! ```
//!
//! Below the DSL is the processor API: a [`Processor`] gets each [`Record`] with a
//! [`ProcessorContext`] to forward, use its stores and schedule punctuators, and
//! [`TopologyTestDriver`] runs any topology in a unit test, without threads or files:
//!
//! ```
//! use riffle::{Consumed, Processor, ProcessorContext, Produced, Record, Result, Serdes, StreamsBuilder, StreamsConfig, TopologyTestDriver};
//!
//! /// Forwards each value with its record's offset.
//! struct WithOffset;
//! impl Processor<String, String, String, String> for WithOffset {
//!     fn process(&mut self, ctx: &mut ProcessorContext<'_, String, String>, r: Record<String, String>) -> Result<()> {
//!         let offset = ctx.record_metadata().map_or(0, |m| m.offset);
//!         let value = format!("{}@{offset}", r.value());
//!         ctx.forward(r.with_value(value))
//!     }
//! }
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
//!     .process(|| WithOffset, &[])
//!     .to("out", Produced::with(Serdes::string(), Serdes::string()));
//! let driver = TopologyTestDriver::new(builder.build()?, StreamsConfig::new("offsets"))?;
//! let input = driver.create_input_topic("in", Serdes::string(), Serdes::string());
//! let output = driver.create_output_topic("out", Serdes::string(), Serdes::string());
//! input.pipe_input("k".into(), "a".into())?;
//! input.pipe_input("k".into(), "b".into())?;
//! assert_eq!(output.read_key_values_to_list()?, [("k".into(), "a@0".into()), ("k".into(), "b@1".into())]);
//! # Ok::<(), riffle::Error>(())
//! ```
//!
//! What riffle is not: a client library for Kafka (it uses one), or a database (stores are
//! local caches of their changelogs).
//!
//! # The concepts, one example each
//!
//! **A topology** is built once and split into *sub-topologies* (connected by repartition
//! topics), numbered deterministically, so the same code always gives the same task ids and
//! internal topic names. `describe()` prints it in Kafka Streams' layout:
//!
//! ```
//! use riffle::{Consumed, Produced, Serdes, StreamsBuilder};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
//!     .map(|_, word| (word.clone(), word)) // a new key: the count needs a repartition topic
//!     .group_by_key()
//!     .count()
//!     .to_stream()
//!     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
//! let topology = builder.build().unwrap();
//! let text = topology.describe().to_string();
//! assert!(text.contains("Sub-topology: 0") && text.contains("Sub-topology: 1"));
//! ```
//!
//! **Configuration** uses Kafka Streams' names, as fields or by name (`--set` on the CLI).
//! Durations are [`Duration`](std::time::Duration)s; the commit interval defaults to the
//! processing guarantee's, however the guarantee was set:
//!
//! ```
//! use std::time::Duration;
//! use riffle::{ProcessingGuarantee, StreamsConfig};
//!
//! let mut config = StreamsConfig::new("word-count");
//! config.set("num.stream.threads", "2").unwrap();
//! config.processing_guarantee = ProcessingGuarantee::ExactlyOnce;
//! assert_eq!(config.commit_interval(), Duration::from_millis(100));
//! config.set("commit.interval.ms", "250").unwrap();
//! assert_eq!(config.commit_interval(), Duration::from_millis(250));
//! ```
//!
//! **Tasks** are a sub-topology × an input partition, written `0_3`; each stream thread runs
//! the tasks its group coordinator assigns it, and reports the offset sums of the tasks it has
//! state for (the offset-sum snapshot, docs/design.md §4) in its heartbeats:
//!
//! ```
//! use riffle::TaskId;
//!
//! let task: TaskId = "1_3".parse().unwrap();
//! assert_eq!((task.subtopology, task.partition), (1, 3));
//! assert_eq!(task.to_string(), "1_3");
//! ```
//!
//! **Errors** are one [`Error`]; a backend's failures carry a [`BackendErrorKind`](errors::BackendErrorKind), so an
//! application can tell fencing or authorization apart without downcasting:
//!
//! ```
//! use riffle::{errors::BackendErrorKind, Error};
//!
//! let e = Error::backend(BackendErrorKind::Fenced, "member epoch 7 is fenced");
//! assert_eq!(e.backend_kind(), Some(BackendErrorKind::Fenced));
//! assert_eq!(e.to_string(), "member epoch 7 is fenced");
//! ```
//!
//! **Backends** implement [`backend::Backend`] (records) and [`backend::GroupCoordinator`]
//! (membership); application authors only pick one: [`EmbeddedBackend`] here, or
//! riffle-kafka's `KafkaBackend`.
//!
//! # The crate's map
//!
//! The root holds what most applications use. Every public item is also in its group:
//!
//! - [`dsl`]: the builder API, its options, windowed streams, suppression and joins;
//!   [`window`]: window definitions, [`Windowed`] keys and [`JoinWindows`].
//! - [`processor`]: the processor API ([`Processor`], [`ProcessorContext`], punctuation),
//!   [`Record`] and [`Headers`], the typed [`KeyValueStore`] and window and session store
//!   handles, timestamp extractors.
//! - [`state`]: the [`Stores`] builders and their suppliers; [`serde`]: keys and values as bytes.
//! - [`config`]: [`StreamsConfig`] and its enums, by Kafka Streams' names; [`errors`]: [`Error`],
//!   the exception handlers and the dead-letter queue's headers.
//! - [`Topology`]: the built graph and Kafka's low-level API.
//! - [`query`]: interactive queries over every local task and which instance holds a key;
//!   [`metrics`]: every metric under Kafka Streams' names; [`producer`]: typed records into
//!   either backend; [`http`]: the requests and answers of the routes an application adds to
//!   the instance's HTTP server ([`StreamsApp::add_http_route`]).
//! - [`testing`]: [`TopologyTestDriver`], a topology run in the calling thread for tests.
//! - [`backend`]: what a backend implements; [`prelude`]: a glob import of the common names.
//!
//! Inside, the crate is a stack of layers, each importing only from those below it
//! (docs/design.md §1, checked by runtime/tests/layers.rs).

// The layers, bottom to top: each imports only from itself and the layers above it in this list
// (runtime/tests/layers.rs checks it).
//
// Errors, records, windows, timestamp extractors, handler types:
mod types;
// Keys and values as bytes:
mod serdes;
// Stores: the bytes stores, the write cache, window and session segments, `Stores` builders:
pub mod state;
// `StreamsConfig`:
pub mod config;
// What a backend implements, the group protocol's types, the embedded backend:
pub mod backend;
// The operator engine (`Node`), the public processor API, typed store handles, the collector:
pub mod processor;
// The built graph, the low-level `Topology` API, sub-topologies, per-task instantiation:
mod topology;
// The DSL, one folder per feature family with its builder methods and operator nodes:
pub mod dsl;
// Tasks, restoration, the offset-sum snapshot, the stream and global threads:
mod engine;
// The instance's one HTTP server: requests, answers, routes by path prefix:
pub mod http;
// Metrics under Kafka Streams' names, Prometheus' `/metrics` route:
mod telemetry;
// `StreamsApp`, interactive queries, metadata, the producer:
mod app;
// `TopologyTestDriver`:
#[cfg(feature = "embedded")]
pub mod testing;

// The root: what an application author needs most. Everything public is also in its group
// below (`dsl`, `processor`, `state`, `config`, `backend`, `http`, `testing` are the layers' own
// modules; the rest gather items from several layers).
pub use app::{RunSummary, ShutdownHandle, StreamsApp};
#[cfg(feature = "embedded")]
pub use backend::EmbeddedBackend;
pub use config::{ProcessingGuarantee, StreamsConfig};
pub use dsl::{
    CogroupedKStream, Consumed, GlobalKTable, Grouped, JoinWindows, Joined, KGroupedStream,
    KGroupedTable, KStream, KTable, Materialized, Named, Produced, StreamsBuilder,
};
pub use processor::{
    FixedKeyProcessor, FixedKeyProcessorContext, Headers, KeyValueStore, Processor,
    ProcessorContext, Record,
};
pub use riffle_state_dir::TaskId;
pub use serdes::{Serde, SerdeRef, Serdes};
pub use state::Stores;
#[cfg(feature = "embedded")]
pub use testing::TopologyTestDriver;
pub use topology::Topology;
pub use types::error::{Error, Result};
pub use types::window::{SessionWindows, SlidingWindows, TimeWindows, Windowed};

pub mod window {
    //! Windows: their definitions ([`TimeWindows`], [`SessionWindows`], [`SlidingWindows`],
    //! [`JoinWindows`]), a window ([`Window`]) and a windowed key ([`Windowed`]).

    pub use crate::dsl::JoinWindows;
    pub use crate::types::window::{
        EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed,
    };
}

pub mod serde {
    //! Keys and values as bytes: the [`Serde`] trait, [`Serdes`]' built-in serdes (Kafka's
    //! byte layouts), the windowed keys' serdes, and [`DefaultSerde`] (with
    //! [`json_default_serde!`](crate::json_default_serde)).

    pub use crate::serdes::{
        BoolSerde, ByteVecSerde, BytesSerde, DefaultSerde, F32Serde, F64Serde, I16Serde, I32Serde,
        I64Serde, JsonSerde, ListSerde, OptionSerde, Serde, SerdeRef, Serdes, SessionWindowedSerde,
        StringSerde, TimeWindowedSerde, U64Serde, Uuid, UuidSerde, VoidSerde,
    };
}

pub mod errors {
    //! Errors, and what an application does with them: [`Error`], the exception handlers
    //! ([`ExceptionHandlerRef`], [`HandlerResponse`]) and the dead-letter queue's headers, and what
    //! to do when a stream thread dies ([`StreamThreadExceptionResponse`]).

    pub use crate::app::threads::StreamThreadExceptionResponse;
    pub use crate::types::error::{
        BackendErrorKind, Error, Result, SerdeError, SerializationExceptionOrigin, StoreError,
    };
    pub use crate::types::handlers::{
        DLQ_HEADERS, ErrorHandlerContext, ExceptionHandlerRef, HandlerResponse,
    };
}

pub mod query {
    //! Interactive queries: read-only views of a running application's stores over every local
    //! task, and which instance holds a key.

    pub use crate::app::metadata::{KeyQueryMetadata, MetadataHandle};
    pub use crate::app::query::{
        KeyValueStoreType, QueryableStoreType, QueryableStoreTypes, ReadOnlyKeyValueStore,
        ReadOnlySessionStore, ReadOnlyWindowStore, SessionStoreType, StoreQueryParameters,
        WindowStoreType,
    };
    pub use crate::types::host::{HostInfo, StreamsMetadata};
}

pub mod metrics {
    //! Metrics under Kafka Streams' names ([`Metric`], as [`StreamsApp::metrics`](crate::StreamsApp::metrics)
    //! reads them) and a stream thread's counters ([`ThreadMetrics`]).

    pub use crate::engine::metrics::ThreadMetrics;
    pub use crate::telemetry::Metric;
}

pub mod producer {
    //! Typed records into either backend, batched per partition ([`Producer`]).

    pub use crate::app::producer::{Producer, ProducerConfig, ProducerRecord};
}

pub mod prelude {
    //! What most applications import: `use riffle::prelude::*;`.

    #[cfg(feature = "embedded")]
    pub use crate::EmbeddedBackend;
    pub use crate::{
        Consumed, Error, FixedKeyProcessor, FixedKeyProcessorContext, Grouped, KGroupedStream,
        KStream, KTable, KeyValueStore, Materialized, Processor, ProcessorContext, Produced,
        Record, Result, Serde, SerdeRef, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
        TimeWindows, Topology, Windowed,
    };
}

/// The embedded log, re-exported: open one, create topics, append and read batches (its record
/// types are [`batch`]'s).
#[cfg(feature = "embedded")]
pub use riffle_log as log;
/// Kafka's record batch (the `riffle-record` crate), shared by both backends: topic-partitions, batch builders, fetched
/// batches and records, codecs, Kafka's partitioner.
pub use riffle_record as batch;
