//! [`FileStorage`]: the real file system, with positioned reads and writes, `O_APPEND` for files
//! several processes append to, OS file locks, and a file's identity (inode and creation time)
//! to notice a file replaced under its name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
#[cfg(not(unix))]
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{Storage, StorageFile};

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
