//! # riffle
//!
//! A stream-processing runtime in the class of Kafka Streams. Write an application with the DSL
//! ([`StreamsBuilder`] → [`KStream`] → [`KGroupedStream`] → [`KTable`]), build it into a
//! [`Topology`], and run it as a [`StreamsApp`] over a [`Backend`]: the embedded, durable log by
//! default ([`EmbeddedBackend`]), or an Apache Kafka cluster.
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
//! What riffle is not: a client library for Kafka (it uses one), or a database (stores are
//! local caches of their changelogs).
//!
//! The crate's parts:
//! - `dsl`: the builder API and its options; `serdes`: keys and values as bytes.
//! - `topology`: the built graph, sub-topologies and their per-task instantiation.
//! - `task`, `node`, `store`, `collector`: what one task processes records with.
//! - `thread`, `coordinator`, `snapshot`, `app`: the stream threads, task assignment, the
//!   offset-sum snapshot and the application lifecycle.

mod app;
mod backend;
mod collector;
mod config;
mod coordinator;
mod dsl;
mod error;
mod group;
mod loop_core;
mod node;
mod restore;
mod serdes;
mod snapshot;
mod store;
mod task;
mod thread;
mod topology;

pub use app::{
    RunSummary, ShutdownHandle, StreamThreadExceptionResponse, StreamsApp, ThreadMetrics,
};
pub use backend::{Backend, EmbeddedBackend, TopicKind};
pub use config::{FetchStrategy, IdleWakeup, ProcessingGuarantee, StreamsConfig};
pub use dsl::{
    Consumed, Grouped, KGroupedStream, KStream, KTable, Materialized, Produced, StoreType,
    StreamsBuilder,
};
pub use error::{Error, Result, SerdeError};
pub use group::{
    Assignment, GroupCoordinator, GroupInfo, GroupIntervals, Heartbeat, SubtopologyInfo,
};
pub use serdes::{
    BytesSerde, DefaultSerde, I64Serde, JsonSerde, Serde, SerdeRef, Serdes, StringSerde, U64Serde,
};
pub use store::{InMemoryKeyValueStore, KeyValueStore, PersistentKeyValueStore, StoreError};
pub use topology::{Topology, TopologyDescription};

/// The embedded log, re-exported: open one, create topics, append and read batches.
pub use riffle_log as log;
pub use riffle_state_dir::TaskId;
pub use riffle_task_manager::SnapshotStrategy;
