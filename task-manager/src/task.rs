//! Task kinds, task states and the legal transitions between states.

use std::fmt;

use riffle_state_dir::{TaskId, TopicPartition};

/// Whether a task processes records or only applies its changelog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Processes records of its input partitions.
    Active,
    /// Only keeps its stores up to date from the changelog (includes warm-up tasks).
    Standby,
}

/// The life cycle of a task (docs/design.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Created, not yet initialised; its offsets are whatever the checkpoint says.
    Created,
    /// Being restored from its changelog (standbys stay here or in RUNNING while they follow).
    Restoring,
    /// Restored and processing.
    Running,
    /// Paused during a rebalance; may resume (RESTORING) or close.
    Suspended,
    /// Closed; may be revived (CREATED) after corruption.
    Closed,
}

impl TaskState {
    /// Whether `self → to` is one of the legal transitions:
    /// CREATED → RESTORING → RUNNING; RESTORING/RUNNING → SUSPENDED;
    /// SUSPENDED → RESTORING or CLOSED; CLOSED → CREATED.
    pub fn can_transition_to(self, to: TaskState) -> bool {
        use TaskState::*;
        matches!(
            (self, to),
            (Created, Restoring)
                | (Restoring, Running)
                | (Restoring | Running, Suspended)
                | (Suspended, Restoring | Closed)
                | (Closed, Created)
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskState::Created => "CREATED",
            TaskState::Restoring => "RESTORING",
            TaskState::Running => "RUNNING",
            TaskState::Suspended => "SUSPENDED",
            TaskState::Closed => "CLOSED",
        })
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskKind::Active => "active",
            TaskKind::Standby => "standby",
        })
    }
}

/// What the registry knows about one owned task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The task.
    pub id: TaskId,
    /// Active or standby.
    pub kind: TaskKind,
    /// Current state.
    pub state: TaskState,
    /// The changelog partitions of its logged stores; empty for a stateless task.
    pub changelog_partitions: Vec<TopicPartition>,
}

impl Task {
    /// True when the task has at least one changelog partition.
    pub fn has_changelog(&self) -> bool {
        !self.changelog_partitions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::TaskState::{self, *};

    #[test]
    fn exactly_the_design_transitions_are_legal() {
        let all = [Created, Restoring, Running, Suspended, Closed];
        let legal: Vec<(TaskState, TaskState)> = all
            .iter()
            .flat_map(|&a| all.iter().map(move |&b| (a, b)))
            .filter(|(a, b)| a.can_transition_to(*b))
            .collect();
        assert_eq!(
            legal,
            [
                (Created, Restoring),
                (Restoring, Running),
                (Restoring, Suspended),
                (Running, Suspended),
                (Suspended, Restoring),
                (Suspended, Closed),
                (Closed, Created),
            ]
        );
    }
}
