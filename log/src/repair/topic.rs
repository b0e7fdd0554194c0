//! Restoring a topic's metadata files — `partitions` and `config` — from what is on disk, when
//! that tells what they held, and saying why not otherwise (log/FORMAT.md, *`riffle log
//! repair`*).
//!
//! - `partitions` missing, unparseable, or smaller than the partition directories: rebuilt from
//!   the directories when they are exactly `0..N` and each holds a segment (a created topic has
//!   one per partition), recording the `config` file as it is.
//! - A count whose directories have gaps, the last one (`count - 1`) present: kept; the
//!   partition repair recreates the missing ones empty (they were deleted: the directories
//!   after them show the count reaches past them). A count past the last directory: deleted
//!   partitions or a raised count, which cannot be told: reported, left (a count is never
//!   lowered, nor partitions made up to reach it).
//! - `config` missing, unparseable or different from what `partitions` recorded at creation:
//!   written back from that record. Without a record it cannot be told: reported, left.
//!
//! It goes through [`Storage`], so the fuzz target runs it on a directory in memory.

use std::path::Path;

use super::{RestoreAction, Restored, Unrestorable};
use crate::error::{IoContext, Result};
use crate::storage::Storage;
use crate::topic_config::TopicConfig;
use crate::topic_meta::{
    CONFIG_FILE, Listing, Mismatch, PARTITIONS_FILE, Snapshot, TopicMeta, describe_config,
    describe_defaults, parse_config,
};

/// What [`repair_topic`] found in a directory under `topics/`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Neither a `partitions` file nor a partition directory: no topic (the log ignores it).
    NoTopic,
    /// A topic of this many partitions (once the restored files are written).
    Count(u32),
    /// A topic whose partition count cannot be told: its partitions are left alone.
    Unknown,
}

/// Checks the metadata of the topic in `dir` and restores what can be restored (with
/// `dry_run`, only reports it), adding to `restored` and `unrestorable`.
pub(crate) fn repair_topic(
    storage: &dyn Storage,
    dir: &Path,
    dry_run: bool,
    restored: &mut Vec<Restored>,
    unrestorable: &mut Vec<Unrestorable>,
) -> Result<Found> {
    let snapshot = Snapshot::read(storage, dir)?;
    let listing = &snapshot.listing;
    if snapshot.partitions.is_none() && listing.is_bare() {
        return Ok(Found::NoTopic);
    }
    let meta_path = dir.join(PARTITIONS_FILE);
    let config_path = dir.join(CONFIG_FILE);
    let parsed = snapshot.partitions.as_deref().map(TopicMeta::parse);
    let config_file = snapshot.config.as_deref().map(parse_config);
    let holds = listing.describe(storage, dir);
    // What a rebuilt `partitions` records: the `config` file as it is, if it parses.
    let (record_from_file, recorded) = match &config_file {
        None => (
            Some(TopicConfig::default()),
            "; recorded config: the defaults (there is no `config` file)".to_owned(),
        ),
        Some(Ok(c)) => (
            Some(c.clone()),
            format!(
                "; recorded config: {}, as the `config` file holds it",
                describe_config(c)
            ),
        ),
        Some(Err(_)) => (
            None,
            "; no config recorded (the `config` file does not parse)".to_owned(),
        ),
    };
    // How and why `partitions` is written, if it is (else the parsed one is kept as it is).
    let mut write_meta: Option<(RestoreAction, String)> = None;
    let meta: Option<TopicMeta> = match &parsed {
        Some(Ok(meta)) => match Mismatch::of(meta.count, listing) {
            // Gaps are deleted partitions: recreated empty by the partition repair.
            None | Some(Mismatch::Gaps) => Some(meta.clone()),
            Some(Mismatch::Past { .. }) => restore_count(
                storage,
                dir,
                listing,
                &holds,
                meta,
                &mut write_meta,
                unrestorable,
            )?,
            Some(mismatch @ (Mismatch::Trailing { .. } | Mismatch::Tangled)) => {
                unrestorable.push(Unrestorable {
                    file: meta_path.clone(),
                    reason: mismatch.explain(storage, dir, meta.count, listing),
                });
                None
            }
        },
        Some(Err(_)) | None => {
            let (action, was) = match &parsed {
                Some(Err((position, reason))) => (
                    RestoreAction::Rewrite,
                    format!("it did not parse (byte {position}: {reason})"),
                ),
                _ => (RestoreAction::WriteBack, "it was missing".to_owned()),
            };
            match from_directories(storage, dir, listing, &holds)? {
                Ok(n) => {
                    let s = if n == 1 { "" } else { "s" };
                    let mut detail =
                        format!("{n} partition{s}, from the directories ({holds}){recorded}");
                    if action == RestoreAction::Rewrite {
                        detail = format!("{detail}; {was}");
                    }
                    write_meta = Some((action, detail));
                    Some(TopicMeta {
                        count: n,
                        config: record_from_file.clone(),
                    })
                }
                Err(why) => {
                    unrestorable.push(Unrestorable {
                        file: meta_path.clone(),
                        reason: format!(
                            "{was}, and {why}: write the partition count into it by hand"
                        ),
                    });
                    None
                }
            }
        }
    };
    // The config recorded at creation (kept, or recorded now from the `config` file).
    let record = match &parsed {
        Some(Ok(parsed)) => parsed.config.clone(),
        _ => meta.as_ref().and_then(|m| m.config.clone()),
    };
    let mut config_restored = None;
    match (&record, &config_file) {
        (Some(record), file) => {
            let was = match file {
                None if record == &TopicConfig::default() => None,
                None => Some((RestoreAction::WriteBack, "it was missing".to_owned())),
                Some(Ok(c)) if c == record => None,
                Some(Ok(c)) => Some((
                    RestoreAction::Rewrite,
                    format!("it said {}", describe_config(c)),
                )),
                Some(Err(reason)) => Some((
                    RestoreAction::Rewrite,
                    format!("it did not parse ({reason})"),
                )),
            };
            if let Some((action, was)) = was {
                // Written before `partitions`, whose record it must agree with.
                if !dry_run {
                    storage
                        .write_atomic(&config_path, record.to_file().as_bytes())
                        .at(&config_path)?;
                }
                config_restored = Some(Restored {
                    file: config_path.clone(),
                    action,
                    detail: format!(
                        "{}, as {} records the topic was created with; {was}",
                        describe_config(record),
                        meta_path.display()
                    ),
                });
            }
        }
        (None, Some(Err(reason))) => unrestorable.push(Unrestorable {
            file: config_path.clone(),
            reason: format!(
                "it does not parse ({reason}), and nothing records what it held ({} holds no \
                 copy of it): fix it by hand, or remove it to give the topic the defaults ({})",
                meta_path.display(),
                describe_defaults()
            ),
        }),
        (None, _) => {}
    }
    if let (Some(meta), Some((action, detail))) = (&meta, write_meta) {
        if !dry_run {
            storage
                .write_atomic(&meta_path, meta.render().as_bytes())
                .at(&meta_path)?;
        }
        restored.push(Restored {
            file: meta_path,
            action,
            detail,
        });
    }
    restored.extend(config_restored);
    Ok(meta.map_or(Found::Unknown, |meta| Found::Count(meta.count)))
}

/// A count below the partition directories, rewritten to what they show if they show it
/// unambiguously (`write_meta` then says so); otherwise reported in `unrestorable`.
fn restore_count(
    storage: &dyn Storage,
    dir: &Path,
    listing: &Listing,
    holds: &str,
    meta: &TopicMeta,
    write_meta: &mut Option<(RestoreAction, String)>,
    unrestorable: &mut Vec<Unrestorable>,
) -> Result<Option<TopicMeta>> {
    match from_directories(storage, dir, listing, holds)? {
        Ok(n) => {
            *write_meta = Some((
                RestoreAction::Rewrite,
                format!(
                    "{n} partitions, from the directories ({holds}); it said {}",
                    meta.count
                ),
            ));
            Ok(Some(TopicMeta {
                count: n,
                config: meta.config.clone(),
            }))
        }
        Err(why) => {
            unrestorable.push(Unrestorable {
                file: dir.join(PARTITIONS_FILE),
                reason: format!(
                    "it says {} partitions, but {why}: fix the file or the directories by hand",
                    meta.count
                ),
            });
            Ok(None)
        }
    }
}

/// The partition count the directories show: `Ok(n)` if they are exactly `0..n` and each
/// holds a segment; otherwise why it cannot be told.
fn from_directories(
    storage: &dyn Storage,
    dir: &Path,
    listing: &Listing,
    holds: &str,
) -> Result<std::result::Result<u32, String>> {
    let Some(n) = listing.dense() else {
        return Ok(Err(format!(
            "the directory holds {holds}, not partitions 0 to N-1, so the count cannot be told"
        )));
    };
    if let Some(p) = listing.without_segment(storage, dir)? {
        return Ok(Err(format!(
            "{} holds no segment (the directory holds {holds}), so the directories do not show \
             the count unambiguously",
            dir.join(p.to_string()).display()
        )));
    }
    Ok(Ok(n))
}
