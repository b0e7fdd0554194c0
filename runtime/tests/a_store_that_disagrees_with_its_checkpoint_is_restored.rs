//! A persistent store records its changelog position with its data (Kafka's KIP-1035), so a
//! store that does not match its task's `.checkpoint` is found out when the task opens: deleted,
//! rolled back to an older copy, or copied from another task, each with the checkpoint kept. The
//! task restores what the store lacks, and the counts stay exact against a `HashMap` count of
//! every input record. (Before, the checkpoint alone said where a store stood: a rolled-back
//! store restored only the tail past the checkpoint and its counts came out low.)

mod common;

use std::path::{Path, PathBuf};

use common::run_persistent_count as run;
use riffle::log::{Log, LogOptions};

/// `n` records over `keys` keys, every key in every batch (so each run updates every count).
fn input(n: usize, keys: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("k{}", i % keys), String::new()))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The count store's directory of a task.
fn store_dir(state: &Path, task: &str) -> PathBuf {
    state.join("durable").join(task).join("fjall-ts")
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
    copy_dir(&store_dir(&f.state, "0_0"), &older);
    assert_eq!(
        f.run_more(1000),
        (1000, 0),
        "a clean restart restores nothing"
    );
    // Back to the copy; the checkpoint (after the second run) stays.
    std::fs::remove_dir_all(store_dir(&f.state, "0_0")).expect("remove");
    copy_dir(&older, &store_dir(&f.state, "0_0"));
    let (processed, restored) = f.run_more(500);
    assert_eq!(processed, 500);
    assert!(
        restored > 0,
        "the second run's changelog records are restored into the older copy"
    );
    f.assert_exact("after rolling task 0_0's store back");
    // The checkpoint follows the store: the next clean restart restores nothing.
    assert_eq!(f.run_more(100), (100, 0));
    f.assert_exact("after the run that followed");
}

#[test]
fn a_store_copied_from_another_task_is_wiped_and_restored() {
    let mut f = Fixture::new();
    assert_eq!(f.run_more(3000), (3000, 0));
    std::fs::remove_dir_all(store_dir(&f.state, "0_0")).expect("remove");
    copy_dir(&store_dir(&f.state, "0_1"), &store_dir(&f.state, "0_0"));
    let (processed, restored) = f.run_more(500);
    assert_eq!(processed, 500);
    assert!(restored > 0, "task 0_0 is restored from its own changelog");
    f.assert_exact("after copying task 0_1's store into task 0_0");
}

#[test]
fn a_deleted_store_with_its_checkpoint_kept_is_restored_from_the_changelog_start() {
    let mut f = Fixture::new();
    assert_eq!(f.run_more(3000), (3000, 0));
    std::fs::remove_dir_all(store_dir(&f.state, "0_0")).expect("remove");
    assert!(
        f.state.join("durable/0_0/.checkpoint").is_file(),
        "the checkpoint stays"
    );
    let (processed, restored) = f.run_more(500);
    assert_eq!(processed, 500);
    assert!(restored > 0, "task 0_0 is restored from its changelog");
    f.assert_exact("after deleting task 0_0's store");
}
