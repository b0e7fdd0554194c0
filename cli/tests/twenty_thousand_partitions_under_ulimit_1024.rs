//! A 20,000-partition topic is produced to and consumed from by `riffle` processes limited to
//! 1,024 open files (`ulimit -n 1024`): the log keeps at most `max_open_files` (512) segment,
//! index and lock files open, whatever the partition count.

use std::process::Command;

fn under_ulimit(script: &str, dir: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n 1024 && {script}"))
        .arg(env!("CARGO_BIN_EXE_riffle"))
        .arg(dir)
        .output()
        .expect("run sh")
}

#[test]
fn a_twenty_thousand_partition_topic_is_produced_and_consumed_under_ulimit_1024() {
    let root = tempfile::tempdir().expect("tempdir");
    let input = root.path().join("input.tsv");
    let lines: String = (0..40_000)
        .map(|i| format!("key-{i}\tvalue-{i}\n"))
        .collect();
    std::fs::write(&input, lines).expect("write input");
    let log = root.path().join("log");
    let dir = log.to_str().expect("utf-8");
    let produce = under_ulimit(
        &format!(
            "exec \"$0\" produce --log-dir \"$1\" --topic wide --partitions 20000 {}",
            input.display()
        ),
        dir,
    );
    let stderr = String::from_utf8_lossy(&produce.stderr);
    assert!(produce.status.success(), "{stderr}");
    assert!(
        stderr.contains("wrote 40000 records to wide (20000 partitions)"),
        "{stderr}"
    );
    let consume = under_ulimit(
        "exec \"$0\" consume --log-dir \"$1\" --topic wide --from-beginning",
        dir,
    );
    let stderr = String::from_utf8_lossy(&consume.stderr);
    assert!(consume.status.success(), "{stderr}");
    let mut got: Vec<String> = String::from_utf8_lossy(&consume.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    got.sort();
    let mut expected: Vec<String> = (0..40_000).map(|i| format!("key-{i}\tvalue-{i}")).collect();
    expected.sort();
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "the records consumed differ from those produced"
    );
}
