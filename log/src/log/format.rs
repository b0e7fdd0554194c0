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
                return Err(refuse(format!(
                    "riffle-log format 1 (no `format` file, and {} holds batches)",
                    first.display()
                )));
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
