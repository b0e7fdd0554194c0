//! A persistent store records its changelog position with its data (Kafka's KIP-1035), so a
//! store that does not match its task's `.checkpoint` is found out when the task opens: deleted,
//! rolled back to an older copy, or copied from elsewhere, each with the checkpoint kept. The
//! task restores what the store lacks, and the counts stay exact against a `HashMap` count of
//! every input record. (Before, the checkpoint alone said where a store stood: a rolled-back
//! store restored only the tail past the checkpoint and its counts came out low.)
//!
//! Every persistent store of an instance lives in one database, `<app dir>/stores/`, so the
//! files moved are that database's: all tasks' stores at once. A store of another task cannot be
//! copied into a task by moving files any more (the registry keys stores by task); a database
//! copied from another application, whose positions name its own changelogs, stands in for it.

mod common;

use std::path::{Path, PathBuf};

use common::{copy_dir, run_persistent_count as run, run_persistent_count_as};
use riffle::log::{Log, LogOptions};

/// `n` records over `keys` keys, every key in every batch (so each run updates every count).
fn input(n: usize, keys: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("k{}", i % keys), String::new()))
        .collect()
}

/// The directory of the application's one store database.
fn store_dir(state: &Path) -> PathBuf {
    state.join("durable").join("stores")
}

struct Fixture {
    _dir: tempfile::TempDir,
    state: PathBuf,
    log: Log,
    all: Vec<(String, String)>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        Fixture {
            _dir: dir,
            state,
            log,
            all: Vec::new(),
        }
    }

    /// Appends `n` records and runs the app over them.
    fn run_more(&mut self, n: usize) -> (u64, u64) {
        let records = input(n, 41);
        common::produce(&self.log, "in", 2, &records);
        self.all.extend(records);
        run(&self.log, &self.state)
    }

    fn assert_exact(&self, when: &str) {
        let model = common::count_model(self.all.iter().map(|(k, _)| k.as_str()));
        assert_eq!(common::latest_longs(&self.log, "out"), model, "{when}");
    }
}

#[test]
fn a_store_rolled_back_to_an_older_copy_restores_from_its_own_offset() {
    let mut f = Fixture::new();
    assert_eq!(f.run_more(3000), (3000, 0));
    let older = f._dir.path().join("older");
    copy_dir(&store_dir(&f.state), &older);
    assert_eq!(
        f.run_more(1000),
        (1000, 0),
        "a clean restart restores nothing"
    );
    // Back to the copy; the checkpoint (after the second run) stays.
    std::fs::remove_dir_all(store_dir(&f.state)).expect("remove");
    copy_dir(&older, &store_dir(&f.state));
    let (processed, restored) = f.run_more(500);
    assert_eq!(processed, 500);
    assert!(
        restored > 0,
        "the second run's changelog records are restored into the older copy"
    );
    f.assert_exact("after rolling the stores back");
    // The checkpoint follows the store: the next clean restart restores nothing.
    assert_eq!(f.run_more(100), (100, 0));
    f.assert_exact("after the run that followed");
}

#[test]
fn a_store_database_copied_from_another_application_is_wiped_and_restored() {
    let mut f = Fixture::new();
    assert_eq!(f.run_more(3000), (3000, 0));
    // Another application, same topology, its own log and input: its stores record positions in
    // its own changelogs.
    let other_log = Log::open(f._dir.path().join("other-log"), LogOptions::default()).expect("log");
    common::produce(&other_log, "in", 2, &input(700, 13));
    let other_state = f._dir.path().join("other-state");
    run_persistent_count_as("other", &other_log, &other_state);
    std::fs::remove_dir_all(store_dir(&f.state)).expect("remove");
    copy_dir(
        &other_state.join("other").join("stores"),
        &store_dir(&f.state),
    );
    let (processed, restored) = f.run_more(500);
    assert_eq!(processed, 500);
    assert!(
        restored > 0,
        "both tasks are restored from their own changelogs"
    );
    f.assert_exact("after copying another application's stores in");
}

#[test]
fn a_deleted_store_with_its_checkpoint_kept_is_restored_from_the_changelog_start() {
    let mut f = Fixture::new();
    assert_eq!(f.run_more(3000), (3000, 0));
    std::fs::remove_dir_all(store_dir(&f.state)).expect("remove");
    assert!(
        f.state.join("durable/0_0/.checkpoint").is_file()
            && f.state.join("durable/0_1/.checkpoint").is_file(),
        "the checkpoint stays"
    );
    let (processed, restored) = f.run_more(500);
    assert_eq!(processed, 500);
    assert!(restored > 0, "every task is restored from its changelog");
    f.assert_exact("after deleting the stores");
}
