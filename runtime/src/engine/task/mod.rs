//! A stream task: one sub-topology instantiated for one partition, with its input queues and
//! stores.
//!
//! A task's stores ([`TaskStores`]) are plain owned data, so they can be lent to the state updater
//! while it restores them; the processor nodes are built on the stream thread once the task is
//! RUNNING. A task processes the records of its input partitions in timestamp order (the head with
//! the smallest timestamp first).
//!
//! This file is the front door: [`StreamTask`] and its short surface. The rest is one file per
//! concern:
//! - `stores`: the task's stores, opened from their checkpoints, and their changelogs;
//! - `queue`: one input partition's queue of fetched records, and fetching;
//! - `create`: building a task's nodes and inputs, and `init`;
//! - `process`: processing records in timestamp order, and failed records' handlers;
//! - `punctuate`: stream-time and wall-clock punctuation;
//! - `commit`: the commit's phases.

mod commit;
mod create;
mod process;
mod punctuate;
mod queue;
mod stores;

use std::sync::Arc;

use riffle_record::{Record, TopicPartition};
use riffle_state_dir::TaskId;

use crate::engine::metrics::StoreMetrics;
use crate::engine::metrics::TaskMetrics;
use crate::processor::collector::RecordCollector;
use crate::processor::node::{FlushRef, ProcessingContext, Scratch};
use crate::processor::{Schedule, TaskSignals};
use crate::state::CachedStore;
use crate::topology::LifecycleRef;
use crate::types::record::Headers;

use queue::PartitionQueue;
#[cfg(test)]
pub(crate) use stores::ChangelogState;
pub(crate) use stores::TaskStores;

/// One sub-topology × partition, RUNNING on a stream thread.
pub(crate) struct StreamTask {
    pub(crate) id: TaskId,
    inputs: Vec<PartitionQueue>,
    flushes: Vec<FlushRef>,
    /// Nodes with `init`/`close` (processors), parents first.
    lifecycles: Vec<LifecycleRef>,
    pub(crate) stores: TaskStores,
    /// Records processed since the last commit.
    pub(crate) uncommitted: u64,
    /// An input's position was reset (`auto_offset_reset`) since the last commit.
    pub(crate) offsets_moved: bool,
    /// The task's metrics, once it runs on a stream thread.
    pub(crate) metrics: Option<Arc<TaskMetrics>>,
    /// Each store's name and metrics, by store index.
    pub(crate) store_metrics: Vec<(String, Arc<StoreMetrics>)>,
    /// Stream time, wall-clock time, commit requests and new schedules.
    signals: TaskSignals,
    /// Stream-time and wall-clock punctuation schedules, each ordered by (deadline, seq).
    stream_schedules: Vec<Schedule>,
    wall_schedules: Vec<Schedule>,
}

impl StreamTask {
    /// Calls every processor's `close`.
    fn close_nodes(&mut self) {
        for node in &self.lifecycles {
            node.borrow_mut().close();
        }
    }

    /// Sets the wall-clock time processors see until the next call.
    pub(crate) fn set_wall_clock(&mut self, wall_clock_ms: i64) {
        self.signals.wall_clock_ms = wall_clock_ms;
    }

    /// Records dropped (late for their windows) since the last call.
    pub(crate) fn take_dropped_records(&mut self) -> u64 {
        std::mem::take(&mut self.signals.dropped_records)
    }

    /// Whether a processor asked for a commit; clears the request.
    pub(crate) fn take_commit_request(&mut self) -> bool {
        std::mem::take(&mut self.signals.commit_requested)
    }

    /// The task's input partitions, in input order (an input's index is its position here).
    pub(crate) fn input_partitions(&self) -> Vec<TopicPartition> {
        self.inputs.iter().map(|i| i.tp.clone()).collect()
    }

    fn context<'a>(
        &'a mut self,
        collector: &'a mut RecordCollector,
        scratch: &'a mut Scratch,
        timestamp: i64,
        record: Option<&'a Record>,
    ) -> ProcessingContext<'a> {
        ProcessingContext {
            task: self.id,
            timestamp,
            headers: record.map(Headers::from_log).unwrap_or_default(),
            record,
            stores: &mut self.stores.stores,
            collector,
            scratch,
            signals: &mut self.signals,
        }
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

    /// Bytes the task's store caches hold allocated ([`CachedStore::kept_bytes`]).
    pub(crate) fn cache_kept_bytes(&self) -> usize {
        self.stores.stores.iter().map(CachedStore::kept_bytes).sum()
    }

    /// Frees the buffers of the task's (empty, just committed) store caches.
    pub(crate) fn release_cache_buffers(&mut self) {
        for store in &mut self.stores.stores {
            store.release_buffers();
        }
    }

    /// Drops what was processed since the last commit: the caches' writes never reach the
    /// stores (the stores stay at the last commit), and the inputs rewind to the committed
    /// offsets.
    pub(crate) fn into_stores(mut self) -> TaskStores {
        self.close_nodes();
        for store in &mut self.stores.stores {
            store.discard();
        }
        self.stores
    }
}
