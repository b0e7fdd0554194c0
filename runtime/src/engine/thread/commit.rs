//! A stream thread's commit (docs/design.md §3): the dirty tasks' caches flushed, changelogs
//! written, outputs appended and input offsets committed (one transaction under exactly-once),
//! then checkpoints; the caches' buffers kept within the thread's budget; and, after a commit,
//! the purge of the repartition records it committed past.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::config::ProcessingGuarantee;
use crate::engine::thread::StreamThread;
use crate::types::error::Result;

impl StreamThread {
    /// Commits the tasks that processed records since the last commit: flush caches and
    /// forward → write changelogs → append outputs → commit offsets → write caches to the
    /// stores → checkpoint. Touches only those tasks (the core's dirty set).
    pub(super) fn commit(&mut self) -> Result<()> {
        let delta = self.wiring.config.checkpoint_offset_delta;
        self.task_ids.clear();
        self.task_ids.extend(self.core.dirty());
        if !self.task_ids.is_empty() || self.collector.has_pending() {
            let _span =
                tracing::debug_span!("commit", thread = %self.name, tasks = self.task_ids.len())
                    .entered();
            let started = Instant::now();
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get_mut(id) {
                    task.flush_nodes(&mut self.collector, &mut self.scratch)?;
                }
            }
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get_mut(id) {
                    task.write_changelogs(&mut self.collector)?;
                }
            }
            let mut offsets = Vec::new();
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get(id)
                    && (task.uncommitted > 0 || task.offsets_moved)
                {
                    task.committable_offsets(&mut offsets);
                }
            }
            let group = &self.wiring.config.application_id;
            if self.wiring.config.processing_guarantee == ProcessingGuarantee::ExactlyOnce {
                // Outputs, changelog writes and input offsets: one transaction.
                self.collector
                    .commit_transaction(group, &self.name, &offsets)?;
            } else {
                // The backend makes the appends durable before the offsets.
                self.collector.flush()?;
                self.wiring
                    .backend
                    .commit_offsets(group, &self.name, &offsets)?;
            }
            for id in &self.task_ids {
                if let Some(task) = self.tasks.get_mut(id) {
                    task.purgeable_offsets(&mut self.purge);
                    task.committed(&self.collector)?;
                    task.stores
                        .maybe_checkpoint(&self.wiring.state_dir, delta, false)?;
                    self.snapshot.positions(&task.stores);
                }
            }
            let metrics = &self.metrics.threads[self.index];
            metrics.commits.fetch_add(1, Ordering::Relaxed);
            metrics.commit.record(started.elapsed());
        }
        self.task_ids.sort_unstable();
        for id in &self.last_committed {
            if self.task_ids.binary_search(id).is_err()
                && let Some(task) = self.tasks.get_mut(id)
            {
                task.release_cache_buffers();
            }
        }
        // The buffers kept for the next commit are bounded by twice the thread's cache budget
        // (a cache's buffers hold up to twice what it used): past that, the rest go back.
        // Half the budget ran 20,000 tasks in 300 MiB instead of 324 but made a large task
        // regrow its buffers at every commit (5 % slower at 1 M keys); twice does not bind
        // there (docs/BENCHMARKS.md, "The store budget counted").
        let limit = self.core.cache_max_bytes().saturating_mul(2);
        let mut kept = 0usize;
        for id in &self.task_ids {
            if let Some(task) = self.tasks.get_mut(id) {
                if kept >= limit {
                    task.release_cache_buffers();
                } else {
                    kept += task.cache_kept_bytes();
                }
            }
        }
        std::mem::swap(&mut self.last_committed, &mut self.task_ids);
        self.cache_bytes = 0;
        let now = Instant::now();
        self.core.committed(now);
        self.maybe_purge(now);
        Ok(())
    }

    /// After a commit, at most every `repartition_purge_interval`: deletes the records of the
    /// repartition partitions committed since the last purge below their committed offsets
    /// (Kafka Streams' `maybePurgeCommittedRecords`). A failure is logged, not fatal: the next
    /// purge tries again with newer offsets.
    fn maybe_purge(&mut self, now: Instant) {
        if self.purge.is_empty()
            || now.saturating_duration_since(self.last_purge)
                < self.wiring.config.repartition_purge_interval
        {
            return;
        }
        self.last_purge = now;
        for (tp, offset) in self.purge.drain() {
            if let Err(e) = self.wiring.backend.delete_records(&tp, offset) {
                tracing::warn!(thread = %self.name, topic_partition = %tp, offset, error = %e, "could not purge a repartition topic up to its committed offset; the next purge tries again");
            }
        }
    }
}
