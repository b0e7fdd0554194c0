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
//! partition already holds is checked and kept, anything else is an inconsistency
//! ([`Error::Corrupt`] naming the journal and the record's position). Then it checkpoints.

use std::sync::{Arc, MutexGuard};

use crate::batch::BatchBuilder;
use crate::error::{Error, Result};
use crate::journal::{self, Journal};
use crate::log::{Log, lock};
use crate::options::FsyncPolicy;
use crate::partition::Partition;
use crate::topic::Topic;
use crate::types::{TopicPartition, validate_name};

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
        for (tp, _) in offsets {
            self.topic(tp)?;
        }
        let shared = &self.shared;
        let mut journal = lock(&shared.journal, &"the transaction journal")?;
        if shared.options.fsync == FsyncPolicy::EveryCommit {
            // A committed offset never points past durable data, as with `commit_offsets`.
            let _syncing = lock(&shared.syncing, &"the sync lock")?;
            self.sync_unsynced()?;
        }
        // Load the group's offsets now, so applying them after the commit point cannot fail.
        lock(&shared.groups, &"the group offsets")?.group(&shared.storage, &shared.root, group)?;

        let mut tps: Vec<TopicPartition> = batches.iter().map(|(tp, _)| tp.clone()).collect();
        tps.sort();
        tps.dedup();
        let topics = tps
            .iter()
            .map(|tp| self.topic(tp))
            .collect::<Result<Vec<Arc<Topic>>>>()?;
        let mut partitions: Vec<MutexGuard<'_, Partition>> = Vec::with_capacity(tps.len());
        for (tp, topic) in tps.iter().zip(&topics) {
            let partition = topic.partitions.get(tp.partition as usize).ok_or_else(|| {
                Error::UnknownPartition {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                }
            })?;
            let mut p = lock(partition, tp)?;
            if p.unsynced {
                // Write-ahead: earlier transactions' records before their batches (`Never`).
                journal.sync(&shared.storage)?;
                // Plain appends ahead of this transaction's batches must not be lost while the
                // batches survive in the journal: their base offsets count on them.
                p.sync()?;
            }
            partitions.push(p);
        }
        let mut ends: Vec<u64> = partitions.iter().map(|p| p.end_offset()).collect();

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
            sealed.push((i, tp, base, count, builder.seal(tp, base)?));
            *end += count;
        }
        if sealed.is_empty() && offsets.is_empty() {
            return Ok(bases);
        }
        let records: Vec<_> = sealed
            .iter()
            .map(|&(_, tp, b, _, bytes)| (tp, b, bytes))
            .collect();
        let journal = &mut *journal;
        journal::encode(&mut journal.buf, group, &records, offsets)?;
        let sync = shared.options.fsync != FsyncPolicy::Never;
        if let Err(e) = journal.commit(&shared.storage, sync) {
            if journal.is_poisoned() {
                // The record may be durable: nothing may take these offsets before recovery
                // decides whether the transaction committed.
                partitions.iter_mut().for_each(|p| p.poison());
            }
            return Err(e);
        }

        // Committed. Every step from here is redone by recovery if it does not happen now.
        let mut failed = None;
        for &(i, tp, base, count, bytes) in &sealed {
            let Some(p) = partitions.get_mut(i) else {
                continue;
            };
            if let Err(e) = p.write_sealed(bytes, base, count) {
                tracing::error!(%tp, offset = base, error = %e, "a committed transaction's batch could not be written; the partition refuses work until the log is reopened and recovers it from the journal");
                p.poison();
                failed.get_or_insert(e);
            }
        }
        let applied = lock(&shared.groups, &"the group offsets")
            .and_then(|mut g| g.apply(&shared.storage, &shared.root, group, offsets));
        drop(partitions);
        for (_, builder) in batches.iter_mut() {
            builder.clear();
        }
        self.notify_append(batches.iter().map(|(tp, _)| tp));
        if let Some(e) = failed {
            return Err(e);
        }
        applied?;
        if journal.len() > shared.options.txn_journal_bytes {
            let checkpointed = self.checkpoint(journal);
            if let Err(e) = checkpointed {
                // The transaction is durable; the next transaction tries the checkpoint again.
                tracing::warn!(file = %journal.path.display(), error = %e, "transaction journal checkpoint failed");
            }
        }
        Ok(bases)
    }

    /// Makes the journal's transactions durable without it — every partition fsynced, pending
    /// group offsets written — then empties it. The caller holds the journal lock.
    pub(crate) fn checkpoint(&self, journal: &mut Journal) -> Result<()> {
        let shared = &self.shared;
        self.sync_all(journal)?;
        lock(&shared.groups, &"the group offsets")?.flush_pending(&shared.storage, &shared.root)?;
        journal.clear(&shared.storage)
    }

    /// Replays the journal after the partitions were opened (see the module docs).
    pub(crate) fn recover_journal(&self) -> Result<()> {
        let shared = &self.shared;
        let mut journal = lock(&shared.journal, &"the transaction journal")?;
        let path = journal.path.clone();
        let bytes = match shared.storage.read(&path) {
            Ok(Some(bytes)) if !bytes.is_empty() => bytes,
            Ok(_) => return Ok(()),
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
        for txn in &replay.txns {
            for b in &txn.batches {
                let inconsistent = |reason: String| Error::Corrupt {
                    path: path.clone(),
                    position: txn.position,
                    reason: format!(
                        "transaction of group {:?}: its batch for {} at offset {} {reason}",
                        txn.group, b.tp, b.base
                    ),
                };
                let written = self.with_partition(&b.tp, |p| {
                    let end = p.end_offset();
                    if end == b.base {
                        return p.write_sealed(&b.bytes, b.base, b.count);
                    }
                    if end < b.base + b.count {
                        return Err(inconsistent(format!(
                            "cannot go where the partition ends ({end})"
                        )));
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
                });
                written.map_err(|e| match e {
                    Error::UnknownTopic { .. } | Error::UnknownPartition { .. } => {
                        inconsistent(format!("names a partition the log does not have ({e})"))
                    }
                    e => e,
                })?;
            }
            lock(&shared.groups, &"the group offsets")?.apply(
                &shared.storage,
                &shared.root,
                &txn.group,
                &txn.offsets,
            )?;
        }
        self.checkpoint(&mut journal)?;
        if !replay.txns.is_empty() {
            tracing::info!(file = %path.display(), transactions = replay.txns.len(), "replayed the transaction journal");
        }
        Ok(())
    }
}
