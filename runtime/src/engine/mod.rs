//! The engine: what runs a built topology. A task and its stores, restoration, the offset-sum
//! snapshot, the stream thread's loop (decisions in `loop_core`, I/O in `thread`), the global
//! thread, and the counters the threads keep. Above the DSL and the topology; below the
//! application (`app`), which starts and stops it.
//!
//! What the threads of one instance share comes in parts, each owned by the module of its
//! concept and handed only to those that use it: the static wiring (`instance`), the stop flag
//! and idle versions (`lifecycle`), the metric sources (`metrics`), the query inboxes (`query`)
//! and the global tables (`global`). A stream thread takes them all, as a `ThreadParts`.

pub(crate) mod global;
pub(crate) mod instance;
pub(crate) mod lifecycle;
pub(crate) mod loop_core;
pub(crate) mod metrics;
pub(crate) mod query;
pub(crate) mod restore;
pub(crate) mod snapshot;
pub(crate) mod task;
pub(crate) mod thread;
