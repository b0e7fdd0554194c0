//! What a processor sees while it runs: [`ProcessorContext`] (forwarding, its connected stores,
//! the current record's metadata, time, scheduling) and [`FixedKeyProcessorContext`], whose
//! forwards keep the key. It lends the task's stores and the thread's outgoing batches only for
//! the call it is passed to.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use riffle_state_dir::TaskId;

use crate::processor::node::ProcessingContext;
use crate::processor::window_store::{SessionStore, WindowStore};
use crate::state::def::{StoreKind, StoreSerdes};
use crate::types::error::Result;
use crate::types::record::{FixedKeyRecord, Headers, Record, RecordMetadata};

use super::run::{ConnectedStore, NodeShared, Punctuator, Schedule};
use super::store_handle::KeyValueStore;
use super::{Cancellable, PunctuationType};

/// What a [`Processor`](super::Processor) sees: where to forward, its stores, the current record's metadata,
/// time, and scheduling (Kafka Streams' `ProcessorContext`).
pub struct ProcessorContext<'c, KOut, VOut> {
    pub(super) raw: ProcessingContext<'c>,
    pub(super) node: &'c Rc<NodeShared<KOut, VOut>>,
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
    pub(super) fn connected_in<'n, K: 'static, V: 'static>(
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

    /// A key-value store connected to this processor, typed as the [`crate::state::StoreBuilder`] that
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
}

/// The context of a [`FixedKeyProcessor`](super::FixedKeyProcessor): a [`ProcessorContext`] whose forwards keep the key.
pub struct FixedKeyProcessorContext<'c, K, VOut> {
    pub(super) inner: ProcessorContext<'c, K, VOut>,
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
