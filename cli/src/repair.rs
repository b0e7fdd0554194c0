//! `riffle log repair`: the explicit way out of a corrupt log. It cuts what
//! [`riffle_log::repair`] cuts — each damaged partition from its first damage on, the damaged
//! records of the transaction journal — and prints every cut: file, byte position, offsets and
//! records. It prints each metadata file written back from the data (`format`, a topic's
//! `partitions` and `config`), and each one that cannot be, exiting non-zero then. Nothing else
//! in riffle ever cuts corrupt data.

use std::path::PathBuf;

use anyhow::Context;
use riffle_log::{RepairOptions, repair};

/// `riffle log …`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum LogCommand {
    /// Cut corrupt data out of the log so it opens again, printing exactly what is cut: each
    /// damaged partition loses everything from its first damage on (its offsets must stay
    /// dense), the transaction journal loses its damaged records. Metadata files the data
    /// shows (`format`, a topic's `partitions` and `config`) are written back; one it cannot
    /// tell is reported, and the exit status is then non-zero. No other process may have the
    /// log open. Run with --dry-run first.
    Repair(RepairArgs),
}

/// Arguments of `riffle log repair`.
#[derive(clap::Args, Debug)]
pub(crate) struct RepairArgs {
    /// The embedded log's directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Repair only this topic (the transaction journal is then left alone).
    #[arg(long)]
    topic: Option<String>,
    /// Print what would be cut; change nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn run(command: LogCommand) -> anyhow::Result<()> {
    let LogCommand::Repair(args) = command;
    if !args.log_dir.join("topics").is_dir() {
        anyhow::bail!("no log at {}", args.log_dir.display());
    }
    let mut options = RepairOptions::new().with_dry_run(args.dry_run);
    if let Some(topic) = &args.topic {
        options = options.with_topic(topic.as_str());
    }
    let report = repair(&args.log_dir, &options)
        .with_context(|| format!("repairing the log at {}", args.log_dir.display()))?;
    let verb = if args.dry_run { "would " } else { "" };
    for restored in &report.restored {
        println!("{}", restored.describe(args.dry_run));
    }
    for cut in &report.cuts {
        println!("{verb}{cut}");
    }
    for left in &report.unrestorable {
        println!("{left}");
    }
    let records: u64 = report.cuts.iter().map(|c| c.records).sum();
    let intact = report.restored.is_empty() && report.unrestorable.is_empty();
    match (report.cuts.len(), args.dry_run) {
        (0, _) if intact => println!("nothing to cut: the log is intact"),
        (0, true) => println!("nothing to cut; nothing was changed"),
        (0, false) => println!("nothing to cut"),
        (n, true) => println!(
            "dry run: {n} cuts would remove {records} records of intact batches and \
             transactions (and whatever the damaged bytes held); nothing was changed"
        ),
        (n, false) => println!(
            "{n} cuts removed {records} records of intact batches and transactions (and \
             whatever the damaged bytes held)"
        ),
    }
    if report.unrestorable.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "{} metadata file(s) cannot be rebuilt from what is on disk (see above) and are left as \
         they are: the log at {} does not open until they are fixed by hand",
        report.unrestorable.len(),
        args.log_dir.display()
    )
}
