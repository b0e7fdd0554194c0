//! Where a key's state lives (Kafka Streams' `KafkaStreams#queryMetadataForKey` and
//! `metadataForAllStreamsClients`): which instance of the application runs the task holding a
//! key, so an interactive query asked of one instance can be sent on to the right one.
//!
//! Every instance names its own endpoint in `application_server` (`host:port`, where it
//! answers queries; riffle does not serve them itself). On Kafka the endpoint goes into the
//! streams-group heartbeat (`UserEndpoint`) and the broker answers with every member's
//! endpoint and the topic partitions it runs as active and standby tasks
//! (`PartitionsByUserEndpoint`); the coordinator keeps the latest such answer. On the embedded
//! log every task runs in this process, so this instance holds every key.
//!
//! A key's partition is the one the default partitioner gives its serialized bytes over the
//! partitions of its store's source topics (murmur2, as Kafka's producer and
//! [`crate::log::partition_for_key`]); the instance whose active partitions include that
//! partition of one of those topics holds the key.

use std::collections::BTreeSet;

use riffle_record::{TopicPartition, partition_for_key};

use crate::engine::instance::InstanceWiring;
use crate::serdes::SerdeRef;
use crate::types::error::{Error, Result, SerializationExceptionOrigin};
pub(crate) use crate::types::host::{HostInfo, StreamsMetadata};

/// Where one key of one store lives (Kafka's `KeyQueryMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyQueryMetadata {
    /// The instance running the key's task as active; `None` while that is not known (a
    /// rebalance is under way, the group has not answered yet, or the instance that has it set
    /// no `application_server`).
    pub active_host: Option<HostInfo>,
    /// The instances keeping the key's task as a standby.
    pub standby_hosts: BTreeSet<HostInfo>,
    /// The key's partition (its task's partition).
    pub partition: u32,
}

/// [`crate::StreamsApp::query_metadata_for_key`] and
/// [`crate::StreamsApp::metadata_for_all_streams_clients`] for another thread (an HTTP server
/// answering queries): cheap to clone, valid while the application runs.
#[derive(Clone)]
pub struct MetadataHandle {
    /// The topology, the group, its coordinator and the backend are all a lookup reads.
    pub(crate) wiring: std::sync::Arc<InstanceWiring>,
}

impl std::fmt::Debug for MetadataHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataHandle")
            .field("application_id", &self.wiring.group.application_id)
            .finish()
    }
}

impl MetadataHandle {
    /// As [`crate::StreamsApp::query_metadata_for_key`].
    pub fn query_metadata_for_key<K: 'static>(
        &self,
        store: &str,
        key: &K,
        key_serde: &SerdeRef<K>,
    ) -> Result<KeyQueryMetadata> {
        let mut bytes = Vec::new();
        if let Err(source) = key_serde.serialize(key, &mut bytes) {
            return Err(Error::SerializeState {
                store: store.to_owned(),
                origin: SerializationExceptionOrigin::Key,
                source,
            });
        }
        key_query_metadata(&self.wiring, store, &bytes)
    }

    /// As [`crate::StreamsApp::metadata_for_all_streams_clients`].
    pub fn metadata_for_all_streams_clients(&self) -> Result<Vec<StreamsMetadata>> {
        all_instances(&self.wiring)
    }
}

/// The topics a store's task reads (its sub-topology's sources, repartition topics included).
fn store_sources<'a>(wiring: &'a InstanceWiring, store: &str) -> Result<Vec<&'a str>> {
    let topology = &wiring.topology;
    let invalid = |reason: &str| Error::InvalidStateStore {
        store: store.to_owned(),
        reason: reason.to_owned(),
    };
    let index = topology
        .stores
        .iter()
        .position(|s| s.name == store)
        .ok_or_else(|| invalid("the topology has no store of that name"))?;
    let sub = topology
        .subtopologies
        .iter()
        .position(|s| s.stores.contains(&index))
        .ok_or_else(|| invalid("no processor uses it"))?;
    let info = wiring
        .group
        .subtopologies
        .iter()
        .find(|s| s.id as usize == sub)
        .ok_or_else(|| invalid("its sub-topology is not in the group"))?;
    Ok(info
        .source_topics
        .iter()
        .chain(&info.repartition_source_topics)
        .map(String::as_str)
        .collect())
}

/// Every instance the group knows, this one included: from the coordinator's latest answer,
/// else (the embedded log: every task is here) this instance with every partition of the
/// topology's sources, if it has an `application_server`.
pub(crate) fn all_instances(wiring: &InstanceWiring) -> Result<Vec<StreamsMetadata>> {
    if let Some(endpoints) = wiring.coordinator.endpoints() {
        return Ok(endpoints);
    }
    let Some(host) = wiring.group.user_endpoint.clone() else {
        return Ok(Vec::new());
    };
    let mut active = BTreeSet::new();
    for sub in &wiring.group.subtopologies {
        for topic in sub
            .source_topics
            .iter()
            .chain(&sub.repartition_source_topics)
        {
            let partitions = wiring.backend.partitions(topic)?.unwrap_or(0);
            active.extend((0..partitions).map(|p| TopicPartition::new(topic.as_str(), p)));
        }
    }
    Ok(vec![StreamsMetadata::new(host, active, BTreeSet::new())])
}

/// Where the key serialized as `key` of store `store` lives.
pub(crate) fn key_query_metadata(
    wiring: &InstanceWiring,
    store: &str,
    key: &[u8],
) -> Result<KeyQueryMetadata> {
    let sources = store_sources(wiring, store)?;
    let mut partitions = None;
    for topic in &sources {
        if let Some(n) = wiring.backend.partitions(topic)? {
            partitions = Some(partitions.map_or(n, |m: u32| m.max(n)));
        }
    }
    let partitions = partitions
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::UnknownTopic {
            topic: sources.join(", "),
        })?;
    let partition = partition_for_key(key, partitions);
    let holds = |set: &BTreeSet<TopicPartition>| {
        sources
            .iter()
            .any(|t| set.contains(&TopicPartition::new(*t, partition)))
    };
    let mut meta = KeyQueryMetadata {
        active_host: None,
        standby_hosts: BTreeSet::new(),
        partition,
    };
    for instance in all_instances(wiring)? {
        if holds(&instance.active_partitions) {
            meta.active_host = Some(instance.host_info.clone());
        }
        if holds(&instance.standby_partitions) {
            meta.standby_hosts.insert(instance.host_info);
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_info_parses_host_and_port_and_refuses_the_rest() {
        assert_eq!(
            "localhost:8080".parse::<HostInfo>().expect("host:port"),
            HostInfo::new("localhost", 8080)
        );
        assert_eq!(
            "[::1]:9".parse::<HostInfo>().expect("IPv6"),
            HostInfo::new("::1", 9)
        );
        for bad in ["localhost", ":80", "h:99999", "h:x", ""] {
            let e = bad.parse::<HostInfo>().expect_err("refused");
            assert!(e.to_string().contains("host:port"), "{bad}: {e}");
        }
        assert_eq!(HostInfo::new("a", 1).to_string(), "a:1");
        assert_eq!(HostInfo::new("::1", 9).to_string(), "[::1]:9");
        for unreachable in ["0.0.0.0:80", "[::]:80", "localhost:0"] {
            let h: HostInfo = unreachable.parse().expect("parses");
            let e = h.check_reachable().expect_err("unreachable");
            assert!(e.to_string().contains("can reach"), "{e}");
        }
        HostInfo::new("localhost", 80)
            .check_reachable()
            .expect("reachable");
    }
}
