//! Where the bytes live. The log only talks to [`Storage`] and [`StorageFile`], so the same code
//! runs on files ([`FileStorage`]) and in memory ([`MemStorage`], for tests), and faults can be
//! injected behind the trait later (as redb does with its backends).
//!
//! The contract every backend keeps: `append` extends a file, `sync` makes everything appended
//! and truncated so far durable, `write_atomic` replaces a file so that a crash leaves either the
//! old or the new content, and `sync_dir` makes created/renamed entries of a directory durable.
//!
//! This file owns the two traits; each backend is a file of its own: `file.rs` the file system,
//! `memory.rs` the in-memory files with their durable copies and crash images.

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

mod file;
mod memory;

pub(crate) use file::FileStorage;
pub(crate) use memory::{MemStorage, empty_file};

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
