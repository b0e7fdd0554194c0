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
use std::io::{self, Read, Seek, SeekFrom, Write};
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
}

/// One open file.
pub(crate) trait StorageFile: Send + Debug {
    /// Current length.
    fn len(&self) -> u64;
    /// Fills `buf` from position `pos`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at the end.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Makes the content durable.
    fn sync(&mut self) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default)]
pub(crate) struct FileStorage;

#[derive(Debug)]
struct DiskFile {
    file: File,
    len: u64,
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
        let len = file.metadata()?.len();
        Ok(Box::new(DiskFile { file, len }))
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

impl StorageFile for DiskFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(pos))?;
        self.file.read_exact(buf)
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(self.len))?;
        self.file.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.len = len;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// Files as byte vectors in memory. Everything is "durable" at once; a fault-injecting backend
/// would keep a live and a durable copy here.
#[derive(Debug, Default)]
pub(crate) struct MemStorage {
    state: Mutex<MemState>,
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, Arc<Mutex<Vec<u8>>>>,
    dirs: BTreeSet<PathBuf>,
}

#[derive(Debug)]
struct MemFile {
    data: Arc<Mutex<Vec<u8>>>,
}

impl MemStorage {
    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        // The state is a plain map that no operation leaves half-updated.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Storage for MemStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state();
        for d in dir.ancestors() {
            state.dirs.insert(d.to_path_buf());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state();
        let children = state.files.keys().chain(state.dirs.iter());
        let mut names: Vec<String> = children
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.state();
        if let Some(dir) = path.parent() {
            if !state.dirs.contains(dir) {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"));
            }
        }
        let data = Arc::clone(state.files.entry(path.to_path_buf()).or_default());
        Ok(Box::new(MemFile { data }))
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        let data = self.state().files.get(path).cloned();
        Ok(data.map(|d| d.lock().unwrap_or_else(PoisonError::into_inner).clone()))
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let new = Arc::new(Mutex::new(data.to_vec()));
        self.state().files.insert(path.to_path_buf(), new);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

impl MemFile {
    fn data(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StorageFile for MemFile {
    fn len(&self) -> u64 {
        self.data().len() as u64
    }

    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        let data = self.data();
        let src = usize::try_from(pos)
            .ok()
            .and_then(|p| data.get(p..p.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.data().extend_from_slice(data);
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.data().truncate(len);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}
