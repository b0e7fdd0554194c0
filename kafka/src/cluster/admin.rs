//! Administration of topics and groups, as Kafka's admin client does it: every topic
//! (Metadata for all), DeleteTopics, and a group's committed offsets read and replaced while
//! the group has no members (OffsetFetch for every topic, OffsetCommit with member epoch -1) —
//! what `riffle reset` needs.

use kafka_protocol::messages::{
    DeleteTopicsRequest, MetadataRequest, TopicName, delete_topics_request,
};
use riffle_record::TopicPartition;

use super::{Cluster, name, versions};
use crate::error::{Error, ErrorCode, Result};

impl Cluster {
    /// Every topic of the cluster and its partition count, sorted by name (internal topics
    /// such as `__consumer_offsets` included).
    pub(crate) fn list_topics(&self) -> Result<Vec<(String, u32)>> {
        let mut request = MetadataRequest::default();
        request.topics = None;
        request.allow_auto_topic_creation = false;
        let client_id = self.config.client_id.clone();
        let response =
            self.with_any_broker(|c| c.send("Metadata", &client_id, &request, versions::METADATA))?;
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
        let client_id = self.config.client_id.clone();
        let response = self.with_any_broker(|c| {
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
        let mut out: Vec<(TopicPartition, u64)> = self
            .fetch_offsets(group, None, &format!("group {group}"))?
            .into_iter()
            .filter_map(|(tp, offset)| Some((tp, offset?)))
            .collect();
        out.sort();
        Ok(out)
    }
}
