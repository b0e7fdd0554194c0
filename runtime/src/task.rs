//! A stream task: one sub-topology instantiated for one partition, with its input queues and
//! stores.
//!
//! A task's stores ([`TaskStores`]) are plain owned data, so they can be lent to the state updater
//! while it restores them; the processor nodes are built on the stream thread once the task is
//! RUNNING. A task processes the records of its input partitions in timestamp order (the head with
//! the smallest timestamp first).

use std::collections::VecDeque;
use std::path::Path;

use riffle_log::{FetchedBatch, Record, RecordIter, TopicPartition};
use riffle_state_dir::{ChangelogPartition, Checkpoint, StateDirectory, TaskId};

use crate::backend::Backend;
use crate::collector::{RecordCollector, TopicTable};
use crate::error::Result;
use crate::node::{FlushRef, ProcessingContext, Scratch, SourceRef};
use crate::store::{CachedStore, InMemoryKeyValueStore, KeyValueStore, PersistentKeyValueStore};
use crate::topology::{SubtopologyDef, Topology, changelog_topic};

/// A changelog partition a task writes, with the offset its store reflects.
pub(crate) struct ChangelogState {
    pub(crate) store: usize,
    pub(crate) topic: usize,
    pub(crate) partition: ChangelogPartition,
    /// The changelog end offset the store reflects (restored or written up to).
    pub(crate) offset: u64,
}

/// The stores of one task and where their changelogs stand.
pub(crate) struct TaskStores {
    pub(crate) id: TaskId,
    pub(crate) stores: Vec<CachedStore>,
    pub(crate) changelogs: Vec<ChangelogState>,
    /// The changelog offset sum at the last checkpoint written.
    checkpointed_sum: Option<i64>,
    /// Changelog records restored into the stores and not yet counted in metrics.
    pub(crate) restored_records: u64,
}

impl TaskStores {
    /// Opens the stores of `sub` for task `id`. Persistent stores start from their checkpoint; a
    /// persistent store without a valid checkpoint is wiped and restored from the changelog start.
    pub(crate) fn open(
        id: TaskId,
        topology: &Topology,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        state_dir: &StateDirectory,
    ) -> Result<TaskStores> {
        let has_persistent = sub.stores.iter().any(|&s| topology.stores[s].persistent);
        let checkpoint = if has_persistent {
            state_dir.task_dir(id)?;
            match state_dir.read_checkpoint(id) {
                Ok(cp) => cp,
                Err(e) => {
                    tracing::warn!(task = %id, error = %e, "unreadable checkpoint: restoring the task's stores from their changelogs");
                    None
                }
            }
        } else {
            None
        };
        let mut stores = Vec::new();
        let mut changelogs = Vec::new();
        for &s in &sub.stores {
            let def = &topology.stores[s];
            let changelog = if def.logged {
                topics.index_of(&changelog_topic(application_id, &def.name))
            } else {
                None
            };
            let mut inner: Box<dyn KeyValueStore> = if def.persistent {
                let dir = state_dir.task_dir_path(id).join("fjall").join(&def.name);
                Box::new(PersistentKeyValueStore::open(&def.name, Path::new(&dir))?)
            } else {
                Box::new(InMemoryKeyValueStore::new(&def.name))
            };
            if let Some(topic) = changelog {
                let partition = ChangelogPartition::new(&**topics.name(topic), id.partition);
                let checkpointed = checkpoint.as_ref().and_then(|cp| cp.get(&partition));
                let offset = match checkpointed {
                    Some(offset) if inner.is_persistent() => offset,
                    _ => {
                        if inner.is_persistent() && inner.approximate_len() > 0 {
                            tracing::info!(task = %id, store = %def.name, "no checkpoint for a non-empty store: wiping it to restore from the changelog");
                            inner.wipe()?;
                        }
                        0
                    }
                };
                changelogs.push(ChangelogState {
                    store: stores.len(),
                    topic,
                    partition,
                    offset,
                });
            }
            stores.push(CachedStore::new(inner));
        }
        let checkpointed_sum = checkpoint.map(|cp| cp.offset_sum());
        Ok(TaskStores {
            id,
            stores,
            changelogs,
            checkpointed_sum,
            restored_records: 0,
        })
    }

    /// Stores assembled by hand, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(
        id: TaskId,
        stores: Vec<CachedStore>,
        changelogs: Vec<ChangelogState>,
    ) -> Self {
        TaskStores {
            id,
            stores,
            changelogs,
            checkpointed_sum: None,
            restored_records: 0,
        }
    }

    /// Whether any store keeps its data across restarts (then checkpoints are written).
    pub(crate) fn has_persistent_stores(&self) -> bool {
        self.changelogs
            .iter()
            .any(|c| self.stores[c.store].inner.is_persistent())
    }

    /// Writes a checkpoint of the changelog positions if they moved enough (or `force`), after
    /// making the stores durable.
    pub(crate) fn maybe_checkpoint(
        &mut self,
        state_dir: &StateDirectory,
        delta: u64,
        force: bool,
    ) -> Result<()> {
        if !self.has_persistent_stores() {
            return Ok(());
        }
        let checkpoint: Checkpoint = self
            .changelogs
            .iter()
            .filter(|c| self.stores[c.store].inner.is_persistent())
            .map(|c| (c.partition.clone(), c.offset))
            .collect();
        let sum = checkpoint.offset_sum();
        let moved = self
            .checkpointed_sum
            .map_or(i64::MAX, |last| sum.saturating_sub(last));
        if moved == 0 || (!force && moved < i64::try_from(delta).unwrap_or(i64::MAX)) {
            return Ok(());
        }
        for store in &mut self.stores {
            store.inner.flush()?;
        }
        state_dir.write_checkpoint(self.id, &checkpoint)?;
        self.checkpointed_sum = Some(sum);
        Ok(())
    }

    /// Applies `count` restored changelog records of `partition` to its store, given as the
    /// writes they amount to: ascending keys, each once.
    pub(crate) fn apply_restored(
        &mut self,
        partition: &ChangelogPartition,
        records: &mut dyn Iterator<Item = (&[u8], Option<&[u8]>)>,
        next_offset: u64,
        count: u64,
    ) -> Result<()> {
        if let Some(c) = self
            .changelogs
            .iter_mut()
            .find(|c| &c.partition == partition)
        {
            self.stores[c.store].inner.restore_sorted(records)?;
            self.restored_records += count;
            c.offset = next_offset;
        }
        Ok(())
    }
}

/// One input partition of a task.
struct PartitionQueue {
    tp: TopicPartition,
    source: SourceRef,
    /// The next offset to fetch.
    fetch_position: u64,
    batches: VecDeque<FetchedBatch>,
    current: Option<RecordIter>,
    head: Option<Record>,
    /// The next offset to process: what a commit records.
    consumed: u64,
}

impl PartitionQueue {
    /// Loads the next record to process into `head`, if one is buffered.
    fn fill_head(&mut self) -> Result<()> {
        while self.head.is_none() {
            if let Some(iter) = &mut self.current {
                match iter.next() {
                    Some(Ok(record)) => {
                        if record.offset() >= self.consumed {
                            self.head = Some(record);
                        }
                        continue;
                    }
                    Some(Err(e)) => return Err(e.into()),
                    None => self.current = None,
                }
            }
            match self.batches.pop_front() {
                Some(batch) => self.current = Some(batch.records()),
                None => return Ok(()),
            }
        }
        Ok(())
    }
}

/// One sub-topology × partition, RUNNING on a stream thread.
pub(crate) struct StreamTask {
    pub(crate) id: TaskId,
    inputs: Vec<PartitionQueue>,
    flushes: Vec<FlushRef>,
    pub(crate) stores: TaskStores,
    /// Records processed since the last commit.
    pub(crate) uncommitted: u64,
}

impl StreamTask {
    /// Builds the task's nodes over its (restored) stores and positions its inputs at the
    /// committed offsets.
    pub(crate) fn create(
        stores: TaskStores,
        topology: &Topology,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        backend: &dyn Backend,
    ) -> Result<StreamTask> {
        let id = stores.id;
        let mut store_slots = vec![None; topology.stores.len()];
        for (slot, &s) in sub.stores.iter().enumerate() {
            store_slots[s] = Some(slot);
        }
        let instance = topology.instantiate(sub, topics, application_id, &store_slots);
        let mut inputs = Vec::with_capacity(instance.sources.len());
        for (topic, source) in instance.sources {
            let tp = topics.topic_partition(topic, id.partition);
            let committed = backend.committed_offset(application_id, &tp)?.unwrap_or(0);
            inputs.push(PartitionQueue {
                tp,
                source,
                fetch_position: committed,
                batches: VecDeque::new(),
                current: None,
                head: None,
                consumed: committed,
            });
        }
        Ok(StreamTask {
            id,
            inputs,
            flushes: instance.flushes,
            stores,
            uncommitted: 0,
        })
    }

    /// The task's input partitions, in input order (an input's index is its position here).
    pub(crate) fn input_partitions(&self) -> Vec<TopicPartition> {
        self.inputs.iter().map(|i| i.tp.clone()).collect()
    }

    /// Fetches more records for input `index` unless it has enough buffered. Returns whether it
    /// has data to process (fetched now or buffered before); `false` means the fetch found
    /// nothing new.
    pub(crate) fn fetch_input(
        &mut self,
        index: usize,
        backend: &dyn Backend,
        max_bytes: usize,
    ) -> Result<bool> {
        let Some(input) = self.inputs.get_mut(index) else {
            return Ok(false);
        };
        if input.batches.len() >= 2 {
            return Ok(true);
        }
        let batches = backend.fetch(&input.tp, input.fetch_position, max_bytes)?;
        let Some(last) = batches.last() else {
            return Ok(false);
        };
        input.fetch_position = last.last_offset() + 1;
        input.batches.extend(batches);
        Ok(true)
    }

    fn context<'a>(
        &'a mut self,
        collector: &'a mut RecordCollector,
        scratch: &'a mut Scratch,
        timestamp: i64,
    ) -> ProcessingContext<'a> {
        ProcessingContext {
            task: self.id,
            timestamp,
            stores: &mut self.stores.stores,
            collector,
            scratch,
        }
    }

    /// Processes up to `max` buffered records; returns how many it processed.
    pub(crate) fn process(
        &mut self,
        max: usize,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<usize> {
        let mut done = 0;
        while done < max {
            let mut next: Option<(usize, i64)> = None;
            for (i, input) in self.inputs.iter_mut().enumerate() {
                input.fill_head()?;
                if let Some(head) = &input.head
                    && next.is_none_or(|(_, ts)| head.timestamp() < ts)
                {
                    next = Some((i, head.timestamp()));
                }
            }
            let Some((i, _)) = next else { break };
            let Some(record) = self.inputs[i].head.take() else {
                break;
            };
            let source = self.inputs[i].source.clone();
            let mut ctx = self.context(collector, scratch, record.timestamp());
            source.borrow_mut().process(&mut ctx, &record)?;
            self.inputs[i].consumed = record.offset() + 1;
            done += 1;
        }
        self.uncommitted += done as u64;
        Ok(done)
    }

    /// Whether records are fetched but not yet processed.
    pub(crate) fn has_buffered(&self) -> bool {
        self.inputs
            .iter()
            .any(|i| i.head.is_some() || i.current.is_some() || !i.batches.is_empty())
    }

    /// Bytes held by the task's store caches.
    pub(crate) fn cache_bytes(&self) -> usize {
        self.stores
            .stores
            .iter()
            .map(CachedStore::cache_bytes)
            .sum()
    }

    /// Commit, phase 1a: stateful nodes forward their cached updates downstream.
    pub(crate) fn flush_nodes(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let flushes = std::mem::take(&mut self.flushes);
        let mut result = Ok(());
        for node in &flushes {
            let mut ctx = self.context(collector, scratch, 0);
            result = node.borrow_mut().flush(&mut ctx);
            if result.is_err() {
                break;
            }
        }
        self.flushes = flushes;
        result
    }

    /// Commit, phase 1b: every cached store entry goes to its changelog.
    pub(crate) fn write_changelogs(&mut self, collector: &mut RecordCollector) -> Result<()> {
        let partition = self.id.partition;
        for changelog in &self.stores.changelogs {
            let store = &self.stores.stores[changelog.store];
            for i in 0..store.dirty_len() {
                let (key, value, timestamp) = store.dirty(i);
                collector.send(changelog.topic, partition, timestamp, Some(key), value)?;
            }
        }
        Ok(())
    }

    /// Commit, phase 1c: the input offsets to commit.
    pub(crate) fn committable_offsets(&self, out: &mut Vec<(TopicPartition, u64)>) {
        for input in &self.inputs {
            out.push((input.tp.clone(), input.consumed));
        }
    }

    /// Commit, phase 2 (after the commit is durable): the caches go to the stores, and the
    /// changelog positions move to what the collector appended.
    pub(crate) fn committed(&mut self, collector: &RecordCollector) -> Result<()> {
        for store in &mut self.stores.stores {
            store.write_to_store()?;
        }
        for changelog in &mut self.stores.changelogs {
            if let Some(end) = collector.end_offset(changelog.topic, self.id.partition) {
                changelog.offset = changelog.offset.max(end);
            }
        }
        self.uncommitted = 0;
        Ok(())
    }

    /// Drops what was processed since the last commit: the caches' writes never reach the
    /// stores (the stores stay at the last commit), and the inputs rewind to the committed
    /// offsets.
    pub(crate) fn into_stores(mut self) -> TaskStores {
        for store in &mut self.stores.stores {
            store.discard();
        }
        self.stores
    }
}
