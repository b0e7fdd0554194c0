//! The change file, `changes`: how processes sharing a log directory learn of each other's
//! appends (the cross-process half of [`Log::append_version`](crate::Log::append_version),
//! [`Log::appended_since`](crate::Log::appended_since) and
//! [`Log::wait_for_append`](crate::Log::wait_for_append)).
//!
//! Layout (log/FORMAT.md, *Change file*): an 8-byte header, the generation `u64`, then one
//! 8-byte record per append, `crc32c(topic)` `u32` and partition `u32`, big-endian. Every
//! append writes its record with one `O_APPEND` write, so the kernel orders the records of all
//! processes without a lock; the version is `generation << 40 | records`. When the file grows
//! past [`ROTATE_BYTES`] a writer, under the file's OS lock, bumps the generation and cuts the
//! records: a reader whose version is of an older generation is told to look at everything.
//!
//! This module owns that file only; it never touches partitions or waits for another lock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::storage::{Storage, StorageFile};
use riffle_record::TopicPartition;

/// The change file's name in the log directory.
pub(crate) const FILE_NAME: &str = "changes";
const HEADER_LEN: u64 = 8;
const RECORD_LEN: u64 = 8;
/// Past this size the records are cut (8 M appends).
const ROTATE_BYTES: u64 = 64 << 20;
/// How often (in appends of this process) the size is checked against [`ROTATE_BYTES`].
const ROTATE_CHECK_EVERY: u64 = 1 << 16;
const GENERATION_SHIFT: u32 = 40;

/// The change file, as one log handle sees it.
#[derive(Debug)]
pub(crate) struct Changes {
    path: PathBuf,
    storage: Arc<dyn Storage>,
    read_only: bool,
    /// The appending handle (`O_APPEND`), opened on first use.
    writer: Mutex<Option<Box<dyn StorageFile>>>,
    /// A positioned handle for the header and for reading records; `None` until the file
    /// exists.
    reader: Mutex<Option<Box<dyn StorageFile>>>,
    appends: AtomicU64,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The handles stay usable whatever a panicking holder did.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Changes {
    pub(crate) fn new(storage: Arc<dyn Storage>, root: &Path, read_only: bool) -> Self {
        Self {
            path: root.join(FILE_NAME),
            storage,
            read_only,
            writer: Mutex::new(None),
            reader: Mutex::new(None),
            appends: AtomicU64::new(0),
        }
    }

    fn topic_hash(topic: &str) -> u32 {
        crc32c::crc32c(topic.as_bytes())
    }

    /// The hash a record names a topic by.
    pub(crate) fn hash_of(topic: &str) -> u32 {
        Self::topic_hash(topic)
    }

    /// Writes one record per appended partition. Failures are logged, not returned: the data
    /// is in the log already, and readers of other processes still find it within a timeout
    /// or on their next look at every partition.
    pub(crate) fn record<'a>(&self, appended: impl IntoIterator<Item = &'a TopicPartition>) {
        if self.read_only {
            return;
        }
        let mut buf = Vec::with_capacity(RECORD_LEN as usize);
        for tp in appended {
            buf.extend_from_slice(&Self::topic_hash(&tp.topic).to_be_bytes());
            buf.extend_from_slice(&tp.partition.to_be_bytes());
        }
        if buf.is_empty() {
            return;
        }
        let n = buf.len() as u64 / RECORD_LEN;
        let mut writer = locked(&self.writer);
        if writer.is_none() {
            match self.storage.open_shared_append(&self.path) {
                Ok(mut f) => {
                    if f.len() < HEADER_LEN {
                        // A new file: its header, generation 0, under the lock so that only one
                        // process writes it.
                        let _ = f.lock(true);
                        if f.refresh_len().unwrap_or(0) < HEADER_LEN {
                            let _ = f.append(&0u64.to_be_bytes());
                        }
                        let _ = f.unlock();
                    }
                    *writer = Some(f);
                }
                Err(e) => {
                    tracing::warn!(file = %self.path.display(), error = %e, "cannot open the change file; other processes learn of appends later");
                    return;
                }
            }
        }
        let Some(file) = writer.as_mut() else { return };
        if let Err(e) = file.append(&buf) {
            tracing::warn!(file = %self.path.display(), error = %e, "cannot write the change file; other processes learn of appends later");
        }
        let before = self.appends.fetch_add(n, Ordering::Relaxed);
        if (before + n) / ROTATE_CHECK_EVERY != before / ROTATE_CHECK_EVERY {
            self.maybe_rotate(file.as_mut());
        }
    }

    /// Cuts the records once the file is past [`ROTATE_BYTES`], bumping the generation.
    fn maybe_rotate(&self, file: &mut dyn StorageFile) {
        if file.refresh_len().unwrap_or(0) < ROTATE_BYTES {
            return;
        }
        if !file.try_lock().unwrap_or(false) {
            return; // another process is rotating
        }
        let mut reader = locked(&self.reader);
        if let Some(r) = self.open_reader(&mut reader)
            && r.refresh_len().unwrap_or(0) >= ROTATE_BYTES
        {
            let mut generation = [0u8; 8];
            if r.read_exact_at(0, &mut generation).is_ok() {
                let next = u64::from_be_bytes(generation).wrapping_add(1);
                // The generation first: a reader that sees the shorter file sees the new one.
                let _ = r.write_at(0, &next.to_be_bytes());
                let _ = r.truncate(HEADER_LEN);
            }
        }
        let _ = file.unlock();
    }

    fn open_reader<'a>(
        &self,
        reader: &'a mut Option<Box<dyn StorageFile>>,
    ) -> Option<&'a mut Box<dyn StorageFile>> {
        if reader.is_none() {
            *reader = self
                .storage
                .open_existing(&self.path, !self.read_only)
                .ok()
                .flatten();
        }
        reader.as_mut()
    }

    /// The current version: generation and record count (0 if there is no file yet).
    pub(crate) fn version(&self) -> u64 {
        let mut reader = locked(&self.reader);
        self.version_of(&mut reader).map_or(0, |(v, _)| v)
    }

    /// `(version, record count)`, reading the generation before the length (see the module
    /// docs for why that order).
    fn version_of(&self, reader: &mut Option<Box<dyn StorageFile>>) -> Option<(u64, u64)> {
        let r = self.open_reader(reader)?;
        let mut generation = [0u8; 8];
        r.read_exact_at(0, &mut generation).ok()?;
        let len = r.refresh_len().ok()?;
        let records = len.saturating_sub(HEADER_LEN) / RECORD_LEN;
        let generation = u64::from_be_bytes(generation);
        Some((
            (generation << GENERATION_SHIFT) | (records & ((1 << GENERATION_SHIFT) - 1)),
            records,
        ))
    }

    /// The records appended after version `seen`, as `(topic hash, partition)`, if `seen` is of
    /// the current generation and at most `max` records behind; and the current version.
    pub(crate) fn since(&self, seen: u64, max: u64) -> (u64, Option<Vec<(u32, u32)>>) {
        let mut reader = locked(&self.reader);
        let Some((now, records)) = self.version_of(&mut reader) else {
            return (0, (seen == 0).then(Vec::new));
        };
        if now == seen {
            return (now, Some(Vec::new()));
        }
        let same_generation = now >> GENERATION_SHIFT == seen >> GENERATION_SHIFT;
        let from = seen & ((1 << GENERATION_SHIFT) - 1);
        if !same_generation || from > records || records - from > max {
            return (now, None);
        }
        let Some(r) = reader.as_mut() else {
            return (now, None);
        };
        let mut buf = vec![0u8; ((records - from) * RECORD_LEN) as usize];
        if r.read_exact_at(HEADER_LEN + from * RECORD_LEN, &mut buf)
            .is_err()
        {
            return (now, None); // rotated under us
        }
        let out = buf
            .chunks_exact(RECORD_LEN as usize)
            .map(|c| {
                let hash = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                let partition = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
                (hash, partition)
            })
            .collect();
        (now, Some(out))
    }
}
