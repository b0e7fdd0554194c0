//! [`Log::commit_transaction`]: the protocol of the module docs in `mod.rs`, steps 1 to 4 — the
//! partitions locked in order, the batches sealed at their offsets, the journal record written
//! and fsynced (the commit point), then the batches and offsets applied.

use std::sync::{Arc, MutexGuard};

use crate::error::{Error, Result};
use crate::group::GroupMember;
use crate::journal;
use crate::log::{Log, lock};
use crate::names::validate_name;
use crate::options::FsyncPolicy;
use crate::partition::Partition;
use crate::topic::Topic;
use riffle_record::BatchBuilder;
use riffle_record::TopicPartition;

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
        self.commit_transaction_fenced(group, None, batches, offsets)
    }

    /// [`commit_transaction`](Self::commit_transaction) as `member` of a group of processes
    /// ([`Log::group`]): if the member was declared gone, [`Error::Fenced`] and nothing is
    /// written (the transaction is aborted: its batches are left to the caller to drop); it
    /// cannot be declared gone while the transaction writes.
    pub fn commit_transaction_as(
        &self,
        group: &str,
        member: &GroupMember,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        self.commit_transaction_fenced(group, Some(member), batches, offsets)
    }

    fn commit_transaction_fenced(
        &self,
        group: &str,
        member: Option<&GroupMember>,
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
        let _fence = member.map(GroupMember::fence).transpose()?;
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

        if sync {
            // The record is durable: from now on the journal's shortening is lost transactions.
            let len = txn.journal.len();
            if let Err(e) = txn.claim_journal(len) {
                tracing::warn!(file = %txn.journal.path.display(), error = %e, "recording the transaction journal's committed length in txn/lock failed (the transaction is committed)");
            }
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
