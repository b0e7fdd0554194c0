//! The cluster as riffle sees it: bootstrap, one connection per broker, partition leaders and
//! group coordinators (cached, refreshed on the errors that say they moved). Blocking: each call
//! is one request/response on the broker's connection, which a mutex keeps to one caller at a
//! time. The record APIs are in `records`, the group-offset APIs in `offsets`.

mod admin;
mod offsets;
mod records;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest, TopicName, metadata_request,
};
use kafka_protocol::protocol::StrBytes;
use riffle_record::TopicPartition;

use crate::conn::Connection;
use crate::error::{Error, ErrorCode, Result};
use crate::retry::{self, Failure};
use crate::security::{Connector, Security};

/// The versions riffle speaks; each is checked against the broker's ApiVersions at bootstrap.
/// Fixed rather than negotiated: these are the newest versions that still name topics (not ids)
/// and that `kafka-protocol` 0.18 encodes; every broker since Kafka 3.x accepts them.
pub(crate) mod versions {
    pub(crate) const API_VERSIONS: i16 = 3;
    pub(crate) const METADATA: i16 = 12;
    pub(crate) const CREATE_TOPICS: i16 = 7;
    pub(crate) const PRODUCE: i16 = 9;
    pub(crate) const FETCH: i16 = 12;
    pub(crate) const LIST_OFFSETS: i16 = 7;
    pub(crate) const DELETE_RECORDS: i16 = 2;
    pub(crate) const FIND_COORDINATOR: i16 = 4;
    /// Streams-group members must commit with v9+ (member id and epoch).
    pub(crate) const OFFSET_COMMIT: i16 = 9;
    pub(crate) const OFFSET_FETCH: i16 = 9;
    pub(crate) const STREAMS_GROUP_DESCRIBE: i16 = 0;
    pub(crate) const DELETE_TOPICS: i16 = 6;
    // Exactly-once (`txn`): the newest versions before transaction version 2 (KIP-890), whose
    // epoch bump at every commit riffle does not need.
    pub(crate) const INIT_PRODUCER_ID: i16 = 4;
    pub(crate) const ADD_PARTITIONS_TO_TXN: i16 = 3;
    pub(crate) const ADD_OFFSETS_TO_TXN: i16 = 3;
    pub(crate) const END_TXN: i16 = 3;
    pub(crate) const TXN_OFFSET_COMMIT: i16 = 3;
}

/// How a Kafka backend connects.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`.
    pub bootstrap_servers: String,
    /// The client id of riffle's requests (stream threads use their own name for heartbeats,
    /// which `kafka-streams-groups --describe` shows as CLIENT-ID).
    pub client_id: String,
    /// How long to keep retrying a retriable error before giving up.
    pub request_timeout: Duration,
    /// How often an idle stream thread re-fetches all its partitions even without a sign of
    /// new records. Normally new records wake it at once: a watcher thread long-polls the
    /// partitions found empty; this is the fallback.
    pub fetch_poll_interval: Duration,
    /// Replication factor of the topics riffle creates (-1: the broker's default).
    pub replication_factor: i16,
    /// How long the broker waits for a member to give up revoked tasks.
    pub rebalance_timeout_ms: i32,
    /// Read committed data only (Kafka's `isolation.level=read_committed`): records of open
    /// and aborted transactions are not returned, and end offsets are last stable offsets.
    /// An application under exactly_once reads this way whatever this says.
    pub read_committed: bool,
    /// TLS and SASL (`security.protocol` and the rest; see [`KafkaConfig::set`]).
    pub security: Security,
}

impl KafkaConfig {
    /// Defaults for a cluster reached at `bootstrap_servers`.
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        KafkaConfig {
            bootstrap_servers: bootstrap_servers.into(),
            client_id: "riffle".into(),
            request_timeout: Duration::from_secs(30),
            fetch_poll_interval: Duration::from_secs(5),
            replication_factor: -1,
            rebalance_timeout_ms: 60_000,
            read_committed: false,
            security: Security::default(),
        }
    }

    /// Sets a Kafka client property by its Kafka name: `bootstrap.servers`, `client.id`,
    /// `request.timeout.ms`, `isolation.level` (`read_committed` or `read_uncommitted`),
    /// `security.protocol` (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`), `sasl.mechanism`
    /// (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`), `sasl.username`, `sasl.password`,
    /// `sasl.jaas.config` (a `PlainLoginModule` or `ScramLoginModule` line with `username` and
    /// `password`), `ssl.ca.location` (or `ssl.truststore.location` with
    /// `ssl.truststore.type=PEM`: the CA certificates, PEM), `ssl.certificate.location` and
    /// `ssl.key.location` (a client certificate, PEM). Anything else is an error naming it.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let number = |what: &str| -> Result<u64> {
            value
                .parse()
                .map_err(|_| Error::Config(format!("{what} {value:?}: not a number")))
        };
        match name {
            "bootstrap.servers" => self.bootstrap_servers = value.to_owned(),
            "client.id" => self.client_id = value.to_owned(),
            "request.timeout.ms" => {
                self.request_timeout = Duration::from_millis(number(name)?);
            }
            "isolation.level" => {
                self.read_committed = match value {
                    "read_committed" => true,
                    "read_uncommitted" => false,
                    _ => {
                        return Err(Error::Config(format!(
                            "isolation.level {value:?}: expected read_committed or read_uncommitted"
                        )));
                    }
                };
            }
            _ => {
                if !self.security.set(name, value)? {
                    return Err(Error::Config(format!(
                        "unknown Kafka client property {name:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Sets each `name=value` line of a Java properties file (`#` and `!` start comments), as
    /// Kafka's tools read `--command-config`.
    pub fn load_properties(&mut self, path: &std::path::Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!(
                "reading the properties file {}: {e}",
                path.display()
            ))
        })?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (name, value) = line.split_once(['=', ':']).ok_or_else(|| {
                Error::Config(format!(
                    "{} line {}: expected name=value",
                    path.display(),
                    i + 1
                ))
            })?;
            self.set(name.trim(), value.trim())
                .map_err(|e| Error::Config(format!("{} line {}: {e}", path.display(), i + 1)))?;
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Groups `items` by topic, topics in the order they first appear: the shape of every request
/// that lists partitions under their topic.
pub(crate) fn by_topic<'a, T>(
    items: impl IntoIterator<Item = (&'a TopicPartition, T)>,
) -> Vec<(&'a str, Vec<T>)> {
    let mut out: Vec<(&str, Vec<T>)> = Vec::new();
    for (tp, item) in items {
        match out.iter_mut().find(|(topic, _)| *topic == &*tp.topic) {
            Some((_, items)) => items.push(item),
            None => out.push((&tp.topic, vec![item])),
        }
    }
    out
}

/// Error codes that mean "metadata moved: refresh and retry".
pub(crate) fn is_stale_metadata(code: i16) -> bool {
    // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION (just created),
    // FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT.
    matches!(code, 6 | 5 | 3 | 74 | 76 | 19 | 7)
}

/// Error codes that mean "the group coordinator moved or is loading".
pub(crate) fn is_coordinator_error(code: i16) -> bool {
    matches!(code, 14..=16)
}

type Slot = Arc<Mutex<Option<Connection>>>;

/// One Kafka cluster.
#[derive(Debug)]
pub(crate) struct Cluster {
    config: KafkaConfig,
    /// Where [`Cluster::with_any_broker`] starts next.
    next_broker: AtomicUsize,
    /// Node id → `host:port`.
    brokers: RwLock<HashMap<i32, String>>,
    /// `host:port` → its connection (made on first use, dropped on I/O errors).
    connections: Mutex<HashMap<String, Slot>>,
    /// Topic → leader node id per partition.
    topics: RwLock<HashMap<String, Vec<i32>>>,
    /// TLS and SASL for every connection.
    connector: Connector,
    /// (Key type, key) → its coordinator's `host:port`: 0 for a group, 1 for a transactional
    /// id.
    coordinators: Mutex<HashMap<(i8, String), String>>,
    /// API key → the broker's (min, max) versions.
    api_versions: HashMap<i16, (i16, i16)>,
    /// Fetches and end offsets see committed transactions only (`isolation_level=
    /// read_committed`): set for an application under exactly_once.
    read_committed: AtomicBool,
}

impl Cluster {
    /// Connects to the first reachable bootstrap server, checks its API versions and learns
    /// the brokers.
    pub(crate) fn connect(config: KafkaConfig) -> Result<Cluster> {
        let mut last_err = None;
        let servers = config.bootstrap_servers.clone();
        let connector = config.security.connector()?;
        for server in servers.split(',').map(str::trim) {
            if server.is_empty() {
                continue;
            }
            match Self::api_versions_of(server, &config, &connector) {
                Ok(api_versions) => {
                    let cluster = Cluster {
                        config: config.clone(),
                        connector: connector.clone(),
                        next_broker: AtomicUsize::new(0),
                        brokers: RwLock::default(),
                        connections: Mutex::default(),
                        topics: RwLock::default(),
                        coordinators: Mutex::default(),
                        api_versions,
                        read_committed: AtomicBool::new(config.read_committed),
                    };
                    cluster.check_versions(server)?;
                    cluster
                        .brokers
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(-1, server.to_owned());
                    cluster.refresh_metadata(&[])?;
                    return Ok(cluster);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            Error::Config(format!(
                "no bootstrap server in {:?}",
                config.bootstrap_servers
            ))
        }))
    }

    fn api_versions_of(
        server: &str,
        config: &KafkaConfig,
        connector: &Connector,
    ) -> Result<HashMap<i16, (i16, i16)>> {
        let mut conn =
            Connection::connect(server, connector, &config.client_id, config.request_timeout)?;
        let mut request = ApiVersionsRequest::default();
        request.client_software_name = StrBytes::from_static_str("riffle");
        request.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let response = conn.send(
            "ApiVersions",
            &config.client_id,
            &request,
            versions::API_VERSIONS,
        )?;
        if response.error_code != 0 {
            return Err(Error::Broker {
                api: "ApiVersions",
                context: format!("to {server}"),
                code: ErrorCode(response.error_code),
                message: None,
            });
        }
        Ok(response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect())
    }

    fn check_versions(&self, server: &str) -> Result<()> {
        use versions as v;
        let needed: [(&'static str, i16, i16); 11] = [
            ("Metadata", 3, v::METADATA),
            ("CreateTopics", 19, v::CREATE_TOPICS),
            ("Produce", 0, v::PRODUCE),
            ("Fetch", 1, v::FETCH),
            ("ListOffsets", 2, v::LIST_OFFSETS),
            ("FindCoordinator", 10, v::FIND_COORDINATOR),
            ("OffsetCommit", 8, v::OFFSET_COMMIT),
            ("OffsetFetch", 9, v::OFFSET_FETCH),
            ("StreamsGroupHeartbeat", crate::streams::HEARTBEAT_KEY, 0),
            (
                "StreamsGroupDescribe",
                crate::streams::DESCRIBE_KEY,
                v::STREAMS_GROUP_DESCRIBE,
            ),
            ("ApiVersions", 18, v::API_VERSIONS),
        ];
        self.check_apis(server, &needed)
    }

    fn check_apis(&self, server: &str, needed: &[(&'static str, i16, i16)]) -> Result<()> {
        for &(api, key, version) in needed {
            let (min, max) = self.api_versions.get(&key).copied().unwrap_or((-1, -1));
            if version < min || version > max {
                return Err(Error::UnsupportedVersion {
                    broker: server.to_owned(),
                    api,
                    needed: version,
                    min,
                    max,
                });
            }
        }
        Ok(())
    }

    /// The heartbeat version: 1 when the broker has it (int64 recovery lag), else 0.
    pub(crate) fn heartbeat_version(&self) -> i16 {
        let max = self
            .api_versions
            .get(&crate::streams::HEARTBEAT_KEY)
            .map_or(0, |v| v.1);
        max.clamp(0, 1)
    }

    /// Checks that the broker speaks the transaction APIs exactly_once uses.
    pub(crate) fn check_transaction_versions(&self) -> Result<()> {
        use versions as v;
        let needed: [(&'static str, i16, i16); 5] = [
            ("InitProducerId", 22, v::INIT_PRODUCER_ID),
            ("AddPartitionsToTxn", 24, v::ADD_PARTITIONS_TO_TXN),
            ("AddOffsetsToTxn", 25, v::ADD_OFFSETS_TO_TXN),
            ("EndTxn", 26, v::END_TXN),
            ("TxnOffsetCommit", 28, v::TXN_OFFSET_COMMIT),
        ];
        self.check_apis(&self.config.bootstrap_servers, &needed)
    }

    /// Whether fetches and end offsets read committed data only.
    pub(crate) fn read_committed(&self) -> bool {
        self.read_committed.load(Ordering::Relaxed)
    }

    /// Makes fetches and end offsets read committed data only, from now on.
    pub(crate) fn set_read_committed(&self) {
        self.read_committed.store(true, Ordering::Relaxed);
    }

    /// A new connection to `broker`, with TLS and SASL as configured.
    pub(crate) fn connect_to(&self, broker: &str) -> Result<Connection> {
        Connection::connect(
            broker,
            &self.connector,
            &self.config.client_id,
            self.config.request_timeout,
        )
    }

    pub(crate) fn config(&self) -> &KafkaConfig {
        &self.config
    }

    fn slot(&self, broker: &str) -> Slot {
        lock(&self.connections)
            .entry(broker.to_owned())
            .or_default()
            .clone()
    }

    /// Runs `f` on the connection to `broker`, connecting first if needed. An error drops the
    /// connection (the next call reconnects).
    pub(crate) fn with_connection<T>(
        &self,
        broker: &str,
        f: impl FnOnce(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        let slot = self.slot(broker);
        let mut guard = lock(&slot);
        if guard.is_none() {
            *guard = Some(self.connect_to(broker)?);
        }
        let Some(conn) = guard.as_mut() else {
            return Err(Error::Config("connection slot empty".into()));
        };
        let result = f(conn);
        if result.is_err() {
            *guard = None;
        }
        result
    }

    /// Runs `f` on a connection to any broker: the known brokers and the bootstrap servers,
    /// starting after the one used last, moving on to the next while one cannot be reached (a
    /// broker that died), so metadata and coordinator lookups go on while any broker lives.
    /// Other errors end it at once.
    pub(crate) fn with_any_broker<T>(
        &self,
        mut f: impl FnMut(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        let mut candidates: Vec<String> = {
            let brokers = self.brokers.read().unwrap_or_else(PoisonError::into_inner);
            let mut known: Vec<(i32, String)> = brokers
                .iter()
                .filter(|(id, _)| **id >= 0)
                .map(|(id, a)| (*id, a.clone()))
                .collect();
            known.sort_unstable();
            known.into_iter().map(|(_, a)| a).collect()
        };
        for server in self.config.bootstrap_servers.split(',').map(str::trim) {
            if !server.is_empty() && !candidates.iter().any(|c| c == server) {
                candidates.push(server.to_owned());
            }
        }
        let start = self.next_broker.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..candidates.len() {
            let at = (start + i) % candidates.len();
            match self.with_connection(&candidates[at], &mut f) {
                Err(e @ Error::Io { .. }) => {
                    self.next_broker.store(at + 1, Ordering::Relaxed);
                    last = Some(e);
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| Error::Config("no broker to connect to".into())))
    }

    /// Refreshes the brokers and the leaders of `topics`; returns each topic's partition count
    /// (`None`: the topic does not exist) and whether every partition has a leader.
    pub(crate) fn refresh_metadata(&self, topics: &[&str]) -> Result<Vec<(Option<u32>, bool)>> {
        let mut request = MetadataRequest::default();
        request.topics = Some(
            topics
                .iter()
                .map(|t| {
                    let mut topic = metadata_request::MetadataRequestTopic::default();
                    topic.name = Some(TopicName(name(t)));
                    topic
                })
                .collect(),
        );
        request.allow_auto_topic_creation = false;
        let client_id = self.config.client_id.clone();
        let response =
            self.with_any_broker(|c| c.send("Metadata", &client_id, &request, versions::METADATA))?;
        {
            let mut brokers = self.brokers.write().unwrap_or_else(PoisonError::into_inner);
            for b in &response.brokers {
                brokers.insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
            }
        }
        let mut out = vec![(None, false); topics.len()];
        let mut cache = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        for t in &response.topics {
            let Some(topic) = t.name.as_ref().map(|n| n.0.as_str()) else {
                continue;
            };
            let Some(i) = topics.iter().position(|x| *x == topic) else {
                continue;
            };
            if t.error_code == 3 {
                cache.remove(topic);
                continue;
            }
            let mut leaders = vec![-1; t.partitions.len()];
            for p in &t.partitions {
                if let Some(slot) = usize::try_from(p.partition_index)
                    .ok()
                    .and_then(|i| leaders.get_mut(i))
                {
                    *slot = p.leader_id.0;
                }
            }
            let led = t.error_code == 0 && leaders.iter().all(|&l| l >= 0);
            out[i] = (Some(leaders.len() as u32), led);
            cache.insert(topic.to_owned(), leaders);
        }
        Ok(out)
    }

    /// The partition count of `topic` (from the cache, else from the broker).
    pub(crate) fn partitions(&self, topic: &str) -> Result<Option<u32>> {
        if let Some(leaders) = self
            .topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
        {
            return Ok(Some(leaders.len() as u32));
        }
        Ok(self.refresh_metadata(&[topic])?.first().and_then(|t| t.0))
    }

    /// The `host:port` of `tp`'s leader.
    pub(crate) fn leader(&self, tp: &TopicPartition) -> Result<String> {
        for attempt in 0..2 {
            let node = self
                .topics
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&*tp.topic)
                .and_then(|l| l.get(tp.partition as usize).copied());
            let addr = node.filter(|&n| n >= 0).and_then(|node| {
                self.brokers
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&node)
                    .cloned()
            });
            if let Some(addr) = addr {
                return Ok(addr);
            }
            if attempt == 0 {
                self.refresh_metadata(&[&tp.topic])?;
            }
        }
        Err(Error::Broker {
            api: "Metadata",
            context: format!("leader of {tp}"),
            code: ErrorCode(5),
            message: Some("no leader known for the partition".into()),
        })
    }

    /// Retries `f` while it fails with a retriable error, refreshing `tp`'s leader, until the
    /// request timeout.
    fn on_leader<T>(
        &self,
        tp: &TopicPartition,
        mut f: impl FnMut(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        let mut retrying = false;
        retry::until(self.config.request_timeout, || {
            if retrying {
                // A failed refresh is retried with the request.
                let _ = self.refresh_metadata(&[&tp.topic]);
            }
            retrying = true;
            self.leader(tp)
                .and_then(|broker| self.with_connection(&broker, &mut f))
                .map_err(Failure::of_request)
        })
    }

    /// The coordinator of `group` (`host:port`), looked up once and cached.
    pub(crate) fn coordinator(&self, group: &str) -> Result<String> {
        self.find_coordinator(group, 0)
    }

    /// The coordinator of `key` (`key_type` 0: a group, 1: a transactional id), looked up once
    /// and cached.
    pub(crate) fn find_coordinator(&self, key: &str, key_type: i8) -> Result<String> {
        let what = if key_type == 0 {
            "group"
        } else {
            "transactional id"
        };
        if let Some(addr) = lock(&self.coordinators).get(&(key_type, key.to_owned())) {
            return Ok(addr.clone());
        }
        let mut request = FindCoordinatorRequest::default();
        request.key_type = key_type;
        request.coordinator_keys = vec![name(key)];
        let client_id = self.config.client_id.clone();
        retry::until(self.config.request_timeout, || {
            let response = self.with_any_broker(|c| {
                c.send(
                    "FindCoordinator",
                    &client_id,
                    &request,
                    versions::FIND_COORDINATOR,
                )
            })?;
            let Some(found) = response.coordinators.first() else {
                return Err(Error::Decode {
                    api: "FindCoordinator",
                    reason: format!("no coordinator in the answer for {what} {key}"),
                }
                .into());
            };
            if found.error_code == 0 {
                let addr = format!("{}:{}", found.host.as_str(), found.port);
                lock(&self.coordinators).insert((key_type, key.to_owned()), addr.clone());
                return Ok(addr);
            }
            // The first lookup on a fresh cluster creates __consumer_offsets (or
            // __transaction_state): wait for it.
            let code = ErrorCode(found.error_code);
            let error = Error::Broker {
                api: "FindCoordinator",
                context: format!("{what} {key}"),
                code,
                message: found.error_message.as_ref().map(|m| m.to_string()),
            };
            Err(Failure::new(error, code.is_retriable()))
        })
    }

    /// Forgets `group`'s coordinator (it moved).
    /// Drops `topic` from the metadata cache (it was deleted).
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(topic);
    }

    pub(crate) fn forget_coordinator(&self, group: &str) {
        self.forget_coordinator_of(group, 0);
    }

    /// Forgets the coordinator of `key` (`key_type` as in [`Cluster::find_coordinator`]).
    pub(crate) fn forget_coordinator_of(&self, key: &str, key_type: i8) {
        lock(&self.coordinators).remove(&(key_type, key.to_owned()));
    }

    /// Sends a raw streams-group request to `group`'s coordinator.
    pub(crate) fn send_to_coordinator(
        &self,
        group: &str,
        api: &'static str,
        client_id: &str,
        key: i16,
        version: i16,
        body: &[u8],
    ) -> Result<Bytes> {
        let broker = self.coordinator(group)?;
        let result =
            self.with_connection(&broker, |c| c.send_raw(api, client_id, key, version, body));
        if result.is_err() {
            self.forget_coordinator(group);
        }
        result
    }
}
