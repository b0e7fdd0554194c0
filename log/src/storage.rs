//! Where the bytes live. The log only talks to [`Storage`] and [`StorageFile`], so the same code
//! runs on files ([`FileStorage`]) and in memory ([`MemStorage`], for tests), and faults can be
//! injected behind the trait later (as redb does with its backends).
//!
//! The contract every backend keeps: `append` extends a file, `sync` makes everything appended
//! and truncated so far durable, `write_atomic` replaces a file so that a crash leaves either the
//! old or the new content, and `sync_dir` makes created/renamed entries of a directory durable.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
#[cfg(not(unix))]
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// A directory tree of files.
pub(crate) trait Storage: Send + Sync + Debug {
    /// Creates `dir` and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of `dir` (files and directories); empty if it does not exist.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` for reading and appending, creating it if missing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// The whole content of `path`, `None` if it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Replaces `path` durably: temp file, fsync, rename, directory fsync.
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Makes `dir`'s entries durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Opens an existing `path` without creating it (read-only unless `writable`); `None` if it
    /// does not exist. Read-only logs open every file this way.
    fn open_existing(
        &self,
        path: &Path,
        writable: bool,
    ) -> io::Result<Option<Box<dyn StorageFile>>>;
    /// Opens `path` (creating it) so that every `append` lands at the file's current end,
    /// whoever else appends to it (`O_APPEND`): the cross-process change file.
    fn open_shared_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Renames `from` (a file or a directory) to `to`; fails if `to` is a non-empty directory.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Renames the file `from` over the file `to`, atomically replacing it (POSIX `rename`):
    /// handles open on the old `to` keep reading what it held. Like a creation, it survives a
    /// crash only once the directory is synced; until then a crash leaves both old files.
    fn replace_file(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes `dir` and everything under it; Ok if it does not exist.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Removes the file `path`; Ok if it does not exist. Like a creation, the removal survives
    /// a crash only once its directory is synced ([`sync_dir`](Self::sync_dir)). Handles open
    /// on the file keep reading what it held.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Whether other processes can open the same files (the file system): then the log keeps
    /// its cross-process protocol (lock-file marks, the change file). A memory backend is one
    /// `Log` and its clones, for which in-process locks are enough.
    fn shared_between_processes(&self) -> bool {
        true
    }
    /// What a crash right now would leave behind, for backends that can tell (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    fn crash_image(&self) -> Option<Arc<dyn Storage>> {
        None
    }
    /// Makes every write, truncate, sync and atomic replace fail once `ops` more have succeeded
    /// (`None`: never), as a disk that dies would; for backends that can (tests).
    #[cfg(test)]
    fn fail_after(&self, _ops: Option<u64>) {}
}

/// One open file.
pub(crate) trait StorageFile: Send + Debug {
    /// Current length.
    fn len(&self) -> u64;
    /// Which file this handle reads (an inode number, or the like; 0: unknown). A file
    /// replaced under the same name has another identity: compaction swaps a cleaned segment
    /// in by renaming it over the old one.
    fn identity(&self) -> u64 {
        0
    }
    /// Fills `buf` from position `pos`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at the end.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Makes the content durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Re-reads the length from the file system (another process may have appended or cut) and
    /// returns it; [`len`](Self::len) reports it from then on.
    fn refresh_len(&mut self) -> io::Result<u64>;
    /// Overwrites bytes at `pos` (extending the file if needed); no fsync. For lock files' small
    /// contents.
    fn write_at(&mut self, pos: u64, data: &[u8]) -> io::Result<()>;
    /// Takes the OS file lock on this file (`flock`): exclusive, or shared; blocks until granted.
    /// The lock belongs to this handle: another handle on the same file (in this process or
    /// another) is excluded; the OS drops it when the handle is closed or the process dies.
    fn lock(&mut self, exclusive: bool) -> io::Result<()>;
    /// [`lock`](Self::lock) exclusively without waiting; `false` if another handle holds it.
    fn try_lock(&mut self) -> io::Result<bool>;
    /// Releases the lock.
    fn unlock(&mut self) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default)]
pub(crate) struct FileStorage;

#[derive(Debug)]
struct DiskFile {
    file: File,
    len: u64,
    /// Which file it is ([`inode`]).
    inode: u64,
    /// Opened with `O_APPEND`: the kernel places every write at the current end.
    shared_append: bool,
}

impl Storage for FileStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in entries {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let meta = file.metadata()?;
        Ok(Box::new(DiskFile {
            file,
            len: meta.len(),
            inode: inode(&meta),
            shared_append: false,
        }))
    }

    fn open_existing(
        &self,
        path: &Path,
        writable: bool,
    ) -> io::Result<Option<Box<dyn StorageFile>>> {
        let file = match OpenOptions::new().read(true).write(writable).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        Ok(Some(Box::new(DiskFile {
            file,
            len: meta.len(),
            inode: inode(&meta),
            shared_append: false,
        })))
    }

    fn open_shared_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let meta = file.metadata()?;
        Ok(Box::new(DiskFile {
            file,
            len: meta.len(),
            inode: inode(&meta),
            shared_append: true,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn replace_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        match fs::remove_dir_all(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match fs::read(path) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut file = File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        match path.parent() {
            Some(dir) => self.sync_dir(dir),
            None => Ok(()),
        }
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        // Opening a directory read-only and fsyncing it is how POSIX persists its entries;
        // other platforms have no such call and persist entries with the rename itself.
        #[cfg(unix)]
        File::open(dir)?.sync_all()?;
        #[cfg(not(unix))]
        let _ = dir;
        Ok(())
    }
}

/// Which file an open file is: its inode number with its creation time (0 where the platform
/// has neither). The creation time matters: a file system gives a removed file's inode number
/// to the next file created, and compaction removes segments and creates cleaned ones.
fn inode(meta: &fs::Metadata) -> u64 {
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(meta);
    #[cfg(not(unix))]
    let ino = 0u64;
    ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ born
}

impl StorageFile for DiskFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn identity(&self) -> u64 {
        self.inode
    }

    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        // Positioned reads and writes: one system call each, no seek.
        #[cfg(unix)]
        return std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, pos);
        #[cfg(not(unix))]
        {
            self.file.seek(SeekFrom::Start(pos))?;
            self.file.read_exact(buf)
        }
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if self.shared_append {
            // One write call: the kernel appends it whole at the end (other processes too).
            self.file.write_all(data)?;
            self.len += data.len() as u64;
            return Ok(());
        }
        self.write_at(self.len, data)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.len = len;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn refresh_len(&mut self) -> io::Result<u64> {
        // A seek to the end is the cheapest way to learn the size (no stat buffer to fill, no
        // overlay-filesystem attribute lookup); reads and writes are positioned, so the file
        // position itself does not matter.
        #[cfg(unix)]
        {
            use std::io::{Seek, SeekFrom};
            self.len = self.file.seek(SeekFrom::End(0))?;
        }
        #[cfg(not(unix))]
        {
            self.len = self.file.metadata()?.len();
        }
        Ok(self.len)
    }

    fn write_at(&mut self, pos: u64, data: &[u8]) -> io::Result<()> {
        #[cfg(unix)]
        std::os::unix::fs::FileExt::write_all_at(&self.file, data, pos)?;
        #[cfg(not(unix))]
        {
            self.file.seek(SeekFrom::Start(pos))?;
            self.file.write_all(data)?;
        }
        self.len = self.len.max(pos + data.len() as u64);
        Ok(())
    }

    fn lock(&mut self, exclusive: bool) -> io::Result<()> {
        if exclusive {
            self.file.lock()
        } else {
            self.file.lock_shared()
        }
    }

    fn try_lock(&mut self) -> io::Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(fs::TryLockError::WouldBlock) => Ok(false),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn unlock(&mut self) -> io::Result<()> {
        self.file.unlock()
    }
}

/// An empty file that lives only in memory (a read-only segment's missing index).
pub(crate) fn empty_file() -> Box<dyn StorageFile> {
    Box::new(MemFile {
        data: Arc::default(),
        faults: Arc::default(),
    })
}

/// Files as byte vectors in memory. Each file keeps a live and a durable copy, and each entry
/// remembers whether its directory was synced since it was created, so tests can take the image
/// a crash would leave ([`Storage::crash_image`]).
#[derive(Debug, Default)]
pub(crate) struct MemStorage {
    state: Mutex<MemState>,
    faults: Arc<Faults>,
}

/// The injected-failure countdown shared by a [`MemStorage`] and its files.
#[derive(Debug, Default)]
struct Faults {
    /// Mutating operations left before they all fail; `None`: no failure planned.
    left: Mutex<Option<u64>>,
}

impl Faults {
    /// Counts one mutating operation; an error once the countdown ran out.
    fn tick(&self) -> io::Result<()> {
        match &mut *locked(&self.left) {
            Some(0) => Err(io::Error::other("injected failure")),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, MemEntry>,
    dirs: BTreeSet<PathBuf>,
    /// Removed files whose removal is not durable yet (their directory was not synced since):
    /// a crash image still holds them.
    removed: BTreeMap<PathBuf, MemEntry>,
}

impl MemState {
    /// The entries of `dir` survive a crash from now on.
    fn entries_durable(&mut self, dir: &Path) {
        self.removed.retain(|p, _| p.parent() != Some(dir));
        // Paths order component by component, so everything under `dir` is one range of the
        // map: visit only that, not every file of the log (creating N partitions was O(N²)).
        for (_, entry) in self
            .files
            .range_mut(dir.to_path_buf()..)
            .take_while(|(p, _)| p.starts_with(dir))
            .filter(|(p, _)| p.parent() == Some(dir))
        {
            entry.entry_durable = true;
        }
    }
}

#[derive(Debug)]
struct MemEntry {
    data: Arc<Mutex<MemData>>,
    /// The directory entry survives a crash (its directory was synced after it was created).
    entry_durable: bool,
}

#[derive(Debug, Default, Clone)]
struct MemData {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// `live` is no longer `durable` plus appended bytes (a truncate cut into synced data).
    diverged: bool,
}

#[derive(Debug)]
struct MemFile {
    data: Arc<Mutex<MemData>>,
    faults: Arc<Faults>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every operation leaves the maps and vectors whole: a poisoned lock holds valid data.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Storage for MemStorage {
    fn shared_between_processes(&self) -> bool {
        false
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = locked(&self.state);
        for d in dir.ancestors() {
            state.dirs.insert(d.to_path_buf());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = locked(&self.state);
        // Only the range of paths under `dir`, not every file of the log: listing each new
        // partition's directory made creating N partitions O(N²).
        let under = |set: &mut dyn Iterator<Item = &PathBuf>| -> Vec<PathBuf> {
            set.take_while(|p| p.starts_with(dir)).cloned().collect()
        };
        let mut children = under(&mut state.files.range(dir.to_path_buf()..).map(|(p, _)| p));
        children.extend(under(&mut state.dirs.range(dir.to_path_buf()..)));
        let mut names: Vec<String> = children
            .iter()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut state = locked(&self.state);
        if path.parent().is_some_and(|dir| !state.dirs.contains(dir)) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"));
        }
        let entry = state
            .files
            .entry(path.to_path_buf())
            .or_insert_with(|| MemEntry {
                data: Arc::default(),
                entry_durable: false,
            });
        Ok(Box::new(MemFile {
            data: Arc::clone(&entry.data),
            faults: Arc::clone(&self.faults),
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        let data = locked(&self.state)
            .files
            .get(path)
            .map(|e| Arc::clone(&e.data));
        Ok(data.map(|d| locked(&d).live.clone()))
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        // One step: a crash (or an injected failure) leaves the old content or the new.
        self.faults.tick()?;
        let content = MemData {
            live: data.to_vec(),
            durable: data.to_vec(),
            diverged: false,
        };
        let entry = MemEntry {
            data: Arc::new(Mutex::new(content)),
            entry_durable: false,
        };
        let mut state = locked(&self.state);
        state.files.insert(path.to_path_buf(), entry);
        if let Some(dir) = path.parent() {
            state.entries_durable(dir);
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.faults.tick()?;
        locked(&self.state).entries_durable(dir);
        Ok(())
    }

    fn open_existing(
        &self,
        path: &Path,
        _writable: bool,
    ) -> io::Result<Option<Box<dyn StorageFile>>> {
        let state = locked(&self.state);
        Ok(state.files.get(path).map(|entry| {
            Box::new(MemFile {
                data: Arc::clone(&entry.data),
                faults: Arc::clone(&self.faults),
            }) as Box<dyn StorageFile>
        }))
    }

    fn open_shared_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        // Every memory file appends at its live end already.
        self.open(path)
    }

    fn exists(&self, path: &Path) -> bool {
        let state = locked(&self.state);
        state.files.contains_key(path) || state.dirs.contains(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.faults.tick()?;
        let mut state = locked(&self.state);
        let occupied = state
            .files
            .range(to.to_path_buf()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(to));
        if occupied {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "rename target exists",
            ));
        }
        // Everything under `from` is one range of each map (O(entries moved)).
        let moved_files: Vec<PathBuf> = state
            .files
            .range(from.to_path_buf()..)
            .take_while(|(p, _)| p.starts_with(from))
            .map(|(p, _)| p.clone())
            .collect();
        let moved_dirs: Vec<PathBuf> = state
            .dirs
            .range(from.to_path_buf()..)
            .take_while(|p| p.starts_with(from))
            .cloned()
            .collect();
        let target = |p: &Path| to.join(p.strip_prefix(from).unwrap_or(p));
        for p in moved_files {
            if let Some(entry) = state.files.remove(&p) {
                state.files.insert(target(&p), entry);
            }
        }
        for p in moved_dirs {
            state.dirs.remove(&p);
            state.dirs.insert(target(&p));
        }
        Ok(())
    }

    fn replace_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.faults.tick()?;
        let mut state = locked(&self.state);
        let Some(mut moved) = state.files.remove(from) else {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        };
        // Until the directory is synced, a crash image holds the old `to` and `from` as they
        // were (if their entries were durable), not the new `to`.
        if moved.entry_durable {
            let kept = MemEntry {
                data: Arc::clone(&moved.data),
                entry_durable: true,
            };
            state.removed.insert(from.to_path_buf(), kept);
        }
        moved.entry_durable = false;
        if let Some(old) = state.files.insert(to.to_path_buf(), moved)
            && old.entry_durable
        {
            state.removed.insert(to.to_path_buf(), old);
        }
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = locked(&self.state);
        let files: Vec<PathBuf> = state
            .files
            .range(dir.to_path_buf()..)
            .take_while(|(p, _)| p.starts_with(dir))
            .map(|(p, _)| p.clone())
            .collect();
        for p in files {
            state.files.remove(&p);
        }
        let dirs: Vec<PathBuf> = state
            .dirs
            .range(dir.to_path_buf()..)
            .take_while(|p| p.starts_with(dir))
            .cloned()
            .collect();
        for p in dirs {
            state.dirs.remove(&p);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.faults.tick()?;
        let mut state = locked(&self.state);
        if let Some(entry) = state.files.remove(path)
            && entry.entry_durable
        {
            state.removed.insert(path.to_path_buf(), entry);
        }
        Ok(())
    }

    fn crash_image(&self) -> Option<Arc<dyn Storage>> {
        let state = locked(&self.state);
        let files = state
            .files
            .iter()
            .chain(&state.removed)
            .filter(|(_, e)| e.entry_durable)
            .map(|(path, e)| {
                let durable = locked(&e.data).durable.clone();
                let data = MemData {
                    live: durable.clone(),
                    durable,
                    diverged: false,
                };
                (
                    path.clone(),
                    MemEntry {
                        data: Arc::new(Mutex::new(data)),
                        entry_durable: true,
                    },
                )
            })
            .collect();
        let image = MemState {
            files,
            dirs: state.dirs.clone(),
            removed: BTreeMap::new(),
        };
        Some(Arc::new(MemStorage {
            state: Mutex::new(image),
            faults: Arc::default(),
        }))
    }

    #[cfg(test)]
    fn fail_after(&self, ops: Option<u64>) {
        *locked(&self.faults.left) = ops;
    }
}

impl StorageFile for MemFile {
    fn len(&self) -> u64 {
        locked(&self.data).live.len() as u64
    }

    fn identity(&self) -> u64 {
        Arc::as_ptr(&self.data) as usize as u64
    }

    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        let data = locked(&self.data);
        let src = usize::try_from(pos)
            .ok()
            .and_then(|p| data.live.get(p..p.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.faults.tick()?;
        locked(&self.data).live.extend_from_slice(data);
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.faults.tick()?;
        let mut data = locked(&self.data);
        data.live.truncate(len);
        data.diverged |= len < data.durable.len();
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.faults.tick()?;
        // Only the bytes appended since the last sync are copied, unless a truncate intervened.
        let data = &mut *locked(&self.data);
        if data.diverged {
            data.durable.clone_from(&data.live);
            data.diverged = false;
        } else if let Some(new) = data.live.get(data.durable.len()..) {
            data.durable.extend_from_slice(new);
        }
        Ok(())
    }

    fn refresh_len(&mut self) -> io::Result<u64> {
        Ok(self.len())
    }

    fn write_at(&mut self, pos: u64, data: &[u8]) -> io::Result<()> {
        let pos = usize::try_from(pos).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut file = locked(&self.data);
        let end = pos + data.len();
        if file.live.len() < end {
            file.live.resize(end, 0);
        }
        if let Some(dst) = file.live.get_mut(pos..end) {
            dst.copy_from_slice(data);
        }
        file.diverged |= pos < file.durable.len();
        Ok(())
    }

    // A memory log is one `Log` (and its clones): its in-process locks are enough.
    fn lock(&mut self, _exclusive: bool) -> io::Result<()> {
        Ok(())
    }

    fn try_lock(&mut self) -> io::Result<bool> {
        Ok(true)
    }

    fn unlock(&mut self) -> io::Result<()> {
        Ok(())
    }
}
