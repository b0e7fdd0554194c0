//! The engine: what runs a built topology. A task and its stores, restoration, the offset-sum
//! snapshot, the stream thread's loop (decisions in `loop_core`, I/O in `thread`), the global
//! thread, and the counters the threads keep. Above the DSL and the topology; below the
//! application (`app`), which starts and stops it.

pub(crate) mod global;
pub(crate) mod loop_core;
pub(crate) mod metrics;
pub(crate) mod query;
pub(crate) mod restore;
pub(crate) mod shared;
pub(crate) mod snapshot;
pub(crate) mod task;
pub(crate) mod thread;
