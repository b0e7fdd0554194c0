//! Joins, one folder per family, each holding its builder methods (`mod.rs`, with the family's
//! doc) beside its operator nodes (`node.rs`), as windowed aggregations do in `dsl/window/`:
//!
//! - `stream_stream/`: two streams joined within [`JoinWindows`](crate::dsl::JoinWindows)
//!   (`KStream::join_stream`, `left_join_stream`, `outer_join_stream`); each side a node with
//!   its own window store, left and outer joins an outer store of unmatched records.
//! - `stream_table/`: each stream record with the table's current row for its key
//!   (`KStream::join`, `left_join`, and `*_with`); table updates emit nothing.
//! - `table_table/`: two tables by key (`KTable::join`, `left_join`, `outer_join`, and
//!   `*_with`); an update of either side joins the other's current row, and the result is a
//!   table.
//! - `stream_global/`: each stream record with a global table's row for a key it computes
//!   (`KStream::join_global`, `left_join_global`, and `_with_key`), without co-partitioning.
//! - `foreign_key/`: two tables by a foreign key taken from each left row
//!   (`KTable::join_foreign`, `left_join_foreign`, and `*_with`; KIP-213), through Kafka's
//!   subscription and response topics.
//!
//! A join reads a table through the table's view (`dsl/table/node.rs`, `TableView`), never
//! through a store of its own.

pub(crate) mod foreign_key;
pub(crate) mod stream_global;
pub(crate) mod stream_stream;
pub(crate) mod stream_table;
pub(crate) mod table_table;
