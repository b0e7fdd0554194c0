//! One input partition of a task: the batches fetched for it, the head record with its
//! extracted timestamp, its consumed offset, and `auto_offset_reset` when its fetch position is
//! out of range; and [`StreamTask::fetch_input`], which fills it.

use std::collections::VecDeque;

use riffle_record::{FetchedBatch, Record, RecordIter, TopicPartition};

use crate::backend::Backend;
use crate::config::AutoOffsetReset;
use crate::processor::node::SourceRef;
use crate::types::error::{Error, Result};
use crate::types::timestamp::TimestampExtractorRef;

use super::StreamTask;

/// One input partition of a task.
pub(super) struct PartitionQueue {
    pub(super) tp: TopicPartition,
    pub(super) source: SourceRef,
    /// The next offset to fetch.
    pub(super) fetch_position: u64,
    pub(super) batches: VecDeque<FetchedBatch>,
    pub(super) current: Option<RecordIter>,
    pub(super) head: Option<Record>,
    /// The head's extracted timestamp.
    pub(super) head_timestamp: i64,
    /// The next offset to process: what a commit records.
    pub(super) consumed: u64,
    pub(super) extractor: TimestampExtractorRef,
    /// The largest timestamp extracted from this partition (-1 before the first).
    pub(super) partition_time: i64,
    /// Where to go when the fetch position is out of the partition's range.
    pub(super) reset: AutoOffsetReset,
    /// A repartition topic: purged up to the committed offset (the application is its only
    /// reader).
    pub(super) purgeable: bool,
}

impl PartitionQueue {
    /// The fetch position is out of the partition's range (the records there were deleted, or
    /// the partition was recreated shorter): `auto_offset_reset` moves it to the partition's
    /// start or end, dropping what was buffered, with a warning naming the partition and both
    /// offsets; under `none` the task fails. Past the end on a backend that never loses records
    /// below a committed offset (the embedded log), it is lost data: [`Error::OffsetPastEnd`]
    /// naming `group`.
    pub(super) fn reset_position(&mut self, backend: &dyn Backend, group: &str) -> Result<()> {
        let start = backend.start_offset(&self.tp)?;
        let end = backend.end_offset(&self.tp)?;
        let from = self.fetch_position;
        if from > end && backend.position_past_end_is_lost_data() {
            return Err(Error::OffsetPastEnd {
                group: group.to_owned(),
                topic: self.tp.topic.to_string(),
                partition: self.tp.partition,
                offset: from,
                end,
            });
        }
        let to = match self.reset {
            AutoOffsetReset::Earliest => start,
            AutoOffsetReset::Latest => end,
            _ => {
                return Err(Error::NoOffsetForPartition {
                    topic: self.tp.topic.to_string(),
                    partition: self.tp.partition,
                    reason: format!("offset {from} is out of its range {start}..{end}"),
                });
            }
        };
        tracing::warn!(topic_partition = %self.tp, offset = from, start, end, reset_to = to, policy = ?self.reset, "the offset to read is out of the partition's range; auto_offset_reset moves it");
        self.batches.clear();
        self.current = None;
        self.head = None;
        self.fetch_position = to;
        self.consumed = to;
        Ok(())
    }

    /// Loads the next record to process into `head`, if one is buffered, with its extracted
    /// timestamp. A record whose extracted timestamp is negative is skipped with a warning.
    pub(super) fn fill_head(&mut self) -> Result<()> {
        while self.head.is_none() {
            if let Some(iter) = &mut self.current {
                match iter.next() {
                    Some(Ok(record)) => {
                        if record.offset() >= self.consumed {
                            let ts = self.extractor.extract(&record, self.partition_time)?;
                            if ts < 0 {
                                tracing::warn!(
                                    topic_partition = %self.tp,
                                    offset = record.offset(),
                                    timestamp = ts,
                                    "skipping a record: the timestamp extractor gave it a negative timestamp"
                                );
                                self.consumed = record.offset() + 1;
                                continue;
                            }
                            self.partition_time = self.partition_time.max(ts);
                            self.head_timestamp = ts;
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

impl StreamTask {
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
        let batches = match backend.fetch(&input.tp, input.fetch_position, max_bytes) {
            Err(e) if e.is_offset_out_of_range() => {
                input.reset_position(backend, &self.signals.application_id)?;
                self.offsets_moved = true;
                backend.fetch(&input.tp, input.fetch_position, max_bytes)?
            }
            fetched => fetched?,
        };
        let Some(last) = batches.last() else {
            return Ok(false);
        };
        input.fetch_position = last.last_offset() + 1;
        input.batches.extend(batches);
        Ok(true)
    }
}
