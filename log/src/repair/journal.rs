//! Cutting the transaction journal: its damaged bytes, and the records that cannot be replayed
//! onto the partitions as repaired, are dropped and reported; the journal is rewritten.

use std::collections::HashMap;
use std::path::Path;

use super::{CutAction, RepairCut, read_or_empty, sync_dir};
use crate::error::{IoContext, Result};
use crate::journal;
use riffle_record::TopicPartition;

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
