//! The state directory's errors.

use std::io;
use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the state directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process (or another `StateDirectory` in this one) holds the directory's lock.
    #[error("state directory {path} is locked by process {}", holder.map_or_else(|| "<unknown pid>".to_owned(), |p| p.to_string()))]
    Locked {
        /// The `.lock` file.
        path: PathBuf,
        /// The holder's pid as written in the lock file, if it could be read.
        holder: Option<u32>,
    },
    /// A checkpoint file could not be parsed; the task's offsets must be treated as unknown.
    #[error("corrupt checkpoint file {path}: {reason}")]
    CorruptCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The `process-metadata` file exists but does not hold a process id.
    #[error("corrupt process metadata file {path}: {reason}")]
    CorruptProcessMetadata {
        /// The metadata file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A checkpoint cannot be written in Kafka's text format (e.g. a topic name with whitespace).
    #[error("cannot write checkpoint {path}: {reason}")]
    InvalidCheckpoint {
        /// The checkpoint file that was to be written.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An I/O error on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Attaches an operation and a path to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            op,
            path: path.to_owned(),
            source,
        })
    }
}
