//! Two `riffle sample group-by-key-count --follow` started as a new user would — the same
//! application id on one log, each with its own `--state-dir` — form one group: each processes a
//! share of the input and together they count every record once (the counts equal a model).
//! `riffle groups` lists the group with both instances, `--describe` their tasks; `riffle reset`
//! is refused while they run, naming them, and goes through once they stopped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::SeedableRng;

mod common;

use common::{APP, Fixture, riffle_with_stdin};

/// Starts an instance with state directory `state`; its progress lines go to the channel.
fn instance(fixture: &Fixture, state: &str, tx: mpsc::Sender<(usize, String)>, n: usize) -> Child {
    let cmd = fixture.sample(
        "persistent",
        "at_least_once",
        &["--follow".into(), "--progress-every".into(), "100ms".into()],
    );
    // Replace the fixture's state directory with this instance's own.
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut own = Command::new(cmd.get_program());
    let mut next_is_state = false;
    for arg in args {
        if next_is_state {
            own.arg(fixture.state_dir.join(state));
            next_is_state = false;
            continue;
        }
        next_is_state = arg == "--state-dir";
        own.arg(arg);
    }
    own.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = own.spawn().expect("spawn the sample");
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((n, line)).is_err() {
                return;
            }
        }
    });
    child
}

/// The records instance `n` said it processed in its last progress line.
fn processed(last: &[String; 2], n: usize) -> u64 {
    last[n]
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

#[test]
fn two_instances_split_the_tasks_count_once_and_block_a_reset() {
    let fixture = Fixture::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed("two instances"));
    // The topics exist before the instances start (both would otherwise create them).
    let mut model = fixture.append_input(&mut rng, 100, 50);
    let (tx, rx) = mpsc::channel();
    let mut a = instance(&fixture, "a", tx.clone(), 0);
    let mut b = instance(&fixture, "b", tx, 1);
    std::thread::sleep(Duration::from_secs(2));
    for _ in 0..10 {
        common::merge(&mut model, &fixture.append_input(&mut rng, 2_000, 50));
    }
    let total: u64 = model.values().map(|&n| n as u64).sum();
    let mut last = [String::new(), String::new()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while processed(&last, 0) + processed(&last, 1) < total {
        let left = deadline.saturating_duration_since(Instant::now());
        let (n, line) = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the instances did not process {total} records: {last:?}"));
        if line.contains("records processed") {
            last[n] = line;
        }
    }
    let (pa, pb) = (processed(&last, 0), processed(&last, 1));
    assert_eq!(pa + pb, total, "every record processed once: {last:?}");
    assert!(pa > 0 && pb > 0, "both instances took tasks: {last:?}");

    let log_dir = fixture.log_dir.to_str().expect("utf-8 path");
    let groups = riffle_with_stdin(&["groups", "--log-dir", log_dir], b"");
    let listing = String::from_utf8_lossy(&groups.stdout);
    let row = listing
        .lines()
        .find(|l| l.starts_with(APP))
        .unwrap_or_else(|| panic!("no row for {APP}: {listing}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[1..3],
        ["4", "2"],
        "4 members (2 threads each) in 2 instances: {row}"
    );
    let described = riffle_with_stdin(&["groups", "--log-dir", log_dir, "--describe", APP], b"");
    let text = String::from_utf8_lossy(&described.stdout);
    for task in ["0_0", "0_1", "0_2", "0_3"] {
        assert_eq!(
            text.matches(&format!("ACTIVE   {task}")).count()
                + text.matches(&format!(", {task} (")).count(),
            1,
            "{task} active in exactly one member:\n{text}"
        );
    }
    let reset = ["reset", "--application-id", APP, "--log-dir", log_dir];
    let refused = riffle_with_stdin(&reset, b"");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "reset refused while instances run"
    );
    for child in [&a, &b] {
        assert!(
            err.contains(&format!("pid {}", child.id())),
            "the refusal names pid {}: {err}",
            child.id()
        );
    }
    for child in [&mut a, &mut b] {
        let pid = child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(child.wait().expect("wait").success());
    }
    assert_eq!(fixture.output_counts(), model, "the counts are the model's");
    let state = fixture.state_dir.join("a");
    let reset_ok = riffle_with_stdin(
        &[
            "reset",
            "--application-id",
            APP,
            "--log-dir",
            log_dir,
            "--state-dir",
            state.to_str().expect("utf-8"),
        ],
        b"",
    );
    assert!(
        reset_ok.status.success(),
        "reset once stopped: {}",
        String::from_utf8_lossy(&reset_ok.stderr)
    );
}
