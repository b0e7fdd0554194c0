//! `TaskRegistry`: the tasks one stream thread owns, with a version and a change journal.
//!
//! Pure state: no I/O, no locks, no threads. The stream thread owns it (`&mut`); tasks handed to
//! the state updater stay registered here — the updater only does their restore work.

use std::collections::HashMap;

use riffle_state_dir::{ChangeJournal, DEFAULT_JOURNAL_CAPACITY, TaskId, TopicPartition};

use crate::error::{Error, Result};
use crate::task::{Task, TaskKind, TaskState};

/// The tasks owned by one stream thread.
///
/// Every change — add, remove, transition, kind change — moves [`version`](Self::version) by one
/// and records the task in a bounded journal ([`changes_since`](Self::changes_since)).
#[derive(Debug)]
pub struct TaskRegistry {
    id: u64,
    tasks: HashMap<TaskId, Task>,
    version: u64,
    journal: ChangeJournal,
}

impl Default for TaskRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl TaskRegistry {
    /// An empty registry with the default journal capacity.
    pub fn new() -> Self {
        Self::with_journal_capacity(DEFAULT_JOURNAL_CAPACITY)
    }

    /// An empty registry whose journal keeps `capacity` changes.
    pub fn with_journal_capacity(capacity: usize) -> Self {
        Self {
            id: riffle_state_dir::next_source_id(),
            tasks: HashMap::new(),
            version: 0,
            journal: ChangeJournal::new(capacity),
        }
    }

    /// A process-unique id, so a snapshot notices being fed a different registry.
    pub fn source_id(&self) -> u64 {
        self.id
    }

    /// The current version (moves on every change).
    pub fn version(&self) -> u64 {
        self.version
    }

    fn changed(&mut self, task: TaskId) {
        self.version += 1;
        self.journal.record(self.version, task);
    }

    /// Registers `task` in state CREATED. Errors if it is already registered.
    pub fn add(
        &mut self,
        task: TaskId,
        kind: TaskKind,
        changelog_partitions: Vec<TopicPartition>,
    ) -> Result<()> {
        if self.tasks.contains_key(&task) {
            return Err(Error::DuplicateTask(task));
        }
        self.tasks.insert(
            task,
            Task {
                id: task,
                kind,
                state: TaskState::Created,
                changelog_partitions,
            },
        );
        self.changed(task);
        Ok(())
    }

    /// Moves `task` to state `to`; returns the previous state. An illegal transition is an
    /// error naming the task and both states, and changes nothing.
    pub fn transition(&mut self, task: TaskId, to: TaskState) -> Result<TaskState> {
        let t = self.tasks.get_mut(&task).ok_or(Error::UnknownTask(task))?;
        let from = t.state;
        if !from.can_transition_to(to) {
            return Err(Error::IllegalTransition { task, from, to });
        }
        t.state = to;
        self.changed(task);
        Ok(from)
    }

    /// Changes `task` between active and standby (e.g. a standby promoted to active).
    pub fn set_kind(&mut self, task: TaskId, kind: TaskKind) -> Result<()> {
        let t = self.tasks.get_mut(&task).ok_or(Error::UnknownTask(task))?;
        if t.kind != kind {
            t.kind = kind;
            self.changed(task);
        }
        Ok(())
    }

    /// Unregisters `task`, returning what was known about it.
    pub fn remove(&mut self, task: TaskId) -> Option<Task> {
        let removed = self.tasks.remove(&task);
        if removed.is_some() {
            self.changed(task);
        }
        removed
    }

    /// The task, if registered.
    pub fn get(&self, task: TaskId) -> Option<&Task> {
        self.tasks.get(&task)
    }

    /// Whether `task` is registered.
    pub fn contains(&self, task: TaskId) -> bool {
        self.tasks.contains_key(&task)
    }

    /// All registered tasks, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Task> + '_ {
        self.tasks.values()
    }

    /// Number of registered tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no task is registered.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Appends to `out` the tasks changed after version `since`; false (nothing appended) if
    /// the journal no longer reaches back that far or `since` is not a version of this registry.
    pub fn changes_since(&self, since: u64, out: &mut Vec<TaskId>) -> bool {
        since <= self.version && self.journal.changes_since(since, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn illegal_transition_names_task_and_states_and_changes_nothing() {
        let mut reg = TaskRegistry::new();
        let t = TaskId::new(1, 7);
        reg.add(t, TaskKind::Active, vec![]).expect("add");
        let v = reg.version();
        let err = reg.transition(t, TaskState::Running).expect_err("illegal");
        assert_eq!(
            err.to_string(),
            "task 1_7: illegal transition CREATED -> RUNNING"
        );
        assert_eq!(reg.version(), v);
        assert_eq!(reg.get(t).map(|t| t.state), Some(TaskState::Created));
    }

    #[test]
    fn every_change_is_journaled() {
        let mut reg = TaskRegistry::with_journal_capacity(3);
        let (a, b) = (TaskId::new(0, 0), TaskId::new(0, 1));
        reg.add(a, TaskKind::Active, vec![]).expect("add");
        reg.add(b, TaskKind::Standby, vec![]).expect("add");
        assert!(matches!(
            reg.add(a, TaskKind::Active, vec![]),
            Err(Error::DuplicateTask(_))
        ));
        reg.transition(a, TaskState::Restoring).expect("legal");
        let mut out = Vec::new();
        assert!(reg.changes_since(1, &mut out));
        assert_eq!(out, [b, a]);
        reg.remove(b);
        out.clear();
        assert!(
            !reg.changes_since(0, &mut out),
            "journal of 3 lost version 1"
        );
        assert_eq!(reg.version(), 4);
    }
}
