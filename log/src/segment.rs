//! One segment: a `.log` file of batches starting at a base offset, and its sparse `.index`
//! (relative offset → byte position, one entry per `index_interval_bytes` of batches).
//!
//! A segment owns recovery of its own bytes: [`Segment::recover`] validates every batch by
//! length and checksum, truncates a torn or corrupt tail (with a `warn!` naming the file, the
//! byte position and the offset), and rebuilds the index to match. It never trusts an index
//! entry that points past the data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{BatchHeader, HEADER_LEN, batch_crc};
use crate::error::{Error, IoContext, Result};
use crate::storage::{Storage, StorageFile};

/// Size of one index entry: `u32` relative offset, `u32` position, both big-endian.
const INDEX_ENTRY_LEN: usize = 8;

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
}

/// Where a [`Segment::scan`] stopped.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    /// Byte position after the last whole, valid batch.
    pub(crate) end_pos: u64,
    /// The offset after that batch.
    pub(crate) end_offset: u64,
    /// Why the bytes after `end_pos` are not a batch; `None` if the file ends there.
    pub(crate) problem: Option<String>,
    /// The bytes after `end_pos` are the start of a batch that is not all there yet: torn, or
    /// still being written by another process.
    pub(crate) incomplete: bool,
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

impl Segment {
    /// Opens (creating if missing) the segment at `base` in `dir`; its index is not loaded yet.
    pub(crate) fn open(storage: &Arc<dyn Storage>, dir: &Path, base: u64) -> Result<Self> {
        let path = dir.join(segment_file_name(base));
        let index_path = path.with_extension("index");
        let file = storage.open(&path).at(&path)?;
        let index_file = storage.open(&index_path).at(&index_path)?;
        Ok(Self {
            base,
            path,
            index_path,
            file,
            index_file,
            index: Vec::new(),
            bytes_since_index: 0,
            dirty: false,
        })
    }

    /// Opens the existing segment at `base` without creating or changing anything (a read-only
    /// log); a missing index is an empty one (the index is derived data).
    pub(crate) fn open_read_only(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        base: u64,
    ) -> Result<Self> {
        let path = dir.join(segment_file_name(base));
        let index_path = path.with_extension("index");
        let file = storage
            .open_existing(&path, false)
            .at(&path)?
            .ok_or_else(|| Error::Io {
                path: path.clone(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })?;
        let index_file = match storage.open_existing(&index_path, false).at(&index_path)? {
            Some(f) => f,
            None => crate::storage::empty_file(),
        };
        Ok(Self {
            base,
            path,
            index_path,
            file,
            index_file,
            index: Vec::new(),
            bytes_since_index: 0,
            dirty: false,
        })
    }

    /// A new, empty segment at `base` (any stale files of that name are emptied).
    pub(crate) fn create(storage: &Arc<dyn Storage>, dir: &Path, base: u64) -> Result<Self> {
        let mut segment = Self::open(storage, dir, base)?;
        segment.file.truncate(0).at(&segment.path)?;
        segment.index_file.truncate(0).at(&segment.index_path)?;
        segment.dirty = true;
        Ok(segment)
    }

    pub(crate) fn size(&self) -> u64 {
        self.file.len()
    }

    /// Loads the index file if it is consistent with the data; otherwise rebuilds it by
    /// [`recover`](Self::recover). For sealed segments, whose tail was synced when rolled.
    pub(crate) fn load_index(&mut self, index_interval: u64) -> Result<()> {
        let mut raw = vec![0u8; self.index_file.len() as usize];
        self.index_file
            .read_exact_at(0, &mut raw)
            .at(&self.index_path)?;
        let mut entries = Vec::with_capacity(raw.len() / INDEX_ENTRY_LEN);
        let mut valid = raw.chunks_exact(INDEX_ENTRY_LEN).remainder().is_empty();
        for e in raw.chunks_exact(INDEX_ENTRY_LEN) {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            let increasing = entries.last().is_none_or(|&(r, p)| rel > r && pos > p);
            if !increasing || u64::from(pos) >= self.size() {
                valid = false;
                break;
            }
            entries.push((rel, pos));
        }
        if !valid || (entries.is_empty() && self.size() > index_interval) {
            // Rebuilt in memory only: a read-only open writes nothing, and the data is not cut.
            tracing::warn!(file = %self.index_path.display(), "rebuilding an inconsistent offset index (in memory)");
            let scan = self.scan(index_interval)?;
            if let Some(reason) = scan.problem {
                return Err(Error::Corrupt {
                    path: self.path.clone(),
                    position: scan.end_pos,
                    reason: format!("sealed segment, at offset {}: {reason}", scan.end_offset),
                });
            }
            return Ok(());
        }
        self.index = entries;
        Ok(())
    }

    /// Validates every batch from the start, rebuilding the in-memory index; modifies nothing
    /// (a read-only open, or a writer that does not hold the partition's lock, calls this).
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
        mut pos: u64,
        mut expected: u64,
        index_interval: u64,
    ) -> Result<Scan> {
        let len = self.size();
        let mut header = [0u8; HEADER_LEN];
        let mut batch = Vec::new();
        let (problem, incomplete) = loop {
            let left = len.saturating_sub(pos);
            if left == 0 {
                break (None, false);
            }
            if left < HEADER_LEN as u64 {
                break (
                    Some(format!("{left} trailing bytes, too few for a batch header")),
                    true,
                );
            }
            self.file.read_exact_at(pos, &mut header).at(&self.path)?;
            let h = match BatchHeader::parse(&header) {
                Ok(h) => h,
                Err(reason) => break (Some(reason), false),
            };
            if h.total_len() > left {
                break (
                    Some(format!(
                        "batch of {} bytes cut off after {left} (torn write)",
                        h.total_len()
                    )),
                    true,
                );
            }
            if h.base_offset != expected {
                break (
                    Some(format!(
                        "batch starts at offset {} where {expected} was expected",
                        h.base_offset
                    )),
                    false,
                );
            }
            batch.resize(h.total_len() as usize, 0);
            self.file.read_exact_at(pos, &mut batch).at(&self.path)?;
            if batch_crc(&batch) != h.crc {
                break (Some("checksum mismatch".to_owned()), false);
            }
            self.note_batch(pos, h.base_offset, h.total_len(), index_interval);
            pos += h.total_len();
            expected = h.next_offset();
        };
        Ok(Scan {
            end_pos: pos,
            end_offset: expected,
            problem,
            incomplete,
        })
    }

    /// Cuts what follows the scan's end (a torn tail), with a `warn!` naming the file, byte
    /// position and offset, and makes the index file match the in-memory index. Only a writer
    /// holding the partition's lock calls this: no other process can be writing that tail.
    pub(crate) fn cut_tail(&mut self, scan: &Scan) -> Result<()> {
        let Scan {
            end_pos: pos,
            end_offset: offset,
            ..
        } = *scan;
        let reason = scan.problem.as_deref().unwrap_or("trailing bytes");
        tracing::warn!(
            file = %self.path.display(),
            position = pos,
            offset,
            %reason,
            "truncating torn or corrupt tail of log segment {} at byte {pos} (offset {offset}): {reason}",
            self.path.display()
        );
        self.file.truncate(pos).at(&self.path)?;
        self.file.sync().at(&self.path)?;
        self.write_index()
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

    /// Re-reads the index file's length: another process that appended batches may have
    /// appended index entries too, and this handle's next entry goes after them.
    pub(crate) fn refresh_index_size(&mut self) -> Result<u64> {
        self.index_file.refresh_len().at(&self.index_path)
    }

    /// Index bookkeeping for a batch at `pos`; returns the entry to persist, if one is due.
    fn note_batch(
        &mut self,
        pos: u64,
        base_offset: u64,
        len: u64,
        interval: u64,
    ) -> Option<(u32, u32)> {
        let mut entry = None;
        if self.bytes_since_index >= interval {
            let rel = u32::try_from(base_offset - self.base).ok();
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
        base_offset: u64,
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
            self.note_batch(old, base_offset, bytes.len() as u64, index_interval)
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

    /// Position of the last indexed batch at or before `offset` (0 if none): scanning from there
    /// finds the batch holding `offset`.
    pub(crate) fn position_for(&self, offset: u64) -> u64 {
        let rel = u32::try_from(offset.saturating_sub(self.base)).unwrap_or(u32::MAX);
        let i = self.index.partition_point(|&(r, _)| r <= rel);
        i.checked_sub(1)
            .and_then(|i| self.index.get(i))
            .map_or(0, |&(_, p)| u64::from(p))
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
        let h = BatchHeader::parse(&header).map_err(corrupt)?;
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

    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.dirty {
            self.file.sync().at(&self.path)?;
            self.index_file.sync().at(&self.index_path)?;
            self.dirty = false;
        }
        Ok(())
    }
}
