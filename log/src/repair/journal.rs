//! Cutting the transaction journal: its damaged bytes, and the records that cannot be replayed
//! onto the partitions as repaired, are dropped and reported; the journal is rewritten.

use std::collections::HashMap;
use std::path::Path;

use super::{CutAction, RepairCut, read_or_empty, sync_dir};
use crate::error::{IoContext, Result};
use crate::journal;
use crate::slots;
use crate::storage::FileStorage;
use riffle_record::TopicPartition;

/// A dropped byte range: from, to, why, and the group and offsets of the intact transaction
/// it held (`None`: damaged bytes, whose offsets are unknown).
type Dropped = (
    u64,
    u64,
    String,
    Option<(String, Vec<(TopicPartition, u64)>)>,
);

/// Drops the journal's damaged bytes and the records that cannot be replayed onto the
/// partitions as repaired (`ends`: their end offsets), then rewrites the journal.
pub(super) fn repair_journal(
    dir: &Path,
    ends: &HashMap<TopicPartition, u64>,
    dry_run: bool,
    cuts: &mut Vec<RepairCut>,
) -> Result<()> {
    let path = journal::journal_path(dir);
    let bytes = read_or_empty(&path)?;
    // The journal's committed length as `txn/lock` says: bytes below it were fsynced.
    let lock = dir.join("txn").join(crate::txn::LOCK_FILE);
    let claim = slots::read_file(
        &FileStorage,
        &lock,
        crate::txn::CLAIM_AT,
        crate::txn::CLAIM_WHAT,
    )?;
    let len = bytes.len() as u64;
    let lost = (len < claim).then(|| RepairCut {
        file: path.clone(),
        action: CutAction::Missing,
        topic_partition: None,
        offsets: None,
        records: 0,
        damaged_records: None,
        reason: format!(
            "the journal holds {len} bytes, but its first {claim} bytes were committed (txn/lock \
             says so): bytes {len}..{claim} are gone (deleted or cut), with the group offsets of \
             the transactions there; the groups go on from the offsets in their files"
        ),
    });
    let (mut records, damage) = journal::scan_records(&bytes);
    // (from, to, why, the group and offsets a dropped intact transaction had committed)
    let mut dropped: Vec<Dropped> = Vec::new();
    if let Some(d) = damage {
        let mut at = d.position;
        for &(pos, len) in &d.intact_after {
            if pos > at {
                dropped.push((at, pos, format!("a damaged record ({})", d.reason), None));
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
            dropped.push((at, bytes.len() as u64, reason, None));
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
                    None,
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
                Some((txn.group, txn.offsets)),
            )),
            None => {
                ends = trial;
                kept.extend_from_slice(record);
            }
        }
    }
    let committed_note = |from: u64| {
        if from < claim {
            " — committed (fsynced) bytes, per txn/lock"
        } else {
            ""
        }
    };
    cuts.extend(lost);
    let new_len = kept.len() as u64;
    if dropped.is_empty() {
        if !dry_run && claim > len {
            set_claim(&lock, len)?;
        }
        return Ok(());
    }
    dropped.sort_by_key(|d| d.0);
    for (from, to, reason, committed) in dropped {
        let intact = u64::from(committed.is_some());
        cuts.push(RepairCut {
            file: path.clone(),
            action: CutAction::DropBytes { from, to },
            topic_partition: None,
            offsets: None,
            records: intact,
            damaged_records: None,
            reason: format!("{reason}{}", committed_note(from)),
        });
        // Every group offset the dropped transaction committed is lost with it.
        let Some((group, offsets)) = committed else {
            continue;
        };
        for (tp, offset) in offsets {
            cuts.push(RepairCut {
                file: path.clone(),
                action: CutAction::LoseCommittedOffset {
                    group: group.clone(),
                    offset,
                },
                reason: format!(
                    "only the dropped record at byte {from} held it: group {group:?} goes on \
                     from the offset of {tp} it committed before"
                ),
                topic_partition: Some(tp),
                offsets: None,
                records: 0,
                damaged_records: None,
            });
        }
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
        if claim > new_len {
            set_claim(&lock, new_len)?;
        }
    }
    Ok(())
}

/// Sets the journal's committed length in `txn/lock` (`lock`) to `len`, after the journal was
/// cut to it.
fn set_claim(lock: &Path, len: u64) -> Result<()> {
    let (at, what) = (crate::txn::CLAIM_AT, crate::txn::CLAIM_WHAT);
    slots::set_file(&FileStorage, lock, at, what, len)
}
