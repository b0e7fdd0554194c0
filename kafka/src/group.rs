//! [`StreamsGroup`]: the runtime's [`GroupCoordinator`] over Kafka's streams-group protocol
//! (KIP-1071). Each stream thread is one member with its own member id; its heartbeat carries
//! the topology when joining, the tasks it owns, and the offset-sum snapshot when the sending
//! rules call for it; the broker's answer is the member's target assignment (active, standby
//! and warm-up tasks), which is handed to the thread as an [`Assignment`].
//!
//! Never panics on what the broker sends: unknown sub-topology ids and bad partitions are
//! errors naming them. Fencing is not an error: the member drops its tasks and rejoins.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use riffle::TaskId;
use riffle::backend::{Assignment, GroupCoordinator, GroupInfo, GroupIntervals, Heartbeat};
use riffle_log::TopicPartition;

use crate::cluster::{Cluster, is_coordinator_error};
use crate::error::{Error, ErrorCode, Result};
use crate::streams::{
    self, HeartbeatRequest, HeartbeatResponse, Status, Subtopology, TaskIds, TaskOffset, TopicInfo,
    Topology,
};

/// The heartbeat interval right after an assignment change or while a transient status holds
/// the tasks back.
const HURRIED_HEARTBEAT: Duration = Duration::from_millis(200);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A random member id in UUID form (the Java client also uses a random UUID).
fn random_member_id() -> String {
    let word = || {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    let (a, b) = (word(), word());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        (b >> 48) & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// What one member (stream thread) knows of its membership.
#[derive(Debug)]
struct Member {
    member_id: String,
    /// 0 = not joined (join next), else the broker's last epoch.
    epoch: i32,
    endpoint_epoch: i32,
    assignment: Assignment,
    heartbeat_interval_ms: i32,
    task_offset_interval_ms: i32,
    acceptable_recovery_lag: i64,
    statuses: Vec<Status>,
    /// The broker epoch of `assignment`.
    assignment_broker_epoch: i32,
    /// Heartbeat again soon: the assignment just changed (the broker waits for the member to
    /// confirm it, as the Java client does at once), or a transient status holds the tasks back
    /// (internal topics being created, assignment delayed).
    hurry: bool,
    /// Since when heartbeats fail on the network (to give up after the request timeout).
    failing_since: Option<Instant>,
}

impl Member {
    fn new() -> Self {
        Member {
            member_id: random_member_id(),
            epoch: 0,
            endpoint_epoch: 0,
            assignment: Assignment::default(),
            heartbeat_interval_ms: 0,
            task_offset_interval_ms: 0,
            acceptable_recovery_lag: -1,
            statuses: Vec::new(),
            assignment_broker_epoch: 0,
            hurry: false,
            failing_since: None,
        }
    }
}

/// What the broker last told a member (for tests and tools).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberInfo {
    /// The member id riffle generated.
    pub member_id: String,
    /// The member epoch (0 = not joined).
    pub epoch: i32,
    /// The broker's `HeartbeatIntervalMs`.
    pub heartbeat_interval_ms: i32,
    /// The broker's `TaskOffsetIntervalMs`.
    pub task_offset_interval_ms: i32,
    /// The broker's `AcceptableRecoveryLag` (-1 if it sent none).
    pub acceptable_recovery_lag: i64,
}

/// One application's membership in its streams group.
#[derive(Debug)]
pub(crate) struct StreamsGroup {
    cluster: Arc<Cluster>,
    group: String,
    process_id: String,
    topology: Topology,
    /// Sub-topology id → its changelog topics (a task's changelog partitions are these × its
    /// partition).
    changelogs: HashMap<u32, Vec<Arc<str>>>,
    members: Mutex<BTreeMap<String, Arc<Mutex<Member>>>>,
}

fn task_ids(tasks: &BTreeSet<TaskId>) -> Vec<TaskIds> {
    let mut by_sub: BTreeMap<u32, Vec<i32>> = BTreeMap::new();
    for t in tasks {
        by_sub
            .entry(t.subtopology)
            .or_default()
            .push(t.partition as i32);
    }
    by_sub
        .into_iter()
        .map(|(s, partitions)| TaskIds {
            subtopology: s.to_string(),
            partitions,
        })
        .collect()
}

impl StreamsGroup {
    pub(crate) fn new(cluster: Arc<Cluster>, info: &GroupInfo) -> Result<StreamsGroup> {
        let mut subtopologies = Vec::new();
        let mut changelogs = HashMap::new();
        for s in &info.subtopologies {
            let mut repartition_sources = Vec::new();
            for t in &s.repartition_source_topics {
                let partitions = cluster.partitions(t)?.map_or(0, |p| p as i32);
                repartition_sources.push(TopicInfo {
                    name: t.clone(),
                    partitions,
                    configs: vec![("cleanup.policy".into(), "delete".into())],
                });
            }
            let sources = s.source_topics.len() + repartition_sources.len();
            // A task reads partition p of every source, so they must be co-partitioned.
            let copartition_groups = if sources > 1 {
                vec![(
                    (0..s.source_topics.len() as i16).collect(),
                    (0..repartition_sources.len() as i16).collect(),
                )]
            } else {
                Vec::new()
            };
            subtopologies.push(Subtopology {
                id: s.id.to_string(),
                source_topics: s.source_topics.clone(),
                changelog_topics: s
                    .changelog_topics
                    .iter()
                    .map(|name| TopicInfo {
                        name: name.clone(),
                        partitions: 0, // the broker sizes changelogs (must be 0)
                        configs: vec![("cleanup.policy".into(), "compact".into())],
                    })
                    .collect(),
                repartition_sink_topics: s.repartition_sink_topics.clone(),
                repartition_source_topics: repartition_sources,
                copartition_groups,
            });
            changelogs.insert(
                s.id,
                s.changelog_topics
                    .iter()
                    .map(|t| Arc::from(t.as_str()))
                    .collect(),
            );
        }
        Ok(StreamsGroup {
            cluster,
            group: info.application_id.clone(),
            process_id: info.process_id.clone(),
            topology: Topology {
                epoch: 0,
                subtopologies,
            },
            changelogs,
            members: Mutex::default(),
        })
    }

    fn member(&self, name: &str) -> Arc<Mutex<Member>> {
        lock(&self.members)
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(Member::new())))
            .clone()
    }

    /// The member id and epoch of stream thread `name`, for its offset commits.
    pub(crate) fn member_identity(&self, name: &str) -> Option<(String, i32)> {
        let member = lock(&self.members).get(name).cloned()?;
        let m = lock(&member);
        Some((m.member_id.clone(), m.epoch))
    }

    /// What the broker last told each member, by stream thread name.
    pub(crate) fn members(&self) -> Vec<(String, MemberInfo)> {
        let members: Vec<_> = lock(&self.members)
            .iter()
            .map(|(n, m)| (n.clone(), m.clone()))
            .collect();
        members
            .into_iter()
            .map(|(name, m)| {
                let m = lock(&m);
                let info = MemberInfo {
                    member_id: m.member_id.clone(),
                    epoch: m.epoch,
                    heartbeat_interval_ms: m.heartbeat_interval_ms,
                    task_offset_interval_ms: m.task_offset_interval_ms,
                    acceptable_recovery_lag: m.acceptable_recovery_lag,
                };
                (name, info)
            })
            .collect()
    }

    fn to_task_set(&self, lists: &[TaskIds]) -> Result<Arc<BTreeSet<TaskId>>> {
        let mut out = BTreeSet::new();
        for list in lists {
            let sub: u32 = list
                .subtopology
                .parse()
                .ok()
                .filter(|s| self.changelogs.contains_key(s))
                .ok_or_else(|| Error::Group {
                    group: self.group.clone(),
                    reason: format!(
                        "the broker assigned tasks of sub-topology {:?}, which this topology does not have",
                        list.subtopology
                    ),
                })?;
            for &p in &list.partitions {
                let partition = u32::try_from(p).map_err(|_| Error::Group {
                    group: self.group.clone(),
                    reason: format!("the broker assigned task {sub}_{p}"),
                })?;
                out.insert(TaskId {
                    subtopology: sub,
                    partition,
                });
            }
        }
        Ok(Arc::new(out))
    }

    /// Sums of the changelog end offsets of `tasks` (for `TaskEndOffsets`).
    fn end_offset_sums(&self, tasks: &[TaskOffset]) -> Result<Vec<TaskOffset>> {
        let mut tps = Vec::new();
        let mut owners = Vec::new();
        for (i, t) in tasks.iter().enumerate() {
            let Some(topics) = t
                .subtopology
                .parse()
                .ok()
                .and_then(|s| self.changelogs.get(&s))
            else {
                continue;
            };
            for topic in topics {
                tps.push(TopicPartition::new(topic.clone(), t.partition as u32));
                owners.push(i);
            }
        }
        let ends = self.cluster.end_offsets(&tps)?;
        let mut sums = vec![0i64; tasks.len()];
        for (i, end) in owners.into_iter().zip(ends) {
            sums[i] = sums[i].saturating_add(i64::try_from(end).unwrap_or(i64::MAX));
        }
        Ok(tasks
            .iter()
            .zip(sums)
            .map(|(t, offset)| TaskOffset {
                subtopology: t.subtopology.clone(),
                partition: t.partition,
                offset,
            })
            .collect())
    }

    fn send(&self, client_id: &str, request: &HeartbeatRequest<'_>) -> Result<HeartbeatResponse> {
        let mut body = Vec::with_capacity(256);
        request.encode(&mut body);
        let version = self.cluster.heartbeat_version();
        let response = self.cluster.send_to_coordinator(
            &self.group,
            "StreamsGroupHeartbeat",
            client_id,
            streams::HEARTBEAT_KEY,
            version,
            &body,
        )?;
        HeartbeatResponse::decode(&response, version)
    }

    fn heartbeat_member(&self, hb: &Heartbeat<'_>, m: &mut Member) -> Result<Assignment> {
        let joining = m.epoch == 0;
        let owned = hb.owned;
        let (active, standby, warmup) = if joining {
            (Vec::new(), Vec::new(), Vec::new())
        } else {
            (
                task_ids(&owned.active),
                task_ids(&owned.standby),
                task_ids(&owned.warmup),
            )
        };
        let task_offsets: Option<Vec<TaskOffset>> = hb.task_offsets.as_ref().map(|map| {
            let mut v: Vec<TaskOffset> = map
                .iter()
                .map(|(t, &offset)| TaskOffset {
                    subtopology: t.subtopology.to_string(),
                    partition: t.partition as i32,
                    offset,
                })
                .collect();
            v.sort_by(|a, b| (&a.subtopology, a.partition).cmp(&(&b.subtopology, b.partition)));
            v
        });
        let task_end_offsets = match &task_offsets {
            Some(offsets) => match self.end_offset_sums(offsets) {
                Ok(ends) => Some(ends),
                Err(e) => {
                    tracing::warn!(group = %self.group, error = %e, "cannot read changelog end offsets; sending task offsets without them");
                    None
                }
            },
            None => None,
        };
        let empty: &[TaskOffset] = &[];
        let request = HeartbeatRequest {
            group_id: &self.group,
            member_id: &m.member_id,
            member_epoch: m.epoch,
            endpoint_information_epoch: m.endpoint_epoch,
            rebalance_timeout_ms: if joining {
                self.cluster.config().rebalance_timeout_ms
            } else {
                -1
            },
            topology: joining.then_some(&self.topology),
            owned: Some([&active, &standby, &warmup]),
            process_id: joining.then_some(self.process_id.as_str()),
            client_tags: joining.then_some(&[][..]),
            task_offsets: task_offsets.as_deref().or(joining.then_some(empty)),
            task_end_offsets: task_end_offsets
                .as_deref()
                .or((joining || task_offsets.is_some()).then_some(empty)),
            shutdown_application: false,
        };
        let response = match self.send(hb.member, &request) {
            Ok(r) => {
                m.failing_since = None;
                r
            }
            Err(e @ (Error::Io { .. } | Error::Broker { .. })) => {
                // The network or the coordinator lookup: try again at the next heartbeat, up to
                // the request timeout (the broker fences us after its session timeout anyway).
                let since = *m.failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > self.cluster.config().request_timeout {
                    return Err(e);
                }
                tracing::warn!(group = %self.group, member = %m.member_id, error = %e, "heartbeat failed; retrying");
                self.cluster.forget_coordinator(&self.group);
                return Ok(m.assignment.clone());
            }
            Err(e) => return Err(e),
        };
        match response.error_code {
            0 => {}
            code if is_coordinator_error(code) => {
                self.cluster.forget_coordinator(&self.group);
                return Ok(m.assignment.clone());
            }
            // UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND for a member: rejoin.
            code @ (25 | 110 | 69) if code != 69 || !joining => {
                tracing::warn!(
                    group = %self.group,
                    member = %m.member_id,
                    epoch = m.epoch,
                    error = %ErrorCode(code),
                    message = response.error_message.as_deref().unwrap_or(""),
                    "fenced: dropping the member's tasks and rejoining"
                );
                m.epoch = 0;
                m.assignment_broker_epoch = 0;
                let epoch = m.assignment.epoch + 1;
                m.assignment = Assignment::default();
                m.assignment.epoch = epoch;
                return Ok(m.assignment.clone());
            }
            code => {
                let mut message = response.error_message.clone();
                if code == 42
                    && message
                        .as_deref()
                        .is_some_and(|t| t.contains("Topology updates are not supported"))
                {
                    message = Some(format!(
                        "{}: the group already has another topology; delete it (kafka-streams-groups --delete --group {}) or use a new application id",
                        message.unwrap_or_default(),
                        self.group
                    ));
                }
                return Err(Error::Broker {
                    api: "StreamsGroupHeartbeat",
                    context: format!("group {} member {}", self.group, m.member_id),
                    code: ErrorCode(code),
                    message,
                });
            }
        }
        m.epoch = response.member_epoch;
        m.endpoint_epoch = response.endpoint_information_epoch;
        m.heartbeat_interval_ms = response.heartbeat_interval_ms;
        m.task_offset_interval_ms = response.task_offset_interval_ms;
        m.acceptable_recovery_lag = response.acceptable_recovery_lag;
        let statuses = response.status.clone().unwrap_or_default();
        if statuses != m.statuses {
            for s in &statuses {
                tracing::info!(group = %self.group, member = %m.member_id, code = s.code, detail = %s.detail, "streams group status");
            }
            m.statuses = statuses;
        }
        if let Some(s) = m.statuses.iter().find(|s| s.code == 4) {
            return Err(Error::Group {
                group: self.group.clone(),
                reason: format!("a member asked the application to shut down: {}", s.detail),
            });
        }
        let mut next = m.assignment.clone();
        if let Some(a) = &response.active {
            next.active = self.to_task_set(a)?;
        }
        if let Some(s) = &response.standby {
            next.standby = self.to_task_set(s)?;
        }
        if let Some(w) = &response.warmup {
            next.warmup = self.to_task_set(w)?;
        }
        // The runtime applies an assignment when its `epoch` moves, so it must move whenever
        // the tasks do — also when the broker revokes tasks without changing the member epoch
        // (KIP-1071 keeps the epoch until the member has given the tasks up).
        let tasks_changed = (&next.active, &next.standby, &next.warmup)
            != (
                &m.assignment.active,
                &m.assignment.standby,
                &m.assignment.warmup,
            );
        if tasks_changed || response.member_epoch != m.assignment_broker_epoch {
            next.epoch = m.assignment.epoch + 1;
            m.assignment_broker_epoch = response.member_epoch;
        }
        m.hurry = tasks_changed || m.statuses.iter().any(|s| s.code == 3 || s.code == 5);
        if tasks_changed {
            tracing::info!(
                group = %self.group,
                member = %m.member_id,
                epoch = response.member_epoch,
                active = next.active.len(),
                standby = next.standby.len(),
                warmup = next.warmup.len(),
                "new assignment"
            );
        }
        m.assignment = next;
        Ok(m.assignment.clone())
    }
}

impl GroupCoordinator for StreamsGroup {
    fn register(&self, member: &str) {
        self.member(member);
    }

    fn heartbeat(&self, heartbeat: Heartbeat<'_>) -> riffle::Result<Assignment> {
        let member = self.member(heartbeat.member);
        let mut m = lock(&member);
        Ok(self.heartbeat_member(&heartbeat, &mut m)?)
    }

    fn intervals(&self, member: &str) -> Option<GroupIntervals> {
        let member = lock(&self.members).get(member).cloned()?;
        let m = lock(&member);
        let ms = |v: i32| {
            u64::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .map(Duration::from_millis)
        };
        let mut heartbeat = ms(m.heartbeat_interval_ms)?;
        if m.hurry {
            heartbeat = heartbeat.min(HURRIED_HEARTBEAT);
        }
        let intervals = GroupIntervals::new(heartbeat, ms(m.task_offset_interval_ms)?);
        Some(match u64::try_from(m.acceptable_recovery_lag) {
            Ok(lag) => intervals.with_acceptable_recovery_lag(lag),
            Err(_) => intervals,
        })
    }

    fn leave(&self, name: &str) {
        let member = self.member(name);
        let mut m = lock(&member);
        if m.epoch <= 0 {
            return;
        }
        let request = HeartbeatRequest {
            group_id: &self.group,
            member_id: &m.member_id,
            member_epoch: -1,
            endpoint_information_epoch: m.endpoint_epoch,
            rebalance_timeout_ms: -1,
            topology: None,
            owned: None,
            process_id: None,
            client_tags: None,
            task_offsets: None,
            task_end_offsets: None,
            shutdown_application: false,
        };
        match self.send(name, &request) {
            Ok(r) if r.error_code == 0 => {
                tracing::info!(group = %self.group, member = %m.member_id, "left the streams group");
            }
            Ok(r) => {
                tracing::warn!(group = %self.group, member = %m.member_id, error = %ErrorCode(r.error_code), "leaving the streams group failed; the broker removes the member after its session timeout");
            }
            Err(e) => {
                tracing::warn!(group = %self.group, member = %m.member_id, error = %e, "leaving the streams group failed; the broker removes the member after its session timeout");
            }
        }
        m.epoch = 0;
        m.assignment_broker_epoch = 0;
        let epoch = m.assignment.epoch + 1;
        m.assignment = Assignment::default();
        m.assignment.epoch = epoch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_tasks_go_out_grouped_by_subtopology_in_order() {
        let t = |subtopology, partition| TaskId {
            subtopology,
            partition,
        };
        let tasks: BTreeSet<TaskId> = [t(1, 2), t(0, 3), t(1, 0), t(0, 1)].into();
        assert_eq!(
            task_ids(&tasks),
            vec![
                TaskIds {
                    subtopology: "0".into(),
                    partitions: vec![1, 3]
                },
                TaskIds {
                    subtopology: "1".into(),
                    partitions: vec![0, 2]
                },
            ]
        );
        assert!(task_ids(&BTreeSet::new()).is_empty());
    }

    #[test]
    fn member_ids_are_random_uuid_v4_strings() {
        let (a, b) = (random_member_id(), random_member_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let groups: Vec<&str> = a.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            vec![8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('4'));
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
