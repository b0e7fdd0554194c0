//! `riffle consume --follow` keeps printing records as other processes append them, until
//! Ctrl-C, which ends it cleanly (exit status 0).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn produce(dir: &str, lines: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "produce",
            "--log-dir",
            dir,
            "--topic",
            "t",
            "--partitions",
            "3",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn produce");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("produce");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn follow_prints_what_other_processes_append_until_ctrl_c() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().to_str().expect("utf-8");
    produce(dir, "a\t1\n");
    let mut consume = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "consume",
            "--log-dir",
            dir,
            "--topic",
            "t",
            "--from-beginning",
            "--follow",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn consume");
    let stdout = consume.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let wait_for = |n: usize, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("consume --follow printed only {seen:?}"),
            }
        }
    };
    wait_for(1, &mut seen);
    for round in 0..3 {
        let lines: String = (0..5).map(|i| format!("k{round}-{i}\tv{i}\n")).collect();
        produce(dir, &lines);
        wait_for(1 + 5 * (round + 1), &mut seen);
    }
    seen.sort();
    let mut expected = vec!["a\t1".to_owned()];
    for round in 0..3 {
        expected.extend((0..5).map(|i| format!("k{round}-{i}\tv{i}")));
    }
    expected.sort();
    assert_eq!(seen, expected);
    let pid = consume.id().to_string();
    let killed = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = consume.wait().expect("wait");
    assert!(
        status.success(),
        "consume did not end cleanly on Ctrl-C: {status}"
    );
}
