//! The partition's `lock` file (log/FORMAT.md, *Many processes*): taking and releasing its OS
//! lock, keeping it between appends as a lease (log/src/lease.rs says when), and its content —
//! the transaction mark, the deleted mark and the active segment's base.
//!
//! It must never wait for another lock while holding a partition's: a writer that finds the
//! transaction mark releases the partition's lock ([`Locked::TxnPending`]) before its caller
//! takes the transaction lock.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Lease, Partition};
use crate::error::{Error, IoContext, Result};
use crate::lease::{CONTENDED_FOR, LEASE_IDLE, LEASE_MAX};
use crate::storage::StorageFile;

/// How many partition lock files a log keeps open between writes; past it a partition opens
/// its lock file for each write and closes it after, so handles stay bounded whatever the
/// partition count.
pub(crate) const LOCK_FILES_KEPT_OPEN: usize = 256;

/// The name of a partition's lock file. Its content (FORMAT.md): byte 0 the transaction mark,
/// bytes 8..16 the active segment's base offset (`u64`, big-endian), written by whoever rolls a
/// segment, so a writer learns of another process's roll without listing the directory.
pub(crate) const LOCK_FILE: &str = "lock";
const LOCK_CONTENT_LEN: usize = 16;
/// The byte of the lock file's content that says the topic was deleted (`Log::delete_topic`).
const DELETED_AT: usize = 1;

/// Whether a lock file's 16 bytes are what this log writes: the transaction mark and the
/// deletion mark each 0 or 1, six zero bytes (the base offset is any `u64`).
fn lock_content_is_valid(content: &[u8; LOCK_CONTENT_LEN]) -> bool {
    content[0] <= 1 && content[DELETED_AT] <= 1 && content[2..8].iter().all(|&b| b == 0)
}

/// What [`Partition::lock_for_write`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Locked {
    /// The lock is held and the partition caught up: write, then [`Partition::unlock`].
    Yes,
    /// A transaction marked this partition and its process died before clearing the mark: the
    /// lock was released again; the transaction journal must be recovered first.
    TxnPending,
}

impl Partition {
    /// The lock file, opened (and counted) if it is not.
    pub(super) fn lock_file(&mut self) -> Result<&mut Box<dyn StorageFile>> {
        if self.lock.is_none() {
            let path = self.dir.join(LOCK_FILE);
            self.lock = Some(self.storage.open(&path).at(&path)?);
            self.locks_open.fetch_add(1, Ordering::Relaxed);
        }
        self.lock.as_mut().ok_or_else(|| Error::Poisoned {
            what: format!("the lock file of {}", self.tp),
        })
    }

    /// Takes the partition's OS lock and catches up with other processes' appends. With
    /// `in_txn` (the caller holds the transaction lock, so no transaction is in flight
    /// anywhere) a transaction mark is stale and ignored; otherwise it is reported as
    /// [`Locked::TxnPending`] and the lock released.
    pub(crate) fn lock_for_write(&mut self, in_txn: bool) -> Result<Locked> {
        self.check_poisoned()?;
        if self.read_only {
            return Err(Error::ReadOnly {
                what: format!("append to {}", self.tp),
            });
        }
        if !self.cross_process || self.lease.is_some() {
            // One handle on a memory-backed log: no other writer to exclude or catch up with,
            // and no transaction mark (only cross-process transactions write one). Or this
            // handle kept the lock since its last append: nobody else wrote since.
            self.locked = true;
            return Ok(Locked::Yes);
        }
        let lock = self.lock_file()?;
        // Whether another process holds it: then this partition has other writers.
        let waited = match lock.try_lock() {
            Ok(true) => false,
            Ok(false) => {
                if let Err(e) = lock.lock(true) {
                    return Err(e).at(&self.dir.join(LOCK_FILE));
                }
                true
            }
            Err(e) => return Err(e).at(&self.dir.join(LOCK_FILE)),
        };
        let mut content = [0u8; LOCK_CONTENT_LEN];
        let read = lock.read_exact_at(0, &mut content);
        self.locked = true;
        let (marked, base) = match read {
            Ok(()) if !lock_content_is_valid(&content) => {
                self.unlock();
                return Err(Error::Corrupt {
                    path: self.dir.join(LOCK_FILE),
                    position: 0,
                    reason: format!(
                        "not a partition lock record (byte 0 a transaction mark, byte 1 a deletion \
                         mark, each 0 or 1, then six zero bytes and the active segment's base \
                         offset), found {}; it holds no data: stop every process using the log and \
                         delete the file, and the next writer recreates it",
                        content
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<String>()
                    ),
                });
            }
            Ok(()) if content[DELETED_AT] != 0 => {
                // Deleted under this handle: its files are no longer the topic's.
                self.unlock();
                self.close_lock();
                return Err(Error::TopicDeleted {
                    topic: self.tp.topic.to_string(),
                });
            }
            Ok(()) => {
                let mut base = [0u8; 8];
                base.copy_from_slice(&content[8..]);
                (content[0] != 0, Some(u64::from_be_bytes(base)))
            }
            // A new lock file (or one of an older version): no mark, no base.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => (false, None),
            Err(e) => {
                self.unlock();
                return Err(e).at(&self.dir.join(LOCK_FILE));
            }
        };
        self.lock_active_base = base;
        if marked && !in_txn {
            self.unlock();
            return Ok(Locked::TxnPending);
        }
        let end_before = self.next_offset;
        if let Err(e) = self.catch_up() {
            self.unlock();
            return Err(e);
        }
        if waited || self.next_offset != end_before {
            // Others write here too: no lease for a while (it would make them wait).
            self.contended_at = Some(Instant::now());
        }
        if self.lock_active_base.is_none() {
            // A new lock file: say where the active segment is, so later writers need not look.
            let base = self.segments.last().map_or(0, |s| s.base);
            if let Err(e) = self.write_lock_content(None, Some(base)) {
                self.unlock();
                return Err(e);
            }
            self.lock_active_base = Some(base);
        }
        Ok(Locked::Yes)
    }

    /// After a successful append: keeps the lock for this handle's next append (a lease,
    /// log/src/lease.rs) or releases it. A lease is renewed until [`LEASE_MAX`] after it began;
    /// `list` puts the partition on the releaser's list (`false`: the list is full).
    pub(crate) fn keep_or_unlock(&mut self, now: Instant, list: impl FnOnce() -> bool) {
        let contended = self
            .contended_at
            .is_some_and(|at| now.saturating_duration_since(at) < CONTENDED_FOR);
        if !self.cross_process || !self.locked || contended {
            self.unlock();
            return;
        }
        match &mut self.lease {
            Some(lease) if now.saturating_duration_since(lease.since) < LEASE_MAX => {
                lease.last = now;
            }
            Some(_) => self.unlock(),
            None if self.lease_listed || list() => {
                self.lease_listed = true;
                self.lease = Some(Lease {
                    since: now,
                    last: now,
                });
            }
            None => self.unlock(),
        }
    }

    /// The releaser's look: ends the lease if this handle has not appended for [`LEASE_IDLE`].
    /// Returns whether the partition leaves the list (no lease any more).
    pub(crate) fn end_lease_if_idle(&mut self, now: Instant) -> bool {
        if let Some(lease) = &self.lease
            && now.saturating_duration_since(lease.last) < LEASE_IDLE
        {
            return false;
        }
        self.unlock();
        self.lease_listed = false;
        true
    }

    /// Releases the OS lock (closing the lock file if the log keeps too many open); ends a
    /// lease.
    pub(crate) fn unlock(&mut self) {
        self.lease = None;
        if !self.locked {
            return;
        }
        self.locked = false;
        self.lock_active_base = None;
        if let Some(lock) = self.lock.as_mut()
            && let Err(e) = lock.unlock()
        {
            // Closing the file releases the lock too.
            tracing::warn!(partition = %self.tp, error = %e, "unlocking a partition lock file failed; closing it");
            self.close_lock();
            return;
        }
        if self.locks_open.load(Ordering::Relaxed) > LOCK_FILES_KEPT_OPEN {
            self.close_lock();
        }
    }

    fn close_lock(&mut self) {
        if self.lock.take().is_some() {
            self.locks_open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Marks the partition as written by a transaction in flight (under the lock): should its
    /// process die before [`clear_txn_mark`](Self::clear_txn_mark), the next writer recovers
    /// the journal before taking an offset the transaction may own.
    pub(crate) fn set_txn_mark(&mut self) -> Result<()> {
        self.write_lock_content(Some(1), None)
    }

    /// Under the lock: marks the partition deleted in its lock file, so that a handle of
    /// another process that still has it open fails its next write with
    /// [`Error::TopicDeleted`] instead of appending to files that are no longer the topic's.
    pub(crate) fn mark_deleted(&mut self) -> Result<()> {
        if !self.cross_process {
            return Ok(());
        }
        let path = self.dir.join(LOCK_FILE);
        let lock = self.lock_file()?;
        let mut content = [0u8; LOCK_CONTENT_LEN];
        if let Err(e) = lock.read_exact_at(0, &mut content)
            && e.kind() != std::io::ErrorKind::UnexpectedEof
        {
            return Err(e).at(&path);
        }
        content[DELETED_AT] = 1;
        lock.write_at(0, &content).at(&path)
    }

    /// Clears the mark of [`set_txn_mark`](Self::set_txn_mark).
    pub(crate) fn clear_txn_mark(&mut self) -> Result<()> {
        self.write_lock_content(Some(0), None)
    }

    /// Writes the mark and/or the active base into the lock file (whole, 16 bytes).
    pub(super) fn write_lock_content(&mut self, mark: Option<u8>, base: Option<u64>) -> Result<()> {
        let path = self.dir.join(LOCK_FILE);
        let active = self.segments.last().map_or(0, |s| s.base);
        let lock = self.lock_file()?;
        let mut content = [0u8; LOCK_CONTENT_LEN];
        if let Err(e) = lock.read_exact_at(0, &mut content)
            && e.kind() != std::io::ErrorKind::UnexpectedEof
        {
            return Err(e).at(&path);
        }
        if let Some(mark) = mark {
            content[0] = mark;
        }
        content[8..].copy_from_slice(&base.unwrap_or(active).to_be_bytes());
        lock.write_at(0, &content).at(&path)
    }
}
