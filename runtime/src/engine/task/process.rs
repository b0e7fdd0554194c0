//! Processing: the buffered records of a task's inputs in timestamp order, each under
//! `catch_unwind`, a failed record handed to its exception handler; and the metrics one
//! `process` call publishes.

use std::sync::atomic::Ordering;

use riffle_record::Record;

use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::types::error::{Error, Result};
use crate::types::handlers::panic_message;
use crate::types::handlers::{ErrorHandlerContext, HandlerResponse, Handlers};

use super::StreamTask;

impl StreamTask {
    /// Processes up to `max` buffered records; returns how many it processed.
    pub(crate) fn process(
        &mut self,
        max: usize,
        collector: &mut RecordCollector,
        scratch: &mut Scratch,
        handlers: &Handlers,
    ) -> Result<usize> {
        let mut done = 0;
        while done < max {
            let mut next: Option<(usize, i64)> = None;
            for (i, input) in self.inputs.iter_mut().enumerate() {
                input.fill_head()?;
                if input.head.is_some() && next.is_none_or(|(_, ts)| input.head_timestamp < ts) {
                    next = Some((i, input.head_timestamp));
                }
            }
            let Some((i, timestamp)) = next else { break };
            let Some(record) = self.inputs[i].head.take() else {
                break;
            };
            self.signals.stream_time = self.signals.stream_time.max(timestamp);
            let source = self.inputs[i].source.clone();
            let mut ctx = self.context(collector, scratch, timestamp, Some(&record));
            // A panic in the application's code is one record's failure, for the processing
            // exception handler (the unwinding dropped every node's borrow).
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                source.borrow_mut().process(&mut ctx, &record)
            }));
            let failed = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(panic) => Some(Error::Panicked {
                    message: panic_message(&*panic),
                }),
            };
            if let Some(error) = failed {
                self.handle_failure(error, &record, timestamp, collector, handlers)?;
            }
            self.inputs[i].consumed = record.offset() + 1;
            done += 1;
            if !self.signals.scheduled.is_empty() {
                self.collect_schedules();
            }
            self.punctuate_stream_time(collector, scratch)?;
            if self.signals.commit_requested {
                break;
            }
        }
        self.uncommitted += done as u64;
        Ok(done)
    }

    /// A record's deserialization or processing failed: its handler fails the thread or skips
    /// the record (counted in `dropped-records`, and sent to the dead-letter queue if there is
    /// one). Any other error (a store, the log, a broker) fails the thread.
    fn handle_failure(
        &mut self,
        error: Error,
        record: &Record,
        timestamp: i64,
        collector: &mut RecordCollector,
        handlers: &Handlers,
    ) -> Result<()> {
        let tp = record.topic_partition();
        let (handler, what, processor) = match &error {
            Error::Deserialize { .. } => (&handlers.deserialization, "deserializing", None),
            Error::Processor { processor, .. } => {
                (&handlers.processing, "processing", Some(processor.clone()))
            }
            // A serde failing on a store's key or value, or on a foreign-key join's own records,
            // inside a node: a processing error, as Kafka's serde exceptions inside `process`.
            // (A sink's serde failing went to the production handler already.)
            Error::User(_)
            | Error::Panicked { .. }
            | Error::SerializeState { .. }
            | Error::Serialize { .. } => (&handlers.processing, "processing", None),
            _ => return Err(error),
        };
        let context = ErrorHandlerContext {
            topic: Some(&*tp.topic),
            partition: Some(tp.partition),
            offset: Some(record.offset()),
            timestamp,
            processor_node_id: processor.as_deref(),
            task_id: self.id,
            source_raw_key: record.key().map(|k| &k[..]),
            source_raw_value: record.value().map(|v| &v[..]),
        };
        if handler.handle(&context, &error) == HandlerResponse::Fail {
            tracing::error!(task = %self.id, topic = %tp.topic, partition = tp.partition, offset = record.offset(), error = %error, "{what} a record failed; the exception handler says fail");
            return Err(match error {
                Error::Deserialize { .. } => error,
                other => Error::RecordFailed {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    offset: record.offset(),
                    processor,
                    source: Box::new(other),
                },
            });
        }
        tracing::warn!(task = %self.id, topic = %tp.topic, partition = tp.partition, offset = record.offset(), error = %error, "{what} a record failed; the exception handler says continue: skipping it");
        self.signals.dropped_records += 1;
        collector.send_dead_letter(&error, Some(record), timestamp, self.id.partition)?;
        Ok(())
    }

    /// Publishes what one `process` call did into the task's metrics: records processed and
    /// dropped, and each input's position (once per call, never per record).
    pub(crate) fn publish_metrics(&mut self, processed: usize, dropped: u64) {
        // At the DEBUG recording level the stores' timed reads and writes, as they happen (not
        // at commit: the latencies' sample windows are 30 s).
        for (store, (_, metrics)) in self.stores.stores.iter_mut().zip(&self.store_metrics) {
            if store.timing() {
                let (puts, gets) = store.take_timings();
                metrics
                    .put
                    .record_many(puts.count, puts.nanos, puts.max_nanos);
                metrics
                    .get
                    .record_many(gets.count, gets.nanos, gets.max_nanos);
            }
        }
        let Some(metrics) = &self.metrics else {
            return;
        };
        metrics
            .processed
            .fetch_add(processed as u64, Ordering::Relaxed);
        if dropped > 0 {
            metrics.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        for (input, (_, consumed)) in self.inputs.iter().zip(&metrics.consumed) {
            consumed.store(input.consumed, Ordering::Relaxed);
        }
    }
}
