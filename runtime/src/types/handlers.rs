//! Exception handlers for one record, as Kafka Streams' (KIP-1033, KIP-1034): what happens when
//! a record's key or value cannot be deserialized (`deserialization_exception_handler`), and
//! when the application's own code fails on it — a processor's error, or a panic in a DSL
//! function or a processor (`processing_exception_handler`), and when a record a sink makes
//! cannot be written (`production_exception_handler`: larger than `max_request_size`). A
//! handler answers
//! [`HandlerResponse::Fail`] (the thread stops with the error; the default, Kafka's
//! `LogAndFail…`) or [`HandlerResponse::Continue`] (the record is skipped, once, and counted in
//! `dropped-records`; for a production error only that one write is dropped). With `errors_dead_letter_queue_topic_name` set, each skipped record goes
//! to that topic as it was read — its key and value bytes, its timestamp — with KIP-1034's
//! headers naming the error and where the record came from (`DLQ_HEADERS`).
//!
//! Errors of riffle itself (a store, the log, a broker) are never handled here: they stop the
//! thread as before.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use riffle_state_dir::TaskId;

use crate::types::error::{Error, Result};

/// What a handler decides for a failed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerResponse {
    /// Stop: the stream thread fails with the error (Kafka's `FAIL`).
    Fail,
    /// Skip the record and go on (Kafka's `CONTINUE`; `RESUME` in Kafka 4.2's names).
    Continue,
}

/// Where a handled error happened (Kafka's `ErrorHandlerContext`). The input record's fields
/// are `None` when there is no input record: a production error while punctuating or while a
/// commit flushes the record caches (Kafka's `null` topic and `-1` partition and offset).
#[derive(Debug)]
#[non_exhaustive]
pub struct ErrorHandlerContext<'a> {
    /// The input record's topic.
    pub topic: Option<&'a str>,
    /// Its partition.
    pub partition: Option<u32>,
    /// Its offset.
    pub offset: Option<u64>,
    /// The input record's timestamp (the extracted one), or the written record's.
    pub timestamp: i64,
    /// The processor that failed, for a processor's error (`None` for a serde or a DSL
    /// function: their nodes have no names at run time).
    pub processor_node_id: Option<&'a str>,
    /// The task processing it; for a global table's record, `TaskId::new(u32::MAX,
    /// u32::MAX)` (Kafka's `-1_-1`: the global thread runs no task).
    pub task_id: TaskId,
    /// The record's key as read.
    pub source_raw_key: Option<&'a [u8]>,
    /// The record's value as read.
    pub source_raw_value: Option<&'a [u8]>,
}

type HandlerFn = dyn Fn(&ErrorHandlerContext<'_>, &Error) -> HandlerResponse + Send + Sync;

/// A handler, as the configuration holds it: Kafka's two built-ins or a function.
#[derive(Clone)]
pub struct ExceptionHandlerRef {
    name: &'static str,
    handle: Option<Arc<HandlerFn>>,
    response: HandlerResponse,
}

impl ExceptionHandlerRef {
    /// Logs the error and fails (Kafka's `LogAndFailExceptionHandler`, the default).
    pub fn log_and_fail() -> Self {
        ExceptionHandlerRef {
            name: "LogAndFail",
            handle: None,
            response: HandlerResponse::Fail,
        }
    }

    /// Logs the error, skips the record and goes on (Kafka's `LogAndContinueExceptionHandler`).
    pub fn log_and_continue() -> Self {
        ExceptionHandlerRef {
            name: "LogAndContinue",
            handle: None,
            response: HandlerResponse::Continue,
        }
    }

    /// A handler of the application's own: given where the error happened and the error.
    pub fn from_fn(
        f: impl Fn(&ErrorHandlerContext<'_>, &Error) -> HandlerResponse + Send + Sync + 'static,
    ) -> Self {
        ExceptionHandlerRef {
            name: "custom",
            handle: Some(Arc::new(f)),
            response: HandlerResponse::Fail,
        }
    }

    pub(crate) fn handle(
        &self,
        context: &ErrorHandlerContext<'_>,
        error: &Error,
    ) -> HandlerResponse {
        match &self.handle {
            Some(f) => f(context, error),
            None => self.response,
        }
    }
}

impl Default for ExceptionHandlerRef {
    fn default() -> Self {
        ExceptionHandlerRef::log_and_fail()
    }
}

impl fmt::Debug for ExceptionHandlerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl FromStr for ExceptionHandlerRef {
    type Err = Error;

    /// `fail` or `continue` (also `log_and_fail`, `LogAndFail`, `log_and_continue`,
    /// `LogAndContinue`), or the class names of Kafka's built-ins
    /// (`org.apache.kafka.streams.errors.LogAndContinueExceptionHandler`,
    /// `…LogAndFailExceptionHandler`, `…LogAndContinueProcessingExceptionHandler`,
    /// `…LogAndFailProcessingExceptionHandler`, `…DefaultProductionExceptionHandler`, which
    /// fails).
    fn from_str(s: &str) -> Result<Self> {
        let short = s.rsplit('.').next().unwrap_or(s);
        match short.to_ascii_lowercase().replace('_', "").as_str() {
            "fail"
            | "logandfail"
            | "logandfailexceptionhandler"
            | "logandfailprocessingexceptionhandler"
            | "defaultproductionexceptionhandler" => Ok(ExceptionHandlerRef::log_and_fail()),
            "continue"
            | "logandcontinue"
            | "logandcontinueexceptionhandler"
            | "logandcontinueprocessingexceptionhandler" => {
                Ok(ExceptionHandlerRef::log_and_continue())
            }
            _ => Err(Error::Config(format!(
                "unknown exception handler {s:?} (expected fail, continue, or a Kafka LogAndFail… / LogAndContinue… class name)"
            ))),
        }
    }
}

/// The header names of a dead-letter record (KIP-1034's), each value UTF-8: the error's kind,
/// its message, its chain of causes (Kafka's stack trace), and the input record's topic,
/// partition and offset (decimal).
pub const DLQ_HEADERS: [&str; 6] = [
    "__streams.errors.exception",
    "__streams.errors.message",
    "__streams.errors.stacktrace",
    "__streams.errors.topic",
    "__streams.errors.partition",
    "__streams.errors.offset",
];

/// The handlers a stream thread applies, from its configuration.
#[derive(Clone, Debug, Default)]
pub(crate) struct Handlers {
    pub(crate) deserialization: ExceptionHandlerRef,
    pub(crate) processing: ExceptionHandlerRef,
    pub(crate) production: ExceptionHandlerRef,
    pub(crate) dead_letter_queue: Option<String>,
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The error and its causes, one per line (what a dead-letter record's stack-trace header
/// carries).
pub(crate) fn error_chain(error: &Error) -> String {
    let mut out = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        out.push_str("\ncaused by: ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_and_short_names_parse() {
        for (name, response) in [
            ("fail", HandlerResponse::Fail),
            ("continue", HandlerResponse::Continue),
            ("LogAndContinue", HandlerResponse::Continue),
            ("log_and_fail", HandlerResponse::Fail),
            (
                "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler",
                HandlerResponse::Continue,
            ),
            (
                "org.apache.kafka.streams.errors.LogAndFailProcessingExceptionHandler",
                HandlerResponse::Fail,
            ),
        ] {
            let handler: ExceptionHandlerRef = name.parse().unwrap_or_default();
            assert_eq!(handler.response, response, "{name}");
        }
        assert!("retry".parse::<ExceptionHandlerRef>().is_err());
    }
}
