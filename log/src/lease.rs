//! Partition locks kept between appends (leases), on a log other processes may share.
//!
//! Every write to a partition happens under the OS lock of its `lock` file (log/FORMAT.md,
//! *Many processes*). Taking and releasing it for every append costs two system calls, plus
//! the read of the lock file and the look at the active segment that follow a fresh lock: a
//! tenth of a 100-record append. So a handle that appended keeps the lock, as a lease, and the
//! next append of the same handle to that partition goes straight to the write (nobody else
//! can have written meanwhile). A lease ends:
//!
//! - when the partition saw no append of this handle for [`LEASE_IDLE`] — a releaser thread,
//!   started with the first lease, looks every [`LEASE_IDLE`] / 2;
//! - at the first append after [`LEASE_MAX`] of holding it, whatever the rate, so writers in
//!   other processes get their turn;
//! - at any other unlock (a transaction's end, an error), and when the handle is dropped
//!   (closing the file releases the lock; so does the death of the process).
//!
//! A partition is not leased while other processes write it too: a handle that had to wait
//! for its lock, or found their batches when it took it, leaves it unleased for
//! [`CONTENDED_FOR`] (renewed at each such finding), so writers sharing a partition take the
//! lock per append, as without leases, instead of queueing behind each other's leases.
//!
//! At most [`MAX_LEASES`] partitions are leased at once (each holds its lock file open); past
//! that an append unlocks as before. The releaser never waits for a partition: it skips one
//! whose mutex is taken (its holder is using it) and looks again next time, so it cannot be
//! drawn into a wait for a lock another process's releaser would have to free.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError, Weak};
use std::time::{Duration, Instant};

use crate::log::{Log, Shared};
use riffle_record::TopicPartition;

/// A lease ends after this long without an append of its handle.
pub(crate) const LEASE_IDLE: Duration = Duration::from_millis(5);
/// A lease is not renewed past this: the append after it unlocks.
pub(crate) const LEASE_MAX: Duration = Duration::from_millis(20);
/// A partition where this handle found another process writing (it waited for the lock, or
/// caught up with their batches) is not leased for this long after: leases would make the
/// writers queue behind each other's idle timeouts.
pub(crate) const CONTENDED_FOR: Duration = Duration::from_secs(1);
/// Partitions leased at once, at most.
pub(crate) const MAX_LEASES: usize = 128;

/// The leased partitions of one log handle, and its releaser thread.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    held: Vec<TopicPartition>,
    started: bool,
    stop: bool,
}

fn locked(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A list of names: usable whatever a panicking holder did.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Leases {
    /// Registers `tp` as leased, starting the releaser if it does not run yet; `false` if
    /// [`MAX_LEASES`] are held (the caller unlocks instead). The caller holds `tp`'s lock.
    pub(crate) fn add(self: &Arc<Self>, tp: &TopicPartition, log: &Weak<Shared>) -> bool {
        let mut state = locked(&self.state);
        if state.stop || state.held.len() >= MAX_LEASES {
            return false;
        }
        if !state.started {
            let leases = Arc::clone(self);
            let log = Weak::clone(log);
            let spawned = std::thread::Builder::new()
                .name("riffle-log-leases".into())
                .spawn(move || leases.release_loop(&log));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the partition-lease releaser; every append unlocks its partition");
                state.stop = true;
                return false;
            }
            state.started = true;
        }
        let was_empty = state.held.is_empty();
        state.held.push(tp.clone());
        if was_empty {
            self.wake.notify_one();
        }
        true
    }

    /// The log handle is going away: the releaser stops (the partitions' files close with it).
    pub(crate) fn stop(&self) {
        locked(&self.state).stop = true;
        self.wake.notify_one();
    }

    fn release_loop(&self, log: &Weak<Shared>) {
        loop {
            let held = {
                let mut state = locked(&self.state);
                while state.held.is_empty() && !state.stop {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if state.stop {
                    return;
                }
                let (state, _) = self
                    .wake
                    .wait_timeout(state, LEASE_IDLE / 2)
                    .unwrap_or_else(PoisonError::into_inner);
                if state.stop {
                    return;
                }
                state.held.clone()
            };
            let Some(shared) = log.upgrade() else {
                return;
            };
            let log = Log { shared };
            let now = Instant::now();
            for tp in &held {
                self.release_if_due(&log, tp, now);
            }
            // If this was the last handle, the log closes here (and stops this loop).
            drop(log);
        }
    }

    /// Ends `tp`'s lease if it is due (or already ended) and takes it off the list — under
    /// the partition's mutex, so an append cannot lease it again in between and go unlisted.
    /// A busy partition is left for the next look.
    fn release_if_due(&self, log: &Log, tp: &TopicPartition, now: Instant) {
        let forget = || locked(&self.state).held.retain(|t| t != tp);
        let Ok(topic) = log.topic(tp) else {
            return forget();
        };
        let Some(partition) = topic.partitions.get(tp.partition as usize) else {
            return forget();
        };
        let mut p = match partition.try_lock() {
            Ok(p) => p,
            Err(TryLockError::WouldBlock) => return,
            // Whatever the panic left, the OS lock must not outlive it.
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        if p.end_lease_if_idle(now) {
            forget();
        }
    }
}
