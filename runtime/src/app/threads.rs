//! The application's threads: starting the global thread and the stream threads, joining them,
//! and what happens when a stream thread dies — the uncaught exception handler's answer, and a
//! replacement thread in the dead one's slot ([`Supervision`] keeps what that needs).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::engine::global::GlobalState;
use crate::engine::global::run_global_thread;
use crate::engine::thread::{StreamThread, ThreadParts};
use crate::types::error::{Error, Result};

/// What to do when a stream thread dies (Kafka Streams'
/// `StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamThreadExceptionResponse {
    /// Start a new stream thread; the dead thread's tasks move to the live threads and resume
    /// from their stores and checkpoints.
    ReplaceThread,
    /// Stop this application instance (the default).
    ShutdownClient,
}

/// Decides what happens when a stream thread dies.
pub(crate) type ExceptionHandler =
    Arc<dyn Fn(&Error) -> StreamThreadExceptionResponse + Send + Sync>;

/// The application's threads as it supervises them: their join handles, how the stream threads
/// are numbered, the handler asked when one dies, and the replacements made.
pub(crate) struct Supervision {
    handles: Mutex<Vec<JoinHandle<Result<()>>>>,
    handler: Mutex<ExceptionHandler>,
    thread_numbers: AtomicUsize,
    threads_replaced: AtomicU64,
    /// The input record (topic, partition, offset) a stream thread last died on: a
    /// replacement dying on the same record shuts the application down instead of replaying it
    /// forever.
    last_failed_record: Mutex<Option<(String, u32, u64)>>,
}

impl Supervision {
    /// No thread yet; a dying thread shuts the client down.
    pub(crate) fn new() -> Supervision {
        Supervision {
            handles: Mutex::new(Vec::new()),
            handler: Mutex::new(Arc::new(|_: &Error| {
                StreamThreadExceptionResponse::ShutdownClient
            })),
            thread_numbers: AtomicUsize::new(0),
            threads_replaced: AtomicU64::new(0),
            last_failed_record: Mutex::new(None),
        }
    }

    /// What a dying stream thread asks from now on.
    pub(crate) fn set_handler(&self, handler: ExceptionHandler) {
        let mut slot = self.handler.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = handler;
    }

    /// Stream threads replaced after they died.
    pub(crate) fn threads_replaced(&self) -> u64 {
        self.threads_replaced.load(Ordering::Relaxed)
    }

    fn add(&self, handle: JoinHandle<Result<()>>) {
        self.handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(handle);
    }

    /// The next stream thread's name, as Kafka Streams names them
    /// (`<application_id>-StreamThread-<n>`).
    pub(crate) fn next_thread_name(&self, application_id: &str) -> String {
        let n = self.thread_numbers.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{application_id}-StreamThread-{n}")
    }

    /// Joins every stream thread, replacements included, until none is left.
    pub(crate) fn join_all(&self) -> Vec<Result<()>> {
        let mut results = Vec::new();
        loop {
            let handles: Vec<_> = self
                .handles
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
                .collect();
            if handles.is_empty() {
                return results;
            }
            // A dying thread may add its replacement while we join: look again after each batch.
            for handle in handles {
                let name = handle.thread().name().unwrap_or("stream thread").to_owned();
                results.push(handle.join().unwrap_or_else(|_| {
                    Err(Error::ThreadPanicked {
                        thread: name,
                        message: "panicked outside the loop".into(),
                    })
                }));
            }
        }
    }
}

/// Starts `<application_id>-GlobalStreamThread` and waits until it restored the global stores
/// (its error, if it could not). A global thread that fails later stops the application, as
/// Kafka Streams' does; its error is what `close` returns.
pub(crate) fn start_global_thread(
    parts: &ThreadParts,
    supervision: &Supervision,
    state: GlobalState,
) -> Result<()> {
    let (restored, outcome) = std::sync::mpsc::channel();
    let wiring = parts.wiring.clone();
    let lifecycle = parts.lifecycle.clone();
    let globals = parts.globals.clone();
    let name = format!("{}-GlobalStreamThread", wiring.config.application_id);
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_global_thread(&wiring, &lifecycle, &globals, state, restored)
            }));
            let result = match run {
                Ok(result) => result,
                Err(_) => Err(Error::ThreadPanicked {
                    thread: name,
                    message: "the global thread panicked".into(),
                }),
            };
            if let Err(e) = &result {
                tracing::error!(error = %e, "the global thread failed; stopping the application");
                lifecycle.shut_down(&*wiring.backend);
            }
            result
        })
        .map_err(|e| Error::IllegalState(format!("cannot spawn the global thread: {e}")))?;
    supervision.add(handle);
    match outcome.recv() {
        Ok(restored) => restored,
        Err(_) => Err(Error::IllegalState(
            "the global thread stopped before it restored the global stores".into(),
        )),
    }
}

/// Starts stream thread `name` in slot `slot`.
pub(crate) fn spawn_stream_thread(
    parts: &ThreadParts,
    supervision: &Arc<Supervision>,
    slot: usize,
    name: String,
) -> Result<()> {
    let owned = parts.clone();
    let supervising = supervision.clone();
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn(move || run_stream_thread(owned, supervising, slot, thread_name))
        .map_err(|e| Error::IllegalState(format!("cannot spawn a stream thread: {e}")))?;
    supervision.add(handle);
    Ok(())
}

/// A stream thread's whole life: run; if it dies, free what it held and ask the handler.
fn run_stream_thread(
    parts: ThreadParts,
    supervision: Arc<Supervision>,
    slot: usize,
    name: String,
) -> Result<()> {
    // Built on its own thread: a task's processor nodes never cross threads.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        StreamThread::new(slot, name.clone(), parts.clone()).run()
    }));
    let error = match outcome {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Error::ThreadPanicked {
                thread: name.clone(),
                message,
            }
        }
    };
    let wiring = &parts.wiring;
    // The thread's tasks and stores were dropped while unwinding; release its claims so the
    // live threads can take them.
    for task in wiring.group.tasks() {
        wiring.state_dir.unlock_task(task, &name);
    }
    wiring.coordinator.leave(&name);
    wiring.backend.wake_waiters();
    let handler = supervision
        .handler
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let response = handler(&error);
    // A record that killed a thread kills its replacement too (a deterministic failure under
    // a fail handler): the second time, the application stops instead of looping.
    let same_record = {
        let mut last = supervision
            .last_failed_record
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let location = error
            .record_location()
            .map(|(t, p, o)| (t.to_owned(), p, o));
        let again = location.is_some() && *last == location;
        if location.is_some() {
            *last = location;
        }
        again
    };
    if same_record && response == StreamThreadExceptionResponse::ReplaceThread {
        tracing::error!(thread = %name, error = %error, "a replaced stream thread failed on the same record again; shutting the application down instead of replacing it");
    }
    if response == StreamThreadExceptionResponse::ReplaceThread
        && !same_record
        && !parts.lifecycle.is_shutting_down()
    {
        tracing::error!(thread = %name, error = %error, "stream thread died; replacing it");
        supervision.threads_replaced.fetch_add(1, Ordering::Relaxed);
        let replacement = supervision.next_thread_name(&wiring.config.application_id);
        wiring.coordinator.register(&replacement);
        wiring.backend.wake_waiters();
        spawn_stream_thread(&parts, &supervision, slot, replacement)?;
        return Ok(());
    }
    tracing::error!(thread = %name, error = %error, "stream thread died; shutting the application down");
    parts.lifecycle.shut_down(&*wiring.backend);
    Err(error)
}
