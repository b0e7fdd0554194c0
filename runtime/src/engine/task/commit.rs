//! The commit's phases for one task: stateful nodes flush, cached writes go to the changelogs,
//! the input offsets to commit; after the commit is durable, the caches go to the stores and the
//! changelog positions move.

use std::sync::atomic::Ordering;

use riffle_record::TopicPartition;

use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::state::StorePosition;
use crate::types::error::Result;
use crate::types::record::Headers;

use super::StreamTask;
use super::stores::TaskStores;

impl StreamTask {
    /// Commit, phase 1a: stateful nodes forward their cached updates downstream.
    pub(crate) fn flush_nodes(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let flushes = std::mem::take(&mut self.flushes);
        let mut result = Ok(());
        for node in &flushes {
            let mut ctx = self.context(collector, scratch, 0, None);
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
        for changelog in self.stores.changelogs.iter().filter(|c| !c.source) {
            let store = &self.stores.stores[changelog.store];
            for i in 0..store.dirty_len() {
                let (key, value, timestamp) = store.dirty(i);
                collector.send(
                    changelog.topic,
                    partition,
                    timestamp,
                    Some(key),
                    value,
                    &Headers::new(),
                )?;
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

    /// The repartition partitions this task reads and the offsets to purge them up to: what it
    /// committed.
    pub(crate) fn purgeable_offsets(&self, out: &mut impl Extend<(TopicPartition, u64)>) {
        out.extend(
            self.inputs
                .iter()
                .filter(|i| i.purgeable)
                .map(|i| (i.tp.clone(), i.consumed)),
        );
    }

    /// Commit, phase 2 (after the commit is durable): the caches go to the stores, and the
    /// changelog positions move to what the collector appended.
    pub(crate) fn committed(&mut self, collector: &RecordCollector) -> Result<()> {
        let TaskStores {
            stores, changelogs, ..
        } = &mut self.stores;
        // A table's source topic is its changelog: the store reflects what the task consumed.
        for changelog in changelogs.iter_mut().filter(|c| c.source) {
            if let Some(input) = self.inputs.iter().find(|i| {
                *i.tp.topic == *changelog.partition.topic
                    && i.tp.partition == changelog.partition.partition
            }) {
                changelog.offset = changelog.offset.max(input.consumed);
            }
        }
        for (i, store) in stores.iter_mut().enumerate() {
            // A persistent store records where its changelog ends after this commit, with
            // the writes (in memory there is nothing to record it for).
            let position = changelogs
                .iter()
                .find(|c| c.store == i)
                .filter(|_| store.inner.is_persistent())
                .map(|c| StorePosition {
                    changelog: c.partition.clone(),
                    offset: match c.source {
                        true => c.offset,
                        false => collector
                            .end_offset(c.topic, self.id.partition)
                            .map_or(c.offset, |end| c.offset.max(end)),
                    },
                });
            let started = std::time::Instant::now();
            store.write_to_store(position.as_ref())?;
            if let Some((_, metrics)) = self.store_metrics.get(i) {
                metrics.flush.record(started.elapsed());
                let counts = store.take_counts();
                metrics.puts.fetch_add(counts.puts, Ordering::Relaxed);
                metrics.gets.fetch_add(counts.gets, Ordering::Relaxed);
                metrics.hits.fetch_add(counts.hits, Ordering::Relaxed);
            }
        }
        for changelog in changelogs.iter_mut().filter(|c| !c.source) {
            if let Some(end) = collector.end_offset(changelog.topic, self.id.partition) {
                changelog.offset = changelog.offset.max(end);
            }
        }
        self.uncommitted = 0;
        self.offsets_moved = false;
        Ok(())
    }
}
