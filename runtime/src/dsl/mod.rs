//! The DSL: [`StreamsBuilder`], [`KStream`], [`KGroupedStream`], [`KTable`] and their options.
//!
//! As in Kafka Streams, key-changing operations (`map`, `select_key`, `flat_map`) mark a stream
//! as needing a repartition; a later `group_by_key` then routes it through a repartition topic,
//! which starts a new sub-topology.
//!
//! One file per concern: `stream.rs` ([`KStream`] and its stateless operations, processors,
//! grouping), `topics.rs` (where streams meet topics: sources, sinks, repartition topics),
//! `grouped.rs` ([`KGroupedStream`] and its aggregations), `options.rs`, `named.rs`
//! ([`Named`] and the naming rule); one file or folder per operator with a node of its own,
//! the method beside its node: `split/` ([`KStream::split`], [`BranchedKStream`]),
//! `repartition.rs` ([`KStream::repartition`]), `to_table.rs`, `print.rs` ([`Printed`]),
//! `to_dynamic.rs` ([`KStream::to_dynamic`]); and one folder per feature family with its
//! builder methods beside its operator nodes: `table/` ([`KTable`], grouped and global
//! tables, suppression), `window/` (windowed aggregations), `cogroup/`
//! ([`CogroupedKStream`]), `join/` (one folder per join family).

mod cogroup;
mod grouped;
pub(crate) mod join;
mod named;
mod options;
mod print;
mod repartition;
mod split;
mod stream;
pub(crate) mod table;
mod to_dynamic;
mod to_table;
mod topics;
pub(crate) mod window;

pub use cogroup::{
    CogroupWindows, CogroupedKStream, SessionWindowedCogroupedKStream, TimeWindowedCogroupedKStream,
};
pub use grouped::KGroupedStream;
pub use join::foreign_key::TableJoined;
pub use join::stream_stream::{JoinWindows, StreamJoined};
pub use join::stream_table::Joined;
pub use named::Named;
pub use options::{Consumed, Grouped, Materialized, Produced, StoreType};
pub use print::Printed;
pub use repartition::Repartitioned;
pub use split::{Branched, BranchedKStream};
pub use stream::KStream;
pub use table::KTable;
pub use table::global::GlobalKTable;
pub use table::grouped::KGroupedTable;
pub use table::suppress::{BufferConfig, Suppressed};
pub use window::{SessionWindowedKStream, TimeWindowedKStream, WindowedBy};

use std::cell::RefCell;
use std::rc::Rc;

use crate::config::{StreamsConfig, TopologyOptimization};
use crate::dsl::topics::add_source;
use crate::state::stores::StoreBuilder;
use crate::topology::{GraphBuilder, TopicRef, Topology};
use crate::types::error::Result;

/// Builds a [`Topology`] with the DSL.
///
/// ```
/// use riffle::{Consumed, Produced, Serdes, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// builder
///     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
///     .group_by_key()
///     .count()
///     .to_stream()
///     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
/// let topology = builder.build().unwrap();
/// assert_eq!(topology.subtopology_count(), 1);
/// ```
#[derive(Default)]
pub struct StreamsBuilder {
    pub(crate) graph: Rc<RefCell<GraphBuilder>>,
}

impl std::fmt::Debug for StreamsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsBuilder")
            .field("nodes", &self.graph.borrow().nodes.len())
            .finish()
    }
}

impl StreamsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A stream of the records of `topic`.
    pub fn stream<K, V>(&self, topic: &str, consumed: Consumed<K, V>) -> KStream<K, V>
    where
        K: Clone + 'static,
        V: Clone + 'static,
    {
        self.stream_from(&[topic], consumed)
    }

    /// A stream of the records of several topics, merged.
    pub fn stream_from<K, V>(&self, topics: &[&str], consumed: Consumed<K, V>) -> KStream<K, V>
    where
        K: Clone + 'static,
        V: Clone + 'static,
    {
        let topics = topics
            .iter()
            .map(|t| TopicRef::External((*t).to_owned()))
            .collect();
        add_source(&self.graph, topics, consumed, false)
    }

    /// Adds a store for processors to use: name it in [`KStream::process`] or
    /// [`KStream::process_values`] (Kafka's `StreamsBuilder.addStateStore`).
    pub fn add_state_store<K: 'static, V: 'static>(&self, builder: StoreBuilder<K, V>) -> &Self {
        let mut g = self.graph.borrow_mut();
        if let Err(e) = g.declare_store(builder.into_def()) {
            g.errors.push(e);
        }
        self
    }

    /// Finishes the topology without optimizations (Kafka Streams' `build()`): numbers its
    /// sub-topologies and checks it. A table from [`StreamsBuilder::table`] has a changelog
    /// topic of its own, and each grouping or join after a key change its own repartition topic.
    pub fn build(self) -> Result<Topology> {
        self.build_optimized(TopologyOptimization::none())
    }

    /// Finishes the topology with the optimizations `config.topology_optimization` names
    /// (Kafka Streams' `build(Properties)`, which reads `topology.optimization`).
    ///
    /// ```
    /// use riffle::{Consumed, Grouped, Produced, Serdes, StreamsBuilder, StreamsConfig};
    /// let builder = StreamsBuilder::new();
    /// let by_word = builder
    ///     .stream("lines", Consumed::with(Serdes::string(), Serdes::string()))
    ///     .flat_map_values(|line| line.split(' ').map(str::to_owned).collect::<Vec<_>>())
    ///     .select_key(|_, word| word.clone());
    /// let grouped = by_word.group_by_key_with(Grouped::with(Serdes::string(), Serdes::string()));
    /// grouped.count().to_stream().to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    /// grouped
    ///     .reduce(|a, b| a + &b, riffle::Materialized::new())
    ///     .to_stream()
    ///     .to("concatenated", Produced::with(Serdes::string(), Serdes::string()));
    /// let mut config = StreamsConfig::new("words");
    /// config.set("topology.optimization", "all")?;
    /// let topology = builder.build_with(&config)?;
    /// // Both aggregations read one repartition topic.
    /// assert_eq!(topology.describe().to_string().matches("Sink: ").count(), 3);
    /// # Ok::<(), riffle::Error>(())
    /// ```
    pub fn build_with(self, config: &StreamsConfig) -> Result<Topology> {
        self.build_optimized(config.topology_optimization)
    }

    fn build_optimized(self, optimization: TopologyOptimization) -> Result<Topology> {
        let graph = std::mem::take(&mut *self.graph.borrow_mut());
        Topology::from_graph(graph, optimization)
    }
}
