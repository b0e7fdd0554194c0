//! [`KafkaCluster`]: several brokers forming one KRaft cluster, each node broker and
//! controller, for tests of broker failures.

use std::net::TcpListener;

use crate::broker::{Error, KafkaBroker, KafkaBrokerBuilder, NodeSpec, Result};

/// A cluster of `n` nodes on loopback (each broker and controller, a quorum of all of them),
/// with the replication a production cluster has: topics and the internal topics replicated
/// to every node, `min.insync.replicas` one less. Stopped and deleted on drop.
#[derive(Debug)]
pub struct KafkaCluster {
    nodes: Vec<KafkaBroker>,
    bootstrap: String,
}

/// A Kafka cluster id, as `kafka-storage.sh random-uuid` makes one: a random UUID's 16 bytes
/// in base64url without padding.
fn random_cluster_id() -> Result<String> {
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes()))
}

impl KafkaCluster {
    /// Starts `n` nodes (at least 3 for a quorum that survives one failure) with `builder`'s
    /// settings and waits until every one serves clients.
    pub fn start(n: usize, builder: KafkaBrokerBuilder) -> Result<KafkaCluster> {
        let replicas = n.to_string();
        let min_isr = n.saturating_sub(1).max(1).to_string();
        let builder = builder
            .config("default.replication.factor", &replicas)
            .config("min.insync.replicas", &min_isr)
            .config("offsets.topic.replication.factor", &replicas)
            .config("transaction.state.log.replication.factor", &replicas)
            .config("transaction.state.log.min.isr", &min_isr);
        // The controller ports go into every node's voter list, so they are chosen first (held
        // open together so that no two are the same).
        let listeners: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()
            .map_err(|source| Error::Io {
                what: "finding free ports on 127.0.0.1".into(),
                source,
            })?;
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<_>>()
            .map_err(|source| Error::Io {
                what: "finding free ports on 127.0.0.1".into(),
                source,
            })?;
        drop(listeners);
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_id = random_cluster_id()?;
        let mut nodes = Vec::with_capacity(n);
        // All of them first: none is ready before a majority of the quorum runs.
        for (i, &controller_port) in ports.iter().enumerate() {
            nodes.push(builder.spawn(Some(NodeSpec {
                id: i as u32 + 1,
                controller_port,
                voters: voters.clone(),
                cluster_id: cluster_id.clone(),
            }))?);
        }
        for node in &mut nodes {
            node.wait_ready()?;
        }
        let bootstrap = nodes
            .iter()
            .map(|b| b.bootstrap().to_owned())
            .collect::<Vec<_>>()
            .join(",");
        Ok(KafkaCluster { nodes, bootstrap })
    }

    /// Every node's `127.0.0.1:PORT`, comma-separated, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Node `i` (from 0; its node id is `i + 1`): to kill, restart or run Kafka's tools on.
    pub fn node(&mut self, i: usize) -> &mut KafkaBroker {
        &mut self.nodes[i]
    }

    /// How many nodes the cluster has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_22_base64url_characters() {
        let id = random_cluster_id().unwrap_or_default();
        assert_eq!(id.len(), 22, "{id}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }
}
