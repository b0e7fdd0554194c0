//! Benchmark fixtures for riffle, shared by the criterion benches (`cargo bench -p
//! riffle-bench`) and by this package's `riffle-bench` binary (src/bin/riffle-bench/), so both
//! measure the same thing.
//!
//! What this crate owns:
//! - [`SnapshotFixture`]: KAFKA-21171's snapshot benchmark fixture — a real [`TaskRegistry`], a
//!   real `StateDirectory` whose local offset map holds every task, RESTORING tasks held by a
//!   state updater that is not started, one changelog partition per task — and
//!   [`SnapshotFixture::measure`], which times only the refresh (never the offset changes made
//!   between two refreshes) and counts its allocations;
//! - [`IdleRun`]: a real stream thread over an empty N-partition input topic of the embedded log,
//!   running `groupByKey().count()`, and the CPU time of that thread ([`thread_cpu_time`]);
//!   [`bare_wait`]: the same measurement of a thread that only does the idle loop's wait — the
//!   floor under any idle thread on this machine; [`IdleRun::first_record_latency`]: how long a
//!   record appended to the idle thread's input takes to be processed;
//! - [`IdleRun::trickle`]: R records a second, one at a time, to random partitions of that
//!   input, with the thread's CPU time and each record's latency ([`TrickleReport`]);
//! - [`latency`]: how a latency is watched from outside the thread, and its percentiles;
//! - [`alloc`]: reading the per-thread counters of task-manager's counting allocator;
//! - [`proc_stats`]: what `/proc` says of a thread, a process and the machine (CPU time, threads,
//!   open files, RSS, load average), through `procfs`.
//!
//! What it is not: a harness. It prints nothing and installs no global allocator; the binary
//! that measures (the criterion bench, `riffle-bench`) installs
//! `riffle_task_manager::alloc_counter::CountingAllocator` and reports.
//!
//! ```
//! use riffle_bench::{FixtureState, SnapshotFixture};
//! use riffle_task_manager::SnapshotStrategy;
//! # fn main() -> Result<(), riffle_task_manager::BoxError> {
//! let mut fixture = SnapshotFixture::build(100, FixtureState::Restoring, SnapshotStrategy::Incremental)?;
//! // Ten refreshes, each after 3 tasks' changelog positions advanced; only the refreshes are timed.
//! let spent = fixture.timed_refreshes(3, 10);
//! assert!(spent.as_nanos() > 0);
//! assert!(fixture.matches_full_rebuild());
//! # Ok(()) }
//! ```
//!
//! [`TaskRegistry`]: riffle_task_manager::TaskRegistry

pub mod alloc;
mod idle;
pub mod latency;
pub mod proc_stats;
mod snapshot;
mod trickle;

pub use crate::{
    idle::{IdleReport, IdleRun, IdleSettings, bare_wait, idle_topology},
    latency::{Latencies, SeededRng},
    proc_stats::thread_cpu_time,
    snapshot::{FixtureState, MAX_TASKS, Measurement, SnapshotFixture, timer_overhead},
    trickle::TrickleReport,
};
