//! The group of an application's instances on one log directory ([`SharedCoordinator`]): every
//! stream thread of every process that runs the application on the log is a member, as in a
//! Kafka streams group (KIP-1071), with the log's groups of processes (riffle-log's `Group`;
//! log/FORMAT.md, *Groups of processes*) in place of a broker.
//!
//! A heartbeat is one *step* of the member: under the group lock, members whose process died
//! (their file lock is free) or whose session expired are removed; the member's report (the
//! tasks it owns, its task offsets) goes into the group's record; a new **target assignment**
//! is computed when the members changed, when none exists, or when a warm-up may have caught up
//! (the assignor, runtime/src/backend/assignor.rs, bumps the group epoch); then the member is
//! given its target **less the active tasks another member still owns or was given** — a task
//! moves only after its previous owner revoked it and said so in a heartbeat, so no task runs
//! in two instances at once. A member that drops tasks heartbeats again at once (the
//! [`generation`](GroupCoordinator::generation) moves), so the next owner can take them at its
//! next heartbeat.
//!
//! The record is JSON (readable with `riffle groups --describe`), written only when a step
//! changed it, and decoded again only when another process wrote it; a member's report is read
//! again only when the epoch of the assignment it holds moved, and what it is given is kept
//! with the record's generation: a heartbeat that changes nothing costs the log's step (a
//! directory listing and a lock try per member) and no work proportional to tasks.
//!
//! A member declared gone is fenced: the log refuses its commits and transactions
//! (`Log::commit_offsets_as`, `Log::commit_transaction_as`), its next step fails with
//! `Fenced`, and the stream thread closes its tasks dirty and joins again as a new member.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use riffle_log::{Group, GroupMember, Log, Step};
use riffle_record::TopicPartition;
use riffle_state_dir::TaskId;
use serde::{Deserialize, Serialize};

use crate::backend::assignor::{AssignorInput, AssignorMember, TaskSets, assign};
use crate::backend::group::{Assignment, GroupCoordinator, GroupInfo, GroupIntervals, Heartbeat};
use crate::types::error::{BackendErrorKind, Error, Result};
use crate::types::host::{HostInfo, StreamsMetadata};

/// The group's record, as the log keeps it for the members (JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupRecord {
    /// The group epoch: moves with each new target assignment.
    pub epoch: u64,
    /// The topology every member runs: per sub-topology, its task count, its input topics and
    /// its changelogs.
    pub subtopologies: BTreeMap<u32, SubtopologyRecord>,
    /// The members, by member id.
    pub members: BTreeMap<String, MemberState>,
}

/// One sub-topology as the record keeps it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SubtopologyRecord {
    /// Its task count.
    pub partitions: u32,
    /// The topics it reads (user and repartition topics).
    pub inputs: Vec<String>,
    /// Its stores' changelogs.
    pub changelogs: Vec<String>,
}

/// One member (a stream thread of an instance) in the record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberState {
    /// The instance's process id (its state directory's).
    pub process: String,
    /// The stream thread's name.
    pub thread: String,
    /// The host name of the machine.
    pub host: String,
    /// Where the instance answers interactive queries (`application.server`).
    pub endpoint: Option<String>,
    /// The member epoch: moves whenever the member's tasks change.
    pub epoch: u64,
    /// Its target assignment.
    pub target: RecordTasks,
    /// What it was last given (the target less what others still own).
    pub current: RecordTasks,
    /// What it last said it owns.
    pub owned: RecordTasks,
    /// The epoch of the assignment it last said it holds (`owned` is read again only when
    /// this moves).
    #[serde(default)]
    pub owned_epoch: u64,
    /// The task offsets it last sent, by task (`0_1`).
    #[serde(with = "task_map")]
    pub offsets: BTreeMap<TaskId, i64>,
}

/// Active, standby and warm-up tasks.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordTasks {
    /// Active tasks.
    #[serde(with = "task_set")]
    pub active: BTreeSet<TaskId>,
    /// Standby tasks.
    #[serde(with = "task_set")]
    pub standby: BTreeSet<TaskId>,
    /// Warm-up tasks.
    #[serde(with = "task_set")]
    pub warmup: BTreeSet<TaskId>,
}

impl RecordTasks {
    fn of(a: &Assignment) -> Self {
        RecordTasks {
            active: (*a.active).clone(),
            standby: (*a.standby).clone(),
            warmup: (*a.warmup).clone(),
        }
    }

    fn holds(&self, t: &TaskId) -> bool {
        self.active.contains(t) || self.standby.contains(t) || self.warmup.contains(t)
    }
}

mod task_set {
    use std::collections::BTreeSet;

    use riffle_state_dir::TaskId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        set: &BTreeSet<TaskId>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(set.iter().map(ToString::to_string))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeSet<TaskId>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| s.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

mod task_map {
    use std::collections::BTreeMap;

    use riffle_state_dir::TaskId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        map: &BTreeMap<TaskId, i64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(map.iter().map(|(k, v)| (k.to_string(), v)))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<TaskId, i64>, D::Error> {
        BTreeMap::<String, i64>::deserialize(d)?
            .into_iter()
            .map(|(k, v)| Ok((k.parse().map_err(serde::de::Error::custom)?, v)))
            .collect()
    }
}

impl GroupRecord {
    /// Decodes a record the log handed out (empty: a group that never wrote one).
    pub fn decode(data: &[u8]) -> std::result::Result<GroupRecord, String> {
        if data.is_empty() {
            return Ok(GroupRecord::default());
        }
        serde_json::from_slice(data).map_err(|e| e.to_string())
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Every task of the topology.
    fn tasks(&self) -> BTreeSet<TaskId> {
        self.subtopologies
            .iter()
            .flat_map(|(&s, sub)| {
                (0..sub.partitions).map(move |p| TaskId {
                    subtopology: s,
                    partition: p,
                })
            })
            .collect()
    }

    /// The sum of the end offsets of `task`'s changelogs (`None`: it has none).
    pub fn end_sum(&self, log: &Log, task: TaskId) -> Result<Option<i64>> {
        let Some(sub) = self.subtopologies.get(&task.subtopology) else {
            return Ok(None);
        };
        if sub.changelogs.is_empty() {
            return Ok(None);
        }
        let mut sum = 0i64;
        for topic in &sub.changelogs {
            let tp = TopicPartition::new(topic.as_str(), task.partition);
            let end = match log.end_offset(&tp) {
                Ok(end) => end,
                Err(riffle_log::Error::UnknownTopic { .. }) => 0,
                Err(e) => return Err(e.into()),
            };
            sum = sum.saturating_add(i64::try_from(end).unwrap_or(i64::MAX));
        }
        Ok(Some(sum))
    }
}

/// What a member says in a step.
struct Report<'a> {
    owned: &'a Assignment,
    offsets: Option<imbl::HashMap<TaskId, i64>>,
}

/// The coordinator of one application's group on a log directory, shared by the stream threads
/// of this process.
pub(crate) struct SharedCoordinator {
    log: Log,
    group: Group,
    info: GroupInfo,
    topology: BTreeMap<u32, SubtopologyRecord>,
    host: String,
    /// Each stream thread's membership, by thread name.
    members: Mutex<HashMap<String, Arc<Mutex<GroupMember>>>>,
    /// The record last read or written, with its generation.
    cached: Mutex<Option<(u64, GroupRecord)>>,
    /// What each member of this process was last given, at which generation: a heartbeat
    /// that changes nothing answers from here, with no work proportional to tasks.
    given: Mutex<HashMap<String, (u64, Assignment)>>,
    /// Moves when a step of this process changed the record or revoked tasks: the threads of
    /// this process heartbeat at once.
    generation: AtomicU64,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedCoordinator {
    pub(crate) fn new(log: Log, info: &GroupInfo) -> Result<Self> {
        let group = log.group(&info.application_id)?;
        let topology = info
            .subtopologies
            .iter()
            .map(|s| {
                let mut inputs = s.source_topics.clone();
                inputs.extend(s.repartition_source_topics.iter().cloned());
                (
                    s.id,
                    SubtopologyRecord {
                        partitions: s.partitions,
                        inputs,
                        changelogs: s.changelog_topics.clone(),
                    },
                )
            })
            .collect();
        Ok(SharedCoordinator {
            log,
            group,
            info: info.clone(),
            topology,
            host: host_name(),
            members: Mutex::new(HashMap::new()),
            cached: Mutex::new(None),
            given: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        })
    }

    /// This thread's membership, joining if it has none.
    fn member(&self, thread: &str) -> Result<Arc<Mutex<GroupMember>>> {
        let mut members = locked(&self.members);
        if let Some(m) = members.get(thread) {
            return Ok(m.clone());
        }
        let id = member_id(&self.info.process_id, thread);
        let joined = self.group.join(&id, self.info.settings.session_timeout)?;
        tracing::info!(group = %self.info.application_id, member = %id, thread, "joined the group on the log");
        let joined = Arc::new(Mutex::new(joined));
        members.insert(thread.to_owned(), joined.clone());
        Ok(joined)
    }

    /// The membership of `thread`, if it has one (for its commits).
    pub(crate) fn membership(&self, thread: &str) -> Option<Arc<Mutex<GroupMember>>> {
        locked(&self.members).get(thread).cloned()
    }

    /// After a fenced step or commit: the thread joins again as a new member.
    pub(crate) fn forget(&self, thread: &str) {
        locked(&self.members).remove(thread);
    }

    /// Runs one step for `thread` (`report`: its heartbeat; `None`: it is leaving) and returns
    /// what it is given.
    fn step(
        &self,
        thread: &str,
        step: &mut Step,
        member_id: &str,
        report: Option<Report<'_>>,
    ) -> Result<Assignment> {
        let mut cached = locked(&self.cached);
        let mut record = match cached.take() {
            Some((generation, record)) if generation == step.generation => record,
            _ => GroupRecord::decode(step.data()).map_err(|reason| {
                Error::backend(
                    BackendErrorKind::Other,
                    format!(
                        "the record of group {:?} on the log does not decode: {reason}",
                        self.info.application_id
                    ),
                )
            })?,
        };
        let mut changed = false;
        // Members the log no longer lists left or were declared gone.
        let gone: Vec<String> = record
            .members
            .keys()
            .filter(|id| !step.members.contains_key(*id))
            .cloned()
            .collect();
        let mut departed: Vec<(String, MemberState)> = gone
            .into_iter()
            .filter_map(|id| record.members.remove(&id).map(|m| (id, m)))
            .collect();
        let mut members_changed = !departed.is_empty();
        for gone in &step.departed {
            tracing::info!(group = %self.info.application_id, member = %gone.member, reason = ?gone.reason, "a member is gone; its tasks move");
        }
        let leaving = report.is_none();
        if leaving && let Some(me) = record.members.remove(member_id) {
            departed.push((member_id.to_owned(), me));
            members_changed = true;
        }
        // The topology: set by the first member, the same for every other.
        if record.subtopologies != self.topology {
            let others = record.members.keys().any(|id| id != member_id);
            if others && !leaving {
                return Err(Error::backend(
                    BackendErrorKind::Group,
                    format!(
                        "instances of application {:?} on this log run another topology ({} tasks; this one has {}): stop them, or give this one another application.id",
                        self.info.application_id,
                        record.tasks().len(),
                        self.info.tasks().count()
                    ),
                ));
            }
            if !leaving {
                record.subtopologies = self.topology.clone();
                changed = true;
                members_changed = true;
            }
        }
        let mut offsets_changed = false;
        if let Some(report) = &report {
            let me = record
                .members
                .entry(member_id.to_owned())
                .or_insert_with(|| {
                    members_changed = true;
                    MemberState {
                        process: self.info.process_id.clone(),
                        thread: thread.to_owned(),
                        host: self.host.clone(),
                        endpoint: self.info.user_endpoint.as_ref().map(ToString::to_string),
                        ..MemberState::default()
                    }
                });
            if me.owned_epoch != report.owned.epoch {
                me.owned_epoch = report.owned.epoch;
                me.owned = RecordTasks::of(report.owned);
                changed = true;
            }
            if let Some(offsets) = &report.offsets {
                let offsets: BTreeMap<TaskId, i64> =
                    offsets.iter().map(|(&t, &s)| (t, s)).collect();
                if me.offsets != offsets {
                    me.offsets = offsets;
                    changed = true;
                    offsets_changed = true;
                }
            }
        }
        // A member joined, left or was declared gone: the record is written even when no
        // target moves (a member given nothing, more members than tasks), so that it lists
        // exactly the members.
        changed |= members_changed;
        let warming = record.members.values().any(|m| !m.target.warmup.is_empty());
        if !record.members.is_empty()
            && (members_changed || record.epoch == 0 || (offsets_changed && warming))
        {
            let targets = self.assign(&record, &departed)?;
            let mut moved = false;
            for (id, target) in targets {
                if let Some(m) = record.members.get_mut(&id) {
                    let target = RecordTasks {
                        active: target.active,
                        standby: target.standby,
                        warmup: target.warmup,
                    };
                    if m.target != target {
                        m.target = target;
                        moved = true;
                    }
                }
            }
            if moved || record.epoch == 0 {
                record.epoch += 1;
                changed = true;
                tracing::info!(group = %self.info.application_id, epoch = record.epoch, members = record.members.len(), "new target assignment");
            }
        }
        let mut given = Assignment::default();
        let mut last_given = locked(&self.given);
        if !changed
            && let Some((generation, last)) = last_given.get(member_id)
            && *generation == step.generation
        {
            // Nothing changed since this member was last given its tasks.
            *cached = Some((step.generation, record));
            return Ok(last.clone());
        }
        if !leaving {
            let current = reconcile(&record, member_id);
            if let Some(me) = record.members.get_mut(member_id) {
                if me.current != current {
                    let revokes = me
                        .owned
                        .active
                        .iter()
                        .chain(&me.owned.standby)
                        .chain(&me.owned.warmup)
                        .any(|t| !current.holds(t));
                    me.current = current;
                    me.epoch += 1;
                    changed = true;
                    if revokes {
                        // Heartbeat again once revoked, so the next owner learns of it.
                        self.generation.fetch_add(1, Ordering::AcqRel);
                    }
                }
                given = Assignment {
                    epoch: me.epoch,
                    active: Arc::new(me.current.active.clone()),
                    standby: Arc::new(me.current.standby.clone()),
                    warmup: Arc::new(me.current.warmup.clone()),
                    pending: me.target.active.len() > me.current.active.len(),
                };
            }
        }
        let generation = if changed {
            step.set_data(record.encode());
            self.generation.fetch_add(1, Ordering::AcqRel);
            step.generation + 1
        } else {
            step.generation
        };
        *cached = Some((generation, record));
        if leaving {
            last_given.remove(member_id);
        } else {
            last_given.insert(member_id.to_owned(), (generation, given.clone()));
        }
        Ok(given)
    }

    /// A new target assignment for the record's members.
    fn assign(
        &self,
        record: &GroupRecord,
        departed: &[(String, MemberState)],
    ) -> Result<BTreeMap<String, TaskSets>> {
        let tasks = record.tasks();
        let stateful: BTreeSet<TaskId> = tasks
            .iter()
            .copied()
            .filter(|t| {
                record
                    .subtopologies
                    .get(&t.subtopology)
                    .is_some_and(|s| !s.changelogs.is_empty())
            })
            .collect();
        let mut offset_sums: BTreeMap<String, HashMap<TaskId, i64>> = BTreeMap::new();
        for m in record.members.values() {
            let sums = offset_sums.entry(m.process.clone()).or_default();
            for (&t, &s) in &m.offsets {
                let e = sums.entry(t).or_insert(s);
                *e = (*e).max(s);
            }
        }
        let mut end_sums = HashMap::new();
        for &t in &stateful {
            if let Some(sum) = record.end_sum(&self.log, t)? {
                end_sums.insert(t, sum);
            }
        }
        let sets = |m: &MemberState| TaskSets {
            active: m.target.active.clone(),
            standby: m.target.standby.clone(),
            warmup: m.target.warmup.clone(),
        };
        let previous: Vec<TaskSets> = record.members.values().map(sets).collect();
        let members: Vec<AssignorMember<'_>> = record
            .members
            .iter()
            .zip(&previous)
            .map(|((id, m), previous)| AssignorMember {
                id,
                process: &m.process,
                previous,
            })
            .collect();
        let departed_previous: Vec<TaskSets> = departed.iter().map(|(_, m)| sets(m)).collect();
        let departed: Vec<AssignorMember<'_>> = departed
            .iter()
            .zip(&departed_previous)
            .map(|((id, m), previous)| AssignorMember {
                id,
                process: &m.process,
                previous,
            })
            .collect();
        let settings = &self.info.settings;
        Ok(assign(&AssignorInput {
            tasks: &tasks,
            stateful: &stateful,
            members: &members,
            departed: &departed,
            offset_sums: &offset_sums,
            end_sums: &end_sums,
            num_standby_replicas: settings.num_standby_replicas,
            acceptable_recovery_lag: settings.acceptable_recovery_lag,
            max_warmup_replicas: settings.max_warmup_replicas,
        }))
    }
}

/// What `member` may have now: its target, less the active tasks another member still owns or
/// was given (those wait until it revoked them; a standby or warm-up of the task it holds is kept
/// meanwhile).
fn reconcile(record: &GroupRecord, member: &str) -> RecordTasks {
    let Some(me) = record.members.get(member) else {
        return RecordTasks::default();
    };
    let held_elsewhere = |t: &TaskId| {
        record.members.iter().any(|(id, m)| {
            id != member && (m.owned.active.contains(t) || m.current.active.contains(t))
        })
    };
    let mut out = RecordTasks {
        active: BTreeSet::new(),
        standby: me.target.standby.clone(),
        warmup: me.target.warmup.clone(),
    };
    for t in &me.target.active {
        if me.owned.active.contains(t) || me.current.active.contains(t) || !held_elsewhere(t) {
            out.active.insert(*t);
        } else if me.owned.standby.contains(t) || me.owned.warmup.contains(t) {
            out.standby.insert(*t);
        }
    }
    out
}

/// A member id: the process, the thread, and a number of this incarnation (a member that was
/// declared gone and joins again is another member).
fn member_id(process: &str, thread: &str) -> String {
    static INCARNATION: AtomicU64 = AtomicU64::new(0);
    let n = INCARNATION.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let thread: String = thread
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    format!("{process}-{thread}-{nanos:x}{n}")
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl GroupCoordinator for SharedCoordinator {
    fn register(&self, member: &str) {
        // Joins and enters the record at once (owning nothing, reporting no offsets yet), so
        // that the first target assignment sees every thread of this instance rather than
        // giving every task to the first to heartbeat and moving half of them at the next.
        let owned = Assignment::default();
        let joined = self.member(member).and_then(|m| {
            let mut m = locked(&m);
            let id = m.id().to_owned();
            let report = Report {
                owned: &owned,
                offsets: None,
            };
            m.step(|step| self.step(member, step, &id, Some(report)))
        });
        if let Err(e) = joined {
            tracing::warn!(thread = member, error = %e, "could not join the group yet; the first heartbeat tries again");
        }
    }

    fn heartbeat(&self, heartbeat: Heartbeat<'_>) -> Result<Assignment> {
        let thread = heartbeat.member;
        let member = self.member(thread)?;
        let mut member = locked(&member);
        let id = member.id().to_owned();
        let report = Report {
            owned: heartbeat.owned,
            offsets: heartbeat.task_offsets,
        };
        let result = member.step(|step| self.step(thread, step, &id, Some(report)));
        if matches!(result, Err(Error::Log(riffle_log::Error::Fenced { .. }))) {
            drop(member);
            self.forget(thread);
        }
        result
    }

    fn leave(&self, thread: &str) {
        let Some(member) = locked(&self.members).remove(thread) else {
            return;
        };
        let Ok(member) =
            Arc::try_unwrap(member).map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
        else {
            tracing::warn!(
                thread,
                "a commit still holds the membership; leaving by session timeout"
            );
            return;
        };
        let id = member.id().to_owned();
        let left = member.leave(|step| self.step(thread, step, &id, None));
        match left {
            Ok(_) => {
                tracing::info!(group = %self.info.application_id, member = %id, "left the group")
            }
            Err(e) => {
                tracing::warn!(group = %self.info.application_id, member = %id, error = %e, "leaving the group failed; the others take its tasks when its session ends")
            }
        }
    }

    fn intervals(&self, _member: &str) -> Option<GroupIntervals> {
        let s = &self.info.settings;
        Some(
            GroupIntervals::new(s.heartbeat_interval, s.task_offset_interval)
                .with_acceptable_recovery_lag(s.acceptable_recovery_lag),
        )
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn endpoints(&self) -> Option<Vec<StreamsMetadata>> {
        let cached = locked(&self.cached);
        let (_, record) = cached.as_ref()?;
        if record.members.values().all(|m| m.endpoint.is_none()) {
            // No instance answers queries elsewhere: as a group of one.
            return None;
        }
        let mut by_host: BTreeMap<HostInfo, StreamsMetadata> = BTreeMap::new();
        for m in record.members.values() {
            let Some(host) = m
                .endpoint
                .as_deref()
                .and_then(|e| e.parse::<HostInfo>().ok())
            else {
                continue;
            };
            let entry = by_host
                .entry(host.clone())
                .or_insert_with(|| StreamsMetadata::new(host, BTreeSet::new(), BTreeSet::new()));
            let partitions = |tasks: &BTreeSet<TaskId>| -> Vec<TopicPartition> {
                tasks
                    .iter()
                    .flat_map(|t| {
                        record
                            .subtopologies
                            .get(&t.subtopology)
                            .map(|s| s.inputs.clone())
                            .unwrap_or_default()
                            .into_iter()
                            .map(move |topic| TopicPartition::new(topic.as_str(), t.partition))
                    })
                    .collect()
            };
            entry
                .active_partitions
                .extend(partitions(&m.current.active));
            entry
                .standby_partitions
                .extend(partitions(&m.current.standby));
        }
        Some(by_host.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use riffle_log::LogOptions;

    use super::*;
    use crate::backend::group::{GroupSettings, SubtopologyInfo};
    use crate::config::ProcessingGuarantee;

    /// One process of an application whose one sub-topology has `tasks` stateless tasks.
    fn info(process: &str, tasks: u32) -> GroupInfo {
        GroupInfo {
            application_id: "app".to_owned(),
            process_id: process.to_owned(),
            subtopologies: vec![SubtopologyInfo {
                id: 0,
                source_topics: vec!["in".to_owned()],
                repartition_source_topics: Vec::new(),
                repartition_sink_topics: Vec::new(),
                changelog_topics: Vec::new(),
                windowed_changelog_retention_ms: BTreeMap::new(),
                partitions: tasks,
            }],
            user_endpoint: None,
            processing_guarantee: ProcessingGuarantee::AtLeastOnce,
            settings: GroupSettings::default(),
        }
    }

    fn heartbeat(c: &SharedCoordinator, owned: &Assignment) -> Assignment {
        c.heartbeat(Heartbeat {
            member: "t1",
            task_offsets: None,
            owned,
        })
        .unwrap()
    }

    /// The record as another process reads it from the log.
    fn record(dir: &std::path::Path) -> GroupRecord {
        let log = Log::open_read_only(dir, LogOptions::default()).unwrap();
        GroupRecord::decode(&log.describe_group("app").unwrap().unwrap().data).unwrap()
    }

    /// A member that joins and is given nothing (more members than tasks) is written into the
    /// record — the other processes' assignments count it, and `riffle groups` lists it as a
    /// member rather than as joining — and removed from it when it leaves or dies, though no
    /// target moves either time.
    #[test]
    fn members_given_no_task_join_and_leave_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Log::open(dir.path(), LogOptions::default()).unwrap();
        let a = SharedCoordinator::new(open(), &info("process-a", 1)).unwrap();
        let b = SharedCoordinator::new(open(), &info("process-b", 1)).unwrap();
        let given = heartbeat(&a, &Assignment::default());
        assert_eq!(given.active.len(), 1);
        heartbeat(&a, &given);
        for _ in 0..3 {
            let idle = heartbeat(&b, &Assignment::default());
            assert!(idle.active.is_empty(), "{idle:?}");
        }
        let r = record(dir.path());
        let processes: BTreeSet<&str> = r.members.values().map(|m| m.process.as_str()).collect();
        assert_eq!(
            processes,
            BTreeSet::from(["process-a", "process-b"]),
            "both members are in the record: {r:?}"
        );
        // The first process sees the second as a member too.
        heartbeat(&a, &given);
        assert_eq!(record(dir.path()).members.len(), 2);
        // It leaves: gone from the record at once, though no target moved.
        b.leave("t1");
        let r = record(dir.path());
        assert_eq!(r.members.len(), 1, "only a's member is left: {r:?}");
        // A third joins, is given nothing, and its process dies (its member file's lock is
        // freed without a leave): the next step of another member removes it from the record.
        let c = SharedCoordinator::new(open(), &info("process-c", 1)).unwrap();
        heartbeat(&c, &Assignment::default());
        assert_eq!(record(dir.path()).members.len(), 2);
        drop(c);
        assert_eq!(heartbeat(&a, &given).active, given.active);
        let r = record(dir.path());
        assert_eq!(r.members.len(), 1, "the dead member is gone: {r:?}");
    }
}
