//! The process lock (`.lock`, holding the holder's pid) and the stable process id.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::checkpoint::Durability;
use crate::error::{Error, IoContext, Result};

pub(crate) const LOCK_FILE: &str = ".lock";
pub(crate) const PROCESS_METADATA_FILE: &str = "process-metadata";

/// An exclusive OS lock on `<app dir>/.lock`; released when dropped (the file is closed).
#[derive(Debug)]
pub(crate) struct ProcessLock {
    _file: File,
}

fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .ctx("open lock file", path)
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

impl ProcessLock {
    /// Takes the lock or fails with [`Error::Locked`] naming the holder's pid.
    pub(crate) fn acquire(path: &Path) -> Result<Self> {
        let mut file = open_lock_file(path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    path: path.to_owned(),
                    holder: read_pid(&mut file),
                });
            }
            Err(TryLockError::Error(e)) => return Err(e).ctx("lock", path),
        }
        file.set_len(0).ctx("truncate lock file", path)?;
        file.seek(SeekFrom::Start(0)).ctx("seek lock file", path)?;
        // No fsync: the pid is only informational, and the OS lock dies with the process anyway.
        writeln!(file, "{}", std::process::id()).ctx("write pid to", path)?;
        Ok(Self { _file: file })
    }

    /// The pid of the process holding the lock at `path`, or `None` if it is free.
    pub(crate) fn holder(path: &Path) -> Result<Option<u32>> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).ctx("open lock file", path),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(None),
            // Locked, but the pid may not be written yet: report the lock without a pid as 0.
            Err(TryLockError::WouldBlock) => Ok(Some(read_pid(&mut file).unwrap_or(0))),
            Err(TryLockError::Error(e)) => Err(e).ctx("lock", path),
        }
    }
}

/// Reads the process id from `process-metadata`, creating it once if absent.
pub(crate) fn load_or_create_process_id(app_dir: &Path, durability: Durability) -> Result<String> {
    if let Some(id) = read_process_id(app_dir)? {
        return Ok(id);
    }
    let id = random_uuid();
    let path = app_dir.join(PROCESS_METADATA_FILE);
    let tmp: PathBuf = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).ctx("create", &tmp)?;
        writeln!(f, "{{\"processId\":\"{id}\"}}").ctx("write", &tmp)?;
        if durability == Durability::Sync {
            f.sync_all().ctx("fsync", &tmp)?;
        }
    }
    fs::rename(&tmp, &path).ctx("rename into place", &path)?;
    if durability == Durability::Sync {
        crate::checkpoint::sync_dir(app_dir)?;
    }
    Ok(id)
}

/// Reads the process id without creating anything; `Ok(None)` when there is no file yet.
pub(crate) fn read_process_id(app_dir: &Path) -> Result<Option<String>> {
    let path = app_dir.join(PROCESS_METADATA_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => parse_process_metadata(&text)
            .map(Some)
            .ok_or(Error::CorruptProcessMetadata {
                path,
                reason: format!(
                    "expected {{\"processId\":\"<uuid>\"}}, found {:?}",
                    text.trim()
                ),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).ctx("read", &path),
    }
}

fn parse_process_metadata(text: &str) -> Option<String> {
    let rest = text.trim().strip_prefix('{')?.strip_suffix('}')?.trim();
    let (key, value) = rest.split_once(':')?;
    if key.trim() != "\"processId\"" {
        return None;
    }
    let id = value.trim().strip_prefix('"')?.strip_suffix('"')?;
    is_uuid(id).then(|| id.to_owned())
}

/// A UUID in its hyphenated form (`8-4-4-4-12` hex digits), as `process-metadata` holds it.
fn is_uuid(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::try_parse(s).is_ok()
}

/// A random version-4 UUID, hyphenated in lower case.
pub(crate) fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_well_formed_and_distinct() {
        let a = random_uuid();
        let b = random_uuid();
        assert!(is_uuid(&a), "{a}");
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, b);
        let meta = format!("{{\"processId\":\"{a}\"}}\n");
        assert_eq!(parse_process_metadata(&meta), Some(a));
        assert_eq!(parse_process_metadata("{\"processId\":\"nope\"}"), None);
        // The hyphenated form only, in either case, as written by older riffles.
        assert!(is_uuid("0B7C2E4A-1D3F-4A5B-8C6D-7E8F9A0B1C2D"));
        assert!(!is_uuid("0b7c2e4a1d3f4a5b8c6d7e8f9a0b1c2d"));
        assert!(!is_uuid("{0b7c2e4a-1d3f-4a5b-8c6d-7e8f9a0b1c2}"));
    }
}
