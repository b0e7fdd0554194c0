//! Durable consumer-group offsets: one file per group, `groups/<group>.offsets`, replaced
//! atomically (temp file, fsync, rename, directory fsync) on every commit and checksummed, so a
//! reader sees either the previous or the new offsets, never a mix.
//!
//! Offsets committed by a transaction are only *applied* here, in memory: the transaction
//! journal holds them durably until a checkpoint [flushes](OffsetStore::flush_pending) them to
//! their files (so a transaction costs no offsets-file write).
//!
//! Many processes: the store is a cache of the files and of the journal's records (of every
//! process), valid while the generation in `txn/lock` is unchanged and the journal only grew;
//! every change is made under the transaction lock, and a process bumps that generation
//! *before* it writes a group file, so a commit merges into a cached file only while no other
//! process can have written it: two processes committing different partitions of one group
//! never lose each other's. This module never takes a lock itself: its callers hold the
//! transaction lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::storage::Storage;
use riffle_record::TopicPartition;

const MAGIC: &[u8; 4] = b"RFGO";
const VERSION: u16 = 1;

/// The committed offsets of one group, by partition.
pub(crate) type GroupOffsets = BTreeMap<TopicPartition, u64>;

/// Every group's offsets, loaded on first use.
#[derive(Debug, Default)]
pub(crate) struct OffsetStore {
    /// Group files as read (lazily).
    files: HashMap<String, GroupOffsets>,
    /// Offsets of the journal's records (any process's), by group, applied in record order:
    /// what the files do not have yet.
    journal: HashMap<String, GroupOffsets>,
    /// Partitions the journal's records wrote to (a checkpoint fsyncs them).
    pub(crate) journal_partitions: BTreeSet<TopicPartition>,
    /// The generation of `txn/lock` this cache is valid for.
    pub(crate) generation: u64,
    /// Bytes of the journal parsed into `journal`.
    pub(crate) journal_len: u64,
    /// The encoding buffer, reused by every commit.
    buf: Vec<u8>,
    /// Groups whose offsets file was ever written, as `txn/lock`'s registry says: a missing
    /// file of one of them is lost offsets, not "never committed".
    pub(crate) registered: BTreeSet<String>,
    /// The lock file length the registry was read at.
    pub(crate) registry_version: u64,
    /// Groups whose offsets file this process wrote first (to register, by the holder of the
    /// transaction lock).
    created: Vec<String>,
}

pub(crate) fn group_file(root: &Path, group: &str) -> PathBuf {
    root.join("groups").join(format!("{group}.offsets"))
}

/// The group's offsets file; `None` if it does not exist and never did. A file the registry
/// says was written and that is gone is an [`Error::Corrupt`].
fn read_file(
    storage: &Arc<dyn Storage>,
    root: &Path,
    group: &str,
    registered: &BTreeSet<String>,
) -> Result<Option<GroupOffsets>> {
    let path = group_file(root, group);
    match storage.read(&path).at(&path)? {
        Some(bytes) => decode(&path, &bytes).map(Some),
        None if registered.contains(group) => Err(Error::Corrupt {
            path,
            position: 0,
            reason: format!(
                "group {group:?}'s offsets file is missing, but the group registry in \
                 txn/lock says it was written: its committed offsets are lost (deleted?), and \
                 the group would process its input again from auto.offset.reset; `riffle log \
                 repair` acknowledges the loss explicitly (the group starts with no offsets)"
            ),
        }),
        None => Ok(None),
    }
}

impl OffsetStore {
    /// Forgets everything cached: the files or the journal changed under another process.
    pub(crate) fn invalidate(&mut self, generation: u64) {
        self.files.clear();
        self.journal.clear();
        self.journal_partitions.clear();
        self.generation = generation;
        self.journal_len = 0;
    }

    /// The group's committed offset of `tp`: the journal's latest, else the file's.
    pub(crate) fn get(
        &mut self,
        storage: &Arc<dyn Storage>,
        root: &Path,
        group: &str,
        tp: &TopicPartition,
    ) -> Result<Option<u64>> {
        if let Some(offset) = self.journal.get(group).and_then(|g| g.get(tp)) {
            return Ok(Some(*offset));
        }
        if !self.files.contains_key(group) {
            let offsets = read_file(storage, root, group, &self.registered)?.unwrap_or_default();
            self.files.insert(group.to_owned(), offsets);
        }
        Ok(self.files.get(group).and_then(|g| g.get(tp)).copied())
    }

    /// Merges `offsets` into the group's offsets and writes the whole file durably.
    ///
    /// The cached copy of the file is the truth while the cache is valid: the caller holds the
    /// transaction lock, and every process bumps the generation in `txn/lock` before it writes
    /// a group file, so a cache of an older generation was dropped when the lock was taken
    /// (`Log::txn_lock`). The file is read only when it is not cached yet, so a commit costs
    /// the merge of its own offsets and one encoding of the file, not a decode of it. If the
    /// write fails the cached copy is dropped, to be read afresh.
    pub(crate) fn commit(
        &mut self,
        storage: &Arc<dyn Storage>,
        root: &Path,
        group: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        if !self.files.contains_key(group) {
            let read = read_file(storage, root, group, &self.registered)?;
            self.files
                .insert(group.to_owned(), read.unwrap_or_default());
        }
        let Some(merged) = self.files.get_mut(group) else {
            return Ok(());
        };
        for (tp, offset) in offsets {
            match merged.get_mut(tp) {
                Some(o) => *o = *offset,
                None => {
                    merged.insert(tp.clone(), *offset);
                }
            }
        }
        encode_into(merged, &mut self.buf);
        let path = group_file(root, group);
        if let Err(e) = storage.write_atomic(&path, &self.buf).at(&path) {
            self.files.remove(group);
            return Err(e);
        }
        // A registered group whose file was missing failed the read above: an unregistered
        // one is new, or its file predates the registry.
        if !self.registered.contains(group) && !self.created.iter().any(|g| g == group) {
            self.created.push(group.to_owned());
        }
        Ok(())
    }

    /// The groups whose offsets files were written and that the registry does not have yet:
    /// the holder of the transaction lock registers them (`TxnGuard::register_groups`).
    pub(crate) fn take_created(&mut self) -> Vec<String> {
        let created = std::mem::take(&mut self.created);
        self.registered.extend(created.iter().cloned());
        created
    }

    /// Every committed offset of `group`: its file's, with the journal's over them.
    pub(crate) fn all(
        &mut self,
        storage: &Arc<dyn Storage>,
        root: &Path,
        group: &str,
    ) -> Result<GroupOffsets> {
        if !self.files.contains_key(group) {
            let read = read_file(storage, root, group, &self.registered)?.unwrap_or_default();
            self.files.insert(group.to_owned(), read);
        }
        let mut all = self.files.get(group).cloned().unwrap_or_default();
        if let Some(journal) = self.journal.get(group) {
            all.extend(journal.iter().map(|(tp, o)| (tp.clone(), *o)));
        }
        Ok(all)
    }

    /// Removes `topic`'s offsets from every group's file, durably (a deleted topic's offsets
    /// must not apply to a topic created later under its name). The caller holds the
    /// transaction lock (exclusive) after a checkpoint, so the journal holds none.
    pub(crate) fn delete_topic(
        &mut self,
        storage: &Arc<dyn Storage>,
        root: &Path,
        topic: &str,
    ) -> Result<()> {
        let dir = root.join("groups");
        let names = storage.list(&dir).at(&dir)?;
        for group in names.iter().filter_map(|n| n.strip_suffix(".offsets")) {
            if !self.files.contains_key(group) {
                let read = read_file(storage, root, group, &self.registered)?.unwrap_or_default();
                self.files.insert(group.to_owned(), read);
            }
            let Some(offsets) = self.files.get_mut(group) else {
                continue;
            };
            let before = offsets.len();
            offsets.retain(|tp, _| &*tp.topic != topic);
            if offsets.len() == before {
                continue;
            }
            encode_into(offsets, &mut self.buf);
            let path = group_file(root, group);
            if let Err(e) = storage.write_atomic(&path, &self.buf).at(&path) {
                self.files.remove(group);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Merges a journal record's offsets into the group's, in memory only (the journal has
    /// them), and notes the partitions it wrote.
    pub(crate) fn apply<'a>(
        &mut self,
        group: &str,
        offsets: &[(TopicPartition, u64)],
        written: impl IntoIterator<Item = &'a TopicPartition>,
    ) {
        self.journal
            .entry(group.to_owned())
            .or_default()
            .extend(offsets.iter().cloned());
        self.journal_partitions.extend(written.into_iter().cloned());
    }

    /// Whether the journal holds offsets of any group that its file does not have yet.
    pub(crate) fn any_pending(&self) -> bool {
        self.journal.values().any(|g| !g.is_empty())
    }

    /// Whether the journal holds offsets of `group` that its file does not have yet.
    pub(crate) fn is_pending(&self, group: &str) -> bool {
        self.journal.get(group).is_some_and(|g| !g.is_empty())
    }

    /// Writes every group with offsets only the journal holds to its file, durably; the
    /// journal may then be emptied.
    pub(crate) fn flush_pending(&mut self, storage: &Arc<dyn Storage>, root: &Path) -> Result<()> {
        let groups: Vec<String> = self.journal.keys().cloned().collect();
        for group in groups {
            let Some(pending) = self.journal.get(&group).filter(|g| !g.is_empty()) else {
                self.journal.remove(&group);
                continue;
            };
            let pending: Vec<(TopicPartition, u64)> =
                pending.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
            self.commit(storage, root, &group, &pending)?;
            self.journal.remove(&group);
        }
        Ok(())
    }

    /// The journal was emptied.
    pub(crate) fn journal_cleared(&mut self) {
        self.journal.clear();
        self.journal_partitions.clear();
        self.journal_len = 0;
    }
}

/// `RFGO`, version u16, count u32, then per entry: topic length u16, topic bytes, partition u32,
/// offset u64; then a CRC32C of everything before it. Big-endian.
pub(crate) fn encode(offsets: &GroupOffsets) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(offsets, &mut out);
    out
}

/// [`encode`] into `out`, replacing what it held (its allocation is reused).
fn encode_into(offsets: &GroupOffsets, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(14 + offsets.len() * 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
    for (tp, offset) in offsets {
        // Topic names are validated to at most 249 bytes.
        out.extend_from_slice(&(tp.topic.len() as u16).to_be_bytes());
        out.extend_from_slice(tp.topic.as_bytes());
        out.extend_from_slice(&tp.partition.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
    }
    let crc = crc32c::crc32c(out);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Reads big-endian fields off the front of a byte slice; `None` past its end.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<GroupOffsets> {
    let corrupt = |position: usize, reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        position: position as u64,
        reason,
    };
    let body_len = bytes.len().checked_sub(4).ok_or_else(|| {
        corrupt(
            0,
            format!("{} bytes, too short for an offsets file", bytes.len()),
        )
    })?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32c::crc32c(body).to_be_bytes() != crc {
        return Err(corrupt(body_len, "checksum mismatch".to_owned()));
    }
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    if r.take(4) != Some(MAGIC.as_slice()) {
        return Err(corrupt(0, "not a riffle group offsets file".to_owned()));
    }
    let version = r.array().map(u16::from_be_bytes);
    if version != Some(VERSION) {
        return Err(corrupt(4, format!("unsupported version {version:?}")));
    }
    let truncated = |pos| corrupt(pos, "truncated entry".to_owned());
    let count = r
        .array()
        .map(u32::from_be_bytes)
        .ok_or_else(|| truncated(6))?;
    let mut offsets = GroupOffsets::new();
    for _ in 0..count {
        let at = r.pos;
        let len = r
            .array()
            .map(u16::from_be_bytes)
            .ok_or_else(|| truncated(at))?;
        let topic = r.take(usize::from(len)).ok_or_else(|| truncated(at))?;
        let topic = std::str::from_utf8(topic)
            .map_err(|_| corrupt(at, "topic name is not UTF-8".to_owned()))?;
        let partition = r
            .array()
            .map(u32::from_be_bytes)
            .ok_or_else(|| truncated(at))?;
        let offset = r
            .array()
            .map(u64::from_be_bytes)
            .ok_or_else(|| truncated(at))?;
        // The writer writes each partition once, in order: anything else is damage, not a
        // choice between two offsets.
        if offsets
            .last_key_value()
            .is_some_and(|(last, _)| (&*last.topic, last.partition) >= (topic, partition))
        {
            return Err(corrupt(
                at,
                format!("entry for {topic}-{partition} out of order or repeated"),
            ));
        }
        offsets.insert(TopicPartition::new(topic, partition), offset);
    }
    if r.pos != body.len() {
        return Err(corrupt(r.pos, "trailing bytes".to_owned()));
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let mut offsets = GroupOffsets::new();
        offsets.insert(TopicPartition::new("a", 0), 5);
        offsets.insert(TopicPartition::new("b-c", 7), u64::MAX);
        let bytes = encode(&offsets);
        let path = Path::new("g.offsets");
        assert_eq!(decode(path, &bytes).ok(), Some(offsets));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                matches!(decode(path, &bad), Err(Error::Corrupt { .. })),
                "flip at {i}"
            );
            assert!(decode(path, &bytes[..i]).is_err(), "cut at {i}");
        }
    }
}
