//! The persistent store, on fjall (a pure-Rust LSM tree; RocksDB's C++ build takes about 26
//! minutes on a 2-core machine).
//!
//! Its entries live in the application instance's one [`StoreDatabase`], in the keyspace every
//! key-value store shares, each key prefixed with the store's id (a key too long for fjall laid
//! out as runtime/src/state/long_keys.rs says); its changelog position in the registry keyspace,
//! written in the same fjall batch as the data it covers.
//!
//! A task's store writes back: a commit's writes go to the store's own hash table
//! ([`Pending`]), which reads consult first, and reach fjall in one batch, in key order and with
//! the position of the last commit they hold, when the tables of every store together hold
//! more than their share of the write buffers, before a range read, and before a checkpoint the
//! task forces (closing). fjall's memtable is a skip list: at a million keys its search and
//! insert were most of a commit's and a read's cost, twice per record (docs/BENCHMARKS.md,
//! "Where the high-cardinality time goes"); a hash table answers the keys written since the
//! last write-back in one probe, and a key written in several commits reaches fjall once. What a
//! crash loses of the table is in the changelog after the position fjall holds, from which the
//! task restores (Kafka Streams' RocksDB stores run without a write-ahead log for the same
//! reason). A global store writes through: its positions are per partition.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fjall::Keyspace;
use riffle_state_dir::TaskId;

use super::arena::ArenaMap;
#[cfg(test)]
use super::database::MemoryBudget;
use super::database::{StoreDatabase, delete_prefix, way_out};
use super::long_keys::{DiskError, KV};
use super::{BytesStore, StoreError, StorePosition};

/// The writes of a store not yet in fjall, latest per key (in an arena: see
/// runtime/src/state/arena.rs), and the position of the last commit among them.
#[derive(Default)]
struct Pending {
    map: ArenaMap<u32>,
    /// Bytes charged to the database's write-back share: what the map has allocated.
    bytes: u64,
    position: Option<StorePosition>,
    /// fjall holds no entry of the store (found empty when opened or wiped, and nothing written
    /// to fjall since): a key the table does not hold is in no store, without a read of fjall.
    nothing_on_disk: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.map.is_empty() && self.position.is_none()
    }

    /// Empties the table and gives its memory back (kept, 20,000 tasks' tables would hold
    /// memory the budget no longer counts).
    fn clear(&mut self) {
        self.map.clear();
        self.position = None;
    }
}

/// A store on disk that keeps its data across restarts.
pub(crate) struct PersistentKeyValueStore {
    name: String,
    db: Arc<StoreDatabase>,
    /// The store's id: the prefix of its keys.
    prefix: [u8; 4],
    position_key: [u8; 8],
    /// Whether writes go to `pending` first (a task's store) or straight to fjall (a global
    /// store's, whose positions are per partition).
    write_back: bool,
    /// Under a lock only because reads take `&self` and a range read writes the table back
    /// first; a task's store is its thread's own, so the lock is never contended.
    pending: Mutex<Pending>,
}

impl Drop for PersistentKeyValueStore {
    fn drop(&mut self) {
        // Unwritten writes are dropped with the store (a dirty close): the task restores them
        // from the changelog.
        self.discard_pending();
    }
}

impl std::fmt::Debug for PersistentKeyValueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentKeyValueStore")
            .field("name", &self.name)
            .field("id", &u32::from_be_bytes(self.prefix))
            .field("path", &self.db.path())
            .finish()
    }
}

/// A [`StoreError::Backend`] of the store `name` at `path`.
pub(super) fn backend_error(name: &str, path: &Path, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        store: name.to_owned(),
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// A [`DiskError`] of the store `name` in the database at `path` as a [`StoreError`]: what
/// says the database is damaged (fjall reading what it did not write, an entry not as the
/// layout wrote it) with the way out.
pub(super) fn disk_error(name: &str, path: &Path, e: DiskError) -> StoreError {
    match e {
        DiskError::Fjall(e) if is_damage(&e) => {
            backend_error(name, path, format_args!("{e}; {}", way_out(path)))
        }
        DiskError::Fjall(fjall::Error::Poisoned) => backend_error(
            name,
            path,
            "the store database refuses writes since an earlier flush or journal write failed \
             (fjall's Poisoned: a full disk or an I/O error; the error logged before this one \
             says which): make room or fix the disk, then start the application again; the \
             stores recover from their journal and changelogs",
        ),
        DiskError::Fjall(e) => backend_error(name, path, e),
        DiskError::TooLarge(reason) => backend_error(name, path, reason),
        DiskError::Corrupt(reason) => StoreError::Corrupt {
            store: name.to_owned(),
            reason: format!("{reason}, in {}; {}", path.display(), way_out(path)),
        },
    }
}

/// Whether fjall found its files damaged (not an I/O failure, a full disk or a lock).
fn is_damage(e: &fjall::Error) -> bool {
    match e {
        fjall::Error::Storage(inner) => !matches!(inner, fjall::LsmError::Io(_)),
        fjall::Error::JournalRecovery(_)
        | fjall::Error::InvalidVersion(_)
        | fjall::Error::InvalidTag(_)
        | fjall::Error::InvalidTrailer
        | fjall::Error::Decompress(_)
        | fjall::Error::Unrecoverable => true,
        _ => false,
    }
}

impl PersistentKeyValueStore {
    /// Opens (creating if needed) `task`'s store `name` in `format` (a timestamped store is
    /// another format, so data of the format before it is never read as its own).
    pub(crate) fn open(
        db: &Arc<StoreDatabase>,
        task: TaskId,
        format: &str,
        name: impl Into<String>,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        let id = db.store_id(task, format, &name)?;
        PersistentKeyValueStore {
            name,
            db: db.clone(),
            prefix: id.to_be_bytes(),
            position_key: StoreDatabase::position_key(id),
            write_back: true,
            pending: Mutex::default(),
        }
        .found_on_disk()
    }

    /// Notes whether fjall holds any entry of the store.
    fn found_on_disk(mut self) -> Result<Self, StoreError> {
        let empty = match self.kv().prefix(self.prefix).next() {
            None => true,
            Some(guard) => guard.into_inner().map(|_| false).map_err(|e| self.err(e))?,
        };
        self.pending_mut().nothing_on_disk = empty;
        Ok(self)
    }

    /// Opens (creating if needed) the global store `name` in `format`: a global table's, which
    /// no task owns and whose positions are recorded per partition of its topic
    /// ([`BytesStore::write_batch_at_partition`]).
    pub(crate) fn open_global(
        db: &Arc<StoreDatabase>,
        format: &str,
        name: impl Into<String>,
    ) -> Result<Self, StoreError> {
        let name = name.into();
        let id = db.global_store_id(format, &name)?;
        Ok(PersistentKeyValueStore {
            name,
            db: db.clone(),
            prefix: id.to_be_bytes(),
            position_key: StoreDatabase::position_key(id),
            write_back: false,
            pending: Mutex::default(),
        })
    }

    /// The database the store lives in (tests).
    #[cfg(test)]
    pub(crate) fn database(&self) -> &Arc<StoreDatabase> {
        &self.db
    }

    /// Bytes the write-back table is charged (tests).
    #[cfg(test)]
    pub(crate) fn pending_charge(&self) -> u64 {
        self.pending().bytes
    }

    fn pending_mut(&mut self) -> &mut Pending {
        self.pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `pending` to fjall: one batch in key order, with the position of the last
    /// commit it holds. A large table is ingested as a table of fjall's own, as a large
    /// restore is (the memtable's skip-list inserts were most of a write-back's time), and its
    /// position written after it: a crash in between leaves the position behind the data,
    /// which only replays records.
    fn write_back(&self, pending: &mut Pending) -> Result<(), StoreError> {
        if pending.is_empty() {
            return Ok(());
        }
        let entries = pending.map.sorted();
        if entries.len() < INGESTION_MIN_ENTRIES {
            self.write_through(&mut entries.into_iter(), pending.position.as_ref(), false)?;
        } else {
            self.ingest(entries)?;
            if let Some(position) = &pending.position {
                self.db
                    .registry()
                    .insert(self.position_key, position.encode())
                    .map_err(|e| self.err(e))?;
            }
        }
        pending.nothing_on_disk = false;
        pending.clear();
        self.recharge(pending);
        Ok(())
    }

    /// Writes sorted, unique keys as a table of their own, bypassing the memtable; they win
    /// over what the store held.
    fn ingest(&self, entries: Vec<(&[u8], Option<&[u8]>)>) -> Result<(), StoreError> {
        if entries.iter().any(|(key, _)| KV.is_long(key)) {
            return self.ingest_with_long_keys(entries);
        }
        let mut ingestion = self.kv().start_ingestion().map_err(|e| self.err(e))?;
        for (key, value) in entries {
            let key = self.full_key(key);
            let written = match value {
                Some(value) => ingestion.write(key, value),
                None => ingestion.write_tombstone(key),
            };
            written.map_err(|e| self.err(e))?;
        }
        ingestion.finish().map_err(|e| self.err(e))
    }

    /// [`ingest`](Self::ingest) of entries among which are long keys: in the order of their
    /// fjall keys, which differs from the keys' among long keys sharing a head
    /// (runtime/src/state/long_keys.rs).
    #[cold]
    fn ingest_with_long_keys(
        &self,
        entries: Vec<(&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        let mut encoded = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let value = value
                .map(|value| KV.value(key, value))
                .transpose()
                .map_err(|e| self.disk_err(e))?;
            encoded.push((self.full_key(key), value));
        }
        encoded.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut ingestion = self.kv().start_ingestion().map_err(|e| self.err(e))?;
        for (key, value) in encoded {
            let written = match value {
                Some(value) => ingestion.write(key, value),
                None => ingestion.write_tombstone(key),
            };
            written.map_err(|e| self.err(e))?;
        }
        ingestion.finish().map_err(|e| self.err(e))
    }

    /// Charges the database what `pending` allocated since last charged (or takes off what it
    /// gave back); whether the stores' tables now hold more than their share.
    fn recharge(&self, pending: &mut Pending) -> bool {
        let now = pending.map.allocated() as u64;
        let before = std::mem::replace(&mut pending.bytes, now);
        self.db
            .charge_pending(now.saturating_sub(before), before.saturating_sub(now))
    }

    /// Forgets the table's writes (a wipe, a dirty close) and gives back its share.
    fn discard_pending(&self) {
        let mut pending = self.pending();
        pending.clear();
        self.recharge(&mut pending);
    }

    /// Writes the table back if it holds anything (before a read of fjall that the table does
    /// not answer, a range or a scan, and when the task asks: [`BytesStore::persist`]).
    fn write_back_shared(&self) -> Result<(), StoreError> {
        if self.write_back {
            let mut pending = self.pending();
            return self.write_back(&mut pending);
        }
        Ok(())
    }

    /// The registry key of the position of `partition` (a global store's): the store's
    /// position key, then the partition (4 bytes big-endian).
    fn partition_position_key(&self, partition: u32) -> [u8; 12] {
        let mut key = [0u8; 12];
        key[..8].copy_from_slice(&self.position_key);
        key[8..].copy_from_slice(&partition.to_be_bytes());
        key
    }

    /// A store alone in a database of its own in `dir` (tests).
    #[cfg(test)]
    pub(crate) fn open_in(name: impl Into<String>, dir: &Path) -> Result<Self, StoreError> {
        // The default budget: the stores' write-back tables get a share.
        let db = StoreDatabase::open(dir, MemoryBudget::split(256 << 20, 0))?;
        Self::open(&db, TaskId::new(0, 0), "kv", name)
    }

    fn kv(&self) -> &Keyspace {
        self.db.kv()
    }

    fn err(&self, e: fjall::Error) -> StoreError {
        self.disk_err(DiskError::Fjall(e))
    }

    fn disk_err(&self, e: DiskError) -> StoreError {
        disk_error(&self.name, self.db.path(), e)
    }

    /// `key`'s fjall key: the store's prefix, then the key (or a long key's head and hash:
    /// runtime/src/state/long_keys.rs).
    fn full_key(&self, key: &[u8]) -> fjall::UserKey {
        KV.key(&self.prefix, key)
    }

    /// A batch of writes, and the position if given (under its partition's key when
    /// `per_partition`): to the write-back table, written back when the tables hold more than
    /// their share; or straight to fjall.
    fn write(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: Option<&StorePosition>,
        per_partition: bool,
    ) -> Result<(), StoreError> {
        if !self.write_back || per_partition {
            return self.write_through(batch, position, per_partition);
        }
        self.write_pending(&mut self.pending(), batch, position)
    }

    /// [`write`](Self::write) to the write-back table `pending`.
    fn write_pending(
        &self,
        pending: &mut Pending,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        for (key, value) in batch {
            if !pending.map.fits(key, value) {
                // 4 GiB of one store's writes: written back under the position before this
                // batch (a position behind its data only replays records).
                self.write_back(pending)?;
            }
            pending.map.set(key, value);
        }
        if let Some(p) = position {
            match &mut pending.position {
                Some(held) if held.changelog == p.changelog => held.offset = p.offset,
                held => *held = Some(p.clone()),
            }
        }
        if self.recharge(pending) {
            self.write_back(pending)?;
        }
        Ok(())
    }

    /// One fjall batch: the writes, and the position if given (under its partition's key when
    /// `per_partition`).
    fn write_through(
        &self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: Option<&StorePosition>,
        per_partition: bool,
    ) -> Result<(), StoreError> {
        // In key order (stably: a key written twice still ends as its last write): each
        // skip-list insert into the memtable then lands next to the one before.
        let mut sorted: Vec<(&[u8], Option<&[u8]>)> = batch.collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut writes = self.db.db().batch();
        for (key, value) in sorted {
            let fjall_key = self.full_key(key);
            match value {
                Some(value) if KV.is_long(key) => {
                    let value = KV.value(key, value).map_err(|e| self.disk_err(e))?;
                    writes.insert(self.kv(), fjall_key, value);
                }
                Some(value) => writes.insert(self.kv(), fjall_key, value),
                None => writes.remove(self.kv(), fjall_key),
            }
        }
        match position {
            Some(p) if per_partition => {
                let key = self.partition_position_key(p.changelog.partition);
                writes.insert(self.db.registry(), key, p.encode());
            }
            Some(p) => writes.insert(self.db.registry(), self.position_key, p.encode()),
            None => {}
        }
        writes.commit().map_err(|e| self.err(e))
    }

    /// Visits the store's entries with keys in `[from, to)` (without the prefix; `to` `None`
    /// for no bound), in key order.
    fn visit(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        KV.visit(self.kv(), &self.prefix, from, to, &mut |k, v| {
            f(k, v);
            true
        })
        .map(|_| ())
        .map_err(|e| self.disk_err(e))
    }
}

impl BytesStore for PersistentKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        if self.write_back {
            let pending = self.pending();
            if let Some(value) = pending.map.get(key) {
                if let Some(value) = value {
                    out.extend_from_slice(value);
                }
                return Ok(value.is_some());
            }
            if pending.nothing_on_disk {
                return Ok(false);
            }
        }
        KV.get(self.kv(), &self.prefix, key, out)
            .map_err(|e| self.disk_err(e))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.write(&mut std::iter::once((key, Some(value))), None, false)
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.write(&mut std::iter::once((key, None)), None, false)
    }
    fn write_batch(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        self.write(batch, None, false)
    }
    fn write_batch_at(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: &StorePosition,
    ) -> Result<(), StoreError> {
        self.write(batch, Some(position), false)
    }
    fn write_batch_at_partition(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: &StorePosition,
    ) -> Result<(), StoreError> {
        self.write(batch, Some(position), true)
    }
    fn partition_positions(&self) -> Result<Vec<StorePosition>, StoreError> {
        let mut positions = Vec::new();
        for guard in self.db.registry().prefix(self.position_key) {
            let (key, value) = guard.into_inner().map_err(|e| self.err(e))?;
            if key.len() == 12 {
                positions.push(StorePosition::decode(&self.name, &value)?);
            }
        }
        Ok(positions)
    }
    fn record_position(&mut self, position: &StorePosition) -> Result<(), StoreError> {
        self.persist()?;
        self.db
            .registry()
            .insert(self.position_key, position.encode())
            .map_err(|e| self.err(e))
    }
    fn position(&self) -> Result<Option<StorePosition>, StoreError> {
        match self
            .db
            .registry()
            .get(self.position_key)
            .map_err(|e| self.err(e))?
        {
            Some(bytes) => StorePosition::decode(&self.name, &bytes).map(Some),
            None => Ok(None),
        }
    }
    fn restore_sorted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        // Sorted, unique keys. A large batch is ingested as a table of its own, bypassing the
        // memtable (whose skip-list inserts dominate a restore through ordinary writes); later
        // data wins over what the store held, as a changelog's later records do. A small one
        // goes through the memtable: an ingestion flushes the memtable every store shares.
        self.persist()?;
        self.pending_mut().nothing_on_disk = false;
        let entries: Vec<(&[u8], Option<&[u8]>)> = batch.collect();
        if entries.len() < INGESTION_MIN_ENTRIES {
            return self.write_through(&mut entries.into_iter(), None, false);
        }
        self.ingest(entries)
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        self.write_back_shared()?;
        self.visit(&[], None, f)
    }
    fn range(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        self.write_back_shared()?;
        self.visit(from, Some(to), f)
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        self.db.sync().map_err(|e| self.err(e))
    }
    fn persist(&mut self) -> Result<(), StoreError> {
        self.write_back_shared()
    }
    fn has_unpersisted(&self) -> bool {
        self.write_back && !self.pending().is_empty()
    }
    fn wipe(&mut self) -> Result<(), StoreError> {
        self.discard_pending();
        // The position first, durably: a crash before the data is gone leaves data without a
        // position, which the next open wipes again.
        // Every position: the store's, and a global store's per partition.
        delete_prefix(self.db.db(), self.db.registry(), &self.position_key)
            .and_then(|()| self.db.db().persist(fjall::PersistMode::SyncAll))
            .and_then(|()| delete_prefix(self.db.db(), self.kv(), &self.prefix))
            .map_err(|e| self.err(e))?;
        self.pending_mut().nothing_on_disk = true;
        Ok(())
    }
    fn is_persistent(&self) -> bool {
        true
    }
    fn is_empty(&self) -> Result<bool, StoreError> {
        self.write_back_shared()?;
        match self.kv().prefix(self.prefix).next() {
            None => Ok(true),
            Some(guard) => guard.into_inner().map(|_| false).map_err(|e| self.err(e)),
        }
    }
    fn approximate_len(&self) -> usize {
        // The shared keyspace keeps no count per store: counted (tests, and a store opened
        // without a position).
        let mut n = 0;
        let _ = self.write_back_shared();
        let _ = self.visit(&[], None, &mut |_, _| n += 1);
        n
    }
}

/// A restore batch of at least this many entries is ingested as a table of its own.
const INGESTION_MIN_ENTRIES: usize = 16_384;

#[cfg(test)]
mod tests;
