//! Administration of topics and groups, as Kafka's admin client does it: every topic
//! (Metadata for all), DeleteTopics, and a group's committed offsets read and replaced while
//! the group has no members (OffsetFetch for every topic, OffsetCommit with member epoch -1) —
//! what `riffle reset` needs.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    DeleteTopicsRequest, GroupId, MetadataRequest, OffsetFetchRequest, TopicName,
    delete_topics_request, offset_fetch_request,
};
use riffle_log::TopicPartition;

use super::{Cluster, is_coordinator_error, name, versions};
use crate::error::{Error, ErrorCode, Result};

impl Cluster {
    /// Every topic of the cluster and its partition count, sorted by name (internal topics
    /// such as `__consumer_offsets` included).
    pub(crate) fn list_topics(&self) -> Result<Vec<(String, u32)>> {
        let mut request = MetadataRequest::default();
        request.topics = None;
        request.allow_auto_topic_creation = false;
        let broker = self.any_broker();
        let client_id = self.config.client_id.clone();
        let response = self.with_connection(&broker, |c| {
            c.send("Metadata", &client_id, &request, versions::METADATA)
        })?;
        let mut out: Vec<(String, u32)> = response
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .filter_map(|t| {
                let name = t.name.as_ref()?.0.as_str().to_owned();
                Some((name, t.partitions.len() as u32))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes `topics` (DeleteTopics); a topic that does not exist is not an error.
    pub(crate) fn delete_topics(&self, topics: &[String]) -> Result<()> {
        if topics.is_empty() {
            return Ok(());
        }
        let mut request = DeleteTopicsRequest::default();
        request.topics = topics
            .iter()
            .map(|t| {
                let mut state = delete_topics_request::DeleteTopicState::default();
                state.name = Some(TopicName(name(t)));
                state
            })
            .collect();
        request.timeout_ms = self.config.request_timeout.as_millis() as i32;
        let broker = self.any_broker();
        let client_id = self.config.client_id.clone();
        let response = self.with_connection(&broker, |c| {
            c.send(
                "DeleteTopics",
                &client_id,
                &request,
                versions::DELETE_TOPICS,
            )
        })?;
        for r in &response.responses {
            let topic = r.name.as_ref().map_or("", |n| n.0.as_str());
            match r.error_code {
                0 => tracing::info!(topic, "deleted topic"),
                3 => {} // UNKNOWN_TOPIC_OR_PARTITION
                code => {
                    return Err(Error::Broker {
                        api: "DeleteTopics",
                        context: format!("topic {topic}"),
                        code: ErrorCode(code),
                        message: r.error_message.as_ref().map(|m| m.to_string()),
                    });
                }
            }
            self.forget_topic(topic);
        }
        Ok(())
    }

    /// Every offset `group` committed (OffsetFetch for all topics), sorted.
    pub(crate) fn group_offsets(&self, group: &str) -> Result<Vec<(TopicPartition, u64)>> {
        let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
        g.group_id = GroupId(name(group));
        g.member_id = None;
        g.member_epoch = -1;
        g.topics = None;
        let mut request = OffsetFetchRequest::default();
        request.groups = vec![g];
        request.require_stable = true;
        let deadline = Instant::now() + self.config.request_timeout;
        loop {
            let broker = self.coordinator(group)?;
            let client_id = self.config.client_id.clone();
            let response = self
                .with_connection(&broker, |c| {
                    c.send("OffsetFetch", &client_id, &request, versions::OFFSET_FETCH)
                })
                .inspect_err(|_| self.forget_coordinator(group))?;
            let g = response.groups.first().ok_or_else(|| Error::Decode {
                api: "OffsetFetch",
                reason: format!("no result for group {group}"),
            })?;
            let code = if g.error_code != 0 {
                g.error_code
            } else {
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.error_code)
                    .find(|&c| c != 0)
                    .unwrap_or(0)
            };
            if code == 0 {
                let mut out: Vec<(TopicPartition, u64)> = g
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .filter(|p| p.committed_offset >= 0)
                            .map(|p| {
                                (
                                    TopicPartition::new(
                                        t.name.0.as_str(),
                                        p.partition_index as u32,
                                    ),
                                    p.committed_offset as u64,
                                )
                            })
                    })
                    .collect();
                out.sort();
                return Ok(out);
            }
            if (code == 88 || is_coordinator_error(code)) && Instant::now() < deadline {
                if is_coordinator_error(code) {
                    self.forget_coordinator(group);
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            return Err(Error::Broker {
                api: "OffsetFetch",
                context: format!("group {group}"),
                code: ErrorCode(code),
                message: None,
            });
        }
    }
}
