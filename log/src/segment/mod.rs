//! One segment: a `.log` file of Kafka v2 batches starting at a base offset, and its sparse
//! `.index` in Kafka's format (a batch's relative *last* offset → its byte position, one entry
//! per `index_interval_bytes` of batches), ended by a *seal* once the segment was rolled: where
//! it ends, so a later segment is known to exist.
//!
//! A segment owns the classification of its own bytes; the partition (`partition/recovery.rs`)
//! acts on it, under its lock:
//! - [`Segment::scan`] / [`Segment::scan_from`] read batches and report the unbroken run of
//!   intact batches and, if the file goes on after it, the [`Damage`](scan::Damage): where,
//!   why, and which intact batches still follow it. They change nothing.
//! - damage with nothing intact after it in the active segment is a *torn tail* (a write a
//!   crash cut short, or one another process is still making): [`Segment::cut_tail`] cuts it,
//!   with a `warn!` naming the file, the byte position and the offset, for a writer holding the
//!   lock; damage followed by intact data ([`Scan::corruption`](scan::Scan::corruption)) is an
//!   [`Error::Corrupt`] and is never cut;
//! - [`Segment::check_sealed`] checks a sealed segment cheaply (from its last index entry on)
//!   against its seal and the next segment's base offset; any damage is an [`Error::Corrupt`].
//!
//! It never trusts an index entry that points past the data, and never cuts a byte of a sealed
//! segment or of damage followed by intact data: only `riffle log repair` (`repair/`) cuts
//! those, and only when asked.
//!
//! This file owns the [`Segment`] type, its files' names, and opening, appending to, reading
//! and syncing a segment; `index.rs` owns the offset index and its seal, `scan.rs` the rules a
//! stored batch keeps and the reading that classifies a segment's bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use riffle_record::{BatchHeader, HEADER_LEN};

use crate::error::{Error, IoContext, Result};
use crate::storage::{Storage, StorageFile};

mod index;
mod scan;

use index::INDEX_ENTRY_LEN;
pub(crate) use index::{Seal, parse_index};
pub(crate) use scan::{parse_appended, parse_stored, scan_file_from};

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

    /// Re-reads the data file's length (another process may have appended).
    pub(crate) fn refresh_size(&mut self) -> Result<u64> {
        self.file.refresh_len().at(&self.path)
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
