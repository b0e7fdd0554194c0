//! Cutting one partition at its first damage: every segment from there on is cut or removed
//! (a partition's offsets are dense), its index and seal made to match, and the start offset
//! kept inside what is left; each cut reported.

use std::io;
use std::path::{Path, PathBuf};

use super::{CutAction, RepairCut, read_or_empty, remove, sync_dir};
use crate::error::{Error, IoContext, Result};
use crate::partition::{
    LOCK_FILE, START_FILE, read_recovery_point, read_start, write_recovery_point,
};
use crate::segment::{
    Seal, parse_index, parse_segment_file_name, scan_file_from, segment_file_name,
};
use crate::storage::{FileStorage, Storage, StorageFile};
use riffle_record::TopicPartition;

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

/// Cuts one partition at its first damage; returns its end offset after the cut.
pub(super) fn repair_partition(
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
            damaged_records: None,
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
            damaged_records: None,
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
                damaged_records: None,
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
                let (damaged_records, damaged_end) = damaged_batch(&file.0, d.position, d.offset);
                cuts.push(RepairCut {
                    file: path.clone(),
                    action: CutAction::Truncate {
                        at: d.position,
                        len,
                    },
                    topic_partition: Some(tp.clone()),
                    offsets: Some((d.offset, Some(d.known_end().max(damaged_end)))),
                    records: d.records_after(),
                    damaged_records,
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
                    damaged_records: None,
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
            damaged_records: None,
            reason: format!(
                "the start offset {start} is past the repaired end offset {expected}; it becomes \
                 {expected}"
            ),
        });
        if !dry_run {
            FileStorage
                .write_atomic(&path, &crate::partition::encode_start(expected))
                .at(&path)?;
        }
    }
    let point = read_recovery_point(&FileStorage, dir)?;
    if expected < point {
        // Records that had been fsynced are cut (or were missing): the recovery point says so,
        // and moves back to the new end, or the next open would refuse the partition.
        let path = dir.join(LOCK_FILE);
        cuts.push(RepairCut {
            file: path.clone(),
            action: CutAction::MoveRecoveryPoint {
                from: point,
                to: expected,
            },
            topic_partition: Some(tp.clone()),
            offsets: Some((expected, Some(point))),
            records: 0,
            damaged_records: None,
            reason: format!(
                "every record below offset {point} had been fsynced, and the partition now ends \
                 at {expected}: offsets {expected}..{point} were durable and are lost (the cuts \
                 above, or a segment that was cut short or removed)"
            ),
        });
        if !dry_run {
            write_recovery_point(&FileStorage, dir, expected)?;
        }
    }
    if !dry_run && cut_from.is_some() {
        sync_dir(dir)?;
    }
    Ok(expected)
}

/// What the header of the damaged batch at `position` of `bytes` (expected at `offset`) says:
/// its record count and the offset after it, if a header that claims that offset is there
/// (its checksum fails, or its bytes run past the file's end). `(None, offset)` otherwise.
fn damaged_batch(bytes: &[u8], position: u64, offset: u64) -> (Option<u64>, u64) {
    let header = usize::try_from(position)
        .ok()
        .and_then(|p| bytes.get(p..))
        .and_then(|b| riffle_record::BatchHeader::parse(b).ok());
    match header {
        Some(h) if h.base_offset == offset => (
            Some(u64::from(h.record_count)),
            offset + u64::from(h.last_offset_delta) + 1,
        ),
        _ => (None, offset),
    }
}
