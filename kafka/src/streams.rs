//! The streams-group messages (KIP-1071) that `kafka-protocol` has no types for, encoded from
//! the Kafka 4.4 schemas (`docs/kafka-streams-group-protocol.md` §4, §5, §7):
//! StreamsGroupHeartbeat (API key 88, v0–v1) and StreamsGroupDescribe (89, v0).
//!
//! Requests are written straight into a byte buffer; responses are decoded by a [`Reader`]
//! that rejects truncated or trailing bytes. Nothing here does I/O.

use kafka_protocol::error::ResponseError;

use crate::error::Result;
use crate::wire::{
    Reader, put_array_len, put_null_array, put_nullable_str, put_str, put_str_array, put_tags,
};

/// StreamsGroupHeartbeat's API key.
pub(crate) const HEARTBEAT_KEY: i16 = 88;
/// StreamsGroupDescribe's API key.
pub(crate) const DESCRIBE_KEY: i16 = 89;

/// A topic the group coordinator may create: a changelog or a repartition topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    pub(crate) name: String,
    /// 0 = let the broker decide (required for changelogs).
    pub(crate) partitions: i32,
    pub(crate) configs: Vec<(String, String)>,
}

/// One sub-topology as the heartbeat describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subtopology {
    pub(crate) id: String,
    pub(crate) source_topics: Vec<String>,
    pub(crate) changelog_topics: Vec<TopicInfo>,
    pub(crate) repartition_sink_topics: Vec<String>,
    pub(crate) repartition_source_topics: Vec<TopicInfo>,
    /// Index lists into `source_topics` and `repartition_source_topics`.
    pub(crate) copartition_groups: Vec<(Vec<i16>, Vec<i16>)>,
}

/// The topology sent when joining.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Topology {
    pub(crate) epoch: i32,
    pub(crate) subtopologies: Vec<Subtopology>,
}

/// Tasks of one sub-topology: `TaskIds` on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TaskIds {
    /// The sub-topology id.
    pub subtopology: String,
    /// Its partitions (task = sub-topology × partition).
    pub partitions: Vec<i32>,
}

/// One task's offset (sum): `TaskOffset` on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskOffset {
    /// The sub-topology id.
    pub subtopology: String,
    /// The partition.
    pub partition: i32,
    /// The task's changelog offset sum (or end-offset sum).
    pub offset: i64,
}

/// A StreamsGroupHeartbeat request. `None` lists are sent as null ("unchanged").
#[derive(Debug)]
pub(crate) struct HeartbeatRequest<'a> {
    pub(crate) group_id: &'a str,
    pub(crate) member_id: &'a str,
    pub(crate) member_epoch: i32,
    pub(crate) endpoint_information_epoch: i32,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) topology: Option<&'a Topology>,
    /// Active, standby and warm-up tasks: all three or none.
    pub(crate) owned: Option<[&'a [TaskIds]; 3]>,
    pub(crate) process_id: Option<&'a str>,
    /// Where the member answers interactive queries (host, port); `None`: none or unchanged.
    pub(crate) user_endpoint: Option<(&'a str, u16)>,
    pub(crate) client_tags: Option<&'a [(String, String)]>,
    pub(crate) task_offsets: Option<&'a [TaskOffset]>,
    pub(crate) task_end_offsets: Option<&'a [TaskOffset]>,
    pub(crate) shutdown_application: bool,
}

fn put_topic_info(b: &mut Vec<u8>, t: &TopicInfo) {
    put_str(b, &t.name);
    b.extend_from_slice(&t.partitions.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes()); // replication factor: broker default
    put_array_len(b, t.configs.len());
    for (k, v) in &t.configs {
        put_str(b, k);
        put_str(b, v);
        put_tags(b);
    }
    put_tags(b);
}

fn put_i16_array(b: &mut Vec<u8>, items: &[i16]) {
    put_array_len(b, items.len());
    for i in items {
        b.extend_from_slice(&i.to_be_bytes());
    }
}

fn put_task_ids(b: &mut Vec<u8>, tasks: &[TaskIds]) {
    put_array_len(b, tasks.len());
    for t in tasks {
        put_str(b, &t.subtopology);
        put_array_len(b, t.partitions.len());
        for p in &t.partitions {
            b.extend_from_slice(&p.to_be_bytes());
        }
        put_tags(b);
    }
}

fn put_task_offsets(b: &mut Vec<u8>, offsets: Option<&[TaskOffset]>) {
    let Some(offsets) = offsets else {
        return put_null_array(b);
    };
    put_array_len(b, offsets.len());
    for o in offsets {
        put_str(b, &o.subtopology);
        b.extend_from_slice(&o.partition.to_be_bytes());
        b.extend_from_slice(&o.offset.to_be_bytes());
        put_tags(b);
    }
}

impl HeartbeatRequest<'_> {
    /// The request body (the same in v0 and v1).
    pub(crate) fn encode(&self, b: &mut Vec<u8>) {
        put_str(b, self.group_id);
        put_str(b, self.member_id);
        b.extend_from_slice(&self.member_epoch.to_be_bytes());
        b.extend_from_slice(&self.endpoint_information_epoch.to_be_bytes());
        put_nullable_str(b, None); // InstanceId: riffle members are dynamic
        put_nullable_str(b, None); // RackId
        b.extend_from_slice(&self.rebalance_timeout_ms.to_be_bytes());
        match self.topology {
            None => b.push(0xff),
            Some(t) => {
                b.push(1);
                b.extend_from_slice(&t.epoch.to_be_bytes());
                put_array_len(b, t.subtopologies.len());
                for s in &t.subtopologies {
                    put_str(b, &s.id);
                    put_str_array(b, &s.source_topics);
                    put_array_len(b, 0); // SourceTopicRegex: not supported by 4.4
                    put_array_len(b, s.changelog_topics.len());
                    for c in &s.changelog_topics {
                        put_topic_info(b, c);
                    }
                    put_str_array(b, &s.repartition_sink_topics);
                    put_array_len(b, s.repartition_source_topics.len());
                    for r in &s.repartition_source_topics {
                        put_topic_info(b, r);
                    }
                    put_array_len(b, s.copartition_groups.len());
                    for (sources, repartition) in &s.copartition_groups {
                        put_i16_array(b, sources);
                        put_i16_array(b, &[]);
                        put_i16_array(b, repartition);
                        put_tags(b);
                    }
                    put_tags(b);
                }
                put_tags(b);
            }
        }
        match self.owned {
            Some(lists) => {
                for list in lists {
                    put_task_ids(b, list);
                }
            }
            None => (0..3).for_each(|_| put_null_array(b)),
        }
        put_nullable_str(b, self.process_id);
        match self.user_endpoint {
            None => b.push(0xff),
            Some((host, port)) => {
                b.push(1);
                put_str(b, host);
                b.extend_from_slice(&port.to_be_bytes());
                put_tags(b);
            }
        }
        match self.client_tags {
            Some(tags) => {
                put_array_len(b, tags.len());
                for (k, v) in tags {
                    put_str(b, k);
                    put_str(b, v);
                    put_tags(b);
                }
            }
            None => put_null_array(b),
        }
        put_task_offsets(b, self.task_offsets);
        put_task_offsets(b, self.task_end_offsets);
        b.push(u8::from(self.shutdown_application));
        put_tags(b);
    }
}

/// A group condition the broker reports in every heartbeat response (`StatusCode`, KIP-1071).
/// None of them is an error; while the topics are missing no tasks are assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatusCode {
    /// The group runs a newer topology epoch than this member's.
    StaleTopology,
    /// Source topics do not exist (the detail names them).
    MissingSourceTopics,
    /// Co-partitioned topics or changelogs have the wrong partition counts.
    IncorrectlyPartitionedTopics,
    /// The broker is creating the internal topics (seen once on every first join).
    MissingInternalTopics,
    /// A member sent `ShutdownApplication`: every member must stop.
    ShutdownApplication,
    /// The (initial) assignment is delayed: `group.streams.initial.rebalance.delay.ms` or
    /// `group.streams.assignment.interval.ms` is running.
    AssignmentDelayed,
    /// Rack-aware standby placement needs client tags this member did not send (v1).
    MissingClientTags,
    /// A code newer than Kafka 4.4.
    Unknown(i8),
}

impl StatusCode {
    /// The status of wire code `code`.
    pub(crate) fn from_code(code: i8) -> Self {
        match code {
            0 => Self::StaleTopology,
            1 => Self::MissingSourceTopics,
            2 => Self::IncorrectlyPartitionedTopics,
            3 => Self::MissingInternalTopics,
            4 => Self::ShutdownApplication,
            5 => Self::AssignmentDelayed,
            6 => Self::MissingClientTags,
            other => Self::Unknown(other),
        }
    }

    /// The wire code.
    pub(crate) fn code(self) -> i8 {
        match self {
            Self::StaleTopology => 0,
            Self::MissingSourceTopics => 1,
            Self::IncorrectlyPartitionedTopics => 2,
            Self::MissingInternalTopics => 3,
            Self::ShutdownApplication => 4,
            Self::AssignmentDelayed => 5,
            Self::MissingClientTags => 6,
            Self::Unknown(code) => code,
        }
    }

    /// Kafka's name for it.
    fn name(self) -> &'static str {
        match self {
            Self::StaleTopology => "STALE_TOPOLOGY",
            Self::MissingSourceTopics => "MISSING_SOURCE_TOPICS",
            Self::IncorrectlyPartitionedTopics => "INCORRECTLY_PARTITIONED_TOPICS",
            Self::MissingInternalTopics => "MISSING_INTERNAL_TOPICS",
            Self::ShutdownApplication => "SHUTDOWN_APPLICATION",
            Self::AssignmentDelayed => "ASSIGNMENT_DELAYED",
            Self::MissingClientTags => "MISSING_CLIENT_TAGS",
            Self::Unknown(_) => "unknown status",
        }
    }
}

impl std::fmt::Display for StatusCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// A group condition the broker reports in every heartbeat response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) code: StatusCode,
    pub(crate) detail: String,
}

/// A StreamsGroupHeartbeat response. `None` task lists mean "unchanged".
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeartbeatResponse {
    /// `None`: no error.
    pub(crate) error: Option<ResponseError>,
    pub(crate) error_message: Option<String>,
    pub(crate) member_epoch: i32,
    pub(crate) heartbeat_interval_ms: i32,
    pub(crate) task_offset_interval_ms: i32,
    pub(crate) acceptable_recovery_lag: i64,
    pub(crate) status: Option<Vec<Status>>,
    pub(crate) active: Option<Vec<TaskIds>>,
    pub(crate) standby: Option<Vec<TaskIds>>,
    pub(crate) warmup: Option<Vec<TaskIds>>,
    pub(crate) endpoint_information_epoch: i32,
    /// Every member's endpoint and partitions; `None`: unchanged since the last answer.
    pub(crate) partitions_by_user_endpoint: Option<Vec<EndpointPartitions>>,
}

/// One member's query endpoint and the topic partitions of its tasks (`EndpointToPartitions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EndpointPartitions {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// (topic, partitions) of its active tasks.
    pub(crate) active: Vec<(String, Vec<i32>)>,
    /// Of its standby tasks.
    pub(crate) standby: Vec<(String, Vec<i32>)>,
}

fn read_task_ids(r: &mut Reader<'_>) -> Result<TaskIds> {
    let subtopology = r.str("TaskIds.SubtopologyId")?;
    let partitions = r.vec("TaskIds.Partitions", |r| r.i32("partition"))?;
    r.tags("TaskIds tags")?;
    Ok(TaskIds {
        subtopology,
        partitions,
    })
}

fn read_task_offset(r: &mut Reader<'_>) -> Result<TaskOffset> {
    let subtopology = r.str("TaskOffset.SubtopologyId")?;
    let partition = r.i32("TaskOffset.Partition")?;
    let offset = r.i64("TaskOffset.Offset")?;
    r.tags("TaskOffset tags")?;
    Ok(TaskOffset {
        subtopology,
        partition,
        offset,
    })
}

fn read_endpoint(r: &mut Reader<'_>) -> Result<(String, u16)> {
    let host = r.str("Endpoint.Host")?;
    let port = r.u16("Endpoint.Port")?;
    r.tags("Endpoint tags")?;
    Ok((host, port))
}

fn read_topic_partitions(r: &mut Reader<'_>) -> Result<Vec<(String, Vec<i32>)>> {
    r.vec("TopicPartition", |r| {
        let topic = r.str("TopicPartition.Topic")?;
        let partitions = r.vec("TopicPartition.Partitions", |r| r.i32("partition"))?;
        r.tags("TopicPartition tags")?;
        Ok((topic, partitions))
    })
}

impl HeartbeatResponse {
    /// Decodes a response body of `version` (0 or 1).
    pub(crate) fn decode(body: &[u8], version: i16) -> Result<Self> {
        let r = &mut Reader::new(body, "StreamsGroupHeartbeat response");
        r.i32("ThrottleTimeMs")?;
        let error = ResponseError::try_from_code(r.i16("ErrorCode")?);
        let error_message = r.nullable_str("ErrorMessage")?;
        r.str("MemberId")?;
        let member_epoch = r.i32("MemberEpoch")?;
        let heartbeat_interval_ms = r.i32("HeartbeatIntervalMs")?;
        let mut acceptable_recovery_lag = -1;
        if version == 0 {
            acceptable_recovery_lag = i64::from(r.i32("AcceptableRecoveryLagLegacy")?);
        }
        let task_offset_interval_ms = r.i32("TaskOffsetIntervalMs")?;
        if version >= 1 {
            acceptable_recovery_lag = r.i64("AcceptableRecoveryLag")?;
        }
        let status = r.nullable_vec("Status", |r| {
            let code = StatusCode::from_code(r.i8("Status.StatusCode")?);
            let detail = r.str("Status.StatusDetail")?;
            r.tags("Status tags")?;
            Ok(Status { code, detail })
        })?;
        let active = r.nullable_vec("ActiveTasks", read_task_ids)?;
        let standby = r.nullable_vec("StandbyTasks", read_task_ids)?;
        let warmup = r.nullable_vec("WarmupTasks", read_task_ids)?;
        if version >= 1 {
            r.bool("TopologyDescriptionRequired")?;
        }
        let endpoint_information_epoch = r.i32("EndpointInformationEpoch")?;
        let partitions_by_user_endpoint = r.nullable_vec("PartitionsByUserEndpoint", |r| {
            let (host, port) = read_endpoint(r)?;
            let active = read_topic_partitions(r)?;
            let standby = read_topic_partitions(r)?;
            r.tags("EndpointToPartitions tags")?;
            Ok(EndpointPartitions {
                host,
                port,
                active,
                standby,
            })
        })?;
        r.tags("response tags")?;
        r.finish()?;
        Ok(HeartbeatResponse {
            error,
            error_message,
            member_epoch,
            heartbeat_interval_ms,
            task_offset_interval_ms,
            acceptable_recovery_lag,
            status,
            active,
            standby,
            warmup,
            endpoint_information_epoch,
            partitions_by_user_endpoint,
        })
    }
}

/// The StreamsGroupDescribe v0 request body for `groups`.
pub(crate) fn encode_describe(b: &mut Vec<u8>, groups: &[&str]) {
    put_str_array(b, groups);
    b.push(0); // IncludeAuthorizedOperations
    put_tags(b);
}

/// A member's tasks, as StreamsGroupDescribe shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescribedTasks {
    /// Active tasks.
    pub active: Vec<TaskIds>,
    /// Standby tasks.
    pub standby: Vec<TaskIds>,
    /// Warm-up tasks.
    pub warmup: Vec<TaskIds>,
}

/// One member of a streams group, as the broker describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescribedMember {
    /// The member id.
    pub member_id: String,
    /// Its epoch.
    pub member_epoch: i32,
    /// The client id of its requests.
    pub client_id: String,
    /// Where it connects from.
    pub client_host: String,
    /// The process it belongs to.
    pub process_id: String,
    /// The task offsets it last reported (the offset-sum snapshot).
    pub task_offsets: Vec<TaskOffset>,
    /// The task end offsets it last reported.
    pub task_end_offsets: Vec<TaskOffset>,
    /// The tasks it owns.
    pub assignment: DescribedTasks,
    /// The tasks the assignor wants it to own.
    pub target_assignment: DescribedTasks,
}

/// A streams group, as StreamsGroupDescribe returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamsGroupDescription {
    /// The group id.
    pub group_id: String,
    /// `Empty`, `NotReady`, `Assigning`, `Reconciling`, `Stable` or `Dead`.
    pub state: String,
    /// The group epoch.
    pub group_epoch: i32,
    /// The target assignment's epoch.
    pub assignment_epoch: i32,
    /// Sub-topology ids of the group's topology, if it has one.
    pub subtopologies: Vec<String>,
    /// The members.
    pub members: Vec<DescribedMember>,
}

fn read_tasks(r: &mut Reader<'_>) -> Result<DescribedTasks> {
    let active = r.vec("ActiveTasks", read_task_ids)?;
    let standby = r.vec("StandbyTasks", read_task_ids)?;
    let warmup = r.vec("WarmupTasks", read_task_ids)?;
    r.tags("Assignment tags")?;
    Ok(DescribedTasks {
        active,
        standby,
        warmup,
    })
}

fn read_topic_info(r: &mut Reader<'_>) -> Result<()> {
    r.str("TopicInfo.Name")?;
    r.i32("TopicInfo.Partitions")?;
    r.i16("TopicInfo.ReplicationFactor")?;
    r.vec("TopicInfo.TopicConfigs", |r| {
        r.str("Key")?;
        r.str("Value")?;
        r.tags("KeyValue tags")
    })?;
    r.tags("TopicInfo tags")
}

/// A group the broker could not describe: its id, error code and message.
pub(crate) type DescribeError = (String, i16, Option<String>);

/// Decodes a StreamsGroupDescribe v0 response: one description or error per group.
pub(crate) fn decode_describe(
    body: &[u8],
) -> Result<Vec<std::result::Result<StreamsGroupDescription, DescribeError>>> {
    let r = &mut Reader::new(body, "StreamsGroupDescribe response");
    r.i32("ThrottleTimeMs")?;
    let groups = r.vec("Groups", |r| {
        let error_code = r.i16("ErrorCode")?;
        let error_message = r.nullable_str("ErrorMessage")?;
        let group_id = r.str("GroupId")?;
        let state = r.str("GroupState")?;
        let group_epoch = r.i32("GroupEpoch")?;
        let assignment_epoch = r.i32("AssignmentEpoch")?;
        let mut subtopologies = Vec::new();
        if r.present("Topology")? {
            r.i32("Topology.Epoch")?;
            let subs = r.nullable_vec("Topology.Subtopologies", |r| {
                let id = r.str("SubtopologyId")?;
                r.vec("SourceTopics", |r| r.str("topic"))?;
                r.vec("RepartitionSinkTopics", |r| r.str("topic"))?;
                r.vec("StateChangelogTopics", read_topic_info)?;
                r.vec("RepartitionSourceTopics", read_topic_info)?;
                r.tags("Subtopology tags")?;
                Ok(id)
            })?;
            subtopologies = subs.unwrap_or_default();
            r.tags("Topology tags")?;
        }
        let members = r.vec("Members", |r| {
            let member_id = r.str("MemberId")?;
            let member_epoch = r.i32("MemberEpoch")?;
            r.nullable_str("InstanceId")?;
            r.nullable_str("RackId")?;
            let client_id = r.str("ClientId")?;
            let client_host = r.str("ClientHost")?;
            r.i32("TopologyEpoch")?;
            let process_id = r.str("ProcessId")?;
            if r.present("UserEndpoint")? {
                read_endpoint(r)?;
            }
            r.vec("ClientTags", |r| {
                r.str("Key")?;
                r.str("Value")?;
                r.tags("KeyValue tags")
            })?;
            let task_offsets = r.vec("TaskOffsets", read_task_offset)?;
            let task_end_offsets = r.vec("TaskEndOffsets", read_task_offset)?;
            let assignment = read_tasks(r)?;
            let target_assignment = read_tasks(r)?;
            r.bool("IsClassic")?;
            r.tags("Member tags")?;
            Ok(DescribedMember {
                member_id,
                member_epoch,
                client_id,
                client_host,
                process_id,
                task_offsets,
                task_end_offsets,
                assignment,
                target_assignment,
            })
        })?;
        r.i32("AuthorizedOperations")?;
        r.tags("DescribedGroup tags")?;
        Ok(if error_code != 0 {
            Err((group_id, error_code, error_message))
        } else {
            Ok(StreamsGroupDescription {
                group_id,
                state,
                group_epoch,
                assignment_epoch,
                subtopologies,
                members,
            })
        })
    })?;
    r.tags("response tags")?;
    r.finish()?;
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// The join of `docs/kafka-streams-group-protocol.md` §10, accepted by Kafka 4.4.0.
    #[test]
    fn join_matches_the_golden_bytes() {
        let topology = Topology {
            epoch: 0,
            subtopologies: vec![Subtopology {
                id: "0".into(),
                source_topics: vec!["smoke-in".into()],
                changelog_topics: vec![TopicInfo {
                    name: "app1-store-changelog".into(),
                    partitions: 0,
                    configs: vec![],
                }],
                repartition_sink_topics: vec![],
                repartition_source_topics: vec![],
                copartition_groups: vec![],
            }],
        };
        let mut b = Vec::new();
        HeartbeatRequest {
            group_id: "app1",
            member_id: "m1",
            member_epoch: 0,
            endpoint_information_epoch: 0,
            rebalance_timeout_ms: 30_000,
            topology: Some(&topology),
            owned: Some([&[], &[], &[]]),
            process_id: Some("p1"),
            user_endpoint: None,
            client_tags: Some(&[]),
            task_offsets: Some(&[]),
            task_end_offsets: Some(&[]),
            shutdown_application: false,
        }
        .encode(&mut b);
        let golden = hex("05 61707031  03 6d31  00000000  00000000  00  00  00007530
             01 00000000 02
                02 30  02 09 736d6f6b652d696e  01
                02 15 617070312d73746f72652d6368616e67656c6f67 00000000 0000 01 00
                01 01 01 00
                00
             01 01 01
             03 7031  ff  01 01 01  00  00");
        assert_eq!(b, golden);
    }

    #[test]
    fn steady_heartbeat_and_leave_match_the_golden_bytes() {
        let mut b = Vec::new();
        HeartbeatRequest {
            group_id: "app1",
            member_id: "m1",
            member_epoch: 2,
            endpoint_information_epoch: 0,
            rebalance_timeout_ms: -1,
            topology: None,
            owned: Some([&[], &[], &[]]),
            process_id: None,
            user_endpoint: None,
            client_tags: None,
            task_offsets: None,
            task_end_offsets: None,
            shutdown_application: false,
        }
        .encode(&mut b);
        assert_eq!(
            b,
            hex("05617070 31036d31 00000002 00000000 0000ffff ffffff01 010100ff 00000000 00")
        );
        b.clear();
        HeartbeatRequest {
            group_id: "app1",
            member_id: "m1",
            member_epoch: -1,
            endpoint_information_epoch: 0,
            rebalance_timeout_ms: -1,
            topology: None,
            owned: None,
            process_id: None,
            user_endpoint: None,
            client_tags: None,
            task_offsets: None,
            task_end_offsets: None,
            shutdown_application: false,
        }
        .encode(&mut b);
        assert_eq!(
            b,
            hex("0561707031036d31ffffffff000000000000ffffffffff00000000ff0000000000")
        );
    }

    #[test]
    fn a_user_endpoint_and_the_endpoint_map_match_the_golden_bytes() {
        let mut b = Vec::new();
        HeartbeatRequest {
            group_id: "app1",
            member_id: "m1",
            member_epoch: 2,
            endpoint_information_epoch: 0,
            rebalance_timeout_ms: -1,
            topology: None,
            owned: None,
            process_id: None,
            user_endpoint: Some(("h", 8080)),
            client_tags: None,
            task_offsets: None,
            task_end_offsets: None,
            shutdown_application: false,
        }
        .encode(&mut b);
        // ... ProcessId null, UserEndpoint present: "h", port 0x1f90, no tags; ClientTags null.
        assert_eq!(
            b,
            hex(
                "05617070 31036d31 00000002 00000000 0000ffff ffffff 000000 00 01 0268 1f90 00 00 00 00 00 00"
            )
        );
        // A v1 response with one endpoint: active in-[0,2], standby in-[1].
        let mut r = hex("00000000 0000 00 03 6d31 00000003 00001388 0000ea60 0000000000002710");
        r.extend(hex("00 00 00 00 00")); // status, active, standby, warm-up null; no description
        r.extend(hex("00000007")); // EndpointInformationEpoch
        r.extend(hex("02 0268 1f90 00")); // one entry: endpoint h:8080
        r.extend(hex("02 03 696e 03 00000000 00000002 00")); // active
        r.extend(hex("02 03 696e 02 00000001 00")); // standby
        r.extend(hex("00 00"));
        let decoded = HeartbeatResponse::decode(&r, 1).expect("decodes");
        assert_eq!(decoded.endpoint_information_epoch, 7);
        assert_eq!(
            decoded.partitions_by_user_endpoint,
            Some(vec![EndpointPartitions {
                host: "h".into(),
                port: 8080,
                active: vec![("in".into(), vec![0, 2])],
                standby: vec![("in".into(), vec![1])],
            }])
        );
        for cut in 0..r.len() {
            assert!(
                HeartbeatResponse::decode(&r[..cut], 1).is_err(),
                "cut at {cut}"
            );
        }
    }

    fn response_v1(active: &[u8]) -> Vec<u8> {
        let mut b = hex("00000000 0000 00 03 6d31 00000003 00001388 0000ea60 0000000000002710");
        b.extend(hex("02 03 0f 4d697373696e6720746f70696373 00")); // one status
        b.extend_from_slice(active);
        b.extend(hex("00 00 00 00000000 00 00"));
        b
    }

    #[test]
    fn heartbeat_response_v1_decodes_and_rejects_trailing_bytes() {
        // Active [{"0", [0, 2]}], standby/warm-up null.
        let active = hex("02 02 30 03 00000000 00000002 00");
        let b = response_v1(&active);
        let r = HeartbeatResponse::decode(&b, 1).expect("decodes");
        assert_eq!(r.member_epoch, 3);
        assert_eq!(r.heartbeat_interval_ms, 5_000);
        assert_eq!(r.task_offset_interval_ms, 60_000);
        assert_eq!(r.acceptable_recovery_lag, 10_000);
        assert_eq!(
            r.status,
            Some(vec![Status {
                code: StatusCode::MissingInternalTopics,
                detail: "Missing topics".into()
            }])
        );
        assert_eq!(
            r.active,
            Some(vec![TaskIds {
                subtopology: "0".into(),
                partitions: vec![0, 2]
            }])
        );
        assert_eq!((r.standby.clone(), r.warmup.clone()), (None, None));
        let mut long = b.clone();
        long.push(0);
        assert!(HeartbeatResponse::decode(&long, 1).is_err());
        for cut in 0..b.len() {
            assert!(
                HeartbeatResponse::decode(&b[..cut], 1).is_err(),
                "cut at {cut}"
            );
        }
    }
}
