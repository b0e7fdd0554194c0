//! Exactly-once: [`Log::commit_transaction`] makes a set of batches (in any partitions) and a
//! group's offsets durable and visible as one unit, through the redo journal of `journal.rs`.
//!
//! The protocol, in order, all under the journal's lock (the transaction lock):
//! 1. lock the transaction's partitions in [`TopicPartition`](riffle_record::TopicPartition)
//!    order and compute each batch's base offset from the partition's end (the locks are held
//!    until the batches are written, so no other writer can take those offsets);
//! 2. seal every batch (the bytes `append` would write) and write one checksummed journal record
//!    holding them and the offsets; fsync it — **the commit point** (no fsync under
//!    [`FsyncPolicy::Never`](crate::FsyncPolicy::Never));
//! 3. write the batches into their partitions (no fsync: the journal has them) and apply the
//!    offsets in memory (no offsets-file write: the journal has them);
//! 4. past [`LogOptions::txn_journal_bytes`](crate::LogOptions::txn_journal_bytes), checkpoint:
//!    fsync every partition, write the pending group files, empty the journal.
//!
//! Nothing reaches a partition before the commit point, so readers never see uncommitted data.
//! Recovery ([`Log::recover_journal`], on open) replays the journal's intact records: a batch
//! whose partition ends at its base offset is appended again (it was lost or torn off), one the
//! partition already holds is checked and kept (a batch retention or a purge deleted since, or
//! one in a compacted topic, which the cleaner may have rewritten, is kept unchecked), anything
//! else is an inconsistency ([`Error::Corrupt`](crate::Error::Corrupt) naming the journal and
//! the record's position). Then it checkpoints.
//!
//! This file owns the transaction lock ([`TxnGuard`]) and this process's view of the journal
//! and the group files; `commit.rs` owns the commit, `recovery.rs` replaying the journal and
//! checkpointing.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

use crate::error::{IoContext, Result};
use crate::journal::{self, Journal};
use crate::log::{Log, lock};
use crate::storage::StorageFile;

mod commit;
mod recovery;

/// `txn/lock`: bytes 0..8 the generation (bumped whenever a group file is written or the
/// journal emptied), byte 8 set while a transaction is in flight.
const LOCK_FILE: &str = "lock";
const IN_FLIGHT_AT: u64 = 8;

/// What the transaction lock guards: the journal, and the `txn/lock` handle.
#[derive(Debug)]
pub(crate) struct TxnState {
    pub(crate) journal: Journal,
    lock_path: PathBuf,
    lock: Option<Box<dyn StorageFile>>,
    /// A handle on the journal for reading other processes' records (and cutting a torn tail).
    reader: Option<Box<dyn StorageFile>>,
}

impl TxnState {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            journal: Journal::new(root),
            lock_path: root.join("txn").join(LOCK_FILE),
            lock: None,
            reader: None,
        }
    }

    /// `(generation, in flight)` as `txn/lock` says.
    fn read_lock_file(&mut self) -> Result<(u64, bool)> {
        let Some(file) = self.lock.as_mut() else {
            return Ok((0, false));
        };
        let len = file.refresh_len().at(&self.lock_path)?;
        let mut raw = [0u8; 9];
        let have = usize::try_from(len).unwrap_or(raw.len()).min(raw.len());
        if have < 8 {
            return Ok((0, false));
        }
        file.read_exact_at(0, &mut raw[..have])
            .at(&self.lock_path)?;
        let generation = u64::from_be_bytes([
            raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
        ]);
        Ok((generation, raw[8] != 0))
    }

    fn write_in_flight(&mut self, in_flight: bool) -> Result<()> {
        let Some(file) = self.lock.as_mut() else {
            return Ok(());
        };
        if file.len() < IN_FLIGHT_AT {
            file.write_at(0, &0u64.to_be_bytes()).at(&self.lock_path)?;
        }
        file.write_at(IN_FLIGHT_AT, &[u8::from(in_flight)])
            .at(&self.lock_path)
    }
}

/// The transaction lock, held: the journal's mutex and (on a file-backed log) the OS lock of
/// `txn/lock`, released on drop.
pub(crate) struct TxnGuard<'a> {
    state: MutexGuard<'a, TxnState>,
    locked: bool,
    /// Bumped the generation (a group file or the journal changed): other processes drop their
    /// caches.
    generation: u64,
}

impl Deref for TxnGuard<'_> {
    type Target = TxnState;
    fn deref(&self) -> &TxnState {
        &self.state
    }
}

impl DerefMut for TxnGuard<'_> {
    fn deref_mut(&mut self) -> &mut TxnState {
        &mut self.state
    }
}

impl Drop for TxnGuard<'_> {
    fn drop(&mut self) {
        if self.locked
            && let Some(file) = self.state.lock.as_mut()
            && let Err(e) = file.unlock()
        {
            // Closing the handle releases the lock.
            tracing::warn!(file = %self.state.lock_path.display(), error = %e, "unlocking the transaction lock failed; closing it");
            self.state.lock = None;
        }
    }
}

impl TxnGuard<'_> {
    /// The generation in `txn/lock` as of this guard (with its own bumps).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// A group file was written or the journal emptied: bump the generation in `txn/lock`.
    pub(crate) fn files_changed(&mut self) -> Result<()> {
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let state = &mut *self.state;
        if let Some(file) = state.lock.as_mut() {
            file.write_at(0, &generation.to_be_bytes())
                .at(&state.lock_path)?;
        }
        Ok(())
    }
}

impl Log {
    /// Takes the transaction lock — exclusive for a writer, shared to read offsets — and brings
    /// this process's view of the journal and the group files up to date. Exclusive, it also
    /// recovers a transaction whose process died in flight, and cuts a torn journal tail.
    pub(crate) fn txn_lock(&self, exclusive: bool) -> Result<TxnGuard<'_>> {
        let shared = &self.shared;
        let mut state = lock(&shared.journal, &"the transaction journal")?;
        let mut locked = false;
        if shared.storage.shared_between_processes() {
            if state.lock.is_none() {
                let path = state.lock_path.clone();
                state.lock = if shared.options.read_only {
                    shared.storage.open_existing(&path, false).at(&path)?
                } else {
                    Some(shared.storage.open(&path).at(&path)?)
                };
            }
            let path = state.lock_path.clone();
            if let Some(file) = state.lock.as_mut() {
                file.lock(exclusive && !shared.options.read_only)
                    .at(&path)?;
                locked = true;
            }
        }
        let mut guard = TxnGuard {
            state,
            locked,
            generation: 0,
        };
        let (generation, in_flight) = guard.read_lock_file()?;
        guard.generation = generation;
        self.sync_view(&mut guard, exclusive)?;
        if exclusive && in_flight && !shared.options.read_only {
            tracing::warn!(file = %guard.lock_path.display(), "a process died during a transaction; recovering the transaction journal");
            self.replay_journal(&guard)?;
            guard.write_in_flight(false)?;
        }
        Ok(guard)
    }

    /// Parses the journal records appended since this process last looked (by any process)
    /// into the offset cache; drops the cache if the generation moved. Exclusive, a torn tail
    /// (a writer died mid-record) is cut.
    fn sync_view(&self, txn: &mut TxnGuard<'_>, exclusive: bool) -> Result<()> {
        let shared = &self.shared;
        let generation = txn.generation;
        let txn: &mut TxnState = txn;
        let mut groups = lock(&shared.groups, &"the group offsets")?;
        if !shared.storage.shared_between_processes() {
            // One process: the cache is the truth.
            groups.journal_len = txn.journal.len();
            return Ok(());
        }
        if groups.generation != generation {
            groups.invalidate(generation);
        }
        let path = txn.journal.path.clone();
        let writable = !shared.options.read_only;
        if txn.reader.is_none() {
            txn.reader = shared.storage.open_existing(&path, writable).at(&path)?;
        }
        let Some(reader) = txn.reader.as_mut() else {
            return Ok(());
        };
        let len = reader.refresh_len().at(&path)?;
        if exclusive && writable {
            // This process appends its next record at the end other processes left.
            txn.journal.refresh(&shared.storage)?;
        }
        if len < groups.journal_len {
            let generation = groups.generation;
            groups.invalidate(generation);
        }
        let from = groups.journal_len;
        if len == from {
            return Ok(());
        }
        let mut bytes = vec![0u8; (len - from) as usize];
        reader.read_exact_at(from, &mut bytes).at(&path)?;
        let replay = journal::decode_from(&path, &bytes, from)?;
        for t in &replay.txns {
            groups.apply(&t.group, &t.offsets, t.batches.iter().map(|b| &b.tp));
        }
        let Some((torn_at, reason)) = replay.torn else {
            groups.journal_len = len;
            return Ok(());
        };
        groups.journal_len = torn_at;
        if exclusive && writable {
            let position = torn_at;
            tracing::warn!(
                file = %path.display(),
                position,
                %reason,
                "cutting the torn tail of transaction journal {} at byte {position} (a writer died while appending it: no intact record follows, and that record's transaction never committed): {reason}",
                path.display()
            );
            reader.truncate(position).at(&path)?;
            reader.sync().at(&path)?;
            txn.journal.refresh(&shared.storage)?;
        }
        Ok(())
    }
}
