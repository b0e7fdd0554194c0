//! # riffle-kafka
//!
//! riffle's Apache Kafka backend: run a riffle application on a Kafka 4.x cluster instead of
//! the embedded log, as a member of a **streams group** (KIP-1071) — so Kafka's own tools
//! (`kafka-streams-groups.sh --describe`) show riffle's members, tasks and offsets.
//!
//! - **Records**: Fetch, Produce, ListOffsets, Metadata and CreateTopics over
//!   [`kafka-protocol`](https://docs.rs/kafka-protocol)'s codecs, one blocking connection per
//!   broker. Kafka's v2 records are riffle-log's records, so a fetched batch becomes a
//!   `FetchedBatch` over a slice of the response, and a `BatchBuilder`'s records go out
//!   behind a Kafka batch header without being re-encoded.
//! - **Membership**: StreamsGroupHeartbeat (API key 88) per stream thread, hand-encoded from
//!   the Kafka 4.4 schemas (`kafka-protocol` 0.18 has no types for it): the topology on join,
//!   the owned tasks, and the offset-sum snapshot as `TaskOffsets` (with `TaskEndOffsets`);
//!   the answer's active, standby and warm-up tasks become the thread's `Assignment`.
//! - **Offsets**: OffsetCommit v9 as the member (member id and epoch), at-least-once;
//!   OffsetFetch to resume.
//! - **Internal topics**: riffle creates its changelog (compacted) and repartition topics
//!   before joining; a 4.4 broker would otherwise create them itself on the first join
//!   (status `MISSING_INTERNAL_TOPICS`), which riffle also waits out.
//!
//! - **Exactly-once** (`processing_guarantee = exactly_once`, Kafka Streams' `exactly_once_v2`):
//!   one transactional producer per stream thread, each commit one transaction (outputs,
//!   changelog writes and the input offsets as the member); reads are `read_committed`; a fenced
//!   thread closes its tasks dirty and takes them back (docs/design.md §5).
//!
//! What it is not: a general Kafka client (no consumer groups, no SASL/TLS yet). Batches are
//! read and written uncompressed, gzip, snappy
//! (snappy-java's xerial framing, what Kafka's Java client writes), lz4 or zstd
//! (`compression_type` for riffle's own).
//!
//! ```no_run
//! use riffle::{Consumed, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig};
//! use riffle_kafka::{KafkaBackend, KafkaConfig};
//!
//! let backend = KafkaBackend::connect(KafkaConfig::new("127.0.0.1:9092"))?;
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
//!     .group_by_key()
//!     .count()
//!     .to_stream()
//!     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
//! let app = StreamsApp::new(builder.build()?, StreamsConfig::new("word-count"), backend.shared())?;
//! app.wait()?; // until a ShutdownHandle stops it
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod batch;
mod cluster;
mod conn;
mod error;
mod group;
mod member;
mod retry;
mod security;
mod streams;
mod txn;
mod watch;
mod wire;

pub use crate::{
    backend::KafkaBackend,
    cluster::KafkaConfig,
    error::{Error, ErrorCode, Result},
    group::MemberInfo,
    security::{SaslMechanism, Security, SecurityProtocol},
    streams::{DescribedMember, DescribedTasks, StreamsGroupDescription, TaskIds, TaskOffset},
};
