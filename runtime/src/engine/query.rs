//! What an interactive query asks of a stream thread, and its answer: the thread answers from
//! the stores of its own tasks, in its loop (runtime/src/app/query.rs puts the questions). And
//! where the questions wait: [`QueryInbox`], a queue per stream thread slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, mpsc};

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

/// The queries waiting for each stream thread slot, and per slot whether there are any (what
/// the thread's loop looks at: one plain load when there are none).
#[derive(Debug)]
pub(crate) struct QueryInbox {
    queues: Vec<Mutex<Vec<StoreQuery>>>,
    pending: Vec<AtomicBool>,
}

impl QueryInbox {
    /// Empty, for `threads` stream thread slots.
    pub(crate) fn new(threads: usize) -> QueryInbox {
        QueryInbox {
            queues: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
            pending: (0..threads).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// How many thread slots there are (each answers every query).
    pub(crate) fn slots(&self) -> usize {
        self.queues.len()
    }

    /// Puts `query` in slot `slot`'s queue and flags it.
    pub(crate) fn post(&self, slot: usize, query: StoreQuery) {
        self.queues[slot]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(query);
        self.pending[slot].store(true, Ordering::Release);
    }

    /// Whether queries wait for slot `slot`, clearing its flag if so. A plain load in the common
    /// case; the swap only when a query is waiting.
    pub(crate) fn take_pending(&self, slot: usize) -> bool {
        let pending = &self.pending[slot];
        pending.load(Ordering::Acquire) && pending.swap(false, Ordering::AcqRel)
    }

    /// The queries waiting in slot `slot`'s queue, which is left empty.
    pub(crate) fn drain(&self, slot: usize) -> Vec<StoreQuery> {
        std::mem::take(
            &mut *self.queues[slot]
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}
