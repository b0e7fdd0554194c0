//! [`TopologyTestDriver`]: runs a [`Topology`](crate::Topology) in the calling thread, with
//! no stream threads, no files and no backend to set up (Kafka Streams' `TopologyTestDriver`).
//!
//! Every topic has one partition (a repartition topic given more by
//! `Repartitioned::with_number_of_partitions` too), so each sub-topology is one task
//! (`<sub>_0`); a topic a `TopicNameExtractor` names is created on first use, as Kafka's driver
//! accepts any topic. A piped record
//! is appended to its topic in an in-memory log, then the driver does what a stream thread
//! does — the same tasks, nodes, record caches and commit code — until nothing is left: it
//! processes every task's records (stream-time punctuators fire as stream time reaches them),
//! then commits (cached aggregates are forwarded, changelogs and outputs written), and repeats
//! while a repartition topic has records for a downstream task. So, as in Kafka's driver,
//! each piped record is committed before `pipe_input` returns; wall-clock punctuators fire
//! only when [`TopologyTestDriver::advance_wall_clock_time`] moves the mocked clock.
//!
//! The driver and its run loop are in `driver.rs`; the test topics it hands out in `topics.rs`,
//! its typed stores in `stores.rs`.
//!
//! ```
//! use riffle::{Consumed, Produced, Serdes, StreamsBuilder, StreamsConfig, TopologyTestDriver};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
//!     .group_by_key()
//!     .count()
//!     .to_stream()
//!     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
//! let driver = TopologyTestDriver::new(builder.build()?, StreamsConfig::new("test"))?;
//! let words = driver.create_input_topic("words", Serdes::string(), Serdes::string());
//! let counts = driver.create_output_topic("counts", Serdes::string(), Serdes::i64());
//! words.pipe_input("a".into(), "x".into())?;
//! words.pipe_input("a".into(), "y".into())?;
//! assert_eq!(counts.read_key_values_to_list()?, [("a".to_string(), 1), ("a".to_string(), 2)]);
//! # Ok::<(), riffle::Error>(())
//! ```

mod driver;
mod stores;
mod topics;

pub use driver::TopologyTestDriver;
pub use stores::{TestKeyValueStore, TestSessionStore, TestWindowStore};
pub use topics::{TestInputTopic, TestOutputTopic, TestRecord};
