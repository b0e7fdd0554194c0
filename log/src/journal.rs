//! The transaction journal, `txn/journal`: a redo log of committed transactions. Each record
//! holds a whole transaction — its sealed batches (exactly the bytes the partitions get) with
//! their topic, partition and base offset, and the group's offsets — behind one checksum, so a
//! record is either wholly there or a torn tail that never committed. The record's fsync is the
//! transaction's commit point; nothing reaches a partition before it.
//!
//! This module owns the format and the file; it never touches partitions or offsets (the
//! transaction code in `txn/` does).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::offsets::Reader;
use crate::storage::{Storage, StorageFile};
use riffle_record::TopicPartition;
use riffle_record::batch_crc;

const MAGIC: &[u8; 4] = b"RFTX";
const VERSION: u8 = 1;
/// Magic, body length, body CRC.
pub(crate) const RECORD_HEADER_LEN: usize = 12;

/// `<root>/txn/journal`.
pub(crate) fn journal_path(root: &Path) -> PathBuf {
    root.join("txn").join("journal")
}

/// One batch of a transaction as journaled.
#[derive(Debug)]
pub(crate) struct JournaledBatch {
    pub(crate) tp: TopicPartition,
    pub(crate) base: u64,
    pub(crate) count: u64,
    pub(crate) crc: u32,
    pub(crate) bytes: Vec<u8>,
}

/// One committed transaction read back from the journal.
#[derive(Debug)]
pub(crate) struct JournaledTxn {
    /// Byte position of its record in the journal.
    pub(crate) position: u64,
    pub(crate) group: String,
    pub(crate) batches: Vec<JournaledBatch>,
    pub(crate) offsets: Vec<(TopicPartition, u64)>,
}

/// The journal's intact records, and where and why it stops if a torn tail follows them.
#[derive(Debug)]
pub(crate) struct Replay {
    pub(crate) txns: Vec<JournaledTxn>,
    pub(crate) torn: Option<(u64, String)>,
}

fn put_tp(out: &mut Vec<u8>, tp: &TopicPartition) {
    // Topic names are validated to at most 249 bytes.
    out.extend_from_slice(&(tp.topic.len() as u16).to_be_bytes());
    out.extend_from_slice(tp.topic.as_bytes());
    out.extend_from_slice(&tp.partition.to_be_bytes());
}

/// Encodes one transaction's record into `out` (cleared first). `batches` are
/// `(partition, base offset, sealed bytes)`.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    group: &str,
    batches: &[(&TopicPartition, u64, &[u8])],
    offsets: &[(TopicPartition, u64)],
) -> Result<()> {
    out.clear();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0; 8]); // body length and CRC, filled in below
    out.push(VERSION);
    // Group names are validated to at most 249 bytes.
    out.extend_from_slice(&(group.len() as u16).to_be_bytes());
    out.extend_from_slice(group.as_bytes());
    out.extend_from_slice(&(batches.len() as u32).to_be_bytes());
    for (tp, base, bytes) in batches {
        put_tp(out, tp);
        out.extend_from_slice(&base.to_be_bytes());
        // A sealed batch is at most i32::MAX bytes.
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
    for (tp, offset) in offsets {
        put_tp(out, tp);
        out.extend_from_slice(&offset.to_be_bytes());
    }
    let body = out.get(RECORD_HEADER_LEN..).unwrap_or_default();
    let Ok(len) = u32::try_from(body.len()) else {
        // Only batches can make a record this large, so there is a first one.
        let tp = batches.first().map(|b| b.0.clone());
        return Err(Error::Record(riffle_record::Error::BatchTooLarge {
            topic_partition: tp.unwrap_or_else(|| TopicPartition::new("", 0)),
            size: body.len() as u64,
        }));
    };
    let crc = crc32c::crc32c(body);
    if let Some(dst) = out.get_mut(4..12) {
        dst[..4].copy_from_slice(&len.to_be_bytes());
        dst[4..].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(())
}

/// Where the unbroken run of intact records of a journal stops although the file goes on.
#[derive(Debug, Clone)]
pub(crate) struct JournalDamage {
    /// Byte position where the run stops.
    pub(crate) position: u64,
    /// Why the bytes there are not an intact record.
    pub(crate) reason: String,
    /// `(position, length)` of the intact records found after it (resynchronising past
    /// damaged bytes), header included.
    pub(crate) intact_after: Vec<(u64, u64)>,
}

impl JournalDamage {
    /// A torn tail: nothing intact follows, so it is the last record's write cut short.
    pub(crate) fn is_torn_tail(&self) -> bool {
        self.intact_after.is_empty()
    }
}

/// The length of the intact record at the front of `rest`, header included; `Err(reason)`
/// if there is none.
fn intact_record(rest: &[u8]) -> Result<usize, String> {
    let Some((header, after)) = rest.split_first_chunk::<RECORD_HEADER_LEN>() else {
        return Err(format!(
            "{} trailing bytes, too few for a record",
            rest.len()
        ));
    };
    if &header[..4] != MAGIC {
        return Err("not a transaction record (bad magic)".to_owned());
    }
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    let crc = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let Some(body) = after.get(..len) else {
        return Err(format!(
            "record of {len} bytes cut off after {}",
            after.len()
        ));
    };
    if crc32c::crc32c(body) != crc {
        return Err(format!(
            "checksum mismatch in the record of {len} bytes there"
        ));
    }
    Ok(RECORD_HEADER_LEN + len)
}

/// The intact records of `bytes` from byte `from` on, trying every position and continuing
/// right after each record found.
pub(crate) fn find_intact_records(bytes: &[u8], from: usize) -> Vec<(u64, u64)> {
    let mut found = Vec::new();
    let mut at = from;
    while at + RECORD_HEADER_LEN <= bytes.len() {
        let rest = bytes.get(at..).unwrap_or_default();
        match rest.starts_with(MAGIC).then(|| intact_record(rest)) {
            Some(Ok(len)) => {
                found.push((at as u64, len as u64));
                at += len;
            }
            _ => at += 1,
        }
    }
    found
}

/// The `(position, length)` of the unbroken run of intact records from the start of a journal
/// (checksums checked, bodies not parsed) and, if the file goes on after it, the damage that
/// stops it.
pub(crate) fn scan_records(bytes: &[u8]) -> (Vec<(u64, u64)>, Option<JournalDamage>) {
    let mut records = Vec::new();
    let mut pos = 0usize;
    let damage = loop {
        let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) else {
            break None;
        };
        match intact_record(rest) {
            Ok(len) => {
                records.push((pos as u64, len as u64));
                pos += len;
            }
            Err(reason) => {
                break Some(JournalDamage {
                    position: pos as u64,
                    reason,
                    intact_after: find_intact_records(bytes, pos + 1),
                });
            }
        }
    };
    (records, damage)
}

/// Reads every intact record of a journal for replay. Damage with nothing intact after it is a
/// torn tail (the last record's write did not finish), reported in [`Replay::torn`]; damage
/// followed by intact records is an [`Error::Corrupt`] naming `path` and the position — the
/// transactions of those records did commit, and dropping them would be silent loss.
pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<Replay> {
    decode_from(path, bytes, 0)
}

/// [`decode`] of the journal's bytes from byte `start` on (`bytes`): every position in the
/// result and in errors is a position in the file.
pub(crate) fn decode_from(path: &Path, bytes: &[u8], start: u64) -> Result<Replay> {
    let (records, damage) = scan_records(bytes);
    let mut txns = Vec::with_capacity(records.len());
    for (pos, len) in records {
        let body = bytes
            .get(pos as usize + RECORD_HEADER_LEN..(pos + len) as usize)
            .unwrap_or_default();
        txns.push(parse_body(path, start + pos, body)?);
    }
    let torn = match damage {
        None => None,
        Some(d) if d.is_torn_tail() => Some((start + d.position, d.reason)),
        Some(d) => {
            let (first, _) = d.intact_after.first().copied().unwrap_or_default();
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                position: start + d.position,
                reason: format!(
                    "damaged transaction record ({}), followed by {} intact records from byte \
                     {}: committed transactions would be lost if it were dropped as a torn \
                     tail; `riffle log repair` cuts the damaged bytes explicitly",
                    d.reason,
                    d.intact_after.len(),
                    start + first
                ),
            });
        }
    };
    Ok(Replay { txns, torn })
}

pub(crate) fn parse_body(path: &Path, position: u64, body: &[u8]) -> Result<JournaledTxn> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        position,
        reason: format!("transaction record: {reason}"),
    };
    let truncated = || corrupt("truncated".to_owned());
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    let version = r.array::<1>().map(|[v]| v);
    if version != Some(VERSION) {
        return Err(corrupt(format!("unsupported version {version:?}")));
    }
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| corrupt("a name is not UTF-8".to_owned()))
    };
    let tp = |r: &mut Reader<'_>| -> Result<TopicPartition> {
        let len = r.array().map(u16::from_be_bytes).ok_or_else(truncated)?;
        let topic = text(r.take(usize::from(len)).ok_or_else(truncated)?)?;
        let partition = r.array().map(u32::from_be_bytes).ok_or_else(truncated)?;
        Ok(TopicPartition::new(topic, partition))
    };
    let group_len = r.array().map(u16::from_be_bytes).ok_or_else(truncated)?;
    let group = text(r.take(usize::from(group_len)).ok_or_else(truncated)?)?;
    // Replay writes `groups/<group>.offsets`: a name no commit could have had is damage.
    crate::names::validate_name(&group, false)
        .map_err(|_| corrupt(format!("invalid group name {group:?}")))?;
    let batch_count = r.array().map(u32::from_be_bytes).ok_or_else(truncated)?;
    let mut batches = Vec::new();
    for _ in 0..batch_count {
        let tp = tp(&mut r)?;
        let base = r.array().map(u64::from_be_bytes).ok_or_else(truncated)?;
        let len = r.array().map(u32::from_be_bytes).ok_or_else(truncated)?;
        let bytes = r.take(len as usize).ok_or_else(truncated)?;
        let h = crate::segment::parse_appended(bytes)
            .map_err(|e| corrupt(format!("batch for {tp} at offset {base}: {e}")))?;
        if h.base_offset != base || h.total_len() != u64::from(len) || batch_crc(bytes) != h.crc {
            return Err(corrupt(format!(
                "batch for {tp} at offset {base} does not match its header"
            )));
        }
        batches.push(JournaledBatch {
            tp,
            base,
            count: h.next_offset() - h.base_offset,
            crc: h.crc,
            bytes: bytes.to_vec(),
        });
    }
    let offset_count = r.array().map(u32::from_be_bytes).ok_or_else(truncated)?;
    let mut offsets = Vec::new();
    for _ in 0..offset_count {
        let tp = tp(&mut r)?;
        let offset = r.array().map(u64::from_be_bytes).ok_or_else(truncated)?;
        offsets.push((tp, offset));
    }
    if r.pos != body.len() {
        return Err(corrupt("trailing bytes".to_owned()));
    }
    Ok(JournaledTxn {
        position,
        group,
        batches,
        offsets,
    })
}

/// The journal file, opened on first use, and the buffer records are encoded in (reused).
#[derive(Debug)]
pub(crate) struct Journal {
    pub(crate) path: PathBuf,
    file: Option<Box<dyn StorageFile>>,
    pub(crate) buf: Vec<u8>,
    /// A failed write or fsync left the journal in an unknown state: refuse transactions
    /// until the log is reopened (recovery then decides what committed).
    poisoned: bool,
    /// Records were appended without an fsync (under `FsyncPolicy::Never`): they must be made
    /// durable before any partition is, or a crash could keep a batch without its transaction.
    unsynced: bool,
}

impl Journal {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            path: journal_path(root),
            file: None,
            buf: Vec::new(),
            poisoned: false,
            unsynced: false,
        }
    }

    /// The open file; opens (creating) it first if needed.
    fn file<'a>(
        file: &'a mut Option<Box<dyn StorageFile>>,
        path: &Path,
        poisoned: bool,
        storage: &Arc<dyn Storage>,
    ) -> Result<&'a mut Box<dyn StorageFile>> {
        if poisoned {
            return Err(Error::Poisoned {
                what: format!("the transaction journal {}", path.display()),
            });
        }
        if file.is_none() {
            let dir = path.parent().unwrap_or(Path::new("."));
            storage.create_dir_all(dir).at(dir)?;
            let opened = storage.open(path).at(path)?;
            // The entry must survive a crash before any record in it counts.
            storage.sync_dir(dir).at(dir)?;
            *file = Some(opened);
        }
        file.as_mut().ok_or_else(|| Error::Poisoned {
            what: "the transaction journal".to_owned(),
        })
    }

    /// Whether a failed write left the journal's content unknown (until reopened).
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Bytes in the journal (0 if it was never opened: recovery leaves it empty).
    pub(crate) fn len(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.len())
    }

    /// Appends the record in `buf`, and fsyncs it if `sync`: the commit point. A failed append
    /// is cut back off; if that fails too, or the fsync fails (the record may or may not be
    /// durable), the journal is poisoned.
    pub(crate) fn commit(&mut self, storage: &Arc<dyn Storage>, sync: bool) -> Result<()> {
        let file = Self::file(&mut self.file, &self.path, self.poisoned, storage)?;
        let old = file.len();
        let written = file.append(&self.buf);
        let result = match written {
            Err(e) => {
                let restored = file.truncate(old).is_ok();
                self.poisoned = !restored;
                Err(e)
            }
            Ok(()) if sync => file.sync().inspect_err(|_| self.poisoned = true),
            Ok(()) => {
                self.unsynced = true;
                Ok(())
            }
        };
        result.at(&self.path)
    }

    /// Fsyncs records appended without one; to be called before any partition is fsynced.
    pub(crate) fn sync(&mut self, storage: &Arc<dyn Storage>) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        self.sync_file(storage)
    }

    /// Fsyncs the file whoever appended to it (other processes' records included); the caller
    /// holds the transaction lock exclusively.
    pub(crate) fn sync_file(&mut self, storage: &Arc<dyn Storage>) -> Result<()> {
        let file = Self::file(&mut self.file, &self.path, self.poisoned, storage)?;
        let synced = file.sync();
        self.poisoned |= synced.is_err();
        synced.at(&self.path)?;
        self.unsynced = false;
        Ok(())
    }

    /// Re-reads the file's length: another process sharing the log may have appended records
    /// or emptied it. The caller holds the transaction lock.
    pub(crate) fn refresh(&mut self, storage: &Arc<dyn Storage>) -> Result<u64> {
        let file = Self::file(&mut self.file, &self.path, self.poisoned, storage)?;
        file.refresh_len().at(&self.path)
    }

    /// Empties the journal durably (its transactions are all in their partitions and groups).
    pub(crate) fn clear(&mut self, storage: &Arc<dyn Storage>) -> Result<()> {
        let file = Self::file(&mut self.file, &self.path, self.poisoned, storage)?;
        if file.len() == 0 {
            return Ok(());
        }
        file.truncate(0).and_then(|()| file.sync()).at(&self.path)?;
        self.unsynced = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchBuilder, Compression};

    #[test]
    fn records_round_trip_and_a_torn_tail_is_reported_not_parsed() {
        let tp = TopicPartition::new("t", 3);
        let mut b = BatchBuilder::new(Compression::Lz4);
        b.push(1, Some(b"k"), Some(b"v"));
        let sealed = b
            .seal(&tp, riffle_record::Placement::at(7))
            .expect("seal")
            .to_vec();
        let mut one = Vec::new();
        encode(&mut one, "g", &[(&tp, 7, &sealed)], &[(tp.clone(), 9)]).expect("encode");
        let mut journal = one.clone();
        journal.extend_from_slice(&one);
        let path = Path::new("journal");
        let replay = decode(path, &journal).expect("decode");
        assert_eq!(replay.txns.len(), 2);
        assert!(replay.torn.is_none());
        let txn = &replay.txns[1];
        assert_eq!(txn.position, one.len() as u64);
        assert_eq!(
            (txn.group.as_str(), txn.offsets.clone()),
            ("g", vec![(tp.clone(), 9)])
        );
        assert_eq!((txn.batches[0].base, txn.batches[0].count), (7, 1));
        assert_eq!(txn.batches[0].bytes, sealed);
        for cut in one.len()..journal.len() {
            let replay = decode(path, &journal[..cut]).expect("decode");
            assert_eq!(replay.txns.len(), 1, "cut at {cut}");
            assert_eq!(
                replay.torn.map(|t| t.0),
                (cut > one.len()).then_some(one.len() as u64)
            );
        }
        for flip in one.len()..journal.len() {
            let mut bad = journal.clone();
            bad[flip] ^= 0x10;
            let replay = decode(path, &bad).expect("decode");
            assert_eq!(replay.txns.len(), 1, "flip at {flip}");
            assert!(replay.torn.is_some());
        }
    }
}
