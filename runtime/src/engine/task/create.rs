//! A task built over its (restored) stores: its nodes instantiated, its inputs positioned at the
//! committed offsets, and its processors initialized.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::backend::Backend;
use crate::config::RecordingLevel;
use crate::config::{AutoOffsetReset, StreamsConfig};
use crate::processor::TaskSignals;
use crate::processor::collector::{RecordCollector, TopicTable};
use crate::processor::node::Scratch;
use crate::state::global::GlobalStore;
use crate::topology::{SubtopologyDef, Topology};
use crate::types::error::{Error, Result};

use super::StreamTask;
use super::queue::PartitionQueue;
use super::stores::TaskStores;

impl StreamTask {
    /// Builds the task's nodes over its (restored) stores and positions its inputs at the
    /// committed offsets; its nodes read the application's global stores `globals`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        mut stores: TaskStores,
        topology: &Topology,
        sub: &SubtopologyDef,
        topics: &TopicTable,
        application_id: &str,
        backend: &dyn Backend,
        config: &StreamsConfig,
        globals: &[Arc<GlobalStore>],
    ) -> Result<StreamTask> {
        let id = stores.id;
        let timing = config.metrics_recording_level >= RecordingLevel::Debug;
        for store in &mut stores.stores {
            store.set_timing(timing);
        }
        let mut store_slots = vec![None; topology.stores.len()];
        for (slot, &s) in sub.stores.iter().enumerate() {
            store_slots[s] = Some(slot);
        }
        let instance = topology.instantiate(sub, topics, application_id, &store_slots, globals);
        let store_metrics = sub
            .stores
            .iter()
            .map(|&s| (topology.stores[s].name.clone(), Arc::default()))
            .collect();
        let mut inputs = Vec::with_capacity(instance.sources.len());
        for (topic, source, extractor, internal) in instance.sources {
            let tp = topics.topic_partition(topic, id.partition);
            // Repartition topics always start at their earliest offset, as in Kafka Streams.
            let reset = if internal {
                AutoOffsetReset::Earliest
            } else {
                config.auto_offset_reset
            };
            let committed = match backend.committed_offset(application_id, &tp)? {
                Some(offset) if backend.position_past_end_is_lost_data() => {
                    let end = backend.end_offset(&tp)?;
                    if offset > end {
                        return Err(Error::OffsetPastEnd {
                            group: application_id.to_owned(),
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                            offset,
                            end,
                        });
                    }
                    offset
                }
                Some(offset) => offset,
                // A fetch below the partition's start resets to it.
                None if reset == AutoOffsetReset::Earliest => 0,
                None if reset == AutoOffsetReset::Latest => {
                    let end = backend.end_offset(&tp)?;
                    tracing::info!(topic_partition = %tp, offset = end, "no committed offset; auto_offset_reset=latest: reading from the end");
                    end
                }
                None => {
                    return Err(Error::NoOffsetForPartition {
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                        reason: "the application has no committed offset for it".into(),
                    });
                }
            };
            inputs.push(PartitionQueue {
                tp,
                source,
                fetch_position: committed,
                batches: VecDeque::new(),
                current: None,
                head: None,
                head_timestamp: 0,
                consumed: committed,
                extractor: extractor.unwrap_or_else(|| config.default_timestamp_extractor.clone()),
                partition_time: -1,
                reset,
                purgeable: internal,
            });
        }
        Ok(StreamTask {
            id,
            inputs,
            flushes: instance.flushes,
            lifecycles: instance.lifecycles,
            stores,
            uncommitted: 0,
            offsets_moved: false,
            metrics: None,
            store_metrics,
            signals: TaskSignals {
                outer_join_emit_interval_ms: i64::try_from(
                    config.outer_join_emit_interval.as_millis(),
                )
                .unwrap_or(i64::MAX),
                ..TaskSignals::new(Arc::from(application_id))
            },
            stream_schedules: Vec::new(),
            wall_schedules: Vec::new(),
        })
    }

    /// Calls every processor's `init`, parents first; then the task may process.
    pub(crate) fn init(
        &mut self,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
        wall_clock_ms: i64,
    ) -> Result<()> {
        self.signals.wall_clock_ms = wall_clock_ms;
        let lifecycles = std::mem::take(&mut self.lifecycles);
        let mut result = Ok(());
        for node in &lifecycles {
            let mut ctx = self.context(collector, scratch, 0, None);
            result = node.borrow_mut().init(&mut ctx);
            if result.is_err() {
                break;
            }
        }
        self.lifecycles = lifecycles;
        self.collect_schedules();
        result
    }
}
