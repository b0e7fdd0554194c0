//! The engine's side of the processor API, never public: the nodes that run a [`Processor`] or
//! a [`FixedKeyProcessor`] (and their `init` and `close`), what a processor node knows of
//! itself ([`NodeShared`]), what a task's nodes share with the task while they run
//! ([`TaskSignals`]), and punctuation schedules ([`Schedule`]).

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use riffle_state_dir::TaskId;

use crate::processor::node::{Forward, Node, ProcessingContext};
use crate::state::def::StoreKind;
use crate::types::error::{Error, Result};
use crate::types::record::{FixedKeyRecord, Record};
use crate::types::timestamp::system_time_ms;

use super::context::{FixedKeyProcessorContext, ProcessorContext};
use super::{FixedKeyProcessor, Processor, PunctuationType};

/// A punctuator with its node's context bound in: called with the task's raw context and the
/// punctuation time.
pub(crate) type Punctuator = Box<dyn FnMut(&mut ProcessingContext<'_>, i64) -> Result<()>>;

/// A scheduled punctuator (Kafka Streams' `PunctuationSchedule`).
pub(crate) struct Schedule {
    pub(crate) kind: PunctuationType,
    pub(crate) interval: i64,
    /// When it fires next (ms, stream or wall-clock time).
    pub(crate) next: i64,
    pub(crate) cancelled: Rc<Cell<bool>>,
    pub(crate) punctuator: Punctuator,
    /// Order among schedules due at the same time: scheduling order.
    pub(crate) seq: u64,
}

impl Schedule {
    /// The next deadline after firing at `now`: one interval on, or — if `now` jumped over
    /// several — the first multiple of the interval after `now`, so missed punctuations are
    /// not made up (Kafka Streams' `PunctuationSchedule.next`).
    pub(crate) fn reschedule(&mut self, now: i64) {
        let mut next = self.next.saturating_add(self.interval);
        if now >= next {
            let missed = (now - self.next) / self.interval;
            next = self
                .next
                .saturating_add(missed.saturating_add(1).saturating_mul(self.interval));
        }
        self.next = next;
    }
}

/// What a task's nodes share with the task while they run: time, requests and new schedules.
pub(crate) struct TaskSignals {
    pub(crate) application_id: Arc<str>,
    /// The largest timestamp processed (-1 before the first record).
    pub(crate) stream_time: i64,
    /// The wall-clock time of the current loop iteration, in ms.
    pub(crate) wall_clock_ms: i64,
    /// A processor asked for a commit.
    pub(crate) commit_requested: bool,
    /// Schedules made since the task last collected them.
    pub(crate) scheduled: Vec<Schedule>,
    pub(crate) next_seq: u64,
    /// Records dropped since the thread last collected them (late for their windows).
    pub(crate) dropped_records: u64,
    /// How often a stream–stream left or outer join looks for unmatched records whose windows
    /// closed, in wall-clock ms (`outer_join_emit_interval`).
    pub(crate) outer_join_emit_interval_ms: i64,
}

impl TaskSignals {
    pub(crate) fn new(application_id: Arc<str>) -> Self {
        TaskSignals {
            application_id,
            stream_time: -1,
            wall_clock_ms: system_time_ms(),
            commit_requested: false,
            scheduled: Vec::new(),
            next_seq: 0,
            dropped_records: 0,
            outer_join_emit_interval_ms: 1_000,
        }
    }
}

/// A store connected to a processor: its name, slot in the task and typed serdes.
#[derive(Clone)]
pub(crate) struct ConnectedStore {
    pub(crate) name: String,
    pub(crate) slot: usize,
    pub(crate) serdes: Option<Arc<dyn Any + Send + Sync>>,
    pub(crate) kind: StoreKind,
}

/// What a processor node knows of itself.
pub(crate) struct NodeShared<KOut, VOut> {
    pub(crate) name: Arc<str>,
    pub(crate) forward: Forward<KOut, VOut>,
    pub(crate) child_names: Vec<Arc<str>>,
    pub(crate) stores: Vec<ConnectedStore>,
}

impl<KOut, VOut> NodeShared<KOut, VOut> {
    pub(super) fn error(&self, task: TaskId, e: Error) -> Error {
        match e {
            Error::User(source) => Error::Processor {
                processor: self.name.to_string(),
                task,
                source,
            },
            // A store's serde refusing a key or value: the processor's failure, named.
            e @ Error::SerializeState { .. } => Error::Processor {
                processor: self.name.to_string(),
                task,
                source: Box::new(e),
            },
            other => other,
        }
    }

    pub(super) fn misuse(&self, reason: String) -> Error {
        Error::ProcessorContext {
            processor: self.name.to_string(),
            reason,
        }
    }
}

/// A node's start and end: processors' `init` and `close`.
pub(crate) trait Lifecycle {
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()>;
    fn close(&mut self);
}

/// Runs a [`Processor`].
pub(crate) struct ProcessorNode<KIn, VIn, KOut, VOut> {
    pub(crate) processor: Box<dyn Processor<KIn, VIn, KOut, VOut>>,
    pub(crate) node: Rc<NodeShared<KOut, VOut>>,
}

impl<KIn: 'static, VIn: 'static, KOut: Clone + 'static, VOut: Clone + 'static> Node<KIn, VIn>
    for ProcessorNode<KIn, VIn, KOut, VOut>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: KIn, value: VIn) -> Result<()> {
        let task = ctx.task;
        let record = Record::with_headers_of(key, value, ctx.timestamp, ctx.headers.clone());
        let mut pctx = ProcessorContext::new(ctx.reborrow(), &self.node);
        self.processor
            .process(&mut pctx, record)
            .map_err(|e| self.node.error(task, e))
    }
}

impl<KIn: 'static, VIn: 'static, KOut: Clone + 'static, VOut: Clone + 'static> Lifecycle
    for ProcessorNode<KIn, VIn, KOut, VOut>
{
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let task = ctx.task;
        let mut pctx = ProcessorContext::new(ctx.reborrow(), &self.node);
        self.processor
            .init(&mut pctx)
            .map_err(|e| self.node.error(task, e))
    }
    fn close(&mut self) {
        self.processor.close();
    }
}

/// Runs a [`FixedKeyProcessor`].
pub(crate) struct FixedKeyNode<K, VIn, VOut> {
    pub(crate) processor: Box<dyn FixedKeyProcessor<K, VIn, VOut>>,
    pub(crate) node: Rc<NodeShared<K, VOut>>,
    pub(crate) _types: PhantomData<fn(VIn)>,
}

impl<K: Clone + 'static, VIn: 'static, VOut: Clone + 'static> Node<K, VIn>
    for FixedKeyNode<K, VIn, VOut>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: VIn) -> Result<()> {
        let task = ctx.task;
        let record = FixedKeyRecord::new(Record::with_headers_of(
            key,
            value,
            ctx.timestamp,
            ctx.headers.clone(),
        ));
        let mut pctx = FixedKeyProcessorContext {
            inner: ProcessorContext::new(ctx.reborrow(), &self.node),
        };
        self.processor
            .process(&mut pctx, record)
            .map_err(|e| self.node.error(task, e))
    }
}

impl<K: Clone + 'static, VIn: 'static, VOut: Clone + 'static> Lifecycle
    for FixedKeyNode<K, VIn, VOut>
{
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let task = ctx.task;
        let mut pctx = FixedKeyProcessorContext {
            inner: ProcessorContext::new(ctx.reborrow(), &self.node),
        };
        self.processor
            .init(&mut pctx)
            .map_err(|e| self.node.error(task, e))
    }
    fn close(&mut self) {
        self.processor.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(next: i64, interval: i64) -> Schedule {
        Schedule {
            kind: PunctuationType::StreamTime,
            interval,
            next,
            cancelled: Rc::default(),
            punctuator: Box::new(|_, _| Ok(())),
            seq: 0,
        }
    }

    #[test]
    fn a_jump_over_several_intervals_reschedules_to_the_next_multiple_after_it() {
        let mut s = schedule(0, 10);
        s.reschedule(3);
        assert_eq!(s.next, 10, "one interval on");
        s.reschedule(10);
        assert_eq!(s.next, 20, "exactly at the deadline: the next one");
        s.reschedule(57);
        assert_eq!(s.next, 60, "jumped over 20..50: no make-up punctuations");
    }
}
