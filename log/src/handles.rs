//! Bounded open files: [`BoundedHandles`] wraps a [`Storage`] so that the files it hands out
//! are opened lazily and closed again when more than `capacity` of them would be open at once
//! (least recently used first). A log of 20,000 partitions has 40,000 segment and index files;
//! only the ones in use hold an operating-system handle.
//!
//! It owns the handle cache and nothing else: it never changes what a file holds, only whether
//! a descriptor for it is open. A closed file is reopened on its next use; its length is kept
//! here meanwhile (the log is the only writer of its files while it holds them).
//!
//! Durability across a close: `fsync` on a newly opened descriptor makes every write to the
//! file durable, whichever descriptor wrote it (POSIX page cache semantics on Linux and the
//! BSDs).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::storage::{Storage, StorageFile};

/// A storage whose files hold at most `capacity` open handles between them.
pub(crate) struct BoundedHandles {
    inner: Arc<dyn Storage>,
    cache: Arc<HandleCache>,
}

impl fmt::Debug for BoundedHandles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundedHandles")
            .field("inner", &self.inner)
            .field("capacity", &self.cache.capacity)
            .finish_non_exhaustive()
    }
}

type Handle = Arc<Mutex<Box<dyn StorageFile>>>;

/// The open handles, by file id, and their last use.
struct HandleCache {
    capacity: usize,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    next_id: u64,
    tick: u64,
    /// Open handles: file id → (last use, handle).
    open: HashMap<u64, (u64, Handle)>,
    /// Last use → file id, oldest first: the eviction order.
    by_use: BTreeMap<u64, u64>,
}

impl HandleCache {
    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // Every operation leaves the maps consistent before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open handle of file `id`, marked as just used.
    fn get(&self, id: u64) -> Option<Handle> {
        let mut state = self.state();
        let latest = state.tick;
        let (used, handle) = state.open.get_mut(&id)?;
        let handle = Arc::clone(handle);
        if *used == latest {
            // Already the most recently used (a partition appending in a loop): nothing moves.
            return Some(handle);
        }
        let tick = latest + 1;
        let old = std::mem::replace(used, tick);
        state.tick = tick;
        state.by_use.remove(&old);
        state.by_use.insert(tick, id);
        Some(handle)
    }

    /// Adds the handle of file `id`, closing the least recently used ones past capacity.
    fn insert(&self, id: u64, handle: Handle) {
        let mut evicted = Vec::new();
        {
            let mut state = self.state();
            state.tick += 1;
            let tick = state.tick;
            if let Some((old, _)) = state.open.insert(id, (tick, handle)) {
                state.by_use.remove(&old);
            }
            state.by_use.insert(tick, id);
            while state.open.len() > self.capacity {
                let Some((_, victim)) = state.by_use.pop_first() else {
                    break;
                };
                if let Some((_, h)) = state.open.remove(&victim) {
                    evicted.push(h);
                }
            }
        }
        // Closing happens here, outside the cache's lock (a close can take a while).
        drop(evicted);
    }

    fn remove(&self, id: u64) {
        let removed = {
            let mut state = self.state();
            let removed = state.open.remove(&id);
            if let Some((used, _)) = &removed {
                state.by_use.remove(used);
            }
            removed
        };
        drop(removed);
    }
}

impl BoundedHandles {
    /// `file`, just opened, as a lazy file: its handle is kept for the first use, which
    /// usually follows (recovery reads the file), and closed when the cache needs the room.
    fn lazy(
        &self,
        path: &Path,
        file: Box<dyn StorageFile>,
        reopen: Reopen,
    ) -> Box<dyn StorageFile> {
        let len = file.len();
        let identity = file.identity();
        let id = {
            let mut state = self.cache.state();
            state.next_id += 1;
            state.next_id
        };
        self.cache.insert(id, Arc::new(Mutex::new(file)));
        Box::new(LazyFile {
            path: path.to_path_buf(),
            id,
            len,
            identity,
            reopen,
            pinned: None,
            inner: Arc::clone(&self.inner),
            cache: Arc::clone(&self.cache),
        })
    }

    /// `inner`'s files, with at most `capacity` (at least 1) open at once.
    pub(crate) fn new(inner: Arc<dyn Storage>, capacity: usize) -> Self {
        Self {
            inner,
            cache: Arc::new(HandleCache {
                capacity: capacity.max(1),
                state: Mutex::default(),
            }),
        }
    }

    /// How many handles are open now (tests).
    #[cfg(test)]
    pub(crate) fn open_handles(&self) -> usize {
        self.cache.state().open.len()
    }
}

impl Storage for BoundedHandles {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = self.inner.open(path)?;
        // Created now: a later reopen must find it. One that is gone was removed (a segment
        // below a new start offset, a deleted topic): creating it again would leave an empty
        // stray file where the log deleted one.
        Ok(self.lazy(path, file, Reopen::Existing { writable: true }))
    }

    fn open_existing(
        &self,
        path: &Path,
        writable: bool,
    ) -> io::Result<Option<Box<dyn StorageFile>>> {
        let file = self.inner.open_existing(path, writable)?;
        Ok(file.map(|f| self.lazy(path, f, Reopen::Existing { writable })))
    }

    fn open_shared_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        // One file per log (the change file), kept open: not worth a cache slot.
        self.inner.open_shared_append(path)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn replace_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.replace_file(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn shared_between_processes(&self) -> bool {
        self.inner.shared_between_processes()
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.inner.write_atomic(path, data)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }

    fn crash_image(&self) -> Option<Arc<dyn Storage>> {
        self.inner.crash_image()
    }

    #[cfg(test)]
    fn fail_after(&self, ops: Option<u64>) {
        self.inner.fail_after(ops);
    }
}

/// How a closed file is opened again: never created (a file that is gone was removed), and
/// writable if it was opened so.
#[derive(Debug, Clone, Copy)]
enum Reopen {
    Existing { writable: bool },
}

/// A file whose handle lives in the cache, reopened on use when it was closed.
struct LazyFile {
    path: PathBuf,
    id: u64,
    /// The length as of the last operation (kept while the handle is closed).
    len: u64,
    /// The file's identity when first opened: a reopen that finds another file under the
    /// same name (compaction renamed a cleaned segment over it) finds this one gone.
    identity: u64,
    reopen: Reopen,
    /// The handle, kept here while it holds an OS file lock: closing it would release the
    /// lock, so the cache may drop its reference but the descriptor stays open.
    pinned: Option<Handle>,
    inner: Arc<dyn Storage>,
    cache: Arc<HandleCache>,
}

impl fmt::Debug for LazyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl LazyFile {
    /// Runs `op` on the open handle, opening the file first if its handle was closed.
    fn handle(&mut self) -> io::Result<Handle> {
        if let Some(pinned) = &self.pinned {
            return Ok(Arc::clone(pinned));
        }
        if let Some(h) = self.cache.get(self.id) {
            return Ok(h);
        }
        let file = match self.reopen {
            Reopen::Existing { writable } => self
                .inner
                .open_existing(&self.path, writable)?
                .filter(|f| f.identity() == self.identity)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?,
        };
        let h: Handle = Arc::new(Mutex::new(file));
        self.cache.insert(self.id, Arc::clone(&h));
        Ok(h)
    }

    fn with<T>(&mut self, op: impl FnOnce(&mut dyn StorageFile) -> io::Result<T>) -> io::Result<T> {
        let handle = self.handle()?;
        // Only this file's owner uses the handle (under its partition's or journal's lock).
        let mut file = handle.lock().unwrap_or_else(PoisonError::into_inner);
        let result = op(&mut **file);
        self.len = file.len();
        result
    }
}

impl StorageFile for LazyFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn identity(&self) -> u64 {
        self.identity
    }

    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with(|f| f.read_exact_at(pos, buf))
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.with(|f| f.append(data))
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.with(|f| f.truncate(len))
    }

    fn sync(&mut self) -> io::Result<()> {
        self.with(|f| f.sync())
    }

    fn refresh_len(&mut self) -> io::Result<u64> {
        self.with(|f| f.refresh_len())
    }

    fn write_at(&mut self, pos: u64, data: &[u8]) -> io::Result<()> {
        self.with(|f| f.write_at(pos, data))
    }

    fn lock(&mut self, exclusive: bool) -> io::Result<()> {
        let handle = self.handle()?;
        self.with(|f| f.lock(exclusive))?;
        self.pinned = Some(handle);
        Ok(())
    }

    fn try_lock(&mut self) -> io::Result<bool> {
        let handle = self.handle()?;
        let locked = self.with(|f| f.try_lock())?;
        if locked {
            self.pinned = Some(handle);
        }
        Ok(locked)
    }

    fn unlock(&mut self) -> io::Result<()> {
        let unlocked = self.with(|f| f.unlock());
        self.pinned = None;
        unlocked
    }
}

impl Drop for LazyFile {
    fn drop(&mut self) {
        self.cache.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    #[test]
    fn at_most_capacity_handles_are_open_and_closed_files_keep_their_content() {
        let storage = BoundedHandles::new(Arc::new(MemStorage::default()), 3);
        storage.create_dir_all(Path::new("/d")).expect("mkdir");
        let mut files: Vec<Box<dyn StorageFile>> = (0..10)
            .map(|i| {
                storage
                    .open(&PathBuf::from(format!("/d/{i}")))
                    .expect("open")
            })
            .collect();
        assert_eq!(storage.open_handles(), 3);
        for round in 0..3u8 {
            for (i, f) in files.iter_mut().enumerate() {
                f.append(&[i as u8, round]).expect("append");
                assert!(storage.open_handles() <= 3);
            }
        }
        for (i, f) in files.iter_mut().enumerate() {
            assert_eq!(f.len(), 6);
            let mut buf = [0u8; 6];
            f.read_exact_at(0, &mut buf).expect("read");
            let i = i as u8;
            assert_eq!(buf, [i, 0, i, 1, i, 2]);
        }
        drop(files);
        assert_eq!(storage.open_handles(), 0);
    }

    proptest::proptest! {
        /// Any sequence of appends, truncates and reads over more files than handles reads
        /// back exactly what a plain byte vector per file holds, with never more than
        /// `capacity` handles open (plus the ones pinned by a lock).
        #[test]
        fn bounded_files_behave_like_plain_ones(
            capacity in 1usize..4,
            ops in proptest::collection::vec((0usize..6, 0u8..4, proptest::prelude::any::<u8>()), 1..80),
        ) {
            let storage = BoundedHandles::new(Arc::new(MemStorage::default()), capacity);
            storage.create_dir_all(Path::new("/d")).expect("mkdir");
            let mut files: Vec<Box<dyn StorageFile>> = (0..6)
                .map(|i| storage.open(&PathBuf::from(format!("/d/{i}"))).expect("open"))
                .collect();
            let mut model: Vec<Vec<u8>> = vec![Vec::new(); 6];
            let mut locked = [false; 6];
            for (file, op, byte) in ops {
                let (f, m) = (&mut files[file], &mut model[file]);
                match op {
                    0 => {
                        f.append(&[byte, byte]).expect("append");
                        m.extend_from_slice(&[byte, byte]);
                    }
                    1 => {
                        let len = usize::from(byte) % (m.len() + 1);
                        f.truncate(len as u64).expect("truncate");
                        m.truncate(len);
                    }
                    2 => {
                        let mut buf = vec![0u8; m.len()];
                        f.read_exact_at(0, &mut buf).expect("read");
                        proptest::prop_assert_eq!(&buf, &*m);
                    }
                    _ => {
                        if locked[file] {
                            f.unlock().expect("unlock");
                        } else {
                            f.lock(true).expect("lock");
                        }
                        locked[file] = !locked[file];
                    }
                }
                proptest::prop_assert_eq!(f.len(), m.len() as u64);
                proptest::prop_assert!(storage.open_handles() <= capacity);
            }
        }
    }
}
