//! The assignor: one test per rule, and a proptest that checks random groups (members,
//! processes, previous targets valid or not, departed members, offset and end sums) against a
//! checker that recomputes what each rule implies on its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;

fn t(subtopology: u32, partition: u32) -> TaskId {
    TaskId {
        subtopology,
        partition,
    }
}

fn p(partition: u32) -> TaskId {
    t(0, partition)
}

fn set(tasks: &[TaskId]) -> BTreeSet<TaskId> {
    tasks.iter().copied().collect()
}

fn active(tasks: &[TaskId]) -> TaskSets {
    TaskSets {
        active: set(tasks),
        ..TaskSets::default()
    }
}

/// An assignor input, owned.
#[derive(Clone, Debug, Default)]
struct Case {
    tasks: BTreeSet<TaskId>,
    stateful: BTreeSet<TaskId>,
    /// (member id, process id, previous target)
    members: Vec<(String, String, TaskSets)>,
    departed: Vec<(String, String, TaskSets)>,
    offset_sums: BTreeMap<String, HashMap<TaskId, i64>>,
    end_sums: HashMap<TaskId, i64>,
    standbys: u32,
    acceptable_lag: u64,
    warmups: u32,
}

impl Case {
    /// `tasks`, all stateful.
    fn stateful(tasks: impl IntoIterator<Item = TaskId>) -> Self {
        let tasks: BTreeSet<TaskId> = tasks.into_iter().collect();
        Case {
            stateful: tasks.clone(),
            tasks,
            ..Case::default()
        }
    }

    fn member(mut self, id: &str, process: &str, previous: TaskSets) -> Self {
        self.members
            .push((id.to_owned(), process.to_owned(), previous));
        self
    }

    fn departed(mut self, id: &str, process: &str, previous: TaskSets) -> Self {
        self.departed
            .push((id.to_owned(), process.to_owned(), previous));
        self
    }

    fn sum(mut self, process: &str, task: TaskId, sum: i64) -> Self {
        self.offset_sums
            .entry(process.to_owned())
            .or_default()
            .insert(task, sum);
        self
    }

    fn end(mut self, task: TaskId, sum: i64) -> Self {
        self.end_sums.insert(task, sum);
        self
    }

    fn run(&self) -> BTreeMap<String, TaskSets> {
        self.run_reordered(false)
    }

    /// Runs the assignor, with the members (and departed members) given in reverse order if
    /// `reverse`.
    fn run_reordered(&self, reverse: bool) -> BTreeMap<String, TaskSets> {
        fn view(list: &[(String, String, TaskSets)], reverse: bool) -> Vec<AssignorMember<'_>> {
            let mut v: Vec<AssignorMember<'_>> = list
                .iter()
                .map(|(id, process, previous)| AssignorMember {
                    id,
                    process,
                    previous,
                })
                .collect();
            if reverse {
                v.reverse();
            }
            v
        }
        let members = view(&self.members, reverse);
        let departed = view(&self.departed, reverse);
        assign(&AssignorInput {
            tasks: &self.tasks,
            stateful: &self.stateful,
            members: &members,
            departed: &departed,
            offset_sums: &self.offset_sums,
            end_sums: &self.end_sums,
            num_standby_replicas: self.standbys,
            acceptable_recovery_lag: self.acceptable_lag,
            max_warmup_replicas: self.warmups,
        })
    }

    /// The same group one rebalance later: every member's previous target is `out`'s.
    fn next(&self, out: &BTreeMap<String, TaskSets>) -> Case {
        let mut next = self.clone();
        for (id, _, previous) in &mut next.members {
            *previous = out[id.as_str()].clone();
        }
        next
    }
}

fn checked(case: &Case) -> BTreeMap<String, TaskSets> {
    let out = case.run();
    if let Err(e) = check(case, &out) {
        panic!("{e}\ncase: {case:#?}\nout: {out:#?}");
    }
    out
}

#[test]
fn no_members_get_no_targets_and_no_tasks_give_empty_targets() {
    assert!(Case::stateful([p(0)]).run().is_empty());
    let out = checked(&Case::stateful([]).member("a", "x", TaskSets::default()));
    assert_eq!(out["a"], TaskSets::default());
}

#[test]
fn a_joining_member_takes_only_what_the_others_have_over_the_balance() {
    let case = Case::stateful((0..7).map(p))
        .member("a", "x", active(&[p(0), p(1), p(2), p(3)]))
        .member("b", "y", active(&[p(4), p(5), p(6)]))
        .member("c", "z", TaskSets::default());
    let out = checked(&case);
    // 7 tasks over 3 members: 3, 2, 2. "a" keeps 3 of its 4, "b" 2 of its 3.
    assert_eq!(out["a"].active, set(&[p(0), p(1), p(2)]));
    assert_eq!(out["b"].active, set(&[p(4), p(5)]));
    assert_eq!(out["c"].active, set(&[p(3), p(6)]));
    // Once balanced, nothing moves.
    assert_eq!(checked(&case.next(&out)), out);
}

#[test]
fn stateful_tasks_are_kept_before_stateless_ones() {
    let mut case = Case::stateful((0..4).map(p))
        .member("a", "x", active(&[p(0), p(1), p(2), p(3)]))
        .member("b", "y", TaskSets::default());
    case.stateful = set(&[p(2), p(3)]);
    let out = checked(&case);
    assert_eq!(out["a"].active, set(&[p(2), p(3)]));
}

#[test]
fn a_restarted_process_gets_its_tasks_back_through_its_process_id() {
    // "a1" of process "x" is gone; "a2" is the same instance, restarted. Process "z" is
    // further ahead on 0_0 and 0_1 (it kept up-to-date copies), but the same process wins.
    let case = Case::stateful((0..4).map(p))
        .member("a2", "x", TaskSets::default())
        .member("b", "y", active(&[p(2)]))
        .member("c", "z", active(&[p(3)]))
        .departed("a1", "x", active(&[p(0), p(1)]))
        .sum("x", p(0), 50)
        .sum("x", p(1), 50)
        .sum("z", p(0), 100)
        .sum("z", p(1), 100)
        .end(p(0), 100)
        .end(p(1), 100);
    let out = checked(&case);
    assert_eq!(out["a2"].active, set(&[p(0), p(1)]));
    // Without knowing where "a1" ran, state decides: "z" is caught up on both.
    let mut unknown = case.clone();
    unknown.departed.clear();
    let out = checked(&unknown);
    assert!(out["c"].active.contains(&p(0)));
}

#[test]
fn a_stateful_task_goes_to_the_most_caught_up_process() {
    let case = Case::stateful([p(0)])
        .member("a", "x", TaskSets::default())
        .member("b", "y", TaskSets::default())
        .member("c", "z", TaskSets::default())
        .sum("x", p(0), 50)
        .sum("y", p(0), 95)
        .end(p(0), 100);
    assert_eq!(checked(&case)["b"].active, set(&[p(0)]));
    // A process that reported nothing is behind any that did, however far behind.
    let case = Case::stateful([p(0)])
        .member("a", "x", TaskSets::default())
        .member("b", "y", TaskSets::default())
        .sum("y", p(0), 0)
        .end(p(0), 1_000_000);
    assert_eq!(checked(&case)["b"].active, set(&[p(0)]));
    // Without an end sum, the largest sum reported is the end.
    let case = Case::stateful([p(0)])
        .member("a", "x", TaskSets::default())
        .member("b", "y", TaskSets::default())
        .sum("x", p(0), 7)
        .sum("y", p(0), 9);
    assert_eq!(checked(&case)["b"].active, set(&[p(0)]));
    // Stateless tasks ignore state: least loaded, then member id.
    let mut stateless = case.clone();
    stateless.stateful.clear();
    assert_eq!(checked(&stateless)["a"].active, set(&[p(0)]));
}

#[test]
fn a_move_to_a_lagging_process_warms_up_first_and_promotes_once_caught_up() {
    let mut case = Case::stateful([p(0), p(1)])
        .member("a", "x", active(&[p(0), p(1)]))
        .member("b", "y", TaskSets::default())
        .sum("y", p(1), 0)
        .end(p(1), 1_000);
    case.acceptable_lag = 100;
    case.warmups = 2;
    let out = checked(&case);
    assert_eq!(out["a"].active, set(&[p(0), p(1)]));
    assert_eq!(out["b"].warmup, set(&[p(1)]));
    assert!(out["b"].active.is_empty());

    // Still behind: nothing changes.
    let mut next = case.next(&out);
    next.offset_sums
        .insert("y".into(), HashMap::from([(p(1), 800)]));
    assert_eq!(checked(&next), out);

    // Caught up: the warm-up becomes the active, and the old active lets go.
    next.offset_sums
        .insert("y".into(), HashMap::from([(p(1), 950)]));
    let promoted = checked(&next);
    assert_eq!(promoted["a"], active(&[p(0)]));
    assert_eq!(promoted["b"], active(&[p(1)]));
}

#[test]
fn a_move_within_the_acceptable_lag_or_within_a_process_happens_at_once() {
    let mut case = Case::stateful([p(0), p(1)])
        .member("a", "x", active(&[p(0), p(1)]))
        .member("b", "y", TaskSets::default())
        .sum("y", p(1), 900)
        .end(p(1), 1_000);
    case.acceptable_lag = 100;
    case.warmups = 2;
    let out = checked(&case);
    assert_eq!(out["b"], active(&[p(1)]));

    // Another thread of the same process shares the state directory.
    let mut case = Case::stateful([p(0), p(1)])
        .member("a", "x", active(&[p(0), p(1)]))
        .member("b", "x", TaskSets::default());
    case.warmups = 2;
    assert_eq!(checked(&case)["b"], active(&[p(1)]));
}

#[test]
fn beyond_the_warmup_limit_tasks_move_at_once() {
    let mut case = Case::stateful((0..4).map(p))
        .member("a", "x", active(&[p(0), p(1), p(2), p(3)]))
        .member("b", "y", TaskSets::default());
    case.warmups = 1;
    let out = checked(&case);
    assert_eq!(out["a"].active, set(&[p(0), p(1), p(2)]));
    assert_eq!(out["b"].active, set(&[p(3)]));
    assert_eq!(out["b"].warmup, set(&[p(2)]));

    case.warmups = 0;
    let out = checked(&case);
    assert_eq!(out["b"], active(&[p(2), p(3)]));
}

#[test]
fn existing_warmups_keep_their_place_under_the_limit() {
    // 0_3 is warming up on "b"; a new member "c" takes 0_0 and 0_1 from "a", which would get
    // the only warm-up by task order, but 0_3's warm-up goes on.
    let mut case = Case::stateful((0..4).map(p))
        .member("a", "x", active(&[p(0), p(1), p(2), p(3)]))
        .member(
            "b",
            "y",
            TaskSets {
                warmup: set(&[p(3)]),
                ..TaskSets::default()
            },
        )
        .member("c", "z", TaskSets::default());
    case.warmups = 1;
    let out = checked(&case);
    assert_eq!(out["b"].warmup, set(&[p(3)]));
    assert!(out["c"].warmup.is_empty());
    assert!(out["a"].active.contains(&p(3)));
}

#[test]
fn standbys_go_to_distinct_processes_other_than_the_actives() {
    let mut case = Case::stateful([p(0), p(1)])
        .member("a1", "x", TaskSets::default())
        .member("a2", "x", TaskSets::default())
        .member("b1", "y", TaskSets::default())
        .member("b2", "y", TaskSets::default())
        .member("c", "z", TaskSets::default());
    case.standbys = 2;
    let out = checked(&case);
    for task in [p(0), p(1)] {
        let holders: Vec<&str> = out
            .iter()
            .filter(|(_, s)| s.standby.contains(&task))
            .map(|(m, _)| m.as_str())
            .collect();
        assert_eq!(holders.len(), 2, "{task:?}: {holders:?}");
    }
    // More wanted than there are other processes: one per other process.
    case.standbys = 5;
    let out = checked(&case);
    assert_eq!(out.values().map(|s| s.standby.len()).sum::<usize>(), 4);
}

#[test]
fn one_process_gets_no_standbys() {
    let mut case = Case::stateful([p(0), p(1)])
        .member("a", "x", TaskSets::default())
        .member("b", "x", TaskSets::default());
    case.standbys = 1;
    let out = checked(&case);
    assert!(out.values().all(|s| s.standby.is_empty()));
}

#[test]
fn standbys_stay_where_they_were_and_else_go_where_the_state_is() {
    let mut case = Case::stateful([p(0)])
        .member("a", "x", active(&[p(0)]))
        .member(
            "b",
            "y",
            TaskSets {
                standby: set(&[p(0)]),
                ..TaskSets::default()
            },
        )
        .member("c", "z", TaskSets::default())
        .sum("y", p(0), 10)
        .sum("z", p(0), 100)
        .end(p(0), 100);
    case.standbys = 1;
    assert_eq!(checked(&case)["b"].standby, set(&[p(0)]));
    // Without a previous standby, the caught-up process gets it.
    case.members[1].2 = TaskSets::default();
    assert_eq!(checked(&case)["c"].standby, set(&[p(0)]));
    // A departed standby's process still counts as holding it.
    let case = case.departed(
        "b0",
        "y",
        TaskSets {
            standby: set(&[p(0)]),
            ..TaskSets::default()
        },
    );
    assert_eq!(checked(&case)["b"].standby, set(&[p(0)]));
}

#[test]
fn stateless_tasks_get_no_standbys_and_no_warmups() {
    let mut case = Case::stateful([p(0), p(1)])
        .member("a", "x", active(&[p(0), p(1)]))
        .member("b", "y", TaskSets::default());
    case.stateful.clear();
    case.standbys = 1;
    case.warmups = 2;
    let out = checked(&case);
    assert_eq!(out["a"], active(&[p(0)]));
    assert_eq!(out["b"], active(&[p(1)]));
}

#[test]
fn the_output_depends_on_the_input_not_its_order() {
    let mut case = Case::stateful((0..9).map(p))
        .member("c", "z", active(&[p(0), p(1), p(2), p(3)]))
        .member("a", "x", active(&[p(3), p(4)]))
        .member("b", "y", TaskSets::default())
        .member("d", "y", TaskSets::default())
        .sum("y", p(0), 3)
        .sum("x", p(1), 3);
    case.standbys = 1;
    case.warmups = 1;
    assert_eq!(case.run(), case.run_reordered(true));
}

// ---- The proptest ----

const MAX_TASKS: usize = 40;
const MAX_MEMBERS: usize = 8;
const MAX_DEPARTED: usize = 3;
const PROCESSES: usize = 5;

/// Random material for one group; `build` turns it into a `Case`.
#[derive(Clone, Debug)]
struct Raw {
    partitions: Vec<u32>,
    stateful: Vec<bool>,
    member_processes: Vec<usize>,
    departed_processes: Vec<usize>,
    /// Per (holder, task), modulo `density`: the roles it held (see `build`).
    roles: Vec<u8>,
    density: u8,
    /// A valid, balanced previous target instead of `roles`' actives and warm-ups, over all
    /// members but the last `joiners`.
    valid: bool,
    joiners: usize,
    deal_order: Vec<u32>,
    deal_offset: usize,
    warm: Vec<bool>,
    sums: Vec<Option<i64>>,
    ends: Vec<Option<i64>>,
    standbys: u32,
    acceptable_lag: u64,
    warmups: u32,
}

fn raw() -> impl Strategy<Value = Raw> {
    let holders = MAX_MEMBERS + MAX_DEPARTED;
    (
        (
            prop::collection::vec(1u32..=16, 1..=3),
            prop::collection::vec(any::<bool>(), MAX_TASKS),
            prop::collection::vec(0..PROCESSES, 1..=MAX_MEMBERS),
            prop::collection::vec(0..PROCESSES, 0..=MAX_DEPARTED),
            prop::collection::vec(any::<u8>(), holders * MAX_TASKS),
            6u8..=48,
        ),
        (
            any::<bool>(),
            prop_oneof![Just(0usize), 1usize..=2],
            prop::collection::vec(any::<u32>(), MAX_TASKS),
            0..MAX_MEMBERS,
            prop::collection::vec(prop::bool::weighted(0.4), MAX_TASKS),
        ),
        (
            prop::collection::vec(
                prop::option::weighted(0.5, 0i64..=100),
                PROCESSES * MAX_TASKS,
            ),
            prop::collection::vec(prop::option::weighted(0.8, 0i64..=120), MAX_TASKS),
            0u32..=2,
            prop_oneof![Just(0u64), 0u64..=60],
            0u32..=3,
        ),
    )
        .prop_map(
            |(
                (partitions, stateful, member_processes, departed_processes, roles, density),
                (valid, joiners, deal_order, deal_offset, warm),
                (sums, ends, standbys, acceptable_lag, warmups),
            )| Raw {
                partitions,
                stateful,
                member_processes,
                departed_processes,
                roles,
                density,
                valid,
                joiners,
                deal_order,
                deal_offset,
                warm,
                sums,
                ends,
                standbys,
                acceptable_lag,
                warmups,
            },
        )
}

fn build(raw: &Raw) -> Case {
    let tasks: Vec<TaskId> = raw
        .partitions
        .iter()
        .enumerate()
        .flat_map(|(s, &n)| (0..n).map(move |q| t(s as u32, q)))
        .take(MAX_TASKS)
        .collect();
    let process = |i: usize| format!("p{i}");
    let mut case = Case {
        tasks: tasks.iter().copied().collect(),
        stateful: tasks
            .iter()
            .zip(&raw.stateful)
            .filter(|(_, s)| **s)
            .map(|(t, _)| *t)
            .collect(),
        standbys: raw.standbys,
        acceptable_lag: raw.acceptable_lag,
        warmups: raw.warmups,
        ..Case::default()
    };
    // Bits: 1 active, 2 standby, 4 warm-up; some combinations are invalid on purpose.
    let roles = |holder: usize, ti: usize| match raw.roles[holder * MAX_TASKS + ti] % raw.density {
        0 | 1 => 1,
        2 => 2,
        3 => 4,
        4 => 1 | 2,
        5 => 2 | 4,
        _ => 0,
    };
    let random_sets = |holder: usize, with_active: bool| {
        let mut sets = TaskSets::default();
        for (ti, &task) in tasks.iter().enumerate() {
            let r = roles(holder, ti);
            if with_active && r & 1 != 0 {
                sets.active.insert(task);
            }
            if r & 2 != 0 {
                sets.standby.insert(task);
            }
            if with_active && r & 4 != 0 {
                sets.warmup.insert(task);
            }
        }
        sets
    };
    for (i, &pr) in raw.member_processes.iter().enumerate() {
        case.members
            .push((format!("m{i}"), process(pr), random_sets(i, !raw.valid)));
    }
    for (i, &pr) in raw.departed_processes.iter().enumerate() {
        case.departed.push((
            format!("d{i}"),
            process(pr),
            random_sets(MAX_MEMBERS + i, true),
        ));
    }
    if raw.valid {
        // Deal the tasks round robin in a random order: a balanced planned assignment. Some
        // stateful tasks stay active elsewhere (on another process) while their planned owner
        // warms them up.
        let m = case.members.len().saturating_sub(raw.joiners).max(1);
        let mut order: Vec<usize> = (0..tasks.len()).collect();
        order.sort_by_key(|&ti| (raw.deal_order[ti], ti));
        for (i, ti) in order.into_iter().enumerate() {
            let task = tasks[ti];
            let owner = (raw.deal_offset + i) % m;
            let elsewhere = (1..m)
                .map(|k| (owner + k) % m)
                .find(|&o| case.members[o].1 != case.members[owner].1);
            match elsewhere {
                Some(a) if raw.warm[ti] && case.stateful.contains(&task) => {
                    case.members[a].2.active.insert(task);
                    case.members[owner].2.warmup.insert(task);
                }
                _ => {
                    case.members[owner].2.active.insert(task);
                }
            }
        }
    }
    for pr in 0..PROCESSES {
        let sums: HashMap<TaskId, i64> = tasks
            .iter()
            .enumerate()
            .filter_map(|(ti, &task)| raw.sums[pr * MAX_TASKS + ti].map(|s| (task, s)))
            .collect();
        if !sums.is_empty() {
            case.offset_sums.insert(process(pr), sums);
        }
    }
    case.end_sums = tasks
        .iter()
        .enumerate()
        .filter_map(|(ti, &task)| raw.ends[ti].map(|e| (task, e)))
        .collect();
    case
}

/// A lag as the rules define it, recomputed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ModelLag {
    Known(u64),
    Unknown,
}

/// The rules' definitions, recomputed by brute force from a `Case`.
struct Model<'c> {
    case: &'c Case,
    /// Present members: id → (process, previous).
    members: BTreeMap<&'c str, (&'c str, &'c TaskSets)>,
    processes: BTreeSet<&'c str>,
}

impl<'c> Model<'c> {
    fn new(case: &'c Case) -> Self {
        let mut members = BTreeMap::new();
        for (id, process, previous) in &case.members {
            members
                .entry(id.as_str())
                .or_insert((process.as_str(), previous));
        }
        let processes = members.values().map(|(p, _)| *p).collect();
        Model {
            case,
            members,
            processes,
        }
    }

    fn process(&self, member: &str) -> &'c str {
        self.members[member].0
    }

    fn stateful(&self, task: TaskId) -> bool {
        self.case.stateful.contains(&task)
    }

    fn previous_active(&self, task: TaskId) -> Option<&'c str> {
        self.members
            .iter()
            .find(|(_, (_, prev))| prev.active.contains(&task))
            .map(|(id, _)| *id)
    }

    fn previous_warmup(&self, task: TaskId) -> Option<&'c str> {
        if !self.stateful(task) {
            return None;
        }
        self.members
            .iter()
            .find(|(_, (_, prev))| prev.warmup.contains(&task) && !prev.active.contains(&task))
            .map(|(id, _)| *id)
    }

    fn previous_planned(&self, task: TaskId) -> Option<&'c str> {
        self.previous_warmup(task)
            .or_else(|| self.previous_active(task))
    }

    fn previous_active_process(&self, task: TaskId) -> Option<&'c str> {
        if let Some(a) = self.previous_active(task) {
            return Some(self.process(a));
        }
        let mut departed: Vec<_> = self
            .case
            .departed
            .iter()
            .filter(|(id, _, _)| !self.members.contains_key(id.as_str()))
            .collect();
        departed.sort_by(|x, y| x.0.cmp(&y.0));
        departed
            .into_iter()
            .find(|(_, p, prev)| prev.active.contains(&task) && self.processes.contains(p.as_str()))
            .map(|(_, p, _)| p.as_str())
    }

    fn lag(&self, task: TaskId, process: &str) -> ModelLag {
        if !self.stateful(task) {
            return ModelLag::Known(0);
        }
        if self
            .previous_active(task)
            .is_some_and(|a| self.process(a) == process)
        {
            return ModelLag::Known(0);
        }
        let reported = |p: &str| {
            self.case
                .offset_sums
                .get(p)
                .and_then(|s| s.get(&task))
                .copied()
        };
        let Some(sum) = reported(process) else {
            return ModelLag::Unknown;
        };
        let end = self.case.end_sums.get(&task).copied().unwrap_or_else(|| {
            self.processes
                .iter()
                .filter_map(|p| reported(p))
                .max()
                .expect("this process reported one")
        });
        ModelLag::Known(if end > sum { (end - sum) as u64 } else { 0 })
    }

    fn caught_up(&self, task: TaskId, process: &str) -> bool {
        matches!(self.lag(task, process), ModelLag::Known(l) if l <= self.case.acceptable_lag)
    }

    /// 0: `member` held `task` as a standby; 1: its process did (through any member); 2: else.
    fn standby_tier(&self, task: TaskId, member: &str) -> u8 {
        if self.members[member].1.standby.contains(&task) {
            return 0;
        }
        let process = self.process(member);
        let present = self
            .members
            .values()
            .any(|(p, prev)| *p == process && prev.standby.contains(&task));
        let departed = self.case.departed.iter().any(|(id, p, prev)| {
            !self.members.contains_key(id.as_str()) && p == process && prev.standby.contains(&task)
        });
        if present || departed { 1 } else { 2 }
    }
}

/// Every rule's consequence on `out`, checked against the model.
fn check(case: &Case, out: &BTreeMap<String, TaskSets>) -> Result<(), TestCaseError> {
    let model = Model::new(case);
    prop_assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        model.members.keys().copied().collect::<Vec<_>>(),
        "one target per member"
    );
    if model.members.is_empty() {
        return Ok(());
    }
    let proc = |m: &str| model.process(m);

    // Rule 1: one active per task, one role per process and task.
    let mut actives: BTreeMap<TaskId, Vec<&str>> = BTreeMap::new();
    let mut warmups: BTreeMap<TaskId, Vec<&str>> = BTreeMap::new();
    let mut standbys: BTreeMap<TaskId, Vec<&str>> = BTreeMap::new();
    let mut holders: BTreeMap<(TaskId, &str), usize> = BTreeMap::new();
    for (m, sets) in out {
        for (tasks, by_task) in [
            (&sets.active, &mut actives),
            (&sets.warmup, &mut warmups),
            (&sets.standby, &mut standbys),
        ] {
            for &task in tasks {
                prop_assert!(case.tasks.contains(&task), "unknown task {:?}", task);
                by_task.entry(task).or_default().push(m);
                *holders.entry((task, proc(m))).or_default() += 1;
            }
        }
    }
    for &task in &case.tasks {
        prop_assert_eq!(
            actives.get(&task).map_or(0, Vec::len),
            1,
            "{:?} active once",
            task
        );
    }
    for ((task, process), n) in &holders {
        prop_assert_eq!(*n, 1, "{:?} held {} times in process {}", task, n, process);
    }
    for task in warmups.keys().chain(standbys.keys()) {
        prop_assert!(
            model.stateful(*task),
            "standby or warm-up of stateless {:?}",
            task
        );
    }
    let active_of = |task: TaskId| actives[&task][0];
    let warmup_of = |task: TaskId| warmups.get(&task).map(|w| w[0]);
    for (task, w) in &warmups {
        prop_assert_eq!(w.len(), 1, "{:?}: one warm-up", task);
    }
    // A task's planned owner: its warm-up member, else its active one.
    let planned_of = |task: TaskId| warmup_of(task).unwrap_or_else(|| active_of(task));

    // Rule 6: exactly min(wanted, other processes) standbys.
    for &task in &case.stateful {
        let mut taken: BTreeSet<&str> = [proc(active_of(task))].into();
        taken.extend(warmup_of(task).map(proc));
        let others = model.processes.len() - taken.len();
        let expected = (case.standbys as usize).min(others);
        prop_assert_eq!(
            standbys.get(&task).map_or(0, Vec::len),
            expected,
            "{:?}: standby count",
            task
        );
    }

    // Rule 2: planned counts within one of each other.
    let t_count = case.tasks.len();
    let m_count = model.members.len();
    let mut planned: BTreeMap<&str, Vec<TaskId>> =
        model.members.keys().map(|m| (*m, Vec::new())).collect();
    for &task in &case.tasks {
        planned.entry(planned_of(task)).or_default().push(task);
    }
    for (m, tasks) in &planned {
        let n = tasks.len();
        prop_assert!(
            n == t_count / m_count || n == t_count.div_ceil(m_count),
            "{} plans {} of {} tasks over {} members",
            m,
            n,
            t_count,
            m_count
        );
    }

    // Rule 5: warm-ups only where a caught-up active stays and the planned owner lags; a move
    // to a lagging process without one only when the limit is reached.
    prop_assert!(warmups.len() <= case.warmups as usize, "warm-up limit");
    for &task in &case.tasks {
        let n = planned_of(task);
        let a = active_of(task);
        if let Some(w) = warmup_of(task) {
            prop_assert_eq!(Some(a), model.previous_active(task), "{:?}", task);
            prop_assert!(proc(w) != proc(a));
            prop_assert!(
                !model.caught_up(task, proc(w)),
                "{:?}: warm-up caught up",
                task
            );
        } else if model.stateful(task)
            && let Some(prev) = model.previous_active(task)
            && prev != n
            && proc(prev) != proc(n)
            && !model.caught_up(task, proc(n))
        {
            prop_assert_eq!(
                warmups.len(),
                case.warmups as usize,
                "{:?} moved to a lagging process without a warm-up",
                task
            );
            // Warm-ups that go on come first.
            if model.previous_warmup(task) == Some(n) {
                for (other, w) in &warmups {
                    prop_assert_eq!(
                        model.previous_warmup(*other),
                        Some(w[0]),
                        "{:?} warms up on {} while {:?}'s warm-up on {} ended",
                        other,
                        w[0],
                        task,
                        n
                    );
                }
            }
        }
    }

    // Rule 3: a member keeps all its previous planned tasks, or keeps only such tasks and
    // then the first of them, stateful ones first.
    let order = |task: &TaskId| (!model.stateful(*task), *task);
    for (m, tasks) in &planned {
        let mut previous: Vec<TaskId> = case
            .tasks
            .iter()
            .copied()
            .filter(|&task| model.previous_planned(task) == Some(*m))
            .collect();
        previous.sort_by_key(order);
        let kept = previous.iter().filter(|t| tasks.contains(t)).count();
        if kept < previous.len() {
            prop_assert_eq!(kept, tasks.len(), "{} dropped some and took others", m);
            prop_assert!(
                previous[..kept].iter().all(|t| tasks.contains(t)),
                "{} kept {:?} of {:?}",
                m,
                tasks,
                previous
            );
        }
    }

    // Rule 4: a task placed anew (its planned owner is not its previous one) went to a member
    // at least as good, by (same process as its previous active, lag), as every member that
    // had room then. Room only shrinks, so the members that got a task placed after it had
    // room then.
    let mut placed: Vec<(TaskId, &str)> = case
        .tasks
        .iter()
        .map(|&task| (task, planned_of(task)))
        .filter(|&(task, n)| model.previous_planned(task) != Some(n))
        .collect();
    placed.sort_by_key(|(task, _)| order(task));
    let rank = |task: TaskId, m: &str| {
        (
            model.previous_active_process(task) != Some(proc(m)),
            model.lag(task, proc(m)),
        )
    };
    for (i, &(task, n)) in placed.iter().enumerate() {
        for &(_, later) in &placed[i + 1..] {
            prop_assert!(
                rank(task, n) <= rank(task, later),
                "{:?} went to {} ({:?}) while {} ({:?}) had room",
                task,
                n,
                rank(task, n),
                later,
                rank(task, later)
            );
        }
    }

    // Rule 6: the standbys chosen are at least as good, by (previous standby tier, lag), as
    // every process left out; and each is its process's best member by tier.
    for &task in &case.stateful {
        let chosen = standbys.get(&task).cloned().unwrap_or_default();
        let mut taken: BTreeSet<&str> = [proc(active_of(task))].into();
        taken.extend(warmup_of(task).map(proc));
        taken.extend(chosen.iter().map(|m| proc(m)));
        let process_tier = |process: &str| {
            model
                .members
                .iter()
                .filter(|(_, (p, _))| *p == process)
                .map(|(m, _)| model.standby_tier(task, m))
                .min()
                .expect("a process has members")
        };
        for &s in &chosen {
            let tier = model.standby_tier(task, s);
            prop_assert_eq!(
                tier,
                process_tier(proc(s)),
                "{:?}: {} not its process's best",
                task,
                s
            );
            for &q in model.processes.iter().filter(|q| !taken.contains(*q)) {
                prop_assert!(
                    (tier, model.lag(task, proc(s))) <= (process_tier(q), model.lag(task, q)),
                    "{:?}: standby on {} while {} was left out",
                    task,
                    s,
                    q
                );
            }
        }
    }
    Ok(())
}

/// Whether a valid, balanced previous target over the present members (as `build` deals it)
/// must come out unchanged: its warm-ups fit the limit and none of them is caught up.
fn must_stay(case: &Case) -> bool {
    let model = Model::new(case);
    let warmups: Vec<(TaskId, &str)> = model
        .members
        .iter()
        .flat_map(|(m, (_, prev))| prev.warmup.iter().map(move |t| (*t, *m)))
        .collect();
    warmups.len() <= case.warmups as usize
        && warmups
            .iter()
            .all(|&(task, w)| !model.caught_up(task, model.process(w)))
}

proptest! {
    #[test]
    fn assignments_obey_the_rules(raw in raw()) {
        let case = build(&raw);
        let out = case.run();
        check(&case, &out)?;
        prop_assert_eq!(&case.run_reordered(true), &out, "input order matters");
        if raw.valid && raw.joiners == 0 && must_stay(&case) {
            for (id, _, previous) in &case.members {
                prop_assert_eq!(&out[id.as_str()].active, &previous.active, "{} moved", id);
                prop_assert_eq!(&out[id.as_str()].warmup, &previous.warmup, "{} moved", id);
            }
        }
        // One rebalance later, with nothing else changed, nothing moves: the output is a
        // fixed point.
        let next = case.next(&out);
        prop_assert_eq!(&next.run(), &out, "not a fixed point");
    }
}
