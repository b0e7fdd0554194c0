//! One fjall database for every persistent store of an application instance.
//!
//! A database per store per task cost a worker thread, a journal, a block cache and open files
//! each: 1,000 tasks ran with 1,006 OS threads. Here the process lock of the state directory
//! (`<state_dir>/<application_id>/.lock`) makes this process the only user of
//! `<state_dir>/<application_id>/stores/`, one fjall database with:
//!
//! - a keyspace `kv` holding every key-value store's entries, each key prefixed with its store's
//!   id (4 bytes, big-endian), so one memtable and one tree serve all tasks (a key too long for
//!   fjall as runtime/src/state/long_keys.rs lays it out), and the key `FF FF FF FF`, which says
//!   the keyspace is the one the registry's positions describe (the id `u32::MAX` is never
//!   given);
//! - keyspaces `w<id>.meta` and `w<id>.seg-<segment>` for each window or session store;
//! - a keyspace `registry`: `id/<task>/<format>/<store>` → the store's id, `pos/<id>` → a
//!   key-value store's changelog position (a `StorePosition`, written in the same fjall batch as
//!   the data it covers), `next` → the next id.
//!
//! A database fjall cannot open is an error naming the file concerned and the way out (delete
//! the directory: every store restores from its changelog). A `kv` keyspace found missing (its
//! directory deleted) while the registry holds positions has those positions dropped, with a
//! warning naming the directory, so each key-value store restores from its changelog's start; a
//! registry found missing while stores hold data has every store's data dropped likewise.
//!
//! Its resources are bounded whatever the number of tasks: [`STORAGE_THREADS`] worker threads,
//! [`MAX_OPEN_FILES`] cached table files, one block cache and one journal bound (which bounds the
//! memtables of every keyspace together) carved from `statestore_memory_max_bytes`
//! ([`MemoryBudget`]). A task's state is found by its task id in the registry and deleted with
//! its task directory ([`StoreDatabase::delete_task`], called by the state directory's cleanup
//! while the task is unowned); a task whose directory is gone at start has its stores deleted.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use riffle_state_dir::TaskId;

use super::StoreError;
pub(crate) use opening::way_out;
use opening::{check_keyspace_names, check_keyspaces, clear_unfinished_creation, open_error};

/// Worker threads (flushes and compactions) for every store of the process.
pub(crate) const STORAGE_THREADS: usize = 2;
/// Table files kept open at once, across every store.
pub(crate) const MAX_OPEN_FILES: usize = 256;
/// fjall's floor for its journal bound (and so for the write buffers).
const MIN_WRITE_BUFFERS: u64 = 64 << 20;
/// The smallest `statestore_memory_max_bytes`: the write buffers' floor and room besides.
pub(crate) const MIN_MEMORY_BUDGET: u64 = 96 << 20;

/// The memory of every store of the process: block cache, write buffers (memtables) and
/// riffle's record caches, from one `statestore_memory_max_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemoryBudget {
    /// riffle's write caches, all stream threads together.
    pub(crate) record_caches: u64,
    /// fjall's memtables, all keyspaces together (fjall's journal bound).
    pub(crate) write_buffers: u64,
    /// fjall's block cache.
    pub(crate) block_cache: u64,
}

impl MemoryBudget {
    /// Splits `total` (at least [`MIN_MEMORY_BUDGET`]): the record caches get
    /// `record_caches` (`statestore_cache_max_bytes`) up to an eighth of it, the write buffers
    /// half of it (at least fjall's 64 MiB floor), the block cache the rest.
    pub(crate) fn split(total: u64, record_caches: u64) -> MemoryBudget {
        let total = total.max(MIN_MEMORY_BUDGET);
        let record_caches = record_caches.min(total / 8);
        let write_buffers = (total / 2).max(MIN_WRITE_BUFFERS);
        MemoryBudget {
            record_caches,
            write_buffers,
            block_cache: total - record_caches - write_buffers,
        }
    }
}

/// The database of every persistent store of one application instance. See the module
/// documentation.
pub(crate) struct StoreDatabase {
    path: PathBuf,
    db: Database,
    kv: Keyspace,
    registry: Keyspace,
    state: Mutex<Registry>,
    /// The largest memtable of a keyspace: a quarter of the write buffers (the stores'
    /// write-back tables have the other half). A memtable being flushed, and the one flushed
    /// before it, stay in memory while the next fills (lsm-tree keeps the sealed memtable in its
    /// version history until the next rotation; measured in docs/BENCHMARKS.md, "Where the
    /// growth goes"), so two memtables are resident at once.
    memtable_bytes: u64,
    /// The sequence number at the last durable sync, under its own lock so a flush that finds
    /// nothing new still waits for a sync in progress.
    synced: Mutex<u64>,
    /// Bytes every key-value store holds in its write-back table (writes not yet in fjall,
    /// `persistent::Pending`), and their bound: half the write buffers (fjall's memtables have
    /// the other half).
    pending_bytes: AtomicU64,
    pending_limit: AtomicU64,
}

/// The registry in memory.
#[derive(Default)]
struct Registry {
    next_id: u32,
    /// `<task>/<format>/<store>` → id.
    ids: HashMap<String, u32>,
    /// The ids of each task's stores.
    by_task: HashMap<TaskId, Vec<u32>>,
    /// A segmented store's keyspaces: id → keyspace name → handle.
    keyspaces: HashMap<u32, BTreeMap<String, Keyspace>>,
}

impl std::fmt::Debug for StoreDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreDatabase")
            .field("path", &self.path)
            .finish()
    }
}

const KV_KEYSPACE: &str = "kv";
const REGISTRY_KEYSPACE: &str = "registry";
const ID_PREFIX: &str = "id/";
const POSITION_PREFIX: &[u8] = b"pos/";
const NEXT_KEY: &[u8] = b"next";
/// The owner of global stores in the registry, in place of a task (`id/global/<format>/<store>`).
const GLOBAL_OWNER: &str = "global";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The name prefix of the keyspaces of the segmented store `id`.
fn keyspace_prefix(id: u32) -> String {
    format!("w{id}.")
}

/// The registry key of a key-value store's position.
fn position_key(id: u32) -> [u8; 8] {
    let mut key = [0; 8];
    key[..4].copy_from_slice(POSITION_PREFIX);
    key[4..].copy_from_slice(&id.to_be_bytes());
    key
}

impl StoreDatabase {
    /// Opens (creating if needed) the database in `dir` with `budget`'s block cache and write
    /// buffers.
    pub(crate) fn open(dir: &Path, budget: MemoryBudget) -> Result<Arc<Self>, StoreError> {
        let err = |e: &dyn std::fmt::Display| open_error(dir, e, None);
        let fjall_err = |e: fjall::Error| open_error(dir, &e, Some(&e));
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        clear_unfinished_creation(dir).map_err(|e| err(&e))?;
        check_keyspace_names(dir).map_err(|e| err(&e))?;
        // Half the write buffers for the stores' write-back tables (less if fjall's journal
        // would fall below its floor), the rest for fjall's memtables (its journal bound), of
        // which two are resident at once (see `memtable_bytes`).
        let write_buffers = budget.write_buffers.max(MIN_WRITE_BUFFERS);
        let pending_limit = (write_buffers / 2).min(write_buffers - MIN_WRITE_BUFFERS);
        let journal = write_buffers - pending_limit;
        let memtable = (journal / 2).max(1 << 20);
        let db = Database::builder(dir)
            .worker_threads(STORAGE_THREADS)
            .cache_size(budget.block_cache)
            .max_journaling_size(journal)
            .max_cached_files(Some(MAX_OPEN_FILES))
            .manual_journal_persist(true)
            .open()
            .map_err(fjall_err)?;
        let kv = db
            .keyspace(KV_KEYSPACE, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable)
            })
            .map_err(fjall_err)?;
        let registry = db
            .keyspace(REGISTRY_KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(fjall_err)?;
        check_keyspaces(dir, &db, &kv, &registry).map_err(fjall_err)?;
        let mut state = Registry::default();
        if let Some(next) = registry.get(NEXT_KEY).map_err(|e| err(&e))? {
            let bytes = <[u8; 4]>::try_from(&*next).map_err(|_| {
                err(&format!(
                    "its next store id has {} bytes, not 4",
                    next.len()
                ))
            })?;
            state.next_id = u32::from_be_bytes(bytes);
        }
        for guard in registry.prefix(ID_PREFIX) {
            let (key, value) = guard.into_inner().map_err(|e| err(&e))?;
            let name = String::from_utf8_lossy(&key[ID_PREFIX.len()..]).into_owned();
            let id = <[u8; 4]>::try_from(&*value)
                .map(u32::from_be_bytes)
                .map_err(|_| {
                    err(&format!(
                        "the id of store {name:?} has {} bytes",
                        value.len()
                    ))
                })?;
            let owner = name.split('/').next().unwrap_or_default();
            // A global store belongs to no task: it is never deleted with one.
            if owner != GLOBAL_OWNER {
                let task = owner
                    .parse::<TaskId>()
                    .map_err(|_| err(&format!("store {name:?} names no task")))?;
                state.by_task.entry(task).or_default().push(id);
            }
            state.ids.insert(name, id);
        }
        for name in db.list_keyspace_names() {
            let Some(id) = name
                .strip_prefix('w')
                .and_then(|rest| rest.split_once('.'))
                .and_then(|(id, _)| id.parse::<u32>().ok())
            else {
                continue;
            };
            let handle = db
                .keyspace(&name, KeyspaceCreateOptions::default)
                .map_err(|e| err(&e))?;
            state
                .keyspaces
                .entry(id)
                .or_default()
                .insert(name.to_string(), handle);
        }
        Ok(Arc::new(StoreDatabase {
            path: dir.to_owned(),
            db,
            kv,
            registry,
            state: Mutex::new(state),
            memtable_bytes: memtable,
            synced: Mutex::new(0),
            pending_bytes: AtomicU64::new(0),
            pending_limit: AtomicU64::new(pending_limit),
        }))
    }

    /// The database's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The fjall database.
    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    /// The keyspace of every key-value store's entries.
    pub(crate) fn kv(&self) -> &Keyspace {
        &self.kv
    }

    /// Charges `added` bytes to the stores' write-back tables and takes `removed` off; whether
    /// they now hold more than their share of the write buffers (the store writing then writes
    /// its table to fjall).
    pub(crate) fn charge_pending(&self, added: u64, removed: u64) -> bool {
        let before = if added >= removed {
            self.pending_bytes
                .fetch_add(added - removed, Ordering::Relaxed)
        } else {
            self.pending_bytes
                .fetch_sub(removed - added, Ordering::Relaxed)
        };
        before.wrapping_add(added).wrapping_sub(removed)
            > self.pending_limit.load(Ordering::Relaxed)
    }

    /// Bytes the stores' write-back tables hold (all stores together).
    #[cfg(test)]
    pub(crate) fn pending_bytes(&self) -> u64 {
        self.pending_bytes.load(Ordering::Relaxed)
    }

    /// Sets the bound of the write-back tables (tests: 0 writes every batch back at once).
    #[cfg(test)]
    pub(crate) fn set_pending_limit(&self, bytes: u64) {
        self.pending_limit.store(bytes, Ordering::Relaxed);
    }

    /// The registry keyspace (positions are written in data batches).
    pub(crate) fn registry(&self) -> &Keyspace {
        &self.registry
    }

    /// The registry key of key-value store `id`'s position.
    pub(crate) fn position_key(id: u32) -> [u8; 8] {
        position_key(id)
    }

    fn err(&self, store: &str, e: impl std::fmt::Display) -> StoreError {
        StoreError::Backend {
            store: store.to_owned(),
            path: self.path.display().to_string(),
            reason: e.to_string(),
        }
    }

    /// The id of `task`'s store `name` in `format` (e.g. `kv`, `kv-ts`, `window`), assigned
    /// and recorded on first use.
    pub(crate) fn store_id(
        &self,
        task: TaskId,
        format: &str,
        name: &str,
    ) -> Result<u32, StoreError> {
        self.register(Some(task), format, name)
    }

    /// The id of the global store `name` in `format` (a global table's, which no task owns),
    /// assigned and recorded on first use.
    pub(crate) fn global_store_id(&self, format: &str, name: &str) -> Result<u32, StoreError> {
        self.register(None, format, name)
    }

    fn register(&self, task: Option<TaskId>, format: &str, name: &str) -> Result<u32, StoreError> {
        let owner = task.map_or_else(|| GLOBAL_OWNER.to_owned(), |t| t.to_string());
        let full = format!("{owner}/{format}/{name}");
        let mut state = lock(&self.state);
        if let Some(&id) = state.ids.get(&full) {
            return Ok(id);
        }
        let id = state.next_id;
        // The last id's prefix is the kv keyspace's marker.
        let next = id
            .checked_add(1)
            .filter(|&next| next < u32::MAX)
            .ok_or_else(|| self.err(name, "store ids exhausted"))?;
        let mut batch = self.db.batch();
        batch.insert(
            &self.registry,
            format!("{ID_PREFIX}{full}"),
            &id.to_be_bytes()[..],
        );
        batch.insert(&self.registry, NEXT_KEY, &next.to_be_bytes()[..]);
        // Not synced here: the journal is replayed in order, so the store's data, written after
        // this, is never recovered without it; the commit's sync makes both durable.
        batch.commit().map_err(|e| self.err(name, e))?;
        state.next_id = next;
        state.ids.insert(full, id);
        if let Some(task) = task {
            state.by_task.entry(task).or_default().push(id);
        }
        Ok(id)
    }

    /// The keyspaces of segmented store `id`, by their names less the store's prefix.
    pub(crate) fn keyspaces_of(&self, id: u32) -> BTreeMap<String, Keyspace> {
        let prefix = keyspace_prefix(id);
        lock(&self.state)
            .keyspaces
            .get(&id)
            .map(|spaces| {
                spaces
                    .iter()
                    .map(|(name, k)| (name[prefix.len()..].to_owned(), k.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Segmented store `id`'s keyspace `name`, created if it is new.
    pub(crate) fn keyspace_of(&self, id: u32, name: &str) -> Result<Keyspace, fjall::Error> {
        let full = format!("{}{name}", keyspace_prefix(id));
        let mut state = lock(&self.state);
        let spaces = state.keyspaces.entry(id).or_default();
        if let Some(k) = spaces.get(&full) {
            return Ok(k.clone());
        }
        let memtable = self.memtable_bytes;
        let handle = self.db.keyspace(&full, || {
            KeyspaceCreateOptions::default().max_memtable_size(memtable)
        })?;
        spaces.insert(full, handle.clone());
        Ok(handle)
    }

    /// Deletes segmented store `id`'s keyspace `handle`.
    pub(crate) fn delete_keyspace_of(&self, id: u32, handle: Keyspace) -> Result<(), fjall::Error> {
        if let Some(spaces) = lock(&self.state).keyspaces.get_mut(&id) {
            spaces.retain(|_, k| k.id() != handle.id());
        }
        self.db.delete_keyspace(handle)
    }

    /// Makes every write so far durable: one sync of the shared journal, skipped when nothing
    /// was written since the last (every task's commit flushes its stores).
    pub(crate) fn sync(&self) -> Result<(), fjall::Error> {
        let mut synced = lock(&self.synced);
        let seqno = self.db.seqno();
        if *synced != seqno {
            self.db.persist(PersistMode::SyncAll)?;
            *synced = seqno;
        }
        Ok(())
    }

    /// The tasks with stores here.
    pub(crate) fn tasks(&self) -> Vec<TaskId> {
        let mut tasks: Vec<_> = lock(&self.state).by_task.keys().copied().collect();
        tasks.sort_unstable();
        tasks
    }

    /// Deletes every store of `task`: its key-value entries and positions, its segmented
    /// stores' keyspaces, its registry entries; durably. The task must not be open.
    pub(crate) fn delete_task(&self, task: TaskId) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        let Some(ids) = state.by_task.remove(&task) else {
            return Ok(());
        };
        let err = |e: fjall::Error| self.err(&task.to_string(), e);
        for &id in &ids {
            // The position first, durably: a crash before the data is gone leaves data without
            // a position, which the next open wipes.
            self.registry.remove(position_key(id)).map_err(err)?;
            self.db.persist(PersistMode::SyncAll).map_err(err)?;
            delete_prefix(&self.db, &self.kv, &id.to_be_bytes()).map_err(err)?;
            if let Some(spaces) = state.keyspaces.remove(&id) {
                for handle in spaces.into_values() {
                    self.db.delete_keyspace(handle).map_err(err)?;
                }
            }
        }
        let prefix = format!("{ID_PREFIX}{task}/");
        let names: Vec<String> = state
            .ids
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix[ID_PREFIX.len()..]))
            .map(|(name, _)| name.clone())
            .collect();
        let mut batch = self.db.batch();
        for name in names {
            state.ids.remove(&name);
            batch.remove(&self.registry, format!("{ID_PREFIX}{name}"));
        }
        batch.commit().map_err(err)?;
        self.db.persist(PersistMode::SyncAll).map_err(err)
    }
}

/// Deletes every key of `keyspace` starting with `prefix`, in batches of bounded size.
pub(crate) fn delete_prefix(
    db: &Database,
    keyspace: &Keyspace,
    prefix: &[u8],
) -> Result<(), fjall::Error> {
    loop {
        let mut keys = Vec::new();
        for guard in keyspace.prefix(prefix).take(10_000) {
            keys.push(guard.key()?);
        }
        if keys.is_empty() {
            return Ok(());
        }
        let mut batch = db.batch();
        for key in keys {
            batch.remove(keyspace, key);
        }
        batch.commit()?;
    }
}

mod opening;
#[cfg(test)]
mod tests;
