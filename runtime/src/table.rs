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
use crate::node::{FlushNode, Forward, Node, ProcessingContext};
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
        ctx.stores[self.store].order_by_last_write();
        for i in 0..ctx.stores[self.store].dirty_len() {
            let (key, value, timestamp) = ctx.stores[self.store].dirty(i);
            let key = self
                .key_serde
                .deserialize(Some(key))
                .map_err(|e| corrupt(ctx, self.store, e));
            let value = value
                .map(|v| self.value_serde.deserialize(Some(v)))
                .transpose()
                .map_err(|e| corrupt(ctx, self.store, e));
            let (key, value) = (key?, value?);
            ctx.timestamp = timestamp;
            ctx.headers = ctx.stores[self.store].dirty_headers(i).clone();
            match value {
                Some(value) => self.forward.send(ctx, key, value)?,
                None => self.forward.send_tombstone(ctx, key)?,
            }
        }
        Ok(())
    }
}

/// `KTable::filter`, `filter_not` and `map_values` without a store: each update is mapped, and
/// an update the function drops becomes a tombstone (Kafka Streams forwards a delete for a
/// filtered-out update, since the key may have passed before).
pub(crate) struct TableMap<K, V, V2> {
    #[allow(clippy::type_complexity)]
    pub(crate) f: Arc<dyn Fn(&K, V) -> Option<V2> + Send + Sync>,
    pub(crate) forward: Forward<K, V2>,
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
