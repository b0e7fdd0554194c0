//! Exactly-once: [`Log::commit_transaction`] makes a set of batches (in any partitions) and a
//! group's offsets durable and visible as one unit, through the redo journal of `journal.rs`.
//!
//! The protocol, in order, all under the journal's lock (the transaction lock):
//! 1. lock the transaction's partitions in [`TopicPartition`] order and compute each batch's base
//!    offset from the partition's end (the locks are held until the batches are written, so no
//!    other writer can take those offsets);
//! 2. seal every batch (the bytes `append` would write) and write one checksummed journal record
//!    holding them and the offsets; fsync it — **the commit point** (no fsync under
//!    [`FsyncPolicy::Never`]);
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
//! else is an inconsistency ([`Error::Corrupt`] naming the journal and the record's position).
//! Then it checkpoints.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use crate::error::{Error, IoContext, Result};
use crate::journal::{self, Journal};
use crate::log::{Log, lock};
use crate::names::validate_name;
use crate::options::FsyncPolicy;
use crate::partition::Partition;
use crate::storage::StorageFile;
use crate::topic::Topic;
use riffle_record::BatchBuilder;
use riffle_record::TopicPartition;

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
    /// Appends every batch and commits `group`'s offsets as one transaction: after a crash at
    /// any point, either all of it is durable and visible, or none of it is. Readers never see
    /// a transaction's batches before it committed. Returns each batch's base offset, in order,
    /// and clears the builders (empty builders are skipped: their base offset is the
    /// partition's end).
    ///
    /// Cost: one journal fsync (none under [`FsyncPolicy::Never`]), plus one fsync per written
    /// partition that holds plain (non-transactional) appends not yet durable — the
    /// transaction's offsets depend on them. Under [`FsyncPolicy::EveryCommit`] partitions with
    /// unsynced plain appends are synced first, as [`commit_offsets`](Self::commit_offsets)
    /// does. Every [`LogOptions::txn_journal_bytes`](crate::LogOptions::txn_journal_bytes) of
    /// journal, a checkpoint fsyncs every partition and the pending group files.
    ///
    /// On an error before the commit point nothing was written and the builders keep their
    /// records. An error after it (a partition write failing) means the transaction did commit:
    /// the builders are cleared, the partition is poisoned, and reopening the log puts the
    /// batch in place from the journal. A failed journal fsync leaves the outcome unknown until
    /// the log is reopened; until then the journal and the transaction's partitions refuse
    /// work.
    ///
    /// ```
    /// use riffle_log::{BatchBuilder, Compression, Log, TopicPartition};
    ///
    /// # fn main() -> riffle_log::Result<()> {
    /// let log = Log::in_memory();
    /// log.create_topic("input", 1)?;
    /// log.create_topic("counts", 2)?;
    /// log.create_topic("app-store-changelog", 2)?;
    /// let mut output = BatchBuilder::new(Compression::Lz4);
    /// let mut changelog = BatchBuilder::default();
    /// output.push(1_700_000_000_000, Some(b"alice"), Some(b"3"));
    /// changelog.push(1_700_000_000_000, Some(b"alice"), Some(b"3"));
    /// // The output, the store's changelog and the input position commit together.
    /// let bases = log.commit_transaction(
    ///     "app",
    ///     &mut [
    ///         (TopicPartition::new("counts", 1), &mut output),
    ///         (TopicPartition::new("app-store-changelog", 1), &mut changelog),
    ///     ],
    ///     &[(TopicPartition::new("input", 0), 42)],
    /// )?;
    /// assert_eq!(bases, vec![0, 0]);
    /// assert!(output.is_empty() && changelog.is_empty()); // ready for the next commit
    /// assert_eq!(log.committed_offset("app", &TopicPartition::new("input", 0))?, Some(42));
    /// # Ok(())
    /// # }
    /// ```
    pub fn commit_transaction(
        &self,
        group: &str,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        validate_name(group, false)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("commit a transaction of group {group:?}"),
            });
        }
        for (tp, _) in offsets {
            self.topic(tp)?;
        }
        let shared = &self.shared;
        let mut txn = self.txn_lock(true)?;
        if shared.options.fsync == FsyncPolicy::EveryCommit {
            // A committed offset never points past durable data, as with `commit_offsets`.
            let _syncing = lock(&shared.syncing, &"the sync lock")?;
            self.sync_unsynced()?;
        }

        let mut tps: Vec<TopicPartition> = batches.iter().map(|(tp, _)| tp.clone()).collect();
        tps.sort();
        tps.dedup();
        let topics = tps
            .iter()
            .map(|tp| self.topic(tp))
            .collect::<Result<Vec<Arc<Topic>>>>()?;
        let mut partitions = LockedPartitions(Vec::with_capacity(tps.len()));
        for (tp, topic) in tps.iter().zip(&topics) {
            let partition = topic.partitions.get(tp.partition as usize).ok_or_else(|| {
                Error::UnknownPartition {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                }
            })?;
            let mut p = lock(partition, tp)?;
            // Under the transaction lock no transaction is in flight: a mark is stale.
            p.lock_for_write(true)?;
            partitions.0.push(p);
            let Some(p) = partitions.0.last_mut() else {
                continue;
            };
            if p.unsynced {
                // Write-ahead: earlier transactions' records before their batches (`Never`).
                txn.journal.sync(&shared.storage)?;
                // Plain appends ahead of this transaction's batches must not be lost while the
                // batches survive in the journal: their base offsets count on them.
                p.sync()?;
            }
        }
        let mut ends: Vec<u64> = partitions.0.iter().map(|p| p.end_offset()).collect();

        let mut bases = Vec::with_capacity(batches.len());
        let mut sealed: Vec<(usize, &TopicPartition, u64, u64, &[u8])> = Vec::new();
        for (tp, builder) in batches.iter_mut() {
            let i = tps.binary_search(tp).unwrap_or_default();
            let Some(end) = ends.get_mut(i) else { continue };
            bases.push(*end);
            if builder.is_empty() {
                continue;
            }
            let (base, count) = (*end, builder.len() as u64);
            let tp: &TopicPartition = tp;
            sealed.push((
                i,
                tp,
                base,
                count,
                builder.seal(tp, riffle_record::Placement::at(base))?,
            ));
            *end += count;
        }
        if sealed.is_empty() && offsets.is_empty() {
            return Ok(bases);
        }
        let cross_process = shared.storage.shared_between_processes();
        if cross_process {
            // Should this process die from here until the marks are cleared, the next writer of
            // these partitions (or the next transaction) recovers the journal first.
            txn.write_in_flight(true)?;
            for p in partitions.0.iter_mut() {
                p.set_txn_mark()?;
            }
        }
        let records: Vec<_> = sealed
            .iter()
            .map(|&(_, tp, b, _, bytes)| (tp, b, bytes))
            .collect();
        let state = &mut *txn;
        journal::encode(&mut state.journal.buf, group, &records, offsets)?;
        let sync = shared.options.fsync != FsyncPolicy::Never;
        if let Err(e) = state.journal.commit(&shared.storage, sync) {
            if state.journal.is_poisoned() {
                // The record may be durable: nothing may take these offsets before recovery
                // decides whether the transaction committed (the marks stay set).
                partitions.0.iter_mut().for_each(|p| p.poison());
            } else if cross_process {
                for p in partitions.0.iter_mut() {
                    p.clear_txn_mark()?;
                }
                txn.write_in_flight(false)?;
            }
            return Err(e);
        }

        // Committed. Every step from here is redone by recovery if it does not happen now.
        let mut failed = None;
        for &(i, tp, base, count, bytes) in &sealed {
            let Some(p) = partitions.0.get_mut(i) else {
                continue;
            };
            if let Err(e) = p.write_sealed(bytes, base, count) {
                tracing::error!(%tp, offset = base, error = %e, "a committed transaction's batch could not be written; the partition refuses work until the log is reopened and recovers it from the journal");
                p.poison();
                failed.get_or_insert(e);
            }
        }
        let journal_len = txn.journal.len();
        {
            let mut groups = lock(&shared.groups, &"the group offsets")?;
            groups.apply(group, offsets, tps.iter());
            groups.journal_len = journal_len;
        }
        if cross_process && failed.is_none() {
            for p in partitions.0.iter_mut() {
                p.clear_txn_mark()?;
            }
            txn.write_in_flight(false)?;
        }
        drop(partitions);
        let appended: Vec<TopicPartition> = sealed.iter().map(|&(_, tp, ..)| tp.clone()).collect();
        for (_, builder) in batches.iter_mut() {
            builder.clear();
        }
        self.notify_append(&appended);
        if let Some(e) = failed {
            return Err(e);
        }
        if txn.journal.len() > shared.options.txn_journal_bytes {
            let checkpointed = self.checkpoint(&mut txn);
            if let Err(e) = checkpointed {
                // The transaction is durable; the next transaction tries the checkpoint again.
                tracing::warn!(file = %txn.journal.path.display(), error = %e, "transaction journal checkpoint failed");
            }
        }
        Ok(bases)
    }

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

    /// A transaction's mark was found on `tp` by a plain append: recover the journal under the
    /// transaction lock, then clear the (now stale) mark.
    pub(crate) fn recover_dead_transaction(&self, tp: &TopicPartition) -> Result<()> {
        let guard = self.txn_lock(true)?;
        // The mark may outlive the in-flight flag (that write is not fsynced): replay anyway.
        self.replay_journal(&guard)?;
        self.with_partition(tp, |p| {
            p.lock_for_write(true)?;
            let cleared = p.clear_txn_mark();
            p.unlock();
            cleared
        })?;
        drop(guard);
        Ok(())
    }

    /// Makes the journal's transactions durable without it — every partition fsynced (those
    /// other processes' transactions wrote too), pending group offsets written — then empties
    /// it. The caller holds the transaction lock (exclusive).
    pub(crate) fn checkpoint(&self, txn: &mut TxnGuard<'_>) -> Result<()> {
        let shared = &self.shared;
        self.sync_all(txn)?;
        let others: Vec<TopicPartition> = lock(&shared.groups, &"the group offsets")?
            .journal_partitions
            .iter()
            .cloned()
            .collect();
        for tp in &others {
            self.with_partition(tp, Partition::sync)?;
        }
        let pending = lock(&shared.groups, &"the group offsets")?.any_pending();
        let emptied = txn.journal.refresh(&shared.storage)? > 0;
        if pending || emptied {
            // Before any file changes: a process that dies in between leaves the others
            // dropping their caches, never trusting a stale one.
            txn.files_changed()?;
            let generation = txn.generation;
            lock(&shared.groups, &"the group offsets")?.generation = generation;
        }
        lock(&shared.groups, &"the group offsets")?.flush_pending(&shared.storage, &shared.root)?;
        txn.journal.clear(&shared.storage)?;
        lock(&shared.groups, &"the group offsets")?.journal_cleared();
        Ok(())
    }

    /// Puts every journaled batch in its partition (see the module docs): those of a
    /// transaction whose process died after the commit point, or lost in a crash. The caller
    /// holds the transaction lock (exclusive). Returns how many transactions the journal has.
    fn replay_journal(&self, txn: &TxnGuard<'_>) -> Result<usize> {
        let shared = &self.shared;
        let path = txn.journal.path.clone();
        let bytes = match shared.storage.read(&path) {
            Ok(Some(bytes)) if !bytes.is_empty() => bytes,
            Ok(_) => return Ok(0),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let replay = journal::decode(&path, &bytes)?;
        if let Some((position, reason)) = &replay.torn {
            tracing::warn!(
                file = %path.display(),
                position,
                %reason,
                "dropping the torn tail of transaction journal {} at byte {position} ({} bytes, no intact record among them: the last record's write did not finish): {reason}",
                path.display(),
                bytes.len() as u64 - position
            );
        }
        for t in &replay.txns {
            for b in &t.batches {
                let inconsistent = |reason: String| Error::Corrupt {
                    path: path.clone(),
                    position: t.position,
                    reason: format!(
                        "transaction of group {:?}: its batch for {} at offset {} {reason}",
                        t.group, b.tp, b.base
                    ),
                };
                // A compacted topic's cleaner may have rewritten the batch since (the journal
                // keeps it until a checkpoint): the partition reaching past it is all that can
                // be checked there.
                let compacted = self
                    .load_topic(&b.tp.topic)?
                    .is_some_and(|t| t.config.cleanup_policy.compacts());
                let written = self.with_partition(&b.tp, |p| {
                    p.lock_for_write(true)?;
                    let result = (|| {
                        let end = p.end_offset();
                        if end == b.base {
                            return p.write_sealed(&b.bytes, b.base, b.count);
                        }
                        if end < b.base + b.count {
                            return Err(inconsistent(format!(
                                "cannot go where the partition ends ({end})"
                            )));
                        }
                        // Written, then deleted below the start offset (retention, a purge)
                        // or rewritten by compaction: nothing left to compare.
                        if compacted || b.base < p.latest_start_offset()? {
                            return Ok(());
                        }
                        let stored = p.fetch(b.base, 1)?;
                        match stored.first() {
                            Some(s) if s.header.base_offset == b.base && s.header.crc == b.crc => {
                                Ok(())
                            }
                            _ => Err(inconsistent(
                                "differs from the batch the partition holds there".to_owned(),
                            )),
                        }
                    })();
                    p.unlock();
                    result
                });
                written.map_err(|e| match e {
                    Error::UnknownTopic { .. } | Error::UnknownPartition { .. } => {
                        inconsistent(format!("names a partition the log does not have ({e})"))
                    }
                    e => e,
                })?;
            }
        }
        Ok(replay.txns.len())
    }

    /// Replays the journal after the partitions were opened (see the module docs), under the
    /// transaction lock, then checkpoints.
    pub(crate) fn recover_journal(&self) -> Result<()> {
        let mut txn = self.txn_lock(true)?;
        let replayed = self.replay_journal(&txn)?;
        if shared_is_memory(self) {
            // A file-backed log has them already: `txn_lock` parsed the journal.
            self.apply_journal_offsets(&txn)?;
        }
        self.checkpoint(&mut txn)?;
        if replayed > 0 {
            tracing::info!(file = %txn.journal.path.display(), transactions = replayed, "replayed the transaction journal");
        }
        Ok(())
    }

    /// On a memory log (no cross-process view), applies the journal's offsets on open.
    fn apply_journal_offsets(&self, txn: &TxnGuard<'_>) -> Result<()> {
        let shared = &self.shared;
        let path = txn.journal.path.clone();
        let Some(bytes) = shared.storage.read(&path).at(&path)? else {
            return Ok(());
        };
        let replay = journal::decode(&path, &bytes)?;
        let mut groups = lock(&shared.groups, &"the group offsets")?;
        for t in &replay.txns {
            groups.apply(&t.group, &t.offsets, t.batches.iter().map(|b| &b.tp));
        }
        Ok(())
    }
}

fn shared_is_memory(log: &Log) -> bool {
    !log.shared.storage.shared_between_processes()
}

/// Partitions locked (mutex and OS lock) for a transaction, in order; unlocked on drop.
struct LockedPartitions<'a>(Vec<MutexGuard<'a, Partition>>);

impl Drop for LockedPartitions<'_> {
    fn drop(&mut self) {
        for p in self.0.iter_mut() {
            p.unlock();
        }
    }
}
