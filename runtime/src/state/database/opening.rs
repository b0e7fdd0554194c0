//! Opening the database: what a process killed while creating it left behind, the errors that
//! name the file fjall could not read and the way out, and the keyspaces found deleted. See the
//! module documentation of `state::database`.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{KV_KEYSPACE, NEXT_KEY, POSITION_PREFIX, REGISTRY_KEYSPACE, StoreError, delete_prefix};

/// The key in `kv` that says it is the keyspace the registry's positions describe: the prefix of
/// the store id `u32::MAX`, which is never given.
const KV_MARKER: [u8; 4] = u32::MAX.to_be_bytes();

/// The way out of a damaged database in `dir`, for an error's end.
pub(crate) fn way_out(dir: &Path) -> String {
    format!(
        "the stores hold nothing their changelogs do not: stop the application, delete {} and \
         start it again, and every store restores from its changelog (a global store from its \
         topic)",
        dir.display()
    )
}

/// What failed opening the database in `dir`, naming the file concerned, and the way out.
pub(super) fn open_error(
    dir: &Path,
    e: &dyn std::fmt::Display,
    fjall: Option<&fjall::Error>,
) -> StoreError {
    let files = |ext: &str| -> String {
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == ext))
            .map(|path| path.display().to_string())
            .collect();
        found.sort();
        if found.is_empty() {
            format!("{}/*.{ext}", dir.display())
        } else {
            found.join(", ")
        }
    };
    let what = match fjall {
        Some(fjall::Error::JournalRecovery(_) | fjall::Error::InvalidTrailer) => {
            format!("its journal ({}) is damaged", files("jnl"))
        }
        Some(fjall::Error::InvalidTag(_) | fjall::Error::Decompress(_)) => {
            format!(
                "its journal ({}) or a table under {} is damaged",
                files("jnl"),
                dir.join(KEYSPACES_DIR).display()
            )
        }
        Some(fjall::Error::InvalidVersion(_)) => format!(
            "its format marker {} is damaged, or of a fjall version this build cannot read",
            dir.join(VERSION_MARKER).display()
        ),
        Some(fjall::Error::Storage(_) | fjall::Error::Unrecoverable) => format!(
            "a keyspace under {} is damaged or incomplete",
            dir.join(KEYSPACES_DIR).display()
        ),
        Some(fjall::Error::Locked) => {
            format!("another process holds {}", dir.join("lock").display())
        }
        Some(fjall::Error::Io(io)) if io.kind() == std::io::ErrorKind::AlreadyExists => format!(
            "fjall found a file it was about to create under {} (a journal or a keyspace of a \
             database whose files were deleted in part)",
            dir.display()
        ),
        _ => format!("the database in {} cannot be opened", dir.display()),
    };
    StoreError::Backend {
        store: "(every store)".into(),
        path: dir.display().to_string(),
        reason: format!("{what}: {e}; {}", way_out(dir)),
    }
}

/// fjall's marker of a database it finished creating: written and synced last, after the
/// lock file, `keyspaces/` and the first journal `0.jnl`.
const VERSION_MARKER: &str = "version";
/// Where fjall keeps a keyspace's directory.
const KEYSPACES_DIR: &str = "keyspaces";

/// Removes what a process killed while it created the database in `dir` left behind. fjall
/// creates `0.jnl` before its `version` marker and, finding no marker, creates the database
/// again, which fails on the existing journal ("File exists") at every later start. A database
/// without its marker (or with an empty one, killed before the marker's header was written)
/// was never opened, so nothing was ever written to it: that is checked (no keyspace
/// directory, no journal other than `0.jnl`, no other file but the lock) before anything is
/// removed, and anything else is an error naming the file, never wiped.
pub(super) fn clear_unfinished_creation(dir: &Path) -> std::io::Result<()> {
    let marker = dir.join(VERSION_MARKER);
    match std::fs::metadata(&marker) {
        Ok(m) if m.len() > 0 => return Ok(()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut leftovers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        match name.to_str() {
            Some(KEYSPACES_DIR) if std::fs::read_dir(&path)?.next().is_none() => {}
            Some("0.jnl" | "lock" | VERSION_MARKER) => {}
            _ => {
                return Err(std::io::Error::other(format!(
                    "{} has no fjall version marker ({} is missing or empty) but holds {}: \
                     not a database riffle created, or one damaged; refusing to open or \
                     remove it",
                    dir.display(),
                    marker.display(),
                    path.display()
                )));
            }
        }
        leftovers.push(path);
    }
    if leftovers.is_empty() {
        return Ok(());
    }
    tracing::warn!(path = %dir.display(), files = leftovers.len(), "the store database was never finished (a process was killed while creating it): removing what it left to create it again");
    for path in leftovers {
        if path.is_dir() {
            std::fs::remove_dir(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Refuses a directory under `<dir>/keyspaces` whose name is not a number: fjall's recovery
/// panics on one.
pub(super) fn check_keyspace_names(dir: &Path) -> std::io::Result<()> {
    let keyspaces = dir.join(KEYSPACES_DIR);
    let entries = match std::fs::read_dir(&keyspaces) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let numbered = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.parse::<u64>().is_ok());
        if !numbered && entry.file_type()?.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a keyspace fjall wrote (keyspaces are numbered)",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

/// Finds out a keyspace whose directory was deleted (fjall opens the database without it, as a
/// new, empty keyspace) and makes the stores restore what it held, with a warning naming the
/// directory:
///
/// - `kv` without its marker, empty, while the registry holds positions: the positions are
///   dropped, so every key-value store restores from its changelog's start (a position over
///   missing data would restore only the changelog's tail: state lost without a word);
/// - the registry without its next id while `kv` or a segmented store holds data: the ids and
///   positions are gone, so the data is dropped, and every store restores from its changelog.
///
/// Then `kv` gets its marker. A segmented store keeps its position in its own meta keyspace:
/// that one deleted, its segments hold data without a position, which the task wipes and
/// restores.
pub(super) fn check_keyspaces(
    dir: &Path,
    db: &Database,
    kv: &Keyspace,
    registry: &Keyspace,
) -> Result<(), fjall::Error> {
    let keyspaces = dir.join(KEYSPACES_DIR);
    // The marker sorts last: any other first key is a store's.
    let first = kv.first_key_value().map(|g| g.key()).transpose()?;
    let stores_hold_data = first.as_ref().is_some_and(|k| **k != KV_MARKER)
        || db.list_keyspace_names().iter().any(|n| n.starts_with("w"));
    let registry_lost = registry.get(NEXT_KEY)?.is_none() && stores_hold_data;
    if registry_lost {
        tracing::warn!(path = %keyspaces.display(), "the store registry (keyspace {REGISTRY_KEYSPACE:?}) is missing (its directory under the path deleted, or a crash before its first sync) while stores hold data: dropping every store's data, so that every store restores from its changelog");
        delete_prefix(db, kv, &[])?;
        for name in db.list_keyspace_names() {
            if name.starts_with("w") {
                let handle = db.keyspace(&name, KeyspaceCreateOptions::default)?;
                db.delete_keyspace(handle)?;
            }
        }
    } else if !kv.contains_key(KV_MARKER)? {
        let positioned = registry.prefix(POSITION_PREFIX).next().is_some();
        if positioned && first.is_none() {
            tracing::warn!(path = %keyspaces.display(), "the key-value stores' keyspace ({KV_KEYSPACE:?}) is missing, its directory under the path deleted, while the registry holds their changelog positions: dropping the positions, so that every key-value store restores from its changelog's start");
            delete_prefix(db, registry, POSITION_PREFIX)?;
        }
    } else {
        return Ok(());
    }
    kv.insert(KV_MARKER, &b""[..])?;
    db.persist(PersistMode::SyncAll)
}
