//! `riffle produce` never leaves the user guessing: a `--partitions` that differs from an
//! existing topic's count is an error naming both; a malformed or non-UTF-8 line stops it with
//! an error naming the line and exactly how many records before it were written (and they
//! are: `consume` shows them); `--help` says produce is not atomic; an I/O error names its file
//! and says its OS error once; a slow input is appended within the linger, before its end;
//! SIGTERM writes what was read and says how many records that was.

mod common;

use std::process::Output;

fn riffle(args: &[&str], stdin: &[u8]) -> Output {
    common::riffle_with_stdin(args, stdin)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn consumed(dir: &str) -> Vec<String> {
    let out = riffle(
        &[
            "consume",
            "--log-dir",
            dir,
            "--topic",
            "t",
            "--from-beginning",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_different_partition_count_is_an_error_naming_both_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    let first = riffle(
        &[
            "produce",
            "--log-dir",
            d,
            "--topic",
            "t",
            "--partitions",
            "5",
        ],
        b"a\t1\n",
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let again = riffle(
        &[
            "produce",
            "--log-dir",
            d,
            "--topic",
            "t",
            "--partitions",
            "3",
        ],
        b"b\t2\n",
    );
    let err = stderr(&again);
    assert!(!again.status.success(), "{err}");
    assert!(
        err.contains("5 partitions") && err.contains("3 requested"),
        "{err}"
    );
    // Without --partitions the existing count is used.
    let plain = riffle(&["produce", "--log-dir", d, "--topic", "t"], b"c\t3\n");
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(
        stderr(&plain).contains("(5 partitions)"),
        "{}",
        stderr(&plain)
    );
    assert_eq!(consumed(d), ["a\t1", "c\t3"]);
}

#[test]
fn a_malformed_line_says_how_many_records_before_it_were_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    let mut input = String::new();
    for i in 0..1000 {
        input.push_str(&format!("k{i}\tv{i}\n"));
    }
    input.push_str("no tab here\nk-after\tv\n");
    let out = riffle(
        &[
            "produce",
            "--log-dir",
            d,
            "--topic",
            "t",
            "--partitions",
            "4",
        ],
        input.as_bytes(),
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("line 1001"), "{err}");
    assert!(
        err.contains("the 1000 records before it were written"),
        "{err}"
    );
    let mut expected: Vec<String> = (0..1000).map(|i| format!("k{i}\tv{i}")).collect();
    expected.sort();
    assert_eq!(consumed(d), expected);
}

#[test]
fn invalid_utf8_says_which_line_and_how_many_records_were_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    let input = b"a\t1\nb\t2\nc\t\xff\xfe\nd\t4\n";
    let out = riffle(&["produce", "--log-dir", d, "--topic", "t"], input);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("line 3: not UTF-8"), "{err}");
    assert!(
        err.contains("the 2 records before it were written"),
        "{err}"
    );
    assert_eq!(consumed(d), ["a\t1", "b\t2"]);
}

#[test]
fn help_says_produce_is_not_atomic() {
    let out = riffle(&["produce", "--help"], b"");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Not atomic"), "{help}");
    assert!(help.contains("none from it on"), "{help}");
}

#[test]
fn an_io_error_names_the_file_and_says_its_os_error_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"x").expect("write");
    let out = riffle(
        &[
            "produce",
            "--log-dir",
            file.to_str().expect("utf-8"),
            "--topic",
            "t",
        ],
        b"a\t1\n",
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}

/// `riffle produce` reading from a pipe the test keeps open.
fn produce_from_pipe(d: &str, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "produce",
            "--log-dir",
            d,
            "--topic",
            "t",
            "--partitions",
            "2",
        ])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn riffle produce")
}

#[test]
fn a_slow_input_is_appended_within_the_linger_before_it_ends() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    let mut child = produce_from_pipe(d, &[]);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"a\t1\nb\t2\nc\t3\n").expect("write");
    stdin.flush().expect("flush");
    // The input is still open: the three records show up anyway (5 ms linger).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // The topic exists once produce opened the log.
        let seen =
            std::path::Path::new(d).join("topics").join("t").exists() && consumed(d).len() == 3;
        if seen {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "records not appended before the input ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stdin.write_all(b"d\t4\n").expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("wrote 4 records"), "{}", stderr(&out));
    assert_eq!(consumed(d), ["a\t1", "b\t2", "c\t3", "d\t4"]);
}

#[test]
fn sigterm_writes_what_was_read_and_says_how_many_records() {
    use std::io::Write;
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    // A linger of an hour: only the signal can make these records reach the log.
    let mut child = produce_from_pipe(d, &["--linger-ms", "3600000"]);
    let mut stdin = child.stdin.take().expect("stdin");
    let mut expected = Vec::new();
    for i in 0..1000 {
        stdin
            .write_all(format!("k{i}\tv{i}\n").as_bytes())
            .expect("write");
        expected.push(format!("k{i}\tv{i}"));
    }
    stdin.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(1500));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().expect("wait");
    drop(stdin);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("stopped by a signal"), "{err}");
    assert!(
        err.contains("the 1000 records read before it were written to t (and fsynced)"),
        "{err}"
    );
    expected.sort();
    assert_eq!(consumed(d), expected);
}
