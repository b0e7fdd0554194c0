//! [`repair`]: the explicit way out of an [`Error::Corrupt`](crate::Error::Corrupt). It cuts a
//! partition at its first damage — everything from there on, since a partition's offsets are
//! dense — and drops the damaged bytes of the transaction journal, and reports exactly what it
//! cut: files, byte positions, offsets and records. With `dry_run` it only reports.
//!
//! It owns that decision and nothing else: [`Log::open`](crate::Log::open) never repairs, and
//! this module never runs unless called. It reads and writes the files directly (it must work
//! where `Log::open` refuses to), so no process may have the log open meanwhile.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::journal;
use crate::names::validate_name;
use crate::partition::{START_FILE, read_start};
use crate::segment::{
    Seal, parse_index, parse_segment_file_name, scan_file_from, segment_file_name,
};
use crate::storage::{FileStorage, Storage, StorageFile};
use riffle_record::TopicPartition;

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

/// What a [`RepairCut`] does to its file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CutAction {
    /// The file is cut to `at` bytes (it had `len`).
    Truncate {
        /// The new length.
        at: u64,
        /// The old length.
        len: u64,
    },
    /// The file (and a segment's index) is deleted; it had `len` bytes.
    Delete {
        /// Its length.
        len: u64,
    },
    /// The file is missing: what it held is lost, and repair records that (a missing last
    /// segment: the previous segment's seal is dropped; a missing partition: it is recreated
    /// empty).
    Missing,
    /// Bytes `from..to` of the journal are dropped (a damaged record, or a record that cannot
    /// be replayed).
    DropBytes {
        /// First byte dropped.
        from: u64,
        /// Byte after the last one dropped.
        to: u64,
    },
    /// The partition's `start` file is rewritten: the start offset moves back to the end
    /// offset the cuts left (it named records that are gone).
    MoveStart {
        /// The start offset it said.
        from: u64,
        /// The start offset it says now.
        to: u64,
    },
}

/// One thing [`repair`] cut (or would cut, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairCut {
    /// The file cut.
    pub file: PathBuf,
    /// What is done to it.
    pub action: CutAction,
    /// The partition whose offsets are cut (`None` for the journal).
    pub topic_partition: Option<TopicPartition>,
    /// The offsets removed from the partition: from `.0` to `.1` (`None`: to an unknown end).
    pub offsets: Option<(u64, Option<u64>)>,
    /// Records of intact batches (or transactions, for the journal) among what is cut: what a
    /// reader could still have read. Damaged bytes hold an unknown number more.
    pub records: u64,
    /// Why.
    pub reason: String,
}

impl fmt::Display for RepairCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.action {
            CutAction::Truncate { at, len } => {
                write!(f, "cut {file} at byte {at} (of {len} bytes)")?;
            }
            CutAction::Delete { len } => write!(f, "delete {file} ({len} bytes)")?,
            CutAction::Missing => write!(f, "give up the missing {file}")?,
            CutAction::DropBytes { from, to } => {
                write!(f, "drop bytes {from}..{to} of {file}")?;
            }
            CutAction::MoveStart { from, to } => {
                write!(
                    f,
                    "move the start offset in {file} from {from} back to {to}"
                )?;
            }
        }
        match (&self.topic_partition, self.offsets) {
            (Some(tp), Some((from, Some(to)))) => write!(f, ": offsets {from}..{to} of {tp}")?,
            (Some(tp), Some((from, None))) => write!(f, ": offsets from {from} on of {tp}")?,
            _ => {}
        }
        let unit = if self.topic_partition.is_some() {
            "records in intact batches"
        } else {
            "intact transactions"
        };
        write!(f, ", {} {unit}; {}", self.records, self.reason)
    }
}

/// Everything [`repair`] cut, in order.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RepairReport {
    /// The cuts, partition by partition, then the journal's.
    pub cuts: Vec<RepairCut>,
    /// Nothing was changed (a dry run).
    pub dry_run: bool,
}

/// A file's bytes, read once, as a read-only [`StorageFile`] (the scan reads through that).
#[derive(Debug)]
struct Loaded(Vec<u8>);

impl StorageFile for Loaded {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_exact_at(&mut self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        let src = usize::try_from(pos)
            .ok()
            .and_then(|p| self.0.get(p..p.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn append(&mut self, _: &[u8]) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    fn truncate(&mut self, _: u64) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn refresh_len(&mut self) -> io::Result<u64> {
        Ok(self.len())
    }

    fn write_at(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    fn lock(&mut self, _: bool) -> io::Result<()> {
        Ok(())
    }

    fn try_lock(&mut self) -> io::Result<bool> {
        Ok(true)
    }

    fn unlock(&mut self) -> io::Result<()> {
        Ok(())
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
/// the first damage of a partition is touched. No process may have the log open.
pub fn repair(dir: &Path, options: &RepairOptions) -> Result<RepairReport> {
    // A log of another format would look damaged from its first byte: refuse it, cut nothing.
    crate::log::check_format(&crate::storage::FileStorage, dir, true)?;
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
    };
    let mut ends = HashMap::new();
    for name in &names {
        let meta = topics_dir.join(name).join("partitions");
        let Some(count) = std::fs::read_to_string(&meta)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            if options.topic.is_some() {
                return Err(Error::UnknownTopic {
                    topic: name.clone(),
                });
            }
            continue; // an unfinished creation: the log ignores it too
        };
        for p in 0..count {
            let tp = TopicPartition::new(name.as_str(), p);
            let pdir = topics_dir.join(name).join(p.to_string());
            let _lock = lock_exclusively(&pdir.join("lock"), &format!("partition {tp}"))?;
            let end = repair_partition(&pdir, &tp, options.dry_run, &mut report.cuts)?;
            ends.insert(tp, end);
        }
    }
    if options.topic.is_none() {
        let _lock = lock_exclusively(&dir.join("txn").join("lock"), "the transaction journal")?;
        repair_journal(dir, &ends, options.dry_run, &mut report.cuts)?;
    }
    Ok(report)
}

/// Cuts one partition at its first damage; returns its end offset after the cut.
fn repair_partition(
    dir: &Path,
    tp: &TopicPartition,
    dry_run: bool,
    cuts: &mut Vec<RepairCut>,
) -> Result<u64> {
    let mut bases: Vec<u64> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| parse_segment_file_name(e.ok()?.file_name().to_str()?))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(Error::Io {
                path: dir.to_path_buf(),
                source: e,
            });
        }
    };
    bases.sort_unstable();
    // Offsets below the start offset were deleted (retention, `delete_records`): the
    // partition's offsets are dense from there, and segments wholly below it are leftovers
    // of a deletion a crash cut short.
    let start = read_start(&FileStorage, dir)?;
    let below = bases.windows(2).take_while(|w| w[1] <= start).count();
    for base in bases.drain(..below) {
        let path = dir.join(segment_file_name(base));
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        cuts.push(RepairCut {
            file: path.clone(),
            action: CutAction::Delete { len },
            topic_partition: Some(tp.clone()),
            offsets: None,
            records: 0,
            reason: format!(
                "the segment lies below the partition's start offset {start} (its records were \
                 deleted; a deletion that did not finish)"
            ),
        });
        if !dry_run {
            remove(&path)?;
            remove(&path.with_extension("index"))?;
        }
    }
    if bases.is_empty() {
        cuts.push(RepairCut {
            file: dir.to_path_buf(),
            action: CutAction::Missing,
            topic_partition: Some(tp.clone()),
            offsets: Some((start, None)),
            records: 0,
            reason: format!(
                "the partition has no segment; it is recreated empty at its start offset {start}"
            ),
        });
        if !dry_run {
            std::fs::create_dir_all(dir).at(dir)?;
            let path = dir.join(segment_file_name(start));
            std::fs::File::create(&path)
                .at(&path)?
                .sync_all()
                .at(&path)?;
            sync_dir(dir)?;
        }
        return Ok(start);
    }
    // The first segment holds the start offset; if it begins after it, the offsets between are
    // in no segment.
    let mut expected = bases.first().map_or(start, |&first| first.min(start));
    let mut cut_from: Option<String> = None;
    // The last segment kept, its seal and whether its index must go (a seal or a cut).
    let mut last_kept: Option<(PathBuf, Option<Seal>, bool)> = None;
    // A compaction that merged segments and stopped after its commit point: the segment at
    // the range's base covers it, and the segments inside are leftovers (log/FORMAT.md,
    // *Compaction*).
    let merged = crate::partition::read_cleaning(&FileStorage, dir)?;
    let mut kept_base = None;
    for base in bases {
        let path = dir.join(segment_file_name(base));
        let index_path = path.with_extension("index");
        let mut file = Loaded(read_or_empty(&path)?);
        let len = file.len();
        let scan = scan_file_from(&mut file, &path, 0, base, |_, _| {})?;
        let (end, records) = match &scan.damage {
            Some(d) => (d.known_end(), scan.records + d.records_after()),
            None => (scan.end_offset, scan.records),
        };
        // The whole segment goes: it follows a cut, a merge left it behind, or offsets before
        // it are missing. `from`: the first offset the partition loses.
        let deleted = if let Some(reason) = &cut_from {
            Some((base, reason.clone()))
        } else if base < expected && kept_base.is_some_and(|kept| merged == Some((kept, expected)))
        {
            Some((
                base,
                format!(
                    "a compaction merged it into the segment before it, which holds offsets up \
                     to {expected}, and stopped before removing it"
                ),
            ))
        } else if base != expected {
            let reason = format!(
                "offsets {expected}..{base} are in no segment, and a partition's offsets must be \
                 dense: everything from offset {expected} on goes"
            );
            cut_from = Some(reason.clone());
            // The partition loses the missing offsets too: it ends at `expected` now.
            Some((expected, reason))
        } else {
            None
        };
        if let Some((from, reason)) = deleted {
            cuts.push(RepairCut {
                file: path.clone(),
                action: CutAction::Delete { len },
                topic_partition: Some(tp.clone()),
                offsets: Some((from, Some(end))),
                records,
                reason,
            });
            if !dry_run {
                remove(&path)?;
                remove(&index_path)?;
            }
            continue;
        }
        let seal = parse_index(&read_or_empty(&index_path)?, base, len).seal;
        match &scan.damage {
            None => {
                expected = scan.end_offset;
                last_kept = Some((path, seal, false));
                kept_base = Some(base);
            }
            Some(d) => {
                cuts.push(RepairCut {
                    file: path.clone(),
                    action: CutAction::Truncate {
                        at: d.position,
                        len,
                    },
                    topic_partition: Some(tp.clone()),
                    offsets: Some((d.offset, Some(d.known_end()))),
                    records: d.records_after(),
                    reason: format!("damaged at byte {}: {}", d.position, d.reason),
                });
                if !dry_run {
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .at(&path)?;
                    f.set_len(d.position).at(&path)?;
                    f.sync_all().at(&path)?;
                }
                cut_from = Some(format!(
                    "it follows the damage in {} at offset {}, and a partition's offsets must be \
                     dense",
                    path.display(),
                    d.offset
                ));
                expected = scan.end_offset;
                last_kept = Some((path, seal, true));
            }
        }
    }
    match last_kept {
        Some((path, seal, cut)) => {
            if let (Some(seal), false, None) = (seal, cut, &cut_from) {
                // It was rolled, so a segment followed it; that one (and any after) is gone.
                cuts.push(RepairCut {
                    file: dir.join(segment_file_name(seal.end_offset)),
                    action: CutAction::Missing,
                    topic_partition: Some(tp.clone()),
                    offsets: Some((seal.end_offset, None)),
                    records: 0,
                    reason: format!(
                        "{} was rolled at offset {}, but no segment starts there; it becomes the \
                         last segment",
                        path.display(),
                        seal.end_offset
                    ),
                });
            }
            if (cut || seal.is_some()) && !dry_run {
                // The last segment's index is rebuilt on open; a seal in it would say "missing".
                remove(&path.with_extension("index"))?;
            }
        }
        None if !dry_run => {
            // Every segment went (the first one was missing): the partition starts over empty,
            // at its start offset.
            let path = dir.join(segment_file_name(start));
            std::fs::File::create(&path)
                .at(&path)?
                .sync_all()
                .at(&path)?;
        }
        None => {}
    }
    if expected < start {
        // The cut took records the start offset kept: the partition starts where it now ends.
        let path = dir.join(START_FILE);
        cuts.push(RepairCut {
            file: path.clone(),
            action: CutAction::MoveStart {
                from: start,
                to: expected,
            },
            topic_partition: Some(tp.clone()),
            offsets: Some((expected, Some(start))),
            records: 0,
            reason: format!(
                "the start offset {start} is past the repaired end offset {expected}; it becomes \
                 {expected}"
            ),
        });
        if !dry_run {
            FileStorage
                .write_atomic(&path, format!("{expected}\n").as_bytes())
                .at(&path)?;
        }
    }
    if !dry_run && cut_from.is_some() {
        sync_dir(dir)?;
    }
    Ok(expected)
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

/// Drops the journal's damaged bytes and the records that cannot be replayed onto the
/// partitions as repaired (`ends`: their end offsets), then rewrites the journal.
fn repair_journal(
    dir: &Path,
    ends: &HashMap<TopicPartition, u64>,
    dry_run: bool,
    cuts: &mut Vec<RepairCut>,
) -> Result<()> {
    let path = journal::journal_path(dir);
    let bytes = read_or_empty(&path)?;
    let (mut records, damage) = journal::scan_records(&bytes);
    let mut dropped: Vec<(u64, u64, String)> = Vec::new();
    if let Some(d) = damage {
        let mut at = d.position;
        for &(pos, len) in &d.intact_after {
            if pos > at {
                dropped.push((at, pos, format!("a damaged record ({})", d.reason)));
            }
            records.push((pos, len));
            at = pos + len;
        }
        if at < bytes.len() as u64 {
            let reason = if d.intact_after.is_empty() {
                format!("a torn tail ({})", d.reason)
            } else {
                "damaged bytes after the last intact record".to_owned()
            };
            dropped.push((at, bytes.len() as u64, reason));
        }
    }
    let mut ends = ends.clone();
    let mut kept = Vec::with_capacity(bytes.len());
    for (pos, len) in records {
        let (from, to) = (pos as usize, (pos + len) as usize);
        let record = bytes.get(from..to).unwrap_or_default();
        let body = record.get(journal::RECORD_HEADER_LEN..).unwrap_or_default();
        let txn = match journal::parse_body(&path, pos, body) {
            Ok(txn) => txn,
            Err(e) => {
                dropped.push((
                    pos,
                    pos + len,
                    format!("a record that does not parse ({e})"),
                ));
                continue;
            }
        };
        // Replay as recovery would: each batch must go at its partition's end or be there.
        let mut trial = ends.clone();
        let mut unplaceable = None;
        for b in &txn.batches {
            match trial.get_mut(&b.tp) {
                None => {
                    unplaceable = Some(format!(
                        "its batch names {}, which the log does not have",
                        b.tp
                    ))
                }
                Some(end) if *end == b.base => *end += b.count,
                Some(end) if *end >= b.base + b.count => {}
                Some(end) => {
                    unplaceable = Some(format!(
                        "its batch for {} at offset {} cannot go where the partition ends ({end})",
                        b.tp, b.base
                    ));
                }
            }
            if unplaceable.is_some() {
                break;
            }
        }
        match unplaceable {
            Some(why) => dropped.push((
                pos,
                pos + len,
                format!(
                    "the transaction of group {:?} cannot be replayed: {why}",
                    txn.group
                ),
            )),
            None => {
                ends = trial;
                kept.extend_from_slice(record);
            }
        }
    }
    if dropped.is_empty() {
        return Ok(());
    }
    dropped.sort_by_key(|d| d.0);
    for (from, to, reason) in dropped {
        let intact = u64::from(reason.starts_with("the transaction"));
        cuts.push(RepairCut {
            file: path.clone(),
            action: CutAction::DropBytes { from, to },
            topic_partition: None,
            offsets: None,
            records: intact,
            reason,
        });
    }
    if !dry_run {
        let tmp = path.with_extension("repair.tmp");
        std::fs::write(&tmp, &kept).at(&tmp)?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .at(&tmp)?;
        std::fs::rename(&tmp, &path).at(&path)?;
        if let Some(parent) = path.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}
