//! Durability and committed offsets: fsyncing the partitions with unsynced appends (or
//! all of them, [`Log::sync`]), and the consumer groups' offsets, committed and read under
//! the transaction lock.
//!
//! It must never write a group's offsets before the data they point at is durable (under
//! [`FsyncPolicy::EveryCommit`]), nor fsync a partition before the transaction journal in
//! [`Log::sync`] (the write-ahead rule, log/FORMAT.md, *Writing a transaction*).

use std::sync::Arc;

use super::{Log, lock, poisoned_topics};
use crate::error::{Error, Result};
use crate::group::GroupMember;
use crate::names::validate_name;
use crate::options::FsyncPolicy;
use crate::partition::Partition;
use crate::topic::Topic;
use crate::txn::TxnState;
use riffle_record::TopicPartition;

impl Log {
    /// Fsyncs every partition that has unsynced plain appends.
    pub(crate) fn sync_unsynced(&self) -> Result<()> {
        let pending = std::mem::take(&mut *lock(
            &self.shared.unsynced,
            &"the unsynced-partition list",
        )?);
        for (i, tp) in pending.iter().enumerate() {
            if let Err(e) = self.with_partition(tp, Partition::sync) {
                // Keep the rest listed so a later commit syncs them.
                let rest = pending.get(i..).unwrap_or_default();
                lock(&self.shared.unsynced, &"the unsynced-partition list")?
                    .extend_from_slice(rest);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Durable consumer-group offsets. Under [`FsyncPolicy::EveryCommit`], fsyncs every partition
    /// with unsynced appends first, then writes the group's offsets durably (temp file, fsync,
    /// rename, directory fsync). Offsets of partitions not named are kept. If transactions
    /// committed offsets of this group since the last checkpoint, a checkpoint runs first (so
    /// replaying the journal can never roll these offsets back).
    pub fn commit_offsets(&self, group: &str, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        self.commit_offsets_fenced(group, None, offsets)
    }

    /// [`commit_offsets`](Self::commit_offsets) as `member` of a group of processes
    /// ([`Log::group`]): [`Error::Fenced`] and nothing written if the member was declared gone;
    /// it cannot be declared gone while the commit writes.
    pub fn commit_offsets_as(
        &self,
        group: &str,
        member: &GroupMember,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        self.commit_offsets_fenced(group, Some(member), offsets)
    }

    fn commit_offsets_fenced(
        &self,
        group: &str,
        member: Option<&GroupMember>,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        validate_name(group, false)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("commit offsets of group {group:?}"),
            });
        }
        for (tp, _) in offsets {
            self.topic(tp)?;
        }
        let mut txn = self.txn_lock(true)?;
        let _fence = member.map(GroupMember::fence).transpose()?;
        if lock(&self.shared.groups, &"the group offsets")?.is_pending(group) {
            self.checkpoint(&mut txn)?;
        }
        if self.shared.options.fsync == FsyncPolicy::EveryCommit {
            let _syncing = lock(&self.shared.syncing, &"the sync lock")?;
            self.sync_unsynced()?;
        }
        // Bumped before the file is written: should this process die in between, the others
        // drop their cached copy rather than write over this one's offsets.
        txn.files_changed()?;
        let created = {
            let mut groups = lock(&self.shared.groups, &"the group offsets")?;
            groups.generation = txn.generation();
            groups.commit(&self.shared.storage, &self.shared.root, group, offsets)?;
            groups.take_created()
        };
        // After the file is durable: from now on its absence is lost offsets.
        txn.register_groups(created)
    }

    /// Every offset the group committed, by topic-partition (as committed by any process).
    pub fn committed_offsets(&self, group: &str) -> Result<Vec<(TopicPartition, u64)>> {
        validate_name(group, false)?;
        let _txn = self.txn_lock(false)?;
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        let all = groups.all(&self.shared.storage, &self.shared.root, group)?;
        Ok(all.into_iter().collect())
    }

    /// The group's committed offset for `tp`, `None` if it never committed one (as committed
    /// by any process: read under the shared transaction lock).
    pub fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        validate_name(group, false)?;
        let _txn = self.txn_lock(false)?;
        let mut groups = lock(&self.shared.groups, &"the group offsets")?;
        groups.get(&self.shared.storage, &self.shared.root, group, tp)
    }

    /// Fsyncs every partition (whatever the policy), and before them the transaction journal;
    /// then records the journal's length as committed (log/FORMAT.md, *Committed length*), so
    /// that damage to what was synced is an error, never a torn tail cut silently (under
    /// [`FsyncPolicy::Never`] no transaction records it).
    pub fn sync(&self) -> Result<()> {
        if self.shared.options.read_only {
            return Ok(());
        }
        {
            let mut txn = lock(&self.shared.journal, &"the transaction journal")?;
            self.sync_all(&mut txn)?;
        }
        // Briefly, under the exclusive transaction lock: other processes' transactions wait
        // for this, not for the partitions' fsyncs above.
        let mut txn = self.txn_lock(true)?;
        txn.claim_whole_journal(&self.shared.storage)
    }

    /// [`sync`](Self::sync) for a caller that holds the journal lock.
    pub(crate) fn sync_all(&self, txn: &mut TxnState) -> Result<()> {
        // Write-ahead: a transaction's record is durable before any of its batches is.
        txn.journal.sync(&self.shared.storage)?;
        let _syncing = lock(&self.shared.syncing, &"the sync lock")?;
        let topics: Vec<Arc<Topic>> = {
            let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
            topics.by_name.values().cloned().collect()
        };
        let pending = std::mem::take(&mut *lock(
            &self.shared.unsynced,
            &"the unsynced-partition list",
        )?);
        let result = topics
            .iter()
            .flat_map(|t| &t.partitions)
            .try_for_each(|partition| {
                let mut p = partition.lock().map_err(|_| Error::Poisoned {
                    what: "a partition".into(),
                })?;
                p.sync()
            });
        if result.is_err() {
            // Keep them listed so a later commit syncs them (syncing a synced one is cheap).
            lock(&self.shared.unsynced, &"the unsynced-partition list")?.extend(pending);
        }
        result
    }
}
