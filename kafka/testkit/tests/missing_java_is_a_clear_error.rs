//! Without Java on the PATH, starting a broker fails with an error that says what to install —
//! the Kafka tests fail loudly rather than skip. (The check runs in a child process of this
//! test binary whose PATH holds no `java`.)

#![allow(clippy::unwrap_used)]

use riffle_kafka_testkit::KafkaBroker;

const CHILD: &str = "RIFFLE_TESTKIT_NO_JAVA_CHILD";

#[test]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let err = KafkaBroker::start().expect_err("no java on the PATH");
    println!("ERROR: {err}");
}

#[test]
fn starting_without_java_names_what_to_install() {
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("ERROR: ").map(|(_, e)| e))
        .unwrap_or_else(|| panic!("no error printed: {stdout}"));
    assert!(line.contains("java not found"), "{line}");
    assert!(
        line.contains("apt-get install -y openjdk-17-jre-headless maven"),
        "{line}"
    );
}
