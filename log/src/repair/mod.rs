//! [`repair`]: the explicit way out of an [`Error::Corrupt`](crate::Error::Corrupt). It cuts a
//! partition at its first damage — everything from there on, since a partition's offsets are
//! dense — and drops the damaged bytes of the transaction journal, and reports exactly what it
//! cut: files, byte positions, offsets and records. With `dry_run` it only reports.
//!
//! It owns that decision and nothing else: [`Log::open`](crate::Log::open) never repairs, and
//! this module never runs unless called. It reads and writes the files directly (it must work
//! where `Log::open` refuses to), so no process may have the log open meanwhile.
//!
//! It also writes back metadata files the data shows unambiguously — a deleted `format` file
//! (`log/src/log/format.rs`), a topic's `partitions` and `config` (`topic.rs`) — and reports
//! those it cannot rebuild.
//!
//! This file owns the entry point, its options and the file helpers; `report.rs` what a repair
//! reports, `topic.rs` a topic's metadata, `partition.rs` cutting a partition, `journal.rs`
//! cutting the transaction journal.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::names::validate_name;
use crate::storage::FileStorage;
use riffle_record::TopicPartition;

mod groups;
mod journal;
mod partition;
mod report;
mod topic;

use groups::repair_groups;
use journal::repair_journal;
use partition::repair_partition;
pub use report::{CutAction, RepairCut, RepairReport, RestoreAction, Restored, Unrestorable};
pub(crate) use topic::{Found, repair_topic};

/// What [`repair`] is asked to do.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RepairOptions {
    /// Repair only this topic's partitions (and leave the transaction journal alone); every
    /// topic and the journal when `None`.
    pub topic: Option<String>,
    /// Only report what would be cut; change nothing.
    pub dry_run: bool,
}

impl RepairOptions {
    /// Every topic and the journal, for real.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only `topic`'s partitions.
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Report only (`true`) or cut (`false`).
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// Takes the OS lock of an existing lock file (`<partition>/lock`, `txn/lock`) without waiting,
/// so no running writer is cut under; `None` if there is no such file (nobody wrote there yet).
fn lock_exclusively(path: &Path, what: &str) -> Result<Option<std::fs::File>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Io {
            path: path.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{what} is locked by a running process; stop it before repairing"),
            ),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

fn read_or_empty(path: &Path) -> Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Cuts every partition at its first damage and drops the journal's damaged records, so that
/// [`Log::open`](crate::Log::open) succeeds afterwards; reports each cut. Nothing intact before
/// the first damage of a partition is touched. Metadata files the data shows unambiguously
/// (`format`, a topic's `partitions` and `config`) are written back and reported in
/// [`RepairReport::restored`]; those it cannot rebuild are left and reported in
/// [`RepairReport::unrestorable`] (the log still does not open then; a topic whose partition
/// count cannot be told is not cut either). No process may have the log open.
pub fn repair(dir: &Path, options: &RepairOptions) -> Result<RepairReport> {
    // A deleted `format` file of a log whose segments show this build's format is written
    // back (and reported); a log of another format would look damaged from its first byte:
    // refuse it, cut nothing.
    let format = crate::log::check_or_restore_format(&FileStorage, dir, options.dry_run)?;
    let restored = format.into_iter().map(|file| Restored {
        file,
        action: RestoreAction::WriteBack,
        detail: "`riffle-log format 2`, the format its segments hold".to_owned(),
    });
    let topics_dir = dir.join("topics");
    let mut names: Vec<String> = match &options.topic {
        Some(t) => {
            validate_name(t, true)?;
            vec![t.clone()]
        }
        None => std::fs::read_dir(&topics_dir)
            .at(&topics_dir)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| validate_name(n, true).is_ok())
            .collect(),
    };
    names.sort();
    let mut report = RepairReport {
        cuts: Vec::new(),
        dry_run: options.dry_run,
        restored: restored.collect(),
        unrestorable: Vec::new(),
    };
    let mut ends = HashMap::new();
    for name in &names {
        let tdir = topics_dir.join(name);
        let found = repair_topic(
            &FileStorage,
            &tdir,
            options.dry_run,
            &mut report.restored,
            &mut report.unrestorable,
        )?;
        let count = match found {
            Found::Count(count) => count,
            // A directory with neither a `partitions` file nor partitions: the log ignores it.
            Found::NoTopic if options.topic.is_some() => {
                return Err(Error::UnknownTopic {
                    topic: name.clone(),
                });
            }
            Found::NoTopic | Found::Unknown => continue,
        };
        for p in 0..count {
            let tp = TopicPartition::new(name.as_str(), p);
            let pdir = tdir.join(p.to_string());
            let _lock = lock_exclusively(&pdir.join("lock"), &format!("partition {tp}"))?;
            let end = repair_partition(&pdir, &tp, options.dry_run, &mut report.cuts)?;
            ends.insert(tp, end);
        }
    }
    // The journal's records and the groups' offsets are checked against every partition's end:
    // with a topic whose partitions could not be told, they are left as they are (a record of
    // that topic would look unplaceable and be dropped).
    if options.topic.is_none() && report.unrestorable.is_empty() {
        let _lock = lock_exclusively(&dir.join("txn").join("lock"), "the transaction journal")?;
        repair_journal(dir, &ends, options.dry_run, &mut report.cuts)?;
        repair_groups(dir, &ends, options.dry_run, &mut report.cuts)?;
    }
    Ok(report)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .at(dir)?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
