//! Checkpoint files: round trip through the state directory, and every way a file can be corrupt.

use std::fs;
use std::path::Path;

use proptest::prelude::*;
use riffle_state_dir::{Checkpoint, Error, StateDirectory, TaskId, TopicPartition};

fn cp(entries: &[(&str, u32, u64)]) -> Checkpoint {
    entries
        .iter()
        .map(|(t, p, o)| (TopicPartition::new(*t, *p), *o))
        .collect()
}

#[test]
fn written_checkpoint_reads_back_in_kafkas_text_format() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = StateDirectory::open(root.path(), "app")?;
    let task = TaskId::new(1, 2);
    let written = cp(&[("app-b-changelog", 2, 7), ("app-a-changelog", 2, 100)]);
    dir.write_checkpoint(task, &written)?;

    let text = fs::read_to_string(dir.checkpoint_path(task)).expect("file exists");
    assert_eq!(text, "0\n2\napp-a-changelog 2 100\napp-b-changelog 2 7\n");
    assert_eq!(dir.read_checkpoint(task)?, Some(written));
    assert_eq!(dir.local_offsets().get(task), Some(107));
    assert!(!dir.checkpoint_path(task).with_extension("tmp").exists());

    assert_eq!(
        dir.read_checkpoint(TaskId::new(9, 9))?,
        None,
        "no file is not an error"
    );
    Ok(())
}

#[test]
fn every_corruption_is_an_error_naming_the_file() {
    let path = Path::new("/state/app/0_1/.checkpoint");
    for (text, why) in [
        ("", "empty"),
        ("1\n0\n", "unknown version"),
        ("0\n", "no count"),
        ("0\nx\n", "bad count"),
        ("0\n2\na 0 5\n", "truncated"),
        ("0\n1\na 0\n", "missing field"),
        ("0\n1\na 0 5 6\n", "extra field"),
        ("0\n1\na x 5\n", "bad partition"),
        ("0\n1\na 0 five\n", "bad offset"),
        ("0\n1\na 0 -7\n", "negative offset"),
        ("0\n1\na 0 5\nb 0 6\n", "more entries than counted"),
        ("0\n2\na 0 5\na 0 6\n", "duplicate"),
    ] {
        match Checkpoint::parse(text, path) {
            Err(e @ Error::CorruptCheckpoint { .. }) => {
                assert!(
                    e.to_string().contains("/state/app/0_1/.checkpoint"),
                    "{why}: {e}"
                );
            }
            other => panic!("{why}: expected a corrupt-checkpoint error, got {other:?}"),
        }
    }
}

#[test]
fn corrupt_checkpoint_makes_the_task_unknown_at_open_and_on_read() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let (good, bad) = (TaskId::new(0, 0), TaskId::new(0, 1));
    {
        let dir = StateDirectory::open(root.path(), "app")?;
        dir.write_checkpoint(good, &cp(&[("c", 0, 10)]))?;
        dir.write_checkpoint(bad, &cp(&[("c", 1, 20)]))?;
        // Truncate `bad` behind the directory's back, as a crash without fsync might.
        fs::write(dir.checkpoint_path(bad), "0\n1\n").expect("truncate");
    }
    let dir = StateDirectory::open(root.path(), "app")?;
    assert_eq!(dir.local_offsets().get(good), Some(10));
    assert_eq!(
        dir.local_offsets().get(bad),
        None,
        "corrupt: unknown, not a guess"
    );
    let err = dir.read_checkpoint(bad).expect_err("corrupt");
    assert!(
        err.to_string()
            .contains(&format!("0_1{}.checkpoint", std::path::MAIN_SEPARATOR))
    );

    // And a task whose file goes bad while open is dropped from the map on the next read.
    fs::write(dir.checkpoint_path(good), "garbage").expect("overwrite");
    assert!(dir.read_checkpoint(good).is_err());
    assert_eq!(dir.local_offsets().get(good), None);
    Ok(())
}

#[test]
fn deleting_a_task_dir_forgets_its_offsets() -> Result<(), Error> {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = StateDirectory::open(root.path(), "app")?;
    let task = TaskId::new(3, 4);
    dir.write_checkpoint(task, &cp(&[("c", 4, 1)]))?;
    assert_eq!(dir.list_task_dirs()?, [task]);
    let v = dir.local_offsets().version();
    dir.delete_task_dir(task)?;
    assert_eq!(dir.list_task_dirs()?, []);
    assert_eq!(dir.local_offsets().get(task), None);
    assert_eq!(dir.local_offsets().version(), v + 1);
    dir.delete_task_dir(task)?; // already gone: fine, and nothing changes
    assert_eq!(dir.local_offsets().version(), v + 1);
    Ok(())
}

#[test]
fn topic_names_that_cannot_be_written_are_refused() {
    let err = cp(&[("has space", 0, 1)])
        .write(Path::new("/nonexistent/.checkpoint"))
        .expect_err("refused before any I/O");
    assert!(matches!(err, Error::InvalidCheckpoint { .. }), "{err}");
    let err = cp(&[("c", 0, u64::MAX)])
        .write(Path::new("/nonexistent/.checkpoint"))
        .expect_err("Kafka offsets are i64");
    assert!(err.to_string().contains("exceeds i64::MAX"), "{err}");
}

proptest! {
    #[test]
    fn any_checkpoint_round_trips_through_text(
        entries in proptest::collection::btree_map(
            ("[a-z][a-z0-9._-]{0,20}", 0u32..64),
            any::<u64>(),
            0..8,
        )
    ) {
        let cp: Checkpoint = entries
            .iter()
            .map(|((t, p), o)| (TopicPartition::new(t.clone(), *p), *o))
            .filter(|(_, o)| i64::try_from(*o).is_ok())
            .collect();
        let parsed = Checkpoint::parse(&cp.to_text(), Path::new("x"));
        prop_assert_eq!(parsed.ok(), Some(cp));
    }
}
