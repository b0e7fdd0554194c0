//! Joins: stream–stream (windowed), stream–table and table–table, stream–global-table, and
//! foreign-key table–table joins (KIP-213). Each family keeps its builder methods beside its
//! operator nodes.

pub(crate) mod foreign_key;
pub(crate) mod stream_stream;
pub(crate) mod table;
