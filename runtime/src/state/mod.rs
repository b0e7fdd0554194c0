//! State stores: the `BytesStore` trait, an in-memory and a persistent (fjall)
//! implementation, the segmented window/session store (`SegmentedStore`), and the write cache
//! every store sits behind.
//!
//! Stores hold bytes; typed access goes through serdes in the processor nodes. A store is written
//! only at commit, after the commit's changelog writes and offsets are durable: between commits,
//! writes collect in the `CachedStore`'s cache (one entry per key, like Kafka Streams' record
//! cache), and reads see the cache first. So a store never holds uncommitted state, and a task
//! can resume from its checkpoint after its thread dies.

pub(crate) mod def;
pub(crate) mod global;
pub(crate) mod segment_totals;
pub(crate) mod stores;

mod arena;
mod cached;
mod database;
mod long_keys;
mod memory;
mod persistent;
mod window;

pub(crate) use database::MIN_MEMORY_BUDGET;
pub(crate) use database::{MemoryBudget, StoreDatabase};
pub(crate) use memory::InMemoryKeyValueStore;
pub(crate) use persistent::PersistentKeyValueStore;
pub(crate) use window::{
    DecodedEntry, SegmentedKind, SegmentedStore, decode_entry, encode_key, is_meta, key_bounds,
    meta_key, session_entry_key, window_entry_key,
};

pub use crate::types::error::StoreError;
pub(crate) use cached::{CachedStore, NO_TIMESTAMP};
pub use segment_totals::{SegmentedStoreTotals, segmented_store_totals};
pub use stores::{
    KeyValueBytesStoreSupplier, SessionBytesStoreSupplier, StoreBuilder, Stores,
    WindowBytesStoreSupplier,
};

/// Where a persistent store's data stands in its changelog, recorded in the store atomically
/// with the data it covers (as Kafka's KIP-1035 does): the changelog partition, and the offset
/// restoration goes on from (the changelog's end when the data was written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StorePosition {
    pub(crate) changelog: riffle_record::TopicPartition,
    pub(crate) offset: u64,
}

impl StorePosition {
    /// The first byte of an encoded position: its format.
    const FORMAT: u8 = 1;

    /// The bytes a store keeps: the format byte, the partition (4 bytes) and the offset (8
    /// bytes) big-endian, then the topic's name.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(13 + self.changelog.topic.len());
        out.push(Self::FORMAT);
        out.extend_from_slice(&self.changelog.partition.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(self.changelog.topic.as_bytes());
        out
    }

    /// Reads what [`encode`](Self::encode) wrote; anything else is [`StoreError::Corrupt`].
    pub(crate) fn decode(store: &str, bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt {
            store: store.to_owned(),
            reason: format!(
                "its recorded changelog position ({} bytes) {what}",
                bytes.len()
            ),
        };
        let (&format, rest) = bytes.split_first().ok_or_else(|| corrupt("is empty"))?;
        if format != Self::FORMAT {
            return Err(corrupt(&format!(
                "has format {format}, not {}",
                Self::FORMAT
            )));
        }
        let (partition, rest) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("is too short"))?;
        let (offset, topic) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("is too short"))?;
        let topic = std::str::from_utf8(topic).map_err(|_| corrupt("names no topic"))?;
        Ok(StorePosition {
            changelog: riffle_record::TopicPartition::new(topic, u32::from_be_bytes(*partition)),
            offset: u64::from_be_bytes(*offset),
        })
    }
}

impl std::fmt::Display for StorePosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{} offset {}",
            self.changelog.topic, self.changelog.partition, self.offset
        )
    }
}

/// Where a store found a key ([`BytesStore::get_hinted`]): a write of the key at the next
/// commit ([`BytesStore::write_batch_hinted`]) goes there without a lookup if nothing in the
/// store moved since (an epoch the store changes whenever an entry moves or goes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoreHint {
    pub(crate) at: usize,
    /// Never zero, so that an `Option<StoreHint>` (one per cached entry) takes no more room.
    pub(crate) epoch: std::num::NonZeroU64,
}

/// A key-value store of bytes. Implementations are owned by one task at a time.
///
/// The shape leaves room for window stores (ordered iteration) and for bulk restoration.
pub(crate) trait BytesStore: Send {
    /// The store's name.
    fn name(&self) -> &str;
    /// Copies the value of `key` into `out` (cleared first); `false` if there is none.
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Removes `key`.
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError>;
    /// Applies a batch of writes (`None` deletes) at once, as commits and restoration do.
    fn write_batch(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        for (key, value) in batch {
            match value {
                Some(value) => self.put(key, value)?,
                None => self.delete(key)?,
            }
        }
        Ok(())
    }
    /// As [`get_into`](Self::get_into), with where the store found the key if it can say
    /// (the in-memory store).
    fn get_hinted(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(bool, Option<StoreHint>), StoreError> {
        Ok((self.get_into(key, out)?, None))
    }
    /// As [`write_batch`](Self::write_batch) (or [`write_batch_at`](Self::write_batch_at) with
    /// `position`), each write with the hint of a read of its key since the last commit, if
    /// any: a commit writing back what it read skips the second lookup.
    fn write_batch_hinted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>, Option<StoreHint>)>,
        position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        let mut plain = batch.map(|(key, value, _)| (key, value));
        match position {
            Some(position) => self.write_batch_at(&mut plain, position),
            None => self.write_batch(&mut plain),
        }
    }
    /// As [`write_batch`](Self::write_batch), and records `position` atomically with the
    /// writes (persistent stores; the others ignore it).
    fn write_batch_at(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: &StorePosition,
    ) -> Result<(), StoreError> {
        let _ = position;
        self.write_batch(batch)
    }
    /// As [`write_batch_at`](Self::write_batch_at), for a store that several partitions feed
    /// (a global table's): `position` is recorded under its partition, beside the other
    /// partitions' (persistent stores; the others ignore it).
    fn write_batch_at_partition(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: &StorePosition,
    ) -> Result<(), StoreError> {
        let _ = position;
        self.write_batch(batch)
    }
    /// The positions [`write_batch_at_partition`](Self::write_batch_at_partition) recorded.
    fn partition_positions(&self) -> Result<Vec<StorePosition>, StoreError> {
        Ok(Vec::new())
    }
    /// Records `position` for data already written (restoration records it after each chunk:
    /// a position behind the data only replays records, one ahead of it would lose them).
    fn record_position(&mut self, position: &StorePosition) -> Result<(), StoreError> {
        let _ = position;
        Ok(())
    }
    /// The position recorded with the data; `None` if none was (a new store, or one written
    /// before stores recorded positions), and always for stores in memory.
    fn position(&self) -> Result<Option<StorePosition>, StoreError> {
        Ok(None)
    }
    /// Applies restored changelog records, given in ascending key order with each key once
    /// (`None` deletes). Stores may load these faster than ordinary writes.
    fn restore_sorted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        self.write_batch(batch)
    }
    /// Visits every entry, in key order ([`SegmentedStore`]: meta keys, then segment by segment).
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError>;
    /// Visits the entries with `from <= key < to`, in key order ([`SegmentedStore`]: meta keys,
    /// then segment by segment).
    fn range(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        self.for_each(&mut |k, v| {
            if k >= from && k < to {
                f(k, v)
            }
        })
    }
    /// Makes written data durable (a no-op in memory): what the store has written to disk,
    /// not what it holds to write back ([`persist`](Self::persist)).
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Writes what the store holds to write back to its storage, with the position of the last
    /// batch among it (a persistent task store; the others have nothing to write back).
    fn persist(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether the store holds writes not yet written to its storage: its recorded
    /// [`position`](Self::position) is then behind the writes it answers reads with.
    fn has_unpersisted(&self) -> bool {
        false
    }
    /// Removes every entry and the recorded position (before a full restore): a crash
    /// while wiping never leaves a position over missing data.
    fn wipe(&mut self) -> Result<(), StoreError>;
    /// Whether the store keeps its data across restarts (then its checkpoint is meaningful).
    fn is_persistent(&self) -> bool;
    /// The number of entries (approximate for persistent stores).
    fn approximate_len(&self) -> usize;
    /// Whether the store holds no entry (exact, and cheap for every store).
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.approximate_len() == 0)
    }
    /// The store as a window or session store, if it is one (what windowed operators scan by
    /// time).
    fn as_segmented(&self) -> Option<&SegmentedStore> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The persistent store's position goes with its batch when the batch is written back,
    /// survives reopening, and goes with a wipe; a batch not written back is gone with the
    /// store, position and all; an unreadable position is an error naming the store.
    #[test]
    fn the_persistent_store_records_its_position_with_its_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = || PersistentKeyValueStore::open_in("p", dir.path()).expect("open");
        let at = |offset| StorePosition {
            changelog: riffle_record::TopicPartition::new("app-p-changelog", 1),
            offset,
        };
        let mut store = open();
        assert_eq!(store.position().ok(), Some(None));
        store
            .write_batch_at(&mut std::iter::once((&b"k"[..], Some(&b"v"[..]))), &at(42))
            .expect("batch");
        assert!(store.has_unpersisted());
        assert_eq!(store.position().ok(), Some(None), "not written back yet");
        drop(store);
        let mut store = open();
        assert_eq!(
            store.position().ok(),
            Some(None),
            "dropped before its write-back"
        );
        assert_eq!(store.approximate_len(), 0);
        store
            .write_batch_at(&mut std::iter::once((&b"k"[..], Some(&b"v"[..]))), &at(42))
            .expect("batch");
        store.persist().expect("write back");
        assert!(!store.has_unpersisted());
        drop(store);
        let mut store = open();
        assert_eq!(store.position().ok(), Some(Some(at(42))));
        assert_eq!(store.approximate_len(), 1);
        store.wipe().expect("wipe");
        assert_eq!(store.position().ok(), Some(None));
        assert_eq!(
            StorePosition::decode("p", &at(5).encode()).ok(),
            Some(at(5)),
            "round trip"
        );
        for bad in [&b""[..], b"\x02", b"\x01\x00\x00"] {
            let err = StorePosition::decode("p", bad).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains("store p")),
                "{bad:?}: {err:?}"
            );
        }
    }

    /// Both stores answer point reads, deletes, ordered scans and ranges like a BTreeMap.
    #[test]
    fn both_stores_behave_like_a_btreemap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stores: Vec<Box<dyn BytesStore>> = vec![
            Box::new(InMemoryKeyValueStore::new("m")),
            Box::new(PersistentKeyValueStore::open_in("p", dir.path()).expect("open")),
        ];
        for mut store in stores {
            let mut model = BTreeMap::new();
            for i in 0u32..200 {
                let key = format!("k{:03}", (i * 37) % 101).into_bytes();
                if i % 7 == 0 {
                    store.delete(&key).expect("delete");
                    model.remove(&key);
                } else {
                    store.put(&key, &i.to_be_bytes()).expect("put");
                    model.insert(key, i.to_be_bytes().to_vec());
                }
            }
            let mut all = Vec::new();
            store
                .for_each(&mut |k, v| all.push((k.to_vec(), v.to_vec())))
                .expect("scan");
            assert_eq!(
                all,
                model.clone().into_iter().collect::<Vec<_>>(),
                "{}",
                store.name()
            );
            let mut ranged = Vec::new();
            store
                .range(b"k020", b"k050", &mut |k, v| {
                    ranged.push((k.to_vec(), v.to_vec()))
                })
                .expect("range");
            let expected: Vec<_> = model
                .range(b"k020".to_vec()..b"k050".to_vec())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(ranged, expected, "{}", store.name());
            let mut out = Vec::new();
            for (k, v) in &model {
                assert!(store.get_into(k, &mut out).expect("get"));
                assert_eq!(&out, v);
            }
            assert!(!store.get_into(b"absent", &mut out).expect("get"));
        }
    }
}
