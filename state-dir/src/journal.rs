//! Versioned task → offset-sum maps with a bounded journal of which tasks changed.
//!
//! [`ChangeJournal`] and [`VersionedSums`] are pure state (no locks, no I/O). [`SharedOffsetSums`]
//! wraps a `VersionedSums` for sharing between threads: its version is mirrored in an atomic so
//! that "did anything change?" is one load — no lock, no allocation.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::TaskId;

/// Default number of changes a journal keeps before readers that fell behind must rebuild.
pub const DEFAULT_JOURNAL_CAPACITY: usize = 4096;

/// Hands out process-unique ids so a reader can tell two sources apart.
pub fn next_source_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Which tasks changed at which version, keeping only the last `capacity` changes.
#[derive(Clone, Debug)]
pub struct ChangeJournal {
    entries: VecDeque<(u64, TaskId)>,
    capacity: usize,
    /// Every change with a version above `floor` is still in `entries`.
    floor: u64,
}

impl ChangeJournal {
    /// An empty journal keeping at most `capacity` (at least 1) changes.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            floor: 0,
        }
    }

    /// Records that `task` changed, producing `version` (which must exceed every earlier one).
    pub fn record(&mut self, version: u64, task: TaskId) {
        if self.entries.len() == self.capacity
            && let Some((dropped, _)) = self.entries.pop_front()
        {
            self.floor = dropped;
        }
        self.entries.push_back((version, task));
    }

    /// Appends to `out` every task changed after version `since`. Returns false — and appends
    /// nothing — when the journal no longer reaches back to `since` (the reader must rebuild).
    pub fn changes_since(&self, since: u64, out: &mut Vec<TaskId>) -> bool {
        if since < self.floor {
            return false;
        }
        // Entries are in version order: skip the prefix at or below `since`.
        let start = self.entries.partition_point(|(v, _)| *v <= since);
        out.extend(self.entries.range(start..).map(|(_, t)| *t));
        true
    }

    /// The journal's capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A task → offset-sum map with a version that moves on every actual change, and a journal.
#[derive(Clone, Debug)]
pub struct VersionedSums {
    version: u64,
    sums: imbl::HashMap<TaskId, i64>,
    journal: ChangeJournal,
}

impl VersionedSums {
    /// An empty map at version 0 whose journal keeps `journal_capacity` changes.
    pub fn new(journal_capacity: usize) -> Self {
        Self {
            version: 0,
            sums: imbl::HashMap::new(),
            journal: ChangeJournal::new(journal_capacity),
        }
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The current sums (clone it for an O(1) copy).
    pub fn sums(&self) -> &imbl::HashMap<TaskId, i64> {
        &self.sums
    }

    /// The sum of `task`, if known.
    pub fn get(&self, task: TaskId) -> Option<i64> {
        self.sums.get(&task).copied()
    }

    /// Sets (`Some`) or forgets (`None`) the sum of `task`. The version moves only if the value
    /// actually changed; returns whether it did.
    pub fn set(&mut self, task: TaskId, sum: Option<i64>) -> bool {
        let changed = match sum {
            Some(s) => self.sums.insert(task, s) != Some(s),
            None => self.sums.remove(&task).is_some(),
        };
        if changed {
            self.version += 1;
            self.journal.record(self.version, task);
        }
        changed
    }

    /// See [`ChangeJournal::changes_since`].
    pub fn changes_since(&self, since: u64, out: &mut Vec<TaskId>) -> bool {
        since <= self.version && self.journal.changes_since(since, out)
    }
}

/// A consistent, O(1) copy of a [`SharedOffsetSums`] at one version.
#[derive(Clone, Debug)]
pub struct OffsetSumsView {
    /// Which source this came from ([`SharedOffsetSums::source_id`]).
    pub source: u64,
    /// The source's version when the view was taken.
    pub version: u64,
    /// The sums at that version.
    pub sums: imbl::HashMap<TaskId, i64>,
}

/// A [`VersionedSums`] shared between threads.
///
/// Writers take a short lock; `version()` is a single atomic load.
#[derive(Debug)]
pub struct SharedOffsetSums {
    id: u64,
    version: AtomicU64,
    inner: Mutex<VersionedSums>,
}

impl SharedOffsetSums {
    /// An empty shared map whose journal keeps `journal_capacity` changes.
    pub fn new(journal_capacity: usize) -> Self {
        Self {
            id: next_source_id(),
            version: AtomicU64::new(0),
            inner: Mutex::new(VersionedSums::new(journal_capacity)),
        }
    }

    /// A process-unique id for this source.
    pub fn source_id(&self) -> u64 {
        self.id
    }

    /// The current version: one atomic load, never blocks, never allocates.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, VersionedSums> {
        // Updates are single `imbl` operations; a panic cannot leave the map half-written.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the map under the lock and publishes the resulting version.
    pub fn update<R>(&self, f: impl FnOnce(&mut VersionedSums) -> R) -> R {
        let mut inner = self.lock();
        let r = f(&mut inner);
        self.version.store(inner.version(), Ordering::Release);
        r
    }

    /// Sets or forgets one task's sum; returns whether it changed.
    pub fn set(&self, task: TaskId, sum: Option<i64>) -> bool {
        self.update(|m| m.set(task, sum))
    }

    /// The sum of `task`, if known.
    pub fn get(&self, task: TaskId) -> Option<i64> {
        self.lock().get(task)
    }

    /// An O(1) consistent copy of the map and its version.
    pub fn view(&self) -> OffsetSumsView {
        let inner = self.lock();
        OffsetSumsView {
            source: self.id,
            version: inner.version(),
            sums: inner.sums().clone(),
        }
    }

    /// Like [`view`](Self::view), and, atomically with it, appends to `out` the tasks changed
    /// since version `since`. The flag is false when `since` is `None` or the journal no longer
    /// reaches back that far (nothing is appended then).
    pub fn read_since(&self, since: Option<u64>, out: &mut Vec<TaskId>) -> (OffsetSumsView, bool) {
        let inner = self.lock();
        let complete = since.is_some_and(|s| inner.changes_since(s, out));
        let view = OffsetSumsView {
            source: self.id,
            version: inner.version(),
            sums: inner.sums().clone(),
        };
        (view, complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: u32) -> TaskId {
        TaskId::new(0, p)
    }

    #[test]
    fn version_moves_only_on_real_change() {
        let mut m = VersionedSums::new(8);
        assert!(m.set(t(1), Some(5)));
        assert!(!m.set(t(1), Some(5)));
        assert!(!m.set(t(2), None));
        assert!(m.set(t(1), None));
        assert_eq!(m.version(), 2);
    }

    #[test]
    fn journal_reports_changes_then_truncation() {
        let mut m = VersionedSums::new(2);
        m.set(t(1), Some(1));
        m.set(t(2), Some(2));
        let mut out = Vec::new();
        assert!(m.changes_since(0, &mut out));
        assert_eq!(out, [t(1), t(2)]);
        m.set(t(3), Some(3));
        out.clear();
        assert!(!m.changes_since(0, &mut out), "change at v1 was dropped");
        assert!(m.changes_since(1, &mut out));
        assert_eq!(out, [t(2), t(3)]);
        out.clear();
        assert!(m.changes_since(3, &mut out));
        assert!(out.is_empty());
        assert!(
            !m.changes_since(4, &mut out),
            "a version from the future is not ours"
        );
    }
}
