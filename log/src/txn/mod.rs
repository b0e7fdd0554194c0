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

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use crate::error::{Error, IoContext, Result};
use crate::journal::{self, Journal};
use crate::log::{Log, lock};
use crate::slots;
use crate::storage::{Storage, StorageFile};

mod commit;
mod recovery;

/// `txn/lock` (log/FORMAT.md, *Many processes* and *Transaction journal*): bytes 0..8 the
/// generation (bumped whenever a group file is written or the journal emptied), byte 8 set
/// while a transaction is in flight; bytes 16..64 the journal's committed length (the slots of
/// log/src/slots.rs); from byte 64 the group registry. Never fsynced: the committed length and
/// the registry are lower bounds of what was made durable before they were written.
pub(crate) const LOCK_FILE: &str = "lock";
const IN_FLIGHT_AT: u64 = 8;
/// Where the journal's committed length is kept.
pub(crate) const CLAIM_AT: u64 = 16;
pub(crate) const CLAIM_WHAT: &str = "the transaction journal's committed length";
/// Where the group registry starts: one entry per group whose offsets file was ever written
/// (u16 name length, the name, CRC32C of both), appended once, after the file was durable.
pub(crate) const REGISTRY_AT: u64 = CLAIM_AT + slots::SLOTS_LEN as u64;

/// The group registry's entries in `bytes` (the lock file from [`REGISTRY_AT`] on), up to the
/// first that does not check out (a write torn by a crash: the entries before it stand), and
/// the byte after the last valid one.
pub(crate) fn parse_registry(bytes: &[u8]) -> (BTreeSet<String>, u64) {
    let mut names = BTreeSet::new();
    let mut at = 0usize;
    while let Some(len) = bytes.get(at..at + 2) {
        let n = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let Some(entry) = bytes.get(at..at + 2 + n) else {
            break;
        };
        let Some(crc) = bytes.get(at + 2 + n..at + 6 + n) else {
            break;
        };
        let name = std::str::from_utf8(&entry[2..]).ok();
        match name {
            Some(name)
                if n > 0
                    && crc32c::crc32c(entry).to_be_bytes() == [crc[0], crc[1], crc[2], crc[3]] =>
            {
                names.insert(name.to_owned());
                at += 6 + n;
            }
            _ => break,
        }
    }
    (names, at as u64)
}

/// A registry entry for `group`.
pub(crate) fn registry_entry(group: &str) -> Vec<u8> {
    let mut entry = Vec::with_capacity(group.len() + 6);
    entry.extend_from_slice(&(group.len() as u16).to_be_bytes());
    entry.extend_from_slice(group.as_bytes());
    let crc = crc32c::crc32c(&entry);
    entry.extend_from_slice(&crc.to_be_bytes());
    entry
}

/// What `txn/lock` says.
struct LockContent {
    generation: u64,
    in_flight: bool,
    /// The journal's committed length, as its slots hold it.
    claim: Option<slots::Slotted>,
}

/// What the transaction lock guards: the journal, and the `txn/lock` handle.
#[derive(Debug)]
pub(crate) struct TxnState {
    pub(crate) journal: Journal,
    lock_path: PathBuf,
    lock: Option<Box<dyn StorageFile>>,
    /// A handle on the journal for reading other processes' records (and cutting a torn tail).
    reader: Option<Box<dyn StorageFile>>,
    /// The journal's committed length as `txn/lock` said when the lock was taken.
    claim: Option<slots::Slotted>,
    /// The groups `txn/lock` registers (their offsets files were written), and the bytes of
    /// the lock file parsed for them.
    pub(crate) registry: BTreeSet<String>,
    registry_read: u64,
    /// Where the next registry entry goes (after the last valid one).
    registry_end: u64,
}

impl TxnState {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            journal: Journal::new(root),
            lock_path: root.join("txn").join(LOCK_FILE),
            lock: None,
            reader: None,
            claim: None,
            registry: BTreeSet::new(),
            registry_read: 0,
            registry_end: REGISTRY_AT,
        }
    }

    /// What `txn/lock` says; reads the group registry again if the file grew.
    fn read_lock_file(&mut self) -> Result<LockContent> {
        let nothing = LockContent {
            generation: 0,
            in_flight: false,
            claim: None,
        };
        let Some(file) = self.lock.as_mut() else {
            return Ok(nothing);
        };
        let len = file.refresh_len().at(&self.lock_path)?;
        // The registry is read only when the file's length changed (a group was registered).
        let upto = if len != self.registry_read {
            len
        } else {
            REGISTRY_AT.min(len)
        };
        let mut raw = vec![0u8; usize::try_from(upto).unwrap_or(0)];
        if raw.len() < 8 {
            return Ok(nothing);
        }
        file.read_exact_at(0, &mut raw).at(&self.lock_path)?;
        let generation = u64::from_be_bytes([
            raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
        ]);
        let in_flight = raw.get(8).is_some_and(|&b| b != 0);
        let claim = match raw.get(CLAIM_AT as usize..) {
            Some(bytes) => slots::decode(&self.lock_path, CLAIM_AT, CLAIM_WHAT, bytes)?,
            None => None,
        };
        if len != self.registry_read {
            let (names, end) = parse_registry(raw.get(REGISTRY_AT as usize..).unwrap_or_default());
            self.registry = names;
            self.registry_end = REGISTRY_AT + end;
            self.registry_read = len;
        }
        Ok(LockContent {
            generation,
            in_flight,
            claim,
        })
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
    /// The journal's committed length as `txn/lock` says (0: none recorded).
    pub(crate) fn journal_claim(&self) -> u64 {
        self.state.claim.map_or(0, |c| c.value)
    }

    /// Records that the journal's first `len` bytes are committed (fsynced): written after the
    /// fsync, under the exclusive lock, never fsynced itself. Lowered to 0 *before* the
    /// journal is emptied. On a memory-backed log (no lock file) it does nothing.
    pub(crate) fn claim_journal(&mut self, len: u64) -> Result<()> {
        let state = &mut *self.state;
        let Some(file) = state.lock.as_mut() else {
            return Ok(());
        };
        if state.claim.is_some_and(|c| c.value == len) || (state.claim.is_none() && len == 0) {
            return Ok(());
        }
        slots::write(&mut **file, &state.lock_path, CLAIM_AT, state.claim, len)?;
        state.claim = slots::read(&mut **file, &state.lock_path, CLAIM_AT, CLAIM_WHAT)?;
        Ok(())
    }

    /// Fsyncs the whole journal (every process's records) and records its length as committed,
    /// if it is more than the committed length says: [`Log::sync`] under any policy, so that
    /// after it no damage to the journal passes for a torn tail.
    pub(crate) fn claim_whole_journal(&mut self, storage: &Arc<dyn Storage>) -> Result<()> {
        // No lock file (a memory-backed log) has no committed length; no journal file (none
        // was ever written: `sync_view` found none), nothing to claim.
        if self.state.lock.is_none() || self.state.reader.is_none() {
            return Ok(());
        }
        let len = self.state.journal.refresh(storage)?;
        if len <= self.journal_claim() {
            return Ok(());
        }
        self.state.journal.sync_file(storage)?;
        self.claim_journal(len)
    }

    /// Registers `groups` (whose offsets files were just written, durably) in `txn/lock`, so
    /// that a deleted offsets file is found missing rather than read as "never committed".
    pub(crate) fn register_groups(&mut self, groups: Vec<String>) -> Result<()> {
        let state = &mut *self.state;
        let Some(file) = state.lock.as_mut() else {
            return Ok(());
        };
        for group in groups {
            if state.registry.contains(&group) {
                continue;
            }
            if file.len() < REGISTRY_AT {
                // The claim's slots stay empty (zero) until a transaction writes them.
                let len = file.len();
                let fill = vec![0u8; usize::try_from(REGISTRY_AT - len).unwrap_or(0)];
                file.write_at(len, &fill).at(&state.lock_path)?;
            }
            let entry = registry_entry(&group);
            file.write_at(state.registry_end, &entry)
                .at(&state.lock_path)?;
            state.registry_end += entry.len() as u64;
            state.registry_read = file.refresh_len().at(&state.lock_path)?;
            state.registry.insert(group);
        }
        Ok(())
    }

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
        let LockContent {
            generation,
            in_flight,
            claim,
        } = guard.read_lock_file()?;
        guard.generation = generation;
        guard.claim = claim;
        self.sync_view(&mut guard, exclusive)?;
        if exclusive && in_flight && !shared.options.read_only {
            tracing::warn!(file = %guard.lock_path.display(), "a transaction did not finish (its process died, or it stopped on a failed write such as a full disk); recovering the transaction journal");
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
        let claim = txn.journal_claim();
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
        if groups.registry_version != txn.registry_read {
            groups.registered = txn.registry.clone();
            groups.registry_version = txn.registry_read;
        }
        let path = txn.journal.path.clone();
        let writable = !shared.options.read_only;
        if txn.reader.is_none() {
            txn.reader = shared.storage.open_existing(&path, writable).at(&path)?;
        }
        let Some(reader) = txn.reader.as_mut() else {
            if claim > 0 {
                return Err(journal_lost(&path, &txn.lock_path, 0, claim));
            }
            return Ok(());
        };
        let len = reader.refresh_len().at(&path)?;
        if len < claim {
            return Err(journal_lost(&path, &txn.lock_path, len, claim));
        }
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
        if torn_at < claim {
            return Err(Error::Corrupt {
                path: path.clone(),
                position: torn_at,
                reason: format!(
                    "the journal record at byte {torn_at} does not check out ({reason}), but \
                     every record below byte {claim} was committed (fsynced; {} says so), so \
                     this is not a torn write: committed transactions are damaged; `riffle log \
                     repair` drops them explicitly and reports the group offsets lost with them",
                    txn.lock_path.display()
                ),
            });
        }
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

/// The error for a journal (`path`) of `len` bytes whose first `claim` bytes were committed, as
/// `lock` (`txn/lock`) says: it was deleted or cut, and the transactions there with it.
fn journal_lost(path: &Path, lock: &Path, len: u64, claim: u64) -> Error {
    let what = if len == 0 {
        "is missing or empty".to_owned()
    } else {
        format!("holds {len} bytes")
    };
    Error::Corrupt {
        path: path.to_path_buf(),
        position: len,
        reason: format!(
            "the transaction journal {what}, but its first {claim} bytes were committed \
             (fsynced; {} says so): it was deleted or cut, and the committed transactions there \
             (their group offsets, not yet in the groups' files) are lost; `riffle log repair` \
             acknowledges the loss explicitly (the groups go on from the offsets in their files)",
            lock.display()
        ),
    }
}
