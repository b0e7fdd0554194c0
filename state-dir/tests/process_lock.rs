//! One process per state directory; a stable process id; cleanup of unowned task directories.

use std::time::Duration;

use riffle_state_dir::{Checkpoint, Error, StateDirectory, TaskId, TopicPartition};

#[test]
fn second_open_fails_naming_the_holders_pid_until_the_first_is_dropped() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let first = StateDirectory::open(root.path(), "app")?;

    let err = StateDirectory::open(root.path(), "app").expect_err("locked");
    let pid = std::process::id();
    assert!(
        matches!(err, Error::Locked { holder: Some(p), .. } if p == pid),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("locked by process {pid}")),
        "{err}"
    );
    assert_eq!(StateDirectory::lock_holder(root.path(), "app")?, Some(pid));

    // Another application id is another directory, with its own lock.
    let other = StateDirectory::open(root.path(), "other-app")?;
    drop(other);

    drop(first);
    assert_eq!(StateDirectory::lock_holder(root.path(), "app")?, None);
    assert_eq!(
        StateDirectory::lock_holder(root.path(), "never-opened")?,
        None
    );
    StateDirectory::open(root.path(), "app").map(drop)
}

#[test]
fn process_id_is_a_uuid_generated_once() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let id = StateDirectory::open(root.path(), "app")?
        .process_id()
        .to_owned();
    assert_eq!(id.len(), 36);
    assert_eq!(id.matches('-').count(), 4);
    let again = StateDirectory::open(root.path(), "app")?
        .process_id()
        .to_owned();
    assert_eq!(id, again);
    let other = StateDirectory::open(root.path(), "other")?
        .process_id()
        .to_owned();
    assert_ne!(id, other);

    std::fs::write(root.path().join("app").join("process-metadata"), "junk").expect("write");
    let err = StateDirectory::open(root.path(), "app").expect_err("corrupt");
    assert!(err.to_string().contains("process-metadata"), "{err}");
    Ok(())
}

#[test]
fn cleanup_deletes_only_unowned_task_dirs_past_the_delay() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = StateDirectory::open(root.path(), "app")?;
    let (owned, released, never) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(0, 2));
    let cp: Checkpoint = [(TopicPartition::new("c", 0), 5)].into_iter().collect();
    for t in [owned, released, never] {
        dir.write_checkpoint(t, &cp)?;
    }
    assert!(dir.try_lock_task(owned, "stream-thread-1"));
    assert!(
        !dir.try_lock_task(owned, "stream-thread-2"),
        "one owner at a time"
    );
    assert!(dir.try_lock_task(released, "stream-thread-2"));
    dir.unlock_task(released, "stream-thread-2");

    // Everything was just touched: a long delay keeps it all.
    assert_eq!(
        dir.clean_unowned_task_dirs_older_than(Duration::from_secs(3600))?,
        []
    );
    // With no delay, only the unowned directories go, and their offsets with them.
    assert_eq!(
        dir.clean_unowned_task_dirs_older_than(Duration::ZERO)?,
        [released, never]
    );
    assert_eq!(dir.list_task_dirs()?, [owned]);
    assert_eq!(dir.local_offsets().get(released), None);
    assert_eq!(dir.local_offsets().get(owned), Some(5));
    assert_eq!(dir.task_owner(owned).as_deref(), Some("stream-thread-1"));
    Ok(())
}

#[test]
fn inspect_reads_a_locked_directory_without_touching_it() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = StateDirectory::open(root.path(), "app")?;
    let cp: Checkpoint = [(TopicPartition::new("c", 0), 9)].into_iter().collect();
    dir.write_checkpoint(TaskId::new(0, 0), &cp)?;
    dir.task_dir(TaskId::new(0, 1))?; // no checkpoint yet
    std::fs::create_dir(root.path().join("app").join("not-a-task")).expect("mkdir");

    let seen = riffle_state_dir::inspect(root.path(), "app")?;
    assert_eq!(seen.lock_holder, Some(std::process::id()));
    assert_eq!(seen.process_id.as_deref(), Some(dir.process_id()));
    let tasks: Vec<_> = seen
        .tasks
        .iter()
        .map(|(t, cp)| (*t, cp.as_ref().ok().cloned()))
        .collect();
    assert_eq!(
        tasks,
        [
            (TaskId::new(0, 0), Some(Some(cp))),
            (TaskId::new(0, 1), Some(None))
        ]
    );
    Ok(())
}
