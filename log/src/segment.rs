//! One segment: a `.log` file of Kafka v2 batches starting at a base offset, and its sparse
//! `.index` in Kafka's format (a batch's relative *last* offset → its byte position, one entry
//! per `index_interval_bytes` of batches), ended by a *seal* once the segment was rolled: where
//! it ends, so a later segment is known to exist.
//!
//! A segment owns the classification of its own bytes; the partition (`partition/recovery.rs`)
//! acts on it, under its lock:
//! - [`Segment::scan`] / [`Segment::scan_from`] read batches and report the unbroken run of
//!   intact batches and, if the file goes on after it, the [`Damage`]: where, why, and which
//!   intact batches still follow it. They change nothing.
//! - damage with nothing intact after it in the active segment is a *torn tail* (a write a
//!   crash cut short, or one another process is still making): [`Segment::cut_tail`] cuts it,
//!   with a `warn!` naming the file, the byte position and the offset, for a writer holding the
//!   lock; damage followed by intact data ([`Scan::corruption`]) is an [`Error::Corrupt`] and
//!   is never cut;
//! - [`Segment::check_sealed`] checks a sealed segment cheaply (from its last index entry on)
//!   against its seal and the next segment's base offset; any damage is an [`Error::Corrupt`].
//!
//! It never trusts an index entry that points past the data, and never cuts a byte of a sealed
//! segment or of damage followed by intact data: only `riffle log repair` (`repair.rs`) cuts
//! those, and only when asked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use riffle_record::{BatchHeader, HEADER_LEN, MAGIC, MAGIC_AT, batch_crc};

use crate::error::{Error, IoContext, Result};
use crate::storage::{Storage, StorageFile};

/// Size of one index entry: `u32` relative offset, `u32` position, both big-endian.
pub(crate) const INDEX_ENTRY_LEN: usize = 8;
/// The entry that announces a seal: no batch entry can be `(0, 0)` after the first entry
/// (entries strictly increase), and Kafka's `DumpLogSegments` stops reading an index at an
/// entry naming the base offset, as it does at the zeroed tail of a preallocated index.
const SEAL_MARKER: (u32, u32) = (0, 0);

/// What the first batch read from a position must be, so that a walk notices it is not where
/// it thinks it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// A batch starting at this offset (a segment's start, or the batch after another).
    Base(u64),
    /// A batch whose last offset is this one: what an index entry names, as in Kafka.
    Last(u64),
}

impl Expect {
    pub(crate) fn matches(self, h: &BatchHeader) -> bool {
        match self {
            Expect::Base(base) => h.base_offset == base,
            Expect::Last(last) => h.last_offset() == last,
        }
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Base(base) => write!(f, "offset {base}"),
            Expect::Last(last) => write!(f, "a batch ending at offset {last}"),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base: u64,
    pub(crate) path: PathBuf,
    index_path: PathBuf,
    file: Box<dyn StorageFile>,
    index_file: Box<dyn StorageFile>,
    /// `(relative offset, position)` of indexed batches, both strictly increasing.
    index: Vec<(u32, u32)>,
    bytes_since_index: u64,
    /// Appended (or truncated) since the last sync.
    pub(crate) dirty: bool,
    /// The largest batch `maxTimestamp` of a sealed segment (sealed segments never change),
    /// once [`max_timestamp`](Segment::max_timestamp) read it: retention by time.
    max_timestamp: Option<i64>,
}

/// The error for a segment file that is gone (`NotFound`, which the partition takes as "another
/// process's retention removed it").
pub(crate) fn gone(path: &Path) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    }
}

/// File name of the segment at `base`: the base offset, zero-padded to 20 digits, as Kafka does.
pub(crate) fn segment_file_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// The base offset encoded in a segment file name, if `name` is one.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where a sealed segment ended when it was rolled, as its index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seal {
    /// The offset after its last record (the next segment's base offset).
    pub(crate) end_offset: u64,
    /// Its size in bytes.
    pub(crate) size: u64,
}

/// An index file as read: its batch entries, its seal, and whether it is consistent with a
/// data file of `size` bytes (entries increasing, every position inside the data).
#[derive(Debug)]
pub(crate) struct IndexFile {
    pub(crate) entries: Vec<(u32, u32)>,
    pub(crate) seal: Option<Seal>,
    pub(crate) consistent: bool,
}

/// Parses an index file of the segment at `base` whose data file has `size` bytes.
pub(crate) fn parse_index(raw: &[u8], base: u64, size: u64) -> IndexFile {
    let mut pairs: Vec<(u32, u32)> = raw
        .chunks_exact(INDEX_ENTRY_LEN)
        .map(|e| {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            (rel, pos)
        })
        .collect();
    let mut consistent = raw.len().is_multiple_of(INDEX_ENTRY_LEN);
    let mut seal = None;
    if let [.., marker, (rel, pos)] = pairs[..]
        && marker == SEAL_MARKER
        && (rel, pos) != SEAL_MARKER
    {
        seal = Some(Seal {
            end_offset: base + u64::from(rel),
            size: u64::from(pos),
        });
        pairs.truncate(pairs.len() - 2);
    }
    let mut entries = Vec::with_capacity(pairs.len());
    for (rel, pos) in pairs {
        let increasing = entries.last().is_none_or(|&(r, p)| rel > r && pos > p);
        if !increasing || u64::from(pos) >= size {
            consistent = false;
            break;
        }
        entries.push((rel, pos));
    }
    IndexFile {
        entries,
        seal,
        consistent,
    }
}

/// What reading a segment's batches found: the unbroken run of intact batches from where the
/// read started, and the damage that ends it before the end of the file, if any.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Byte position after the last whole, valid batch of the run.
    pub(crate) end_pos: u64,
    /// The offset after that batch (where the read started if the run is empty).
    pub(crate) end_offset: u64,
    /// Records in the run.
    pub(crate) records: u64,
    /// Why the bytes after `end_pos` are not a batch; `None` if the file ends there.
    pub(crate) problem: Option<String>,
    /// With a problem: where, and which intact batches follow it (then it is corruption, not
    /// a torn tail or a batch still being written).
    pub(crate) damage: Option<Damage>,
}

impl Scan {
    /// Damage followed by intact data: an error whoever reads it, with or without the lock.
    pub(crate) fn corruption(&self) -> Option<&Damage> {
        self.damage.as_ref().filter(|d| !d.is_torn_tail())
    }
}

/// Where the intact run of a segment stops although the file goes on.
#[derive(Debug, Clone)]
pub(crate) struct Damage {
    /// The segment file.
    pub(crate) path: PathBuf,
    /// Byte position where the run stops.
    pub(crate) position: u64,
    /// The offset that was expected there.
    pub(crate) offset: u64,
    /// Why the bytes at `position` are not the expected batch.
    pub(crate) reason: String,
    /// The intact batches found after `position` (resynchronising past damaged bytes).
    pub(crate) intact_after: Vec<IntactBatch>,
}

/// A batch whose header and checksum are valid, found after damage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntactBatch {
    pub(crate) position: u64,
    pub(crate) base_offset: u64,
    pub(crate) next_offset: u64,
    pub(crate) records: u64,
}

impl Damage {
    /// A torn tail: nothing intact follows the damage, so it is what a write cut short by a
    /// crash leaves, and truncating it loses nothing that was ever complete.
    pub(crate) fn is_torn_tail(&self) -> bool {
        self.intact_after.is_empty()
    }

    /// The highest offset after the intact batches past the damage (`offset` if none).
    pub(crate) fn known_end(&self) -> u64 {
        self.intact_after
            .iter()
            .map(|b| b.next_offset)
            .fold(self.offset, u64::max)
    }

    /// Records in the intact batches past the damage.
    pub(crate) fn records_after(&self) -> u64 {
        self.intact_after.iter().map(|b| b.records).sum()
    }

    /// The error for damage that is not a torn tail (or that is in a sealed segment).
    pub(crate) fn to_error(&self) -> Error {
        let follows = match (self.intact_after.first(), self.intact_after.last()) {
            (Some(first), Some(last)) => format!(
                "; intact data follows it: {} batches from byte {} (offsets {}..{}, {} records),                  so this is not a torn write: offsets {}..{} are damaged and {}..{} cannot be                  read past them",
                self.intact_after.len(),
                first.position,
                first.base_offset,
                last.next_offset,
                self.records_after(),
                self.offset,
                first.base_offset.max(self.offset),
                first.base_offset.max(self.offset),
                self.known_end(),
            ),
            _ => format!("; offsets from {} on cannot be read", self.offset),
        };
        Error::Corrupt {
            path: self.path.clone(),
            position: self.position,
            reason: format!(
                "{} (offset {} expected there){follows}; `riffle log repair` cuts the damaged                  data explicitly",
                self.reason, self.offset
            ),
        }
    }
}

/// Parses the header of a batch stored in a segment: a Kafka v2 header, with what the embedded
/// log always writes outside the CRC's coverage checked too: leader epoch 0 (the base offset is
/// checked against the offsets around it). A batch taken over from Kafka gets epoch 0 and its
/// base offset when it is written, without re-encoding. Appended batches hold at least one
/// record at dense offsets; the cleaner's batches (compaction, `compact.rs`) may hold fewer
/// records than offsets, or none, as Kafka's compacted batches do: batches still follow each
/// other without gaps, each covering `base_offset..=last_offset()`.
pub(crate) fn parse_stored(b: &[u8]) -> Result<BatchHeader, String> {
    let h = BatchHeader::parse(b)?;
    if h.leader_epoch != 0 {
        return Err(format!(
            "leader epoch {} (the embedded log writes 0)",
            h.leader_epoch
        ));
    }
    Ok(h)
}

/// [`parse_stored`] for a batch as appended (the transaction journal's): at least one record,
/// at dense offsets.
pub(crate) fn parse_appended(b: &[u8]) -> Result<BatchHeader, String> {
    let h = parse_stored(b)?;
    if h.record_count == 0 {
        return Err("batch with zero records".to_owned());
    }
    if u64::from(h.record_count) != u64::from(h.last_offset_delta) + 1 {
        return Err(format!(
            "{} records over a last offset delta of {} (appended batches are dense)",
            h.record_count, h.last_offset_delta
        ));
    }
    Ok(h)
}

/// Whether a whole, checksum-valid batch starts at `at` of `bytes`; its header if so.
fn intact_batch_at(bytes: &[u8], at: usize) -> Option<BatchHeader> {
    let rest = bytes.get(at..)?;
    if rest.get(MAGIC_AT) != Some(&MAGIC) {
        return None;
    }
    let h = parse_stored(rest).ok()?;
    let batch = rest.get(..usize::try_from(h.total_len()).ok()?)?;
    (batch_crc(batch) == h.crc).then_some(h)
}

/// The intact batches in `tail` (the file's bytes from byte `start` on), found by trying every
/// position from `first` on and, after each batch found, continuing right after it.
pub(crate) fn find_intact(tail: &[u8], start: u64, first: usize) -> Vec<IntactBatch> {
    let mut found = Vec::new();
    let mut at = first;
    while at + HEADER_LEN <= tail.len() {
        match intact_batch_at(tail, at) {
            Some(h) => {
                found.push(IntactBatch {
                    position: start + at as u64,
                    base_offset: h.base_offset,
                    next_offset: h.next_offset(),
                    records: u64::from(h.record_count),
                });
                at += h.total_len() as usize;
            }
            None => at += 1,
        }
    }
    found
}

/// Reads the batches of a segment file from byte `pos`, where the batch at offset `expected`
/// starts (0 and the base offset: the whole file), checksums included, calling `on_batch` with
/// the position and header of each batch of the intact run; the run and the damage after it.
/// Reads only.
pub(crate) fn scan_file_from(
    file: &mut dyn StorageFile,
    path: &Path,
    mut pos: u64,
    mut expected: u64,
    mut on_batch: impl FnMut(u64, &BatchHeader),
) -> Result<Scan> {
    let len = file.len();
    let mut records = 0u64;
    let mut header = [0u8; HEADER_LEN];
    let mut batch = Vec::new();
    let problem = loop {
        let left = len.saturating_sub(pos);
        if left == 0 {
            break None;
        }
        if left < HEADER_LEN as u64 {
            let reason = format!("{left} trailing bytes, too few for a batch header");
            break Some(reason);
        }
        file.read_exact_at(pos, &mut header).at(path)?;
        let h = match parse_stored(&header) {
            Ok(h) => h,
            Err(reason) => break Some(reason),
        };
        if h.total_len() > left {
            let reason = format!("batch of {} bytes cut off after {left}", h.total_len());
            break Some(reason);
        }
        batch.resize(h.total_len() as usize, 0);
        file.read_exact_at(pos, &mut batch).at(path)?;
        if batch_crc(&batch) != h.crc {
            let reason = format!(
                "checksum mismatch in the batch of {} bytes there",
                h.total_len()
            );
            break Some(reason);
        }
        if h.base_offset != expected {
            let reason = format!(
                "the intact batch there holds offsets {}..{}",
                h.base_offset,
                h.next_offset()
            );
            break Some(reason);
        }
        on_batch(pos, &h);
        pos += h.total_len();
        expected = h.next_offset();
        records += u64::from(h.record_count);
    };
    let damage = match &problem {
        None => None,
        Some(reason) => {
            let mut tail = vec![0u8; (len - pos) as usize];
            file.read_exact_at(pos, &mut tail).at(path)?;
            // An intact batch at the damaged position itself (one at the wrong offset) counts.
            let intact_after = find_intact(&tail, pos, 0);
            Some(Damage {
                path: path.to_path_buf(),
                position: pos,
                offset: expected,
                reason: reason.clone(),
                intact_after,
            })
        }
    };
    Ok(Scan {
        end_pos: pos,
        end_offset: expected,
        records,
        problem,
        damage,
    })
}

impl Segment {
    /// Opens the existing segment at `base` in `dir` (an `Error::Io` of kind `NotFound` if it
    /// is gone: retention may have deleted it since the directory was listed); the index is not
    /// loaded yet. Writable, a missing index is created (derived data); read-only (a read-only
    /// log), nothing is created or changed and a missing index is an empty one.
    pub(crate) fn open(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        base: u64,
        read_only: bool,
    ) -> Result<Self> {
        let path = dir.join(segment_file_name(base));
        let index_path = path.with_extension("index");
        let file = storage
            .open_existing(&path, !read_only)
            .at(&path)?
            .ok_or_else(|| gone(&path))?;
        let index_file = if read_only {
            match storage.open_existing(&index_path, false).at(&index_path)? {
                Some(f) => f,
                None => crate::storage::empty_file(),
            }
        } else {
            storage.open(&index_path).at(&index_path)?
        };
        Ok(Self::with_files(base, path, index_path, file, index_file))
    }

    /// Creates (or empties) the segment files at `base`.
    fn open_new(storage: &Arc<dyn Storage>, dir: &Path, base: u64) -> Result<Self> {
        let path = dir.join(segment_file_name(base));
        let index_path = path.with_extension("index");
        let file = storage.open(&path).at(&path)?;
        let index_file = storage.open(&index_path).at(&index_path)?;
        Ok(Self::with_files(base, path, index_path, file, index_file))
    }

    /// Removes the segment's files (its handles may still read them). Durable at the next
    /// sync of its directory.
    pub(crate) fn remove(&self, storage: &Arc<dyn Storage>) -> Result<()> {
        storage.remove_file(&self.path).at(&self.path)?;
        storage.remove_file(&self.index_path).at(&self.index_path)
    }

    /// Whether the file under this segment's name is still the one this handle reads (a
    /// compaction renames a cleaned file over it; retention removes it).
    pub(crate) fn is_current(&self, storage: &Arc<dyn Storage>) -> Result<bool> {
        let Some(now) = storage.open_existing(&self.path, false).at(&self.path)? else {
            return Ok(false);
        };
        let (was, is) = (self.file.identity(), now.identity());
        Ok(was == 0 || is == 0 || was == is)
    }

    /// After compaction swapped this segment in: its index is `entries` (built as the data
    /// was written) and its seal says it ends at `end_offset`; the index file is rewritten so,
    /// and fsynced. `max_timestamp` is remembered for retention.
    pub(crate) fn install_index(
        &mut self,
        entries: Vec<(u32, u32)>,
        end_offset: u64,
        max_timestamp: i64,
    ) -> Result<()> {
        self.index = entries;
        self.bytes_since_index = 0;
        self.max_timestamp = Some(max_timestamp);
        self.index_file.truncate(0).at(&self.index_path)?;
        let raw = self.index_bytes();
        self.index_file.append(&raw).at(&self.index_path)?;
        self.seal(end_offset)
    }

    /// The largest record timestamp of this sealed segment (`i64::MIN` if it holds no batch),
    /// read from its batch headers the first time and remembered (a sealed segment never
    /// changes).
    pub(crate) fn max_timestamp(&mut self) -> Result<i64> {
        if let Some(ts) = self.max_timestamp {
            return Ok(ts);
        }
        let (mut pos, mut max) = (0, i64::MIN);
        let size = self.size();
        while pos < size {
            let h = self.read_header(pos)?;
            max = max.max(h.max_timestamp);
            pos += h.total_len();
        }
        self.max_timestamp = Some(max);
        Ok(max)
    }

    /// A segment over opened files, its index not loaded yet.
    fn with_files(
        base: u64,
        path: PathBuf,
        index_path: PathBuf,
        file: Box<dyn StorageFile>,
        index_file: Box<dyn StorageFile>,
    ) -> Self {
        Self {
            base,
            path,
            index_path,
            file,
            index_file,
            index: Vec::new(),
            bytes_since_index: 0,
            dirty: false,
            max_timestamp: None,
        }
    }

    /// A new, empty segment at `base` (any stale files of that name are emptied).
    pub(crate) fn create(storage: &Arc<dyn Storage>, dir: &Path, base: u64) -> Result<Self> {
        let mut segment = Self::open_new(storage, dir, base)?;
        segment.file.truncate(0).at(&segment.path)?;
        segment.index_file.truncate(0).at(&segment.index_path)?;
        segment.dirty = true;
        Ok(segment)
    }

    pub(crate) fn size(&self) -> u64 {
        self.file.len()
    }

    fn read_index_file(&mut self) -> Result<IndexFile> {
        let mut raw = vec![0u8; self.index_file.len() as usize];
        self.index_file
            .read_exact_at(0, &mut raw)
            .at(&self.index_path)?;
        Ok(parse_index(&raw, self.base, self.size()))
    }

    fn corrupt(&self, position: u64, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            position,
            reason,
        }
    }

    /// Validates every batch from the start, rebuilding the in-memory index of the intact run;
    /// modifies nothing (a read-only open, or a writer that does not hold the partition's lock,
    /// calls this). What the damage is, if any, is the caller's call: see [`Scan`].
    pub(crate) fn scan(&mut self, index_interval: u64) -> Result<Scan> {
        self.index.clear();
        self.bytes_since_index = 0;
        self.scan_from(0, self.base, index_interval)
    }

    /// [`scan`](Self::scan) continued from `pos`, where the batch at offset `expected` starts
    /// (the end of an earlier scan): how a partition catches up with batches another process
    /// appended. Stops at the first batch that is not whole and valid.
    pub(crate) fn scan_from(
        &mut self,
        pos: u64,
        expected: u64,
        index_interval: u64,
    ) -> Result<Scan> {
        let mut noted = Vec::new();
        let scan = scan_file_from(&mut *self.file, &self.path, pos, expected, |pos, h| {
            noted.push((pos, h.last_offset(), h.total_len()));
        })?;
        for (pos, last_offset, len) in noted {
            self.note_batch(pos, last_offset, len, index_interval);
        }
        Ok(scan)
    }

    /// The seal in the index file, if the segment was rolled. In the active segment it means
    /// the segment after it is missing (or is being created by another process right now).
    pub(crate) fn read_seal(&mut self) -> Result<Option<Seal>> {
        self.index_file.refresh_len().at(&self.index_path)?;
        Ok(self.read_index_file()?.seal)
    }

    /// The error for an active segment whose index holds a seal at `seal` while no segment
    /// starts there.
    pub(crate) fn missing_successor(&self, seal: Seal) -> Error {
        self.corrupt(
            seal.size.min(self.size()),
            format!(
                "this segment was rolled at offset {} (its index holds the seal), but no \
                 segment starts there: offsets from {} on are missing (a deleted last \
                 segment?); `riffle log repair` makes this segment the last one explicitly",
                seal.end_offset, seal.end_offset
            ),
        )
    }

    /// Cuts a torn tail — what follows the scan's end when nothing intact follows it — with a
    /// `warn!` naming the file, byte position and offset, and makes the index file match the
    /// in-memory index. Only a writer holding the partition's lock calls this: no other
    /// process can be writing that tail. Damage followed by intact data is never cut: it is
    /// [`Error::Corrupt`] (only `riffle log repair` cuts it, when asked).
    pub(crate) fn cut_tail(&mut self, scan: &Scan) -> Result<()> {
        if let Some(damage) = scan.corruption() {
            return Err(damage.to_error());
        }
        let (pos, offset) = (scan.end_pos, scan.end_offset);
        let reason = scan.problem.as_deref().unwrap_or("trailing bytes");
        let bytes = self.size().saturating_sub(pos);
        tracing::warn!(
            file = %self.path.display(),
            position = pos,
            offset,
            %reason,
            "truncating the torn tail of log segment {} at byte {pos} (offset {offset}; {bytes} \
             bytes, no intact batch among them): {reason}",
            self.path.display(),
        );
        self.file.truncate(pos).at(&self.path)?;
        self.file.sync().at(&self.path)?;
        self.write_index()
    }

    /// Checks a sealed segment against its seal and against `next_base`, the base offset of
    /// the segment after it, reading only the batch headers after its last index entry;
    /// returns the offset after its last batch. That may lie past `next_base` for a segment
    /// compaction merged with the ones after it (the caller checks the claim against the
    /// partition's `cleaning` file). Any other mismatch is an [`Error::Corrupt`]: a
    /// sealed segment never has a torn tail (it was fsynced when rolled), so a short one lost
    /// data, and a gap before `next_base` means a segment is missing.
    pub(crate) fn check_sealed(&mut self, next_base: u64, index_interval: u64) -> Result<u64> {
        let index = self.read_index_file()?;
        let size = self.size();
        let walked = match index.consistent {
            true => self.walk_from(&index.entries)?,
            false => None,
        };
        let fits = |end: u64| {
            end == next_base
                && index
                    .seal
                    .is_none_or(|s| s.size == size && s.end_offset == end)
        };
        if let Some(end) = walked.filter(|&end| fits(end)) {
            self.index = index.entries;
            self.bytes_since_index = 0;
            return Ok(end);
        }
        // The cheap check failed: read the whole segment, to tell a stale index (rebuilt) from
        // damaged or missing data (an error).
        if !index.consistent {
            tracing::warn!(file = %self.index_path.display(), "rebuilding an inconsistent offset index (in memory)");
        }
        let scan = self.scan(index_interval)?;
        if let Some(mut damage) = scan.damage {
            // Not a torn tail, whatever follows: a sealed segment was complete when rolled.
            if damage.intact_after.is_empty() {
                damage.reason.push_str(&format!(
                    " in a sealed segment, which the next segment continues at offset {next_base}"
                ));
            }
            return Err(damage.to_error());
        }
        let end = scan.end_offset;
        // A segment the cleaner rewrote (compaction) is smaller than its seal says, and one it
        // merged with the segments after it ends later, until its index is written again: an
        // intact segment reaching at least as far as its seal lost nothing.
        if let Some(seal) = index.seal
            && end < seal.end_offset
        {
            return Err(self.corrupt(
                size.min(seal.size),
                format!(
                    "the segment was sealed with {} bytes ending at offset {}, but has {size} \
                     bytes ending at offset {end}: offsets {}..{} are lost",
                    seal.size,
                    seal.end_offset,
                    end.min(seal.end_offset),
                    seal.end_offset.max(end)
                ),
            ));
        }
        if end < next_base {
            let next = segment_file_name(next_base);
            let reason = format!(
                "the segment ends at offset {end}, but the next segment, {next}, starts at \
                 offset {next_base}: offsets {end}..{next_base} are in no segment (a missing \
                 segment file?)"
            );
            return Err(self.corrupt(size, reason));
        }
        // Rebuilt in memory only: a read-only open writes nothing (a clean open neither).
        if index.consistent {
            tracing::warn!(file = %self.index_path.display(), "rebuilding an offset index that does not match its segment (in memory)");
        }
        Ok(end)
    }

    /// Walks the batch headers from the last of `entries` to the end of the file; the offset
    /// after the last batch, or `None` if a header is not the expected one.
    fn walk_from(&mut self, entries: &[(u32, u32)]) -> Result<Option<u64>> {
        let size = self.size();
        let (mut pos, mut expected) = self.entry_start(entries.last().copied());
        while pos < size {
            let h = match self.read_header(pos) {
                Ok(h) => h,
                Err(Error::Corrupt { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            if !expected.matches(&h) {
                return Ok(None);
            }
            pos += h.total_len();
            expected = Expect::Base(h.next_offset());
        }
        Ok(Some(match expected {
            Expect::Base(end) => end,
            Expect::Last(last) => last + 1,
        }))
    }

    /// Where a walk from index entry `entry` starts, and what it must find there (no entry:
    /// the segment's start).
    fn entry_start(&self, entry: Option<(u32, u32)>) -> (u64, Expect) {
        entry.map_or((0, Expect::Base(self.base)), |(r, p)| {
            (u64::from(p), Expect::Last(self.base + u64::from(r)))
        })
    }

    /// The in-memory index as the index file would hold it.
    fn index_bytes(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(self.index.len() * INDEX_ENTRY_LEN);
        for &(rel, p) in &self.index {
            raw.extend_from_slice(&rel.to_be_bytes());
            raw.extend_from_slice(&p.to_be_bytes());
        }
        raw
    }

    /// Whether the index file holds exactly the in-memory index.
    pub(crate) fn index_file_matches(&mut self) -> Result<bool> {
        let raw = self.index_bytes();
        self.index_file.refresh_len().at(&self.index_path)?;
        let mut old = vec![0u8; self.index_file.len() as usize];
        self.index_file
            .read_exact_at(0, &mut old)
            .at(&self.index_path)?;
        Ok(old == raw)
    }

    /// Rewrites the index file from the in-memory index if they differ: a clean open writes
    /// (and fsyncs) nothing.
    pub(crate) fn write_index(&mut self) -> Result<()> {
        let raw = self.index_bytes();
        if !self.index_file_matches()? {
            self.index_file.truncate(0).at(&self.index_path)?;
            self.index_file.append(&raw).at(&self.index_path)?;
            self.index_file.sync().at(&self.index_path)?;
        }
        Ok(())
    }

    /// Re-reads the data file's length (another process may have appended).
    pub(crate) fn refresh_size(&mut self) -> Result<u64> {
        self.file.refresh_len().at(&self.path)
    }

    /// Records in the index that the segment ends at `end_offset`, with its current size, and
    /// fsyncs the index: from now on a missing or short successor is detected. Called after
    /// the next segment's directory entry is durable (a crash in between must not leave a
    /// seal without its successor).
    pub(crate) fn seal(&mut self, end_offset: u64) -> Result<()> {
        let seal = Seal {
            end_offset,
            size: self.size(),
        };
        // An index with no entry gets one for its first batch first: Kafka's dump tool stops
        // at the seal's marker only after the first entry (it takes a first `(0, 0)` for an
        // entry, and then the seal's entry for one too, which points at the end of the file).
        if self.index_file.refresh_len().at(&self.index_path)? == 0
            && self.size() >= HEADER_LEN as u64
        {
            let first = self.read_header(0)?;
            if let Ok(rel) = u32::try_from(first.last_offset() - self.base) {
                let mut entry = [0u8; INDEX_ENTRY_LEN];
                entry[..4].copy_from_slice(&rel.to_be_bytes());
                self.index_file.append(&entry).at(&self.index_path)?;
                self.index = vec![(rel, 0)];
            }
        }
        let mut raw = [0u8; 2 * INDEX_ENTRY_LEN];
        let (rel, pos) = seal_entry(self.base, seal);
        raw[..4].copy_from_slice(&SEAL_MARKER.0.to_be_bytes());
        raw[4..8].copy_from_slice(&SEAL_MARKER.1.to_be_bytes());
        raw[8..12].copy_from_slice(&rel.to_be_bytes());
        raw[12..].copy_from_slice(&pos.to_be_bytes());
        self.index_file.append(&raw).at(&self.index_path)?;
        self.index_file.sync().at(&self.index_path)
    }

    /// Re-reads the index file's length: another process that appended batches may have
    /// appended index entries too, and this handle's next entry goes after them.
    pub(crate) fn refresh_index_size(&mut self) -> Result<u64> {
        self.index_file.refresh_len().at(&self.index_path)
    }

    /// Index bookkeeping for a batch at `pos` ending at `last_offset`; returns the entry to
    /// persist, if one is due. As in Kafka, an entry names the batch's last offset.
    fn note_batch(
        &mut self,
        pos: u64,
        last_offset: u64,
        len: u64,
        interval: u64,
    ) -> Option<(u32, u32)> {
        let mut entry = None;
        if self.bytes_since_index >= interval {
            let rel = u32::try_from(last_offset - self.base).ok();
            let p = u32::try_from(pos).ok();
            if let (Some(rel), Some(p)) = (rel, p) {
                self.index.push((rel, p));
                entry = Some((rel, p));
            }
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        entry
    }

    /// Writes a sealed batch at the end. On error the segment is cut back to its old size; an
    /// error from that too is returned as `Err(Err(_))`, meaning the segment's state is unknown.
    pub(crate) fn append(
        &mut self,
        bytes: &[u8],
        last_offset: u64,
        index_interval: u64,
    ) -> Result<(), (Error, bool)> {
        let old = self.size();
        self.dirty = true;
        if let Err(e) = self.file.append(bytes) {
            let restored = self.file.truncate(old).is_ok();
            return Err((
                Error::Io {
                    path: self.path.clone(),
                    source: e,
                },
                restored,
            ));
        }
        let (index, since) = (self.index.len(), self.bytes_since_index);
        if let Some((rel, p)) =
            self.note_batch(old, last_offset, bytes.len() as u64, index_interval)
        {
            let mut raw = [0u8; INDEX_ENTRY_LEN];
            raw[..4].copy_from_slice(&rel.to_be_bytes());
            raw[4..].copy_from_slice(&p.to_be_bytes());
            let old_index = self.index_file.len();
            if let Err(e) = self.index_file.append(&raw) {
                self.index.truncate(index);
                self.bytes_since_index = since;
                let restored =
                    self.file.truncate(old).is_ok() && self.index_file.truncate(old_index).is_ok();
                return Err((
                    Error::Io {
                        path: self.index_path.clone(),
                        source: e,
                    },
                    restored,
                ));
            }
        }
        Ok(())
    }

    /// Position of the last indexed batch ending at or before `offset` (the segment's start if
    /// none), and what must be found there: scanning from there finds the batch holding
    /// `offset`.
    pub(crate) fn position_for(&self, offset: u64) -> (u64, Expect) {
        let rel = u32::try_from(offset.saturating_sub(self.base)).unwrap_or(u32::MAX);
        let i = self.index.partition_point(|&(r, _)| r <= rel);
        self.entry_start(i.checked_sub(1).and_then(|i| self.index.get(i)).copied())
    }

    /// The header of the batch at `pos`.
    pub(crate) fn read_header(&mut self, pos: u64) -> Result<BatchHeader> {
        let corrupt = |reason: String| Error::Corrupt {
            path: self.path.clone(),
            position: pos,
            reason,
        };
        if pos + HEADER_LEN as u64 > self.size() {
            return Err(corrupt(format!(
                "batch header overruns the file ({} bytes)",
                self.size()
            )));
        }
        let mut header = [0u8; HEADER_LEN];
        self.file.read_exact_at(pos, &mut header).at(&self.path)?;
        let h = parse_stored(&header).map_err(corrupt)?;
        if pos + h.total_len() > self.size() {
            return Err(Error::Corrupt {
                path: self.path.clone(),
                position: pos,
                reason: format!(
                    "batch of {} bytes overruns the file ({} bytes)",
                    h.total_len(),
                    self.size()
                ),
            });
        }
        Ok(h)
    }

    /// `len` bytes from `pos`.
    pub(crate) fn read(&mut self, pos: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(pos, &mut buf).at(&self.path)?;
        Ok(buf)
    }

    /// Fsyncs the segment whoever wrote it (this handle's writes or another process's).
    pub(crate) fn sync_now(&mut self) -> Result<()> {
        self.file.sync().at(&self.path)?;
        self.index_file.sync().at(&self.index_path)?;
        self.dirty = false;
        Ok(())
    }

    /// Fsyncs what this handle wrote, if anything. A file that is gone (a closed handle finds
    /// it removed, or another file under its name) needs nothing: retention deleted it, or
    /// compaction replaced it with a cleaned copy it fsynced first.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.dirty {
            let synced = self.file.sync().and_then(|()| self.index_file.sync());
            match synced {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::debug!(file = %self.path.display(), "not syncing a segment another process removed or replaced");
                }
                Err(e) => return Err(e).at(&self.path),
            }
            self.dirty = false;
        }
        Ok(())
    }
}

/// A seal as an index entry: relative end offset, size. Both fit: a segment is rolled before
/// its relative offsets pass `u32::MAX`, and it is at most 2 GiB plus one batch.
fn seal_entry(base: u64, seal: Seal) -> (u32, u32) {
    (
        u32::try_from(seal.end_offset - base).unwrap_or(u32::MAX - 1),
        u32::try_from(seal.size).unwrap_or(u32::MAX - 1),
    )
}
