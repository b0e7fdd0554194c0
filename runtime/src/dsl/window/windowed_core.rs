//! What every windowed aggregation has ([`WindowedCore`]): its store and serdes, its observed
//! stream time, the windows waiting to close, and what it does at task start and at commit.
//!
//! Every aggregation keeps its *observed stream time* (the largest timestamp it has seen) in its
//! own store, under a meta key, written at each commit with the windows it covers: after a crash
//! the aggregation resumes with the stream time of its last commit, so it drops and emits exactly
//! what it would have without the crash. With `EmitStrategy::OnWindowClose` it also keeps, in
//! memory, the windows not yet closed ordered by the stream time that closes them (rebuilt from
//! the store when the task starts), so emitting final results costs nothing until a window
//! closes.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::processor::node::{Forward, ProcessingContext};
use crate::serdes::SerdeRef;
use crate::state::NO_TIMESTAMP;
use crate::state::StoreError;
use crate::state::is_meta;
use crate::state::{DecodedEntry, meta_key};
use crate::types::error::{Error, Result};
use crate::types::error::{SerdeError, SerializationExceptionOrigin};
use crate::types::record::Headers;
use crate::types::window::{EmitStrategy, Window, WindowKind, Windowed};

/// Folds a value into a window's aggregate (`None`: the window's first value).
pub(crate) type FoldFn<K, V, A> = Arc<dyn Fn(&K, V, Option<A>) -> A + Send + Sync>;
/// Merges a session's aggregate into the aggregate so far (`None`: the first session).
pub(crate) type MergeFn<K, A> = Arc<dyn Fn(&K, Option<A>, A) -> A + Send + Sync>;

/// The meta key of an aggregation's observed stream time.
const OBSERVED: &[u8] = b"observed-stream-time";

/// What every windowed aggregation has: its store, serdes, emit strategy, stream time and the
/// windows waiting to close.
pub(crate) struct WindowedCore<K, A> {
    pub(crate) store: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) agg_serde: SerdeRef<A>,
    pub(crate) emit: EmitStrategy,
    pub(crate) kind: WindowKind,
    /// How long the store keeps windows (entry times at or after `observed - retention + 1`
    /// are the ones the aggregation reads: a bound of its own stream time, so what it sees
    /// never depends on when a commit dropped a segment).
    pub(crate) retention_ms: i64,
    pub(crate) forward: Forward<Windowed<K>, A>,
    /// The largest timestamp seen (Kafka's `observedStreamTime`; -1 before the first).
    pub(super) observed: i64,
    /// `observed` moved since the last commit wrote it.
    observed_dirty: bool,
    /// Emit-on-close only: (the stream time that closes it, entry key) of every open window.
    pending: BTreeSet<(i64, Vec<u8>)>,
    /// Reused for entry keys.
    pub(super) entry: Vec<u8>,
    /// Holds the record's serialized key (the thread's key buffer, which the nodes build
    /// entry keys from) while an update goes downstream at once and its nodes use that buffer.
    record_key: Vec<u8>,
    /// Reused for the entry keys taken apart at commit.
    decoded: DecodedEntry,
    /// Among the aggregations sharing this store (a cogroup's inputs), this one's number: its
    /// stream time's meta key, and whether it forwards the store's updates at commit (input 0
    /// only: one store, one flush).
    input: u32,
}

impl<K: Clone + 'static, A: Clone + 'static> WindowedCore<K, A> {
    pub(crate) fn new(
        store: usize,
        key_serde: SerdeRef<K>,
        agg_serde: SerdeRef<A>,
        emit: EmitStrategy,
        kind: WindowKind,
        retention_ms: i64,
        forward: Forward<Windowed<K>, A>,
    ) -> Self {
        WindowedCore {
            store,
            key_serde,
            agg_serde,
            emit,
            kind,
            retention_ms,
            forward,
            observed: -1,
            observed_dirty: false,
            pending: BTreeSet::new(),
            entry: Vec::new(),
            record_key: Vec::new(),
            decoded: DecodedEntry::default(),
            input: 0,
        }
    }

    /// Makes this the `input`-th of the aggregations sharing its store (a cogroup's).
    pub(crate) fn share(&mut self, input: u32) {
        self.input = input;
    }

    /// This aggregation's stream-time meta key: input 0's is the plain aggregation's.
    fn observed_key(&self, out: &mut Vec<u8>) {
        if self.input == 0 {
            meta_key(OBSERVED, out);
        } else {
            meta_key(
                format!("observed-stream-time-{}", self.input).as_bytes(),
                out,
            );
        }
    }

    pub(super) fn corrupt(&self, ctx: &ProcessingContext<'_>, source: SerdeError) -> Error {
        Error::CorruptState {
            store: ctx.stores[self.store].inner.name().to_owned(),
            task: ctx.task,
            source,
        }
    }

    /// A key (`origin`) or aggregate the store's serde could not serialize.
    fn unserializable(
        &self,
        ctx: &ProcessingContext<'_>,
        origin: SerializationExceptionOrigin,
        source: SerdeError,
    ) -> Error {
        Error::SerializeState {
            store: ctx.stores[self.store].inner.name().to_owned(),
            origin,
            source,
        }
    }

    /// Serializes `key` into the thread's scratch key buffer.
    pub(super) fn serialize_key(&self, ctx: &mut ProcessingContext<'_>, key: &K) -> Result<()> {
        ctx.scratch.key.clear();
        match self.key_serde.serialize(key, &mut ctx.scratch.key) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.unserializable(ctx, SerializationExceptionOrigin::Key, e)),
        }
    }

    /// The window an entry of the store stands for.
    pub(super) fn window_of(&self, e: &DecodedEntry) -> Window {
        match self.kind {
            WindowKind::Time(w) => Window::new(e.time, e.time.saturating_add(w.size_ms)),
            WindowKind::Sliding(w) => Window::new(e.time, e.time.saturating_add(w.difference_ms)),
            WindowKind::Session(_) => Window::new(e.second, e.time),
        }
    }

    /// The oldest entry time the aggregation reads: what its store keeps at its stream time.
    pub(super) fn oldest_readable(&self) -> i64 {
        self.observed
            .saturating_sub(self.retention_ms)
            .saturating_add(1)
    }

    /// Moves stream time to `timestamp` if it is later.
    pub(super) fn observe(&mut self, timestamp: i64) {
        if timestamp > self.observed {
            self.observed = timestamp;
            self.observed_dirty = true;
        }
    }

    /// Counts and logs a record too late for `window`.
    pub(super) fn dropped(&self, ctx: &mut ProcessingContext<'_>, window: Window) {
        ctx.signals.dropped_records += 1;
        let (topic, partition, offset) = match ctx.record {
            Some(r) => {
                let tp = r.topic_partition();
                (tp.topic.to_string(), tp.partition, r.offset())
            }
            None => (String::new(), 0, 0),
        };
        tracing::debug!(
            task = %ctx.task,
            %topic,
            partition,
            offset,
            timestamp = ctx.timestamp,
            window_start = window.start,
            window_end = window.end,
            stream_time = self.observed,
            "skipping a record for an expired window"
        );
    }

    /// Reads the aggregate of entry `entry` (cache, then store) with its timestamp.
    pub(super) fn read(
        &self,
        ctx: &mut ProcessingContext<'_>,
        entry: &[u8],
    ) -> Result<Option<(A, i64)>> {
        let scratch = &mut *ctx.scratch;
        match ctx.stores[self.store].get_with_timestamp(entry, &mut scratch.old)? {
            None => Ok(None),
            Some(ts) => match self.agg_serde.deserialize(Some(&scratch.old)) {
                Ok(a) => Ok(Some((a, ts))),
                Err(e) => Err(self.corrupt(ctx, e)),
            },
        }
    }

    /// Writes `agg` (`None` deletes) at entry `entry`, `key`'s `window`; a new entry starts
    /// waiting to close. With emit-on-update and caching disabled the update goes downstream at
    /// once, with `timestamp` (Kafka's uncached windowed aggregations forward every write).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: &K,
        entry: &[u8],
        window: Window,
        agg: Option<&A>,
        timestamp: i64,
        is_new: bool,
    ) -> Result<()> {
        let end = window.end;
        let scratch = &mut *ctx.scratch;
        scratch.value.clear();
        if let Some(agg) = agg
            && let Err(e) = self.agg_serde.serialize(agg, &mut scratch.value)
        {
            return Err(self.unserializable(ctx, SerializationExceptionOrigin::Value, e));
        }
        ctx.stores[self.store].put(
            entry,
            agg.is_some().then_some(&scratch.value[..]),
            timestamp,
            &ctx.headers,
        );
        if self.emit == EmitStrategy::OnWindowClose {
            let close = self.kind.close_time(end);
            if agg.is_none() {
                self.pending.remove(&(close, entry.to_vec()));
            } else if is_new {
                self.pending.insert((close, entry.to_vec()));
            }
            return Ok(());
        }
        if ctx.stores[self.store].caches_writes() {
            return Ok(());
        }
        let saved = std::mem::replace(&mut ctx.timestamp, timestamp);
        std::mem::swap(&mut self.record_key, &mut ctx.scratch.key);
        let key = Windowed::new(key.clone(), window);
        let sent = match agg {
            Some(agg) => self.forward.send(ctx, key, agg.clone()),
            None => self.forward.send_tombstone(ctx, key),
        };
        std::mem::swap(&mut self.record_key, &mut ctx.scratch.key);
        ctx.timestamp = saved;
        sent
    }

    /// Emit-on-close: forwards the final result of every window stream time has closed.
    pub(super) fn emit_closed(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        if self.emit != EmitStrategy::OnWindowClose {
            return Ok(());
        }
        let timestamp = ctx.timestamp;
        while let Some(first) = self.pending.first() {
            if first.0 > self.observed {
                break;
            }
            let Some((_, entry)) = self.pending.pop_first() else {
                break;
            };
            let Some((agg, ts)) = self.read(ctx, &entry)? else {
                // Stores keep a window until it has closed (`store_retention_ms`), and a merged
                // session leaves the set when it is deleted: a missing one is lost state.
                let decoded = ctx.stores[self.store].decode_entry(&entry)?;
                return Err(Error::IllegalState(format!(
                    "store {} lost window {:?} of a key of {} bytes before it closed (stream time {})",
                    ctx.stores[self.store].inner.name(),
                    self.window_of(&decoded),
                    decoded.key.len(),
                    self.observed
                )));
            };
            ctx.stores[self.store].decode_entry_into(&entry, &mut self.decoded)?;
            let key = self
                .key_serde
                .deserialize(Some(&self.decoded.key))
                .map_err(|e| self.corrupt(ctx, e))?;
            let window = self.window_of(&self.decoded);
            ctx.timestamp = match self.kind {
                WindowKind::Session(_) => window.end,
                _ if ts == NO_TIMESTAMP => window.start,
                _ => ts,
            };
            let result = self.forward.send(ctx, Windowed::new(key, window), agg);
            ctx.timestamp = timestamp;
            result?;
        }
        Ok(())
    }

    /// At task start: the stream time of the last commit, and the windows still open.
    pub(super) fn load(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let mut key = Vec::new();
        self.observed_key(&mut key);
        let scratch = &mut *ctx.scratch;
        if ctx.stores[self.store]
            .get_with_timestamp(&key, &mut scratch.old)?
            .is_some()
        {
            let bytes: [u8; 8] = scratch.old.as_slice().try_into().map_err(|_| {
                Error::Store(StoreError::Corrupt {
                    store: ctx.stores[self.store].inner.name().to_owned(),
                    reason: format!(
                        "its observed stream time has {} bytes, not 8",
                        scratch.old.len()
                    ),
                })
            })?;
            self.observed = i64::from_be_bytes(bytes);
        }
        self.pending.clear();
        if self.emit == EmitStrategy::OnWindowClose {
            // Entry times (window starts, session ends) of windows that may still be open.
            let from_time = match self.kind {
                WindowKind::Time(w) => self.observed - w.size_ms - w.grace_ms,
                WindowKind::Sliding(w) => self.observed - w.difference_ms - w.grace_ms - 1,
                WindowKind::Session(w) => self.observed - w.gap_ms - w.grace_ms - 1,
            };
            let entries = ctx.stores[self.store].scan_window(&[], &[], from_time, i64::MAX)?;
            for (entry, _, _) in entries {
                let decoded = ctx.stores[self.store].decode_entry(&entry)?;
                let close = self.kind.close_time(self.window_of(&decoded).end);
                if close > self.observed {
                    self.pending.insert((close, entry));
                }
            }
        }
        Ok(())
    }

    /// At commit: writes the stream time, and with emit-on-update forwards every window changed
    /// since the last commit (its latest value; a tombstone for a session merged away that the
    /// store held, so forwarded by an earlier commit).
    pub(super) fn flush(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        if self.observed_dirty {
            let mut key = Vec::new();
            self.observed_key(&mut key);
            let headers = Headers::new();
            ctx.stores[self.store].put(
                &key,
                Some(&self.observed.to_be_bytes()),
                self.observed,
                &headers,
            );
            self.observed_dirty = false;
        }
        // Emit-on-close forwards what closes; without a cache every write went on as made; of
        // the aggregations sharing a store (a cogroup's) input 0 forwards its updates.
        if self.emit != EmitStrategy::OnWindowUpdate
            || !ctx.stores[self.store].caches_writes()
            || self.input != 0
        {
            return Ok(());
        }
        // In the order of their last write, as Kafka's cache flushes: an update's timestamp
        // never overtakes an earlier one's (suppression downstream relies on it).
        ctx.stores[self.store].order_by_last_write();
        let dirty = ctx.stores[self.store].dirty_len();
        for i in 0..dirty {
            let (entry, value, _) = ctx.stores[self.store].dirty(i);
            if is_meta(entry) {
                continue;
            }
            // A window deleted that the store did not hold (a session created and merged away
            // since the last commit) was never forwarded: its delete goes nowhere, as Kafka's
            // caching session store skips it.
            if value.is_none() && !ctx.stores[self.store].dirty_old(i, &mut ctx.scratch.old)? {
                continue;
            }
            let (entry, value, timestamp) = ctx.stores[self.store].dirty(i);
            ctx.stores[self.store].decode_entry_into(entry, &mut self.decoded)?;
            let value = value.map(|v| self.agg_serde.deserialize(Some(v)));
            let key = self.key_serde.deserialize(Some(&self.decoded.key));
            let window = self.window_of(&self.decoded);
            ctx.timestamp = timestamp;
            ctx.headers = ctx.stores[self.store].dirty_headers(i).clone();
            let key = key.map_err(|e| self.corrupt(ctx, e))?;
            match value {
                Some(Ok(v)) => self.forward.send(ctx, Windowed::new(key, window), v)?,
                Some(Err(e)) => return Err(self.corrupt(ctx, e)),
                None => self
                    .forward
                    .send_tombstone(ctx, Windowed::new(key, window))?,
            }
        }
        Ok(())
    }
}
