//! The fetch watcher and the data version: one named thread per backend that long-polls the
//! brokers for the partitions the stream threads found empty, and moves the backend's data
//! version when one of them has new records — so an idle stream thread sleeps until there is
//! something to fetch instead of re-fetching every partition on a timer (docs/design.md §3: no work
//! proportional to the number of tasks when nothing changed).
//!
//! The data version is one counter, and each of its moves is journaled with the partition that
//! moved it (a watched partition that grew, a local append), so a stream thread can ask which
//! partitions may have new data since a version it saw ([`Watch::changed_since`]) and fetch
//! only those. The fallback tick every `fetch_poll_interval` (for anything the watcher cannot
//! see) is journaled as "unknown": a reader whose range spans one fetches everything.
//!
//! It only signals: it asks for at most one byte and reads the partitions' high watermarks; the
//! stream threads fetch the records themselves. It has its own connections, so its long polls
//! never hold up a stream thread's request. It stops when the backend is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName, fetch_request};
use kafka_protocol::protocol::StrBytes;
use riffle_record::TopicPartition;

use crate::cluster::{Cluster, versions};
use crate::conn::Connection;

/// How long the broker holds a watch fetch when nothing arrives.
const LONG_POLL: Duration = Duration::from_millis(500);
/// A watched partition nobody fetched for this long (and for two fallback periods) is
/// forgotten (revoked tasks). A thread that fetches only the changed partitions re-fetches an
/// idle one only after a fallback tick, so the watch must outlive the fallback period.
const FORGET_AFTER: Duration = Duration::from_secs(15);
/// How many moves of the data version the journal remembers (as the embedded log's append
/// journal); a reader further behind is told to fetch every partition.
const JOURNAL_LEN: usize = 4_096;

/// The data version and what moved it, newest last.
#[derive(Debug)]
struct Journal {
    version: u64,
    /// `(version after the move, the partition that may have new data)`; `None` = unknown (a
    /// fallback tick). Versions are consecutive; at most `capacity` entries.
    recent: VecDeque<(u64, Option<TopicPartition>)>,
    capacity: usize,
    /// The fallback ticks (fetch-poll intervals since the start) already journaled.
    ticks: u64,
    /// Bumped by [`Watch::wake`]: ends every wait without claiming new data.
    wakeups: u64,
}

impl Journal {
    fn new(capacity: usize) -> Journal {
        Journal {
            version: 0,
            wakeups: 0,
            recent: VecDeque::new(),
            capacity: capacity.max(1),
            ticks: 0,
        }
    }

    fn record(&mut self, tp: Option<TopicPartition>) {
        self.version += 1;
        if self.recent.len() == self.capacity {
            self.recent.pop_front();
        }
        self.recent.push_back((self.version, tp));
    }

    /// Journals one "unknown" move if the fallback clock reached a tick not journaled yet
    /// (one move however many ticks passed: "unknown" once is enough).
    fn tick(&mut self, ticks: u64) {
        if ticks > self.ticks {
            self.ticks = ticks;
            self.record(None);
        }
    }

    /// Pushes the partitions that moved the version after `seen` (duplicates possible) and
    /// returns the version; `None`, pushing nothing, when a move in that range is unknown or
    /// no longer journaled.
    fn changed_since(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        if seen >= self.version {
            return Some(self.version);
        }
        let oldest = self.recent.front().map_or(u64::MAX, |&(v, _)| v);
        if oldest > seen + 1 {
            return None;
        }
        let skip = usize::try_from(seen + 1 - oldest).unwrap_or(usize::MAX);
        let start = out.len();
        for (_, tp) in self.recent.iter().skip(skip) {
            match tp {
                Some(tp) => out.push(tp.clone()),
                None => {
                    out.truncate(start);
                    return None;
                }
            }
        }
        Some(self.version)
    }
}

/// What the stream threads and the watcher share.
#[derive(Debug)]
pub(crate) struct Watch {
    /// Partition → (the offset a fetch found nothing at, when).
    empty: Mutex<HashMap<TopicPartition, (u64, Instant)>>,
    journal: Mutex<Journal>,
    /// Notified on every move of the version (its mutex is `journal`'s).
    moved: Condvar,
    started: Instant,
    /// The fallback tick's period (`fetch_poll_interval`, not zero).
    fallback: Duration,
}

impl Watch {
    /// A watch whose version also moves every `fallback` (which must not be zero).
    pub(crate) fn new(fallback: Duration) -> Watch {
        Watch {
            empty: Mutex::default(),
            journal: Mutex::new(Journal::new(JOURNAL_LEN)),
            moved: Condvar::new(),
            started: Instant::now(),
            fallback: fallback.max(Duration::from_nanos(1)),
        }
    }

    /// A fetch of `tp` at `offset` returned nothing (watch it) or something (stop watching).
    pub(crate) fn fetched(&self, tp: &TopicPartition, offset: u64, empty: bool) {
        let mut map = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        if empty {
            map.insert(tp.clone(), (offset, Instant::now()));
        } else {
            map.remove(tp);
        }
    }

    /// The partitions `tps` may have new data: move the version (once per partition, each
    /// move journaled with it) and wake the waiters.
    pub(crate) fn signal(&self, tps: impl IntoIterator<Item = TopicPartition>) {
        let mut journal = self.journal();
        let before = journal.version;
        for tp in tps {
            journal.record(Some(tp));
        }
        if journal.version != before {
            self.moved.notify_all();
        }
    }

    /// Ends every [`Watch::wait`] under way now, without moving the version.
    pub(crate) fn wake(&self) {
        self.journal().wakeups += 1;
        self.moved.notify_all();
    }

    /// How many times [`Watch::wake`] was called: read before a look, passed to
    /// [`Watch::wait`], so a wake-up between the two is not lost.
    pub(crate) fn wake_count(&self) -> u64 {
        self.journal().wakeups
    }

    /// The current data version.
    pub(crate) fn version(&self) -> u64 {
        self.journal().version
    }

    /// See [`Journal::changed_since`].
    pub(crate) fn changed_since(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        self.journal().changed_since(seen, out)
    }

    /// Waits until the version differs from `seen`, the wake count from `woken`, `timeout`
    /// passes, or the next fallback tick (which moves the version); returns the version.
    pub(crate) fn wait(&self, seen: u64, woken: u64, timeout: Duration) -> u64 {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.started).as_nanos();
        let period = self.fallback.as_nanos();
        let to_tick =
            Duration::from_nanos(u64::try_from(period - elapsed % period).unwrap_or(u64::MAX));
        // `None`: too far to represent, wait in long slices (the tick or a signal ends it).
        let deadline = now.checked_add(timeout.min(to_tick));
        let mut journal = self.journal();
        loop {
            let now = Instant::now();
            journal.tick(self.ticks_at(now));
            let left = deadline.map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(now)
            });
            if journal.version != seen || journal.wakeups != woken || left.is_zero() {
                return journal.version;
            }
            journal = self
                .moved
                .wait_timeout(journal, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The journal, with the fallback ticks that passed by now recorded.
    fn journal(&self) -> MutexGuard<'_, Journal> {
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        journal.tick(self.ticks_at(Instant::now()));
        journal
    }

    fn ticks_at(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.started).as_nanos();
        (elapsed / self.fallback.as_nanos()) as u64
    }

    fn watched(&self) -> Vec<(TopicPartition, u64)> {
        let mut map = self.empty.lock().unwrap_or_else(PoisonError::into_inner);
        let forget_after = FORGET_AFTER.max(self.fallback.saturating_mul(2));
        map.retain(|_, (_, at)| at.elapsed() < forget_after);
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
            // The poll interval while nothing is watched.
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
                    w.signal([tp]);
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
                    w.signal(grown.into_iter().map(|(tp, _)| tp));
                }
                // Not a retry (kafka/src/retry.rs): nobody waits for this poll, its failure is
                // only a lost hint (the fallback tick covers it); pause so that an unreachable
                // broker is not polled in a tight loop.
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
    let read_committed = cluster.read_committed();
    request.isolation_level = i8::from(read_committed);
    request.session_epoch = -1;
    request.topics = topics;
    let conn = match connections.entry(broker.to_owned()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(cluster.connect_to(broker).ok()?),
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
            // Read committed, records past the last stable offset are not readable yet.
            let end = if read_committed {
                p.last_stable_offset
            } else {
                p.high_watermark
            };
            if p.error_code != 0 || end > *offset as i64 {
                grown.push((tp.clone(), *offset));
            }
        }
    }
    Some(grown)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn tp(p: u32) -> TopicPartition {
        TopicPartition::new("in", p)
    }

    fn changed(j: &Journal, seen: u64) -> Option<(u64, Vec<TopicPartition>)> {
        let mut out = vec![tp(999)]; // what the caller already had stays
        let version = j.changed_since(seen, &mut out)?;
        assert_eq!(out.remove(0), tp(999));
        Some((version, out))
    }

    #[test]
    fn the_partitions_that_moved_the_version_are_named() {
        let mut j = Journal::new(16);
        assert_eq!(changed(&j, 0), Some((0, vec![])), "nothing new");
        j.record(Some(tp(1)));
        j.record(Some(tp(2)));
        j.record(Some(tp(1)));
        assert_eq!(j.version, 3);
        assert_eq!(changed(&j, 0), Some((3, vec![tp(1), tp(2), tp(1)])));
        assert_eq!(changed(&j, 2), Some((3, vec![tp(1)])));
        assert_eq!(changed(&j, 3), Some((3, vec![])));
        assert_eq!(
            changed(&j, 7),
            Some((3, vec![])),
            "a version from the future: nothing"
        );
    }

    #[test]
    fn a_fallback_tick_is_unknown_to_whoever_spans_it() {
        let mut j = Journal::new(16);
        j.record(Some(tp(1)));
        j.tick(0);
        assert_eq!(j.version, 1, "no tick passed");
        j.tick(3);
        assert_eq!(j.version, 2, "one move however many ticks passed");
        j.tick(3);
        assert_eq!(j.version, 2, "each tick once");
        j.record(Some(tp(2)));
        assert_eq!(changed(&j, 0), None);
        assert_eq!(changed(&j, 1), None);
        assert_eq!(
            changed(&j, 2),
            Some((3, vec![tp(2)])),
            "after the tick: known again"
        );
    }

    #[test]
    fn a_reader_further_behind_than_the_journal_is_told_to_fetch_everything() {
        let mut j = Journal::new(4);
        for p in 0..6 {
            j.record(Some(tp(p)));
        }
        assert_eq!(changed(&j, 1), None, "moves 2 and 3 were forgotten");
        assert_eq!(changed(&j, 2), Some((6, vec![tp(2), tp(3), tp(4), tp(5)])));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Moved(u32),
        Tick(u64),
        Ask(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..8).prop_map(Op::Moved),
            1 => (0u64..4).prop_map(Op::Tick),
            3 => (0u64..40).prop_map(Op::Ask),
        ]
    }

    proptest! {
        /// Against a model that keeps every move forever: the journal names exactly the
        /// partitions after `seen` whenever it still remembers them all and none is unknown.
        #[test]
        fn the_journal_agrees_with_a_complete_history(
            capacity in 1usize..12,
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let mut j = Journal::new(capacity);
            let mut history: Vec<Option<TopicPartition>> = Vec::new(); // index = version - 1
            let mut ticks = 0;
            for op in ops {
                match op {
                    Op::Moved(p) => {
                        j.record(Some(tp(p)));
                        history.push(Some(tp(p)));
                    }
                    Op::Tick(more) => {
                        ticks += more;
                        let before = j.version;
                        j.tick(ticks);
                        if j.version != before {
                            history.push(None);
                        }
                        prop_assert!(j.version - before <= 1);
                    }
                    Op::Ask(seen) => {
                        let version = history.len() as u64;
                        prop_assert_eq!(j.version, version);
                        let since = history.get(seen.min(version) as usize..).unwrap_or(&[]);
                        let forgotten = version.saturating_sub(seen) > capacity as u64;
                        let expected = if since.iter().any(Option::is_none) || forgotten {
                            None
                        } else {
                            Some((version, since.iter().flatten().cloned().collect::<Vec<_>>()))
                        };
                        prop_assert_eq!(changed(&j, seen), expected);
                    }
                }
            }
        }
    }

    #[test]
    fn wait_returns_at_once_when_the_version_moved_or_after_a_short_timeout() {
        let w = Watch::new(Duration::from_secs(3600));
        w.signal([tp(1)]);
        let v = w.version();
        let mut out = Vec::new();
        assert_eq!(w.changed_since(v - 1, &mut out), Some(v));
        assert_eq!(out, vec![tp(1)]);
        let started = Instant::now();
        assert_eq!(
            w.wait(v - 1, w.wake_count(), Duration::from_secs(10)),
            v,
            "already moved"
        );
        assert_eq!(
            w.wait(v, w.wake_count(), Duration::from_millis(1)),
            v,
            "timed out, nothing moved"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_fallback_tick_ends_a_wait_and_makes_the_partitions_unknown() {
        let w = Watch::new(Duration::from_millis(50));
        let seen = w.version();
        let started = Instant::now();
        // Not the 10 s timeout: the next tick moves the version.
        let moved = w.wait(seen, w.wake_count(), Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(moved > seen);
        let mut out = Vec::new();
        assert_eq!(w.changed_since(seen, &mut out), None, "fetch everything");
        assert!(out.is_empty());
    }

    #[test]
    fn a_signal_wakes_a_waiter_with_the_partition() {
        let w = Arc::new(Watch::new(Duration::from_secs(3600)));
        let seen = w.version();
        let signaller = {
            let w = w.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                w.signal([tp(4)]);
            })
        };
        let started = Instant::now();
        let version = w.wait(seen, w.wake_count(), Duration::from_secs(10));
        signaller.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(version, seen + 1);
        let mut out = Vec::new();
        assert_eq!(w.changed_since(seen, &mut out), Some(version));
        assert_eq!(out, vec![tp(4)]);
        // An empty signal moves nothing.
        w.signal([]);
        assert_eq!(w.version(), version);
    }

    /// A wake-up after the waiter read the wake count but before it began to wait ends the
    /// wait at once; read after it, the count lets the wait run to its timeout.
    #[test]
    fn a_wake_up_before_the_wait_is_not_lost() {
        let w = Watch::new(Duration::from_secs(3600));
        let seen = w.version();
        let woken = w.wake_count();
        w.wake();
        let started = Instant::now();
        assert_eq!(w.wait(seen, woken, Duration::from_secs(30)), seen);
        assert!(started.elapsed() < Duration::from_secs(5));
        let started = Instant::now();
        assert_eq!(
            w.wait(seen, w.wake_count(), Duration::from_millis(50)),
            seen
        );
        assert!(started.elapsed() >= Duration::from_millis(45));
    }
}
