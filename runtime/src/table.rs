//! Table nodes: a table's source and its store, the operations that keep a table a table
//! (`filter`, `map_values`, materialized or not), and the stream–table join.
//!
//! A table passes its updates down as records and its deletes as tombstones
//! ([`Node::process_tombstone`]). What a join reads is the table's current value, looked up
//! in the store the table was materialized in and passed through the table's filters and value
//! maps above that store ([`TableView`], Kafka Streams' value getters), so an unmaterialized
//! `filter` or `map_values` costs no store of its own.

use std::sync::Arc;

use crate::error::{Error, Result, SerdeError};
use crate::node::{Change, FlushNode, Forward, Node, ProcessingContext, flush_table_store};
use crate::serdes::SerdeRef;

/// Reads a key's value from the raw bytes its table's store holds: `None` when a filter
/// between the store and the table drops it.
pub(crate) type ReadFn<K, V> =
    Arc<dyn Fn(&K, &[u8]) -> Result<Option<V>, SerdeError> + Send + Sync>;

/// How a table's current value for a key is found: the store (a topology store index) it was
/// materialized in, its key serde, and the decoding and operations between that store and the
/// table.
pub(crate) struct TableView<K, V> {
    pub(crate) store: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) read: ReadFn<K, V>,
}

impl<K, V> Clone for TableView<K, V> {
    fn clone(&self) -> Self {
        TableView {
            store: self.store,
            key_serde: self.key_serde.clone(),
            read: self.read.clone(),
        }
    }
}

impl<K: 'static, V: 'static> TableView<K, V> {
    /// The view of a store that holds values of `serde`.
    pub(crate) fn of_store(store: usize, key_serde: SerdeRef<K>, serde: SerdeRef<V>) -> Self {
        TableView {
            store,
            key_serde,
            read: Arc::new(move |_, bytes| serde.deserialize(Some(bytes)).map(Some)),
        }
    }

    /// This view with `f` applied to what it reads.
    pub(crate) fn then<V2: 'static>(
        &self,
        f: impl Fn(&K, V) -> Option<V2> + Send + Sync + 'static,
    ) -> TableView<K, V2> {
        let read = self.read.clone();
        TableView {
            store: self.store,
            key_serde: self.key_serde.clone(),
            read: Arc::new(move |k, bytes| Ok(read(k, bytes)?.and_then(|v| f(k, v)))),
        }
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
/// materialized table operations forward.
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
    /// Forward old values (`Change`s) at commit.
    pub(crate) send_old: bool,
}

impl<K: Clone + 'static, VIn, V: Clone + 'static> TableStore<K, VIn, V> {
    fn write(&mut self, ctx: &mut ProcessingContext<'_>, key: &K, value: Option<&V>) {
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        scratch.value.clear();
        match ctx.record.filter(|_| self.raw) {
            Some(record) => {
                if let Some(k) = record.key() {
                    scratch.key.extend_from_slice(k);
                }
                if let Some(v) = record.value() {
                    scratch.value.extend_from_slice(v);
                }
            }
            None => {
                self.key_serde.serialize(key, &mut scratch.key);
                if let Some(v) = value {
                    self.value_serde.serialize(v, &mut scratch.value);
                }
            }
        }
        let value = value.map(|_| &scratch.value[..]);
        ctx.stores[self.store].put(&scratch.key, value, ctx.timestamp, &ctx.headers);
    }
}

impl<K: Clone + 'static, VIn, V: Clone + 'static> Node<K, VIn> for TableStore<K, VIn, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: VIn) -> Result<()> {
        let value = (self.map)(&key, value);
        self.write(ctx, &key, value.as_ref());
        Ok(())
    }

    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.write(ctx, &key, None);
        Ok(())
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
/// the old value too, and forwards nothing when both come out empty (Kafka's `KTableFilter`).
pub(crate) struct TableMap<K, V, V2> {
    #[allow(clippy::type_complexity)]
    pub(crate) f: Arc<dyn Fn(&K, V) -> Option<V2> + Send + Sync>,
    pub(crate) forward: Forward<K, V2>,
    pub(crate) send_old: bool,
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
        if new.is_none() && old.is_none() {
            return Ok(());
        }
        self.forward.send_change(ctx, key, Change { new, old })
    }
}

/// A stream–table join: each stream record looks its key up in the table (cache first, then
/// store) and the joiner's result goes downstream with the stream record's timestamp. Table
/// updates emit nothing; they only change what later stream records find.
pub(crate) struct StreamTableJoin<K, V, VT, VR> {
    /// The table store's task-local slot.
    pub(crate) slot: usize,
    pub(crate) view: TableView<K, VT>,
    /// The joiner, given the table's value if there is one; `None`: nothing to emit (an
    /// inner join's miss).
    #[allow(clippy::type_complexity)]
    pub(crate) joiner: Arc<dyn Fn(&K, V, Option<VT>) -> Option<VR> + Send + Sync>,
    pub(crate) forward: Forward<K, VR>,
}

impl<K: Clone + 'static, V, VT, VR: Clone> Node<K, V> for StreamTableJoin<K, V, VT, VR> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let scratch = &mut *ctx.scratch;
        scratch.key.clear();
        self.view.key_serde.serialize(&key, &mut scratch.key);
        let found = ctx.stores[self.slot].get_with_timestamp(&scratch.key, &mut scratch.old)?;
        let other = match found {
            Some(_) => {
                (self.view.read)(&key, &ctx.scratch.old).map_err(|e| corrupt(ctx, self.slot, e))?
            }
            None => None,
        };
        match (self.joiner)(&key, value, other) {
            Some(joined) => self.forward.send(ctx, key, joined),
            None => Ok(()),
        }
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

impl<V: 'static> crate::serdes::Serde<Change<V>> for ChangeSerde<V> {
    fn serialize(&self, change: &Change<V>, out: &mut Vec<u8>) {
        match (&change.new, &change.old) {
            (Some(new), Some(old)) => {
                let mut new_bytes = Vec::new();
                self.inner.serialize(new, &mut new_bytes);
                riffle_log::varint::put_varlong(out, new_bytes.len() as i64);
                out.extend_from_slice(&new_bytes);
                self.inner.serialize(old, out);
                out.push(2);
            }
            (Some(new), None) => {
                self.inner.serialize(new, out);
                out.push(1);
            }
            (None, Some(old)) => {
                self.inner.serialize(old, out);
                out.push(0);
            }
            // Never sent: an update without either value has nothing to subtract or add.
            (None, None) => out.push(0xff),
        }
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
                let len = riffle_log::varint::get_varint(rest, &mut pos)
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
        let change = Change {
            new: Some(value),
            old: None,
        };
        self.process_change(ctx, key, change)
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
