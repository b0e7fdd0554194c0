//! What an interactive query asks of a stream thread, and its answer: the thread answers from
//! the stores of its own tasks, in its loop (runtime/src/app/query.rs puts the questions).

use std::sync::mpsc;

use crate::types::error::Result;

/// What a query asks of one thread's stores.
#[derive(Debug, Clone)]
pub(crate) enum QueryOp {
    Get(Vec<u8>),
    /// Entries with `from <= key <= to` (a bound absent: unbounded).
    Range(Option<Vec<u8>>, Option<Vec<u8>>),
    Count,
    /// A window or session store's entries with encoded keys in `[lo, hi)` (`hi` empty: no
    /// upper bound) and entry times (a window's start, a session's end) in `[from, to]`: the
    /// entry keys as stored, and the values.
    Segmented {
        lo: Vec<u8>,
        hi: Vec<u8>,
        from: i64,
        to: i64,
    },
}

/// One thread's answer.
#[derive(Debug, Default)]
pub(crate) struct QueryAnswer {
    pub(crate) entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) count: u64,
    /// Tasks of this thread holding the store that are not running yet (restoring).
    pub(crate) restoring: usize,
}

/// A query waiting in a thread's queue.
#[derive(Debug)]
pub(crate) struct StoreQuery {
    pub(crate) store: String,
    pub(crate) op: QueryOp,
    pub(crate) reply: mpsc::Sender<Result<QueryAnswer>>,
}
