//! Table nodes: a table's source and its store, the operations that keep a table a table
//! (`filter`, `map_values`, materialized or not), a grouped table's re-keying, and the views
//! joins read a table through (the joins' own nodes are in runtime/src/dsl/join/).
//!
//! A table passes its updates down as records and its deletes as tombstones
//! ([`Node::process_tombstone`]). What a join reads is the table's current value, looked up
//! in the store the table was materialized in and passed through the table's filters and value
//! maps above that store ([`TableView`], Kafka Streams' value getters), so an unmaterialized
//! `filter` or `map_values` costs no store of its own.

use std::rc::Rc;
use std::sync::Arc;

use crate::processor::node::{
    Change, FlushNode, Forward, Node, ProcessingContext, flush_table_store, unserializable_state,
};
use crate::serdes::Serde;
use crate::serdes::SerdeRef;
use crate::topology::BuildCtx;
use crate::types::error::SerializationExceptionOrigin::{Key, Value};
use crate::types::error::{Error, Result, SerdeError};

/// A table's view bound to one task's stores: the key's current value and its timestamp
/// (`None`: the table has no row for it).
pub(crate) type BoundView<K, V> =
    Rc<dyn Fn(&K, &mut ProcessingContext<'_>) -> Result<Option<(V, i64)>>>;

type BindFn<K, V> = Arc<dyn Fn(&BuildCtx<'_>, Read) -> BoundView<K, V> + Send + Sync>;

/// Which state of a table a bound view reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Every update processed so far, cached ones too (a stream record meets the table as of
    /// the records before it).
    Latest,
    /// What the table has forwarded so far ([`crate::state::CachedStore::get_as_forwarded`]):
    /// what a table–table join's side reads of the other table, and a foreign-key join's sides
    /// of the tables they answer and check answers against.
    Forwarded,
}

/// How a table's current value for a key is found (Kafka Streams' value getters): the stores
/// it reads, and how, bound to a task's stores by [`TableView::bind`]. A table materialized in
/// a store reads it; an unmaterialized `filter` or `map_values` reads its parent's view and
/// applies itself; an unmaterialized table join reads both sides' views and joins them.
pub(crate) struct TableView<K, V> {
    /// The topology stores it reads: a node reading through it is connected to each.
    pub(crate) stores: Vec<usize>,
    bind: BindFn<K, V>,
}

impl<K, V> Clone for TableView<K, V> {
    fn clone(&self) -> Self {
        TableView {
            stores: self.stores.clone(),
            bind: self.bind.clone(),
        }
    }
}

impl<K: 'static, V: 'static> TableView<K, V> {
    /// The view of a timestamped store (a topology store index) keyed with `key_serde` and
    /// holding values of `serde`.
    pub(crate) fn of_store(store: usize, key_serde: SerdeRef<K>, serde: SerdeRef<V>) -> Self {
        let bind: BindFn<K, V> = Arc::new(move |ctx, read| {
            let slot = ctx.slot_of(store);
            let (key_serde, serde) = (key_serde.clone(), serde.clone());
            Rc::new(move |key, ctx| {
                let scratch = &mut *ctx.scratch;
                scratch.key.clear();
                if let Err(e) = key_serde.serialize(key, &mut scratch.key) {
                    return Err(unserializable_state(ctx, slot, Key, e));
                }
                let store = &ctx.stores[slot];
                let found = match read {
                    Read::Latest => store.get_with_timestamp(&scratch.key, &mut scratch.old)?,
                    Read::Forwarded => store.get_as_forwarded(&scratch.key, &mut scratch.old)?,
                };
                let Some(ts) = found else {
                    return Ok(None);
                };
                match serde.deserialize(Some(&ctx.scratch.old)) {
                    Ok(value) => Ok(Some((value, ts))),
                    Err(e) => Err(corrupt(ctx, slot, e)),
                }
            })
        });
        TableView {
            stores: vec![store],
            bind,
        }
    }

    /// This view with `f` applied to what it reads (`None`: no row).
    pub(crate) fn then<V2: 'static>(
        &self,
        f: impl Fn(&K, V) -> Option<V2> + Send + Sync + 'static,
    ) -> TableView<K, V2> {
        let (inner, f) = (self.bind.clone(), Arc::new(f));
        let bind: BindFn<K, V2> = Arc::new(move |ctx, read| {
            let (inner, f) = (inner(ctx, read), f.clone());
            Rc::new(move |key, ctx| Ok(inner(key, ctx)?.and_then(|(v, ts)| Some((f(key, v)?, ts)))))
        });
        TableView {
            stores: self.stores.clone(),
            bind,
        }
    }

    /// The view of a table join of `left` and `right` (Kafka's `KTableKTableJoinValueGetter`):
    /// `join` makes the row from both sides' rows, or none; its timestamp is the larger of
    /// theirs.
    pub(crate) fn join<VL: 'static, VR: 'static>(
        left: &TableView<K, VL>,
        right: &TableView<K, VR>,
        join: impl Fn(Option<VL>, Option<VR>) -> Option<V> + Send + Sync + 'static,
    ) -> TableView<K, V> {
        let (l, r, join) = (left.bind.clone(), right.bind.clone(), Arc::new(join));
        let bind: BindFn<K, V> = Arc::new(move |ctx, read| {
            let (l, r, join) = (l(ctx, read), r(ctx, read), join.clone());
            Rc::new(move |key, ctx| {
                let (left, right) = (l(key, ctx)?, r(key, ctx)?);
                let ts = match (&left, &right) {
                    (Some((_, a)), Some((_, b))) => (*a).max(*b),
                    (Some((_, t)), None) | (None, Some((_, t))) => *t,
                    (None, None) => return Ok(None),
                };
                Ok(join(left.map(|(v, _)| v), right.map(|(v, _)| v)).map(|v| (v, ts)))
            })
        });
        let mut stores = left.stores.clone();
        stores.extend(right.stores.iter().filter(|s| !left.stores.contains(s)));
        TableView { stores, bind }
    }

    /// The view bound to the stores of the task `ctx` builds, reading them as `read` says.
    pub(crate) fn bind(&self, ctx: &BuildCtx<'_>, read: Read) -> BoundView<K, V> {
        (self.bind)(ctx, read)
    }
}

fn corrupt(ctx: &ProcessingContext<'_>, slot: usize, source: SerdeError) -> Error {
    Error::CorruptState {
        store: ctx.stores[slot].inner.name().to_owned(),
        task: ctx.task,
        source,
    }
}

/// A table's store between the table's source (or operation) and what follows it: each
/// update is written to the store's cache, and at commit the latest value of every key
/// written (or its tombstone) goes downstream, as Kafka Streams' cached `KTableSource` and
/// materialized table operations forward; with caching disabled each update goes downstream
/// as it is processed, as Kafka's uncached ones do.
///
/// For a table read from a topic (`raw`), the store keeps the record's own key and value
/// bytes, so restoring it from that topic, its changelog, gives the same store.
pub(crate) struct TableStore<K, VIn, V> {
    pub(crate) store: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) raw: bool,
    /// What the table keeps of an update (`None`: a delete): the identity for a table read
    /// from a topic, the operation for a materialized `filter` or `map_values`.
    #[allow(clippy::type_complexity)]
    pub(crate) map: Arc<dyn Fn(&K, VIn) -> Option<V> + Send + Sync>,
    pub(crate) forward: Forward<K, V>,
    /// Forward old values (`Change`s).
    pub(crate) send_old: bool,
}

impl<K: Clone + 'static, VIn, V: Clone + 'static> TableStore<K, VIn, V> {
    /// Writes the update (`None`: a delete) to the store's cache; with caching disabled,
    /// forwards it at once too (Kafka's uncached table), with the key's value before it when
    /// downstream asked for old values.
    fn update(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: Option<V>) -> Result<()> {
        if ctx.stores[self.store].caches_writes() {
            return self.write(ctx, &key, value.as_ref());
        }
        let old = if self.send_old {
            self.serialize_key(ctx, &key)?;
            let scratch = &mut *ctx.scratch;
            match ctx.stores[self.store].get_with_timestamp(&scratch.key, &mut scratch.old)? {
                Some(_) => Some(
                    self.value_serde
                        .deserialize(Some(&scratch.old))
                        .map_err(|e| corrupt(ctx, self.store, e))?,
                ),
                None => None,
            }
        } else {
            None
        };
        self.write(ctx, &key, value.as_ref())?;
        self.forward
            .send_update(ctx, key, value, old, self.send_old)
    }

    /// The key's store bytes into the thread's key buffer.
    fn serialize_key(&self, ctx: &mut ProcessingContext<'_>, key: &K) -> Result<()> {
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        match ctx.record.filter(|_| self.raw) {
            Some(record) => {
                if let Some(k) = record.key() {
                    scratch.key.extend_from_slice(k);
                }
            }
            None => {
                if let Err(e) = self.key_serde.serialize(key, &mut scratch.key) {
                    return Err(unserializable_state(ctx, self.store, Key, e));
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, ctx: &mut ProcessingContext<'_>, key: &K, value: Option<&V>) -> Result<()> {
        self.serialize_key(ctx, key)?;
        let scratch = &mut *ctx.scratch;
        scratch.value.clear();
        match ctx.record.filter(|_| self.raw) {
            Some(record) => {
                if let Some(v) = record.value() {
                    scratch.value.extend_from_slice(v);
                }
            }
            None => {
                if let Some(v) = value
                    && let Err(e) = self.value_serde.serialize(v, &mut scratch.value)
                {
                    return Err(unserializable_state(ctx, self.store, Value, e));
                }
            }
        }
        let value = value.map(|_| &scratch.value[..]);
        ctx.stores[self.store].put(&scratch.key, value, ctx.timestamp, &ctx.headers);
        Ok(())
    }
}

impl<K: Clone + 'static, VIn, V: Clone + 'static> Node<K, VIn> for TableStore<K, VIn, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: VIn) -> Result<()> {
        let value = (self.map)(&key, value);
        self.update(ctx, key, value)
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.update(ctx, key, None)
    }
}

impl<K: Clone + 'static, VIn, V: Clone + 'static> FlushNode for TableStore<K, VIn, V> {
    fn flush(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        flush_table_store(
            ctx,
            self.store,
            &self.key_serde,
            &self.value_serde,
            &self.forward,
            self.send_old,
        )
    }
}

/// `KTable::filter`, `filter_not` and `map_values` without a store: each update is mapped, and
/// an update the function drops becomes a tombstone (Kafka Streams forwards a delete for a
/// filtered-out update, since the key may have passed before). Asked for old values, it maps
/// the old value too; a filter forwards nothing when both come out empty (Kafka's
/// `KTableFilter`).
pub(crate) struct TableMap<K, V, V2> {
    #[allow(clippy::type_complexity)]
    pub(crate) f: Arc<dyn Fn(&K, V) -> Option<V2> + Send + Sync>,
    pub(crate) forward: Forward<K, V2>,
    pub(crate) send_old: bool,
    /// A filter (Kafka's `KTableFilter`), which drops an update whose new and old values both
    /// come out empty; a `map_values` passes it on (`KTableMapValues`).
    pub(crate) filter: bool,
}

impl<K: Clone, V, V2: Clone> Node<K, V> for TableMap<K, V, V2> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        match (self.f)(&key, value) {
            Some(v) => self.forward.send(ctx, key, v),
            None => self.forward.send_tombstone(ctx, key),
        }
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.forward.send_tombstone(ctx, key)
    }

    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        if !self.send_old {
            return match change.new {
                Some(value) => self.process(ctx, key, value),
                None => self.process_tombstone(ctx, key),
            };
        }
        let new = change.new.and_then(|v| (self.f)(&key, v));
        let old = change.old.and_then(|v| (self.f)(&key, v));
        if self.filter && new.is_none() && old.is_none() {
            return Ok(());
        }
        self.forward.send_change(ctx, key, Change { new, old })
    }
}

/// A table update's new and old values in one record of a grouped table's repartition topic,
/// in Kafka Streams' `ChangedSerializer` format, so Kafka's tools and applications read riffle's
/// topics and the other way round: `{old}{0x00}` (old only), `{new}{0x01}` (new only),
/// `{zig-zag varint len(new)}{new}{old}{0x02}` (both). Reading also takes Kafka's formats with
/// an `is latest` byte before the flag (`0x03`–`0x05`).
pub(crate) struct ChangeSerde<V> {
    pub(crate) inner: SerdeRef<V>,
}

impl<V: 'static> Serde<Change<V>> for ChangeSerde<V> {
    fn serialize(&self, change: &Change<V>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        match (&change.new, &change.old) {
            (Some(new), Some(old)) => {
                // The new value, then its length's varint, rotated in front of it.
                let start = out.len();
                self.inner.serialize(new, out)?;
                let len = out.len() - start;
                riffle_record::varint::put_varlong(out, len as i64);
                let varint = out.len() - start - len;
                out[start..].rotate_right(varint);
                self.inner.serialize(old, out)?;
                out.push(2);
            }
            (Some(new), None) => {
                self.inner.serialize(new, out)?;
                out.push(1);
            }
            (None, Some(old)) => {
                self.inner.serialize(old, out)?;
                out.push(0);
            }
            // Never sent: an update without either value has nothing to subtract or add.
            (None, None) => out.push(0xff),
        }
        Ok(())
    }

    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Change<V>, SerdeError> {
        let invalid = |reason: String| SerdeError::Invalid {
            type_name: "Change",
            reason,
        };
        let bytes = bytes.ok_or(SerdeError::UnexpectedNull {
            type_name: "Change",
        })?;
        let (&flag, rest) = bytes.split_last().ok_or_else(|| invalid("empty".into()))?;
        // Kafka's formats 3-5 carry an `is latest` byte before the flag; riffle keeps none.
        let rest = match flag {
            0..=2 => rest,
            3..=5 => rest
                .split_last()
                .map(|(_, r)| r)
                .ok_or_else(|| invalid(format!("flag {flag} without its is-latest byte")))?,
            other => return Err(invalid(format!("unknown flag {other}"))),
        };
        let value = |b: &[u8]| self.inner.deserialize(Some(b));
        match flag {
            0 | 3 => Ok(Change {
                new: None,
                old: Some(value(rest)?),
            }),
            1 | 4 => Ok(Change {
                new: Some(value(rest)?),
                old: None,
            }),
            _ => {
                let mut pos = 0;
                let len = riffle_record::varint::get_varint(rest, &mut pos)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= rest.len() - pos)
                    .ok_or_else(|| invalid("a new value's length past the end".into()))?;
                let (new, old) = rest[pos..].split_at(len);
                Ok(Change {
                    new: Some(value(new)?),
                    old: Some(value(old)?),
                })
            }
        }
    }
}

/// `KTable::group_by`'s node (Kafka Streams' `KTableRepartitionMap`): maps a table update's
/// new and old values to their new keys and values. When both keep one key it sends one
/// `Change` (the aggregation subtracts then adds in one step, KIP-904); otherwise the old
/// value's subtraction to its key first, then the new value's addition to its key.
pub(crate) struct TableGroupBy<K, V, K2, V2> {
    #[allow(clippy::type_complexity)]
    pub(crate) selector: Arc<dyn Fn(K, V) -> (K2, V2) + Send + Sync>,
    pub(crate) forward: Forward<K2, Change<V2>>,
}

impl<K: Clone, V, K2: Clone + PartialEq, V2: Clone> Node<K, V> for TableGroupBy<K, V, K2, V2> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.process_change(ctx, key, Change::of(Some(value)))
    }

    fn process_change(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: K,
        change: Change<V>,
    ) -> Result<()> {
        let old = change.old.map(|v| (self.selector)(key.clone(), v));
        let new = change.new.map(|v| (self.selector)(key, v));
        match (new, old) {
            (Some((new_key, new)), Some((old_key, old))) if new_key == old_key => {
                let change = Change {
                    new: Some(new),
                    old: Some(old),
                };
                self.forward.send(ctx, new_key, change)
            }
            (new, old) => {
                if let Some((old_key, old)) = old {
                    let change = Change {
                        new: None,
                        old: Some(old),
                    };
                    self.forward.send(ctx, old_key, change)?;
                }
                match new {
                    Some((new_key, new)) => {
                        let change = Change {
                            new: Some(new),
                            old: None,
                        };
                        self.forward.send(ctx, new_key, change)
                    }
                    None => Ok(()),
                }
            }
        }
    }
}
