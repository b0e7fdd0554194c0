//! [`MemStorage`]: files as byte vectors in memory, each with a live and a durable copy, and
//! directory entries that are durable only once their directory is synced; so a test can take
//! the image a crash would leave, and inject failures after a number of operations.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Storage, StorageFile};

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
