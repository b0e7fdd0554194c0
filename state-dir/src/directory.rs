//! `StateDirectory`: `<state_dir>/<application_id>/` with its lock, process id, task directories,
//! checkpoints and the process-wide local offset map.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tracing::{debug, info, warn};

use crate::TaskId;
use crate::checkpoint::{Checkpoint, Durability, sync_dir};
use crate::error::{IoContext, Result};
use crate::journal::{DEFAULT_JOURNAL_CAPACITY, SharedOffsetSums};
use crate::lock::{self, LOCK_FILE, ProcessLock};

/// Name of the checkpoint file inside a task directory.
pub const CHECKPOINT_FILE: &str = ".checkpoint";

/// The task directories under `app_dir`, sorted; other entries are ignored.
pub(crate) fn list_task_dirs(app_dir: &Path) -> Result<Vec<TaskId>> {
    let mut tasks = Vec::new();
    for entry in fs::read_dir(app_dir).ctx("list", app_dir)? {
        let entry = entry.ctx("list", app_dir)?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if let (true, Some(Ok(task))) = (is_dir, entry.file_name().to_str().map(str::parse)) {
            tasks.push(task);
        }
    }
    tasks.sort_unstable();
    Ok(tasks)
}

/// Tunables of a [`StateDirectory`].
#[derive(Clone, Debug)]
pub struct StateDirectoryConfig {
    /// How many local-offset-map changes the journal keeps (readers further behind rebuild).
    pub journal_capacity: usize,
    /// Task directories not owned for this long are deleted by
    /// [`StateDirectory::clean_unowned_task_dirs`] (`state_cleanup_delay_ms`).
    pub state_cleanup_delay: Duration,
    /// Whether checkpoint writes and directory changes are fsynced.
    pub durability: Durability,
}

impl Default for StateDirectoryConfig {
    fn default() -> Self {
        Self {
            journal_capacity: DEFAULT_JOURNAL_CAPACITY,
            state_cleanup_delay: Duration::from_millis(600_000),
            durability: Durability::Sync,
        }
    }
}

#[derive(Debug)]
struct Ownership {
    owner: Option<String>,
    changed_at: Instant,
}

/// The state directory of one application in one process. Share it as `Arc<StateDirectory>`;
/// all methods take `&self`.
///
/// A task's checkpoint is written and its directory deleted only by the thread that owns the task
/// ([`try_lock_task`](Self::try_lock_task)); cleanup never touches an owned task.
#[derive(Debug)]
pub struct StateDirectory {
    app_dir: PathBuf,
    process_id: String,
    config: StateDirectoryConfig,
    local_offsets: SharedOffsetSums,
    owners: Mutex<HashMap<TaskId, Ownership>>,
    // Last field: dropped last, so the directory stays ours until everything else is gone.
    _lock: ProcessLock,
}

impl StateDirectory {
    /// Opens (creating if needed) `<state_dir>/<application_id>/` with default settings.
    pub fn open(state_dir: &Path, application_id: &str) -> Result<Arc<Self>> {
        Self::open_with(state_dir, application_id, StateDirectoryConfig::default())
    }

    /// Opens with explicit settings: takes the process lock, loads or creates the process id,
    /// and seeds the local offset map from every task directory's checkpoint.
    pub fn open_with(
        state_dir: &Path,
        application_id: &str,
        config: StateDirectoryConfig,
    ) -> Result<Arc<Self>> {
        let app_dir = state_dir.join(application_id);
        fs::create_dir_all(&app_dir).ctx("create state directory", &app_dir)?;
        let lock = ProcessLock::acquire(&app_dir.join(LOCK_FILE))?;
        let process_id = lock::load_or_create_process_id(&app_dir, config.durability)?;
        let dir = Self {
            local_offsets: SharedOffsetSums::new(config.journal_capacity),
            app_dir,
            process_id,
            config,
            owners: Mutex::new(HashMap::new()),
            _lock: lock,
        };
        for task in dir.list_task_dirs()? {
            // `read_checkpoint` records the sum, or warns and leaves the task out.
            if let Ok(Some(_)) = dir.read_checkpoint(task) {
                debug!(%task, "seeded local offset sum from checkpoint");
            }
        }
        info!(dir = %dir.app_dir.display(), process_id = %dir.process_id, "opened state directory");
        Ok(Arc::new(dir))
    }

    /// The pid holding the lock of `<state_dir>/<application_id>/`, or `None` when unlocked
    /// (for `riffle state inspect`; does not take the lock).
    pub fn lock_holder(state_dir: &Path, application_id: &str) -> Result<Option<u32>> {
        ProcessLock::holder(&state_dir.join(application_id).join(LOCK_FILE))
    }

    /// `<state_dir>/<application_id>/`.
    pub fn app_dir(&self) -> &Path {
        &self.app_dir
    }

    /// This process's stable id (a UUID kept in `process-metadata`).
    pub fn process_id(&self) -> &str {
        &self.process_id
    }

    /// The settings this directory was opened with.
    pub fn config(&self) -> &StateDirectoryConfig {
        &self.config
    }

    /// The local offset map: task → offset sum of its checkpoint, versioned and journaled.
    pub fn local_offsets(&self) -> &SharedOffsetSums {
        &self.local_offsets
    }

    /// The directory of `task`, without creating it.
    pub fn task_dir_path(&self, task: TaskId) -> PathBuf {
        self.app_dir.join(task.to_string())
    }

    /// The directory of `task`, created if missing.
    pub fn task_dir(&self, task: TaskId) -> Result<PathBuf> {
        let dir = self.task_dir_path(task);
        if !dir.is_dir() {
            fs::create_dir_all(&dir).ctx("create task directory", &dir)?;
            self.sync_app_dir()?;
        }
        Ok(dir)
    }

    fn sync_app_dir(&self) -> Result<()> {
        match self.config.durability {
            Durability::Sync => sync_dir(&self.app_dir),
            Durability::Buffered => Ok(()),
        }
    }

    /// The checkpoint file of `task`.
    pub fn checkpoint_path(&self, task: TaskId) -> PathBuf {
        self.task_dir_path(task).join(CHECKPOINT_FILE)
    }

    /// Durably writes `task`'s checkpoint, then records its offset sum in the local offset map.
    pub fn write_checkpoint(&self, task: TaskId, checkpoint: &Checkpoint) -> Result<()> {
        // Refuse before creating anything, so a bad checkpoint leaves no empty task directory.
        checkpoint.check_writable(&self.checkpoint_path(task))?;
        self.task_dir(task)?;
        checkpoint.write_with(&self.checkpoint_path(task), self.config.durability)?;
        self.local_offsets.set(task, Some(checkpoint.offset_sum()));
        Ok(())
    }

    /// Reads `task`'s checkpoint (`None` if it has none) and brings the local offset map in line
    /// with it. A corrupt file is an error naming it, and the task's offsets become unknown.
    pub fn read_checkpoint(&self, task: TaskId) -> Result<Option<Checkpoint>> {
        let path = self.checkpoint_path(task);
        match Checkpoint::read(&path) {
            Ok(cp) => {
                self.local_offsets
                    .set(task, cp.as_ref().map(Checkpoint::offset_sum));
                Ok(cp)
            }
            Err(e) => {
                warn!(%task, error = %e, "checkpoint unreadable; task offsets are unknown");
                self.local_offsets.set(task, None);
                Err(e)
            }
        }
    }

    /// Deletes `task`'s directory (and everything in it) and forgets its offsets.
    pub fn delete_task_dir(&self, task: TaskId) -> Result<()> {
        let dir = self.task_dir_path(task);
        match fs::remove_dir_all(&dir) {
            Ok(()) => self.sync_app_dir()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).ctx("delete task directory", &dir),
        }
        self.local_offsets.set(task, None);
        Ok(())
    }

    /// Every task directory on disk, sorted.
    pub fn list_task_dirs(&self) -> Result<Vec<TaskId>> {
        list_task_dirs(&self.app_dir)
    }

    fn owners(&self) -> MutexGuard<'_, HashMap<TaskId, Ownership>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `task` for `owner` (e.g. a stream thread's name) within this process. Returns
    /// false if another owner holds it; true if it is now (or already was) `owner`'s.
    pub fn try_lock_task(&self, task: TaskId, owner: &str) -> bool {
        let mut owners = self.owners();
        let entry = owners.entry(task).or_insert(Ownership {
            owner: None,
            changed_at: Instant::now(),
        });
        match &entry.owner {
            Some(o) => o == owner,
            None => {
                entry.owner = Some(owner.to_owned());
                entry.changed_at = Instant::now();
                true
            }
        }
    }

    /// Releases `task` if `owner` holds it; the cleanup delay starts now.
    pub fn unlock_task(&self, task: TaskId, owner: &str) {
        if let Some(entry) = self.owners().get_mut(&task)
            && entry.owner.as_deref() == Some(owner)
        {
            entry.owner = None;
            entry.changed_at = Instant::now();
        }
    }

    /// Who owns `task` in this process, if anyone.
    pub fn task_owner(&self, task: TaskId) -> Option<String> {
        self.owners().get(&task).and_then(|o| o.owner.clone())
    }

    /// Deletes task directories that nobody owns and that have not been owned or modified for
    /// the configured `state_cleanup_delay`. Returns the tasks deleted.
    pub fn clean_unowned_task_dirs(&self) -> Result<Vec<TaskId>> {
        self.clean_unowned_task_dirs_older_than(self.config.state_cleanup_delay)
    }

    /// [`clean_unowned_task_dirs`](Self::clean_unowned_task_dirs) with an explicit delay.
    pub fn clean_unowned_task_dirs_older_than(&self, delay: Duration) -> Result<Vec<TaskId>> {
        self.clean_unowned_task_dirs_with(delay, &mut |_| true)
    }

    /// [`clean_unowned_task_dirs_older_than`](Self::clean_unowned_task_dirs_older_than), calling
    /// `before_delete` for each task before its directory goes, while nobody can claim the task
    /// (to delete state kept elsewhere, such as a shared store database). A task for which it
    /// returns false keeps its directory.
    pub fn clean_unowned_task_dirs_with(
        &self,
        delay: Duration,
        before_delete: &mut dyn FnMut(TaskId) -> bool,
    ) -> Result<Vec<TaskId>> {
        let mut deleted = Vec::new();
        for task in self.list_task_dirs()? {
            // Hold the owners lock across the check and the delete so nobody claims it meanwhile.
            let owners = self.owners();
            let idle_in_process = match owners.get(&task) {
                Some(Ownership { owner: Some(_), .. }) => continue,
                Some(o) => o.changed_at.elapsed(),
                None => Duration::MAX,
            };
            let idle_on_disk = fs::metadata(self.task_dir_path(task))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or(Duration::ZERO);
            if idle_in_process.min(idle_on_disk) >= delay {
                info!(%task, "deleting task directory not owned for {delay:?}");
                if !before_delete(task) {
                    continue;
                }
                self.delete_task_dir(task)?;
                deleted.push(task);
            }
            drop(owners);
        }
        Ok(deleted)
    }
}
