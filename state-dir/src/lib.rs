//! riffle's state directory: `<state_dir>/<application_id>/`.
//!
//! What this crate owns:
//! - the **process lock** (`.lock`, holding the holder's pid; exclusive OS lock, released on
//!   drop) — a second process gets [`Error::Locked`] naming that pid;
//! - the **process id** (`process-metadata`, a UUID generated once and kept);
//! - one directory per task, `<subtopology>_<partition>/` ([`TaskId`]), with its `.checkpoint`
//!   in Kafka's text format ([`Checkpoint`]), written durably (temp file, fsync, rename,
//!   directory fsync);
//! - the **local offset map** ([`StateDirectory::local_offsets`]): task → offset sum, seeded at
//!   open from every task directory's checkpoint, updated on every checkpoint write or read and
//!   every task-directory deletion; versioned, with a bounded journal of changed tasks
//!   ([`SharedOffsetSums`]);
//! - cleanup of task directories not owned for `state_cleanup_delay`;
//! - a read-only [`inspect`] for `riffle state inspect`, usable while another process runs.
//!
//! What it must never do: report offsets it is not sure of. A corrupt or truncated checkpoint is
//! an error naming the file, and that task is absent from the local offset map (its state is
//! unknown; it will be restored from the changelog). Reading the map's version never takes a
//! lock or allocates.
//!
//! ```
//! use riffle_state_dir::{Checkpoint, StateDirectory, TaskId, TopicPartition};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = tempfile::tempdir()?;
//! let dir = StateDirectory::open(root.path(), "my-app")?;
//! let task: TaskId = "0_3".parse()?;
//! let cp: Checkpoint = [(TopicPartition::new("my-app-store-changelog", 3), 42)]
//!     .into_iter()
//!     .collect();
//! let before = dir.local_offsets().version();
//! dir.write_checkpoint(task, &cp)?;
//! assert_eq!(dir.read_checkpoint(task)?, Some(cp));
//! assert_eq!(dir.local_offsets().get(task), Some(42));
//! assert!(dir.local_offsets().version() > before);
//! // A second open of the same directory fails, naming our pid.
//! assert!(StateDirectory::open(root.path(), "my-app").is_err());
//! # Ok(()) }
//! ```

mod checkpoint;
mod directory;
mod error;
mod inspect;
mod journal;
mod lock;
mod task_id;

pub use crate::{
    checkpoint::{Checkpoint, Durability, offset_sum},
    directory::{CHECKPOINT_FILE, StateDirectory, StateDirectoryConfig},
    error::{Error, Result},
    inspect::{Inspection, inspect},
    journal::{
        ChangeJournal, DEFAULT_JOURNAL_CAPACITY, OffsetSumsView, SharedOffsetSums, VersionedSums,
        next_source_id,
    },
    task_id::{ParseTaskIdError, TaskId},
};
/// A topic-partition (riffle-record's, which both backends use): a changelog's, in checkpoints.
pub use riffle_record::TopicPartition;
