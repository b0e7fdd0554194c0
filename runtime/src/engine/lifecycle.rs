//! Whether an application instance runs, is stopping, or is idle: the stop flag every thread
//! looks at, and per stream thread slot the data version at which that thread was last idle.
//!
//! The stream threads publish their idle versions and stop when the flag is set; the global
//! thread stops on it too; the application sets it (`close`, a shutdown handle, a thread that
//! died) and reads both to tell whether the instance is idle; an interactive query refuses to
//! wait on threads that are stopping.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backend::Backend;

/// An instance's stop flag and its stream threads' idle versions.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    shutdown: AtomicBool,
    /// Per thread slot: the data version at which its thread was last idle, `u64::MAX` while
    /// busy.
    idle_versions: Vec<AtomicU64>,
}

impl Lifecycle {
    /// Running, with `threads` stream thread slots, none idle yet.
    pub(crate) fn new(threads: usize) -> Lifecycle {
        Lifecycle {
            shutdown: AtomicBool::new(false),
            idle_versions: (0..threads).map(|_| AtomicU64::new(u64::MAX)).collect(),
        }
    }

    /// Whether the instance was asked to stop, or stopped on an error.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Asks every thread to stop, and wakes those waiting for data on `backend` so they see it.
    pub(crate) fn shut_down(&self, backend: &dyn Backend) {
        self.shutdown.store(true, Ordering::Release);
        backend.wake_waiters();
    }

    /// The stop flag itself, for a loop that polls it (the global stores' restore).
    pub(crate) fn stop_flag(&self) -> &AtomicBool {
        &self.shutdown
    }

    /// Slot `slot`'s thread is idle at data version `version`.
    pub(crate) fn set_idle(&self, slot: usize, version: u64) {
        self.idle_versions[slot].store(version, Ordering::Release);
    }

    /// Slot `slot`'s thread is busy.
    pub(crate) fn set_busy(&self, slot: usize) {
        self.idle_versions[slot].store(u64::MAX, Ordering::Release);
    }

    /// Whether every stream thread was last idle at data version `version`.
    pub(crate) fn threads_idle_at(&self, version: u64) -> bool {
        self.idle_versions
            .iter()
            .all(|v| v.load(Ordering::Acquire) == version)
    }
}
