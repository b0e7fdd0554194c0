//! The log directory's `format` file (log/FORMAT.md, *Format version*): which on-disk format
//! a directory holds.
//!
//! It must never convert or change a log of another format: such a log is refused,
//! untouched ([`Error::UnsupportedFormat`]); the `format` file is written only into a log
//! that holds no data yet.

use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::storage::Storage;

/// The format version this build reads and writes, in the log directory's `format` file.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The `format` file's content.
const FORMAT_LINE: &str = "riffle-log format 2\n";

/// The batch format a segment's first bytes show.
#[derive(Debug, PartialEq, Eq)]
enum Magic {
    /// Kafka's v2 record batch: magic 2 at byte 16 (format 2).
    KafkaV2,
    /// riffle's own format 1 batch: magic 1 at byte 8.
    RiffleV1,
}

/// Which batch format the segment at `path` begins with, `None` if neither (or unreadable).
fn first_batch_magic(path: &Path) -> Option<Magic> {
    use std::io::Read;
    let mut head = [0u8; 17];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    if head[16] == 2 {
        Some(Magic::KafkaV2)
    } else if head[8] == 1 {
        Some(Magic::RiffleV1)
    } else {
        None
    }
}

/// Checks the log directory's `format` file, and writes it into a log that has none and holds
/// no data yet. A log with data and no `format` file was written before format 2 (its batches
/// are riffle's own, not Kafka's): it is refused, untouched.
pub(crate) fn check_format(storage: &dyn Storage, dir: &Path, read_only: bool) -> Result<()> {
    let path = dir.join("format");
    let refuse = |found: String| Error::UnsupportedFormat {
        path: dir.to_path_buf(),
        found,
        hint: "read it with the riffle build that wrote it (`riffle consume`), or move it \
               aside and let the application rebuild it from its input topics"
            .to_owned(),
    };
    if let Some(raw) = storage.read(&path).at(&path)? {
        let text = String::from_utf8_lossy(&raw);
        let version = text
            .trim()
            .strip_prefix("riffle-log format ")
            .and_then(|v| v.parse::<u32>().ok());
        return match version {
            Some(FORMAT_VERSION) => Ok(()),
            Some(v) => Err(refuse(format!("riffle-log format {v}"))),
            None => Err(Error::Corrupt {
                path,
                position: 0,
                reason: format!("not a format line: {:?}", text.trim()),
            }),
        };
    }
    // No `format` file: format 1 if any data was ever written (its first segments are never
    // empty then: nothing is deleted from a format 1 log), else a new log.
    let topics = dir.join("topics");
    for topic in storage.list(&topics).at(&topics)? {
        let tdir = topics.join(&topic);
        for partition in storage.list(&tdir).at(&tdir)? {
            let first = tdir
                .join(&partition)
                .join(crate::segment::segment_file_name(0));
            if std::fs::metadata(&first).is_ok_and(|m| m.len() > 0) {
                return match first_batch_magic(&first) {
                    // Kafka's v2 batches: this build's format, and the `format` file was lost.
                    Some(Magic::KafkaV2) => Err(Error::Corrupt {
                        path,
                        position: 0,
                        reason: format!(
                            "the `format` file is missing, but {} begins with a Kafka v2 record \
                             batch (this build's format 2), so it was deleted: write it back \
                             with the one line `riffle-log format 2`, or run `riffle log repair`, which does \
                             (nothing else was changed)",
                            first.display()
                        ),
                    }),
                    Some(Magic::RiffleV1) => Err(refuse(format!(
                        "riffle-log format 1 (no `format` file, and {} holds format 1 batches: \
                         magic 1 at byte 8)",
                        first.display()
                    ))),
                    None => Err(Error::Corrupt {
                        path: first.clone(),
                        position: 0,
                        reason: "the log has no `format` file and this segment begins with \
                                 neither a Kafka v2 batch (magic 2 at byte 16) nor a format 1 \
                                 batch (magic 1 at byte 8): which format it holds cannot be told"
                            .to_owned(),
                    }),
                };
            }
        }
    }
    let journal = dir.join("txn").join("journal");
    if std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0) {
        return Err(refuse(format!(
            "riffle-log format 1 (no `format` file, and {} holds transactions)",
            journal.display()
        )));
    }
    if !read_only {
        // Every process that opens a new log writes the same line. Two at once share the
        // temporary file, so one's rename may find it gone: then the other's line is there.
        if let Err(e) = storage.write_atomic(&path, FORMAT_LINE.as_bytes())
            && storage.read(&path).ok().flatten().as_deref() != Some(FORMAT_LINE.as_bytes())
        {
            return Err(Error::Io { path, source: e });
        }
    }
    Ok(())
}

/// [`check_format`] for `log repair`: also writes back a deleted `format` file when the
/// segments show this build's format unambiguously (a first batch with Kafka v2's magic), and
/// returns its path (with `dry_run`, writes nothing and returns what it would write). A log
/// of another format, or whose format cannot be told, is the error [`check_format`] gives.
pub(crate) fn check_or_restore_format(
    storage: &dyn Storage,
    dir: &Path,
    dry_run: bool,
) -> Result<Option<std::path::PathBuf>> {
    let path = dir.join("format");
    match check_format(storage, dir, true) {
        Ok(()) => Ok(None),
        Err(Error::Corrupt { path: named, .. })
            if named == path && storage.read(&path).at(&path)?.is_none() =>
        {
            if !dry_run {
                storage
                    .write_atomic(&path, FORMAT_LINE.as_bytes())
                    .at(&path)?;
            }
            Ok(Some(path))
        }
        Err(e) => Err(e),
    }
}
