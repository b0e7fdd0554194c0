//! The record collector: a stream thread's outgoing batches, one per topic-partition.
//!
//! Sinks and changelog writes serialize into reusable buffers and push into a [`BatchBuilder`]
//! that is encoded in place; a full batch is appended at once, the rest at commit. The topic
//! table resolves names to indices when tasks are built, so the record path does no string
//! hashing.

use std::collections::HashMap;
use std::sync::Arc;

use riffle_record::{BatchBuilder, Compression, Record, TopicPartition};

use crate::backend::{Backend, TopicKind};
use crate::types::error::{Error, Result};
use crate::types::handlers::error_chain;
use crate::types::handlers::{DLQ_HEADERS, ExceptionHandlerRef, Handlers};
use crate::types::record::Headers;

/// What a record adds to a request at most, beside its key, value and headers: a batch header
/// (61 bytes) and the record's own varints (length, attributes, timestamp and offset deltas,
/// key and value lengths, header count), as Kafka's producer estimates a record's size before
/// comparing it with `max.request.size`.
const RECORD_OVERHEAD: usize = 61 + 21;

/// Every topic an application writes or reads, with its partition count, by index.
#[derive(Clone, Debug, Default)]
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
    /// The largest record written (`max_request_size`).
    max_request_size: usize,
    /// What a sink's record that cannot be written does.
    pub(crate) production: ExceptionHandlerRef,
    /// The dead-letter queue: its name, and its index once it is among the topics.
    dead_letter_queue: Option<(String, Option<usize>)>,
    /// A topic a sink's `TopicNameExtractor` names that does not exist is created (one
    /// partition), as in the test driver, instead of failing.
    create_dynamic_topics: bool,
}

impl RecordCollector {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        topics: Arc<TopicTable>,
        compression: Compression,
        max_batch_bytes: usize,
        max_request_size: usize,
        staging: bool,
        handlers: &Handlers,
    ) -> Self {
        let dead_letter_queue = handlers
            .dead_letter_queue
            .as_ref()
            .map(|name| (name.clone(), topics.index_of(name)));
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
            max_request_size,
            production: handlers.production.clone(),
            dead_letter_queue,
            create_dynamic_topics: false,
        }
    }

    /// Creates the topics a `TopicNameExtractor` names that do not exist, with one partition
    /// (the test driver, where every topic has one, as in Kafka's `TopologyTestDriver`).
    pub(crate) fn create_missing_dynamic_topics(&mut self) {
        self.create_dynamic_topics = true;
    }

    /// The index of `topic`, a topic a sink's `TopicNameExtractor` named: added to this
    /// thread's table the first time (its partition count asked of the backend). A topic that
    /// does not exist is [`Error::UnknownTopic`], as Kafka Streams' producer fails on one.
    pub(crate) fn dynamic_topic(&mut self, topic: &str) -> Result<usize> {
        if let Some(index) = self.topics.index_of(topic) {
            return Ok(index);
        }
        let partitions = match self.backend.partitions(topic)? {
            Some(partitions) => partitions,
            None if self.create_dynamic_topics => {
                self.backend.create_topic(topic, 1, TopicKind::User)?;
                1
            }
            None => {
                return Err(Error::UnknownTopic {
                    topic: topic.to_owned(),
                });
            }
        };
        // Appended: the indices the tasks hold stay valid.
        let index = Arc::make_mut(&mut self.topics).insert(topic, partitions);
        self.builders.push(Vec::new());
        self.end_offsets.push(Vec::new());
        Ok(index)
    }

    pub(crate) fn topics(&self) -> &Arc<TopicTable> {
        &self.topics
    }

    /// Queues one record for `topic[partition]`; appends the batch once it is full. A record
    /// larger than `max_request_size` is refused with [`Error::RecordTooLarge`] and queues
    /// nothing; one that would take its batch over that size first appends the batch (outside
    /// a transaction), so no request is larger than a broker's default limit.
    pub(crate) fn send(
        &mut self,
        topic: usize,
        partition: u32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &Headers,
    ) -> Result<()> {
        let size = RECORD_OVERHEAD
            + key.map_or(0, <[u8]>::len)
            + value.map_or(0, <[u8]>::len)
            + headers
                .encoded()
                .map(|(k, v)| 10 + k.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>();
        if size > self.max_request_size {
            return Err(Error::RecordTooLarge {
                topic: self.topics.name(topic).to_string(),
                partition,
                size,
                max: self.max_request_size,
            });
        }
        let p = partition as usize;
        if !self.staging
            && let Some(Some(builder)) = self.builders[topic].get(p)
            && !builder.is_empty()
            && builder.size_bytes() + size > self.max_request_size
        {
            self.append(topic, partition)?;
        }
        let slots = &mut self.builders[topic];
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

    /// Sends a skipped record to the dead-letter queue, if there is one: the input record as
    /// it was read (`source`; no key or value when the failure had no input record, as in a
    /// punctuation or a commit's cache flush), with KIP-1034's headers naming the error and,
    /// when known, the input record's topic, partition and offset. Partitioned by the input
    /// key, or by the task's partition (`task_partition`) without one.
    pub(crate) fn send_dead_letter(
        &mut self,
        error: &Error,
        source: Option<&Record>,
        timestamp: i64,
        task_partition: u32,
    ) -> Result<()> {
        let Some((name, index)) = &self.dead_letter_queue else {
            return Ok(());
        };
        let Some(topic) = *index else {
            return Err(Error::IllegalState(format!(
                "the dead-letter queue {name} is not among the application's topics"
            )));
        };
        let mut values = vec![error.kind_name(), error.to_string(), error_chain(error)];
        if let Some(record) = source {
            let tp = record.topic_partition();
            values.extend([
                tp.topic.to_string(),
                tp.partition.to_string(),
                record.offset().to_string(),
            ]);
        }
        let headers: Headers = values
            .into_iter()
            .zip(DLQ_HEADERS)
            .map(|(value, name)| (name, Some(bytes::Bytes::from(value))))
            .collect();
        let partitions = self.topics.partitions(topic).max(1);
        let key = source.and_then(Record::key);
        let partition = match key {
            Some(key) => riffle_record::partition_for_key(key, partitions),
            None => task_partition % partitions,
        };
        self.send(
            topic,
            partition,
            timestamp,
            key.map(|k| &k[..]),
            source.and_then(Record::value).map(|v| &v[..]),
            &headers,
        )
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
        let bases = match self
            .backend
            .commit_transaction(group, member, &mut batches, offsets)
        {
            Ok(bases) => bases,
            Err(e) => {
                // The records stay pending: for a retry, or for `discard`.
                drop(batches);
                self.pending = pending;
                return Err(e);
            }
        };
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

    /// Drops every record not appended yet: they belonged to a transaction that was aborted
    /// (exactly-once, a fenced thread).
    pub(crate) fn discard(&mut self) {
        for builder in self.builders.iter_mut().flatten().flatten() {
            builder.clear();
        }
        let pending = std::mem::take(&mut self.pending);
        self.recycle(&pending);
        self.pending = pending;
        self.pending.clear();
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
