//! The embedded group coordinator: assigns tasks to the stream threads of this process.
//!
//! Threads heartbeat to it as members of a group, and the assignor (`assignor.rs`) computes
//! their active tasks: balanced (every member gets ⌊tasks / members⌋ or ⌈tasks / members⌉)
//! and sticky (a task stays with its owner while the owner lives and balance allows). The
//! threads are members of one process and share its state directory, so no thread holds
//! more of a task's state than another: there are no standbys or warm-ups, and the offset sums
//! they report do not tell them apart.

// The in-process group coordinator serves the embedded backend only; without it (no
// `embedded` feature) only `OffsetSendPolicy` is used.
#![cfg_attr(not(feature = "embedded"), allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use riffle_state_dir::TaskId;

use crate::backend::assignor::{self, AssignorInput, AssignorMember, TaskSets};
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

/// Runs the assignor over the threads of this process: one process (they share its state
/// directory), no standbys, no warm-ups.
fn rebalance(group: &mut Group) {
    if group.members.is_empty() {
        return;
    }
    let previous: Vec<TaskSets> = group
        .members
        .values()
        .map(|m| TaskSets {
            active: (*m.assignment.active).clone(),
            ..TaskSets::default()
        })
        .collect();
    let members: Vec<AssignorMember<'_>> = group
        .members
        .keys()
        .zip(&previous)
        .map(|(id, previous)| AssignorMember {
            id,
            process: PROCESS,
            previous,
        })
        .collect();
    // The threads' reports, merged as one process's.
    let mut sums: HashMap<TaskId, i64> = HashMap::new();
    for m in group.members.values() {
        for (&task, &sum) in &m.offsets {
            let merged = sums.entry(task).or_insert(sum);
            *merged = (*merged).max(sum);
        }
    }
    let offset_sums = BTreeMap::from([(PROCESS.to_owned(), sums)]);
    let target = assignor::assign(&AssignorInput {
        tasks: &group.tasks,
        // Which tasks have state is not known here; with one process it only orders
        // placement.
        stateful: &group.tasks,
        members: &members,
        departed: &[],
        offset_sums: &offset_sums,
        end_sums: &HashMap::new(),
        num_standby_replicas: 0,
        acceptable_recovery_lag: 0,
        max_warmup_replicas: 0,
    });
    group.epoch += 1;
    let epoch = group.epoch;
    for (name, tasks) in target {
        if let Some(m) = group.members.get_mut(&name)
            && (*m.assignment.active != tasks.active || m.assignment.epoch == 0)
        {
            m.assignment = Assignment::active(epoch, tasks.active);
        }
    }
}

/// The process id the assignor sees for every thread.
const PROCESS: &str = "";

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
    fn threads_are_one_process_so_offset_sums_do_not_pick_one() {
        let c = Coordinator::new([t(0)]);
        c.register("a");
        c.register("b");
        let mut offsets = imbl::HashMap::new();
        offsets.insert(t(0), 42);
        // The threads share the process's state directory: b's report says nothing a's
        // could not, and the tie goes to the first by name.
        let b = hb(&c, "b", Some(offsets));
        assert!(b.active.is_empty());
        assert!(hb(&c, "a", None).active.contains(&t(0)));
    }

    #[test]
    fn a_joining_thread_gets_tasks_even_when_no_one_is_over_the_ceiling() {
        let c = Coordinator::new((0..6).map(t));
        for m in ["a", "b", "c"] {
            c.register(m);
        }
        let before: Vec<Assignment> = ["a", "b", "c"].map(|m| hb(&c, m, None)).into();
        assert!(before.iter().all(|a| a.active.len() == 2));
        // 6 tasks over 4 threads: 2, 2, 1, 1, and only the joining one takes anything.
        c.register("d");
        let d = hb(&c, "d", None);
        assert_eq!(d.active.len(), 1);
        let after: Vec<Assignment> = ["a", "b", "c"].map(|m| hb(&c, m, None)).into();
        for (b, a) in before.iter().zip(&after) {
            assert!(a.active.is_subset(&b.active));
        }
        let total: usize = after.iter().map(|a| a.active.len()).sum();
        assert_eq!(total + d.active.len(), 6);
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
