//! What [`repair`](super::repair) reports: each cut ([`RepairCut`]) — the file, what was done
//! to it ([`CutAction`]), the offsets and records it held — each metadata file written back
//! ([`Restored`]) or left because it cannot be ([`Unrestorable`]), and the whole
//! [`RepairReport`].

use std::fmt;
use std::path::PathBuf;

use riffle_record::TopicPartition;

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
    /// The partition's recovery point (in its `lock` file) moves back to where the partition
    /// ends after the cuts: records below it had been fsynced and are gone.
    MoveRecoveryPoint {
        /// The recovery point it said.
        from: u64,
        /// The recovery point it says now.
        to: u64,
    },
    /// A group's committed offset is moved back to where the partition ends after the cuts
    /// (it pointed past records that are gone; the group goes on from the new end).
    MoveCommittedOffset {
        /// The group.
        group: String,
        /// The offset it had committed.
        from: u64,
        /// The offset it has now.
        to: u64,
    },
    /// A group's committed offsets held only in dropped journal records are lost: the group
    /// goes back to the offsets it had committed before them.
    LoseCommittedOffset {
        /// The group.
        group: String,
        /// The offset the dropped transaction had committed.
        offset: u64,
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

/// One thing [`repair`](super::repair) cut (or would cut, in a dry run).
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
    /// Records the damaged batch at the cut holds by its header (whose checksum fails, so
    /// the count is what the header says, not what could be read); `None` if no header could
    /// be read there.
    pub damaged_records: Option<u64>,
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
            CutAction::MoveRecoveryPoint { from, to } => {
                write!(
                    f,
                    "move the recovery point in {file} from {from} back to {to}"
                )?;
            }
            CutAction::MoveCommittedOffset { group, from, to } => {
                write!(
                    f,
                    "move group {group:?}'s committed offset in {file} from {from} back to {to}"
                )?;
            }
            CutAction::LoseCommittedOffset { group, offset } => {
                write!(
                    f,
                    "lose group {group:?}'s committed offset {offset} held in {file}"
                )?;
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
        write!(f, ", {} {unit}", self.records)?;
        if let Some(n) = self.damaged_records {
            write!(f, " and {n} in the damaged batch (by its header)")?;
        }
        write!(f, "; {}", self.reason)
    }
}

/// How [`repair`](super::repair) restores a metadata file ([`Restored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreAction {
    /// The file was missing; it is written back.
    WriteBack,
    /// The file was there, damaged or disagreeing with the data; it is replaced.
    Rewrite,
}

/// A metadata file (`format`, a topic's `partitions` or `config`) that
/// [`repair`](super::repair) writes from what the data, or another metadata file, shows
/// unambiguously (in a dry run: would write).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Restored {
    /// The file.
    pub file: PathBuf,
    /// Written back (it was missing) or rewritten.
    pub action: RestoreAction,
    /// What it says now and where that comes from, e.g. "2 partitions, from the directories
    /// (…)".
    pub detail: String,
}

impl Restored {
    /// One line for a report: "wrote back topics/t/partitions: 2 partitions, from the
    /// directories (…)", or "would write back …" in a dry run.
    pub fn describe(&self, dry_run: bool) -> String {
        let verb = match (self.action, dry_run) {
            (RestoreAction::WriteBack, false) => "wrote back",
            (RestoreAction::WriteBack, true) => "would write back",
            (RestoreAction::Rewrite, false) => "rewrote",
            (RestoreAction::Rewrite, true) => "would rewrite",
        };
        format!("{verb} {}: {}", self.file.display(), self.detail)
    }
}

/// A metadata file that is missing, damaged or disagrees with the data, and that
/// [`repair`](super::repair) cannot rebuild because what is on disk does not tell what it
/// held: it is left as it is (and a topic whose partition count cannot be told is not cut
/// either). The log does not open until it is fixed by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unrestorable {
    /// The file.
    pub file: PathBuf,
    /// What is wrong, why it cannot be told, and what to do.
    pub reason: String,
}

impl fmt::Display for Unrestorable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot restore {}: {}", self.file.display(), self.reason)
    }
}

/// Everything [`repair`](super::repair) cut, in order.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RepairReport {
    /// The cuts, partition by partition, then the journal's.
    pub cuts: Vec<RepairCut>,
    /// Nothing was changed (a dry run).
    pub dry_run: bool,
    /// Metadata files written from what the data shows: a deleted `format` file of a log
    /// whose segments hold this build's batches, a topic's `partitions` rebuilt from its
    /// partition directories, a `config` rebuilt from what `partitions` recorded; in a dry
    /// run, what would be.
    pub restored: Vec<Restored>,
    /// Metadata files that are damaged and cannot be rebuilt from what is on disk: left as
    /// they are. Empty when the log opens after the repair.
    pub unrestorable: Vec<Unrestorable>,
}
