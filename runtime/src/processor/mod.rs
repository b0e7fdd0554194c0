//! The processor API: [`Processor`] and [`FixedKeyProcessor`], the [`ProcessorContext`] they
//! run in, punctuation ([`PunctuationType`], [`Cancellable`]) and typed access to their state
//! stores ([`KeyValueStore`]).
//!
//! The context is passed to every call (`init`, `process`, a punctuator) instead of being kept
//! from `init` as in Kafka Streams' Java API: what it lends (the task's stores, the thread's
//! outgoing batches) is borrowed only for the call, which the compiler checks.

pub(crate) mod collector;
pub(crate) mod node;
pub(crate) mod window_store;

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use riffle_state_dir::TaskId;

use crate::processor::node::{Forward, Node, ProcessingContext};
pub use crate::processor::window_store::{SessionStore, WindowStore};
use crate::serdes::SerdeRef;
use crate::state::CachedStore;
use crate::state::def::StoreKind;
pub(crate) use crate::state::def::StoreSerdes;
use crate::types::error::SerdeError;
use crate::types::error::{Error, Result};
pub use crate::types::record::{FixedKeyRecord, Header, Headers, Record, RecordMetadata};
pub(crate) use crate::types::timestamp::system_time_ms;
pub use crate::types::timestamp::{
    FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, TimestampExtractor,
    TimestampExtractorRef, UsePartitionTimeOnInvalidTimestamp, WallclockTimestampExtractor,
};

/// A processor: takes records of one type, forwards records of another (Kafka Streams'
/// `Processor<KIn, VIn, KOut, VOut>`). One instance runs per task, built by the supplier given
/// to [`crate::KStream::process`] or [`crate::Topology::add_processor`].
pub trait Processor<KIn, VIn, KOut, VOut>: 'static {
    /// Called once when the task starts, before any record: schedule punctuators here.
    fn init(&mut self, ctx: &mut ProcessorContext<'_, KOut, VOut>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
    /// Processes one record; forward results with [`ProcessorContext::forward`].
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<()>;
    /// Called once when the task closes.
    fn close(&mut self) {}
}

/// A processor that cannot change the key (Kafka Streams' `FixedKeyProcessor`): the stream
/// after it needs no repartitioning.
pub trait FixedKeyProcessor<K, VIn, VOut>: 'static {
    /// Called once when the task starts.
    fn init(&mut self, ctx: &mut FixedKeyProcessorContext<'_, K, VOut>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
    /// Processes one record; forward results with [`FixedKeyProcessorContext::forward`].
    fn process(
        &mut self,
        ctx: &mut FixedKeyProcessorContext<'_, K, VOut>,
        record: FixedKeyRecord<K, VIn>,
    ) -> Result<()>;
    /// Called once when the task closes.
    fn close(&mut self) {}
}

/// Which clock a punctuator follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PunctuationType {
    /// The task's stream time (the largest record timestamp it processed): fires when stream
    /// time reaches the next multiple of the interval, once however many intervals it
    /// jumped.
    StreamTime,
    /// The system clock: fires every interval from when it was scheduled, even when the task
    /// gets no records.
    WallClockTime,
}

/// Cancels a scheduled punctuator ([`ProcessorContext::schedule`]).
#[derive(Clone, Debug)]
pub struct Cancellable {
    cancelled: Rc<Cell<bool>>,
}

impl Cancellable {
    /// Stops the punctuator; it does not fire again.
    pub fn cancel(&self) {
        self.cancelled.set(true);
    }
}

/// A punctuator with its node's context bound in: called with the task's raw context and the
/// punctuation time.
pub(crate) type Punctuator = Box<dyn FnMut(&mut ProcessingContext<'_>, i64) -> Result<()>>;

/// A scheduled punctuator (Kafka Streams' `PunctuationSchedule`).
pub(crate) struct Schedule {
    pub(crate) kind: PunctuationType,
    pub(crate) interval: i64,
    /// When it fires next (ms, stream or wall-clock time).
    pub(crate) next: i64,
    pub(crate) cancelled: Rc<Cell<bool>>,
    pub(crate) punctuator: Punctuator,
    /// Order among schedules due at the same time: scheduling order.
    pub(crate) seq: u64,
}

impl Schedule {
    /// The next deadline after firing at `now`: one interval on, or — if `now` jumped over
    /// several — the first multiple of the interval after `now`, so missed punctuations are
    /// not made up (Kafka Streams' `PunctuationSchedule.next`).
    pub(crate) fn reschedule(&mut self, now: i64) {
        let mut next = self.next.saturating_add(self.interval);
        if now >= next {
            let missed = (now - self.next) / self.interval;
            next = self
                .next
                .saturating_add(missed.saturating_add(1).saturating_mul(self.interval));
        }
        self.next = next;
    }
}

/// What a task's nodes share with the task while they run: time, requests and new schedules.
pub(crate) struct TaskSignals {
    pub(crate) application_id: Arc<str>,
    /// The largest timestamp processed (-1 before the first record).
    pub(crate) stream_time: i64,
    /// The wall-clock time of the current loop iteration, in ms.
    pub(crate) wall_clock_ms: i64,
    /// A processor asked for a commit.
    pub(crate) commit_requested: bool,
    /// Schedules made since the task last collected them.
    pub(crate) scheduled: Vec<Schedule>,
    pub(crate) next_seq: u64,
    /// Records dropped since the thread last collected them (late for their windows).
    pub(crate) dropped_records: u64,
    /// How often a stream–stream left or outer join looks for unmatched records whose windows
    /// closed, in wall-clock ms (`outer_join_emit_interval`).
    pub(crate) outer_join_emit_interval_ms: i64,
}

impl TaskSignals {
    pub(crate) fn new(application_id: Arc<str>) -> Self {
        TaskSignals {
            application_id,
            stream_time: -1,
            wall_clock_ms: system_time_ms(),
            commit_requested: false,
            scheduled: Vec::new(),
            next_seq: 0,
            dropped_records: 0,
            outer_join_emit_interval_ms: 1_000,
        }
    }
}

/// A store connected to a processor: its name, slot in the task and typed serdes.
#[derive(Clone)]
pub(crate) struct ConnectedStore {
    pub(crate) name: String,
    pub(crate) slot: usize,
    pub(crate) serdes: Option<Arc<dyn Any + Send + Sync>>,
    pub(crate) kind: StoreKind,
}

/// What a processor node knows of itself.
pub(crate) struct NodeShared<KOut, VOut> {
    pub(crate) name: Arc<str>,
    pub(crate) forward: Forward<KOut, VOut>,
    pub(crate) child_names: Vec<Arc<str>>,
    pub(crate) stores: Vec<ConnectedStore>,
}

impl<KOut, VOut> NodeShared<KOut, VOut> {
    fn error(&self, task: TaskId, e: Error) -> Error {
        match e {
            Error::User(source) => Error::Processor {
                processor: self.name.to_string(),
                task,
                source,
            },
            other => other,
        }
    }

    fn misuse(&self, reason: String) -> Error {
        Error::ProcessorContext {
            processor: self.name.to_string(),
            reason,
        }
    }
}

/// What a [`Processor`] sees: where to forward, its stores, the current record's metadata,
/// time, and scheduling (Kafka Streams' `ProcessorContext`).
pub struct ProcessorContext<'c, KOut, VOut> {
    raw: ProcessingContext<'c>,
    node: &'c Rc<NodeShared<KOut, VOut>>,
}

impl<'c, KOut: Clone + 'static, VOut: Clone + 'static> ProcessorContext<'c, KOut, VOut> {
    pub(crate) fn new(raw: ProcessingContext<'c>, node: &'c Rc<NodeShared<KOut, VOut>>) -> Self {
        ProcessorContext { raw, node }
    }

    /// Sends `record` to every child of this processor, with its timestamp and headers.
    pub fn forward(&mut self, record: Record<KOut, VOut>) -> Result<()> {
        let (key, value, timestamp, headers) = record.into_parts();
        self.raw.timestamp = timestamp;
        self.raw.headers = headers;
        self.node.forward.send(&mut self.raw, key, value)
    }

    /// Sends `record` to the child named `child` only.
    pub fn forward_to(&mut self, child: &str, record: Record<KOut, VOut>) -> Result<()> {
        let Some(i) = self.node.child_names.iter().position(|c| &**c == child) else {
            let children: Vec<&str> = self.node.child_names.iter().map(|c| &**c).collect();
            return Err(self.node.misuse(format!(
                "forward_to({child:?}): not a child (children: {children:?})"
            )));
        };
        let (key, value, timestamp, headers) = record.into_parts();
        self.raw.timestamp = timestamp;
        self.raw.headers = headers;
        self.node.forward.send_to(i, &mut self.raw, key, value)
    }

    /// Schedules `punctuator` every `interval` on `kind`'s clock; it is called with this
    /// processor's context and the punctuation time (stream time, or the wall-clock time in
    /// ms). Records it forwards carry that time; its forwards and store writes are committed
    /// like processed records. Stream-time punctuators first fire at stream time 0 (as soon as
    /// the task has a record), wall-clock ones one interval from now.
    pub fn schedule(
        &mut self,
        interval: Duration,
        kind: PunctuationType,
        mut punctuator: impl FnMut(&mut ProcessorContext<'_, KOut, VOut>, i64) -> Result<()> + 'static,
    ) -> Result<Cancellable> {
        let interval = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        if interval < 1 {
            return Err(self
                .node
                .misuse("a punctuation interval must be at least 1 ms".into()));
        }
        let cancelled = Rc::new(Cell::new(false));
        let node = Rc::clone(self.node);
        let erased: Punctuator = Box::new(move |raw: &mut ProcessingContext<'_>, time: i64| {
            let task = raw.task;
            let mut ctx = ProcessorContext {
                raw: raw.reborrow(),
                node: &node,
            };
            punctuator(&mut ctx, time).map_err(|e| node.error(task, e))
        });
        let signals = &mut *self.raw.signals;
        let next = match kind {
            PunctuationType::StreamTime => 0,
            PunctuationType::WallClockTime => signals.wall_clock_ms.saturating_add(interval),
        };
        signals.next_seq += 1;
        signals.scheduled.push(Schedule {
            kind,
            interval,
            next,
            cancelled: Rc::clone(&cancelled),
            punctuator: erased,
            seq: signals.next_seq,
        });
        Ok(Cancellable { cancelled })
    }
}

impl<'c, KOut, VOut> ProcessorContext<'c, KOut, VOut> {
    /// The connected store `name` of the kind `kind` names, with its serdes.
    fn connected_in<'n, K: 'static, V: 'static>(
        node: &'n NodeShared<KOut, VOut>,
        name: &str,
        kind: &str,
    ) -> Result<(&'n ConnectedStore, &'n StoreSerdes<K, V>)> {
        let Some(store) = node.stores.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = node.stores.iter().map(|s| s.name.as_str()).collect();
            return Err(node.misuse(format!(
                "store {name:?} is not connected to it (connected: {names:?})"
            )));
        };
        let actual = match store.kind {
            StoreKind::KeyValue => "key-value",
            StoreKind::Window { .. } => "window",
            StoreKind::Session { .. } => "session",
        };
        if actual != kind {
            return Err(node.misuse(format!(
                "store {name:?} is a {actual} store, not a {kind} store"
            )));
        }
        let serdes = store
            .serdes
            .as_ref()
            .and_then(|s| s.downcast_ref::<StoreSerdes<K, V>>())
            .ok_or_else(|| {
                node.misuse(format!(
                    "store {name:?} does not hold {} keys and {} values",
                    std::any::type_name::<K>(),
                    std::any::type_name::<V>()
                ))
            })?;
        Ok((store, serdes))
    }

    /// The window store `name` (built with [`crate::Stores::window_store_builder`], or a
    /// windowed aggregation's), connected to this processor.
    pub fn get_window_store<K: 'static, V: 'static>(
        &mut self,
        name: &str,
    ) -> Result<WindowStore<'_, K, V>> {
        let node: &'c NodeShared<KOut, VOut> = self.node;
        let (store, serdes) = Self::connected_in::<K, V>(node, name, "window")?;
        let (window_ms, retain_duplicates) = match store.kind {
            StoreKind::Window {
                window_ms,
                retain_duplicates,
                ..
            } => (window_ms, retain_duplicates),
            _ => (0, false),
        };
        Ok(WindowStore::new(
            &mut self.raw.stores[store.slot],
            &mut self.raw.scratch.store,
            serdes,
            window_ms,
            retain_duplicates,
            self.raw.timestamp,
            self.raw.task,
        ))
    }

    /// The session store `name` (built with [`crate::Stores::session_store_builder`], or a
    /// session aggregation's), connected to this processor.
    pub fn get_session_store<K: 'static, V: 'static>(
        &mut self,
        name: &str,
    ) -> Result<SessionStore<'_, K, V>> {
        let node: &'c NodeShared<KOut, VOut> = self.node;
        let (store, serdes) = Self::connected_in::<K, V>(node, name, "session")?;
        Ok(SessionStore::new(
            &mut self.raw.stores[store.slot],
            &mut self.raw.scratch.store,
            serdes,
            self.raw.timestamp,
            self.raw.task,
        ))
    }

    /// A key-value store connected to this processor, typed as the [`crate::StoreBuilder`] that
    /// made it.
    pub fn get_state_store<K: 'static, V: 'static>(
        &mut self,
        name: &str,
    ) -> Result<KeyValueStore<'_, K, V>> {
        let node: &'c NodeShared<KOut, VOut> = self.node;
        let (store, serdes) = Self::connected_in::<K, V>(node, name, "key-value")?;
        Ok(KeyValueStore {
            store: &mut self.raw.stores[store.slot],
            scratch: &mut self.raw.scratch.store,
            key_serde: &serdes.key,
            value_serde: &serdes.value,
            timestamp: self.raw.timestamp,
            task: self.raw.task,
        })
    }

    /// Where the record being processed came from; `None` while punctuating.
    pub fn record_metadata(&self) -> Option<RecordMetadata> {
        self.raw.record.map(|r| RecordMetadata {
            topic: r.topic_partition().topic.clone(),
            partition: r.topic_partition().partition,
            offset: r.offset(),
        })
    }

    /// The task this processor runs in.
    pub fn task_id(&self) -> TaskId {
        self.raw.task
    }

    /// The application's id.
    pub fn application_id(&self) -> &str {
        &self.raw.signals.application_id
    }

    /// The task's stream time: the largest timestamp it processed (-1 before any record).
    pub fn current_stream_time_ms(&self) -> i64 {
        self.raw.signals.stream_time
    }

    /// The wall-clock time of the stream thread's current loop iteration (the test driver's
    /// mocked clock under [`crate::TopologyTestDriver`]).
    pub fn current_system_time_ms(&self) -> i64 {
        self.raw.signals.wall_clock_ms
    }

    /// The timestamp of the record being processed (the punctuation time while punctuating).
    pub fn timestamp(&self) -> i64 {
        self.raw.timestamp
    }

    /// The headers of the record being processed (none while punctuating).
    pub fn headers(&self) -> &Headers {
        &self.raw.headers
    }

    /// The processor's node name.
    pub fn processor_name(&self) -> &str {
        &self.node.name
    }

    /// Asks for a commit as soon as possible (after the current record).
    pub fn commit(&mut self) {
        self.raw.signals.commit_requested = true;
    }

    /// Counts a record in the `dropped-records` metric.
    pub(crate) fn record_dropped(&mut self) {
        self.raw.signals.dropped_records += 1;
    }

    /// The configured `outer_join_emit_interval`, in ms.
    pub(crate) fn outer_join_emit_interval_ms(&self) -> i64 {
        self.raw.signals.outer_join_emit_interval_ms
    }

    /// The observed time (largest window start written) of the connected window store `name`
    /// as its task opened it: `i64::MIN` for an empty store.
    pub(crate) fn window_store_observed_time(&self, name: &str) -> Result<i64> {
        let Some(store) = self.node.stores.iter().find(|s| s.name == name) else {
            return Err(self
                .node
                .misuse(format!("store {name:?} is not connected to it")));
        };
        Ok(self.raw.stores[store.slot]
            .inner
            .as_segmented()
            .map_or(i64::MIN, |s| s.observed_time()))
    }
}

/// The context of a [`FixedKeyProcessor`]: a [`ProcessorContext`] whose forwards keep the key.
pub struct FixedKeyProcessorContext<'c, K, VOut> {
    inner: ProcessorContext<'c, K, VOut>,
}

impl<K: Clone + 'static, VOut: Clone + 'static> FixedKeyProcessorContext<'_, K, VOut> {
    /// Sends `record` to every child.
    pub fn forward(&mut self, record: FixedKeyRecord<K, VOut>) -> Result<()> {
        self.inner.forward(record.into_record())
    }

    /// Sends `record` to the child named `child` only.
    pub fn forward_to(&mut self, child: &str, record: FixedKeyRecord<K, VOut>) -> Result<()> {
        self.inner.forward_to(child, record.into_record())
    }

    /// Schedules a punctuator (see [`ProcessorContext::schedule`]); it forwards with
    /// [`ProcessorContext::forward`] under the same key rule: keep the keys you were given.
    pub fn schedule(
        &mut self,
        interval: Duration,
        kind: PunctuationType,
        punctuator: impl FnMut(&mut ProcessorContext<'_, K, VOut>, i64) -> Result<()> + 'static,
    ) -> Result<Cancellable> {
        self.inner.schedule(interval, kind, punctuator)
    }
}

impl<'c, K, VOut> std::ops::Deref for FixedKeyProcessorContext<'c, K, VOut> {
    type Target = ProcessorContext<'c, K, VOut>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<K, VOut> FixedKeyProcessorContext<'_, K, VOut> {
    /// A state store connected to this processor (see [`ProcessorContext::get_state_store`]).
    pub fn get_state_store<SK: 'static, SV: 'static>(
        &mut self,
        name: &str,
    ) -> Result<KeyValueStore<'_, SK, SV>> {
        self.inner.get_state_store(name)
    }

    /// A window store connected to this processor (see [`ProcessorContext::get_window_store`]).
    pub fn get_window_store<SK: 'static, SV: 'static>(
        &mut self,
        name: &str,
    ) -> Result<WindowStore<'_, SK, SV>> {
        self.inner.get_window_store(name)
    }

    /// A session store connected to this processor (see
    /// [`ProcessorContext::get_session_store`]).
    pub fn get_session_store<SK: 'static, SV: 'static>(
        &mut self,
        name: &str,
    ) -> Result<SessionStore<'_, SK, SV>> {
        self.inner.get_session_store(name)
    }

    /// Asks for a commit as soon as possible.
    pub fn commit(&mut self) {
        self.inner.commit()
    }
}

/// A typed key-value store, as a processor sees it (Kafka Streams' `KeyValueStore<K, V>`).
///
/// Reads see this commit's writes; writes reach the changelog and the store at the task's
/// next commit (docs/design.md §3). Keys are ordered by their serialized bytes, as in Kafka.
pub struct KeyValueStore<'a, K, V> {
    store: &'a mut CachedStore,
    scratch: &'a mut StoreScratch,
    key_serde: &'a SerdeRef<K>,
    value_serde: &'a SerdeRef<V>,
    timestamp: i64,
    task: TaskId,
}

/// Buffers the typed store handles reuse.
#[derive(Default)]
pub(crate) struct StoreScratch {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) old: Vec<u8>,
}

impl<'a, K: 'static, V: 'static> KeyValueStore<'a, K, V> {
    // Used by the test driver (the `embedded` feature).
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn new(
        store: &'a mut CachedStore,
        scratch: &'a mut StoreScratch,
        serdes: &'a StoreSerdes<K, V>,
        task: TaskId,
    ) -> Self {
        KeyValueStore {
            store,
            scratch,
            key_serde: &serdes.key,
            value_serde: &serdes.value,
            timestamp: 0,
            task,
        }
    }

    fn corrupt(&self, source: SerdeError) -> Error {
        Error::CorruptState {
            store: self.store.inner.name().to_owned(),
            task: self.task,
            source,
        }
    }

    fn decode_value(&self, bytes: &[u8]) -> Result<V> {
        self.value_serde
            .deserialize(Some(bytes))
            .map_err(|e| self.corrupt(e))
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        self.store.inner.name()
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &K) -> Result<Option<V>> {
        let s = &mut *self.scratch;
        s.key.clear();
        self.key_serde.serialize(key, &mut s.key);
        if !self.store.get_into(&s.key, &mut s.old)? {
            return Ok(None);
        }
        let old = std::mem::take(&mut self.scratch.old);
        let value = self.decode_value(&old);
        self.scratch.old = old;
        value.map(Some)
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &K, value: &V) -> Result<()> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.value.clear();
        self.key_serde.serialize(key, &mut s.key);
        self.value_serde.serialize(value, &mut s.value);
        self.store
            .put(&s.key, Some(&s.value), self.timestamp, &Headers::new());
        Ok(())
    }

    /// Sets `key` to `value` unless it has a value; returns the value it had.
    pub fn put_if_absent(&mut self, key: &K, value: &V) -> Result<Option<V>> {
        match self.get(key)? {
            Some(existing) => Ok(Some(existing)),
            None => self.put(key, value).map(|()| None),
        }
    }

    /// Removes `key`; returns the value it had.
    pub fn delete(&mut self, key: &K) -> Result<Option<V>> {
        let old = self.get(key)?;
        if old.is_some() {
            // `get` left the key's bytes in the scratch buffer.
            self.store
                .put(&self.scratch.key, None, self.timestamp, &Headers::new());
        }
        Ok(old)
    }

    fn decode_all(&self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<(K, V)>> {
        entries
            .into_iter()
            .map(|(k, v)| {
                let key = self
                    .key_serde
                    .deserialize(Some(&k))
                    .map_err(|e| self.corrupt(e))?;
                Ok((key, self.decode_value(&v)?))
            })
            .collect()
    }

    /// The entries with `from <= key <= to` (by serialized key), in key order.
    pub fn range(&mut self, from: &K, to: &K) -> Result<Vec<(K, V)>> {
        let s = &mut *self.scratch;
        s.key.clear();
        s.value.clear();
        self.key_serde.serialize(from, &mut s.key);
        self.key_serde.serialize(to, &mut s.value);
        let entries = self.store.scan(Some(&s.key), Some(&s.value))?;
        self.decode_all(entries)
    }

    /// Every entry, in key order.
    pub fn all(&mut self) -> Result<Vec<(K, V)>> {
        let entries = self.store.scan(None, None)?;
        self.decode_all(entries)
    }

    /// Removes `key` without reading it first.
    pub(crate) fn delete_blind(&mut self, key: &K) {
        let s = &mut *self.scratch;
        s.key.clear();
        self.key_serde.serialize(key, &mut s.key);
        self.store
            .put(&s.key, None, self.timestamp, &Headers::new());
    }

    /// About how many entries the store holds.
    pub fn approximate_num_entries(&self) -> u64 {
        self.store.approximate_len() as u64
    }
}

// ---- the nodes that run processors ------------------------------------------------------------

/// A node's start and end: processors' `init` and `close`.
pub(crate) trait Lifecycle {
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()>;
    fn close(&mut self);
}

/// Runs a [`Processor`].
pub(crate) struct ProcessorNode<KIn, VIn, KOut, VOut> {
    pub(crate) processor: Box<dyn Processor<KIn, VIn, KOut, VOut>>,
    pub(crate) node: Rc<NodeShared<KOut, VOut>>,
}

impl<KIn: 'static, VIn: 'static, KOut: Clone + 'static, VOut: Clone + 'static> Node<KIn, VIn>
    for ProcessorNode<KIn, VIn, KOut, VOut>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: KIn, value: VIn) -> Result<()> {
        let task = ctx.task;
        let record = Record::with_headers_of(key, value, ctx.timestamp, ctx.headers.clone());
        let mut pctx = ProcessorContext::new(ctx.reborrow(), &self.node);
        self.processor
            .process(&mut pctx, record)
            .map_err(|e| self.node.error(task, e))
    }
}

impl<KIn: 'static, VIn: 'static, KOut: Clone + 'static, VOut: Clone + 'static> Lifecycle
    for ProcessorNode<KIn, VIn, KOut, VOut>
{
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let task = ctx.task;
        let mut pctx = ProcessorContext::new(ctx.reborrow(), &self.node);
        self.processor
            .init(&mut pctx)
            .map_err(|e| self.node.error(task, e))
    }
    fn close(&mut self) {
        self.processor.close();
    }
}

/// Runs a [`FixedKeyProcessor`].
pub(crate) struct FixedKeyNode<K, VIn, VOut> {
    pub(crate) processor: Box<dyn FixedKeyProcessor<K, VIn, VOut>>,
    pub(crate) node: Rc<NodeShared<K, VOut>>,
    pub(crate) _types: PhantomData<fn(VIn)>,
}

impl<K: Clone + 'static, VIn: 'static, VOut: Clone + 'static> Node<K, VIn>
    for FixedKeyNode<K, VIn, VOut>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: VIn) -> Result<()> {
        let task = ctx.task;
        let record = FixedKeyRecord::new(Record::with_headers_of(
            key,
            value,
            ctx.timestamp,
            ctx.headers.clone(),
        ));
        let mut pctx = FixedKeyProcessorContext {
            inner: ProcessorContext::new(ctx.reborrow(), &self.node),
        };
        self.processor
            .process(&mut pctx, record)
            .map_err(|e| self.node.error(task, e))
    }
}

impl<K: Clone + 'static, VIn: 'static, VOut: Clone + 'static> Lifecycle
    for FixedKeyNode<K, VIn, VOut>
{
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let task = ctx.task;
        let mut pctx = FixedKeyProcessorContext {
            inner: ProcessorContext::new(ctx.reborrow(), &self.node),
        };
        self.processor
            .init(&mut pctx)
            .map_err(|e| self.node.error(task, e))
    }
    fn close(&mut self) {
        self.processor.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(next: i64, interval: i64) -> Schedule {
        Schedule {
            kind: PunctuationType::StreamTime,
            interval,
            next,
            cancelled: Rc::default(),
            punctuator: Box::new(|_, _| Ok(())),
            seq: 0,
        }
    }

    #[test]
    fn a_jump_over_several_intervals_reschedules_to_the_next_multiple_after_it() {
        let mut s = schedule(0, 10);
        s.reschedule(3);
        assert_eq!(s.next, 10, "one interval on");
        s.reschedule(10);
        assert_eq!(s.next, 20, "exactly at the deadline: the next one");
        s.reschedule(57);
        assert_eq!(s.next, 60, "jumped over 20..50: no make-up punctuations");
    }
}
