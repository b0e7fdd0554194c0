//! The record collector: a stream thread's outgoing batches, one per topic-partition.
//!
//! Sinks and changelog writes serialize into reusable buffers and push into a [`BatchBuilder`]
//! that is encoded in place; a full batch is appended at once, the rest at commit. The topic
//! table resolves names to indices when tasks are built, so the record path does no string
//! hashing.

use std::collections::HashMap;
use std::sync::Arc;

use riffle_log::{BatchBuilder, Compression, TopicPartition};

use crate::backend::Backend;
use crate::error::Result;
use crate::record::Headers;

/// Every topic an application writes or reads, with its partition count, by index.
#[derive(Debug, Default)]
pub(crate) struct TopicTable {
    names: Vec<Arc<str>>,
    partitions: Vec<u32>,
    index: HashMap<String, usize>,
}

impl TopicTable {
    pub(crate) fn insert(&mut self, name: &str, partitions: u32) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(Arc::from(name));
        self.partitions.push(partitions);
        self.index.insert(name.to_owned(), self.names.len() - 1);
        self.names.len() - 1
    }
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }
    pub(crate) fn name(&self, index: usize) -> &Arc<str> {
        &self.names[index]
    }
    pub(crate) fn partitions(&self, index: usize) -> u32 {
        self.partitions[index]
    }
    pub(crate) fn topic_partition(&self, index: usize, partition: u32) -> TopicPartition {
        TopicPartition::new(self.names[index].clone(), partition)
    }
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// Empty builders a stream thread keeps for reuse.
const SPARE_BUILDERS: usize = 16;

/// A stream thread's outgoing batches.
pub(crate) struct RecordCollector {
    backend: Arc<dyn Backend>,
    topics: Arc<TopicTable>,
    compression: Compression,
    max_batch_bytes: usize,
    /// `[topic][partition]`: the builders with records since the last flush.
    builders: Vec<Vec<Option<BatchBuilder>>>,
    /// Empty builders, reused by the next partitions written: a flush gives each of its
    /// builders back here (at most [`SPARE_BUILDERS`]; the rest are freed), so a thread writing
    /// to thousands of partitions keeps a buffer only for those written since the last flush.
    spare: Vec<BatchBuilder>,
    /// `[topic][partition]`: the end offset after this thread's last append there.
    end_offsets: Vec<Vec<Option<u64>>>,
    /// Topic-partitions with unsent records, so a flush visits only those.
    pending: Vec<(usize, u32)>,
    /// Records sent since creation, for metrics.
    pub(crate) sent: u64,
    /// Exactly-once: batches wait for the commit's transaction instead of being appended when
    /// full.
    staging: bool,
}

impl RecordCollector {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        topics: Arc<TopicTable>,
        compression: Compression,
        max_batch_bytes: usize,
        staging: bool,
    ) -> Self {
        let builders = (0..topics.len()).map(|_| Vec::new()).collect();
        let end_offsets = (0..topics.len()).map(|_| Vec::new()).collect();
        RecordCollector {
            backend,
            topics,
            compression,
            max_batch_bytes,
            builders,
            spare: Vec::new(),
            end_offsets,
            pending: Vec::new(),
            sent: 0,
            staging,
        }
    }

    pub(crate) fn topics(&self) -> &Arc<TopicTable> {
        &self.topics
    }

    /// Queues one record for `topic[partition]`; appends the batch once it is full.
    pub(crate) fn send(
        &mut self,
        topic: usize,
        partition: u32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &Headers,
    ) -> Result<()> {
        let slots = &mut self.builders[topic];
        let p = partition as usize;
        if slots.len() <= p {
            slots.resize_with(p + 1, || None);
        }
        let compression = self.compression;
        let spare = &mut self.spare;
        let builder = slots[p].get_or_insert_with(|| {
            spare
                .pop()
                .unwrap_or_else(|| BatchBuilder::new(compression))
        });
        if builder.is_empty() {
            self.pending.push((topic, partition));
        }
        builder.push_with_headers(timestamp, key, value, headers.encoded());
        self.sent += 1;
        if !self.staging && builder.size_bytes() >= self.max_batch_bytes {
            self.append(topic, partition)?;
        }
        Ok(())
    }

    fn append(&mut self, topic: usize, partition: u32) -> Result<()> {
        let Some(Some(builder)) = self.builders[topic].get_mut(partition as usize) else {
            return Ok(());
        };
        if builder.is_empty() {
            return Ok(());
        }
        let count = builder.len() as u64;
        let tp = self.topics.topic_partition(topic, partition);
        let base = self.backend.append(&tp, builder)?;
        let ends = &mut self.end_offsets[topic];
        if ends.len() <= partition as usize {
            ends.resize(partition as usize + 1, None);
        }
        ends[partition as usize] = Some(base + count);
        Ok(())
    }

    /// Appends every batch with records in it.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        for &(topic, partition) in &pending {
            self.append(topic, partition)?;
        }
        self.recycle(&pending);
        self.pending = pending;
        self.pending.clear();
        Ok(())
    }

    /// Takes the (now empty) builders of `written` back into the spares.
    fn recycle(&mut self, written: &[(usize, u32)]) {
        for &(topic, partition) in written {
            let Some(slot) = self.builders[topic].get_mut(partition as usize) else {
                continue;
            };
            if let Some(builder) = slot.take_if(|b| b.is_empty())
                && self.spare.len() < SPARE_BUILDERS
            {
                self.spare.push(builder);
            }
        }
    }

    /// Exactly-once: appends every pending batch and commits `offsets` as one transaction.
    pub(crate) fn commit_transaction(
        &mut self,
        group: &str,
        member: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let mut slots = Vec::with_capacity(pending.len());
        let mut batches: Vec<(TopicPartition, &mut BatchBuilder)> =
            Vec::with_capacity(pending.len());
        for (topic, row) in self.builders.iter_mut().enumerate() {
            for (partition, builder) in row.iter_mut().enumerate() {
                if let Some(builder) = builder.as_mut().filter(|b| !b.is_empty()) {
                    slots.push((topic, partition, builder.len() as u64));
                    batches.push((
                        self.topics.topic_partition(topic, partition as u32),
                        builder,
                    ));
                }
            }
        }
        let bases = self
            .backend
            .commit_transaction(group, member, &mut batches, offsets)?;
        drop(batches);
        for ((topic, partition, count), base) in slots.into_iter().zip(bases) {
            let ends = &mut self.end_offsets[topic];
            if ends.len() <= partition {
                ends.resize(partition + 1, None);
            }
            ends[partition] = Some(base + count);
        }
        self.recycle(&pending);
        self.pending = pending;
        self.pending.clear();
        Ok(())
    }

    /// Whether records are waiting to be appended.
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.iter().any(|&(t, p)| {
            self.builders[t]
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|b| !b.is_empty())
        })
    }

    /// The end offset after this thread's last append to `topic[partition]`.
    pub(crate) fn end_offset(&self, topic: usize, partition: u32) -> Option<u64> {
        self.end_offsets[topic]
            .get(partition as usize)
            .copied()
            .flatten()
    }
}
