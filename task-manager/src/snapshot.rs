//! `OffsetSumSnapshot`: the heartbeat's task → offset-sum map (docs/design.md §4), kept up to date
//! incrementally.
//!
//! Pure state plus methods, raft-rs style: no threads, no I/O. A refresh reads three versioned
//! sources — the thread's [`TaskRegistry`], the state directory's local offset map, and the
//! thread's [`LiveOffsets`] — and:
//! - when none of the three versions moved, returns at once: three integer comparisons, no lock,
//!   no allocation, **never iterates the task set**;
//! - otherwise re-evaluates only the tasks the three journals name, updating a persistent
//!   `imbl::HashMap` in O(changed · log n);
//! - if a journal no longer reaches back far enough, rebuilds from scratch (counted).
//!
//! [`full_rebuild`] is the rules written out directly; it is the reference the incremental path is
//! tested against and the baseline [`SnapshotStrategy::FullRebuild`] runs on every refresh.

use std::fmt;
use std::str::FromStr;

use riffle_state_dir::{OffsetSumsView, SharedOffsetSums, StateDirectory, TaskId};

use crate::live_offsets::LiveOffsets;
use crate::registry::TaskRegistry;
use crate::task::{Task, TaskKind, TaskState};

/// How [`OffsetSumSnapshot::refresh`] works (config `snapshot_strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SnapshotStrategy {
    /// Versions and journals; O(1) when nothing changed (`incremental`, the default).
    #[default]
    Incremental,
    /// Rebuild from scratch on every refresh, as Kafka Streams does (`full-rebuild`).
    FullRebuild,
}

impl FromStr for SnapshotStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "incremental" => Ok(Self::Incremental),
            "full-rebuild" => Ok(Self::FullRebuild),
            other => Err(format!(
                "unknown snapshot_strategy {other:?}: expected incremental or full-rebuild"
            )),
        }
    }
}

impl fmt::Display for SnapshotStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Incremental => "incremental",
            Self::FullRebuild => "full-rebuild",
        })
    }
}

/// Counters of what refreshes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotMetrics {
    /// Refreshes that returned at once because no version moved.
    pub unchanged_refreshes: u64,
    /// Refreshes that re-evaluated only the journaled tasks.
    pub incremental_updates: u64,
    /// Refreshes that rebuilt from scratch (first refresh, truncated journal, new source, or the
    /// `FullRebuild` strategy).
    pub full_rebuilds: u64,
    /// Of `full_rebuilds`, those forced by a journal that no longer reached back far enough.
    pub truncated_journal_rebuilds: u64,
    /// Tasks re-evaluated by incremental updates, in total.
    pub tasks_reevaluated: u64,
}

/// The offset sum one owned task reports, or `None` if it is absent from the snapshot.
///
/// A RUNNING active task is omitted (caught up by definition); a CREATED or CLOSED task has no
/// live offsets, so its checkpoint's sum (the local map) stands; any other task reports its live
/// sum (0 when no position is known yet) — unless it has no changelog, then it is absent.
pub fn owned_task_sum(
    task: &Task,
    local: &imbl::HashMap<TaskId, i64>,
    live: &imbl::HashMap<TaskId, i64>,
) -> Option<i64> {
    match (task.kind, task.state) {
        (TaskKind::Active, TaskState::Running) => None,
        (_, TaskState::Created | TaskState::Closed) => local.get(&task.id).copied(),
        _ if !task.has_changelog() => None,
        _ => Some(live.get(&task.id).copied().unwrap_or(0)),
    }
}

fn task_sum(
    id: TaskId,
    registry: &TaskRegistry,
    local: &imbl::HashMap<TaskId, i64>,
    live: &imbl::HashMap<TaskId, i64>,
) -> Option<i64> {
    match registry.get(id) {
        Some(task) => owned_task_sum(task, local, live),
        None => local.get(&id).copied(),
    }
}

/// The snapshot computed from scratch by the rules of docs/design.md §4: every task of the local
/// offset map that this thread does not own, plus each owned task's [`owned_task_sum`].
pub fn full_rebuild(
    registry: &TaskRegistry,
    local: &imbl::HashMap<TaskId, i64>,
    live: &imbl::HashMap<TaskId, i64>,
) -> imbl::HashMap<TaskId, i64> {
    let mut out = imbl::HashMap::new();
    for (id, sum) in local {
        if !registry.contains(*id) {
            out.insert(*id, *sum);
        }
    }
    for task in registry.iter() {
        if let Some(sum) = owned_task_sum(task, local, live) {
            out.insert(task.id, sum);
        }
    }
    out
}

/// What the snapshot last read from its three sources: (source id, version) of each.
///
/// Versions only, never the maps: a clone of a shared map held past the refresh would make every
/// later write to that map copy its path (the writer shares nodes with the clone), and the next
/// refresh would then free those copies — at 100,000 tasks, most of the cost of a refresh with
/// changes. Views are kept only on request ([`OffsetSumSnapshot::retain_inputs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    registry: (u64, u64),
    local: (u64, u64),
    live: (u64, u64),
}

/// One stream thread's offset-sum snapshot.
#[derive(Debug)]
pub struct OffsetSumSnapshot {
    strategy: SnapshotStrategy,
    seen: Option<Seen>,
    published: imbl::HashMap<TaskId, i64>,
    version: u64,
    metrics: SnapshotMetrics,
    /// Reused between refreshes so the journal read does not allocate once warmed up.
    changed: Vec<TaskId>,
    /// Whether to keep the views the last refresh read (for [`inputs`](Self::inputs)).
    retain_inputs: bool,
    inputs: Option<(OffsetSumsView, OffsetSumsView)>,
}

impl OffsetSumSnapshot {
    /// An empty snapshot at version 0; the first refresh builds it.
    pub fn new(strategy: SnapshotStrategy) -> Self {
        Self {
            strategy,
            seen: None,
            published: imbl::HashMap::new(),
            version: 0,
            metrics: SnapshotMetrics::default(),
            changed: Vec::new(),
            retain_inputs: false,
            inputs: None,
        }
    }

    /// Keeps (or stops keeping) the local-offset-map and live-offset views each refresh read, so
    /// tests can check the snapshot against [`full_rebuild`] of exactly those inputs
    /// ([`inputs`](Self::inputs)). Off by default: a kept view makes every later write to those
    /// shared maps copy the path it changes, and the next refresh free the copies.
    pub fn retain_inputs(&mut self, retain: bool) {
        self.retain_inputs = retain;
        if !retain {
            self.inputs = None;
        }
    }

    /// The strategy in use.
    pub fn strategy(&self) -> SnapshotStrategy {
        self.strategy
    }

    /// Switches strategy at run time; the next refresh rebuilds.
    pub fn set_strategy(&mut self, strategy: SnapshotStrategy) {
        self.strategy = strategy;
        self.seen = None;
    }

    /// Brings the snapshot up to date; returns whether the published map changed (and so its
    /// version moved).
    pub fn refresh(
        &mut self,
        registry: &TaskRegistry,
        state_dir: &StateDirectory,
        live: &LiveOffsets,
    ) -> bool {
        self.refresh_from(registry, state_dir.local_offsets(), live.sums())
    }

    /// [`refresh`](Self::refresh) from the two shared sum maps directly.
    pub fn refresh_from(
        &mut self,
        registry: &TaskRegistry,
        local: &SharedOffsetSums,
        live: &SharedOffsetSums,
    ) -> bool {
        let reg = (registry.source_id(), registry.version());
        let unchanged = self.seen.is_some_and(|s| {
            s.registry == reg
                && s.local == (local.source_id(), local.version())
                && s.live == (live.source_id(), live.version())
        });
        if unchanged && self.strategy == SnapshotStrategy::Incremental {
            self.metrics.unchanged_refreshes += 1;
            return false;
        }

        self.changed.clear();
        // Which versions to ask the journals for; `None` means "rebuild" (first refresh, another
        // source, or the full-rebuild strategy).
        let since = match (&self.seen, self.strategy) {
            (Some(s), SnapshotStrategy::Incremental)
                if s.registry.0 == reg.0
                    && s.local.0 == local.source_id()
                    && s.live.0 == live.source_id() =>
            {
                Some((s.registry.1, s.local.1, s.live.1))
            }
            _ => None,
        };
        let reg_ok = since.is_some_and(|(r, _, _)| registry.changes_since(r, &mut self.changed));
        let (local_view, local_ok) = local.read_since(since.map(|s| s.1), &mut self.changed);
        let (live_view, live_ok) = live.read_since(since.map(|s| s.2), &mut self.changed);

        let changed = if reg_ok && local_ok && live_ok {
            self.metrics.incremental_updates += 1;
            self.apply_changes(registry, &local_view.sums, &live_view.sums)
        } else {
            self.metrics.full_rebuilds += 1;
            if since.is_some() {
                self.metrics.truncated_journal_rebuilds += 1;
            }
            let rebuilt = full_rebuild(registry, &local_view.sums, &live_view.sums);
            let changed = rebuilt != self.published;
            self.published = rebuilt;
            changed
        };
        self.seen = Some(Seen {
            registry: reg,
            local: (local_view.source, local_view.version),
            live: (live_view.source, live_view.version),
        });
        // Dropping the views here, while no writer has copied from them, costs two
        // reference-count decrements.
        self.inputs = self.retain_inputs.then_some((local_view, live_view));
        if changed {
            self.version += 1;
        }
        changed
    }

    fn apply_changes(
        &mut self,
        registry: &TaskRegistry,
        local: &imbl::HashMap<TaskId, i64>,
        live: &imbl::HashMap<TaskId, i64>,
    ) -> bool {
        self.changed.sort_unstable();
        self.changed.dedup();
        self.metrics.tasks_reevaluated += self.changed.len() as u64;
        let mut any = false;
        for &id in &self.changed {
            let now = task_sum(id, registry, local, live);
            let before = self.published.get(&id).copied();
            if now != before {
                any = true;
                match now {
                    Some(sum) => self.published.insert(id, sum),
                    None => self.published.remove(&id),
                };
            }
        }
        any
    }

    /// The published snapshot: its version and an O(1) clone of the map.
    pub fn published(&self) -> (u64, imbl::HashMap<TaskId, i64>) {
        (self.version, self.published.clone())
    }

    /// The published map, borrowed.
    pub fn map(&self) -> &imbl::HashMap<TaskId, i64> {
        &self.published
    }

    /// The published version; moves exactly when the map's contents change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// What refreshes have done so far.
    pub fn metrics(&self) -> SnapshotMetrics {
        self.metrics
    }

    /// The local-offset-map and live-offset views the last refresh used (for checking the
    /// snapshot against [`full_rebuild`]); `None` before the first refresh, and unless
    /// [`retain_inputs`](Self::retain_inputs) is on.
    pub fn inputs(&self) -> Option<(&OffsetSumsView, &OffsetSumsView)> {
        self.inputs.as_ref().map(|(local, live)| (local, live))
    }
}

#[cfg(test)]
mod tests {
    use riffle_state_dir::{SharedOffsetSums, TopicPartition};

    use super::*;

    #[test]
    fn inputs_are_kept_only_when_asked() {
        let (local, live) = (SharedOffsetSums::new(8), SharedOffsetSums::new(8));
        let mut registry = TaskRegistry::new();
        let task = TaskId::new(0, 0);
        registry
            .add(task, TaskKind::Active, vec![TopicPartition::new("c", 0)])
            .expect("add");
        local.set(task, Some(7));
        let mut snapshot = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
        assert!(snapshot.refresh_from(&registry, &local, &live));
        assert!(snapshot.inputs().is_none(), "not kept by default");
        snapshot.retain_inputs(true);
        local.set(task, Some(8));
        assert!(snapshot.refresh_from(&registry, &local, &live));
        let (l, _) = snapshot.inputs().expect("kept");
        assert_eq!((l.version, l.sums.get(&task)), (local.version(), Some(&8)));
        snapshot.retain_inputs(false);
        assert!(snapshot.inputs().is_none());
    }
}
