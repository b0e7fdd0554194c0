//! The embedded group coordinator: assigns tasks to the stream threads of this process.
//!
//! Threads heartbeat to it as members of a group. Assignment is sticky (a task stays with its
//! owner while the owner lives and is not over capacity) and balanced (no member gets more than
//! ⌈tasks / members⌉). A stateful task without an owner goes to the member that reported the
//! largest offset sum for it: that member holds the most of its state.

// The in-process group coordinator serves the embedded backend only; without it (no
// `embedded` feature) only `OffsetSendPolicy` is used.
#![cfg_attr(not(feature = "embedded"), allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use riffle_state_dir::TaskId;

use crate::backend::group::{Assignment, GroupCoordinator, Heartbeat};
use crate::types::error::Result;

#[derive(Default)]
struct Member {
    assignment: Assignment,
    offsets: imbl::HashMap<TaskId, i64>,
}

#[derive(Default)]
struct Group {
    tasks: BTreeSet<TaskId>,
    members: BTreeMap<String, Member>,
    epoch: u64,
}

/// The in-process coordinator of one application.
#[derive(Default)]
pub(crate) struct Coordinator {
    group: Mutex<Group>,
    /// The group epoch, readable without the lock.
    generation: AtomicU64,
}

impl Coordinator {
    pub(crate) fn new(tasks: impl IntoIterator<Item = TaskId>) -> Self {
        let group = Group {
            tasks: tasks.into_iter().collect(),
            ..Group::default()
        };
        Coordinator {
            group: Mutex::new(group),
            generation: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Group> {
        // A panicking member cannot leave the group half-updated: every update below is
        // computed first and stored at the end, so a poisoned lock still holds a valid group.
        self.group
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl GroupCoordinator for Coordinator {
    fn register(&self, member: &str) {
        let mut group = self.lock();
        group.members.entry(member.to_owned()).or_default();
    }

    fn leave(&self, member: &str) {
        let mut group = self.lock();
        if group.members.remove(member).is_some() {
            rebalance(&mut group);
            self.generation.store(group.epoch, Ordering::Release);
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn heartbeat(&self, heartbeat: Heartbeat<'_>) -> Result<Assignment> {
        let member = heartbeat.member;
        let offsets = heartbeat.task_offsets;
        let mut group = self.lock();
        let joined = !group.members.contains_key(member);
        let m = group.members.entry(member.to_owned()).or_default();
        if let Some(offsets) = offsets {
            m.offsets = offsets;
        }
        let unassigned = m.assignment.epoch == 0;
        if joined || unassigned {
            rebalance(&mut group);
            self.generation.store(group.epoch, Ordering::Release);
        }
        Ok(group
            .members
            .get(member)
            .map(|m| m.assignment.clone())
            .unwrap_or_default())
    }
}

fn rebalance(group: &mut Group) {
    let members: Vec<String> = group.members.keys().cloned().collect();
    if members.is_empty() {
        return;
    }
    let capacity = group.tasks.len().div_ceil(members.len());
    let mut next: BTreeMap<&str, BTreeSet<TaskId>> = members
        .iter()
        .map(|m| (m.as_str(), BTreeSet::new()))
        .collect();
    let mut unowned = Vec::new();
    // Sticky: keep current owners up to capacity.
    for &task in &group.tasks {
        let owner = group
            .members
            .iter()
            .find(|(_, m)| m.assignment.active.contains(&task))
            .map(|(name, _)| name.as_str());
        match owner.and_then(|o| next.get_mut(o)) {
            Some(set) if set.len() < capacity => {
                set.insert(task);
            }
            _ => unowned.push(task),
        }
    }
    // Stateful placement, then least loaded.
    for task in unowned {
        let with_state = group
            .members
            .iter()
            .filter(|(name, _)| next.get(name.as_str()).is_some_and(|s| s.len() < capacity))
            .filter_map(|(name, m)| m.offsets.get(&task).map(|&sum| (sum, name.as_str())))
            .max();
        let target = match with_state {
            Some((_, name)) => name,
            None => next
                .iter()
                .min_by_key(|(_, s)| s.len())
                .map(|(n, _)| *n)
                .unwrap_or_default(),
        };
        if let Some(set) = next.get_mut(target) {
            set.insert(task);
        }
    }
    group.epoch += 1;
    let epoch = group.epoch;
    let next: Vec<(String, BTreeSet<TaskId>)> =
        next.into_iter().map(|(n, s)| (n.to_owned(), s)).collect();
    for (name, tasks) in next {
        if let Some(m) = group.members.get_mut(&name)
            && (*m.assignment.active != tasks || m.assignment.epoch == 0)
        {
            m.assignment = Assignment::active(epoch, tasks);
        }
    }
}

/// When a heartbeat carries task offsets (docs/design.md §4, "Sending"): on join, when the
/// assignment changed, when the task-offset interval has passed — and only if the snapshot's
/// version differs from the one last sent.
#[derive(Debug)]
pub(crate) struct OffsetSendPolicy {
    interval: Duration,
    last_sent_version: Option<u64>,
    last_sent_at: Option<Instant>,
    assignment_changed: bool,
}

impl OffsetSendPolicy {
    pub(crate) fn new(interval: Duration) -> Self {
        OffsetSendPolicy {
            interval,
            last_sent_version: None,
            last_sent_at: None,
            assignment_changed: false,
        }
    }

    /// A warm-up task came within the acceptable recovery lag: send at the next heartbeat.
    pub(crate) fn warmup_caught_up(&mut self) {
        self.assignment_changed = true;
    }

    pub(crate) fn assignment_changed(&mut self) {
        self.assignment_changed = true;
    }

    /// The coordinator asked for another task-offset interval.
    pub(crate) fn set_interval(&mut self, interval: Duration) {
        self.interval = interval;
    }

    /// Whether to send the snapshot of `version` now; records the send if so.
    pub(crate) fn should_send(&mut self, version: u64, now: Instant) -> bool {
        let joining = self.last_sent_at.is_none();
        let interval_passed = self
            .last_sent_at
            .is_some_and(|t| now.duration_since(t) >= self.interval);
        let due = joining || self.assignment_changed || interval_passed;
        if !due || self.last_sent_version == Some(version) {
            return false;
        }
        self.last_sent_version = Some(version);
        self.last_sent_at = Some(now);
        self.assignment_changed = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(
        c: &Coordinator,
        member: &str,
        offsets: Option<imbl::HashMap<TaskId, i64>>,
    ) -> Assignment {
        let owned = Assignment::default();
        c.heartbeat(Heartbeat {
            member,
            task_offsets: offsets,
            owned: &owned,
        })
        .expect("embedded heartbeats do not fail")
    }

    fn t(p: u32) -> TaskId {
        TaskId {
            subtopology: 0,
            partition: p,
        }
    }

    #[test]
    fn assignment_is_balanced_and_sticky() {
        let c = Coordinator::new((0..6).map(t));
        c.register("a");
        c.register("b");
        let a = hb(&c, "a", None);
        let b = hb(&c, "b", None);
        assert_eq!(a.active.len(), 3);
        assert_eq!(b.active.len(), 3);
        assert!(a.active.is_disjoint(&b.active));
        c.register("c");
        let c3 = hb(&c, "c", None);
        assert_eq!(c3.active.len(), 2);
        c.leave("c");
        let a2 = hb(&c, "a", None);
        let b2 = hb(&c, "b", None);
        assert_eq!(a2.active.len() + b2.active.len(), 6);
    }

    #[test]
    fn unowned_stateful_task_goes_where_its_state_is() {
        let c = Coordinator::new([t(0)]);
        c.register("a");
        c.register("b");
        let mut offsets = imbl::HashMap::new();
        offsets.insert(t(0), 42);
        // b reports state for 0_0 in the heartbeat that triggers the first assignment; without
        // it, the least-loaded rule would pick "a" (first by name).
        let b = hb(&c, "b", Some(offsets));
        assert!(b.active.contains(&t(0)));
        assert!(hb(&c, "a", None).active.is_empty());
    }

    #[test]
    fn offsets_are_sent_on_join_and_only_when_changed() {
        let mut p = OffsetSendPolicy::new(Duration::from_secs(60));
        let now = Instant::now();
        assert!(p.should_send(1, now));
        assert!(
            !p.should_send(2, now),
            "not due: no interval, no assignment change"
        );
        p.assignment_changed();
        assert!(p.should_send(2, now));
        p.assignment_changed();
        assert!(!p.should_send(2, now), "due but unchanged");
        assert!(p.should_send(3, now + Duration::from_secs(61)));
        // A warm-up task within the acceptable recovery lag makes the next heartbeat due.
        assert!(!p.should_send(4, now + Duration::from_secs(62)));
        p.warmup_caught_up();
        assert!(p.should_send(4, now + Duration::from_secs(62)));
    }
}
