//! The consumer groups' offsets after the partitions were cut: an offsets file the registry in
//! `txn/lock` says was written and that is gone is reported (its offsets are lost) and written
//! back empty; a committed offset past where its partition now ends is moved back to that end
//! and reported (the records between were cut).

use std::collections::HashMap;
use std::path::Path;

use super::{CutAction, RepairCut};
use crate::error::{IoContext, Result};
use crate::offsets::{self, GroupOffsets, group_file};
use crate::storage::{FileStorage, Storage};
use crate::txn::{REGISTRY_AT, parse_registry};
use riffle_record::TopicPartition;

/// Checks every group's offsets against `ends` (the partitions' end offsets after the cuts)
/// and against the registry; reports and (unless `dry_run`) fixes what it finds.
pub(super) fn repair_groups(
    root: &Path,
    ends: &HashMap<TopicPartition, u64>,
    dry_run: bool,
    cuts: &mut Vec<RepairCut>,
) -> Result<()> {
    let lock = root.join("txn").join(crate::txn::LOCK_FILE);
    let registered = match std::fs::read(&lock) {
        Ok(bytes) => parse_registry(bytes.get(REGISTRY_AT as usize..).unwrap_or_default()).0,
        Err(_) => Default::default(),
    };
    let dir = root.join("groups");
    let mut names: Vec<String> = FileStorage
        .list(&dir)
        .at(&dir)?
        .iter()
        .filter_map(|n| n.strip_suffix(".offsets").map(str::to_owned))
        .collect();
    names.sort();
    for group in &registered {
        if names.contains(group) {
            continue;
        }
        let path = group_file(root, group);
        cuts.push(RepairCut {
            file: path.clone(),
            action: CutAction::Missing,
            topic_partition: None,
            offsets: None,
            records: 0,
            damaged_records: None,
            reason: format!(
                "group {group:?} committed offsets (txn/lock registers it) but its offsets file \
                 is gone: its offsets are lost; an empty offsets file is written, and the group \
                 starts over from auto.offset.reset"
            ),
        });
        if !dry_run {
            FileStorage.create_dir_all(&dir).at(&dir)?;
            FileStorage
                .write_atomic(&path, &offsets::encode(&GroupOffsets::new()))
                .at(&path)?;
        }
    }
    for group in names {
        let path = group_file(root, &group);
        let Some(bytes) = FileStorage.read(&path).at(&path)? else {
            continue;
        };
        let mut committed = offsets::decode(&path, &bytes)?;
        let mut moved = false;
        for (tp, offset) in committed.iter_mut() {
            let Some(&end) = ends.get(tp) else { continue };
            if *offset <= end {
                continue;
            }
            cuts.push(RepairCut {
                file: path.clone(),
                action: CutAction::MoveCommittedOffset {
                    group: group.clone(),
                    from: *offset,
                    to: end,
                },
                topic_partition: Some(tp.clone()),
                offsets: Some((end, Some(*offset))),
                records: 0,
                damaged_records: None,
                reason: format!(
                    "{tp} now ends at offset {end}: the group goes on from there (offsets \
                     {end}..{offset} were cut above)"
                ),
            });
            *offset = end;
            moved = true;
        }
        if moved && !dry_run {
            FileStorage
                .write_atomic(&path, &offsets::encode(&committed))
                .at(&path)?;
        }
    }
    Ok(())
}
