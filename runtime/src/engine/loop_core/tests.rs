//! The loop core driven by tables of observations and a fake clock: no threads, no files.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;
use riffle_task_manager::TaskKind;

use super::*;
use crate::backend::group::Assignment;
use crate::config::{FetchStrategy, IdleWakeup};

const MS: Duration = Duration::from_millis(1);

fn settings() -> LoopSettings {
    LoopSettings {
        poll: 100 * MS,
        commit_interval: 30_000 * MS,
        heartbeat_interval: 5_000 * MS,
        cleanup_interval: Some(600_000 * MS),
        cache_max_bytes: 1_000,
        fetch_strategy: FetchStrategy::Ready,
        idle_wakeup: IdleWakeup::Deadlines,
    }
}

fn task(p: u32) -> TaskId {
    TaskId::new(0, p)
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("in", p)
}

/// A core at `t0` that has heartbeated once and runs tasks `0_0 … 0_{n-1}` reading `in-p`,
/// with every input fetched empty (caught up).
fn caught_up_core(settings: LoopSettings, n: u32, t0: Instant) -> LoopCore {
    let mut core = LoopCore::new(settings, t0);
    core.heartbeat_sent(t0, 0);
    core.observe(0, Changes::Unknown);
    for p in 0..n {
        core.task_started(task(p), &[tp(p)]);
    }
    let ready: Vec<_> = core.ready().collect();
    for input in ready {
        core.fetched(input, false);
    }
    core
}

// ---- readiness ----------------------------------------------------------------------------

#[test]
fn a_started_task_fetches_its_inputs_once_and_then_waits_for_a_signal() {
    let t0 = Instant::now();
    let mut core = LoopCore::new(settings(), t0);
    core.task_started(task(0), &[tp(0), TopicPartition::new("other", 0)]);
    assert_eq!(
        core.ready().collect::<Vec<_>>(),
        vec![(task(0), 0), (task(0), 1)]
    );
    core.fetched((task(0), 0), true);
    core.fetched((task(0), 1), false);
    assert_eq!(
        core.ready().collect::<Vec<_>>(),
        vec![(task(0), 0)],
        "an input that returned data stays ready: there may be more"
    );
    core.fetched((task(0), 0), false);
    assert_eq!(core.ready().count(), 0);
}

#[test]
fn a_record_on_one_partition_makes_only_that_partition_ready() {
    let t0 = Instant::now();
    let mut core = caught_up_core(settings(), 5_000, t0);
    assert_eq!(core.ready().count(), 0);
    let changed = [tp(4_321), TopicPartition::new("some-output", 1), tp(4_321)];
    core.observe(7, Changes::Named(&changed));
    assert_eq!(core.ready().collect::<Vec<_>>(), vec![(task(4_321), 0)]);
    assert!(!core.version_moved(7));
    assert!(core.version_moved(8));
}

#[test]
fn when_the_backend_cannot_tell_every_input_is_ready() {
    let mut core = caught_up_core(settings(), 3, Instant::now());
    core.observe(9, Changes::Unknown);
    assert_eq!(core.ready().count(), 3);
}

#[test]
fn scan_all_makes_every_input_ready_on_any_change() {
    let s = LoopSettings {
        fetch_strategy: FetchStrategy::ScanAll,
        ..settings()
    };
    let mut core = caught_up_core(s, 4, Instant::now());
    core.observe(3, Changes::Named(&[tp(1)]));
    assert_eq!(core.ready().count(), 4, "today's loop: every task fetches");
    // Observing the same version again changes nothing.
    for input in core.ready().collect::<Vec<_>>() {
        core.fetched(input, false);
    }
    core.observe(3, Changes::Named(&[tp(1)]));
    assert_eq!(core.ready().count(), 0);
}

#[test]
fn a_stopped_task_is_forgotten() {
    let mut core = caught_up_core(settings(), 2, Instant::now());
    core.observe(1, Changes::Named(&[tp(1)]));
    core.fetched((task(1), 0), true);
    core.processed(task(1), 3, true);
    core.task_stopped(task(1), &[tp(1)]);
    assert_eq!(core.ready().count(), 0);
    assert_eq!(core.busy().count(), 0);
    assert_eq!(core.dirty().count(), 0);
    core.observe(2, Changes::Named(&[tp(1)]));
    assert_eq!(core.ready().count(), 0, "its partition is nobody's now");
}

#[test]
fn processing_tracks_busy_and_dirty_tasks() {
    let mut core = caught_up_core(settings(), 3, Instant::now());
    core.observe(1, Changes::Named(&[tp(0), tp(2)]));
    core.fetched((task(0), 0), true);
    core.fetched((task(2), 0), true);
    assert_eq!(core.busy().collect::<Vec<_>>(), vec![task(0), task(2)]);
    core.processed(task(0), 1_000, true);
    core.processed(task(2), 10, false);
    assert_eq!(core.busy().collect::<Vec<_>>(), vec![task(0)]);
    assert_eq!(core.dirty().collect::<Vec<_>>(), vec![task(0), task(2)]);
}

#[test]
fn a_pass_stopped_by_full_caches_resumes_after_the_last_task_it_processed() {
    let mut core = caught_up_core(settings(), 5, Instant::now());
    let all: Vec<TopicPartition> = (0..5).map(tp).collect();
    core.observe(1, Changes::Named(&all));
    for p in 0..5 {
        core.fetched((task(p), 0), true);
    }
    assert_eq!(core.busy().collect::<Vec<_>>(), ids(&[0, 1, 2, 3, 4]));
    // Tasks 0 and 1 processed part of their records, then the caches were full.
    core.processed(task(0), 1_000, true);
    core.processed(task(1), 1_000, true);
    core.stopped_after(task(1));
    assert_eq!(
        core.busy().collect::<Vec<_>>(),
        ids(&[2, 3, 4, 0, 1]),
        "the tasks the pass did not reach go first"
    );
    // The next pass drains 2 and 3 and fills the caches again at 3.
    core.processed(task(2), 10, false);
    core.processed(task(3), 10, false);
    core.stopped_after(task(3));
    assert_eq!(core.busy().collect::<Vec<_>>(), ids(&[4, 0, 1]));
    // A resume point no longer busy still orders the rest after it.
    core.processed(task(4), 10, false);
    core.stopped_after(task(4));
    assert_eq!(core.busy().collect::<Vec<_>>(), ids(&[0, 1]));
}

// ---- commits ------------------------------------------------------------------------------

#[test]
fn commit_rules() {
    struct Row {
        what: &'static str,
        processed: bool,
        still_ready: bool,
        after: Duration,
        cache_bytes: usize,
        expect: Option<CommitReason>,
    }
    let rows = [
        Row {
            what: "nothing processed: never",
            processed: false,
            still_ready: false,
            after: 60_000 * MS,
            cache_bytes: 5_000,
            expect: None,
        },
        Row {
            what: "caught up, the last commit long ago: at once",
            processed: true,
            still_ready: false,
            after: CAUGHT_UP_COMMIT_SPACING,
            cache_bytes: 0,
            expect: Some(CommitReason::CaughtUp),
        },
        Row {
            what: "caught up within the spacing of the last commit: not yet",
            processed: true,
            still_ready: false,
            after: CAUGHT_UP_COMMIT_SPACING - MS,
            cache_bytes: 0,
            expect: None,
        },
        Row {
            what: "more to fetch, interval not passed: wait",
            processed: true,
            still_ready: true,
            after: 29_999 * MS,
            cache_bytes: 999,
            expect: None,
        },
        Row {
            what: "more to fetch, interval passed",
            processed: true,
            still_ready: true,
            after: 30_000 * MS,
            cache_bytes: 0,
            expect: Some(CommitReason::Interval),
        },
        Row {
            what: "more to fetch, caches full",
            processed: true,
            still_ready: true,
            after: MS,
            cache_bytes: 1_000,
            expect: Some(CommitReason::CacheFull),
        },
    ];
    for row in rows {
        let t0 = Instant::now();
        let mut core = caught_up_core(settings(), 2, t0);
        core.observe(1, Changes::Named(&[tp(0)]));
        core.fetched((task(0), 0), true);
        if row.processed {
            core.processed(task(0), 5, false);
        } else {
            core.processed(task(0), 0, false);
        }
        if !row.still_ready {
            core.fetched((task(0), 0), false);
        }
        assert_eq!(
            core.commit_due(t0 + row.after, row.cache_bytes),
            row.expect,
            "{}",
            row.what
        );
    }
}

#[test]
fn a_commit_clears_the_dirty_set_and_restarts_the_interval() {
    let t0 = Instant::now();
    let mut core = caught_up_core(settings(), 1, t0);
    core.observe(1, Changes::Named(&[tp(0)]));
    core.fetched((task(0), 0), true);
    core.processed(task(0), 1, false);
    core.committed(t0 + 10 * MS);
    assert_eq!(core.dirty().count(), 0);
    assert_eq!(core.commit_due(t0 + 60_000 * MS, 10_000), None);
}

// ---- heartbeats and cleanup ---------------------------------------------------------------

#[test]
fn heartbeat_timing() {
    let t0 = Instant::now();
    let mut core = LoopCore::new(settings(), t0);
    assert!(
        core.heartbeat_due(t0, 0),
        "the first heartbeat joins at once"
    );
    core.heartbeat_sent(t0, 0);
    assert!(!core.heartbeat_due(t0 + 4_999 * MS, 0));
    assert!(core.heartbeat_due(t0 + 4_999 * MS, 1), "the group moved");
    assert!(core.heartbeat_due(t0 + 5_000 * MS, 0));
    // The coordinator asks for 200 ms: from the next heartbeat on.
    core.set_heartbeat_interval(200 * MS);
    core.heartbeat_sent(t0 + 5_000 * MS, 1);
    assert!(!core.heartbeat_due(t0 + 5_199 * MS, 1));
    assert!(core.heartbeat_due(t0 + 5_200 * MS, 1));
    // It may never make heartbeats rarer than configured.
    core.set_heartbeat_interval(60_000 * MS);
    core.heartbeat_sent(t0 + 5_200 * MS, 1);
    assert!(core.heartbeat_due(t0 + 10_200 * MS, 1));
}

#[test]
fn cleanup_runs_every_interval_and_only_on_the_thread_that_owns_it() {
    let t0 = Instant::now();
    let mut core = LoopCore::new(settings(), t0);
    assert!(!core.cleanup_due(t0 + 599_999 * MS));
    assert!(core.cleanup_due(t0 + 600_000 * MS));
    assert!(!core.cleanup_due(t0 + 600_001 * MS), "rescheduled");
    assert!(core.cleanup_due(t0 + 1_200_000 * MS));
    let mut other = LoopCore::new(
        LoopSettings {
            cleanup_interval: None,
            ..settings()
        },
        t0,
    );
    assert!(!other.cleanup_due(t0 + 10_000_000 * MS));
}

// ---- waiting ------------------------------------------------------------------------------

#[test]
fn wait_deadlines() {
    let t0 = Instant::now();
    let now = t0 + 1_000 * MS;

    // Settled, clean: sleep to the next heartbeat (5 s after the last one).
    let core = caught_up_core(settings(), 5_000, t0);
    assert_eq!(
        core.wait(now, true),
        Some(Wait {
            until: t0 + 5_000 * MS,
            settled: true
        })
    );

    // Unsettled (restoring, or a task directory not free yet): look again soon.
    assert_eq!(
        core.wait(now, false).map(|w| w.until),
        Some(now + UNSETTLED_WAIT)
    );

    // Kafka Streams' loop: never longer than poll.
    let every_poll = caught_up_core(
        LoopSettings {
            idle_wakeup: IdleWakeup::EveryPoll,
            ..settings()
        },
        3,
        t0,
    );
    assert_eq!(
        every_poll.wait(now, true).map(|w| w.until),
        Some(now + 100 * MS)
    );

    // The cleanup deadline when it comes first.
    let cleanup_first = caught_up_core(
        LoopSettings {
            cleanup_interval: Some(2_000 * MS),
            ..settings()
        },
        1,
        t0,
    );
    assert_eq!(
        cleanup_first.wait(now, true).map(|w| w.until),
        Some(t0 + 2_000 * MS)
    );

    // Dirty state: woken for the caught-up commit, the spacing after the last one…
    let mut dirty = caught_up_core(settings(), 1, t0);
    dirty.observe(1, Changes::Named(&[tp(0)]));
    dirty.fetched((task(0), 0), true);
    dirty.processed(task(0), 1, false);
    dirty.fetched((task(0), 0), false);
    assert!(dirty.is_dirty());
    let soon = t0 + 10 * MS;
    assert_eq!(dirty.commit_due(soon, 0), None, "committed at t0: spaced");
    assert_eq!(
        dirty.wait(soon, true).map(|w| w.until),
        Some(t0 + CAUGHT_UP_COMMIT_SPACING)
    );
    // …or at the commit interval when that is shorter.
    let mut short = caught_up_core(
        LoopSettings {
            commit_interval: 20 * MS,
            ..settings()
        },
        1,
        t0,
    );
    short.observe(1, Changes::Named(&[tp(0)]));
    short.fetched((task(0), 0), true);
    short.processed(task(0), 1, false);
    short.fetched((task(0), 0), false);
    assert_eq!(short.wait(soon, true).map(|w| w.until), Some(t0 + 20 * MS));

    // Something to fetch or process: no wait.
    let mut busy = caught_up_core(settings(), 2, t0);
    busy.observe(1, Changes::Named(&[tp(1)]));
    assert_eq!(busy.wait(now, true), None);
    busy.fetched((task(1), 0), true);
    busy.fetched((task(1), 0), false);
    assert_eq!(busy.wait(now, true), None, "records buffered");

    // A deadline in the past: wait zero, not underflow.
    assert_eq!(
        core.wait(t0 + 9_000 * MS, true).map(|w| w.until),
        Some(t0 + 9_000 * MS)
    );
}

// ---- assignments --------------------------------------------------------------------------

fn set(ids: &[u32]) -> BTreeSet<TaskId> {
    ids.iter().map(|&p| task(p)).collect()
}

fn assignment(active: &[u32], standby: &[u32], warmup: &[u32]) -> Assignment {
    let mut a = Assignment::active(1, set(active));
    a.standby = Arc::new(set(standby));
    a.warmup = Arc::new(set(warmup));
    a
}

struct Owning {
    running: BTreeSet<TaskId>,
    restoring: BTreeSet<TaskId>,
    standby: BTreeSet<TaskId>,
    waiting: BTreeMap<TaskId, TaskKind>,
}

fn owning(running: &[u32], restoring: &[u32], standby: &[u32]) -> Owning {
    Owning {
        running: set(running),
        restoring: set(restoring),
        standby: set(standby),
        waiting: BTreeMap::new(),
    }
}

fn plan(owned: &Owning, to: &Assignment) -> AssignmentPlan {
    AssignmentPlan::compute(
        Owned {
            running: &owned.running,
            restoring: &owned.restoring,
            standby: &owned.standby,
            waiting: &owned.waiting,
        },
        to,
    )
}

fn ids(ps: &[u32]) -> Vec<TaskId> {
    ps.iter().map(|&p| task(p)).collect()
}

#[test]
fn a_first_assignment_starts_every_task() {
    let p = plan(&owning(&[], &[], &[]), &assignment(&[0, 1], &[2], &[3]));
    assert!(!p.commit_first);
    assert_eq!(
        p.start,
        [
            (task(0), TaskKind::Active),
            (task(1), TaskKind::Active),
            (task(2), TaskKind::Standby),
            (task(3), TaskKind::Standby),
        ]
        .into_iter()
        .collect()
    );
}

#[test]
fn revoking_a_running_task_commits_first() {
    let p = plan(&owning(&[0, 1], &[], &[]), &assignment(&[1], &[], &[]));
    assert!(p.commit_first);
    assert_eq!(p.revoke_running, ids(&[0]));
    assert!(p.start.is_empty(), "task 1 keeps running");
}

#[test]
fn revoking_a_task_while_it_restores_closes_it_without_a_commit() {
    let p = plan(&owning(&[1], &[0], &[]), &assignment(&[1], &[], &[]));
    assert!(!p.commit_first);
    assert_eq!(p.revoke_restoring, ids(&[0]));
    assert!(p.revoke_running.is_empty());
}

#[test]
fn a_standby_made_active_is_promoted_with_its_stores() {
    let p = plan(&owning(&[], &[], &[4]), &assignment(&[4], &[], &[]));
    assert_eq!(p.promote_standby, ids(&[4]));
    assert!(p.drop_standby.is_empty());
    assert!(p.start.is_empty(), "no fresh start: the stores are kept");
}

#[test]
fn an_active_task_made_standby_is_revoked_and_started_as_standby() {
    let p = plan(&owning(&[2], &[], &[]), &assignment(&[], &[2], &[]));
    assert_eq!(p.revoke_running, ids(&[2]));
    assert_eq!(p.start.get(&task(2)), Some(&TaskKind::Standby));
}

#[test]
fn a_standby_no_longer_assigned_is_dropped_and_a_kept_one_is_left_alone() {
    let p = plan(&owning(&[], &[], &[1, 2]), &assignment(&[], &[2], &[]));
    assert_eq!(p.drop_standby, ids(&[1]));
    assert!(p.start.is_empty());
}

#[test]
fn a_warmup_is_a_standby_and_a_task_both_active_and_standby_is_active() {
    let p = plan(&owning(&[], &[], &[]), &assignment(&[5], &[5], &[6]));
    assert_eq!(p.start.get(&task(5)), Some(&TaskKind::Active));
    assert_eq!(p.start.get(&task(6)), Some(&TaskKind::Standby));
}

#[test]
fn a_waiting_task_no_longer_assigned_stops_waiting() {
    let mut owned = owning(&[], &[], &[]);
    owned.waiting.insert(task(7), TaskKind::Active);
    owned.waiting.insert(task(8), TaskKind::Active);
    let p = plan(&owned, &assignment(&[8], &[], &[]));
    assert_eq!(p.stop_waiting, ids(&[7]));
    assert_eq!(
        p.start.get(&task(8)),
        Some(&TaskKind::Active),
        "still to start"
    );
}

#[test]
fn an_unchanged_assignment_plans_nothing() {
    let p = plan(&owning(&[0], &[1], &[2]), &assignment(&[0, 1], &[2], &[]));
    assert_eq!(p, AssignmentPlan::default());
}

// ---- punctuation and requested commits ------------------------------------------------------

#[test]
fn an_idle_thread_sleeps_only_to_the_next_wall_clock_punctuation() {
    let t0 = Instant::now();
    let mut core = caught_up_core(settings(), 3, t0);
    assert_eq!(
        core.wait(t0, true).map(|w| w.until),
        Some(t0 + 5_000 * MS),
        "the heartbeat"
    );
    core.set_punctuation_deadline(task(1), Some(t0 + 700 * MS));
    core.set_punctuation_deadline(task(2), Some(t0 + 300 * MS));
    assert_eq!(core.wait(t0, true).map(|w| w.until), Some(t0 + 300 * MS));
    assert_eq!(core.punctuation_due(t0 + 299 * MS).count(), 0);
    assert_eq!(
        core.punctuation_due(t0 + 700 * MS).collect::<Vec<_>>(),
        [task(2), task(1)],
        "due tasks, earliest first"
    );
    // Task 2 punctuated and moved its deadline on; task 1 stopped.
    core.set_punctuation_deadline(task(2), Some(t0 + 1_300 * MS));
    core.punctuated(task(2));
    core.task_stopped(task(1), &[tp(1)]);
    assert_eq!(
        core.punctuation_due(t0 + 1_000 * MS).count(),
        0,
        "a stopped task's deadline is forgotten"
    );
    assert!(core.is_dirty(), "a punctuation's output waits for a commit");
    core.committed(t0 + 1_000 * MS);
    core.set_punctuation_deadline(task(2), None);
    assert_eq!(
        core.wait(t0 + 1_000 * MS, true).map(|w| w.until),
        Some(t0 + 5_000 * MS)
    );
}

#[test]
fn a_requested_commit_is_due_at_once_even_while_busy_and_inside_the_interval() {
    let t0 = Instant::now();
    let mut core = caught_up_core(settings(), 1, t0);
    core.observe(1, Changes::Named(&[tp(0)]));
    core.fetched((task(0), 0), true);
    core.processed(task(0), 10, true);
    assert_eq!(
        core.commit_due(t0 + MS, 0),
        None,
        "busy, inside the interval"
    );
    core.request_commit();
    assert_eq!(core.commit_due(t0 + MS, 0), Some(CommitReason::Requested));
    core.committed(t0 + 2 * MS);
    core.processed(task(0), 1, true);
    assert_eq!(
        core.commit_due(t0 + 3 * MS, 0),
        None,
        "a commit answers the request"
    );
}
