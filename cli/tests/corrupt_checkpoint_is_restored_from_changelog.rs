//! A corrupt checkpoint. After a clean run with the persistent store, one
//! task's `.checkpoint` is cut in half, another's is overwritten with garbage and a third's is
//! deleted (its store is still on disk). The next run, over more input, warns naming the
//! unreadable files and goes on from the changelog position each store recorded with its data
//! (so nothing is lost with the checkpoint): the counts are exact (the runs are clean), and
//! every task has a valid checkpoint again afterwards.

mod common;

use std::process::Command;

use common::{APP, Fixture, assert_exact, merge, rng, run_to_end, seed};

#[test]
fn a_corrupt_or_missing_checkpoint_is_restored_from_the_changelog_and_counts_stay_exact() {
    corrupt_checkpoints("at_least_once");
}

#[test]
fn a_corrupt_or_missing_checkpoint_is_restored_from_the_changelog_under_exactly_once() {
    corrupt_checkpoints("exactly_once");
}

fn corrupt_checkpoints(guarantee: &str) {
    let seed = seed(&format!("corrupt checkpoint, {guarantee}"));
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    let args = ["--threads", "2", "--commit-interval-ms", "20"].map(String::from);

    let mut model = fixture.append_input(&mut rng, 8_000, 300);
    run_to_end(
        "the first run",
        fixture.sample("persistent", guarantee, &args),
    );
    assert_exact(&model, &fixture.output_counts(), "after the first run");

    let checkpoint = |task: &str| fixture.task_dir(task).join(".checkpoint");
    for task in ["0_0", "0_1", "0_2", "0_3"] {
        assert!(checkpoint(task).is_file(), "no checkpoint for {task}");
    }
    let text = std::fs::read(checkpoint("0_0")).expect("read 0_0's checkpoint");
    std::fs::write(checkpoint("0_0"), &text[..text.len() / 2]).expect("truncate");
    std::fs::write(checkpoint("0_1"), b"\x00\xffnot a checkpoint\n7\n").expect("garbage");
    std::fs::remove_file(checkpoint("0_2")).expect("delete 0_2's checkpoint");

    merge(&mut model, &fixture.append_input(&mut rng, 8_000, 300));
    let stderr = run_to_end(
        "the run after the corruption",
        fixture.sample("persistent", guarantee, &args),
    );
    for task in ["0_0", "0_1"] {
        let path = checkpoint(task).display().to_string();
        assert!(
            stderr.contains(&path),
            "seed {seed}: no warning names {path}:\n{stderr}"
        );
    }
    assert_exact(
        &model,
        &fixture.output_counts(),
        &format!("seed {seed}: after the run that restored the corrupt tasks"),
    );

    // The restored tasks checkpointed again: a heartbeat reports all four.
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["state", "inspect", "--state-dir"])
        .arg(&fixture.state_dir)
        .args(["--application-id", APP, "--json"])
        .output()
        .expect("run riffle state inspect");
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let offsets = report["heartbeat_task_offsets"]
        .as_object()
        .expect("heartbeat_task_offsets");
    assert_eq!(offsets.len(), 4, "{report}");
}
