//! The two nodes of a stream–stream windowed join, one per side ([`JoinSide`], Kafka Streams'
//! `KStreamKStreamJoin`, with the spurious-result fix of Kafka 3.1+), over the join's
//! [`JoinWindows`].
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
//! The stream time and the earliest time in the outer store are shared by the two nodes of a
//! task through a [`TimeTrackers`] registry, and are not kept across restarts (as in Kafka
//! Streams: a restarted task starts from the next record's time).
//!
//! Each node reads and writes its three stores by their task-local slots, in their bytes, as
//! the DSL's other windowed operators do: a store keeps the same entries, timestamps and
//! changelog records the typed store handles of the processor API would write (no headers;
//! the timestamp of the last record the node forwarded, else the input record's).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use riffle_state_dir::TaskId;

use crate::dsl::join::stream_stream::options::JoinWindows;
use crate::dsl::join::stream_stream::time::{Side, TimeTracker, TimeTrackers};
use crate::processor::Lifecycle;
use crate::processor::node::{Forward, Node, ProcessingContext, unserializable_state};
use crate::serdes::SerdeRef;
use crate::state::{DecodedEntry, key_bounds, window_entry_key};
use crate::types::error::SerdeError;
use crate::types::error::SerializationExceptionOrigin::{Key, Value};
use crate::types::error::{Error, Result};
use crate::types::record::{Headers, RecordMetadata};

/// The joiner of one side: the key, this side's value and the other side's value (either may
/// be missing in a left or outer join), as that side sees them.
pub(crate) type SideJoiner<K, VThis, VOther, VR> =
    Arc<dyn Fn(&K, Option<&VThis>, Option<&VOther>) -> VR + Send + Sync>;

/// What both sides' nodes share, made once per join (each side sees it from its own side).
pub(crate) struct JoinSpec {
    /// This side's node name, for its log lines.
    pub(crate) processor: String,
    pub(crate) windows: JoinWindows,
    /// The outer store's name, for left and outer joins.
    pub(crate) outer_store: Option<String>,
    /// The other side emits its unmatched records too (an outer join): only then may the
    /// outer store hold the other side's records.
    pub(crate) other_outer: bool,
    pub(crate) trackers: Arc<TimeTrackers>,
}

/// The task-local slots of a side's stores.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SideStores {
    /// This side's window store.
    pub(crate) this: usize,
    /// The other side's window store.
    pub(crate) other: usize,
    /// The outer store, for left and outer joins.
    pub(crate) outer: Option<usize>,
}

/// One side of a stream–stream join.
pub(crate) struct JoinSide<K, VThis, VOther, VR> {
    side: Side,
    /// This side emits its unmatched records (left side of a left join, both of an outer).
    outer: bool,
    spec: Arc<JoinSpec>,
    joiner: SideJoiner<K, VThis, VOther, VR>,
    key_serde: SerdeRef<K>,
    this_serde: SerdeRef<VThis>,
    other_serde: SerdeRef<VOther>,
    stores: SideStores,
    forward: Forward<K, VR>,
    tracker: Option<Arc<TimeTracker>>,
    /// The task this node runs in (from `init`).
    task: Option<TaskId>,
    /// Reused buffers: the record's key serialized, an entry key, a value, an outer store
    /// entry's value list, the other side's matches and their entry keys taken apart.
    raw_key: Vec<u8>,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    list_buf: Vec<u8>,
    matches: Vec<(i64, VOther)>,
    decoded: DecodedEntry,
}

impl<K, VThis, VOther, VR> JoinSide<K, VThis, VOther, VR> {
    pub(crate) fn new(
        (side, outer): (Side, bool),
        spec: Arc<JoinSpec>,
        joiner: SideJoiner<K, VThis, VOther, VR>,
        serdes: (SerdeRef<K>, SerdeRef<VThis>, SerdeRef<VOther>),
        stores: SideStores,
        forward: Forward<K, VR>,
    ) -> Self {
        JoinSide {
            side,
            outer,
            spec,
            joiner,
            key_serde: serdes.0,
            this_serde: serdes.1,
            other_serde: serdes.2,
            stores,
            forward,
            tracker: None,
            task: None,
            raw_key: Vec::new(),
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            list_buf: Vec::new(),
            matches: Vec::new(),
            decoded: DecodedEntry::default(),
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

/// Where the record being processed came from, for a log line (`None` while punctuating).
fn record_metadata(ctx: &ProcessingContext<'_>) -> Option<RecordMetadata> {
    ctx.record.map(|r| RecordMetadata {
        topic: r.topic_partition().topic.clone(),
        partition: r.topic_partition().partition,
        offset: r.offset(),
    })
}

impl<K, VThis, VOther, VR> JoinSide<K, VThis, VOther, VR>
where
    K: Clone + 'static,
    VThis: Clone + 'static,
    VOther: Clone + 'static,
    VR: Clone + 'static,
{
    fn corrupt_in(store: &str, task: TaskId, source: SerdeError) -> Error {
        Error::CorruptState {
            store: store.to_owned(),
            task,
            source,
        }
    }

    fn corrupt(&self, task: TaskId, source: SerdeError) -> Error {
        let store = self.spec.outer_store.as_deref().unwrap_or_default();
        Self::corrupt_in(store, task, source)
    }

    fn malformed(&self, task: TaskId, reason: String) -> Error {
        let source = SerdeError::Invalid {
            type_name: "an outer join store entry",
            reason,
        };
        self.corrupt(task, source)
    }

    /// Emits the unmatched records of the outer store whose windows have closed, oldest
    /// first, and removes them. Each goes out at its own timestamp, which `ctx` keeps.
    fn emit_closed(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        tracker: &TimeTracker,
    ) -> Result<()> {
        let Some(outer) = self.stores.outer else {
            return Ok(());
        };
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
        let now = ctx.signals.wall_clock_ms;
        if now < tracker.next_emit.load(Ordering::Relaxed) {
            return Ok(());
        }
        let interval = ctx.signals.outer_join_emit_interval_ms;
        tracker
            .next_emit
            .store(now.saturating_add(interval), Ordering::Relaxed);
        let mut min = i64::MAX;
        let entries = ctx.stores[outer].scan(None, None)?;
        let (mut left_open, mut right_open) = (false, false);
        let w = self.spec.windows;
        let task = ctx.task;
        let mut emitted = Vec::new();
        for (i, (key, list)) in entries.iter().enumerate() {
            let Some((ts, side, raw_key)) = parse_outer_key(key) else {
                let reason = format!("a key of {} bytes", key.len());
                return Err(self.malformed(task, reason));
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
                return Err(self.malformed(task, reason));
            };
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
                ctx.timestamp = ts;
                self.forward.send(ctx, k.clone(), joined)?;
            }
            emitted.push(i);
        }
        tracker.min_time.store(min, Ordering::Relaxed);
        let no_headers = Headers::new();
        for i in emitted {
            ctx.stores[outer].put(&entries[i].0, None, ctx.timestamp, &no_headers);
        }
        Ok(())
    }

    /// [`Node::process`] with the task's tracker lent, but for restoring the record's
    /// timestamp: forwards and store writes leave `ctx`'s timestamp at the last forwarded
    /// record's.
    fn join(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        tracker: &TimeTracker,
        key: K,
        value: VThis,
    ) -> Result<()> {
        let ts = ctx.timestamp;
        tracker.stream_time.fetch_max(ts, Ordering::Relaxed);
        let stream_time = tracker.stream_time.load(Ordering::Relaxed);
        let null_key = self.key_serde.is_null(&key);
        let null_value = self.this_serde.is_null(&value);
        if null_key && self.outer && !null_value {
            let joined = (self.joiner)(&key, Some(&value), None);
            return self.forward.send(ctx, key, joined);
        }
        if null_key || null_value {
            tracing::warn!(
                processor = self.spec.processor.as_str(),
                record = ?record_metadata(ctx),
                "skipping a record without a key or a value: a stream-stream join cannot join it"
            );
            ctx.signals.dropped_records += 1;
            return Ok(());
        }
        if ts == stream_time {
            self.emit_closed(ctx, tracker)?;
        }
        let (before, after) = self.bounds();
        let time_from = ts.saturating_sub(before).max(0);
        let time_to = ts.saturating_add(after).max(0);
        let retention = self.spec.windows.retention_ms();
        let other_side = self.side.other();
        let other_observed = tracker.observed[other_side.byte() as usize].load(Ordering::Relaxed);
        let live_from = other_observed.saturating_sub(retention).saturating_add(1);
        self.raw_key.clear();
        if let Err(e) = self.key_serde.serialize(&key, &mut self.raw_key) {
            return Err(unserializable_state(ctx, self.stores.this, Key, e));
        }
        // The other side's records of this key in this record's windows, by time.
        let mut matches = std::mem::take(&mut self.matches);
        matches.clear();
        if time_to >= time_from.max(live_from) {
            let other = self.stores.other;
            let (lo, hi) = key_bounds(&self.raw_key);
            let entries =
                ctx.stores[other].scan_window(&lo, &hi, time_from.max(live_from), time_to)?;
            for (entry, bytes, _) in entries {
                ctx.stores[other].decode_entry_into(&entry, &mut self.decoded)?;
                let value = self
                    .other_serde
                    .deserialize(Some(&bytes))
                    .map_err(|e| Self::corrupt_in(ctx.stores[other].inner.name(), ctx.task, e))?;
                matches.push((self.decoded.time, value));
            }
        }
        let no_headers = Headers::new();
        // The matched records of the other side are no longer unmatched.
        if let Some(outer) = self.stores.outer
            && !matches.is_empty()
        {
            let mut last = None;
            for (other_ts, _) in &matches {
                if last == Some(*other_ts) {
                    continue;
                }
                last = Some(*other_ts);
                outer_key(*other_ts, other_side, &self.raw_key, &mut self.key_buf);
                if ctx.stores[outer].get_into(&self.key_buf, &mut ctx.scratch.old)? {
                    ctx.stores[outer].put(&self.key_buf, None, ctx.timestamp, &no_headers);
                }
            }
        }
        let matched = !matches.is_empty();
        for (other_ts, other) in matches.drain(..) {
            let joined = (self.joiner)(&key, Some(&value), Some(&other));
            ctx.timestamp = ts.max(other_ts);
            self.forward.send(ctx, key.clone(), joined)?;
        }
        self.matches = matches;
        if self.outer && !matched {
            match self.stores.outer {
                Some(outer) if time_to >= stream_time => {
                    tracker.min_time.fetch_min(ts, Ordering::Relaxed);
                    outer_key(ts, self.side, &self.raw_key, &mut self.key_buf);
                    let mut list = std::mem::take(&mut self.list_buf);
                    if !ctx.stores[outer].get_into(&self.key_buf, &mut list)? {
                        list.clear();
                    }
                    self.value_buf.clear();
                    if let Err(e) = self.this_serde.serialize(&value, &mut self.value_buf) {
                        self.list_buf = list;
                        return Err(unserializable_state(ctx, outer, Value, e));
                    }
                    push_value(&mut list, &self.value_buf);
                    ctx.stores[outer].put(&self.key_buf, Some(&list), ctx.timestamp, &no_headers);
                    self.list_buf = list;
                }
                _ => {
                    let joined = (self.joiner)(&key, Some(&value), None);
                    ctx.timestamp = ts;
                    self.forward.send(ctx, key, joined)?;
                }
            }
        }
        // This record into its own side's store, unless the store's retention is behind it.
        let this = self.side.byte() as usize;
        tracker.observed[this].fetch_max(ts, Ordering::Relaxed);
        let observed = tracker.observed[this].load(Ordering::Relaxed);
        if i128::from(ts) > i128::from(observed) - i128::from(retention) {
            self.value_buf.clear();
            if let Err(e) = self.this_serde.serialize(&value, &mut self.value_buf) {
                return Err(unserializable_state(ctx, self.stores.this, Value, e));
            }
            let store = &mut ctx.stores[self.stores.this];
            // A store keeping duplicates: every put a new entry.
            let seq = store.next_seq();
            self.key_buf.clear();
            window_entry_key(&self.raw_key, ts, seq, &mut self.key_buf);
            store.put(
                &self.key_buf,
                Some(&self.value_buf),
                ctx.timestamp,
                &no_headers,
            );
        } else {
            // Kafka's window store drops it and counts it.
            ctx.signals.dropped_records += 1;
        }
        Ok(())
    }
}

impl<K, VThis, VOther, VR> Node<K, VThis> for JoinSide<K, VThis, VOther, VR>
where
    K: Clone + 'static,
    VThis: Clone + 'static,
    VOther: Clone + 'static,
    VR: Clone + 'static,
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: VThis) -> Result<()> {
        // Lent for the record, so the shared tracker costs no reference count per record.
        let tracker = self
            .tracker
            .take()
            .expect("riffle invariant: a join node processes only after init");
        let timestamp = ctx.timestamp;
        let result = self.join(ctx, &tracker, key, value);
        ctx.timestamp = timestamp;
        self.tracker = Some(tracker);
        result
    }
}

impl<K, VThis, VOther, VR> Lifecycle for JoinSide<K, VThis, VOther, VR> {
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let tracker = self.spec.trackers.take(ctx.task, self.side);
        // Each window store's observed time as the task opened it (`i64::MIN`: empty).
        for (side, slot) in [
            (self.side, self.stores.this),
            (self.side.other(), self.stores.other),
        ] {
            let observed = ctx.stores[slot]
                .inner
                .as_segmented()
                .map_or(i64::MIN, |s| s.observed_time());
            tracker.observed[side.byte() as usize].fetch_max(observed, Ordering::Relaxed);
        }
        self.tracker = Some(tracker);
        self.task = Some(ctx.task);
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
