//! Recovery and checkpoints: replaying the journal's intact records onto the partitions (on
//! open, after a process died in a transaction, or when a plain append finds a transaction's
//! mark), and the checkpoint that makes the journal's transactions durable without it and
//! empties it.

use super::TxnGuard;
use crate::error::{Error, IoContext, Result};
use crate::journal;
use crate::log::{Log, lock};
use crate::partition::Partition;
use riffle_record::TopicPartition;

impl Log {
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
        let created = {
            let mut groups = lock(&shared.groups, &"the group offsets")?;
            groups.flush_pending(&shared.storage, &shared.root)?;
            groups.take_created()
        };
        txn.register_groups(created)?;
        // Lowered before the journal is emptied: a crash in between leaves a claim the journal
        // still meets.
        txn.claim_journal(0)?;
        txn.journal.clear(&shared.storage)?;
        lock(&shared.groups, &"the group offsets")?.journal_cleared();
        Ok(())
    }

    /// Puts every journaled batch in its partition (see the module docs): those of a
    /// transaction whose process died after the commit point, or lost in a crash. The caller
    /// holds the transaction lock (exclusive). Returns how many transactions the journal has.
    pub(super) fn replay_journal(&self, txn: &TxnGuard<'_>) -> Result<usize> {
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
