//! Foreign-key table joins (Kafka Streams' KIP-213): a table of `K → V` joined with a table of
//! `KO → VO` by the foreign key each `V` names, the two tables partitioned independently.
//!
//! The protocol is Kafka's, with its record formats (`format.rs`), so a foreign-key join's
//! internal topics read the same with Kafka's tools:
//!
//! 1. The left table's updates ([`SubscriptionSend`], with old values) become *subscriptions*
//!    keyed by the foreign key, on the registration topic (partitioned like the right table):
//!    the left key, the left row's hash (murmur3 x64 128, Kafka's seed) and an [`Instruction`]
//!    saying whether to answer, and whether to delete the left key's subscription at its old
//!    foreign key.
//! 2. On the right side, [`SubscriptionJoin`] keeps each subscription in the subscription store
//!    (keyed by the foreign key then the left key, Kafka's `CombinedKey`) and answers it with the
//!    right row for its foreign key; [`ForeignTableJoin`] answers every subscription of a foreign
//!    key again when the right row changes. Answers ([`Response`]) go to the response topic,
//!    keyed by the left key, to the left partition that subscribed ([`ResponseSink`]).
//! 3. On the left side, [`ResponseJoin`] joins an answer with the left row if the row's hash is
//!    still the one subscribed (else a newer subscription is on its way and this answer is
//!    dropped).
//!
//! Both sides read the other table *as forwarded so far* (`Read::Forwarded`): the right row a
//! subscription is answered with, and the left row an answer is checked against, are the rows
//! their table has sent downstream, never a write cached since the last commit. A cached write
//! is forwarded at commit (then the right side answers every subscription of its key again, and
//! the left side subscribes again), unless it collapses into a delete of a key the committed
//! store did not hold, which goes nowhere: an answer read from it would leave a joined row that
//! nothing deletes, and a cached left row that drops the answer to its forwarded row's
//! subscription would lose that answer's delete for good.
//!
//! A left join's row whose foreign key is `None` needs no answer: [`SubscriptionSend`] sends it
//! to [`ResponseJoin`] directly, joined with nothing.
use std::sync::Arc;

use crate::dsl::join::foreign_key::format::{
    Instruction, Response, ResponseSerde, RowHash, Subscription, SubscriptionSerde, key_prefix,
    row_hash,
};
use crate::dsl::table::node::BoundView;
use crate::processor::node::{Change, Forward, Node, ProcessingContext, unserializable_state};
use crate::serdes::{Serde, SerdeRef};
use crate::types::error::{Error, Result, SerdeError, SerializationExceptionOrigin};

/// Which foreign-key join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ForeignJoinKind {
    Inner,
    Left,
}

/// The left table's side (Kafka's `SubscriptionSendProcessorSupplier`, as of KAFKA-16407, but
/// for an inner join's row keeping its foreign key: see below): each update's subscriptions, to
/// the registration topic; a left join's row without a foreign key straight to
/// [`ResponseJoin`].
pub(crate) struct SubscriptionSend<K, V, KO> {
    pub(crate) kind: ForeignJoinKind,
    #[allow(clippy::type_complexity)]
    pub(crate) extractor: Arc<dyn Fn(&K, &V) -> Option<KO> + Send + Sync>,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) fk_serde: SerdeRef<KO>,
    pub(crate) to_registration: Forward<KO, Subscription>,
    pub(crate) to_resolver: Forward<K, Response>,
}

impl<K: Clone + 'static, V: 'static, KO: Clone + 'static> SubscriptionSend<K, V, KO> {
    fn subscribe(
        &self,
        ctx: &mut ProcessingContext<'_>,
        fk: KO,
        instruction: Instruction,
        hash: Option<RowHash>,
        primary_key: &[u8],
    ) -> Result<()> {
        let subscription = Subscription {
            hash,
            instruction,
            primary_key: primary_key.to_vec(),
            primary_partition: ctx.task.partition,
        };
        self.to_registration.send(ctx, fk, subscription)
    }
}

/// A key or value of the join's own records (`what`: its subscriptions, its responses) that
/// its serde could not serialize.
fn unserializable(what: &str, origin: SerializationExceptionOrigin, source: SerdeError) -> Error {
    Error::Serialize {
        origin,
        topic: format!("(a foreign-key join's {what})"),
        partition: None,
        source,
    }
}

/// The row's hash (Kafka's, of the row's serialized bytes) for a subscription or to compare an
/// answer with, serialized in `buf`.
fn hash_of<V: 'static>(
    serde: &SerdeRef<V>,
    row: Option<&V>,
    buf: &mut Vec<u8>,
    what: &str,
) -> Result<Option<RowHash>> {
    let Some(row) = row else {
        return Ok(None);
    };
    buf.clear();
    serde
        .serialize(row, buf)
        .map_err(|e| unserializable(what, SerializationExceptionOrigin::Value, e))?;
    Ok(Some(row_hash(buf)))
}

/// A right row's bytes for an answer.
fn foreign_bytes<VO: 'static>(serde: &SerdeRef<VO>, row: Option<&VO>) -> Result<Option<Vec<u8>>> {
    row.map(|v| {
        let mut out = Vec::new();
        serde
            .serialize(v, &mut out)
            .map_err(|e| unserializable("responses", SerializationExceptionOrigin::Value, e))?;
        Ok(out)
    })
    .transpose()
}

/// A foreign key's bytes in `out` (a subscription store's key prefix).
fn fk_bytes<KO: 'static>(
    ctx: &ProcessingContext<'_>,
    store: usize,
    serde: &SerdeRef<KO>,
    fk: &KO,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    serde
        .serialize(fk, out)
        .map_err(|e| unserializable_state(ctx, store, SerializationExceptionOrigin::Key, e))
}

impl<K: Clone + 'static, V: 'static, KO: Clone + 'static> Node<K, V>
    for SubscriptionSend<K, V, KO>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.process_change(ctx, key, Change::of(Some(value)))
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.process_change(ctx, key, Change::of(None))
    }

    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        let new_fk = change.new.as_ref().and_then(|v| (self.extractor)(&key, v));
        let old_fk = change.old.as_ref().and_then(|v| (self.extractor)(&key, v));
        // The row's hash and the foreign keys' bytes in the thread's scratch buffers.
        let scratch = &mut *ctx.scratch;
        let hash = hash_of(
            &self.value_serde,
            change.new.as_ref(),
            &mut scratch.value,
            "subscriptions",
        )?;
        let mut pk = Vec::new();
        if let Err(e) = self.key_serde.serialize(&key, &mut pk) {
            let origin = SerializationExceptionOrigin::Key;
            return Err(unserializable("subscriptions", origin, e));
        }
        // Foreign keys compare by their bytes, as Kafka compares them.
        let fk_bytes = |fk: &Option<KO>, out: &mut Vec<u8>| -> Result<bool> {
            out.clear();
            let Some(k) = fk else { return Ok(false) };
            self.fk_serde.serialize(k, out).map_err(|e| {
                unserializable("subscriptions", SerializationExceptionOrigin::Key, e)
            })?;
            Ok(true)
        };
        let changed = fk_bytes(&new_fk, &mut scratch.key)? != fk_bytes(&old_fk, &mut scratch.old)?
            || scratch.key != scratch.old;
        match self.kind {
            ForeignJoinKind::Left => {
                if change.new.is_none() && change.old.is_none() {
                    return Ok(());
                }
                if changed && let Some(old_fk) = old_fk {
                    self.subscribe(ctx, old_fk, Instruction::DeleteKeyNoPropagate, hash, &pk)?;
                }
                match new_fk {
                    Some(fk) => {
                        let instruction = Instruction::PropagateNullIfNoFkValAvailable;
                        self.subscribe(ctx, fk, instruction, hash, &pk)
                    }
                    // No foreign key: the row joins nothing, or is deleted.
                    None => {
                        let response = Response {
                            hash,
                            foreign: None,
                            primary_partition: ctx.task.partition,
                        };
                        self.to_resolver.send(ctx, key, response)
                    }
                }
            }
            ForeignJoinKind::Inner => match (new_fk, old_fk) {
                (None, Some(old_fk)) => {
                    self.subscribe(ctx, old_fk, Instruction::DeleteKeyAndPropagate, hash, &pk)
                }
                (None, None) => Ok(()),
                (Some(fk), Some(old_fk)) if changed => {
                    self.subscribe(ctx, old_fk, Instruction::DeleteKeyNoPropagate, hash, &pk)?;
                    let instruction = Instruction::PropagateNullIfNoFkValAvailable;
                    self.subscribe(ctx, fk, instruction, hash, &pk)
                }
                // The row had this foreign key: it may have a joined row, which an answer
                // "none" must delete. (Kafka since KAFKA-16407 asks "only if you have a row"
                // here; then, when the right row's delete is answered to the old subscription
                // (dropped: its hash is the old row's) before this subscription arrives, nothing
                // deletes the old joined row. The answer "none" costs at most a tombstone for a
                // key that had no joined row.)
                (Some(fk), Some(_)) => {
                    let instruction = Instruction::PropagateNullIfNoFkValAvailable;
                    self.subscribe(ctx, fk, instruction, hash, &pk)
                }
                // A new row, or one that had no foreign key: no joined row to delete.
                (Some(fk), None) => {
                    let instruction = Instruction::PropagateOnlyIfFkValAvailable;
                    self.subscribe(ctx, fk, instruction, hash, &pk)
                }
            },
        }
    }
}

/// The right side's answer to subscriptions (Kafka's `SubscriptionReceiveProcessorSupplier` and
/// `SubscriptionJoinProcessorSupplier`): keeps or forgets the subscription, then answers it as
/// its instruction says, with the larger of the two timestamps.
pub(crate) struct SubscriptionJoin<KO, VO> {
    /// The subscription store's task-local slot.
    pub(crate) store: usize,
    pub(crate) fk_serde: SerdeRef<KO>,
    pub(crate) foreign: BoundView<KO, VO>,
    pub(crate) foreign_serde: SerdeRef<VO>,
    pub(crate) forward: Forward<Vec<u8>, Response>,
}

impl<KO: 'static, VO: 'static> Node<KO, Subscription> for SubscriptionJoin<KO, VO> {
    fn process(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        fk: KO,
        subscription: Subscription,
    ) -> Result<()> {
        // The subscription store's key (Kafka's CombinedKey) and value, in the thread's scratch
        // buffers.
        let mut old = std::mem::take(&mut ctx.scratch.old);
        let fk_written = fk_bytes(ctx, self.store, &self.fk_serde, &fk, &mut old);
        ctx.scratch.old = old;
        fk_written?;
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        key_prefix(&scratch.old, &mut scratch.key);
        scratch.key.extend_from_slice(&subscription.primary_key);
        let kept = match subscription.instruction {
            Instruction::DeleteKeyNoPropagate | Instruction::DeleteKeyAndPropagate => false,
            _ => {
                scratch.value.clear();
                if let Err(e) = SubscriptionSerde.serialize(&subscription, &mut scratch.value) {
                    let origin = SerializationExceptionOrigin::Value;
                    return Err(unserializable_state(ctx, self.store, origin, e));
                }
                true
            }
        };
        let value = kept.then_some(&scratch.value[..]);
        ctx.stores[self.store].put(&scratch.key, value, ctx.timestamp, &ctx.headers);
        if subscription.instruction == Instruction::DeleteKeyNoPropagate {
            return Ok(());
        }
        // The right row is read for every answer: its timestamp counts even when the answer is
        // "none" (Kafka's SubscriptionJoinProcessorSupplier).
        let row = (self.foreign)(&fk, ctx)?;
        if row.is_none() && subscription.instruction == Instruction::PropagateOnlyIfFkValAvailable {
            return Ok(());
        }
        let timestamp = row
            .as_ref()
            .map_or(ctx.timestamp, |(_, ts)| ctx.timestamp.max(*ts));
        let row = row.filter(|_| subscription.instruction != Instruction::DeleteKeyAndPropagate);
        let foreign = foreign_bytes(&self.foreign_serde, row.as_ref().map(|(v, _)| v))?;
        let response = Response {
            hash: subscription.hash,
            foreign,
            primary_partition: subscription.primary_partition,
        };
        let saved = std::mem::replace(&mut ctx.timestamp, timestamp);
        let sent = self.forward.send(ctx, subscription.primary_key, response);
        ctx.timestamp = saved;
        sent
    }
}

/// The right table's side (Kafka's `ForeignTableJoinProcessorSupplier`): a right row's update
/// answers every subscription of its key again, with the update's timestamp.
pub(crate) struct ForeignTableJoin<KO, VO> {
    /// The subscription store's task-local slot.
    pub(crate) store: usize,
    pub(crate) fk_serde: SerdeRef<KO>,
    pub(crate) foreign_serde: SerdeRef<VO>,
    pub(crate) forward: Forward<Vec<u8>, Response>,
}

impl<KO: 'static, VO: 'static> ForeignTableJoin<KO, VO> {
    fn answer(&mut self, ctx: &mut ProcessingContext<'_>, fk: &KO, row: Option<&VO>) -> Result<()> {
        let mut old = std::mem::take(&mut ctx.scratch.old);
        let fk_written = fk_bytes(ctx, self.store, &self.fk_serde, fk, &mut old);
        ctx.scratch.old = old;
        fk_written?;
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        key_prefix(&scratch.old, &mut scratch.key);
        let subscriptions = ctx.stores[self.store].scan_prefix(&scratch.key)?;
        if subscriptions.is_empty() {
            return Ok(());
        }
        let foreign = foreign_bytes(&self.foreign_serde, row)?;
        for (_, value) in subscriptions {
            let subscription = SubscriptionSerde
                .deserialize(Some(&value))
                .map_err(|source| Error::CorruptState {
                    store: ctx.stores[self.store].inner.name().to_owned(),
                    task: ctx.task,
                    source,
                })?;
            let response = Response {
                hash: subscription.hash,
                foreign: foreign.clone(),
                primary_partition: subscription.primary_partition,
            };
            self.forward.send(ctx, subscription.primary_key, response)?;
        }
        Ok(())
    }
}

impl<KO: 'static, VO: 'static> Node<KO, VO> for ForeignTableJoin<KO, VO> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, fk: KO, row: VO) -> Result<()> {
        self.answer(ctx, &fk, Some(&row))
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, fk: KO) -> Result<()> {
        self.answer(ctx, &fk, None)
    }
}

/// Writes answers to the response topic, each to the left partition that subscribed (Kafka's
/// KIP-775 routing), keyed by the left key's bytes.
pub(crate) struct ResponseSink {
    /// The response topic's index in the topic table.
    pub(crate) topic: usize,
}

impl Node<Vec<u8>, Response> for ResponseSink {
    fn process(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: Vec<u8>,
        response: Response,
    ) -> Result<()> {
        let partitions = ctx.collector.topics().partitions(self.topic);
        let partition = response.primary_partition;
        let scratch = &mut *ctx.scratch;
        scratch.value.clear();
        if let Err(source) = ResponseSerde.serialize(&response, &mut scratch.value) {
            let error = Error::Serialize {
                origin: SerializationExceptionOrigin::Value,
                topic: ctx.collector.topics().name(self.topic).to_string(),
                partition: Some(partition),
                source,
            };
            return ctx.production_failed(error);
        }
        if partition >= partitions {
            let topic = ctx.collector.topics().name(self.topic).to_string();
            return Err(Error::IllegalState(format!(
                "a foreign-key join's answer is for partition {partition} of {topic}, which has \
                 {partitions}: the response topic must have the left table's partition count"
            )));
        }
        match ctx.collector.send(
            self.topic,
            partition,
            ctx.timestamp,
            Some(&key),
            Some(&scratch.value),
            &ctx.headers,
        ) {
            Err(error @ Error::RecordTooLarge { .. }) => ctx.production_failed(error),
            sent => sent,
        }
    }
}

/// The left side's join of answers (Kafka's `ResponseJoinProcessorSupplier`): an answer whose
/// hash is that of the left row as its table has forwarded it joins it (an inner join's "no
/// right row", or a deleted left row, is a delete); a stale answer is dropped.
pub(crate) struct ResponseJoin<K, V, VO, VR> {
    pub(crate) kind: ForeignJoinKind,
    pub(crate) primary: BoundView<K, V>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) foreign_serde: SerdeRef<VO>,
    #[allow(clippy::type_complexity)]
    pub(crate) joiner: Arc<dyn Fn(V, Option<VO>) -> VR + Send + Sync>,
    pub(crate) forward: Forward<K, VR>,
}

impl<K: Clone + 'static, V: 'static, VO: 'static, VR: Clone> Node<K, Response>
    for ResponseJoin<K, V, VO, VR>
{
    fn process(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        response: Response,
    ) -> Result<()> {
        let row = (self.primary)(&key, ctx)?.map(|(v, _)| v);
        let scratch = &mut *ctx.scratch;
        let hash = hash_of(
            &self.value_serde,
            row.as_ref(),
            &mut scratch.value,
            "responses",
        )?;
        if hash != response.hash {
            return Ok(());
        }
        let foreign = match &response.foreign {
            Some(bytes) => Some(self.foreign_serde.deserialize(Some(bytes)).map_err(|e| {
                Error::Deserialize {
                    part: "value",
                    topic: "(a foreign-key join's response)".into(),
                    partition: ctx.task.partition,
                    offset: ctx.record.map_or(0, |r| r.offset()),
                    source: e,
                }
            })?),
            None => None,
        };
        match (row, foreign) {
            (None, _) => self.forward.send_tombstone(ctx, key),
            (Some(_), None) if self.kind == ForeignJoinKind::Inner => {
                self.forward.send_tombstone(ctx, key)
            }
            (Some(row), foreign) => {
                let joined = (self.joiner)(row, foreign);
                self.forward.send(ctx, key, joined)
            }
        }
    }
}
