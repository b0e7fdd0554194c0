//! `riffle reset` on the embedded log, as Kafka's `kafka-streams-application-reset`: after the
//! groupByKey-count sample counted its input, a reset (input offsets to the earliest, the
//! changelog deleted, the state directory wiped) makes its next run count everything again
//! from nothing — the counts equal a model of the input, not twice it; `--dry-run` changes
//! nothing; `--to-datetime` and `--to-latest` move the offsets to the first record at that time
//! and to the end; and a reset is refused, changing nothing, while the sample runs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::SeedableRng;

mod common;

use common::{APP, CHANGELOG, Counts, Fixture};

fn reset(fixture: &Fixture, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["reset", "--application-id", APP, "--log-dir"])
        .arg(&fixture.log_dir)
        .arg("--state-dir")
        .arg(&fixture.state_dir)
        .args(extra)
        .output()
        .expect("run riffle reset")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the sample until its input is drained; returns how many records it processed.
fn count(fixture: &Fixture) -> u64 {
    let out = fixture
        .sample("persistent", "at_least_once", &[])
        .output()
        .expect("run the sample");
    common::assert_clean_exit("the sample", &out);
    let text = stdout(&out);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("processed ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no 'processed N records' line: {text}"))
}

fn changelog_exists(fixture: &Fixture) -> bool {
    fixture.log_dir.join("topics").join(CHANGELOG).exists()
}

#[test]
fn after_a_reset_the_sample_counts_everything_again_from_nothing() {
    let fixture = Fixture::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed("reset"));
    let model = fixture.append_input(&mut rng, 2_000, 50);
    assert_eq!(count(&fixture), 2_000);
    assert_eq!(fixture.output_counts(), model);
    assert_eq!(fixture.committed_input(), 2_000);

    let dry = reset(&fixture, &["--dry-run"]);
    common::assert_clean_exit("reset --dry-run", &dry);
    let plan = stdout(&dry);
    for p in 0..common::PARTITIONS {
        assert!(
            plan.lines().any(
                |l| l.starts_with(&format!("would reset events-{p}: committed "))
                    && l.ends_with("-> 0")
            ),
            "{plan}"
        );
    }
    assert!(
        plan.contains(&format!("would delete internal topic {CHANGELOG}")),
        "{plan}"
    );
    assert!(plan.contains("would wipe local state"), "{plan}");
    assert_eq!(
        fixture.committed_input(),
        2_000,
        "a dry run changes nothing"
    );
    assert!(changelog_exists(&fixture));
    assert!(fixture.state_dir.join(APP).exists());

    let done = reset(&fixture, &[]);
    common::assert_clean_exit("reset", &done);
    assert_eq!(fixture.committed_input(), 0);
    assert!(!changelog_exists(&fixture), "the changelog is deleted");
    assert!(
        !fixture.state_dir.join(APP).exists(),
        "the local state is wiped"
    );

    // From scratch: every record again, and counts equal to the model, not twice it.
    assert_eq!(count(&fixture), 2_000);
    assert_eq!(fixture.output_counts(), model);
}

#[test]
fn reset_to_a_datetime_or_to_the_end_moves_the_input_offsets_there() {
    let fixture = Fixture::new();
    // Timestamps one second apart from 2024-01-01T00:00:00Z.
    let start = 1_704_067_200_000i64;
    let records: Vec<(String, i64)> = (0..1_000)
        .map(|i| (format!("key-{}", i % 30), start + i * 1_000))
        .collect();
    fixture.append_timestamped(&records);
    assert_eq!(count(&fixture), 1_000);

    // 2024-01-01T00:10:00Z: the records from the 600th on.
    let out = reset(&fixture, &["--to-datetime", "2024-01-01T00:10:00Z"]);
    common::assert_clean_exit("reset --to-datetime", &out);
    assert_eq!(count(&fixture), 400);
    let mut model = Counts::new();
    for (key, _) in &records[600..] {
        *model.entry(key.clone()).or_default() += 1;
    }
    assert_eq!(
        fixture.output_counts(),
        model,
        "counted from that time on only"
    );

    let out = reset(&fixture, &["--to-latest"]);
    common::assert_clean_exit("reset --to-latest", &out);
    assert_eq!(count(&fixture), 0, "nothing before the end");
    assert_eq!(fixture.committed_input(), 1_000);
}

#[test]
fn a_reset_is_refused_while_the_application_runs() {
    let fixture = Fixture::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed("reset-refused"));
    fixture.append_input(&mut rng, 500, 20);
    let mut sample = fixture
        .sample(
            "persistent",
            "at_least_once",
            &["--follow".into(), "--progress-every".into(), "100ms".into()],
        )
        .spawn()
        .expect("spawn the sample");
    let lines = sample.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(lines).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("the sample catches up");
        if line.contains(": 500 records processed,") && line.ends_with("caught up") {
            break;
        }
    }
    let committed = fixture.committed_input();
    let refused = reset(&fixture, &[]);
    assert!(!refused.status.success(), "{}", stdout(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "refused: process {} runs application {APP}",
            sample.id()
        )),
        "{stderr}"
    );
    assert_eq!(fixture.committed_input(), committed, "nothing changed");
    assert!(changelog_exists(&fixture));
    let stopped = Command::new("kill")
        .args(["-INT", &sample.id().to_string()])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let out = sample.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::assert_clean_exit("reset after the stop", &reset(&fixture, &[]));
}
