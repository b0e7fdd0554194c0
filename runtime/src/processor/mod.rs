//! The processor API: [`Processor`] and [`FixedKeyProcessor`], the [`ProcessorContext`] they
//! run in, punctuation ([`PunctuationType`], [`Cancellable`]) and typed access to their state
//! stores ([`KeyValueStore`]).
//!
//! The context is passed to every call (`init`, `process`, a punctuator) instead of being kept
//! from `init` as in Kafka Streams' Java API: what it lends (the task's stores, the thread's
//! outgoing batches) is borrowed only for the call, which the compiler checks.
//!
//! This file is the public API's front door: the processor traits, punctuation's types and the
//! re-exports an application names. The rest is one file per concern:
//! - `context`: [`ProcessorContext`] and [`FixedKeyProcessorContext`];
//! - `store_handle`: the typed [`KeyValueStore`] a processor gets from its context;
//! - `routed_sink`: the sink that routes records itself ([`StreamPartitioner`],
//!   [`TopicNameExtractor`]);
//! - `run`: the engine's side, never public: the nodes that run processors, their shared
//!   state, the task's signals and punctuation schedules.

pub(crate) mod collector;
mod context;
pub(crate) mod node;
pub(crate) mod routed_sink;
mod run;
mod store_handle;
pub(crate) mod window_store;

use std::cell::Cell;
use std::rc::Rc;

pub use crate::processor::window_store::{SessionStore, WindowStore};
pub(crate) use crate::state::def::StoreSerdes;
use crate::types::error::Result;
pub use crate::types::record::{FixedKeyRecord, Header, Headers, Record, RecordMetadata};
pub(crate) use crate::types::timestamp::system_time_ms;
pub use crate::types::timestamp::{
    FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, TimestampExtractor,
    TimestampExtractorRef, UsePartitionTimeOnInvalidTimestamp, WallclockTimestampExtractor,
};

pub use context::{FixedKeyProcessorContext, ProcessorContext};
pub use routed_sink::{
    RecordContext, StreamPartitioner, StreamPartitionerRef, TopicNameExtractor,
    TopicNameExtractorRef,
};
pub(crate) use run::{
    ConnectedStore, FixedKeyNode, Lifecycle, NodeShared, ProcessorNode, Schedule, TaskSignals,
};
pub use store_handle::KeyValueStore;
pub(crate) use store_handle::StoreScratch;

/// A processor: takes records of one type, forwards records of another (Kafka Streams'
/// `Processor<KIn, VIn, KOut, VOut>`). One instance runs per task, built by the supplier given
/// to [`crate::KStream::process`] or [`crate::Topology::add_processor`].
pub trait Processor<KIn, VIn, KOut, VOut>: 'static {
    /// Called once when the task starts, before any record: schedule punctuators here.
    fn init(&mut self, ctx: &mut ProcessorContext<'_, KOut, VOut>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
    /// Processes one record; forward results with [`ProcessorContext::forward`].
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<()>;
    /// Called once when the task closes.
    fn close(&mut self) {}
}

/// A processor that cannot change the key (Kafka Streams' `FixedKeyProcessor`): the stream
/// after it needs no repartitioning.
pub trait FixedKeyProcessor<K, VIn, VOut>: 'static {
    /// Called once when the task starts.
    fn init(&mut self, ctx: &mut FixedKeyProcessorContext<'_, K, VOut>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
    /// Processes one record; forward results with [`FixedKeyProcessorContext::forward`].
    fn process(
        &mut self,
        ctx: &mut FixedKeyProcessorContext<'_, K, VOut>,
        record: FixedKeyRecord<K, VIn>,
    ) -> Result<()>;
    /// Called once when the task closes.
    fn close(&mut self) {}
}

/// Which clock a punctuator follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PunctuationType {
    /// The task's stream time (the largest record timestamp it processed): fires when stream
    /// time reaches the next multiple of the interval, once however many intervals it
    /// jumped.
    StreamTime,
    /// The system clock: fires every interval from when it was scheduled, even when the task
    /// gets no records.
    WallClockTime,
}

/// Cancels a scheduled punctuator ([`ProcessorContext::schedule`]).
#[derive(Clone, Debug)]
pub struct Cancellable {
    cancelled: Rc<Cell<bool>>,
}

impl Cancellable {
    /// Stops the punctuator; it does not fire again.
    pub fn cancel(&self) {
        self.cancelled.set(true);
    }
}
