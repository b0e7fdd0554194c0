//! Entry points for the fuzz targets in `fuzz/` (hidden from the docs; not a stable API).
//!
//! What it owns: a log directory held in memory ([`MemDir`]) whose files a fuzz target writes
//! byte by byte and reads back after [`MemDir::open`] — so the targets drive the real readers
//! (segment recovery, the offset index, batch and record decoding, journal replay, a topic's
//! metadata check) through [`Log`]'s own entry points, whatever their internals become — and
//! thin wrappers around what has no public entry point of its own: the group-offsets codec, a
//! topic's `partitions` file, the metadata part of `repair` (which otherwise runs on files
//! only), and the readers of the log's second records (the two checksummed slots of a
//! partition's recovery point and of the journal's committed length, the group registry of
//! `txn/lock`, the `start` file).
//!
//! What it must never do: hold logic of its own. Everything here forwards to the code the log
//! runs, so a fuzz finding is a finding in that code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoContext, Result};
use crate::log::Log;
use crate::options::LogOptions;
use crate::repair::{Found, Restored, Unrestorable, repair_topic};
use crate::storage::{MemStorage, Storage};
use crate::topic_config::TopicConfig;
use crate::topic_meta::TopicMeta;
use riffle_record::TopicPartition;

/// A log directory in memory. Paths are relative to its root, `/` separated, as in `FORMAT.md`
/// (`topics/t/partitions`, `topics/t/0/00000000000000000000.log`, `txn/journal`, …).
#[derive(Debug, Clone)]
pub struct MemDir {
    storage: Arc<dyn Storage>,
    root: PathBuf,
}

impl Default for MemDir {
    fn default() -> Self {
        Self::new()
    }
}

impl MemDir {
    /// An empty directory.
    pub fn new() -> Self {
        Self {
            storage: Arc::new(MemStorage::default()),
            root: PathBuf::from("/fuzz"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Creates (or replaces) the file `rel` with `bytes`, creating its directories.
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let path = self.path(rel);
        if let Some(dir) = path.parent() {
            // Memory storage: these cannot fail.
            let _ = self.storage.create_dir_all(dir);
        }
        let _ = self.storage.write_atomic(&path, bytes);
    }

    /// The content of the file `rel`, `None` if it does not exist.
    pub fn read(&self, rel: &str) -> Option<Vec<u8>> {
        self.storage.read(&self.path(rel)).ok().flatten()
    }

    /// The names of the entries of directory `rel`, sorted.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut names = self.storage.list(&self.path(rel)).unwrap_or_default();
        names.sort();
        names
    }

    /// Every file under the root, with its content: `(relative path, bytes)`, sorted by path.
    pub fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut dirs = vec![String::new()];
        while let Some(dir) = dirs.pop() {
            for name in self.list(&dir) {
                let rel = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                match self.read(&rel) {
                    Some(bytes) => out.push((rel, bytes)),
                    None => dirs.push(rel),
                }
            }
        }
        out.sort();
        out
    }

    /// Opens the log in this directory as [`Log::open`] opens one on disk: recovery, index
    /// loading and journal replay run on the files as they are.
    pub fn open(&self, options: LogOptions) -> Result<Log> {
        for sub in ["topics", "groups", "txn"] {
            let path = self.path(sub);
            self.storage.create_dir_all(&path).at(&path)?;
        }
        let log = Log::with_storage(Arc::clone(&self.storage), self.root.clone(), None, options);
        log.load_topics()?;
        Ok(log)
    }

    /// The directory's path as the log names it in errors (`Error::Corrupt { path, .. }`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Removes the file `rel` (nothing if it does not exist).
    pub fn remove(&self, rel: &str) {
        let _ = self.storage.remove_file(&self.path(rel));
    }

    /// Removes the directory `rel` and everything under it.
    pub fn remove_dir(&self, rel: &str) {
        let _ = self.storage.remove_dir_all(&self.path(rel));
    }

    /// Creates the directory `rel` (and its parents), empty.
    pub fn create_dir(&self, rel: &str) {
        let _ = self.storage.create_dir_all(&self.path(rel));
    }

    /// What `riffle log repair` does to the metadata of topic `topic` (`topics/<topic>/`
    /// `partitions` and `config`; not its partitions' segments): the files written back (or
    /// that would be, with `dry_run`) and those it cannot rebuild. `Ok(None)`: the directory
    /// is no topic (neither a `partitions` file nor a partition directory).
    pub fn repair_topic_metadata(
        &self,
        topic: &str,
        dry_run: bool,
    ) -> Result<Option<(Vec<Restored>, Vec<Unrestorable>)>> {
        let dir = self.path("topics").join(topic);
        let (mut restored, mut unrestorable) = (Vec::new(), Vec::new());
        let found = repair_topic(
            &*self.storage,
            &dir,
            dry_run,
            &mut restored,
            &mut unrestorable,
        )?;
        Ok((found != Found::NoTopic).then_some((restored, unrestorable)))
    }
}

/// Parses a topic's `partitions` file as the log reads it: the partition count, and the config
/// recorded at creation (`None`: a file of the count alone). Errors are `Error::Corrupt`.
pub fn parse_topic_partitions(bytes: &[u8]) -> Result<(u32, Option<TopicConfig>)> {
    TopicMeta::parse(bytes)
        .map(|m| (m.count, m.config))
        .map_err(|(position, reason)| crate::error::Error::Corrupt {
            path: PathBuf::from("partitions"),
            position,
            reason,
        })
}

/// A topic's `partitions` file as the log writes it.
pub fn render_topic_partitions(count: u32, config: Option<&TopicConfig>) -> Vec<u8> {
    TopicMeta {
        count,
        config: config.cloned(),
    }
    .render()
    .into_bytes()
}

/// Decodes a group-offsets file (`groups/<group>.offsets`) as the log reads it.
pub fn decode_group_offsets(bytes: &[u8]) -> Result<BTreeMap<TopicPartition, u64>> {
    crate::offsets::decode(Path::new("g.offsets"), bytes)
}

/// Encodes group offsets as the log writes them.
pub fn encode_group_offsets(offsets: &BTreeMap<TopicPartition, u64>) -> Vec<u8> {
    crate::offsets::encode(offsets)
}

/// Decodes the two checksummed slots of log/src/slots.rs (a partition's recovery point in its
/// `lock` file, the journal's committed length in `txn/lock`) at the start of `bytes`, as the
/// log reads them: `(value, sequence number)`, `None` if never written.
pub fn decode_slots(bytes: &[u8]) -> Result<Option<(u64, u64)>> {
    let slotted = crate::slots::decode(Path::new("lock"), 0, "the fuzzed slots", bytes)?;
    Ok(slotted.map(|s| (s.value, s.seq())))
}

/// The bytes a file holding `file` has after the log writes `value` into the slots at its
/// start (reading them first, as it does): the file as given, then written in place.
pub fn write_slots(file: &[u8], value: u64) -> Result<Vec<u8>> {
    let storage = MemStorage::default();
    let dir = Path::new("/fuzz");
    storage.create_dir_all(dir).at(dir)?;
    let path = dir.join("lock");
    storage.write_atomic(&path, file).at(&path)?;
    let mut handle = storage.open(&path).at(&path)?;
    let current = crate::slots::read(&mut *handle, &path, 0, "the fuzzed slots")?;
    crate::slots::write(&mut *handle, &path, 0, current, value)?;
    drop(handle);
    Ok(storage.read(&path).at(&path)?.unwrap_or_default())
}

/// Parses a group registry (`txn/lock` from byte 64 on) as the log reads it: the groups, and
/// the byte after the last entry that checks out.
pub fn parse_group_registry(bytes: &[u8]) -> (BTreeSet<String>, u64) {
    crate::txn::parse_registry(bytes)
}

/// The registry entry the log appends for `group`.
pub fn group_registry_entry(group: &str) -> Vec<u8> {
    crate::txn::registry_entry(group)
}

/// Decodes a partition's `start` file as the log reads it.
pub fn decode_start(bytes: &[u8]) -> Result<u64> {
    crate::partition::parse_start(Path::new("start"), bytes)
}

/// A `start` file for `offset`, as the log writes it.
pub fn encode_start(offset: u64) -> Vec<u8> {
    crate::partition::encode_start(offset)
}
