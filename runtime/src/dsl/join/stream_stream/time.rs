//! The times the two nodes of one stream–stream join share in a task: its stream time,
//! the earliest time its outer store may hold, when the outer store is next scanned, and each
//! side's store's observed time ([`TimeTracker`], one per task from the join's
//! [`TimeTrackers`], Kafka Streams' `TimeTrackerSupplier`). They are not kept across restarts
//! (as in Kafka Streams: a restarted task starts from the next record's time).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use riffle_state_dir::TaskId;

/// The side of a join a record came from. In the outer store's keys the right side sorts
/// first, as in Kafka Streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Left,
    Right,
}

impl Side {
    pub(super) fn byte(self) -> u8 {
        match self {
            Side::Left => 1,
            Side::Right => 0,
        }
    }

    pub(super) fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

/// Times shared by the two nodes of one join in one task.
#[derive(Debug)]
pub(crate) struct TimeTracker {
    /// The largest timestamp either side has seen (-1 before any).
    pub(super) stream_time: AtomicI64,
    /// The earliest timestamp that may be in the outer store (`i64::MAX`: unknown or none).
    pub(super) min_time: AtomicI64,
    /// The wall-clock time before which the outer store is not scanned again.
    pub(super) next_emit: AtomicI64,
    /// Each side's store's observed time (the largest timestamp put), by `Side::byte`.
    pub(super) observed: [AtomicI64; 2],
    /// Which sides' nodes took this tracker at `init`, by `Side::byte`.
    taken: [AtomicBool; 2],
}

impl TimeTracker {
    fn new() -> Self {
        TimeTracker {
            stream_time: AtomicI64::new(-1),
            min_time: AtomicI64::new(i64::MAX),
            next_emit: AtomicI64::new(i64::MIN),
            observed: [AtomicI64::new(i64::MIN), AtomicI64::new(i64::MIN)],
            taken: [AtomicBool::new(false), AtomicBool::new(false)],
        }
    }
}

/// The time trackers of one join, per task (Kafka Streams' `TimeTrackerSupplier`).
#[derive(Debug, Default)]
pub(crate) struct TimeTrackers {
    by_task: Mutex<HashMap<TaskId, Arc<TimeTracker>>>,
}

impl TimeTrackers {
    /// The tracker of `task` for `side`'s node: the one the other side's node of
    /// this instance of the task took, or a new one. A tracker this side already took is
    /// stale (an instance of the task that did not close, say one whose `init` failed), and is
    /// replaced.
    pub(super) fn take(&self, task: TaskId, side: Side) -> Arc<TimeTracker> {
        let mut map = self.by_task.lock().unwrap_or_else(|p| p.into_inner());
        let slot = side.byte() as usize;
        let tracker = match map.get(&task) {
            Some(t) if !t.taken[slot].load(Ordering::Relaxed) => t.clone(),
            _ => {
                let fresh = Arc::new(TimeTracker::new());
                map.insert(task, fresh.clone());
                fresh
            }
        };
        tracker.taken[slot].store(true, Ordering::Relaxed);
        tracker
    }

    /// Forgets `task`'s tracker if it is still `tracker`.
    pub(super) fn remove(&self, task: TaskId, tracker: &Arc<TimeTracker>) {
        let mut map = self.by_task.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&task).is_some_and(|t| Arc::ptr_eq(t, tracker)) {
            map.remove(&task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_sides_of_a_task_share_a_tracker_and_a_stale_one_is_replaced() {
        let trackers = TimeTrackers::default();
        let task = TaskId {
            subtopology: 0,
            partition: 1,
        };
        let left = trackers.take(task, Side::Left);
        let right = trackers.take(task, Side::Right);
        assert!(
            Arc::ptr_eq(&left, &right),
            "one instance of a task shares one tracker"
        );
        left.stream_time.store(99, Ordering::Relaxed);
        // An instance that never closed (its init failed): the next one starts afresh.
        let again = trackers.take(task, Side::Right);
        assert!(!Arc::ptr_eq(&again, &right));
        assert_eq!(again.stream_time.load(Ordering::Relaxed), -1);
        // The stale instance closing does not take the new one's tracker away.
        trackers.remove(task, &left);
        assert!(Arc::ptr_eq(&trackers.take(task, Side::Left), &again));
        trackers.remove(task, &again);
        assert!(trackers.by_task.lock().expect("not poisoned").is_empty());
    }
}
