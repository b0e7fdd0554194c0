//! Group membership as the stream threads see it: the [`GroupCoordinator`] trait, what a
//! heartbeat carries, and what it brings back.
//!
//! Each stream thread is one member (as in KIP-1071, where every stream thread's consumer is a
//! member and a process id ties the members of one process together). The embedded backend
//! coordinates in process; the Kafka backend speaks the streams-group protocol to the broker.

use crate::config::{ProcessingGuarantee, StreamsConfig};
use crate::types::host::HostInfo;
use crate::types::host::StreamsMetadata;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use riffle_state_dir::TaskId;

use crate::types::error::Result;

/// A member's tasks; `epoch` moves whenever they change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Assignment {
    /// Moves whenever the tasks change; stream threads apply an assignment when it moved. (Not
    /// necessarily a broker's member epoch: KIP-1071 revokes tasks without a new epoch.)
    pub epoch: u64,
    /// Tasks to process.
    pub active: Arc<BTreeSet<TaskId>>,
    /// Tasks to keep up to date from their changelogs.
    pub standby: Arc<BTreeSet<TaskId>>,
    /// Standbys placed to catch up before they become active.
    pub warmup: Arc<BTreeSet<TaskId>>,
    /// More active tasks are on their way: the member's target holds tasks another member has
    /// not revoked yet. A member with tasks pending is not idle.
    pub pending: bool,
}

impl Assignment {
    /// An assignment of active tasks only.
    pub fn active(epoch: u64, active: BTreeSet<TaskId>) -> Self {
        Assignment {
            epoch,
            active: Arc::new(active),
            ..Assignment::default()
        }
    }
}

/// One sub-topology as a coordinator (the Kafka broker) needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubtopologyInfo {
    /// The sub-topology id (`0`, `1`, …).
    pub id: u32,
    /// User topics it reads.
    pub source_topics: Vec<String>,
    /// Repartition topics it reads.
    pub repartition_source_topics: Vec<String>,
    /// Repartition topics it writes.
    pub repartition_sink_topics: Vec<String>,
    /// Changelog topics of its stores.
    pub changelog_topics: Vec<String>,
    /// The retention (ms) of the changelogs of window and session stores, by topic: Kafka
    /// Streams creates those `compact,delete` with the store's retention plus a day.
    pub windowed_changelog_retention_ms: std::collections::BTreeMap<String, i64>,
    /// Its task count (the partitions of its widest source).
    pub partitions: u32,
}

/// What a coordinator is told about the application when it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The application id: the group id.
    pub application_id: String,
    /// The stable process id from the state directory.
    pub process_id: String,
    /// The topology, sub-topology by sub-topology.
    pub subtopologies: Vec<SubtopologyInfo>,
    /// Where this instance answers interactive queries (`application_server`), for the
    /// heartbeat's `UserEndpoint`.
    pub user_endpoint: Option<HostInfo>,
    /// The application's processing guarantee: under exactly_once a backend reads committed
    /// data only.
    pub processing_guarantee: ProcessingGuarantee,
    /// The group's own settings, for a backend that coordinates the group itself (the
    /// embedded log); a Kafka broker has its own.
    pub settings: GroupSettings,
}

/// What a group coordinator run by the backend itself (the embedded log's) applies: on Kafka,
/// the broker's group configs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupSettings {
    /// Standby replicas per stateful task (`num.standby.replicas`).
    pub num_standby_replicas: u32,
    /// Warm-up tasks placed at once (`max.warmup.replicas`).
    pub max_warmup_replicas: u32,
    /// A warm-up within this many records of its changelogs' ends is caught up
    /// (`acceptable.recovery.lag`).
    pub acceptable_recovery_lag: u64,
    /// Silence after which a member is declared gone (`group.streams.session.timeout.ms`).
    pub session_timeout: Duration,
    /// How often members heartbeat (`group.streams.heartbeat.interval.ms`).
    pub heartbeat_interval: Duration,
    /// How often members resend their task offsets (`task.offset.interval.ms`).
    pub task_offset_interval: Duration,
}

impl GroupSettings {
    /// The settings `config` asks for.
    pub fn of(config: &StreamsConfig) -> Self {
        GroupSettings {
            num_standby_replicas: config.num_standby_replicas,
            max_warmup_replicas: config.max_warmup_replicas,
            acceptable_recovery_lag: config.acceptable_recovery_lag,
            session_timeout: config.group_session_timeout,
            heartbeat_interval: config.group_heartbeat_interval,
            task_offset_interval: config.task_offset_interval,
        }
    }
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings::of(&StreamsConfig::new("default"))
    }
}

impl GroupInfo {
    /// Every task of the topology.
    pub fn tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.subtopologies.iter().flat_map(|s| {
            (0..s.partitions).map(move |p| TaskId {
                subtopology: s.id,
                partition: p,
            })
        })
    }
}

/// One heartbeat of one member.
#[derive(Debug)]
#[non_exhaustive]
pub struct Heartbeat<'a> {
    /// The member (the stream thread's name).
    pub member: &'a str,
    /// The offset-sum snapshot, when the sending rules call for it (docs/design.md §4).
    pub task_offsets: Option<imbl::HashMap<TaskId, i64>>,
    /// The tasks the member owns now.
    pub owned: &'a Assignment,
}

/// The cadences a coordinator asks its members to keep (a Kafka broker sends
/// `HeartbeatIntervalMs` and `TaskOffsetIntervalMs` in every heartbeat response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupIntervals {
    /// How often to heartbeat.
    pub heartbeat: Duration,
    /// How often to resend the task offsets (docs/design.md §4, "Sending").
    pub task_offsets: Duration,
    /// A warm-up task whose changelog lag is at most this is caught up: its offsets are sent at
    /// once, so the assignor can make it active (`acceptable.recovery.lag`). `None`: the
    /// configured value stands.
    pub acceptable_recovery_lag: Option<u64>,
}

impl GroupIntervals {
    /// The same, with the coordinator's acceptable recovery lag.
    pub fn with_acceptable_recovery_lag(mut self, lag: u64) -> Self {
        self.acceptable_recovery_lag = Some(lag);
        self
    }

    /// Intervals to heartbeat and to resend task offsets at.
    pub fn new(heartbeat: Duration, task_offsets: Duration) -> Self {
        GroupIntervals {
            heartbeat,
            task_offsets,
            acceptable_recovery_lag: None,
        }
    }
}

/// Assigns tasks to members.
pub trait GroupCoordinator: Send + Sync {
    /// Announces a member before its first heartbeat, so a first assignment sees all of them.
    fn register(&self, member: &str);
    /// A member's heartbeat; returns its current assignment.
    fn heartbeat(&self, heartbeat: Heartbeat<'_>) -> Result<Assignment>;
    /// The member leaves; its tasks go to the others.
    fn leave(&self, member: &str);
    /// The intervals the coordinator asks `member` to keep, once it has said; read after each
    /// heartbeat. The task-offset interval replaces the configured one; the heartbeat interval
    /// is capped by it (a member may heartbeat more often than asked). `None` (the default):
    /// keep the configuration's.
    fn intervals(&self, _member: &str) -> Option<GroupIntervals> {
        None
    }
    /// A number that moves whenever assignments may have changed, read on every loop (so it
    /// must be O(1)); a member heartbeats at once when it moved. Coordinators that only learn
    /// of changes through heartbeats (a remote broker) keep the default.
    fn generation(&self) -> u64 {
        0
    }
    /// Every instance of the group with its endpoint and the input partitions of its active
    /// and standby tasks, as the coordinator last heard (a Kafka broker's
    /// `PartitionsByUserEndpoint`). `None` (the default): the coordinator knows no other
    /// instance (the embedded one: every task runs in this process).
    fn endpoints(&self) -> Option<Vec<StreamsMetadata>> {
        None
    }
}
