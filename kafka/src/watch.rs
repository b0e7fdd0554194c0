//! The fetch watcher: one named thread per backend that long-polls the brokers for the
//! partitions the stream threads found empty, and moves the backend's data version when one of
//! them has new records — so an idle stream thread sleeps until there is something to fetch
//! instead of re-fetching every partition on a timer (docs/design.md §3: no work proportional to
//! the number of tasks when nothing changed).
//!
//! It only signals: it asks for at most one byte and reads the partitions' high watermarks; the
//! stream threads fetch the records themselves. It has its own connections, so its long polls
//! never hold up a stream thread's request. It stops when the backend is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName, fetch_request};
use kafka_protocol::protocol::StrBytes;
use riffle_log::TopicPartition;

use crate::cluster::{Cluster, versions};
use crate::conn::Connection;

/// How long the broker holds a watch fetch when nothing arrives.
const LONG_POLL: Duration = Duration::from_millis(500);
/// A watched partition nobody fetched for this long is forgotten (revoked tasks).
const FORGET_AFTER: Duration = Duration::from_secs(15);

/// What the stream threads and the watcher share.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Partition → (the offset a fetch found nothing at, when).
    empty: Mutex<HashMap<TopicPartition, (u64, Instant)>>,
    /// Moves on every local append and every partition the watcher saw grow.
    pub(crate) events: AtomicU64,
    wake: (Mutex<()>, Condvar),
}

impl Watch {
    /// A fetch of `tp` at `offset` returned nothing (watch it) or something (stop watching).
    pub(crate) fn fetched(&self, tp: &TopicPartition, offset: u64, empty: bool) {
        let mut map = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        if empty {
            map.insert(tp.clone(), (offset, Instant::now()));
        } else {
            map.remove(tp);
        }
    }

    /// Something may be new: move the version and wake the waiters.
    pub(crate) fn signal(&self) {
        self.events.fetch_add(1, Ordering::AcqRel);
        let (lock, cvar) = &self.wake;
        drop(lock.lock().unwrap_or_else(PoisonError::into_inner));
        cvar.notify_all();
    }

    /// Waits until `changed()` or `timeout`.
    pub(crate) fn wait(&self, timeout: Duration, changed: impl Fn() -> bool) {
        let deadline = Instant::now() + timeout;
        let (lock, cvar) = &self.wake;
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if changed() || left.is_zero() {
                return;
            }
            guard = cvar
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn watched(&self) -> Vec<(TopicPartition, u64)> {
        let mut map = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, (_, at)| at.elapsed() < FORGET_AFTER);
        map.iter().map(|(tp, (o, _))| (tp.clone(), *o)).collect()
    }

    fn forget(&self, tp: &TopicPartition, offset: u64) {
        let mut map = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(tp).is_some_and(|(o, _)| *o == offset) {
            map.remove(tp);
        }
    }
}

/// Starts the watcher thread for `watch` (it ends once `watch` is dropped).
pub(crate) fn spawn(cluster: Arc<Cluster>, watch: &Arc<Watch>) -> std::io::Result<()> {
    let watch = Arc::downgrade(watch);
    std::thread::Builder::new()
        .name("riffle-kafka-fetch-watcher".into())
        .spawn(move || run(&cluster, &watch))
        .map(drop)
}

fn run(cluster: &Cluster, watch: &Weak<Watch>) {
    let mut connections: HashMap<String, Connection> = HashMap::new();
    loop {
        let Some(w) = watch.upgrade() else { return };
        let watched = w.watched();
        if watched.is_empty() {
            drop(w);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let mut by_leader: HashMap<String, Vec<(TopicPartition, u64)>> = HashMap::new();
        for (tp, offset) in watched {
            match cluster.leader(&tp) {
                Ok(broker) => by_leader.entry(broker).or_default().push((tp, offset)),
                // The stream thread's own fetch will meet (and report) the problem.
                Err(_) => {
                    w.forget(&tp, offset);
                    w.signal();
                }
            }
        }
        for (broker, partitions) in by_leader {
            let grown = poll(cluster, &mut connections, &broker, &partitions);
            match grown {
                Some(grown) => {
                    for (tp, offset) in &grown {
                        w.forget(tp, *offset);
                    }
                    if !grown.is_empty() {
                        w.signal();
                    }
                }
                None => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// One long poll of `partitions` on `broker`; the partitions that grew past their watched
/// offset (or failed: let the stream thread see why). `None` when the request failed.
fn poll(
    cluster: &Cluster,
    connections: &mut HashMap<String, Connection>,
    broker: &str,
    partitions: &[(TopicPartition, u64)],
) -> Option<Vec<(TopicPartition, u64)>> {
    let mut topics: Vec<fetch_request::FetchTopic> = Vec::new();
    for (tp, offset) in partitions {
        let mut p = fetch_request::FetchPartition::default();
        p.partition = tp.partition as i32;
        p.fetch_offset = *offset as i64;
        p.partition_max_bytes = 1;
        p.current_leader_epoch = -1;
        p.last_fetched_epoch = -1;
        p.log_start_offset = -1;
        match topics.iter_mut().find(|t| t.topic.0.as_str() == &*tp.topic) {
            Some(t) => t.partitions.push(p),
            None => {
                let mut t = fetch_request::FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(tp.topic.to_string()));
                t.partitions = vec![p];
                topics.push(t);
            }
        }
    }
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    request.max_wait_ms = LONG_POLL.as_millis() as i32;
    request.min_bytes = 1;
    request.max_bytes = 1;
    request.session_epoch = -1;
    request.topics = topics;
    let conn = match connections.entry(broker.to_owned()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(Connection::connect(broker, cluster.config().request_timeout).ok()?)
        }
    };
    let client_id = format!("{}-fetch-watcher", cluster.config().client_id);
    let Ok(response) = conn.send("Fetch", &client_id, &request, versions::FETCH) else {
        connections.remove(broker);
        return None;
    };
    let mut grown = Vec::new();
    for t in &response.responses {
        for p in &t.partitions {
            let Some((tp, offset)) = partitions.iter().find(|(tp, _)| {
                *tp.topic == *t.topic.0.as_str() && tp.partition as i32 == p.partition_index
            }) else {
                continue;
            };
            if p.error_code != 0 || p.high_watermark > *offset as i64 {
                grown.push((tp.clone(), *offset));
            }
        }
    }
    Some(grown)
}
