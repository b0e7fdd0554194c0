//! `LiveOffsets`: the changelog positions of one stream thread's non-running tasks, as restoration
//! and standby updates advance them.
//!
//! Shared (`Arc`) between a stream thread and its state updater. Keeps, per task, the position of
//! each changelog partition, and publishes per-task sums in a [`SharedOffsetSums`] whose version
//! moves only when a sum actually changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use riffle_state_dir::{
    Checkpoint, DEFAULT_JOURNAL_CAPACITY, SharedOffsetSums, TaskId, TopicPartition, offset_sum,
};

/// Live changelog offsets of owned tasks: task → (changelog partition → offset).
#[derive(Debug)]
pub struct LiveOffsets {
    positions: Mutex<HashMap<TaskId, BTreeMap<TopicPartition, u64>>>,
    sums: SharedOffsetSums,
}

impl Default for LiveOffsets {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveOffsets {
    /// Empty, with the default journal capacity.
    pub fn new() -> Self {
        Self::with_journal_capacity(DEFAULT_JOURNAL_CAPACITY)
    }

    /// Empty, keeping `capacity` changes in the journal.
    pub fn with_journal_capacity(capacity: usize) -> Self {
        Self {
            positions: Mutex::new(HashMap::new()),
            sums: SharedOffsetSums::new(capacity),
        }
    }

    fn positions(&self) -> MutexGuard<'_, HashMap<TaskId, BTreeMap<TopicPartition, u64>>> {
        self.positions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `task` has applied `partition` up to (not including) `offset`.
    pub fn set(&self, task: TaskId, partition: &TopicPartition, offset: u64) {
        let mut positions = self.positions();
        let per_task = positions.entry(task).or_default();
        match per_task.get_mut(partition) {
            Some(o) if *o == offset => return,
            Some(o) => *o = offset,
            None => {
                per_task.insert(partition.clone(), offset);
            }
        }
        let sum = offset_sum(per_task.values().copied());
        // Under the positions lock, so sums are published in the order positions changed.
        self.sums.set(task, Some(sum));
    }

    /// Replaces all of `task`'s positions with those of `checkpoint` (e.g. when the stream thread
    /// initialises a task from its checkpoint). Partitions absent from it become unknown.
    pub fn seed(&self, task: TaskId, checkpoint: &Checkpoint) {
        let mut positions = self.positions();
        let per_task: BTreeMap<_, _> = checkpoint.iter().map(|(p, o)| (p.clone(), o)).collect();
        let sum = offset_sum(per_task.values().copied());
        positions.insert(task, per_task);
        self.sums.set(task, Some(sum));
    }

    /// Forgets everything about `task` (e.g. once it is closed or removed).
    pub fn forget(&self, task: TaskId) {
        let mut positions = self.positions();
        positions.remove(&task);
        self.sums.set(task, None);
    }

    /// The position of one changelog partition of `task`, if known.
    pub fn get(&self, task: TaskId, partition: &TopicPartition) -> Option<u64> {
        self.positions().get(&task)?.get(partition).copied()
    }

    /// The positions of `task` as a checkpoint (what the stream thread would write).
    pub fn checkpoint(&self, task: TaskId) -> Checkpoint {
        self.positions()
            .get(&task)
            .map(|m| m.iter().map(|(p, o)| (p.clone(), *o)).collect())
            .unwrap_or_default()
    }

    /// The live sum of `task`, if any position of it is known.
    pub fn sum(&self, task: TaskId) -> Option<i64> {
        self.sums.get(task)
    }

    /// The current version: one atomic load.
    pub fn version(&self) -> u64 {
        self.sums.version()
    }

    /// The versioned per-task sums, as read by the offset-sum snapshot.
    pub fn sums(&self) -> &SharedOffsetSums {
        &self.sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_moves_only_when_a_sum_changes() {
        let live = LiveOffsets::new();
        let t = TaskId::new(0, 1);
        let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
        live.set(t, &a, 10);
        live.set(t, &b, 5);
        assert_eq!(live.sum(t), Some(15));
        let v = live.version();
        live.set(t, &a, 10);
        assert_eq!(live.version(), v, "same position, no change");
        live.set(t, &a, 11);
        assert_eq!((live.version(), live.sum(t)), (v + 1, Some(16)));
        live.forget(t);
        assert_eq!(live.sum(t), None);
    }
}
