//! Processor nodes: the typed pieces a task's topology is made of, and the context they run in.
//!
//! Nodes are built per task on the stream thread that runs it ([`crate::topology`] holds the
//! factories). They pass owned keys and values down by direct calls; a node with several children
//! clones for all but the last. Nothing here allocates per record except user closures and the
//! values they make.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use riffle_record::{Record, partition_for_key};
use riffle_state_dir::TaskId;

use crate::processor::collector::RecordCollector;
use crate::processor::{StoreScratch, TaskSignals};
use crate::serdes::SerdeRef;
use crate::state::CachedStore;
use crate::types::error::{Error, Result};
use crate::types::error::{SerdeError, SerializationExceptionOrigin};
use crate::types::handlers::{ErrorHandlerContext, HandlerResponse};
use crate::types::record::Headers;

/// What a node sees while it processes one record (Kafka Streams' record context plus what
/// the task lends).
pub(crate) struct ProcessingContext<'a> {
    pub(crate) task: TaskId,
    /// The timestamp of the record being processed; forwarded records carry it.
    pub(crate) timestamp: i64,
    /// The headers of the record being processed; forwarded records and sinks carry them.
    pub(crate) headers: Headers,
    /// The input record being processed; `None` while punctuating or flushing.
    pub(crate) record: Option<&'a Record>,
    pub(crate) stores: &'a mut [CachedStore],
    pub(crate) collector: &'a mut RecordCollector,
    pub(crate) scratch: &'a mut Scratch,
    pub(crate) signals: &'a mut TaskSignals,
}

impl ProcessingContext<'_> {
    /// The same context for a shorter borrow: changes to its timestamp and headers (a
    /// processor forwarding records of its own) stay in it.
    pub(crate) fn reborrow(&mut self) -> ProcessingContext<'_> {
        ProcessingContext {
            task: self.task,
            timestamp: self.timestamp,
            headers: self.headers.clone(),
            record: self.record,
            stores: &mut *self.stores,
            collector: &mut *self.collector,
            scratch: &mut *self.scratch,
            signals: &mut *self.signals,
        }
    }

    /// Drops the record being processed because `processor` cannot take it (`why`: a null
    /// key or value): counted in `dropped-records` and logged at warn with its topic,
    /// partition and offset, as Kafka Streams' "Skipping record due to null key or value".
    pub(crate) fn skip_record(&mut self, processor: Option<&str>, why: &str) {
        self.signals.dropped_records += 1;
        let processor = processor.unwrap_or("-");
        match self.record {
            Some(record) => {
                let tp = record.topic_partition();
                tracing::warn!(task = %self.task, processor, topic = %tp.topic, partition = tp.partition, offset = record.offset(), "skipping a record: {why}");
            }
            None => {
                tracing::warn!(task = %self.task, processor, "skipping a record: {why} (topic, partition and offset not known)");
            }
        }
    }

    /// A record a sink made cannot be written (`error`): the production exception handler
    /// fails the thread, or drops this one write (counted in `dropped-records`, and sent to
    /// the dead-letter queue as the input record it came from, if any).
    pub(crate) fn production_failed(&mut self, error: Error) -> Result<()> {
        let record = self.record;
        let tp = record.map(Record::topic_partition);
        let context = ErrorHandlerContext {
            topic: tp.map(|tp| &*tp.topic),
            partition: tp.map(|tp| tp.partition),
            offset: record.map(Record::offset),
            timestamp: self.timestamp,
            processor_node_id: None,
            task_id: self.task,
            source_raw_key: record.and_then(Record::key).map(|k| &k[..]),
            source_raw_value: record.and_then(Record::value).map(|v| &v[..]),
        };
        if self.collector.production.handle(&context, &error) == HandlerResponse::Fail {
            tracing::error!(task = %self.task, error = %error, "writing a record failed; the production exception handler says fail");
            return Err(match (record, tp) {
                (Some(record), Some(tp)) => Error::RecordFailed {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    offset: record.offset(),
                    processor: None,
                    source: Box::new(error),
                },
                _ => error,
            });
        }
        tracing::warn!(task = %self.task, error = %error, "writing a record failed; the production exception handler says continue: dropping it");
        self.signals.dropped_records += 1;
        self.collector
            .send_dead_letter(&error, record, self.timestamp, self.task.partition)
    }
}

/// Buffers a stream thread reuses for every record it serializes.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) old: Vec<u8>,
    /// For the processor API's typed store handles.
    pub(crate) store: StoreScratch,
}

/// A table's update with the key's value before it (Kafka Streams' `Change`): what table nodes
/// send to children that asked for old values (`KTable::group_by`'s subtraction, table joins).
/// `new: None` is a delete; `old: None`, a key that had no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change<V> {
    pub(crate) new: Option<V>,
    pub(crate) old: Option<V>,
}

impl<V> Change<V> {
    /// An update (`None`: a delete) that came without its old value.
    pub(crate) fn of(new: Option<V>) -> Change<V> {
        Change { new, old: None }
    }
}

/// A node that takes typed records.
pub(crate) trait Node<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()>;
    /// A record without a value: a table's delete (a session merged away). Nodes that pass
    /// table updates on (`to_stream`, sinks, suppression, the stream operators that keep the
    /// key) handle it; an operator whose function needs the value drops it, counted and
    /// logged (as Kafka's aggregations and joins drop a null value).
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        let _ = key;
        ctx.skip_record(None, "a table's delete (a record without a value) reaches an operator whose function takes a value; KTable::to_stream_with_deletes passes deletes on as None");
        Ok(())
    }
    /// A table's update with the key's old value, from a table node whose downstream asked for
    /// old values. A node that has no use for the old value takes the update alone.
    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        match change.new {
            Some(value) => self.process(ctx, key, value),
            None => self.process_tombstone(ctx, key),
        }
    }
}

/// A node that takes raw records from a topic: the root of a sub-topology.
pub(crate) trait SourceNode {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, record: &Record) -> Result<()>;
}

/// A node with work to do at commit: stateful nodes forward their cached updates then.
pub(crate) trait FlushNode {
    fn flush(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()>;
}

pub(crate) type NodeRef<K, V> = Rc<RefCell<dyn Node<K, V>>>;
pub(crate) type FlushRef = Rc<RefCell<dyn FlushNode>>;
pub(crate) type SourceRef = Rc<RefCell<dyn SourceNode>>;

/// A node's children.
pub(crate) struct Forward<K, V> {
    pub(crate) children: Vec<NodeRef<K, V>>,
}

impl<K: Clone, V: Clone> Forward<K, V> {
    pub(crate) fn send(&self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        match self.children.split_last() {
            None => Ok(()),
            Some((last, rest)) => {
                for child in rest {
                    child
                        .borrow_mut()
                        .process(ctx, key.clone(), value.clone())?;
                }
                last.borrow_mut().process(ctx, key, value)
            }
        }
    }

    /// Sends a tombstone for `key` to every child.
    pub(crate) fn send_tombstone(&self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        match self.children.split_last() {
            None => Ok(()),
            Some((last, rest)) => {
                for child in rest {
                    child.borrow_mut().process_tombstone(ctx, key.clone())?;
                }
                last.borrow_mut().process_tombstone(ctx, key)
            }
        }
    }

    /// Sends a table's update with the key's old value to every child.
    pub(crate) fn send_change(
        &self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        match self.children.split_last() {
            None => Ok(()),
            Some((last, rest)) => {
                for child in rest {
                    child
                        .borrow_mut()
                        .process_change(ctx, key.clone(), change.clone())?;
                }
                last.borrow_mut().process_change(ctx, key, change)
            }
        }
    }

    /// Sends `new` (`None`: a delete) with the key's old value when `with_old`, else alone.
    pub(crate) fn send_update(
        &self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        new: Option<V>,
        old: Option<V>,
        with_old: bool,
    ) -> Result<()> {
        match (with_old, new) {
            (true, new) => self.send_change(ctx, key, Change { new, old }),
            (false, Some(value)) => self.send(ctx, key, value),
            (false, None) => self.send_tombstone(ctx, key),
        }
    }

    /// Sends to the `i`-th child only.
    pub(crate) fn send_to(
        &self,
        i: usize,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        value: V,
    ) -> Result<()> {
        match self.children.get(i) {
            Some(child) => child.borrow_mut().process(ctx, key, value),
            None => Ok(()),
        }
    }
}

/// Decodes records of one topic and forwards them.
pub(crate) struct Source<K, V> {
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) forward: Forward<K, V>,
    /// A table's source: a record without a value is a delete (a tombstone downstream), and
    /// one without a key is dropped (counted in `dropped-records`), as Kafka Streams' table
    /// source does.
    pub(crate) table: bool,
}

impl<K: Clone + 'static, V: Clone + 'static> SourceNode for Source<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, record: &Record) -> Result<()> {
        let error = |part, source| {
            let tp = record.topic_partition();
            Error::Deserialize {
                part,
                topic: tp.topic.to_string(),
                partition: tp.partition,
                offset: record.offset(),
                source,
            }
        };
        if self.table && record.key().is_none() {
            let tp = record.topic_partition();
            tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = record.offset(), "a table's record without a key: dropping it");
            ctx.signals.dropped_records += 1;
            return Ok(());
        }
        let key = self
            .key_serde
            .deserialize_bytes(record.key())
            .map_err(|e| error("key", e))?;
        if self.table && record.value().is_none() {
            return self.forward.send_tombstone(ctx, key);
        }
        let value = self
            .value_serde
            .deserialize_bytes(record.value())
            .map_err(|e| error("value", e))?;
        self.forward.send(ctx, key, value)
    }
}

/// A stateless one-in, many-out step: map, filter, flat_map, peek, ... all reduce to this.
pub(crate) struct FlatMap<K, V, K2, V2> {
    #[allow(clippy::type_complexity)]
    pub(crate) f: Arc<dyn Fn(K, V, &mut dyn FnMut(K2, V2)) + Send + Sync>,
    pub(crate) forward: Forward<K2, V2>,
    pub(crate) out: Vec<(K2, V2)>,
    /// How a table's delete passes (an operator that keeps the key); `None`: it is dropped.
    pub(crate) tombstones: Option<KeepKey<K, K2>>,
}

/// The identity on keys, typed from an operator's input key to its output key: how an operator
/// that keeps the key (`filter`, `map_values`, `peek`, `merge`) passes a table's delete on.
pub(crate) type KeepKey<K, K2> = Arc<dyn Fn(K) -> K2 + Send + Sync>;

/// Passes a table's delete on through `keep`, or drops it as [`Node::process_tombstone`] does.
fn pass_tombstone<K, K2: Clone, V2: Clone>(
    keep: &Option<KeepKey<K, K2>>,
    forward: &Forward<K2, V2>,
    ctx: &mut ProcessingContext<'_>,
    key: K,
) -> Result<()> {
    match keep {
        Some(keep) => forward.send_tombstone(ctx, keep(key)),
        None => {
            ctx.skip_record(None, "a table's delete (a record without a value) reaches an operator that changes the key, which needs the value; KTable::to_stream_with_deletes passes deletes on as None");
            Ok(())
        }
    }
}

impl<K, V, K2: Clone, V2: Clone> Node<K, V> for FlatMap<K, V, K2, V2> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let mut out = std::mem::take(&mut self.out);
        (self.f)(key, value, &mut |k, v| out.push((k, v)));
        let mut result = Ok(());
        for (k, v) in out.drain(..) {
            if result.is_ok() {
                result = self.forward.send(ctx, k, v);
            }
        }
        self.out = out;
        result
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        pass_tombstone(&self.tombstones, &self.forward, ctx, key)
    }
}

/// A one-in, at-most-one-out step, without the buffer of [`FlatMap`].
pub(crate) struct FilterMap<K, V, K2, V2> {
    #[allow(clippy::type_complexity)]
    pub(crate) f: Arc<dyn Fn(K, V) -> Option<(K2, V2)> + Send + Sync>,
    pub(crate) forward: Forward<K2, V2>,
    /// How a table's delete passes (an operator that keeps the key); `None`: it is dropped.
    pub(crate) tombstones: Option<KeepKey<K, K2>>,
}

impl<K, V, K2: Clone, V2: Clone> Node<K, V> for FilterMap<K, V, K2, V2> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        match (self.f)(key, value) {
            Some((k, v)) => self.forward.send(ctx, k, v),
            None => Ok(()),
        }
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        pass_tombstone(&self.tombstones, &self.forward, ctx, key)
    }
}

/// Writes records to a topic, partitioned by the serialized key with Kafka's murmur2. A key its
/// serde calls null ([`Serde::is_null`](crate::serdes::Serde::is_null)) is written as a null key
/// (to a repartition topic too, as Kafka 4 writes it: the operator after the topic decides).
pub(crate) struct Sink<K, V> {
    pub(crate) topic: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
}

impl<K: 'static, V: 'static> Sink<K, V> {
    fn write(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: Option<V>) -> Result<()> {
        let (topic, key_serde, value_serde) = (self.topic, &self.key_serde, &self.value_serde);
        send_record(
            ctx,
            topic,
            None,
            (key_serde, &key),
            (value_serde, value.as_ref()),
        )
    }
}

/// Serializes a record and hands it to the collector for `topic`, on `chosen` partition (a
/// `StreamPartitioner`'s) or else by Kafka's rule: murmur2 of the serialized key; a key its
/// serde calls null is written as a null key and stays on the task's partition number (Kafka's
/// producer picks a sticky partition; an empty key is a key, murmur2 of zero bytes); a value
/// its serde calls null is a tombstone. What cannot be written (a serde's error, a record too
/// large) goes to the production exception handler. Every sink writes through here.
pub(crate) fn send_record<K: 'static, V: 'static>(
    ctx: &mut ProcessingContext<'_>,
    topic: usize,
    chosen: Option<u32>,
    (key_serde, key): (&SerdeRef<K>, &K),
    (value_serde, value): (&SerdeRef<V>, Option<&V>),
) -> Result<()> {
    let scratch = &mut *ctx.scratch;
    scratch.key.clear();
    scratch.value.clear();
    let null_key = key_serde.is_null(key);
    if !null_key && let Err(e) = key_serde.serialize(key, &mut scratch.key) {
        return serialization_failed(ctx, topic, SerializationExceptionOrigin::Key, None, e);
    }
    let partitions = ctx.collector.topics().partitions(topic);
    let partition = match chosen {
        Some(p) => p,
        None if null_key => ctx.task.partition % partitions.max(1),
        None => partition_for_key(&scratch.key, partitions),
    };
    let value = value.filter(|v| !value_serde.is_null(v));
    if let Some(value) = value
        && let Err(e) = value_serde.serialize(value, &mut scratch.value)
    {
        let origin = SerializationExceptionOrigin::Value;
        return serialization_failed(ctx, topic, origin, Some(partition), e);
    }
    match ctx.collector.send(
        topic,
        partition,
        ctx.timestamp,
        (!null_key).then_some(&scratch.key[..]),
        value.is_some().then_some(&scratch.value[..]),
        &ctx.headers,
    ) {
        Err(error @ Error::RecordTooLarge { .. }) => ctx.production_failed(error),
        sent => sent,
    }
}

/// The key or value of a record for `topic` does not serialize: the production exception
/// handler decides (Kafka's `handleSerializationException`), as for a record too large.
fn serialization_failed(
    ctx: &mut ProcessingContext<'_>,
    topic: usize,
    origin: SerializationExceptionOrigin,
    partition: Option<u32>,
    source: SerdeError,
) -> Result<()> {
    let topic = ctx.collector.topics().name(topic).to_string();
    let error = Error::Serialize {
        origin,
        topic,
        partition,
        source,
    };
    ctx.production_failed(error)
}

impl<K: 'static, V: 'static> Node<K, V> for Sink<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.write(ctx, key, Some(value))
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.write(ctx, key, None)
    }
}

/// Passes a table's updates on as `Some` and its deletes as `None`
/// (`KTable::to_stream_with_deletes`).
pub(crate) struct WithDeletes<K, V> {
    pub(crate) forward: Forward<K, Option<V>>,
}

impl<K: Clone, V: Clone> Node<K, V> for WithDeletes<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.forward.send(ctx, key, Some(value))
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.forward.send(ctx, key, None)
    }
}

/// What a key-based operator (an aggregation, a join) does first: drops a record whose key,
/// or value, its serde calls null, counted and logged (Kafka Streams' "Skipping record due to
/// null key or value"), and hands the rest to the operator. Built only where a serde has a
/// null ([`Serde::has_null`](crate::serdes::Serde::has_null)), so other operators pay nothing.
pub(crate) struct SkipNulls<K, V> {
    pub(crate) name: Arc<str>,
    pub(crate) key: Option<SerdeRef<K>>,
    pub(crate) value: Option<SerdeRef<V>>,
    pub(crate) inner: NodeRef<K, V>,
}

impl<K: 'static, V: 'static> SkipNulls<K, V> {
    /// `inner`, behind a null check if `key` or `value` has a null.
    pub(crate) fn wrap(
        name: &str,
        key: Option<SerdeRef<K>>,
        value: Option<SerdeRef<V>>,
        inner: NodeRef<K, V>,
    ) -> NodeRef<K, V> {
        let key = key.filter(|s| s.has_null());
        let value = value.filter(|s| s.has_null());
        if key.is_none() && value.is_none() {
            return inner;
        }
        Rc::new(RefCell::new(SkipNulls {
            name: name.into(),
            key,
            value,
            inner,
        }))
    }
}

impl<K: 'static, V: 'static> Node<K, V> for SkipNulls<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        if self.key.as_ref().is_some_and(|s| s.is_null(&key))
            || self.value.as_ref().is_some_and(|s| s.is_null(&value))
        {
            ctx.skip_record(Some(&self.name), "null key or value");
            return Ok(());
        }
        self.inner.borrow_mut().process(ctx, key, value)
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        if self.key.as_ref().is_some_and(|s| s.is_null(&key)) {
            ctx.skip_record(Some(&self.name), "null key");
            return Ok(());
        }
        self.inner.borrow_mut().process_tombstone(ctx, key)
    }
    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        if self.key.as_ref().is_some_and(|s| s.is_null(&key)) {
            ctx.skip_record(Some(&self.name), "null key");
            return Ok(());
        }
        self.inner.borrow_mut().process_change(ctx, key, change)
    }
}

/// Passes records and tombstones on unchanged (`KTable::to_stream`).
pub(crate) struct Passthrough<K, V> {
    pub(crate) forward: Forward<K, V>,
}

impl<K: Clone, V: Clone> Node<K, V> for Passthrough<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.forward.send(ctx, key, value)
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.forward.send_tombstone(ctx, key)
    }
}

/// The aggregation behind `count`, `reduce` and `aggregate` (of a grouped stream or, folding
/// `Change`s, of a grouped table): reads the key's aggregate (cache first, then store), folds
/// the value in and writes the new aggregate to the cache. At commit it forwards the latest
/// aggregate of every key it changed (Kafka Streams' cached KTable), with the aggregate it
/// replaced when a downstream node asked for old values; with caching disabled it forwards
/// each new aggregate at once (Kafka's uncached KTable).
pub(crate) struct Aggregate<K, V, A> {
    pub(crate) store: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) agg_serde: SerdeRef<A>,
    /// Folds a value into the key's aggregate (`None`: none yet); `None` back deletes the key
    /// (a grouped table's reduce with nothing left to reduce).
    #[allow(clippy::type_complexity)]
    pub(crate) fold: Arc<dyn Fn(&K, V, Option<A>) -> Option<A> + Send + Sync>,
    pub(crate) forward: Forward<K, A>,
    /// Forward old values (`Change`s).
    pub(crate) send_old: bool,
}

impl<K: Clone + 'static, V, A: Clone + 'static> Aggregate<K, V, A> {
    fn corrupt(&self, ctx: &ProcessingContext<'_>, source: SerdeError) -> Error {
        Error::CorruptState {
            store: ctx.stores[self.store].inner.name().to_owned(),
            task: ctx.task,
            source,
        }
    }
}

impl<K: Clone + 'static, V, A: Clone + 'static> Node<K, V> for Aggregate<K, V, A> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        if let Err(e) = self.key_serde.serialize(&key, &mut scratch.key) {
            return Err(unserializable_state(
                ctx,
                self.store,
                SerializationExceptionOrigin::Key,
                e,
            ));
        }
        let found = ctx.stores[self.store].get_with_timestamp(&scratch.key, &mut scratch.old)?;
        // The result's timestamp is the largest of its inputs' (Kafka's timestamped
        // aggregation), so a late record does not move an aggregate back in time.
        let (old, timestamp) = match found {
            Some(old_ts) => match self.agg_serde.deserialize(Some(&scratch.old)) {
                Ok(old) => (Some(old), old_ts.max(ctx.timestamp)),
                Err(e) => return Err(self.corrupt(ctx, e)),
            },
            None => (None, ctx.timestamp),
        };
        // Caching disabled: the new aggregate goes on at once, with the one it replaces.
        let at_once = !ctx.stores[self.store].caches_writes();
        let replaced = if at_once && self.send_old {
            old.clone()
        } else {
            None
        };
        let new = (self.fold)(&key, value, old);
        let scratch = &mut *ctx.scratch;
        scratch.value.clear();
        if let Some(new) = &new
            && let Err(e) = self.agg_serde.serialize(new, &mut scratch.value)
        {
            let origin = SerializationExceptionOrigin::Value;
            return Err(unserializable_state(ctx, self.store, origin, e));
        }
        let value = new.as_ref().map(|_| &scratch.value[..]);
        ctx.stores[self.store].put(&scratch.key, value, timestamp, &ctx.headers);
        if !at_once {
            return Ok(());
        }
        let saved = std::mem::replace(&mut ctx.timestamp, timestamp);
        let sent = self
            .forward
            .send_update(ctx, key, new, replaced, self.send_old);
        ctx.timestamp = saved;
        sent
    }
}

impl<K: Clone + 'static, V, A: Clone + 'static> FlushNode for Aggregate<K, V, A> {
    fn flush(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        flush_table_store(
            ctx,
            self.store,
            &self.key_serde,
            &self.agg_serde,
            &self.forward,
            self.send_old,
        )
    }
}

/// A key or value the serde of the task's store `store` (a slot) could not serialize.
pub(crate) fn unserializable_state(
    ctx: &ProcessingContext<'_>,
    store: usize,
    origin: SerializationExceptionOrigin,
    source: SerdeError,
) -> Error {
    Error::SerializeState {
        store: ctx.stores[store].inner.name().to_owned(),
        origin,
        source,
    }
}

/// Forwards every key a store's cache changed since the last commit, in the order of their last
/// write (as Kafka's cache flushes; this store's entries may have been written by an upstream
/// node's flush just now): the latest value or a tombstone, with the value the store held
/// before (the last committed one) when `send_old`. A tombstone for a key the store did not
/// hold is not forwarded. With caching disabled, the node forwarded every write as it made it:
/// nothing is left to forward.
pub(crate) fn flush_table_store<K: Clone + 'static, V: Clone + 'static>(
    ctx: &mut ProcessingContext<'_>,
    store: usize,
    key_serde: &SerdeRef<K>,
    value_serde: &SerdeRef<V>,
    forward: &Forward<K, V>,
    send_old: bool,
) -> Result<()> {
    let corrupt = |ctx: &ProcessingContext<'_>, source| Error::CorruptState {
        store: ctx.stores[store].inner.name().to_owned(),
        task: ctx.task,
        source,
    };
    if !ctx.stores[store].caches_writes() {
        return Ok(());
    }
    ctx.stores[store].order_by_last_write();
    ctx.stores[store].mark_forwarded();
    for i in 0..ctx.stores[store].dirty_len() {
        // A delete of a key the store did not hold goes nowhere when its writes collapse (as
        // Kafka's caching store skips it).
        let deleted = ctx.stores[store].dirty(i).1.is_none();
        let had_old =
            (send_old || deleted) && ctx.stores[store].dirty_old(i, &mut ctx.scratch.old)?;
        if deleted && !had_old {
            continue;
        }
        let (key, value, timestamp) = ctx.stores[store].dirty(i);
        let key = key_serde.deserialize(Some(key));
        let value = value.map(|v| value_serde.deserialize(Some(v))).transpose();
        let (key, value) = match (key, value) {
            (Ok(k), Ok(v)) => (k, v),
            (Err(e), _) | (_, Err(e)) => return Err(corrupt(ctx, e)),
        };
        let old = if send_old && had_old {
            let old = value_serde.deserialize(Some(&ctx.scratch.old));
            Some(old.map_err(|e| corrupt(ctx, e))?)
        } else {
            None
        };
        ctx.timestamp = timestamp;
        ctx.headers = ctx.stores[store].dirty_headers(i).clone();
        forward.send_update(ctx, key, value, old, send_old)?;
    }
    Ok(())
}
