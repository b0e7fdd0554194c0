//! Checkpoint files in Kafka Streams' text format, and the offset-sum rule.
//!
//! ```text
//! 0                      <- format version
//! 2                      <- number of entries
//! app-store-changelog 3 1200
//! app-other-changelog 3 17
//! ```
//!
//! Written to a temp file, fsynced, renamed into place, then the directory is fsynced, so a crash
//! leaves either the old or the new file. A file that does not parse is an error naming the file;
//! it is never read as "no offsets".

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use riffle_record::TopicPartition;

use crate::error::{Error, IoContext, Result};

/// Kafka's sentinel for "offset unknown" in a checkpoint file; such entries are skipped on read.
const OFFSET_UNKNOWN: i64 = -2;
const VERSION: u32 = 0;

/// Sums changelog offsets the way Kafka Streams does: saturating at `i64::MAX`.
///
/// Unknown offsets are simply not passed in (they are skipped).
pub fn offset_sum(offsets: impl IntoIterator<Item = u64>) -> i64 {
    offsets.into_iter().fold(0i64, |sum, offset| {
        sum.saturating_add(i64::try_from(offset).unwrap_or(i64::MAX))
    })
}

/// Whether file replacements are fsynced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// fsync the file before the rename and the directory after it (the default).
    #[default]
    Sync,
    /// Skip the fsyncs: for tests and benchmarks only. After a power loss the file may be
    /// missing or empty; an empty file then reads as a corrupt checkpoint, never as wrong offsets.
    Buffered,
}

/// The changelog offsets of one task, as stored in its `.checkpoint` file.
///
/// Partitions whose offset is unknown are absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    offsets: BTreeMap<TopicPartition, u64>,
}

impl Checkpoint {
    /// An empty checkpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `offset` for `partition`, returning the previous one.
    pub fn insert(&mut self, partition: TopicPartition, offset: u64) -> Option<u64> {
        self.offsets.insert(partition, offset)
    }

    /// The offset of `partition`, if known.
    pub fn get(&self, partition: &TopicPartition) -> Option<u64> {
        self.offsets.get(partition).copied()
    }

    /// All (partition, offset) entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, u64)> + '_ {
        self.offsets.iter().map(|(p, o)| (p, *o))
    }

    /// Number of partitions with a known offset.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// True when no partition has a known offset.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The task's offset sum (saturating at `i64::MAX`).
    pub fn offset_sum(&self) -> i64 {
        offset_sum(self.offsets.values().copied())
    }

    /// Renders the file contents.
    pub fn to_text(&self) -> String {
        let mut out = format!("{VERSION}\n{}\n", self.offsets.len());
        for (p, o) in &self.offsets {
            out.push_str(&format!("{} {} {}\n", p.topic, p.partition, o));
        }
        out
    }

    /// Parses file contents; `path` is only used to name the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let corrupt = |reason: String| Error::CorruptCheckpoint {
            path: path.to_owned(),
            reason,
        };
        let mut lines = text.lines();
        let version = lines.next().ok_or_else(|| corrupt("empty file".into()))?;
        if version.trim() != VERSION.to_string() {
            return Err(corrupt(format!("unsupported version {version:?}")));
        }
        let count = lines
            .next()
            .ok_or_else(|| corrupt("missing entry count".into()))?;
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| corrupt(format!("bad entry count {count:?}")))?;
        let mut offsets = BTreeMap::new();
        for n in 0..count {
            let line = lines.next().ok_or_else(|| {
                corrupt(format!("truncated: expected {count} entries, found {n}"))
            })?;
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [topic, partition, offset] = fields.as_slice() else {
                return Err(corrupt(format!("malformed entry {line:?}")));
            };
            let partition: u32 = partition
                .parse()
                .map_err(|_| corrupt(format!("bad partition in {line:?}")))?;
            let offset: i64 = offset
                .parse()
                .map_err(|_| corrupt(format!("bad offset in {line:?}")))?;
            let key = TopicPartition::new(*topic, partition);
            if offsets.contains_key(&key) {
                return Err(corrupt(format!("duplicate entry for {key}")));
            }
            match u64::try_from(offset) {
                Ok(o) => {
                    offsets.insert(key, o);
                }
                Err(_) if offset == OFFSET_UNKNOWN => {}
                Err(_) => return Err(corrupt(format!("negative offset in {line:?}"))),
            }
        }
        if let Some(extra) = lines.find(|l| !l.trim().is_empty()) {
            return Err(corrupt(format!("more than {count} entries: {extra:?}")));
        }
        Ok(Self { offsets })
    }

    /// Reads the checkpoint at `path`; `Ok(None)` when there is no file.
    pub fn read(path: &Path) -> Result<Option<Self>> {
        match fs::read(path) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| Error::CorruptCheckpoint {
                    path: path.to_owned(),
                    reason: "not UTF-8".into(),
                })?;
                Self::parse(&text, path).map(Some)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).ctx("read checkpoint", path),
        }
    }

    /// Durably replaces the file at `path`: temp file, fsync, rename, directory fsync.
    pub fn write(&self, path: &Path) -> Result<()> {
        self.write_with(path, Durability::Sync)
    }

    /// Replaces the file at `path` through a temp file and a rename, fsyncing as `durability` says.
    pub fn write_with(&self, path: &Path, durability: Durability) -> Result<()> {
        self.check_writable(path)?;
        let tmp = path.with_extension("tmp");
        {
            let mut f = File::create(&tmp).ctx("create", &tmp)?;
            f.write_all(self.to_text().as_bytes()).ctx("write", &tmp)?;
            if durability == Durability::Sync {
                f.sync_all().ctx("fsync", &tmp)?;
            }
        }
        fs::rename(&tmp, path).ctx("rename into place", path)?;
        if let (Durability::Sync, Some(dir)) = (durability, path.parent()) {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// Fails with [`Error::InvalidCheckpoint`] if this cannot be written in Kafka's format.
    pub(crate) fn check_writable(&self, path: &Path) -> Result<()> {
        // Kafka offsets are signed 64-bit: a larger one could not be read back (here or by Kafka).
        if let Some((p, o)) = self
            .offsets
            .iter()
            .find(|(_, o)| i64::try_from(**o).is_err())
        {
            return Err(Error::InvalidCheckpoint {
                path: path.to_owned(),
                reason: format!("offset {o} of {p} exceeds i64::MAX"),
            });
        }
        if let Some(p) = self
            .offsets
            .keys()
            .find(|p| p.topic.is_empty() || p.topic.contains(char::is_whitespace))
        {
            return Err(Error::InvalidCheckpoint {
                path: path.to_owned(),
                reason: format!("topic name {:?} is empty or contains whitespace", p.topic),
            });
        }
        Ok(())
    }
}

impl FromIterator<(TopicPartition, u64)> for Checkpoint {
    fn from_iter<I: IntoIterator<Item = (TopicPartition, u64)>>(iter: I) -> Self {
        Self {
            offsets: iter.into_iter().collect(),
        }
    }
}

/// Fsyncs a directory so a rename or unlink inside it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("fsync directory", dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_saturate_at_i64_max() {
        assert_eq!(offset_sum([]), 0);
        assert_eq!(offset_sum([1, 2, 3]), 6);
        assert_eq!(offset_sum([u64::MAX]), i64::MAX);
        assert_eq!(offset_sum([i64::MAX as u64, 1]), i64::MAX);
    }

    #[test]
    fn unknown_sentinel_is_skipped_but_counted() {
        let cp = Checkpoint::parse("0\n2\na 0 -2\nb 1 5\n", Path::new("x")).expect("parses");
        assert_eq!(cp.len(), 1);
        assert_eq!(cp.offset_sum(), 5);
    }
}
