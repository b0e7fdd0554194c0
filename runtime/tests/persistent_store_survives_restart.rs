//! With the persistent store, a restart reopens the stores from disk and restores only the
//! changelog's tail past the position each store recorded with its data; a corrupted checkpoint
//! costs nothing (the stores know where they stand), the checkpoint is written again, and the
//! counts stay right.

mod common;

use common::run_persistent_count as run;
use riffle::log::{Log, LogOptions};

#[test]
fn a_restart_restores_nothing_after_a_clean_close_and_counts_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let first: Vec<(String, String)> = (0..3000)
        .map(|i| (format!("k{}", i % 41), String::new()))
        .collect();
    common::produce(&log, "in", 2, &first);
    assert_eq!(run(&log, &state), (3000, 0));
    // Checkpoints exist for both tasks.
    assert!(state.join("durable/0_0/.checkpoint").exists());
    assert!(state.join("durable/0_1/.checkpoint").exists());
    let second: Vec<(String, String)> = (0..500)
        .map(|i| (format!("k{}", i % 59), String::new()))
        .collect();
    common::produce(&log, "in", 2, &second);
    let (processed, restored) = run(&log, &state);
    assert_eq!(
        (processed, restored),
        (500, 0),
        "clean close: the stores are current, nothing to restore"
    );
    let all = first.iter().chain(&second).map(|(k, _)| k.as_str());
    assert_eq!(common::latest_longs(&log, "out"), common::count_model(all));
}

#[test]
fn a_corrupted_checkpoint_restores_nothing_and_is_written_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let first: Vec<(String, String)> = (0..2000)
        .map(|i| (format!("k{}", i % 37), String::new()))
        .collect();
    common::produce(&log, "in", 2, &first);
    run(&log, &state);
    std::fs::write(state.join("durable/0_0/.checkpoint"), "0\n1\ngarbage").expect("corrupt it");
    let second: Vec<(String, String)> = (0..300)
        .map(|i| (format!("k{}", i % 37), String::new()))
        .collect();
    common::produce(&log, "in", 2, &second);
    let (processed, restored) = run(&log, &state);
    assert_eq!(processed, 300);
    assert_eq!(
        restored, 0,
        "task 0_0's store records its own changelog position"
    );
    let text = std::fs::read_to_string(state.join("durable/0_0/.checkpoint")).expect("read");
    assert!(
        !text.contains("garbage"),
        "the checkpoint was written again: {text}"
    );
    let all = first.iter().chain(&second).map(|(k, _)| k.as_str());
    assert_eq!(common::latest_longs(&log, "out"), common::count_model(all));
}
