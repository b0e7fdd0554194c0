//! A read-only look at a state directory, for `riffle state inspect`: works while another
//! process holds the lock, and never writes.

use std::path::{Path, PathBuf};

use crate::TaskId;
use crate::checkpoint::Checkpoint;
use crate::directory::{CHECKPOINT_FILE, list_task_dirs};
use crate::error::Result;
use crate::lock::{LOCK_FILE, ProcessLock, read_process_id};

/// What [`inspect`] found.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// `<state_dir>/<application_id>/`.
    pub app_dir: PathBuf,
    /// The pid holding the lock, if any.
    pub lock_holder: Option<u32>,
    /// The process id from `process-metadata`, if written yet.
    pub process_id: Option<String>,
    /// Each task directory with its checkpoint (`Ok(None)`: none; `Err`: corrupt, names the file).
    pub tasks: Vec<(TaskId, Result<Option<Checkpoint>>)>,
}

/// Reads `<state_dir>/<application_id>/` without locking or modifying it.
pub fn inspect(state_dir: &Path, application_id: &str) -> Result<Inspection> {
    let app_dir = state_dir.join(application_id);
    let tasks = list_task_dirs(&app_dir)?
        .into_iter()
        .map(|t| {
            let path = app_dir.join(t.to_string()).join(CHECKPOINT_FILE);
            (t, Checkpoint::read(&path))
        })
        .collect();
    Ok(Inspection {
        lock_holder: ProcessLock::holder(&app_dir.join(LOCK_FILE))?,
        process_id: read_process_id(&app_dir)?,
        tasks,
        app_dir,
    })
}
