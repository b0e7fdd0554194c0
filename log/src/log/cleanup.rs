//! What a topic's `cleanup.policy` asks for: retention (sealed segments that `retention.ms`
//! or `retention.bytes` no longer keep are deleted), deleting the records below an offset,
//! and compaction passes. The partitions do the work (log/src/partition/retention.rs and
//! log/src/partition/compact/); this file picks the topics and partitions and takes their
//! locks.
//!
//! It must never work on a partition without catching up with what other processes did
//! first, and does its deleting and rewriting under the partition's OS lock, one partition at
//! a time; the active segment is never deleted or compacted.

use std::sync::Arc;

use super::{Log, lock, poisoned_topics};
use crate::error::Result;
use crate::partition::CompactionReport;
use crate::topic::Topic;
use riffle_record::TopicPartition;

/// What one [`Log::enforce_retention`] pass deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionReport {
    /// Partitions whose start offset moved.
    pub partitions: usize,
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes of the deleted segments.
    pub bytes_freed: u64,
}

impl Log {
    /// Deletes the records of `tp` below `offset` (Kafka's `deleteRecords`): the start offset
    /// moves there, durably, and segments wholly below it are removed; a fetch below it is
    /// [`Error::OffsetOutOfRange`]. Returns the bytes freed. An offset at or below the start
    /// changes nothing; one past the end offset is [`Error::OffsetOutOfRange`]. What the
    /// runtime calls to purge a repartition topic up to its committed offset.
    ///
    /// [`Error::OffsetOutOfRange`]: crate::Error::OffsetOutOfRange
    pub fn delete_records(&self, tp: &TopicPartition, offset: u64) -> Result<u64> {
        self.with_locked_partition(tp, |p| p.delete_before(offset))
    }

    /// Deletes, in every topic whose `cleanup.policy` includes `delete`, the sealed segments
    /// that `retention.ms` (against `now_ms`, milliseconds since the epoch, and each
    /// segment's newest record timestamp) or `retention.bytes` no longer keep, oldest first,
    /// moving each partition's start offset (as Kafka's retention does; the active segment
    /// always stays). The cleaner thread calls it every
    /// [`LogOptions::retention_check_interval`]. A partition costs a look at its active
    /// segment's size (for other processes' appends); a segment's newest timestamp is read
    /// once and remembered.
    ///
    /// [`LogOptions::retention_check_interval`]: crate::LogOptions::retention_check_interval
    pub fn enforce_retention(&self, now_ms: i64) -> Result<RetentionReport> {
        let topics = self.topics_where(|policy| policy.deletes())?;
        let mut report = RetentionReport::default();
        for (name, topic) in topics {
            for p in 0..topic.partition_count() {
                let tp = TopicPartition::new(Arc::clone(&name), p);
                let due = self.with_partition(&tp, |part| {
                    // What other processes appended and rolled since this handle looked.
                    part.catch_up()?;
                    part.retention_target(now_ms, &topic.config)
                })?;
                if due.is_none() {
                    continue;
                }
                // Under the OS lock, with what other processes did since.
                let (segments_before, freed) = self.with_locked_partition(&tp, |part| {
                    part.resync()?;
                    let before = part.segment_count();
                    match part.retention_target(now_ms, &topic.config)? {
                        Some(to) => Ok((before, part.delete_before(to)?)),
                        None => Ok((before, 0)),
                    }
                })?;
                if freed > 0 {
                    let after = self.with_partition(&tp, |part| Ok(part.segment_count()))?;
                    report.partitions += 1;
                    report.segments_deleted += segments_before.saturating_sub(after);
                    report.bytes_freed += freed;
                }
            }
        }
        Ok(report)
    }

    /// One compaction pass over every partition of the compacted topics (`cleanup.policy`
    /// `compact` or `compact,delete`) whose dirty share reached `min.cleanable.dirty.ratio`
    /// (log/src/partition/compact/ says how). `now_ms` decides which tombstones' delete
    /// horizon has passed. The cleaner thread calls this every
    /// [`LogOptions::compaction_check_interval`]; `throttle` is called after each partition
    /// cleaned with the bytes it read and wrote (the thread sleeps there to keep to
    /// [`LogOptions::cleaner_io_bytes_per_sec`]). A partition that is not due costs a look at
    /// its segment sizes.
    ///
    /// [`LogOptions::compaction_check_interval`]: crate::LogOptions::compaction_check_interval
    /// [`LogOptions::cleaner_io_bytes_per_sec`]: crate::LogOptions::cleaner_io_bytes_per_sec
    pub fn compact(&self, now_ms: i64) -> Result<CompactionReport> {
        self.compact_with(now_ms, &mut |_| {})
    }

    pub(crate) fn compact_with(
        &self,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<CompactionReport> {
        let topics = self.topics_where(|policy| policy.compacts())?;
        let mut report = CompactionReport::default();
        for (name, topic) in topics {
            for p in 0..topic.partition_count() {
                let tp = TopicPartition::new(Arc::clone(&name), p);
                let due = self.with_partition(&tp, |part| {
                    part.catch_up()?;
                    part.compaction_due(&topic.config)
                })?;
                if !due {
                    continue;
                }
                let done =
                    self.with_locked_partition(&tp, |part| part.compact(now_ms, &topic.config))?;
                if let Some(done) = done {
                    throttle(done.bytes_io);
                    report.add(&done);
                    lock(&self.shared.compacted, &"the compaction totals")?.add(&done);
                }
            }
        }
        Ok(report)
    }

    /// What compaction passes through this handle (its cleaner thread's and
    /// [`compact`](Self::compact) calls) did since it was opened, summed.
    pub fn compaction_totals(&self) -> CompactionReport {
        *self
            .shared
            .compacted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The topics whose `cleanup.policy` passes `wanted`, those other processes created since
    /// this handle looked included (they are its to clean too).
    fn topics_where(
        &self,
        wanted: impl Fn(crate::CleanupPolicy) -> bool,
    ) -> Result<Vec<(Arc<str>, Arc<Topic>)>> {
        self.refresh_topics()?;
        let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
        Ok(topics
            .by_name
            .iter()
            .filter(|(_, t)| wanted(t.config.cleanup_policy))
            .map(|(n, t)| (Arc::clone(n), Arc::clone(t)))
            .collect())
    }
}
