//! The task assignor: computes a group's target assignment from its members, their previous
//! targets and the state their processes reported. Pure: no I/O, no clock, no randomness; the
//! same input always gives the same output.
//!
//! A group's members are stream threads; a **process** (one instance, one state directory)
//! holds one or more of them. The rules follow Kafka Streams' streams-group sticky assignor and
//! its high-availability assignor, simplified:
//!
//! 1. **Every task is active on exactly one member** (when there is a member). No process holds
//!    a task in two roles (active, standby, warm-up): its members share one state directory.
//! 2. **Balance.** A member's *planned* count is its active tasks plus its warm-ups, minus the
//!    active tasks it keeps only because another member warms them up (rule 5). With `T` tasks
//!    and `M` members, every planned count is ⌊T/M⌋ or ⌈T/M⌉.
//! 3. **Sticky.** A task's *previous planned owner* is the member that held it as a warm-up in
//!    its previous target (stateful tasks only), else the member that held it active. Each
//!    member first keeps up to ⌊T/M⌋ of the tasks it was the previous planned owner of
//!    (stateful ones first, then by task id); then, in member id order, members that had more
//!    keep one more while fewer than `T mod M` members are at ⌈T/M⌉.
//! 4. **Placement.** The remaining tasks are placed one by one (stateful ones first, then by
//!    task id) on a member with room under rule 2, choosing by, in order:
//!    - a member of the process of the task's previous active member: the present one, or a
//!      departed one (`AssignorInput::departed`; a restarted instance keeps its process id and
//!      state but gets new member ids);
//!    - the least lag of the member's process for the task (stateful tasks only): 0 for the
//!      process of the task's previous active member if that member is present (a running
//!      active task is caught up, and omits itself from its offset sums, docs/design.md §4);
//!      otherwise `end_sum − offset_sum` (at least 0) for a process that reported a sum, where
//!      a task without an end sum takes the largest sum any present process reported for it;
//!      unknown, which is behind every known lag, for a process that reported none;
//!    - the fewest planned tasks so far, then the member id.
//! 5. **Warm-ups.** For a stateful task whose planned owner `N` is not its previous active
//!    member `A`, while `A` is present and `N`'s process is neither `A`'s nor within
//!    `acceptable_recovery_lag` (an unknown lag is not): the task stays active on `A` and `N`
//!    gets it as a warm-up, for at most `max_warmup_replicas` tasks in the whole assignment;
//!    the rest move at once. The warm-ups go first to tasks whose `N` already warmed them up,
//!    then by task id. A task whose planned owner is within the lag (or of `A`'s process)
//!    moves at once: so a warm-up kept as the planned owner (rule 3) becomes the active as soon
//!    as its process is caught up.
//! 6. **Standbys.** Each stateful task gets `min(num_standby_replicas, P)` standbys, `P` being
//!    the processes with a present member other than its active's and its warm-up's, each on a
//!    distinct one of them. Task by task (by id) each standby goes to the member that is best
//!    by, in order: it held the task as a standby before; its process did (through a present
//!    or departed member); the least lag of its process (rule 4); the fewest standbys so far;
//!    the member id. Stateless tasks get no standbys and no warm-ups.
//!
//! Robustness: previous targets may overlap or be invalid. Tasks that are not in
//! `AssignorInput::tasks` are ignored; of several present members holding a task active (or
//! as a warm-up) the first by member id is its previous one; a warm-up the same member also
//! held active is ignored; of two members with one id, the first in `members` counts.
//!
//! Cost: O((T + M + S) · log(T + M)) for `S` the previous tasks and offset sums given, plus
//! `num_standby_replicas` times that for the standbys. It runs only at a rebalance.

// Its user, the in-process coordinator, serves the embedded backend only.
#![cfg_attr(not(feature = "embedded"), allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use riffle_state_dir::TaskId;

/// A member's tasks, by role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TaskSets {
    /// Tasks to process.
    pub active: BTreeSet<TaskId>,
    /// Tasks to keep up to date from their changelogs.
    pub standby: BTreeSet<TaskId>,
    /// Tasks to restore before they become active here.
    pub warmup: BTreeSet<TaskId>,
}

/// One member of the group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AssignorMember<'a> {
    /// The member id (unique).
    pub id: &'a str,
    /// The process id: members of one process share one state directory.
    pub process: &'a str,
    /// This member's previous target (empty for a new member).
    pub previous: &'a TaskSets,
}

/// What the assignor decides from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AssignorInput<'a> {
    /// Every task of the topology.
    pub tasks: &'a BTreeSet<TaskId>,
    /// The tasks that have changelogs: standbys, warm-ups and placement by state apply only
    /// to these.
    pub stateful: &'a BTreeSet<TaskId>,
    /// The members to assign to.
    pub members: &'a [AssignorMember<'a>],
    /// Members that left since their previous target, with it: a task they held active goes
    /// preferably to a present member of the same process (a restarted instance), and a task
    /// they held as a standby counts as held by their process. Their ids are never assigned.
    /// Empty when the caller does not keep them.
    pub departed: &'a [AssignorMember<'a>],
    /// Per process id: the offset sums its members reported (docs/design.md §4), merged.
    pub offset_sums: &'a BTreeMap<String, HashMap<TaskId, i64>>,
    /// Per stateful task: the sum of its changelogs' end offsets.
    pub end_sums: &'a HashMap<TaskId, i64>,
    /// Standbys wanted per stateful task.
    pub num_standby_replicas: u32,
    /// A process this far behind on a task (or closer) may take it over at once.
    pub acceptable_recovery_lag: u64,
    /// At most this many warm-ups in the whole assignment.
    pub max_warmup_replicas: u32,
}

/// The target of every member (empty sets included), by member id.
pub(crate) fn assign(input: &AssignorInput<'_>) -> BTreeMap<String, TaskSets> {
    let group = Group::new(input);
    if group.members.is_empty() {
        return BTreeMap::new();
    }
    let planned = group.plan();
    let (active, warmup) = group.warmups(&planned);
    let standbys = group.standbys(&active, &warmup);

    let mut out: Vec<TaskSets> = vec![TaskSets::default(); group.members.len()];
    for (ti, &task) in group.tasks.iter().enumerate() {
        out[active[ti]].active.insert(task);
        if let Some(w) = warmup[ti] {
            out[w].warmup.insert(task);
        }
        for &s in &standbys[ti] {
            out[s].standby.insert(task);
        }
    }
    group
        .members
        .iter()
        .zip(out)
        .map(|(m, sets)| (m.id.to_owned(), sets))
        .collect()
}

/// How far a process is behind on a task; every known lag is ahead of `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lag {
    Known(u64),
    Unknown,
}

/// What the previous targets and the offset sums say about one task (indices into
/// `Group::members` and `Group::processes`).
#[derive(Debug, Default)]
struct TaskHistory {
    /// The present member that held it active.
    active: Option<usize>,
    /// That member's process, or else the process of a departed member that held it active.
    active_process: Option<usize>,
    /// The present member that held it as a warm-up (stateful tasks only).
    warmup: Option<usize>,
    /// Present members that held it as a standby.
    standby_members: Vec<usize>,
    /// Processes whose present or departed members held it as a standby, sorted.
    standby_processes: Vec<usize>,
    /// (process, lag) from the offset sums, sorted by process (stateful tasks only).
    lags: Vec<(usize, u64)>,
}

struct Group<'i> {
    input: &'i AssignorInput<'i>,
    /// Present members, by id.
    members: Vec<AssignorMember<'i>>,
    /// Each member's index in `processes`.
    member_process: Vec<usize>,
    /// Processes with a present member, by id.
    processes: Vec<&'i str>,
    /// Members of each process, by id.
    process_members: Vec<Vec<usize>>,
    tasks: Vec<TaskId>,
    stateful: Vec<bool>,
    history: Vec<TaskHistory>,
}

impl<'i> Group<'i> {
    fn new(input: &'i AssignorInput<'i>) -> Self {
        let mut members: Vec<AssignorMember<'i>> = Vec::with_capacity(input.members.len());
        let mut seen = BTreeSet::new();
        for m in input.members {
            if seen.insert(m.id) {
                members.push(*m);
            }
        }
        members.sort_by_key(|m| m.id);
        let processes: Vec<&str> = members
            .iter()
            .map(|m| m.process)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let process_index = |p: &str| processes.binary_search(&p).ok();
        let member_process: Vec<usize> = members
            .iter()
            .map(|m| process_index(m.process).unwrap_or_default())
            .collect();
        let mut process_members = vec![Vec::new(); processes.len()];
        for (mi, &p) in member_process.iter().enumerate() {
            process_members[p].push(mi);
        }
        let mut departed: Vec<AssignorMember<'i>> = input
            .departed
            .iter()
            .filter(|d| !seen.contains(d.id))
            .copied()
            .collect();
        departed.sort_by_key(|d| d.id);

        let tasks: Vec<TaskId> = input.tasks.iter().copied().collect();
        let task_index = |t: &TaskId| tasks.binary_search(t).ok();
        let stateful: Vec<bool> = tasks.iter().map(|t| input.stateful.contains(t)).collect();
        let mut history: Vec<TaskHistory> = tasks.iter().map(|_| TaskHistory::default()).collect();

        for (mi, m) in members.iter().enumerate() {
            for ti in m.previous.active.iter().filter_map(task_index) {
                let h = &mut history[ti];
                if h.active.is_none() {
                    h.active = Some(mi);
                    h.active_process = Some(member_process[mi]);
                }
            }
        }
        for (mi, m) in members.iter().enumerate() {
            for ti in m.previous.warmup.iter().filter_map(task_index) {
                let h = &mut history[ti];
                if stateful[ti] && h.warmup.is_none() && !m.previous.active.contains(&tasks[ti]) {
                    h.warmup = Some(mi);
                }
            }
            for ti in m.previous.standby.iter().filter_map(task_index) {
                if stateful[ti] {
                    history[ti].standby_members.push(mi);
                    history[ti].standby_processes.push(member_process[mi]);
                }
            }
        }
        for d in &departed {
            let Some(p) = process_index(d.process) else {
                continue;
            };
            for ti in d.previous.active.iter().filter_map(task_index) {
                let h = &mut history[ti];
                if h.active_process.is_none() {
                    h.active_process = Some(p);
                }
            }
            for ti in d.previous.standby.iter().filter_map(task_index) {
                if stateful[ti] {
                    history[ti].standby_processes.push(p);
                }
            }
        }

        // Offset sums, process by process in id order, so each task's list comes out sorted.
        let mut sums: Vec<Vec<(usize, i64)>> = tasks.iter().map(|_| Vec::new()).collect();
        for (process, reported) in input.offset_sums {
            let Some(p) = process_index(process) else {
                continue;
            };
            for (task, &sum) in reported {
                if let Some(ti) = task_index(task).filter(|&ti| stateful[ti]) {
                    sums[ti].push((p, sum));
                }
            }
        }
        for (ti, (h, sums)) in history.iter_mut().zip(sums).enumerate() {
            h.standby_processes.sort_unstable();
            h.standby_processes.dedup();
            let Some(largest) = sums.iter().map(|&(_, s)| s).max() else {
                continue;
            };
            let end = input.end_sums.get(&tasks[ti]).copied().unwrap_or(largest);
            h.lags = sums
                .into_iter()
                .map(|(p, sum)| {
                    let lag = (i128::from(end) - i128::from(sum)).max(0);
                    (p, u64::try_from(lag).unwrap_or(u64::MAX))
                })
                .collect();
        }

        Group {
            input,
            members,
            member_process,
            processes,
            process_members,
            tasks,
            stateful,
            history,
        }
    }

    /// The lag of process `p` on task `ti` (rule 4).
    fn lag(&self, ti: usize, p: usize) -> Lag {
        if !self.stateful[ti] {
            return Lag::Known(0);
        }
        let h = &self.history[ti];
        if h.active.is_some_and(|a| self.member_process[a] == p) {
            return Lag::Known(0);
        }
        match h.lags.binary_search_by_key(&p, |&(q, _)| q) {
            Ok(i) => Lag::Known(h.lags[i].1),
            Err(_) => Lag::Unknown,
        }
    }

    fn caught_up(&self, ti: usize, p: usize) -> bool {
        matches!(self.lag(ti, p), Lag::Known(lag) if lag <= self.input.acceptable_recovery_lag)
    }

    /// The previous planned owner of task `ti` (rule 3).
    fn previous_planned(&self, ti: usize) -> Option<usize> {
        let h = &self.history[ti];
        h.warmup.or(h.active)
    }

    /// Rules 2–4: each task's planned owner.
    fn plan(&self) -> Vec<usize> {
        let m_count = self.members.len();
        let mut loads = Loads::new(self.tasks.len(), &self.member_process, self.processes.len());
        let mut planned: Vec<Option<usize>> = vec![None; self.tasks.len()];

        let mut previous: Vec<Vec<usize>> = vec![Vec::new(); m_count];
        for ti in 0..self.tasks.len() {
            if let Some(m) = self.previous_planned(ti) {
                previous[m].push(ti);
            }
        }
        for tasks in &mut previous {
            // Stable: task id order within each kind.
            tasks.sort_by_key(|&ti| !self.stateful[ti]);
        }
        for (m, tasks) in previous.iter().enumerate() {
            for &ti in tasks.iter().take(loads.base) {
                planned[ti] = Some(m);
                loads.count[m] += 1;
            }
        }
        for (m, tasks) in previous.iter().enumerate() {
            if loads.at_ceiling < loads.extra
                && let Some(&ti) = tasks.get(loads.base)
            {
                planned[ti] = Some(m);
                loads.count[m] += 1;
                loads.at_ceiling += 1;
            }
        }
        loads.index_room();

        let mut order: Vec<usize> = (0..self.tasks.len())
            .filter(|&ti| planned[ti].is_none())
            .collect();
        order.sort_by_key(|&ti| !self.stateful[ti]);
        for ti in order {
            let h = &self.history[ti];
            let key = |m: usize| {
                let p = self.member_process[m];
                (
                    h.active_process != Some(p),
                    self.lag(ti, p),
                    loads.count[m],
                    m,
                )
            };
            let processes = h
                .active_process
                .into_iter()
                .chain(h.lags.iter().map(|&(p, _)| p));
            let candidates = processes
                .filter_map(|p| loads.room_in[p].first())
                .chain(loads.room.first())
                .map(|&(_, m)| m);
            let best = candidates
                .min_by_key(|&m| key(m))
                .expect("the members' room adds up to the task count");
            planned[ti] = Some(best);
            loads.add(best);
        }
        planned
            .into_iter()
            .map(|m| m.expect("every task was placed"))
            .collect()
    }

    /// Rule 5: each task's active member and warm-up member.
    fn warmups(&self, planned: &[usize]) -> (Vec<usize>, Vec<Option<usize>>) {
        let mut active = planned.to_vec();
        let mut warmup = vec![None; planned.len()];
        let mut wanted: Vec<usize> = (0..planned.len())
            .filter(|&ti| {
                let n = planned[ti];
                let p = self.member_process[n];
                self.stateful[ti]
                    && self.history[ti]
                        .active
                        .is_some_and(|a| a != n && self.member_process[a] != p)
                    && !self.caught_up(ti, p)
            })
            .collect();
        wanted.sort_by_key(|&ti| self.history[ti].warmup != Some(planned[ti]));
        let limit = usize::try_from(self.input.max_warmup_replicas).unwrap_or(usize::MAX);
        for ti in wanted.into_iter().take(limit) {
            if let Some(a) = self.history[ti].active {
                active[ti] = a;
                warmup[ti] = Some(planned[ti]);
            }
        }
        (active, warmup)
    }

    /// Rule 6: each task's standby members.
    fn standbys(&self, active: &[usize], warmup: &[Option<usize>]) -> Vec<Vec<usize>> {
        let wanted = usize::try_from(self.input.num_standby_replicas)
            .unwrap_or(usize::MAX)
            .min(self.processes.len());
        let mut standbys = vec![Vec::new(); self.tasks.len()];
        if wanted == 0 {
            return standbys;
        }
        let mut count = vec![0usize; self.members.len()];
        // Each process's members by (standbys, id), and each process's first one.
        let mut by_process: Vec<BTreeSet<(usize, usize)>> = self
            .process_members
            .iter()
            .map(|ms| ms.iter().map(|&m| (0, m)).collect())
            .collect();
        let mut firsts: BTreeSet<(usize, usize)> = by_process
            .iter()
            .filter_map(|s| s.first().copied())
            .collect();

        for ti in (0..self.tasks.len()).filter(|&ti| self.stateful[ti]) {
            let h = &self.history[ti];
            let mut taken: Vec<usize> = Vec::with_capacity(2 + wanted);
            taken.push(self.member_process[active[ti]]);
            taken.extend(warmup[ti].map(|w| self.member_process[w]));
            let tier = |m: usize| {
                if h.standby_members.contains(&m) {
                    0
                } else if h
                    .standby_processes
                    .binary_search(&self.member_process[m])
                    .is_ok()
                {
                    1
                } else {
                    2
                }
            };
            for _ in 0..wanted {
                let free = |p: &usize| !taken.contains(p);
                let first_of = |p: usize| by_process[p].first().map(|&(_, m)| m);
                let processes = h
                    .standby_processes
                    .iter()
                    .copied()
                    .chain(h.active.map(|a| self.member_process[a]))
                    .chain(h.lags.iter().map(|&(p, _)| p))
                    .filter(free)
                    .filter_map(first_of);
                let previous = h
                    .standby_members
                    .iter()
                    .copied()
                    .filter(|&m| free(&self.member_process[m]));
                let least_loaded = firsts
                    .iter()
                    .map(|&(_, m)| m)
                    .find(|&m| free(&self.member_process[m]));
                let best = previous
                    .chain(processes)
                    .chain(least_loaded)
                    .min_by_key(|&m| {
                        let p = self.member_process[m];
                        (tier(m), self.lag(ti, p), count[m], m)
                    });
                let Some(m) = best else {
                    break;
                };
                let p = self.member_process[m];
                taken.push(p);
                standbys[ti].push(m);
                let set = &mut by_process[p];
                if let Some(first) = set.first() {
                    firsts.remove(first);
                }
                set.remove(&(count[m], m));
                count[m] += 1;
                set.insert((count[m], m));
                if let Some(&first) = set.first() {
                    firsts.insert(first);
                }
            }
        }
        standbys
    }
}

/// Planned counts and which members have room under rule 2.
struct Loads {
    base: usize,
    extra: usize,
    /// Members at ⌈T/M⌉ when `extra > 0`.
    at_ceiling: usize,
    count: Vec<usize>,
    /// Each member's process.
    process: Vec<usize>,
    /// Members with room, by (count, member): all of them, and those of each process.
    room: BTreeSet<(usize, usize)>,
    room_in: Vec<BTreeSet<(usize, usize)>>,
}

impl Loads {
    fn new(tasks: usize, member_process: &[usize], processes: usize) -> Self {
        let members = member_process.len();
        Loads {
            base: tasks / members,
            extra: tasks % members,
            at_ceiling: 0,
            count: vec![0; members],
            process: member_process.to_vec(),
            room: BTreeSet::new(),
            room_in: vec![BTreeSet::new(); processes],
        }
    }

    fn has_room(&self, m: usize) -> bool {
        let c = self.count[m];
        c < self.base || (c == self.base && self.at_ceiling < self.extra)
    }

    fn index_room(&mut self) {
        for m in 0..self.count.len() {
            let p = self.process[m];
            if self.has_room(m) {
                self.room.insert((self.count[m], m));
                self.room_in[p].insert((self.count[m], m));
            }
        }
    }

    fn add(&mut self, m: usize) {
        let p = self.process[m];
        let before = (self.count[m], m);
        self.room.remove(&before);
        self.room_in[p].remove(&before);
        self.count[m] += 1;
        if self.count[m] == self.base + 1 {
            self.at_ceiling += 1;
            if self.at_ceiling == self.extra {
                // The last ⌈T/M⌉ place is gone: members at ⌊T/M⌋ are full now.
                let full: Vec<(usize, usize)> = self
                    .room
                    .range((self.base, 0)..(self.base + 1, 0))
                    .copied()
                    .collect();
                for entry in full {
                    self.room.remove(&entry);
                    self.room_in[self.process[entry.1]].remove(&entry);
                }
            }
        }
        if self.has_room(m) {
            self.room.insert((self.count[m], m));
            self.room_in[p].insert((self.count[m], m));
        }
    }
}

#[cfg(test)]
mod tests;
