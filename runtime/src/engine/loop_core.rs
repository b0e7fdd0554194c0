//! The stream thread's decisions, as a state machine that does no I/O (docs/design.md §3).
//!
//! [`LoopCore`] owns every *when* of the loop: which input partitions to fetch, when to commit,
//! heartbeat and clean up, and how long to sleep. It takes what the thread observed (data
//! versions and changed partitions, fetch and process results, cache bytes, the coordinator's
//! generation) and `now` as arguments, and never reads a clock, a file or a socket — so every
//! rule below is reachable from a table-driven unit test with a fake clock. The thread
//! (`thread/`) owns the tasks and executes the decisions.
//!
//! [`AssignmentPlan`] is the other pure half: what a new assignment means for the tasks a thread
//! owns (revoke, close a restoring task, drop or promote a standby, start), computed before any
//! store is touched.
//!
//! What it must never do: iterate the owned tasks or partitions when nothing changed. An idle
//! iteration costs a few comparisons; a record arriving on one partition makes that one
//! partition ready, not every task.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;
use riffle_task_manager::TaskKind;

use crate::backend::group::Assignment;
use crate::config::{FetchStrategy, IdleWakeup};

/// A caught-up thread commits at once, but not again within this long of its last commit: a
/// steady trickle of records then costs a commit per this interval, not one per record (each
/// commit writes changelogs and outputs and rewrites the group's offsets), while the first
/// record after a quiet spell is still committed as soon as it is processed.
pub(crate) const CAUGHT_UP_COMMIT_SPACING: Duration = Duration::from_millis(100);

/// How long an unsettled thread (tasks restoring, or waiting for a task directory another
/// thread of this process still holds) waits between looks.
pub(crate) const UNSETTLED_WAIT: Duration = Duration::from_millis(5);

/// The settings the core decides with.
#[derive(Clone, Debug)]
pub(crate) struct LoopSettings {
    /// The longest a wait blocks under [`IdleWakeup::EveryPoll`].
    pub(crate) poll: Duration,
    /// Commit dirty state at least this often.
    pub(crate) commit_interval: Duration,
    /// Heartbeat at least this often (the coordinator may ask for more often).
    pub(crate) heartbeat_interval: Duration,
    /// Delete unowned task directories this often (`None`: not this thread's job).
    pub(crate) cleanup_interval: Option<Duration>,
    /// Commit early once the stores' caches hold this many bytes.
    pub(crate) cache_max_bytes: usize,
    /// Fetch only partitions with new data, or every partition whenever anything moved.
    pub(crate) fetch_strategy: FetchStrategy,
    /// Sleep to the next deadline, or wake every `poll`.
    pub(crate) idle_wakeup: IdleWakeup,
}

/// One input partition of a running task: the task and the input's index in it.
pub(crate) type InputRef = (TaskId, usize);

/// What the backend said changed since the core's last look.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Changes<'a> {
    /// These partitions (duplicates allowed) may have new data.
    Named(&'a [TopicPartition]),
    /// The backend cannot say which: any partition may have new data.
    Unknown,
}

/// Why a commit is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitReason {
    /// The commit interval passed since the last commit.
    Interval,
    /// The stores' caches are full.
    CacheFull,
    /// Everything fetched was processed and the last commit is at least
    /// [`CAUGHT_UP_COMMIT_SPACING`] old: commit now rather than hold results back.
    CaughtUp,
    /// A processor asked for a commit (`ProcessorContext::commit`).
    Requested,
}

/// What the thread does after an iteration in which nothing was left to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    /// Wake at the latest then (earlier if the backend signals data or the thread is woken).
    pub(crate) until: Instant,
    /// Whether the thread is settled: every assigned task runs, nothing is being restored.
    pub(crate) settled: bool,
}

/// The loop's state, minus the tasks themselves.
#[derive(Debug)]
pub(crate) struct LoopCore {
    settings: LoopSettings,
    /// Input partition → the running task reading it.
    inputs: HashMap<TopicPartition, InputRef>,
    /// Inputs that may have data to fetch: signalled since their last empty fetch.
    ready: BTreeSet<InputRef>,
    /// Tasks holding fetched records not processed yet.
    busy: BTreeSet<TaskId>,
    /// Tasks that processed records since the last commit.
    dirty: BTreeSet<TaskId>,
    /// The backend's data version up to which changes were taken into `ready`.
    seen_version: Option<u64>,
    last_commit: Instant,
    next_heartbeat: Instant,
    /// When the last heartbeat was sent.
    last_heartbeat: Instant,
    heartbeat_interval: Duration,
    seen_generation: u64,
    next_cleanup: Option<Instant>,
    /// Wall-clock punctuation deadlines: by time, and by task (to move one).
    punctuations: BTreeSet<(Instant, TaskId)>,
    punctuation_of: HashMap<TaskId, Instant>,
    /// A processor asked for a commit.
    commit_requested: bool,
    /// The task a processing pass stopped after because the caches filled: the next pass
    /// starts after it, so every busy task gets its turn.
    resume_after: Option<TaskId>,
}

impl LoopCore {
    /// A core whose first heartbeat is due at once.
    pub(crate) fn new(settings: LoopSettings, now: Instant) -> Self {
        LoopCore {
            inputs: HashMap::new(),
            ready: BTreeSet::new(),
            busy: BTreeSet::new(),
            dirty: BTreeSet::new(),
            seen_version: None,
            last_commit: now,
            next_heartbeat: now,
            last_heartbeat: now,
            heartbeat_interval: settings.heartbeat_interval,
            seen_generation: 0,
            resume_after: None,
            next_cleanup: settings.cleanup_interval.map(|d| now + d),
            punctuations: BTreeSet::new(),
            punctuation_of: HashMap::new(),
            commit_requested: false,
            settings,
        }
    }

    /// The version the core last took changes up to (`None` before the first look).
    pub(crate) fn seen_version(&self) -> Option<u64> {
        self.seen_version
    }

    /// Whether the backend's version moved since the core's last look (one comparison).
    pub(crate) fn version_moved(&self, version: u64) -> bool {
        self.seen_version != Some(version)
    }

    // ---- inputs -----------------------------------------------------------------------------

    /// A task started running with these input partitions: fetch them.
    pub(crate) fn task_started(&mut self, id: TaskId, partitions: &[TopicPartition]) {
        for (i, tp) in partitions.iter().enumerate() {
            self.inputs.insert(tp.clone(), (id, i));
            self.ready.insert((id, i));
        }
    }

    /// A task stopped running: forget its inputs.
    pub(crate) fn task_stopped(&mut self, id: TaskId, partitions: &[TopicPartition]) {
        for (i, tp) in partitions.iter().enumerate() {
            if self.inputs.get(tp) == Some(&(id, i)) {
                self.inputs.remove(tp);
            }
            self.ready.remove(&(id, i));
        }
        self.busy.remove(&id);
        self.dirty.remove(&id);
        self.set_punctuation_deadline(id, None);
    }

    /// Takes what the backend said changed up to `version` into the ready set. Under
    /// [`FetchStrategy::ScanAll`] any change makes every input ready (Kafka Streams' loop).
    pub(crate) fn observe(&mut self, version: u64, changes: Changes<'_>) {
        if self.seen_version == Some(version) {
            return;
        }
        self.seen_version = Some(version);
        match (self.settings.fetch_strategy, changes) {
            (FetchStrategy::Ready, Changes::Named(tps)) => {
                for tp in tps {
                    if let Some(&input) = self.inputs.get(tp) {
                        self.ready.insert(input);
                    }
                }
            }
            _ => self.ready.extend(self.inputs.values().copied()),
        }
    }

    /// The inputs to fetch now, in task order.
    pub(crate) fn ready(&self) -> impl Iterator<Item = InputRef> + '_ {
        self.ready.iter().copied()
    }

    /// How a fetch of `input` went: `got` data, or nothing (then it waits for a signal).
    pub(crate) fn fetched(&mut self, input: InputRef, got: bool) {
        if got {
            self.busy.insert(input.0);
        } else {
            self.ready.remove(&input);
        }
    }

    /// Tasks with fetched records to process, in task order from where the last pass stopped
    /// ([`stopped_after`](Self::stopped_after)), wrapping around.
    pub(crate) fn busy(&self) -> impl Iterator<Item = TaskId> + '_ {
        use std::ops::Bound::{Excluded, Unbounded};
        let (first, wrapped) = match self.resume_after {
            Some(id) => (
                self.busy.range((Excluded(id), Unbounded)),
                Some(self.busy.range(..=id)),
            ),
            None => (self.busy.range(..), None),
        };
        first.chain(wrapped.into_iter().flatten()).copied()
    }

    /// A processing pass stopped after task `id`, the caches full, before the other busy tasks:
    /// the next pass starts after it.
    pub(crate) fn stopped_after(&mut self, id: TaskId) {
        self.resume_after = Some(id);
    }

    /// How processing `id` went: it processed `records` and has `buffered` records left.
    pub(crate) fn processed(&mut self, id: TaskId, records: usize, buffered: bool) {
        if records > 0 {
            self.dirty.insert(id);
        }
        if !buffered {
            self.busy.remove(&id);
        }
    }

    // ---- punctuation ------------------------------------------------------------------------

    /// Task `id`'s next wall-clock punctuator is due `at` (`None`: it has none).
    pub(crate) fn set_punctuation_deadline(&mut self, id: TaskId, at: Option<Instant>) {
        if self.punctuation_of.get(&id).copied() == at {
            return;
        }
        if let Some(old) = self.punctuation_of.remove(&id) {
            self.punctuations.remove(&(old, id));
        }
        if let Some(at) = at {
            self.punctuation_of.insert(id, at);
            self.punctuations.insert((at, id));
        }
    }

    /// The tasks whose wall-clock punctuators are due at `now`, earliest first.
    pub(crate) fn punctuation_due(&self, now: Instant) -> impl Iterator<Item = TaskId> + '_ {
        self.punctuations
            .iter()
            .take_while(move |(at, _)| *at <= now)
            .map(|&(_, id)| id)
    }

    /// Task `id` punctuated: its forwards and store writes wait for a commit.
    pub(crate) fn punctuated(&mut self, id: TaskId) {
        self.dirty.insert(id);
    }

    /// Task `id`'s input offsets moved without records (`auto_offset_reset`): the next commit
    /// records where they are.
    pub(crate) fn offsets_moved(&mut self, id: TaskId) {
        self.dirty.insert(id);
    }

    /// The bytes the stores' caches may hold before a commit is due.
    pub(crate) fn cache_max_bytes(&self) -> usize {
        self.settings.cache_max_bytes
    }

    /// A processor asked for a commit: the next `commit_due` says so.
    pub(crate) fn request_commit(&mut self) {
        self.commit_requested = true;
    }

    // ---- commits ----------------------------------------------------------------------------

    /// Tasks with processed, uncommitted records, in task order.
    pub(crate) fn dirty(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.dirty.iter().copied()
    }

    /// Whether to commit now, and why: dirty state is committed on the interval, when the
    /// caches are full, or once the thread is caught up (nothing ready, nothing buffered) and
    /// its last commit is [`CAUGHT_UP_COMMIT_SPACING`] old.
    pub(crate) fn commit_due(&self, now: Instant, cache_bytes: usize) -> Option<CommitReason> {
        if self.dirty.is_empty() {
            return None;
        }
        let since = now.saturating_duration_since(self.last_commit);
        if self.commit_requested {
            Some(CommitReason::Requested)
        } else if cache_bytes >= self.settings.cache_max_bytes {
            Some(CommitReason::CacheFull)
        } else if since >= self.settings.commit_interval {
            Some(CommitReason::Interval)
        } else if self.busy.is_empty() && self.ready.is_empty() && since >= CAUGHT_UP_COMMIT_SPACING
        {
            Some(CommitReason::CaughtUp)
        } else {
            None
        }
    }

    /// Whether processed records wait for a commit.
    pub(crate) fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// A commit finished at `now`: nothing is dirty any more.
    pub(crate) fn committed(&mut self, now: Instant) {
        self.dirty.clear();
        self.commit_requested = false;
        self.last_commit = now;
    }

    // ---- heartbeats and housekeeping ---------------------------------------------------------

    /// Whether to heartbeat now: the interval passed, or the group's generation moved.
    pub(crate) fn heartbeat_due(&self, now: Instant, generation: u64) -> bool {
        now >= self.next_heartbeat || generation != self.seen_generation
    }

    /// Whether no heartbeat was sent for longer than `session_timeout` (the process was stopped
    /// or stuck): the coordinator may have given its tasks away, so the thread must heartbeat
    /// before it fetches or writes anything.
    pub(crate) fn session_lapsed(&self, now: Instant, session_timeout: Duration) -> bool {
        now.saturating_duration_since(self.last_heartbeat) > session_timeout
    }

    /// Heartbeat at the next look (the thread lost its tasks and wants them back).
    pub(crate) fn heartbeat_now(&mut self, now: Instant) {
        self.next_heartbeat = self.next_heartbeat.min(now);
    }

    /// A heartbeat was sent at `now` in `generation`.
    pub(crate) fn heartbeat_sent(&mut self, now: Instant, generation: u64) {
        self.last_heartbeat = now;
        self.seen_generation = generation;
        self.next_heartbeat = now + self.heartbeat_interval;
    }

    /// Heartbeat at most every `interval` from the next one on, as the coordinator asked, and
    /// never less often than configured.
    pub(crate) fn set_heartbeat_interval(&mut self, interval: Duration) {
        self.heartbeat_interval = self.settings.heartbeat_interval.min(interval);
    }

    /// Whether the unowned-task-directory cleanup is due; if so, schedules the next one.
    pub(crate) fn cleanup_due(&mut self, now: Instant) -> bool {
        match (self.next_cleanup, self.settings.cleanup_interval) {
            (Some(at), Some(interval)) if now >= at => {
                self.next_cleanup = Some(now + interval);
                true
            }
            _ => false,
        }
    }

    // ---- waiting ----------------------------------------------------------------------------

    /// How long to wait when nothing is ready, buffered or due, or `None` to go on at once.
    /// A settled thread sleeps until its earliest deadline (heartbeat, cleanup, the next
    /// wall-clock punctuation, and while dirty the caught-up commit); data or a wake-up ends the sleep earlier. An unsettled one looks again after
    /// [`UNSETTLED_WAIT`]. Under [`IdleWakeup::EveryPoll`] no wait is longer than `poll`.
    pub(crate) fn wait(&self, now: Instant, settled: bool) -> Option<Wait> {
        if !self.busy.is_empty() || !self.ready.is_empty() {
            return None;
        }
        let mut until = self.next_heartbeat;
        if let Some(at) = self.next_cleanup {
            until = until.min(at);
        }
        if let Some(&(at, _)) = self.punctuations.first() {
            until = until.min(at);
        }
        if !self.dirty.is_empty() {
            let spacing = CAUGHT_UP_COMMIT_SPACING.min(self.settings.commit_interval);
            until = until.min(self.last_commit + spacing);
        }
        if !settled {
            until = until.min(now + UNSETTLED_WAIT);
        }
        if self.settings.idle_wakeup == IdleWakeup::EveryPoll {
            until = until.min(now + self.settings.poll);
        }
        Some(Wait {
            until: until.max(now),
            settled,
        })
    }
}

/// What applying a new assignment does to a thread's tasks, decided before anything is done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AssignmentPlan {
    /// Commit before revoking: running tasks are revoked.
    pub(crate) commit_first: bool,
    /// RUNNING active tasks no longer assigned: commit, checkpoint, close.
    pub(crate) revoke_running: Vec<TaskId>,
    /// Active tasks still restoring, no longer assigned: take back from the updater, close.
    pub(crate) revoke_restoring: Vec<TaskId>,
    /// Standbys no longer assigned as standbys: take back and close.
    pub(crate) drop_standby: Vec<TaskId>,
    /// Standbys now active: take back and restore as active tasks from their stores.
    pub(crate) promote_standby: Vec<TaskId>,
    /// Newly assigned tasks to start, active or standby, once their directories are free.
    pub(crate) start: BTreeMap<TaskId, TaskKind>,
    /// Tasks waiting for their directory that are no longer assigned.
    pub(crate) stop_waiting: Vec<TaskId>,
}

/// The tasks a thread owns, as the plan sees them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owned<'a> {
    /// RUNNING active tasks.
    pub(crate) running: &'a BTreeSet<TaskId>,
    /// Active tasks being restored.
    pub(crate) restoring: &'a BTreeSet<TaskId>,
    /// Standby tasks.
    pub(crate) standby: &'a BTreeSet<TaskId>,
    /// Assigned tasks waiting for their directory.
    pub(crate) waiting: &'a BTreeMap<TaskId, TaskKind>,
}

impl AssignmentPlan {
    /// The plan for moving from `owned` to `assignment`. A task in both the active and a
    /// standby set is active. Costs O(owned + assigned).
    pub(crate) fn compute(owned: Owned<'_>, assignment: &Assignment) -> AssignmentPlan {
        let active = &*assignment.active;
        let standby: BTreeSet<TaskId> = assignment
            .standby
            .iter()
            .chain(assignment.warmup.iter())
            .filter(|t| !active.contains(t))
            .copied()
            .collect();
        let mut plan = AssignmentPlan {
            revoke_running: owned
                .running
                .iter()
                .filter(|id| !active.contains(id))
                .copied()
                .collect(),
            revoke_restoring: owned
                .restoring
                .iter()
                .filter(|id| !active.contains(id))
                .copied()
                .collect(),
            ..AssignmentPlan::default()
        };
        plan.commit_first = !plan.revoke_running.is_empty();
        for &id in owned.standby {
            if active.contains(&id) {
                plan.promote_standby.push(id);
            } else if !standby.contains(&id) {
                plan.drop_standby.push(id);
            }
        }
        plan.stop_waiting = owned
            .waiting
            .keys()
            .filter(|id| !active.contains(id) && !standby.contains(id))
            .copied()
            .collect();
        for &id in active {
            let kept = owned.running.contains(&id) || owned.restoring.contains(&id);
            let promoted = owned.standby.contains(&id);
            if !kept && !promoted {
                plan.start.insert(id, TaskKind::Active);
            }
        }
        for &id in &standby {
            if !owned.standby.contains(&id) {
                plan.start.insert(id, TaskKind::Standby);
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests;
