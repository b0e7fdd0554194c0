//! A real Apache Kafka broker for riffle's tests: [`KafkaBroker::start`] fetches Kafka 4.4's jars
//! from Maven Central (cached under `~/.cache/riffle`), formats a fresh KRaft storage directory,
//! starts a combined broker+controller on a free loopback port and waits until it serves
//! clients. Dropping the [`KafkaBroker`] stops the broker and deletes its directory — also when a
//! test panics. A watchdog process stops the broker if the test process dies without dropping
//! it (killed, or `std::process::exit`).
//!
//! The Rust side drives the shell scripts next to this crate (`fetch-kafka.sh`,
//! `start-broker.sh`, `wait-broker.sh`, `stop-broker.sh`, `kafka-run.sh`; see `README.md`), so a
//! test and a person at a shell start the very same broker. Streams groups (KIP-1071) need no
//! switch in Kafka 4.4; the scripts only turn the initial rebalance delays off.
//!
//! [`KafkaBrokerBuilder::secure`] adds SASL_PLAINTEXT and SASL_SSL listeners (PLAIN and
//! SCRAM-SHA-256/512 for the user [`SASL_USER`]), with certificates made in the test.
//!
//! [`KafkaCluster`] starts several such nodes as one KRaft cluster (replication factor 3,
//! `min.insync.replicas` 2 for three nodes) whose nodes a test kills and restarts.
//!
//! What it is not: a mock. Tests that use it
//! need Java 17+ and Maven; without them [`KafkaBroker::start`] fails with an error that says
//! what to install — it never skips.
//!
//! ```no_run
//! use riffle_kafka_testkit::KafkaBroker;
//!
//! let broker = KafkaBroker::start()?;
//! broker.create_topic("words", 4)?;
//! let out = broker.run_tool(
//!     "org.apache.kafka.tools.streams.StreamsGroupCommand",
//!     &["--bootstrap-server", broker.bootstrap(), "--list"],
//! )?;
//! println!("{out}");
//! # Ok::<(), riffle_kafka_testkit::Error>(())
//! ```

mod broker;
mod cluster;
mod tls;

pub use broker::{
    Error, KafkaBroker, KafkaBrokerBuilder, Result, SASL_PASSWORD, SASL_USER, run_offline_tool,
};
pub use cluster::KafkaCluster;
