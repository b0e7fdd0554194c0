//! The persistent store, on fjall (a pure-Rust LSM tree; RocksDB's C++ build takes about 26
//! minutes on a 2-core machine).
//!
//! One fjall database per store per task, in `<task dir>/fjall/<store>/`, so a task's state moves
//! and is deleted with its task directory, as RocksDB stores do in Kafka Streams.

use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{KeyValueStore, StoreError, StorePosition};

/// A store on disk that keeps its data across restarts.
pub(crate) struct PersistentKeyValueStore {
    name: String,
    path: PathBuf,
    db: Database,
    data: Keyspace,
    /// The changelog position of the data (one key), written in the data's batches.
    position: Keyspace,
}

/// The key of the recorded position in its keyspace.
const POSITION_KEY: &[u8] = b"changelog";

impl std::fmt::Debug for PersistentKeyValueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentKeyValueStore")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

/// The block cache of one store; stores are per task, so it stays small.
const CACHE_BYTES: u64 = 4 << 20;

/// A [`StoreError::Backend`] of the store `name` at `path`.
pub(super) fn backend_error(name: &str, path: &Path, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        store: name.to_owned(),
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Opens (creating if needed) the fjall database of the store `name` in `path`, with the options
/// every persistent store uses.
pub(super) fn open_database(name: &str, path: &Path) -> Result<Database, StoreError> {
    std::fs::create_dir_all(path).map_err(|e| backend_error(name, path, e))?;
    Database::builder(path)
        .worker_threads(1)
        .cache_size(CACHE_BYTES)
        .manual_journal_persist(true)
        .open()
        .map_err(|e| backend_error(name, path, e))
}

impl PersistentKeyValueStore {
    /// Opens (creating if needed) the store `name` in `dir`.
    pub(crate) fn open(name: impl Into<String>, dir: &Path) -> Result<Self, StoreError> {
        let name = name.into();
        let path = dir.to_owned();
        let db = open_database(&name, &path)?;
        let data = db
            .keyspace("data", KeyspaceCreateOptions::default)
            .map_err(|e| backend_error(&name, &path, e))?;
        let position = db
            .keyspace("position", KeyspaceCreateOptions::default)
            .map_err(|e| backend_error(&name, &path, e))?;
        Ok(PersistentKeyValueStore {
            name,
            path,
            db,
            data,
            position,
        })
    }

    fn err(&self, e: fjall::Error) -> StoreError {
        backend_error(&self.name, &self.path, e)
    }

    /// One fjall batch: the writes, and the position if given.
    fn write(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: Option<&StorePosition>,
    ) -> Result<(), StoreError> {
        // In key order (stably: a key written twice still ends as its last write): each
        // skip-list insert into the memtable then lands next to the one before.
        let mut sorted: Vec<(&[u8], Option<&[u8]>)> = batch.collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut writes = self.db.batch();
        for (key, value) in sorted {
            match value {
                Some(value) => writes.insert(&self.data, key, value),
                None => writes.remove(&self.data, key),
            }
        }
        if let Some(position) = position {
            writes.insert(&self.position, POSITION_KEY, position.encode());
        }
        writes.commit().map_err(|e| self.err(e))
    }
}

impl KeyValueStore for PersistentKeyValueStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        match self.data.get(key).map_err(|e| self.err(e))? {
            Some(value) => {
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.data.insert(key, value).map_err(|e| self.err(e))
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.data.remove(key).map_err(|e| self.err(e))
    }
    fn write_batch(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        self.write(batch, None)
    }
    fn write_batch_at(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        position: &StorePosition,
    ) -> Result<(), StoreError> {
        self.write(batch, Some(position))
    }
    fn record_position(&mut self, position: &StorePosition) -> Result<(), StoreError> {
        self.position
            .insert(POSITION_KEY, position.encode())
            .map_err(|e| self.err(e))
    }
    fn position(&self) -> Result<Option<StorePosition>, StoreError> {
        match self.position.get(POSITION_KEY).map_err(|e| self.err(e))? {
            Some(bytes) => StorePosition::decode(&self.name, &bytes).map(Some),
            None => Ok(None),
        }
    }
    fn restore_sorted(
        &mut self,
        batch: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        // Sorted, unique keys: ingest them as a table of their own, bypassing the memtable
        // (whose skip-list inserts dominate a restore through ordinary writes). Later data wins
        // over what the store held, as a changelog's later records do.
        let mut ingestion = self.data.start_ingestion().map_err(|e| self.err(e))?;
        for (key, value) in batch {
            let written = match value {
                Some(value) => ingestion.write(key, value),
                None => ingestion.write_tombstone(key),
            };
            written.map_err(|e| self.err(e))?;
        }
        ingestion.finish().map_err(|e| self.err(e))
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        for guard in self.data.iter() {
            let (k, v) = guard.into_inner().map_err(|e| self.err(e))?;
            f(&k, &v);
        }
        Ok(())
    }
    fn range(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        for guard in self.data.range(from..to) {
            let (k, v) = guard.into_inner().map_err(|e| self.err(e))?;
            f(&k, &v);
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.err(e))
    }
    fn wipe(&mut self) -> Result<(), StoreError> {
        // One batch: the position goes with the data.
        let mut writes = self.db.batch();
        for guard in self.data.iter() {
            let key = guard.key().map_err(|e| self.err(e))?;
            writes.remove(&self.data, key);
        }
        writes.remove(&self.position, POSITION_KEY);
        writes.commit().map_err(|e| self.err(e))
    }
    fn is_persistent(&self) -> bool {
        true
    }
    fn approximate_len(&self) -> usize {
        self.data.approximate_len()
    }
}
