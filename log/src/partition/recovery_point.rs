//! The partition's *recovery point* (log/FORMAT.md, *Recovery point*), as Kafka's
//! `recovery-point-offset-checkpoint`: an offset below which every record was fsynced. It is
//! what tells a torn write (bytes past anything ever made durable, which a crash may leave and
//! a writer cuts) from damage to data that was durable (an [`Error::Corrupt`], which only
//! `riffle log repair` cuts).
//!
//! It lives in the partition's `lock` file, after the 16 bytes that coordinate writers, in the
//! two slots of log/src/slots.rs (bytes 16..64). It is written *after* the fsync that made its
//! records durable and never fsynced itself: a value on disk is always at most what was durable
//! when it was written, so losing the write (a crash) only leaves an older, lower recovery
//! point. It costs no fsync.
//!
//! It must never rise above what an fsync covered, and only `riffle log repair` lowers it (when
//! it cuts records below it, which it reports).

use std::path::Path;

use super::{LOCK_FILE, Partition};
use crate::error::{Error, IoContext, Result};
use crate::slots;
use crate::storage::Storage;

/// Where the two slots start in the lock file.
const SLOTS_AT: u64 = 16;
const WHAT: &str = "the partition's recovery point";

/// The recovery point of the partition in `dir` (0: none), read without a `Partition` (on
/// open, and by `riffle log repair`). A missing lock file has none.
pub(crate) fn read_recovery_point(storage: &dyn Storage, dir: &Path) -> Result<u64> {
    slots::read_file(storage, &dir.join(LOCK_FILE), SLOTS_AT, WHAT)
}

/// Sets the recovery point of the partition in `dir` to `offset`, lower or higher: only
/// `riffle log repair` calls this, after cutting records below it (it holds the lock).
pub(crate) fn write_recovery_point(storage: &dyn Storage, dir: &Path, offset: u64) -> Result<()> {
    slots::set_file(storage, &dir.join(LOCK_FILE), SLOTS_AT, WHAT, offset)
}

impl Partition {
    /// The recovery point as the lock file says now (0: none).
    pub(super) fn recovery_point(&mut self) -> Result<u64> {
        let path = self.dir.join(LOCK_FILE);
        let file = self.lock_file()?;
        Ok(slots::read(&mut **file, &path, SLOTS_AT, WHAT)?.map_or(0, |p| p.value))
    }

    /// After an fsync that made every record below `offset` durable: raises the recovery
    /// point to it (never lowers it; another process may have raised it further).
    pub(super) fn raise_recovery_point(&mut self, offset: u64) -> Result<()> {
        if offset <= self.recovery_point {
            return Ok(());
        }
        let path = self.dir.join(LOCK_FILE);
        let active = self.segments.last().map_or(0, |s| s.base);
        let file = self.lock_file()?;
        let current = slots::read(&mut **file, &path, SLOTS_AT, WHAT)?;
        if let Some(current) = current
            && current.value >= offset
        {
            self.recovery_point = current.value;
            return Ok(());
        }
        if file.len() < SLOTS_AT {
            // A lock file nobody wrote yet: its 16 bytes first (no mark, the active base).
            let mut head = [0u8; SLOTS_AT as usize];
            head[8..].copy_from_slice(&active.to_be_bytes());
            file.write_at(0, &head).at(&path)?;
        }
        slots::write(&mut **file, &path, SLOTS_AT, current, offset)?;
        self.recovery_point = offset;
        Ok(())
    }
}

/// The error for partition `tp` (directory `dir`) that ends at `end_offset` (byte `end_pos` of
/// `segment`) below its recovery point `point`: records that were fsynced are gone or damaged.
/// `problem`: why the bytes at `end_pos` are not a batch (`None`: the file ends there).
pub(super) fn below_recovery_point(
    tp: &riffle_record::TopicPartition,
    dir: &Path,
    segment: &Path,
    end_pos: u64,
    end_offset: u64,
    problem: Option<&str>,
    point: u64,
) -> Error {
    let found = match problem {
        Some(reason) => format!("the data is damaged there ({reason})"),
        None => "the segment ends there".to_owned(),
    };
    Error::Corrupt {
        path: segment.to_path_buf(),
        position: end_pos,
        reason: format!(
            "{tp}'s records end at offset {end_offset} (byte {end_pos}): {found}, but every \
             record below offset {point} was fsynced (the recovery point in {}), so this is not \
             a torn write: offsets {end_offset}..{point} are damaged or missing; `riffle log \
             repair` cuts the damaged data explicitly and reports what it removes",
            dir.join(LOCK_FILE).display()
        ),
    }
}
