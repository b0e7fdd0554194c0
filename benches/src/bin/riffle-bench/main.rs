//! `riffle-bench`: the measurements of docs/design.md §6, each side by side with its baseline in
//! the same run (`cargo run --release -p riffle-bench -- <bench> …`).
//!
//! - `cargo run --release -p riffle-bench -- snapshot`: one offset-sum snapshot refresh by task
//!   count, task state and number of changed tasks, incremental beside full rebuild (KAFKA-21171's
//!   benchmark);
//! - `cargo run --release -p riffle-bench -- idle`: CPU share of one idle stream thread with N
//!   tasks, per strategy, and the latency of a record arriving at the idle thread;
//! - `cargo run --release -p riffle-bench -- trickle`: R records/s, one at a time, to random
//!   partitions of an N-partition input: the stream thread's CPU share and per-record latency, per
//!   fetch strategy;
//! - `cargo run --release -p riffle-bench -- throughput`: the groupByKey-count sample end to end,
//!   records/s and heap allocations per record, per store and guarantee;
//! - `cargo run --release -p riffle-bench -- windowed`: a tumbling and a session count end to end
//!   beside the plain count on the same input, records/s and allocations per record per store, and
//!   the tumbling count with longer retentions (the cost of expiring segments);
//! - `cargo run --release -p riffle-bench -- restore`: the state updater's restore rate, per store;
//! - `cargo run --release -p riffle-bench -- join`: a stream–table join beside a `map_values` of
//!   the same stream, records/s and allocations per record, per table store;
//! - `cargo run --release -p riffle-bench -- scale`: the sample with 100 to 20,000 tasks on
//!   persistent stores — start-up, records/s, the time to restore every task, threads, open files
//!   and RSS;
//! - `cargo run --release -p riffle-bench -- soak`: the sample under `--follow` with a steady input
//!   for minutes: its RSS, threads and open files over time, and the log directory's disk use;
//! - `cargo run --release -p riffle-bench -- retention`: a retention pass with nothing due (per
//!   partition), one deleting segments (per segment), and `delete_records` (per call);
//! - `cargo run --release -p riffle-bench -- kafka`: the sample on a Kafka cluster under
//!   at_least_once and exactly_once, records/s and CPU per record (riffle's and the broker's);
//! - `cargo run --release -p riffle-bench -- log`: the embedded log shared by processes — append
//!   and fetch throughput with 1 and 4 processes on 1 and 100 partitions, the cross-process wake-up
//!   latency;
//! - `cargo run --release -p riffle-bench -- group`: instances of the sample in processes of
//!   their own forming one group on one embedded log — records/s and CPU per record with 1, 2 and
//!   4 instances, the failover time after a `kill -9` with 0 and 1 standby, and what a rebalance
//!   that moves nothing costs the instances it does not touch.
//!
//! The fixtures live in this package's library (`riffle_bench`), shared with the criterion
//! benches; the bundled sample's topology, input generator and count check come from
//! `riffle_cli::sample`, the same code `riffle sample` runs. This binary's global allocator
//! counts allocations per thread (task-manager's `CountingAllocator`); the `riffle` binary
//! installs none.

mod app;
mod group;
mod idle;
mod join;
mod kafka;
mod log;
mod plot;
mod retention;
mod scale;
mod snapshot;
mod soak;
mod trickle;
mod windowed;

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use riffle::{config::FetchStrategy, config::IdleWakeup, config::SnapshotStrategy};
use riffle_task_manager::alloc_counter::{count_process_wide, process_totals};
use serde::Serialize;

#[global_allocator]
static ALLOC: riffle_task_manager::alloc_counter::CountingAllocator =
    riffle_task_manager::alloc_counter::CountingAllocator;

/// riffle-bench: riffle's benchmarks (docs/design.md §6), each side by side with its baseline
/// in the same run.
#[derive(clap::Parser, Debug)]
#[command(name = "riffle-bench", version)]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
enum Bench {
    /// Offset-sum snapshot refresh: ns/op, B/op and allocs/op by task count, task state and
    /// changed tasks, incremental beside full rebuild.
    Snapshot(snapshot::Args),
    /// CPU share of one idle stream thread (empty input, stateful topology), per strategy, and
    /// the latency of the first record after idling.
    Idle(idle::Args),
    /// Records trickling in one at a time to random partitions of a many-partition input: the
    /// stream thread's CPU share and each record's latency, per fetch strategy.
    Trickle(trickle::Args),
    /// The groupByKey-count sample end to end on the embedded log: records/s and allocations per
    /// record, per store and processing guarantee.
    Throughput(app::ThroughputArgs),
    /// Windowed counts (tumbling, session) end to end on the embedded log beside the plain
    /// count on the same input: records/s, allocations per record, windows, dropped records and
    /// segment expiry, per store and retention.
    ///
    /// The input, by default: 1,000,000 records over 10,000 uniformly random keys in 4
    /// partitions, all on one stream thread; event time rising evenly over 4 h (14,400 s) from
    /// 2026-01-01T00:00:00Z, so 60 s tumbling windows make 240 windows and a key gets ~0.4
    /// records per window; sessions with a 150 s inactivity gap (a key's records come ~144 s
    /// apart, so a session holds ~2.8 records); 30 s of grace for both; 1 % of the records moved
    /// back by up to 240 s, about 3/4 of which miss their tumbling window's grace and are
    /// dropped (fewer for sessions). Emit on update unless --emit final. The tumbling output is
    /// checked against a replay of Kafka's window rules, the session output by its total. For
    /// --retained-windows beyond a few, give a --span-s many times the retention so that
    /// segments expire during the run.
    Windowed(windowed::Args),
    /// Restore rate of a store from its changelog, per store.
    Restore(app::RestoreArgs),
    /// A stream–table join end to end on the embedded log beside the same stream through a
    /// `map_values` alone: records/s and allocations per record, per table store. The table
    /// (100,000 rows by default) is loaded first; the stream (1,000,000 records over its keys)
    /// is timed, and every output checked against an independent join. Then a stream–stream
    /// windowed join (1,000,000 records, impressions and clicks over 10,000 keys, ±5 s) beside
    /// the two streams merged through a `map_values`, its output checked against the pairs
    /// counted independently.
    Join(join::Args),
    /// The groupByKey-count sample on a Kafka cluster under at_least_once and exactly_once with
    /// one commit interval (100 ms by default), over the same input, the guarantees alternating:
    /// records/s and CPU per record, this process's and (with --broker-pid) the broker's.
    Kafka(kafka::Args),
    /// The embedded log shared by processes: append and fetch throughput with 1 and 4 processes
    /// on 1 and 100 partitions, and the cross-process wake-up latency (p50/p99).
    Log(log::Args),
    /// The groupByKey-count sample with many tasks (100, 1,000, 5,000, 20,000 by default) on the
    /// file-backed embedded log with persistent stores: start-up time, records/s, the time to
    /// restore every task after the state directory is deleted, and the peak OS threads, open
    /// files and RSS, each task count in a process of its own.
    Scale(scale::Args),
    /// The groupByKey-count sample under --follow (a child process) while this process writes
    /// a steady input to the same embedded log for minutes (10 by default): the child's RSS,
    /// threads and open files over time, the RSS growth after the warm-up, the log directory's
    /// disk use (input, changelogs, repartition topics), and the counts checked at the end. Not
    /// for CI.
    Soak(soak::Args),
    /// What retention and record deletion cost on the file-backed log: a retention pass with
    /// nothing due (per partition), one deleting old segments (per segment deleted), and
    /// `delete_records` (per call), for 100, 1,000 and 10,000 partitions by default.
    Retention(retention::Args),
    /// Instances of the groupByKey-count sample (child processes, each with its own state
    /// directory) forming one group on one embedded log. Throughput: 2,000,000 records over
    /// 10,000 keys in 8 partitions written first, then 1, 2 and 4 instances of one stream thread
    /// each, timed until the group committed the input's end: records/s, each instance's CPU
    /// time and CPU per record, the counts checked. Failover: 2 instances while this process
    /// appends 5,000 records/s; one killed with SIGKILL (20 times, alternately), timed until every
    /// input partition's committed offset reached its end at the kill, then started again; with
    /// 0 and 1 standby replica (p50, p99, max). Rebalance: 2 instances of 3 threads over 4 tasks;
    /// an idle instance joins and leaves, an instance restarts: the group epoch, and whether the
    /// untouched instance's members lost a task, had their member epoch moved, or paused
    /// committing, beside a quiet window. Not for CI (minutes).
    Group(group::Args),
    /// The bundled samples, as `riffle sample` runs them: the child process of `soak` and
    /// `group`.
    #[command(subcommand, hide = true)]
    Sample(riffle_cli::sample::Sample),
}

fn main() -> std::process::ExitCode {
    riffle_cli::limit_malloc_arenas();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = <Cli as clap::Parser>::parse();
    match run(cli.bench) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", riffle_cli::render_error(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Snapshot(args) => snapshot::run(args),
        Bench::Idle(args) => idle::run(args),
        Bench::Trickle(args) => trickle::run(args),
        Bench::Throughput(args) => app::throughput(args),
        Bench::Windowed(args) => windowed::run(args),
        Bench::Restore(args) => app::restore(args),
        Bench::Join(args) => join::run(args),
        Bench::Kafka(args) => kafka::run(args),
        Bench::Log(args) => log::run(args),
        Bench::Scale(args) => scale::run(args),
        Bench::Soak(args) => soak::run(args),
        Bench::Group(args) => group::run(args),
        Bench::Retention(args) => retention::run(args),
        Bench::Sample(sample) => riffle_cli::sample::run(sample),
    }
}

/// `--strategy` values: the offset-sum snapshot's strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
enum Strategy {
    /// Versions and journals: O(1) when nothing changed.
    Incremental,
    /// Rebuilt from scratch on every refresh, as Kafka Streams does.
    FullRebuild,
}

impl Strategy {
    /// The name used in tables, JSON and `snapshot_strategy`.
    fn label(self) -> &'static str {
        match self {
            Strategy::Incremental => "incremental",
            Strategy::FullRebuild => "full-rebuild",
        }
    }
}

impl From<Strategy> for SnapshotStrategy {
    fn from(s: Strategy) -> Self {
        match s {
            Strategy::Incremental => SnapshotStrategy::Incremental,
            Strategy::FullRebuild => SnapshotStrategy::FullRebuild,
        }
    }
}

/// `--wakeup` values: when an idle stream thread wakes (`idle_wakeup`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
enum Wakeup {
    /// At its earliest deadline (heartbeat, commit, cleanup) or when data arrives: riffle's.
    Deadlines,
    /// Every poll_ms, data or not, as Kafka Streams' poll loop does.
    EveryPoll,
}

impl Wakeup {
    /// The name used in tables, JSON and `idle_wakeup`.
    fn label(self) -> &'static str {
        match self {
            Wakeup::Deadlines => "deadlines",
            Wakeup::EveryPoll => "every-poll",
        }
    }
}

impl From<Wakeup> for IdleWakeup {
    fn from(w: Wakeup) -> Self {
        match w {
            Wakeup::Deadlines => IdleWakeup::Deadlines,
            Wakeup::EveryPoll => IdleWakeup::EveryPoll,
        }
    }
}

/// `--fetch-strategy` values: which inputs a loop iteration fetches (`fetch_strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
enum Fetch {
    /// Only the partitions the backend named as appended to: riffle's.
    Ready,
    /// Every input of every task whenever the backend's data version moved, as Kafka Streams'
    /// loop does.
    ScanAll,
}

impl Fetch {
    /// The name used in tables, JSON and `fetch_strategy`.
    fn label(self) -> &'static str {
        match self {
            Fetch::Ready => "ready",
            Fetch::ScanAll => "scan-all",
        }
    }
}

impl From<Fetch> for FetchStrategy {
    fn from(f: Fetch) -> Self {
        match f {
            Fetch::Ready => FetchStrategy::Ready,
            Fetch::ScanAll => FetchStrategy::ScanAll,
        }
    }
}

/// A latency in milliseconds, for JSON rows (`None`: not measured).
fn ms(d: Option<std::time::Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1_000.0)
}

/// A latency for a table cell: milliseconds with three decimals, or `-`.
fn ms_cell(d: Option<f64>) -> String {
    d.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.3}"))
}

/// `a / b` as `12.3×`; `∞` when `b` is 0 and `a` is not (nothing measured against
/// something); `-` otherwise (e.g. a share above the floor that came out negative).
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else if b == 0.0 && a > 0.0 {
        "∞".to_owned()
    } else {
        "-".to_owned()
    }
}

/// Drops repeated values, keeping the first of each; an empty list is an error naming `flag`.
fn distinct<T: PartialEq + Copy>(values: &[T], flag: &str) -> anyhow::Result<Vec<T>> {
    let mut out: Vec<T> = Vec::with_capacity(values.len());
    for v in values {
        if !out.contains(v) {
            out.push(*v);
        }
    }
    anyhow::ensure!(!out.is_empty(), "{flag} needs at least one value");
    Ok(out)
}

/// Writes `rows` as a JSON array, one row per line.
fn write_json_rows<R: Serialize>(path: &Path, rows: &[R]) -> anyhow::Result<()> {
    let mut text = String::from("[\n");
    for (i, row) in rows.iter().enumerate() {
        text.push_str("  ");
        text.push_str(&serde_json::to_string(row)?);
        text.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    text.push_str("]\n");
    let mut file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Fails early, before minutes of measuring, if `path` cannot be written.
fn check_writable(path: &Path) -> anyhow::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The 1-, 5- and 15-minute load averages, for the report (the machine is shared).
fn load_average() -> String {
    riffle_bench::proc_stats::load_average().unwrap_or_else(|| "unknown".to_owned())
}

/// A progress bar of `len` steps with a message.
fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:40}] {percent:>3}% {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

/// `1234567.8` → `"1,234,568"`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(-4200.0), "-4,200");
    }

    #[test]
    fn distinct_keeps_first_and_rejects_empty() {
        assert_eq!(distinct(&[3, 1, 3], "--x").ok(), Some(vec![3, 1]));
        assert!(distinct::<u8>(&[], "--x").is_err());
    }
}
