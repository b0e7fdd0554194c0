//! A stream task: one sub-topology instantiated for one partition, with its input queues and
//! stores.
//!
//! A task processes the records of its input partitions in timestamp order (the head with the
//! smallest timestamp first). Its processor nodes live on the stream thread that built it; its
//! stores are plain owned data, so restoration can happen elsewhere.

use std::collections::VecDeque;

use riffle_log::{FetchedBatch, Record, RecordIter, TopicPartition};
use riffle_state_dir::TaskId;

use crate::backend::Backend;
use crate::collector::{RecordCollector, TopicTable};
use crate::error::{Error, Result};
use crate::node::{ProcessingContext, Scratch, SourceRef};
use crate::store::{InMemoryKeyValueStore, LoggedStore};
use crate::topology::{SubtopologyDef, Topology, changelog_topic};

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

/// A changelog partition a task writes, with the offset its store is known to reflect.
struct ChangelogState {
    store: usize,
    topic: usize,
    /// The changelog end offset the store reflects (restored or written up to).
    offset: Option<u64>,
}

/// One sub-topology × partition.
pub(crate) struct StreamTask {
    pub(crate) id: TaskId,
    inputs: Vec<PartitionQueue>,
    stores: Vec<LoggedStore>,
    changelogs: Vec<ChangelogState>,
    /// Records processed since the last commit.
    pub(crate) uncommitted: u64,
}

impl StreamTask {
    /// Builds the task's nodes and stores and positions its inputs at the committed offsets.
    pub(crate) fn create(
        id: TaskId,
        topology: &Topology,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        backend: &dyn Backend,
    ) -> Result<StreamTask> {
        let mut store_slots = vec![None; topology.stores.len()];
        let mut stores = Vec::new();
        let mut changelogs = Vec::new();
        for &s in &sub.stores {
            let def = &topology.stores[s];
            let changelog = if def.logged {
                topics.index_of(&changelog_topic(application_id, &def.name))
            } else {
                None
            };
            store_slots[s] = Some(stores.len());
            if let Some(topic) = changelog {
                changelogs.push(ChangelogState {
                    store: stores.len(),
                    topic,
                    offset: None,
                });
            }
            stores.push(LoggedStore::new(
                Box::new(InMemoryKeyValueStore::new(&def.name)),
                changelog,
            ));
        }
        let sources = topology.instantiate(sub, topics, application_id, &store_slots);
        let mut inputs = Vec::with_capacity(sources.len());
        for (topic, source) in sources {
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
            stores,
            changelogs,
            uncommitted: 0,
        })
    }

    /// Whether the task has stores with changelogs (and so reports an offset sum).
    pub(crate) fn changelog_partitions(&self, topics: &TopicTable) -> Vec<TopicPartition> {
        self.changelogs
            .iter()
            .map(|c| topics.topic_partition(c.topic, self.id.partition))
            .collect()
    }

    /// Replays the changelogs into the (empty, in-memory) stores. Returns records restored.
    pub(crate) fn restore(
        &mut self,
        backend: &dyn Backend,
        topics: &TopicTable,
        max_bytes: usize,
    ) -> Result<u64> {
        let mut restored = 0;
        for changelog in &mut self.changelogs {
            let tp = topics.topic_partition(changelog.topic, self.id.partition);
            let end = backend.end_offset(&tp)?;
            let store = &mut self.stores[changelog.store];
            let mut position = 0;
            while position < end {
                let batches = backend.fetch(&tp, position, max_bytes)?;
                if batches.is_empty() {
                    break;
                }
                for batch in batches {
                    for record in batch.records() {
                        let record = record?;
                        if record.offset() < position {
                            continue;
                        }
                        let key = record.key().map(|k| &k[..]).unwrap_or_default();
                        let result = match record.value() {
                            Some(value) => store.inner.put(key, value),
                            None => store.inner.delete(key),
                        };
                        result.map_err(|e| Error::Restore {
                            task: self.id,
                            store: store.inner.name().to_owned(),
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                            offset: record.offset(),
                            reason: e.to_string(),
                        })?;
                        restored += 1;
                    }
                    position = batch.last_offset() + 1;
                }
            }
            changelog.offset = Some(end);
        }
        Ok(restored)
    }

    /// Fetches more records for input partitions with little buffered. Returns whether any
    /// fetch returned data.
    pub(crate) fn fetch(&mut self, backend: &dyn Backend, max_bytes: usize) -> Result<bool> {
        let mut got = false;
        for input in &mut self.inputs {
            if input.batches.len() >= 2 {
                got = true;
                continue;
            }
            let batches = backend.fetch(&input.tp, input.fetch_position, max_bytes)?;
            if let Some(last) = batches.last() {
                input.fetch_position = last.last_offset() + 1;
                got = true;
            }
            input.batches.extend(batches);
        }
        Ok(got)
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
                if let Some(head) = &input.head {
                    if next.is_none_or(|(_, ts)| head.timestamp() < ts) {
                        next = Some((i, head.timestamp()));
                    }
                }
            }
            let Some((i, _)) = next else { break };
            let input = &mut self.inputs[i];
            let Some(record) = input.head.take() else {
                break;
            };
            let mut ctx = ProcessingContext {
                task: self.id,
                timestamp: record.timestamp(),
                stores: &mut self.stores,
                collector,
                scratch,
            };
            let source = input.source.clone();
            source.borrow_mut().process(&mut ctx, &record)?;
            input.consumed = record.offset() + 1;
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

    /// Commit, step 1: writes each changed store entry to its changelog.
    pub(crate) fn write_changelogs(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let partition = self.id.partition;
        for changelog in &self.changelogs {
            let store = &mut self.stores[changelog.store];
            let topic = changelog.topic;
            store.drain_dirty(&mut scratch.old, &mut |key, value| {
                collector.send(topic, partition, 0, Some(key), value)
            })?;
            store.inner.flush()?;
        }
        Ok(())
    }

    /// Commit, step 2: the input offsets to commit.
    pub(crate) fn committable_offsets(&self, out: &mut Vec<(TopicPartition, u64)>) {
        for input in &self.inputs {
            out.push((input.tp.clone(), input.consumed));
        }
    }

    /// Commit, step 3 (after the offsets are durable): the changelog offsets the stores now
    /// reflect, as a checkpoint would record them.
    pub(crate) fn changelog_offsets(
        &mut self,
        collector: &RecordCollector,
        topics: &TopicTable,
    ) -> Vec<(TopicPartition, u64)> {
        let mut out = Vec::with_capacity(self.changelogs.len());
        for changelog in &mut self.changelogs {
            if let Some(end) = collector.end_offset(changelog.topic, self.id.partition) {
                changelog.offset = Some(changelog.offset.map_or(end, |o| o.max(end)));
            }
            if let Some(offset) = changelog.offset {
                out.push((
                    topics.topic_partition(changelog.topic, self.id.partition),
                    offset,
                ));
            }
        }
        self.uncommitted = 0;
        out
    }

    /// The changelog positions the stores are known to reflect.
    pub(crate) fn changelog_positions(&self, topics: &TopicTable) -> Vec<(TopicPartition, u64)> {
        self.changelogs
            .iter()
            .filter_map(|c| {
                c.offset
                    .map(|o| (topics.topic_partition(c.topic, self.id.partition), o))
            })
            .collect()
    }

    /// Whether any of the task's logged stores keeps its data across restarts (then its
    /// changelog offsets are checkpointed).
    pub(crate) fn has_persistent_stores(&self) -> bool {
        self.changelogs
            .iter()
            .any(|c| self.stores[c.store].inner.is_persistent())
    }
}
