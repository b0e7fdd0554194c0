//! `riffle groups`: the groups of application instances on an embedded log, as Kafka's
//! `kafka-streams-groups.sh --list / --describe` shows a streams group: its members (process,
//! pid, host, thread, last heartbeat), the group and member epochs, and each member's active,
//! standby and warm-up tasks with their lag.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use riffle::backend::{GroupRecord, MemberState};
use riffle::log::{Log, LogOptions, TopicPartition};
use riffle_state_dir::TaskId;

/// `riffle groups`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The embedded log's directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Describe this application's group: its members and their tasks.
    #[arg(long, value_name = "APPLICATION_ID")]
    describe: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if !args.log_dir.exists() {
        anyhow::bail!("no log at {}", args.log_dir.display());
    }
    let log = Log::open_read_only(&args.log_dir, LogOptions::default())
        .with_context(|| format!("opening {}", args.log_dir.display()))?;
    match &args.describe {
        Some(app) => describe(&log, app),
        None => list(&log),
    }
}

fn list(log: &Log) -> anyhow::Result<()> {
    let groups = log.member_groups()?;
    if groups.is_empty() {
        println!("no application has run on this log as a group");
        return Ok(());
    }
    println!(
        "{:<40} {:>8} {:>10} {:>7}",
        "GROUP", "MEMBERS", "INSTANCES", "EPOCH"
    );
    for name in groups {
        let Some(view) = log.describe_group(&name)? else {
            continue;
        };
        let record = GroupRecord::decode(&view.data)
            .map_err(|e| anyhow::anyhow!("the record of group {name} does not decode: {e}"))?;
        let alive: Vec<&String> = view
            .members
            .iter()
            .filter(|(_, (_, alive))| *alive)
            .map(|(id, _)| id)
            .collect();
        let instances: BTreeSet<&str> = alive
            .iter()
            .filter_map(|id| record.members.get(*id).map(|m| m.process.as_str()))
            .collect();
        println!(
            "{:<40} {:>8} {:>10} {:>7}",
            name,
            alive.len(),
            instances.len(),
            record.epoch
        );
    }
    Ok(())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn describe(log: &Log, app: &str) -> anyhow::Result<()> {
    let Some(view) = log.describe_group(app)? else {
        anyhow::bail!(
            "no group {app} on this log (no instance of it has run here; `riffle groups --log-dir …` lists them)"
        );
    };
    let record = GroupRecord::decode(&view.data)
        .map_err(|e| anyhow::anyhow!("the record of group {app} does not decode: {e}"))?;
    let alive = view.members.values().filter(|(_, alive)| *alive).count();
    println!(
        "GROUP {app}  EPOCH {}  MEMBERS {alive}  (record generation {})",
        record.epoch, view.generation
    );
    let now = now_ms();
    for (id, (file, alive)) in &view.members {
        let state = record.members.get(id);
        let heartbeat = file.map_or_else(
            || "no heartbeat yet".to_owned(),
            |f| format!("heartbeat {} ms ago", now.saturating_sub(f.heartbeat_ms)),
        );
        let pid = file.map_or_else(|| "?".to_owned(), |f| f.pid.to_string());
        let status = if *alive { "alive" } else { "gone (lock free)" };
        println!();
        println!("MEMBER {id}");
        match state {
            Some(m) => {
                println!(
                    "  process {}  pid {pid}  host {}  thread {}  endpoint {}",
                    m.process,
                    m.host,
                    m.thread,
                    m.endpoint.as_deref().unwrap_or("-")
                );
                println!("  {status}, {heartbeat}  member epoch {}", m.epoch);
                print_tasks(log, app, &record, m)?;
            }
            None => {
                println!("  pid {pid}  {status}, {heartbeat}  (joining: not in the record yet)")
            }
        }
    }
    Ok(())
}

fn print_tasks(log: &Log, app: &str, record: &GroupRecord, m: &MemberState) -> anyhow::Result<()> {
    for (role, tasks) in [
        ("ACTIVE", &m.current.active),
        ("STANDBY", &m.current.standby),
        ("WARMUP", &m.current.warmup),
    ] {
        if tasks.is_empty() {
            println!("  {role:<8} -");
            continue;
        }
        let mut cells = Vec::new();
        for &task in tasks {
            let lag = if role == "ACTIVE" {
                input_lag(log, app, record, task)?.map(|lag| format!("input lag {lag}"))
            } else {
                changelog_lag(log, record, m, task)?.map(|lag| format!("changelog lag {lag}"))
            };
            cells.push(match lag {
                Some(lag) => format!("{task} ({lag})"),
                None => task.to_string(),
            });
        }
        println!("  {role:<8} {}", cells.join(", "));
    }
    let waiting: Vec<String> = m
        .target
        .active
        .difference(&m.current.active)
        .map(ToString::to_string)
        .collect();
    if !waiting.is_empty() {
        println!(
            "  TARGET   also {} (waiting for their owners to revoke them)",
            waiting.join(", ")
        );
    }
    Ok(())
}

/// Records in the task's input partitions after the application's committed offsets.
fn input_lag(
    log: &Log,
    app: &str,
    record: &GroupRecord,
    task: TaskId,
) -> anyhow::Result<Option<u64>> {
    let Some(sub) = record.subtopologies.get(&task.subtopology) else {
        return Ok(None);
    };
    let mut lag = 0u64;
    for topic in &sub.inputs {
        let tp = TopicPartition::new(topic.as_str(), task.partition);
        let end = match log.end_offset(&tp) {
            Ok(end) => end,
            Err(riffle::log::Error::UnknownTopic { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let committed = log.committed_offset(app, &tp)?.unwrap_or(0);
        lag += end.saturating_sub(committed);
    }
    Ok(Some(lag))
}

/// Changelog records a standby or warm-up is behind, from the offsets its member last sent.
fn changelog_lag(
    log: &Log,
    record: &GroupRecord,
    m: &MemberState,
    task: TaskId,
) -> anyhow::Result<Option<i64>> {
    let Some(end) = record.end_sum(log, task)? else {
        return Ok(None);
    };
    Ok(Some(match m.offsets.get(&task) {
        Some(&sum) => end.saturating_sub(sum).max(0),
        None => end,
    }))
}
