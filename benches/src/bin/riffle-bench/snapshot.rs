//! `cargo run --release -p riffle-bench -- snapshot`: one offset-sum snapshot refresh, incremental
//! beside full rebuild.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use riffle_bench::{FixtureState, MAX_TASKS, SnapshotFixture, alloc, timer_overhead};
use serde::Serialize;

use super::{Strategy, distinct, load_average, progress_bar, thousands, write_json_rows};

/// `--states` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum State {
    /// Active RUNNING tasks (omitted from the snapshot).
    Running,
    /// Active RESTORING tasks held by the (unstarted) state updater.
    Restoring,
}

impl From<State> for FixtureState {
    fn from(s: State) -> Self {
        match s {
            State::Running => FixtureState::Running,
            State::Restoring => FixtureState::Restoring,
        }
    }
}

/// Arguments of `cargo run --release -p riffle-bench -- snapshot`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Task counts (all owned by one stream thread, one changelog partition each).
    #[arg(long, value_delimiter = ',', default_value = "0,100,1000,5000,100000")]
    tasks: Vec<usize>,
    /// Task states.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "running,restoring"
    )]
    states: Vec<State>,
    /// Tasks whose changelog offsets advance between two refreshes.
    #[arg(long, value_delimiter = ',', default_value = "0,1,100")]
    changed: Vec<usize>,
    /// Strategies, measured one after the other for each row.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "incremental,full-rebuild"
    )]
    strategy: Vec<Strategy>,
    /// Measurement time per row, in milliseconds (at least 10 refreshes are timed).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    measure_ms: u64,
    /// Warm-up time per row, in milliseconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    warmup_ms: u64,
    /// Write the rows to this file as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw ns/op against task count (log-log, changed = 0) to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// One measured row, as written to the JSON file.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Row {
    pub(super) tasks: usize,
    pub(super) state: String,
    pub(super) changed: usize,
    pub(super) strategy: String,
    pub(super) ns_per_op: f64,
    /// `None` when this binary was built without the counting allocator.
    pub(super) bytes_per_op: Option<f64>,
    pub(super) allocs_per_op: Option<f64>,
    pub(super) ops: u64,
}

/// KAFKA-21171's JMH figures (unchanged offsets): tasks, state, µs/op, B/op.
const KAFKA_ANCHOR: [(usize, &str, f64, f64); 8] = [
    (0, "running", 0.257, 2_120.001),
    (0, "restoring", 0.259, 2_120.001),
    (100, "running", 8.481, 31_890.708),
    (100, "restoring", 22.821, 77_048.131),
    (1_000, "running", 89.110, 346_829.769),
    (1_000, "restoring", 248.191, 831_546.901),
    (5_000, "running", 429.778, 1_732_682.127),
    (5_000, "restoring", 1_304.563, 4_111_075.094),
];

pub(super) fn run(args: Args) -> anyhow::Result<()> {
    let tasks = distinct(&args.tasks, "--tasks")?;
    let states = distinct(&args.states, "--states")?;
    let changed = distinct(&args.changed, "--changed")?;
    let strategies = distinct(&args.strategy, "--strategy")?;
    if let Some(&too_many) = tasks.iter().find(|&&n| n > MAX_TASKS) {
        anyhow::bail!("--tasks {too_many}: at most {MAX_TASKS} tasks are supported");
    }
    for path in [&args.json, &args.plot].into_iter().flatten() {
        super::check_writable(path)?;
    }
    if args.plot.is_some() && !tasks.iter().any(|&n| n > 0) {
        anyhow::bail!("--plot draws a log-log plot: --tasks needs a count above 0");
    }
    let counting = alloc::counting();
    let (warmup, budget) = (
        Duration::from_millis(args.warmup_ms),
        Duration::from_millis(args.measure_ms),
    );

    // Rows where more tasks would change than exist are skipped (e.g. 0 tasks, 1 changed).
    let plan: Vec<(usize, State, usize)> = tasks
        .iter()
        .flat_map(|&n| states.iter().map(move |&s| (n, s)))
        .flat_map(|(n, s)| changed.iter().map(move |&k| (n, s, k)))
        .filter(|&(n, _, k)| k <= n)
        .collect();
    let skipped = tasks.len() * states.len() * changed.len() - plan.len();
    let overhead = timer_overhead();
    let load_before = load_average();
    let steps = (plan.len() * strategies.len()) as u64;
    let bar = progress_bar(steps * 100);
    let mut rows = Vec::new();
    let mut step = 0u64;
    let mut fixtures: Vec<(Strategy, SnapshotFixture)> = Vec::new();
    for &(n, state, k) in &plan {
        if fixtures
            .first()
            .is_none_or(|(_, f)| f.tasks() != n || f.state() != state.into())
        {
            fixtures.clear(); // drop the previous ones first: 100,000-task fixtures are large
            for &strategy in &strategies {
                bar.set_message(format!(
                    "building {n} {} tasks ({strategy:?})",
                    state_name(state)
                ));
                let fixture = SnapshotFixture::build(n, state.into(), strategy.into())
                    .map_err(|e| anyhow::anyhow!(e))
                    .with_context(|| format!("building the {n}-task fixture"))?;
                fixtures.push((strategy, fixture));
            }
        }
        // Strategies back to back for each row, so they see the same machine load.
        for (strategy, fixture) in &mut fixtures {
            let label = strategy.label();
            bar.set_message(format!(
                "{n} tasks {} changed {k} {label}",
                state_name(state)
            ));
            let base = step * 100;
            let m = fixture.measure(k, warmup, budget, 10, &mut |f| {
                bar.set_position(base + (f * 99.0) as u64)
            });
            anyhow::ensure!(
                fixture.matches_full_rebuild(),
                "{n} tasks {} changed {k} {label}: the snapshot differs from a full rebuild",
                state_name(state)
            );
            step += 1;
            bar.set_position(step * 100);
            rows.push(Row {
                tasks: n,
                state: state_name(state).to_owned(),
                changed: k,
                strategy: label.to_owned(),
                ns_per_op: m.ns_per_op,
                bytes_per_op: counting.then_some(m.bytes_per_op),
                allocs_per_op: counting.then_some(m.allocs_per_op),
                ops: m.ops,
            });
        }
    }
    drop(fixtures);
    bar.finish_and_clear();

    print_table(&rows, &strategies);
    println!();
    println!(
        "{} rows; {skipped} skipped (more changed tasks than tasks); {} ms measured + {} ms \
         warm-up per row; timer overhead {overhead:.0} ns per timed refresh (rows with changed \
         > 0 time each refresh alone, and include it)",
        rows.len(),
        args.measure_ms,
        args.warmup_ms
    );
    if !counting {
        println!("allocations not counted: the counting allocator is not installed");
    }
    println!(
        "load average before: {load_before}; after: {}",
        load_average()
    );
    if let Some(path) = &args.json {
        write_json_rows(path, &rows)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        super::plot::snapshot_plot(path, &rows)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn state_name(state: State) -> &'static str {
    match state {
        State::Running => "running",
        State::Restoring => "restoring",
    }
}

fn bytes(row: &Row) -> String {
    row.bytes_per_op.map_or_else(|| "-".to_owned(), thousands)
}

fn allocs(row: &Row) -> String {
    row.allocs_per_op
        .map_or_else(|| "-".to_owned(), |a| format!("{a:.1}"))
}

/// One line per (tasks, state, changed): each strategy's ns/op, B/op and allocs/op, the ratio
/// full rebuild / incremental, and KAFKA-21171's Kafka figures where it has them.
fn print_table(rows: &[Row], strategies: &[Strategy]) {
    let mut header = format!("{:>7}  {:<9}  {:>7}", "tasks", "state", "changed");
    for s in strategies {
        let name = s.label();
        header.push_str(&format!(
            "  {:>16}  {:>12}  {:>9}",
            format!("{name} ns/op"),
            "B/op",
            "allocs/op"
        ));
    }
    let both = strategies.len() == 2;
    if both {
        header.push_str(&format!("  {:>10}", "full/incr"));
    }
    header.push_str(&format!("  {:>15}  {:>12}", "Kafka ns/op", "Kafka B/op"));
    println!("{header}");
    for group in
        rows.chunk_by(|a, b| (a.tasks, &a.state, a.changed) == (b.tasks, &b.state, b.changed))
    {
        let Some(first) = group.first() else {
            continue;
        };
        let mut line = format!(
            "{:>7}  {:<9}  {:>7}",
            first.tasks, first.state, first.changed
        );
        for row in group {
            line.push_str(&format!(
                "  {:>16}  {:>12}  {:>9}",
                if row.ns_per_op < 100.0 {
                    format!("{:.1}", row.ns_per_op)
                } else {
                    thousands(row.ns_per_op)
                },
                bytes(row),
                allocs(row)
            ));
        }
        if both {
            let find = |s: &str| group.iter().find(|r| r.strategy == s).map(|r| r.ns_per_op);
            let ratio = match (find("full-rebuild"), find("incremental")) {
                (Some(full), Some(incr)) if incr > 0.0 => format!("{:.0}×", full / incr),
                _ => "-".to_owned(),
            };
            line.push_str(&format!("  {ratio:>10}"));
        }
        let anchor = KAFKA_ANCHOR
            .iter()
            .find(|(n, s, _, _)| *n == first.tasks && *s == first.state && first.changed == 0);
        if let Some((_, _, us, b)) = anchor {
            line.push_str(&format!(
                "  {:>15}  {:>12}",
                thousands(us * 1_000.0),
                thousands(*b)
            ));
        }
        println!("{line}");
    }
}
