//! `riffle state inspect`: what a state directory holds, and what a heartbeat would report.

use std::path::PathBuf;

use anyhow::Context;
use riffle_state_dir::{SharedOffsetSums, inspect};
use riffle_task_manager::{LiveOffsets, OffsetSumSnapshot, SnapshotStrategy, TaskRegistry};

/// `riffle state …` commands.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum State {
    /// Show the tasks on disk, their checkpoints and offset sums, the lock holder, and the
    /// TaskOffsets a heartbeat would report now.
    Inspect(InspectArgs),
}

/// Arguments of `riffle state inspect`.
#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// The state directory (`state_dir`).
    #[arg(long)]
    state_dir: PathBuf,
    /// The application id.
    #[arg(long)]
    application_id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(state: State) -> anyhow::Result<()> {
    match state {
        State::Inspect(args) => inspect_cmd(args),
    }
}

fn inspect_cmd(args: InspectArgs) -> anyhow::Result<()> {
    let found = inspect(&args.state_dir, &args.application_id).with_context(|| {
        format!(
            "inspecting {}",
            args.state_dir.join(&args.application_id).display()
        )
    })?;
    // What a heartbeat of a process that owns none of these tasks reports: the local offset map,
    // built by the same snapshot code a stream thread runs.
    let local = SharedOffsetSums::new(riffle_state_dir::DEFAULT_JOURNAL_CAPACITY);
    for (task, checkpoint) in &found.tasks {
        if let Ok(Some(cp)) = checkpoint {
            local.set(*task, Some(cp.offset_sum()));
        }
    }
    let live = LiveOffsets::new();
    let mut snapshot = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
    snapshot.refresh_from(&TaskRegistry::new(), &local, live.sums());
    let (version, offsets) = snapshot.published();
    let mut reported: Vec<_> = offsets.iter().map(|(t, s)| (*t, *s)).collect();
    reported.sort();

    if args.json {
        let tasks: Vec<serde_json::Value> = found
            .tasks
            .iter()
            .map(|(task, cp)| match cp {
                Ok(Some(cp)) => serde_json::json!({
                    "task": task.to_string(),
                    "checkpoint": cp.iter().map(|(p, o)| serde_json::json!({"topic": &*p.topic, "partition": p.partition, "offset": o})).collect::<Vec<_>>(),
                    "offset_sum": cp.offset_sum(),
                }),
                Ok(None) => serde_json::json!({"task": task.to_string(), "checkpoint": null}),
                Err(e) => serde_json::json!({"task": task.to_string(), "error": e.to_string()}),
            })
            .collect();
        let out = serde_json::json!({
            "app_dir": found.app_dir.display().to_string(),
            "lock_holder_pid": found.lock_holder,
            "process_id": found.process_id,
            "tasks": tasks,
            "heartbeat_task_offsets": reported.iter().map(|(t, s)| (t.to_string(), *s)).collect::<std::collections::BTreeMap<_, _>>(),
            "snapshot_version": version,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("state directory: {}", found.app_dir.display());
    match found.lock_holder {
        Some(pid) => println!(
            "lock:            held by pid {pid} (a running instance; it may report live offsets for tasks it owns)"
        ),
        None => println!("lock:            free"),
    }
    println!(
        "process id:      {}",
        found.process_id.as_deref().unwrap_or("(none yet)")
    );
    println!();
    println!("{:<8} {:>12}  checkpoint", "TASK", "OFFSET SUM");
    for (task, checkpoint) in &found.tasks {
        match checkpoint {
            Ok(Some(cp)) => {
                let entries: Vec<String> = cp.iter().map(|(p, o)| format!("{p}@{o}")).collect();
                println!(
                    "{:<8} {:>12}  {}",
                    task.to_string(),
                    cp.offset_sum(),
                    entries.join(", ")
                );
            }
            Ok(None) => println!("{:<8} {:>12}  (no checkpoint)", task.to_string(), "-"),
            Err(e) => println!("{:<8} {:>12}  unreadable: {e}", task.to_string(), "?"),
        }
    }
    println!();
    println!(
        "a heartbeat from a process owning none of these tasks would report (TaskOffsets, snapshot version {version}):"
    );
    if reported.is_empty() {
        println!("  (nothing: no task has a readable checkpoint)");
    }
    for (task, sum) in &reported {
        println!("  {task}\t{sum}");
    }
    Ok(())
}
