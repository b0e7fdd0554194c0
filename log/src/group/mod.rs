//! Groups of processes on one log directory: who is a member, who died, and one shared record
//! that the members change one at a time (log/FORMAT.md, *Groups of processes*).
//!
//! The log knows nothing of tasks: it keeps members alive or declares them gone, serializes the
//! members' *steps* (read the group's record, change it, write it back) and fences a member it
//! declared gone, so that its commits fail ([`Error::Fenced`]). What the record holds is the
//! caller's (the runtime keeps its target assignment there).
//!
//! - `members/<group>/lock`: the group lock. A step holds it exclusively (a few file reads and
//!   at most one write); a fenced commit holds it shared while it writes, so a member cannot be
//!   declared gone in the middle of its commit.
//! - `members/<group>/<member>.member`: a member's file, locked exclusively by the member for as
//!   long as it lives (the OS releases the lock when the process dies, `kill -9` included), and
//!   holding its last heartbeat time and session timeout. A member whose lock is free, or whose
//!   heartbeat is older than its session timeout (a stopped process), is declared gone by the
//!   next step of any member: its file is removed, and from then on its commits fail.
//! - `members/<group>/state`: the group's record, rewritten (temporary file, rename) by a step
//!   that changed it, with a generation that moves on every write.
//!
//! Nothing here is fsynced: membership does not outlive the processes. After a machine crash
//! every member is gone; a `state` file found damaged then is started afresh with a warning,
//! but is an error while any member lives.

mod record;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, IoContext, Result};
use crate::log::Log;
use crate::names::validate_name;

pub use record::MemberRecord;
use record::{decode_state, encode_state};

/// The directory under the log directory that holds every group's membership.
pub const MEMBERS_DIR: &str = "members";
const LOCK_FILE: &str = "lock";
const STATE_FILE: &str = "state";
const MEMBER_SUFFIX: &str = ".member";

/// Why a step declared a member gone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Departure {
    /// Its lock was free: the process died, or closed the member without leaving.
    Exited,
    /// Its last heartbeat is older than its session timeout (a stopped or stuck process).
    SessionExpired {
        /// How long ago it last heartbeat, in ms.
        silent_ms: i64,
        /// Its session timeout, in ms.
        session_timeout_ms: u32,
    },
}

/// A member declared gone by a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departed {
    /// The member id.
    pub member: String,
    /// Why.
    pub reason: Departure,
}

/// What a step sees and may change.
#[derive(Debug)]
#[non_exhaustive]
pub struct Step {
    /// The generation of the record read (0 for a group that never wrote one).
    pub generation: u64,
    /// The live members, by id, with their files' records (this member included).
    pub members: BTreeMap<String, MemberRecord>,
    /// The members this step declared gone.
    pub departed: Vec<Departed>,
    data: Vec<u8>,
    new_data: Option<Vec<u8>>,
}

impl Step {
    /// The group's record as read (empty for a group that never wrote one).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Replaces the record: the step writes it, as generation `generation + 1`.
    pub fn set_data(&mut self, data: Vec<u8>) {
        self.new_data = Some(data);
    }
}

/// A group's membership as anyone may read it, without joining or changing anything.
#[derive(Debug)]
#[non_exhaustive]
pub struct GroupView {
    /// The record's generation.
    pub generation: u64,
    /// Every member file, by member id, with its record and whether its lock is held.
    pub members: BTreeMap<String, (Option<MemberRecord>, bool)>,
    /// The group's record.
    pub data: Vec<u8>,
}

/// One group's membership directory, as the members of this process reach it. Members of one
/// process take their steps one at a time (a mutex, then the OS lock).
#[derive(Clone, Debug)]
pub struct Group {
    shared: Arc<GroupShared>,
}

#[derive(Debug)]
struct GroupShared {
    name: String,
    dir: PathBuf,
    step: Mutex<StepState>,
    /// This process's members' files and session timeouts, by member id: a step waiting for
    /// the group lock keeps their heartbeats fresh (see [`GroupShared::lock_group`]).
    here: Mutex<BTreeMap<String, (Arc<File>, u32)>>,
}

impl GroupShared {
    /// Takes the group lock. While another process holds it — one stopped (SIGSTOP) inside a
    /// step holds it until it continues — the members of this process are alive, only
    /// waiting: their heartbeats are written every 100 ms meanwhile, so that the holder, once
    /// it continues, does not take the wait for silence and declare them gone.
    fn lock_group(&self, state: &StepState) -> Result<()> {
        let path = self.dir.join(LOCK_FILE);
        let mut pause = Duration::from_millis(1);
        let mut refreshed = std::time::Instant::now();
        loop {
            match state.lock.try_lock() {
                Ok(()) => return Ok(()),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(e).at(&path),
            }
            if refreshed.elapsed() >= Duration::from_millis(100) {
                refreshed = std::time::Instant::now();
                let here = self.here.lock().unwrap_or_else(PoisonError::into_inner);
                for (id, (file, session_timeout_ms)) in here.iter() {
                    let record = MemberRecord::now(*session_timeout_ms);
                    let member = self.dir.join(format!("{id}{MEMBER_SUFFIX}"));
                    write_at(file, &record.encode()).at(&member)?;
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(16));
        }
    }
}

#[derive(Debug)]
struct StepState {
    lock: File,
    /// The record last read or written, with its generation (generations only grow: a file
    /// replaced under the same name may reuse an inode, a generation is never reused).
    cached: Option<(u64, Vec<u8>)>,
}

/// This process's membership in a group: its file, locked for as long as it lives.
#[derive(Debug)]
pub struct GroupMember {
    group: Group,
    id: String,
    path: PathBuf,
    file: Arc<File>,
    identity: u64,
    session_timeout_ms: u32,
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        let mut here = self
            .group
            .shared
            .here
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        here.remove(&self.id);
    }
}

/// Held while a fenced commit writes: the member is still in the group, and stays so until this
/// is dropped.
#[derive(Debug)]
pub(crate) struct Fence {
    _lock: File,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.ino()
}

#[cfg(not(unix))]
fn identity(_meta: &std::fs::Metadata) -> u64 {
    0
}

fn locked(m: &Mutex<StepState>) -> MutexGuard<'_, StepState> {
    // A step computes everything before it writes; a panic in one leaves the files consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Error {
    fn from_io(source: std::io::Error, path: &Path) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl Log {
    /// The membership directory of `group` (created if missing). Only a writable log on disk
    /// has one: members in one process of an in-memory log need no files.
    pub fn group(&self, group: &str) -> Result<Group> {
        validate_name(group, false)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("join group {group:?}"),
            });
        }
        let Some(root) = self.dir() else {
            return Err(Error::ReadOnly {
                what: format!("join group {group:?} of an in-memory log"),
            });
        };
        let dir = root.join(MEMBERS_DIR).join(group);
        std::fs::create_dir_all(&dir).at(&dir)?;
        let path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .at(&path)?;
        Ok(Group {
            shared: Arc::new(GroupShared {
                name: group.to_owned(),
                dir,
                step: Mutex::new(StepState { lock, cached: None }),
                here: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// The groups with a membership directory under this log, by name.
    pub fn member_groups(&self) -> Result<Vec<String>> {
        let Some(root) = self.dir() else {
            return Ok(Vec::new());
        };
        let dir = root.join(MEMBERS_DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).at(&dir),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.at(&dir)?;
            if entry.file_type().at(&entry.path())?.is_dir()
                && let Some(name) = entry.file_name().to_str()
            {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// `group`'s members and record as they are now, changing nothing (a member whose lock is
    /// free is listed as not alive, not removed). `None` if the group has no membership
    /// directory. Works on a read-only log.
    pub fn describe_group(&self, group: &str) -> Result<Option<GroupView>> {
        validate_name(group, false)?;
        let Some(root) = self.dir() else {
            return Ok(None);
        };
        let dir = root.join(MEMBERS_DIR).join(group);
        if !dir.is_dir() {
            return Ok(None);
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = match File::open(&lock_path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).at(&lock_path),
        };
        if let Some(lock) = &lock {
            lock.lock_shared().at(&lock_path)?;
        }
        let mut members = BTreeMap::new();
        for (id, path) in member_files(&dir)? {
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).at(&path),
            };
            let alive = match file.try_lock_shared() {
                Ok(()) => false,
                Err(std::fs::TryLockError::WouldBlock) => true,
                Err(std::fs::TryLockError::Error(e)) => return Err(e).at(&path),
            };
            members.insert(id, (MemberRecord::read(&file, &path)?, alive));
        }
        let (generation, data) = read_state(&dir.join(STATE_FILE))?.unwrap_or_default();
        Ok(Some(GroupView {
            generation,
            members,
            data,
        }))
    }
}

impl Log {
    /// Removes every member of `group` (`riffle reset --force`), under the group lock: each is
    /// fenced from then on (its commits fail) and joins again as a new member. Returns their
    /// ids.
    pub fn remove_group_members(&self, group: &str) -> Result<Vec<String>> {
        let group = self.group(group)?;
        let shared = &group.shared;
        let state = locked(&shared.step);
        let lock_path = shared.dir.join(LOCK_FILE);
        state.lock.lock().at(&lock_path)?;
        let removed = (|| {
            let mut removed = Vec::new();
            for (id, path) in member_files(&shared.dir)? {
                match std::fs::remove_file(&path) {
                    Ok(()) => removed.push(id),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).at(&path),
                }
            }
            Ok(removed)
        })();
        state.lock.unlock().at(&lock_path)?;
        removed
    }
}

/// The member files of a group directory: `(member id, path)`, sorted by id.
fn member_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(MEMBER_SUFFIX)) else {
            continue;
        };
        files.push((id.to_owned(), entry.path()));
    }
    files.sort();
    Ok(files)
}

/// The state file's generation and record; `None` if it does not exist.
fn read_state(path: &Path) -> Result<Option<(u64, Vec<u8>)>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at(path),
    };
    decode_state(&bytes)
        .map(Some)
        .map_err(|(position, reason)| Error::Corrupt {
            path: path.to_path_buf(),
            position,
            reason,
        })
}

/// The generation in the state file's header, read alone (`None`: no file; a damaged header
/// reads as generation 0, which no record has, so the whole file is read and the damage named).
fn read_generation(path: &Path) -> Result<Option<u64>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at(path),
    };
    let mut header = [0u8; record::STATE_GENERATION_END];
    match record::read_at(&file, &mut header) {
        Ok(()) => Ok(Some(record::header_generation(&header).unwrap_or(0))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(Some(0)),
        Err(e) => Err(e).at(path),
    }
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Joins as `member` (an id unique to this incarnation: never reused), declared gone when
    /// its heartbeats stop for `session_timeout` or its process dies.
    pub fn join(&self, member: &str, session_timeout: Duration) -> Result<GroupMember> {
        validate_name(member, false)?;
        let session_timeout_ms = u32::try_from(session_timeout.as_millis()).unwrap_or(u32::MAX);
        let path = self.shared.dir.join(format!("{member}{MEMBER_SUFFIX}"));
        // Under the group lock: a step never sees a member file that is not locked yet.
        let state = locked(&self.shared.step);
        let lock_path = self.shared.dir.join(LOCK_FILE);
        self.shared.lock_group(&state)?;
        let joined = (|| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .at(&path)?;
            if file.try_lock().is_err() {
                return Err(Error::Fenced {
                    group: self.shared.name.clone(),
                    member: member.to_owned(),
                    reason: "its member file is locked by another handle".into(),
                });
            }
            let identity = identity(&file.metadata().at(&path)?);
            let file = Arc::new(file);
            let mut joined = GroupMember {
                group: self.clone(),
                id: member.to_owned(),
                path,
                file: file.clone(),
                identity,
                session_timeout_ms,
            };
            joined.heartbeat()?;
            self.shared
                .here
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(member.to_owned(), (file, session_timeout_ms));
            Ok(joined)
        })();
        state.lock.unlock().at(&lock_path)?;
        joined
    }
}

impl GroupMember {
    /// The member id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The group.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Records a heartbeat now: one positioned write to the member's file.
    pub fn heartbeat(&mut self) -> Result<()> {
        let record = MemberRecord::now(self.session_timeout_ms);
        write_at(&self.file, &record.encode()).at(&self.path)
    }

    fn fenced(&self, reason: &str) -> Error {
        Error::Fenced {
            group: self.group.shared.name.clone(),
            member: self.id.clone(),
            reason: reason.to_owned(),
        }
    }

    /// Whether this member's file is still the one it locked (not removed by a step that
    /// declared the member gone).
    fn still_member(&self) -> Result<bool> {
        match std::fs::metadata(&self.path) {
            Ok(meta) => Ok(identity(&meta) == self.identity),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).at(&self.path),
        }
    }

    /// One step: under the group lock, declares gone every member whose lock is free or whose
    /// session expired, records a heartbeat, and hands `f` the live members and the record;
    /// writes the record back if `f` changed it. [`Error::Fenced`] if this member was declared
    /// gone. Costs one directory listing, a lock try and a read per member, and a read of the
    /// record only when another process wrote it.
    pub fn step<T, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut Step) -> Result<T, E>,
    ) -> Result<T, E> {
        self.locked_step(f, false)
    }

    /// A step under the group lock; `leaving`: then the member's file is removed, in the same
    /// hold of the lock.
    fn locked_step<T, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut Step) -> Result<T, E>,
        leaving: bool,
    ) -> Result<T, E> {
        let shared = self.group.shared.clone();
        let mut state = locked(&shared.step);
        let lock_path = shared.dir.join(LOCK_FILE);
        shared.lock_group(&state)?;
        let result = self.step_locked(&shared, &mut state, f).and_then(|out| {
            if leaving {
                std::fs::remove_file(&self.path).at(&self.path)?;
            }
            Ok::<T, E>(out)
        });
        state.lock.unlock().at(&lock_path)?;
        result
    }

    fn step_locked<T, E: From<Error>>(
        &mut self,
        shared: &GroupShared,
        state: &mut StepState,
        f: impl FnOnce(&mut Step) -> Result<T, E>,
    ) -> Result<T, E> {
        if !self.still_member()? {
            return Err(self
                .fenced("a step declared it gone (its process died, or its session expired)")
                .into());
        }
        self.heartbeat()?;
        let now = now_ms();
        let mut members = BTreeMap::new();
        let mut departed = Vec::new();
        for (id, path) in member_files(&shared.dir)? {
            if id == self.id {
                members.insert(id, MemberRecord::now(self.session_timeout_ms));
                continue;
            }
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::from_io(e, &path).into()),
            };
            let free = match file.try_lock() {
                Ok(()) => true,
                Err(std::fs::TryLockError::WouldBlock) => false,
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::from_io(e, &path).into());
                }
            };
            let record = MemberRecord::read(&file, &path)?;
            let reason = if free {
                Some(Departure::Exited)
            } else {
                record.and_then(|r| {
                    let silent_ms = now.saturating_sub(r.heartbeat_ms);
                    (silent_ms > i64::from(r.session_timeout_ms)).then_some(
                        Departure::SessionExpired {
                            silent_ms,
                            session_timeout_ms: r.session_timeout_ms,
                        },
                    )
                })
            };
            match reason {
                Some(reason) => {
                    std::fs::remove_file(&path).at(&path)?;
                    tracing::info!(group = %shared.name, member = %id, ?reason, "declared a group member gone");
                    departed.push(Departed { member: id, reason });
                }
                None => {
                    // A member whose record is unreadable (a write torn by a crash of this
                    // very member would free its lock too) is alive while its lock is held.
                    members.insert(id, record.unwrap_or_default());
                }
            }
        }
        let state_path = shared.dir.join(STATE_FILE);
        let on_disk = read_generation(&state_path)?;
        let cached_is_current = match (&state.cached, on_disk) {
            (Some((cached, _)), Some(disk)) => *cached == disk,
            (None, None) => true,
            _ => false,
        };
        if !cached_is_current {
            state.cached = match read_state(&state_path) {
                Ok(read) => read,
                Err(e @ Error::Corrupt { .. }) if members.len() == 1 => {
                    tracing::warn!(group = %shared.name, error = %e, "the group's record is damaged and no other member lives (a machine crash loses unsynced membership): starting the group afresh");
                    None
                }
                Err(e) => return Err(e.into()),
            };
        }
        // The cached bytes are lent to the step, not copied.
        let (generation, data) = state.cached.take().unwrap_or_default();
        let mut step = Step {
            generation,
            members,
            departed,
            data,
            new_data: None,
        };
        let out = f(&mut step);
        let Step { data, new_data, .. } = step;
        state.cached = (generation > 0).then_some((generation, data));
        let out = out?;
        if let Some(new_data) = new_data {
            // After a fresh start over a damaged record, past its generation.
            let next = generation.max(on_disk.unwrap_or(0)) + 1;
            let tmp = shared.dir.join(format!("{STATE_FILE}.tmp"));
            let mut file = File::create(&tmp).at(&tmp)?;
            file.write_all(&encode_state(next, &new_data)).at(&tmp)?;
            drop(file);
            std::fs::rename(&tmp, &state_path).at(&state_path)?;
            state.cached = Some((next, new_data));
        }
        Ok(out)
    }

    /// Leaves the group: a last step (`f` removes the member from the record), then its file
    /// is removed.
    pub fn leave<T, E: From<Error>>(
        mut self,
        f: impl FnOnce(&mut Step) -> Result<T, E>,
    ) -> Result<T, E> {
        self.locked_step(f, true)
    }

    /// Holds the group lock shared and checks that this member is still in the group: a step
    /// cannot declare it gone until the returned guard is dropped. For commits.
    pub(crate) fn fence(&self) -> Result<Fence> {
        let path = self.group.shared.dir.join(LOCK_FILE);
        let lock = File::open(&path).at(&path)?;
        lock.lock_shared().at(&path)?;
        if !self.still_member()? {
            return Err(self.fenced(
                "a step declared it gone (its process died, or its session expired) and its tasks may run elsewhere; it must not commit",
            ));
        }
        Ok(Fence { _lock: lock })
    }
}

#[cfg(unix)]
fn write_at(file: &File, data: &[u8]) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, 0)
}

#[cfg(not(unix))]
fn write_at(file: &File, data: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(data)
}

#[cfg(test)]
mod tests;
