//! [`StreamsGroup`]: the runtime's [`GroupCoordinator`] over Kafka's streams-group protocol
//! (KIP-1071). Each stream thread is one member with its own member id; its heartbeat carries
//! the topology when joining, the tasks it owns, and the offset-sum snapshot when the sending
//! rules call for it; the broker's answer is the member's target assignment (active, standby
//! and warm-up tasks), which is handed to the thread as an [`Assignment`].
//!
//! This module is the thin, doing part: it keeps one [`MemberState`] per stream thread, reads
//! the changelog end offsets a heartbeat's `TaskEndOffsets` needs (only when it carries task
//! offsets), sends the requests, logs, and forgets the coordinator when told to. Every
//! decision — what a heartbeat carries, what an answer means — is the pure state machine's in
//! [`crate::member`]; none is made here. Fencing is not an error: the member drops its tasks
//! and rejoins.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use riffle::backend::{Assignment, GroupCoordinator, GroupInfo, GroupIntervals, Heartbeat};
use riffle::{query::HostInfo, query::StreamsMetadata};
use riffle_record::TopicPartition;

use crate::cluster::Cluster;
use crate::error::{ErrorCode, Result};
use crate::member::{Action, GroupSpec, MemberState, Outcome};
use crate::streams::{self, HeartbeatRequest, HeartbeatResponse};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A random member id in UUID form (the Java client also uses a random UUID).
fn random_member_id() -> String {
    uuid::Uuid::new_v4().to_string()
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
    spec: GroupSpec,
    members: Mutex<BTreeMap<String, Arc<Mutex<MemberState>>>>,
    /// The endpoint map any member received last (the broker's epochs restart when its
    /// coordinator moves, so the latest answer wins, not the highest epoch); read by queries
    /// without waiting for a heartbeat in flight.
    endpoints: Mutex<Option<Arc<Vec<streams::EndpointPartitions>>>>,
}

impl StreamsGroup {
    pub(crate) fn new(cluster: Arc<Cluster>, info: &GroupInfo) -> Result<StreamsGroup> {
        let config = cluster.config();
        let spec = GroupSpec::new(
            info,
            config.rebalance_timeout_ms,
            config.request_timeout,
            |topic| cluster.partitions(topic),
        )?;
        Ok(StreamsGroup {
            cluster,
            spec,
            members: Mutex::default(),
            endpoints: Mutex::default(),
        })
    }

    fn member(&self, name: &str) -> Arc<Mutex<MemberState>> {
        lock(&self.members)
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(MemberState::new(random_member_id()))))
            .clone()
    }

    /// The process id of this instance (from its state directory).
    pub(crate) fn process_id(&self) -> &str {
        self.spec.process_id()
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

    fn send(&self, client_id: &str, request: &HeartbeatRequest<'_>) -> Result<HeartbeatResponse> {
        let mut body = Vec::with_capacity(256);
        request.encode(&mut body);
        let version = self.cluster.heartbeat_version();
        let response = self.cluster.send_to_coordinator(
            &self.spec.group,
            "StreamsGroupHeartbeat",
            client_id,
            streams::HEARTBEAT_KEY,
            version,
            &body,
        )?;
        HeartbeatResponse::decode(&response, version)
    }

    /// One heartbeat: plan it, read the changelog end offsets if it carries task offsets,
    /// send it, and act on what the member's state machine makes of the answer.
    fn heartbeat_member(&self, hb: &Heartbeat<'_>, m: &mut MemberState) -> Result<Assignment> {
        let group = &self.spec.group;
        let mut plan = self.spec.plan(m, hb.owned, hb.task_offsets.as_ref());
        if let Some(query) = self.spec.end_offset_query(&plan) {
            match self.cluster.end_offsets(&query.partitions) {
                Ok(ends) => plan.set_end_offsets(&query, &ends),
                Err(e) => {
                    tracing::warn!(group = %group, error = %e, "cannot read changelog end offsets; sending task offsets without them");
                }
            }
        }
        let response = self.send(hb.member, &plan.request(&self.spec, m));
        let Outcome { next, action } = self.spec.on_response(m, response, Instant::now());
        if next.statuses != m.statuses {
            for s in &next.statuses {
                tracing::info!(group = %group, member = %m.member_id, status = %s.code, detail = %s.detail, "streams group status");
            }
        }
        let before = std::mem::replace(m, next);
        let new_map = match (&m.endpoints, &before.endpoints) {
            (Some(now), Some(was)) => !Arc::ptr_eq(now, was),
            (now, _) => now.is_some(),
        };
        if new_map {
            *lock(&self.endpoints) = m.endpoints.clone();
        }
        match action {
            Action::Assigned { tasks_changed } => {
                if tasks_changed {
                    tracing::info!(
                        group = %group,
                        member = %m.member_id,
                        epoch = m.epoch,
                        active = m.assignment.active.len(),
                        standby = m.assignment.standby.len(),
                        warmup = m.assignment.warmup.len(),
                        "new assignment"
                    );
                }
            }
            Action::FindCoordinator { error } => {
                tracing::debug!(group = %group, member = %m.member_id, error = ?error, "looking for the group coordinator again");
                self.cluster.forget_coordinator(group);
            }
            Action::Retry { error } => {
                tracing::warn!(group = %group, member = %m.member_id, error = %error, "heartbeat failed; retrying");
                self.cluster.forget_coordinator(group);
            }
            Action::Rejoin { error, message } => {
                tracing::warn!(
                    group = %group,
                    member = %m.member_id,
                    epoch = before.epoch,
                    error = %ErrorCode(error.code()),
                    message = message.as_deref().unwrap_or(""),
                    "fenced: dropping the member's tasks and rejoining"
                );
            }
            Action::Fatal(e) => return Err(e),
        }
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

    /// The latest `PartitionsByUserEndpoint` any member of this process received, entries of
    /// one endpoint merged: empty until the broker sent one.
    fn endpoints(&self) -> Option<Vec<StreamsMetadata>> {
        let Some(endpoints) = lock(&self.endpoints).clone() else {
            return Some(Vec::new());
        };
        let mut by_host: BTreeMap<HostInfo, StreamsMetadata> = BTreeMap::new();
        let partitions = |list: &[(String, Vec<i32>)]| -> BTreeSet<TopicPartition> {
            list.iter()
                .flat_map(|(topic, ps)| {
                    ps.iter()
                        .filter_map(|&p| u32::try_from(p).ok())
                        .map(move |p| TopicPartition::new(topic.as_str(), p))
                })
                .collect()
        };
        for e in endpoints.iter() {
            let host = HostInfo::new(e.host.clone(), e.port);
            let entry = by_host
                .entry(host.clone())
                .or_insert_with(|| StreamsMetadata::new(host, BTreeSet::new(), BTreeSet::new()));
            entry.active_partitions.extend(partitions(&e.active));
            entry.standby_partitions.extend(partitions(&e.standby));
        }
        Some(by_host.into_values().collect())
    }

    fn intervals(&self, member: &str) -> Option<GroupIntervals> {
        let member = lock(&self.members).get(member).cloned()?;
        let m = lock(&member);
        m.intervals()
    }

    fn leave(&self, name: &str) {
        let member = self.member(name);
        let mut m = lock(&member);
        let Some(request) = self.spec.leave_request(&m) else {
            return;
        };
        let group = &self.spec.group;
        match self.send(name, &request).map(|r| r.error) {
            Ok(None) => {
                tracing::info!(group = %group, member = %m.member_id, "left the streams group");
            }
            Ok(Some(error)) => {
                tracing::warn!(group = %group, member = %m.member_id, error = %ErrorCode(error.code()), "leaving the streams group failed; the broker removes the member after its session timeout");
            }
            Err(e) => {
                tracing::warn!(group = %group, member = %m.member_id, error = %e, "leaving the streams group failed; the broker removes the member after its session timeout");
            }
        }
        *m = m.without_tasks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
