//! Stream–stream windowed joins: [`JoinWindows`], [`StreamJoined`] and the two processors of a
//! join, one per side (Kafka Streams' `KStreamKStreamJoin`, with the spurious-result fix of
//! Kafka 3.1+).
//!
//! Each side keeps its records in its own window store (kept `before + after + grace`, keeping
//! duplicates, changelogged). A record of one side:
//!
//! 1. moves the join's stream time (the largest timestamp either side has seen in this task);
//! 2. is dropped (`dropped-records`) without a key or a value — except that a keyless record
//!    of an outer side is emitted at once, joined with nothing (Kafka's KIP-962);
//! 3. if its timestamp is the stream time, emits the unmatched records of a left or outer join
//!    whose windows have closed (see below);
//! 4. joins every record of the other side with its key whose timestamp is in
//!    `[ts - before, ts + after]` (this side's view of the windows: for the right side,
//!    `before` and `after` swap) and that the other store still holds (`ts >= observed -
//!    retention + 1`), each result at the larger of the two timestamps;
//! 5. on an outer side, if it matched nothing, is emitted joined with nothing at once when its
//!    window is already behind stream time (`ts + after < stream time`), or else is kept in the
//!    join's shared *outer store* until its window closes;
//! 6. is put into its own side's window store, unless that store's retention is already behind
//!    it.
//!
//! The outer store (left and outer joins only) holds the unmatched records by `(timestamp,
//! side, key)`; a record of the other side that matches one removes it. Its records are emitted,
//! in that order, when `ts + after + grace < stream time` (left side; `before` for the right),
//! at most once per `outer_join_emit_interval` of wall-clock time (Kafka's internal
//! `emit.interval.ms.kstreams.outer.join.spurious.results.fix`, 1 s; 0 checks on every record).
//!
//! The stream time and the earliest time in the outer store are shared by the two processors
//! of a task through a [`TimeTrackers`] registry, and are not kept across restarts (as in Kafka
//! Streams: a restarted task starts from the next record's time).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use riffle_state_dir::TaskId;

use crate::dsl::StoreType;
use crate::processor::{Processor, ProcessorContext};
use crate::serdes::SerdeRef;
use crate::types::error::SerdeError;
use crate::types::error::{Error, Result};
use crate::types::record::Record;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Which records of two streams join (Kafka Streams' `JoinWindows`): a left record at `t`
/// joins right records in `[t - before, t + after]`; records may arrive up to `grace` late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinWindows {
    pub(crate) before_ms: i64,
    pub(crate) after_ms: i64,
    pub(crate) grace_ms: i64,
}

impl JoinWindows {
    /// Records at most `difference` apart join, either way; records are accepted up to
    /// `grace` late.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        JoinWindows {
            before_ms: ms(difference),
            after_ms: ms(difference),
            grace_ms: ms(grace),
        }
    }

    /// [`JoinWindows::of_time_difference_and_grace`] without grace.
    pub fn of_time_difference_without_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// A left record at `t` joins right records from `t - before` (the other bound stays).
    pub fn before(mut self, before: Duration) -> Self {
        self.before_ms = ms(before);
        self
    }

    /// A left record at `t` joins right records up to `t + after` (the other bound stays).
    pub fn after(mut self, after: Duration) -> Self {
        self.after_ms = ms(after);
        self
    }

    /// The windows' size: `before + after`.
    pub fn size_ms(&self) -> i64 {
        self.before_ms.saturating_add(self.after_ms)
    }

    /// The grace period in ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// How long each side's store keeps a record: `before + after + grace`.
    pub(crate) fn retention_ms(&self) -> i64 {
        self.size_ms().saturating_add(self.grace_ms)
    }

    /// Whether the windows can hold anything (`before + after >= 0`).
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.size_ms() < 0 {
            return Err(format!(
                "join windows before {} ms and after {} ms are empty: before + after must be \
                 at least 0",
                self.before_ms, self.after_ms
            ));
        }
        Ok(())
    }
}

/// The serdes and stores of a stream–stream join (Kafka Streams' `StreamJoined`): the key and
/// both sides' values are kept in window stores (and repartitioned with these serdes when a
/// side's key changed upstream).
pub struct StreamJoined<K, V1, V2> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V1>,
    pub(crate) other_value: SerdeRef<V2>,
    pub(crate) store_name: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) store_type: StoreType,
    pub(crate) logging: bool,
}

impl<K, V1, V2> StreamJoined<K, V1, V2> {
    /// The serdes of the key, this stream's values and the other stream's values.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V1>, other_value: SerdeRef<V2>) -> Self {
        StreamJoined {
            key,
            value,
            other_value,
            store_name: None,
            name: None,
            store_type: StoreType::default(),
            logging: true,
        }
    }

    /// Names the stores `<name>-this-join-store` and `<name>-other-join-store` (and, for left
    /// and outer joins, `<name>-outer-shared-join-store`); by default they are named after the
    /// join's processors.
    pub fn with_store_name(mut self, name: impl Into<String>) -> Self {
        self.store_name = Some(name.into());
        self
    }

    /// Names the join's processors (and repartition topics) after `name`.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Where the stores keep their data (in memory by default).
    pub fn with_store_type(mut self, store_type: StoreType) -> Self {
        self.store_type = store_type;
        self
    }

    /// No changelogs for the stores (they then start empty after a restart).
    pub fn without_logging(mut self) -> Self {
        self.logging = false;
        self
    }
}

/// The side of a join a record came from. In the outer store's keys the right side sorts
/// first, as in Kafka Streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Left,
    Right,
}

impl Side {
    fn byte(self) -> u8 {
        match self {
            Side::Left => 1,
            Side::Right => 0,
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

/// Times shared by the two processors of one join in one task.
#[derive(Debug)]
pub(crate) struct TimeTracker {
    /// The largest timestamp either side has seen (-1 before any).
    stream_time: AtomicI64,
    /// The earliest timestamp that may be in the outer store (`i64::MAX`: unknown or none).
    min_time: AtomicI64,
    /// The wall-clock time before which the outer store is not scanned again.
    next_emit: AtomicI64,
    /// Each side's store's observed time (the largest timestamp put), by `Side::byte`.
    observed: [AtomicI64; 2],
    /// Which sides' processors took this tracker at `init`, by `Side::byte`.
    taken: [std::sync::atomic::AtomicBool; 2],
}

impl TimeTracker {
    fn new() -> Self {
        TimeTracker {
            stream_time: AtomicI64::new(-1),
            min_time: AtomicI64::new(i64::MAX),
            next_emit: AtomicI64::new(i64::MIN),
            observed: [AtomicI64::new(i64::MIN), AtomicI64::new(i64::MIN)],
            taken: [
                std::sync::atomic::AtomicBool::new(false),
                std::sync::atomic::AtomicBool::new(false),
            ],
        }
    }
}

/// The time trackers of one join, per task (Kafka Streams' `TimeTrackerSupplier`).
#[derive(Debug, Default)]
pub(crate) struct TimeTrackers {
    by_task: Mutex<HashMap<TaskId, Arc<TimeTracker>>>,
}

impl TimeTrackers {
    /// The tracker of `task` for `side`'s processor: the one the other side's processor of
    /// this instance of the task took, or a new one. A tracker this side already took is
    /// stale (an instance of the task that did not close, say one whose `init` failed), and is
    /// replaced.
    fn take(&self, task: TaskId, side: Side) -> Arc<TimeTracker> {
        let mut map = self.by_task.lock().unwrap_or_else(|p| p.into_inner());
        let slot = side.byte() as usize;
        let tracker = match map.get(&task) {
            Some(t) if !t.taken[slot].load(Ordering::Relaxed) => t.clone(),
            _ => {
                let fresh = Arc::new(TimeTracker::new());
                map.insert(task, fresh.clone());
                fresh
            }
        };
        tracker.taken[slot].store(true, Ordering::Relaxed);
        tracker
    }

    /// Forgets `task`'s tracker if it is still `tracker`.
    fn remove(&self, task: TaskId, tracker: &Arc<TimeTracker>) {
        let mut map = self.by_task.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&task).is_some_and(|t| Arc::ptr_eq(t, tracker)) {
            map.remove(&task);
        }
    }
}

/// The joiner of one side: the key, this side's value and the other side's value (either may
/// be missing in a left or outer join), as that side sees them.
pub(crate) type SideJoiner<K, VThis, VOther, VR> =
    Arc<dyn Fn(&K, Option<&VThis>, Option<&VOther>) -> VR + Send + Sync>;

/// What both sides' processors share, made once per join.
pub(crate) struct JoinSpec {
    pub(crate) windows: JoinWindows,
    pub(crate) this_store: String,
    pub(crate) other_store: String,
    /// The outer store, for left and outer joins.
    pub(crate) outer_store: Option<String>,
    /// The other side emits its unmatched records too (an outer join): only then may the
    /// outer store hold the other side's records.
    pub(crate) other_outer: bool,
    pub(crate) trackers: Arc<TimeTrackers>,
}

/// One side of a stream–stream join.
pub(crate) struct JoinSide<K, VThis, VOther, VR> {
    pub(crate) side: Side,
    /// This side emits its unmatched records (left side of a left join, both of an outer).
    pub(crate) outer: bool,
    pub(crate) spec: Arc<JoinSpec>,
    pub(crate) joiner: SideJoiner<K, VThis, VOther, VR>,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) this_serde: SerdeRef<VThis>,
    pub(crate) other_serde: SerdeRef<VOther>,
    pub(crate) tracker: Option<Arc<TimeTracker>>,
    /// The task this processor runs in (from `init`).
    task: Option<TaskId>,
    /// Reused buffers for the outer store's keys and values.
    pub(crate) key_buf: Vec<u8>,
    pub(crate) value_buf: Vec<u8>,
}

impl<K, VThis, VOther, VR> JoinSide<K, VThis, VOther, VR> {
    pub(crate) fn new(
        side: Side,
        outer: bool,
        spec: Arc<JoinSpec>,
        joiner: SideJoiner<K, VThis, VOther, VR>,
        serdes: (SerdeRef<K>, SerdeRef<VThis>, SerdeRef<VOther>),
    ) -> Self {
        JoinSide {
            side,
            outer,
            spec,
            joiner,
            key_serde: serdes.0,
            this_serde: serdes.1,
            other_serde: serdes.2,
            tracker: None,
            task: None,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    /// This side's `(before, after)`: the right side sees the windows mirrored.
    fn bounds(&self) -> (i64, i64) {
        let w = &self.spec.windows;
        match self.side {
            Side::Left => (w.before_ms, w.after_ms),
            Side::Right => (w.after_ms, w.before_ms),
        }
    }

    fn tracker(&self) -> &Arc<TimeTracker> {
        self.tracker
            .as_ref()
            .expect("riffle invariant: a join processor processes only after init")
    }
}

/// The outer store's key of a record: `timestamp (8 bytes big-endian) ‖ side ‖ key`.
fn outer_key(ts: i64, side: Side, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&ts.to_be_bytes());
    out.push(side.byte());
    out.extend_from_slice(key);
}

/// Appends one value to an outer store entry's list: `u32 length (big-endian) ‖ bytes`.
fn push_value(list: &mut Vec<u8>, value: &[u8]) {
    list.extend_from_slice(&(value.len() as u32).to_be_bytes());
    list.extend_from_slice(value);
}

/// The values of an outer store entry's list, or `None` if it is malformed.
fn values_of(list: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut rest = list;
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let value = rest.get(4..4 + len)?;
        out.push(value);
        rest = &rest[4 + len..];
    }
    Some(out)
}

/// An outer store key taken apart: timestamp, side, key bytes.
fn parse_outer_key(bytes: &[u8]) -> Option<(i64, Side, &[u8])> {
    let ts = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let side = match bytes.get(8)? {
        1 => Side::Left,
        0 => Side::Right,
        _ => return None,
    };
    Some((ts, side, &bytes[9..]))
}

impl<K, VThis, VOther, VR> JoinSide<K, VThis, VOther, VR>
where
    K: Clone + 'static,
    VThis: Clone + 'static,
    VOther: Clone + 'static,
    VR: Clone + 'static,
{
    fn corrupt(&self, task: TaskId, source: SerdeError) -> Error {
        Error::CorruptState {
            store: self.spec.outer_store.clone().unwrap_or_default(),
            task,
            source,
        }
    }

    fn malformed(&self, task: TaskId, reason: String) -> Error {
        let source = SerdeError::Invalid {
            type_name: "an outer join store entry",
            reason,
        };
        self.corrupt(task, source)
    }

    /// Emits the unmatched records of the outer store whose windows have closed, oldest
    /// first, and removes them.
    fn emit_closed(&mut self, ctx: &mut ProcessorContext<'_, K, VR>) -> Result<()> {
        let spec = Arc::clone(&self.spec);
        let Some(outer) = spec.outer_store.as_deref() else {
            return Ok(());
        };
        let tracker = self.tracker().clone();
        let stream_time = tracker.stream_time.load(Ordering::Relaxed);
        let (_, after) = self.bounds();
        let grace = self.spec.windows.grace_ms;
        let min_time = tracker.min_time.load(Ordering::Relaxed);
        if min_time != i64::MAX
            && i128::from(min_time) + i128::from(after) + i128::from(grace)
                >= i128::from(stream_time)
        {
            return Ok(());
        }
        let now = ctx.current_system_time_ms();
        if now < tracker.next_emit.load(Ordering::Relaxed) {
            return Ok(());
        }
        let interval = ctx.outer_join_emit_interval_ms();
        tracker
            .next_emit
            .store(now.saturating_add(interval), Ordering::Relaxed);
        let mut min = i64::MAX;
        let entries = ctx.get_state_store::<Bytes, Bytes>(outer)?.all()?;
        let (mut left_open, mut right_open) = (false, false);
        let w = self.spec.windows;
        let headers = ctx.headers().clone();
        let mut emitted = Vec::new();
        for (key, list) in &entries {
            let Some((ts, side, raw_key)) = parse_outer_key(key) else {
                let reason = format!("a key of {} bytes", key.len());
                return Err(self.malformed(ctx.task_id(), reason));
            };
            min = ts;
            if left_open && right_open {
                break;
            }
            let look_back = match side {
                Side::Left => w.after_ms,
                Side::Right => w.before_ms,
            };
            if i128::from(ts) + i128::from(look_back) + i128::from(grace) >= i128::from(stream_time)
            {
                match side {
                    Side::Left => left_open = true,
                    Side::Right => right_open = true,
                }
                continue;
            }
            let Some(values) = values_of(list) else {
                let reason = format!("a malformed value list at timestamp {ts}");
                return Err(self.malformed(ctx.task_id(), reason));
            };
            let task = ctx.task_id();
            let k = self
                .key_serde
                .deserialize(Some(raw_key))
                .map_err(|e| self.corrupt(task, e))?;
            let emits = if side == self.side {
                self.outer
            } else {
                self.spec.other_outer
            };
            if !emits {
                let reason = format!(
                    "an unmatched record of the side that emits none, at timestamp {ts} (a \
                     store of another join kind?)"
                );
                return Err(self.malformed(task, reason));
            }
            for value in values {
                let joined = if side == self.side {
                    let v = self.this_serde.deserialize(Some(value));
                    let v = v.map_err(|e| self.corrupt(task, e))?;
                    (self.joiner)(&k, Some(&v), None)
                } else {
                    let v = self.other_serde.deserialize(Some(value));
                    let v = v.map_err(|e| self.corrupt(task, e))?;
                    (self.joiner)(&k, None, Some(&v))
                };
                ctx.forward(Record::with_headers_of(
                    k.clone(),
                    joined,
                    ts,
                    headers.clone(),
                ))?;
            }
            emitted.push(key.clone());
        }
        tracker.min_time.store(min, Ordering::Relaxed);
        let mut store = ctx.get_state_store::<Bytes, Bytes>(outer)?;
        for key in emitted {
            store.delete_blind(&key);
        }
        Ok(())
    }
}

impl<K, VThis, VOther, VR> Processor<K, VThis, K, VR> for JoinSide<K, VThis, VOther, VR>
where
    K: Clone + 'static,
    VThis: Clone + 'static,
    VOther: Clone + 'static,
    VR: Clone + 'static,
{
    fn init(&mut self, ctx: &mut ProcessorContext<'_, K, VR>) -> Result<()> {
        let tracker = self.spec.trackers.take(ctx.task_id(), self.side);
        for (side, name) in [
            (self.side, self.spec.this_store.clone()),
            (self.side.other(), self.spec.other_store.clone()),
        ] {
            let observed = ctx.window_store_observed_time(&name)?;
            tracker.observed[side.byte() as usize].fetch_max(observed, Ordering::Relaxed);
        }
        self.tracker = Some(tracker);
        self.task = Some(ctx.task_id());
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, VR>,
        record: Record<K, VThis>,
    ) -> Result<()> {
        let tracker = self.tracker().clone();
        let ts = record.timestamp();
        tracker.stream_time.fetch_max(ts, Ordering::Relaxed);
        let stream_time = tracker.stream_time.load(Ordering::Relaxed);
        let null_key = self.key_serde.is_null(record.key());
        let null_value = self.this_serde.is_null(record.value());
        if null_key && self.outer && !null_value {
            let joined = (self.joiner)(record.key(), Some(record.value()), None);
            let (key, _, ts, headers) = record.into_parts();
            return ctx.forward(Record::with_headers_of(key, joined, ts, headers));
        }
        if null_key || null_value {
            tracing::warn!(
                processor = ctx.processor_name(),
                record = ?ctx.record_metadata(),
                "skipping a record without a key or a value: a stream-stream join cannot join it"
            );
            ctx.record_dropped();
            return Ok(());
        }
        if ts == stream_time {
            self.emit_closed(ctx)?;
        }
        let (before, after) = self.bounds();
        let time_from = ts.saturating_sub(before).max(0);
        let time_to = ts.saturating_add(after).max(0);
        let retention = self.spec.windows.retention_ms();
        let other_side = self.side.other();
        let other_observed = tracker.observed[other_side.byte() as usize].load(Ordering::Relaxed);
        let live_from = other_observed.saturating_sub(retention).saturating_add(1);
        let matches = if time_to < time_from.max(live_from) {
            Vec::new()
        } else {
            ctx.get_window_store::<K, VOther>(&self.spec.other_store)?
                .fetch(record.key(), time_from.max(live_from), time_to)?
        };
        let spec = Arc::clone(&self.spec);
        if let Some(outer) = spec.outer_store.as_deref()
            && !matches.is_empty()
        {
            self.value_buf.clear();
            self.key_serde.serialize(record.key(), &mut self.value_buf);
            let mut store = ctx.get_state_store::<Bytes, Bytes>(outer)?;
            let mut last = None;
            for (other_ts, _) in &matches {
                if last == Some(*other_ts) {
                    continue;
                }
                last = Some(*other_ts);
                outer_key(*other_ts, other_side, &self.value_buf, &mut self.key_buf);
                let key = Bytes::copy_from_slice(&self.key_buf);
                if store.get(&key)?.is_some() {
                    store.delete_blind(&key);
                }
            }
        }
        let headers = record.headers().clone();
        for (other_ts, other) in &matches {
            let joined = (self.joiner)(record.key(), Some(record.value()), Some(other));
            ctx.forward(Record::with_headers_of(
                record.key().clone(),
                joined,
                ts.max(*other_ts),
                headers.clone(),
            ))?;
        }
        if self.outer && matches.is_empty() {
            if self.spec.outer_store.is_none() || time_to < stream_time {
                let joined = (self.joiner)(record.key(), Some(record.value()), None);
                ctx.forward(Record::with_headers_of(
                    record.key().clone(),
                    joined,
                    ts,
                    headers.clone(),
                ))?;
            } else if let Some(outer) = spec.outer_store.as_deref() {
                tracker.min_time.fetch_min(ts, Ordering::Relaxed);
                self.value_buf.clear();
                self.key_serde.serialize(record.key(), &mut self.value_buf);
                outer_key(ts, self.side, &self.value_buf, &mut self.key_buf);
                let key = Bytes::copy_from_slice(&self.key_buf);
                let mut store = ctx.get_state_store::<Bytes, Bytes>(outer)?;
                let mut list = store.get(&key)?.map(|b| b.to_vec()).unwrap_or_default();
                self.value_buf.clear();
                self.this_serde
                    .serialize(record.value(), &mut self.value_buf);
                push_value(&mut list, &self.value_buf);
                store.put(&key, &Bytes::from(list))?;
            }
        }
        // This record into its own side's store, unless the store's retention is behind it.
        let this = self.side.byte() as usize;
        tracker.observed[this].fetch_max(ts, Ordering::Relaxed);
        let observed = tracker.observed[this].load(Ordering::Relaxed);
        if i128::from(ts) > i128::from(observed) - i128::from(retention) {
            ctx.get_window_store::<K, VThis>(&self.spec.this_store)?
                .put(record.key(), record.value(), ts)?;
        } else {
            // Kafka's window store drops it and counts it.
            ctx.record_dropped();
        }
        Ok(())
    }

    fn close(&mut self) {
        // The first side to close drops the task's tracker; the other keeps its own handle.
        if let (Some(task), Some(tracker)) = (self.task.take(), self.tracker.take()) {
            self.spec.trackers.remove(task, &tracker);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outer_store_keys_sort_by_time_then_right_before_left_then_key() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        outer_key(5, Side::Left, b"a", &mut a);
        outer_key(5, Side::Right, b"z", &mut b);
        assert!(b < a, "the right side sorts first at one timestamp");
        outer_key(4, Side::Left, b"z", &mut b);
        assert!(b < a, "an earlier time sorts first");
        assert_eq!(parse_outer_key(&a), Some((5, Side::Left, &b"a"[..])));
    }

    #[test]
    fn the_two_sides_of_a_task_share_a_tracker_and_a_stale_one_is_replaced() {
        let trackers = TimeTrackers::default();
        let task = TaskId {
            subtopology: 0,
            partition: 1,
        };
        let left = trackers.take(task, Side::Left);
        let right = trackers.take(task, Side::Right);
        assert!(
            Arc::ptr_eq(&left, &right),
            "one instance of a task shares one tracker"
        );
        left.stream_time.store(99, Ordering::Relaxed);
        // An instance that never closed (its init failed): the next one starts afresh.
        let again = trackers.take(task, Side::Right);
        assert!(!Arc::ptr_eq(&again, &right));
        assert_eq!(again.stream_time.load(Ordering::Relaxed), -1);
        // The stale instance closing does not take the new one's tracker away.
        trackers.remove(task, &left);
        assert!(Arc::ptr_eq(&trackers.take(task, Side::Left), &again));
        trackers.remove(task, &again);
        assert!(trackers.by_task.lock().expect("not poisoned").is_empty());
    }

    #[test]
    fn value_lists_round_trip_and_malformed_ones_are_refused() {
        let mut list = Vec::new();
        push_value(&mut list, b"one");
        push_value(&mut list, b"");
        push_value(&mut list, b"three");
        assert_eq!(
            values_of(&list),
            Some(vec![&b"one"[..], &b""[..], &b"three"[..]])
        );
        assert_eq!(values_of(&list[..list.len() - 1]), None);
        assert_eq!(values_of(&[0, 0]), None);
    }
}
