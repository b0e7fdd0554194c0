//! The same sample command on both backends: `riffle sample group-by-key-count` with
//! `--bootstrap-servers` counts generated records on a real Kafka 4.4 broker (started by the
//! test kit) and checks them against a HashMap count, exactly as on the embedded log; and with
//! `--input`/`--output` it counts an existing Kafka topic, resuming from its committed offsets.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use riffle_kafka_testkit::KafkaBroker;

fn riffle(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "riffle {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_sample_counts_exactly_on_kafka() {
    let broker = KafkaBroker::start().unwrap();
    let generated = riffle(&[
        "sample",
        "group-by-key-count",
        "--bootstrap-servers",
        broker.bootstrap(),
        "--records",
        "50000",
        "--keys",
        "500",
        "--store",
        "memory",
    ]);
    assert!(
        generated.contains("counts equal an independent HashMap count of the input: yes"),
        "{generated}"
    );
    let input = generated
        .split_whitespace()
        .find(|w| w.starts_with("riffle-sample-words-"))
        .unwrap()
        .to_owned();

    // Count the generated topic again under another application id: all of it, then nothing
    // (the second run resumes from the first one's committed offsets).
    let args = |app: &'static str| {
        vec![
            "sample".to_owned(),
            "group-by-key-count".to_owned(),
            "--bootstrap-servers".to_owned(),
            broker.bootstrap().to_owned(),
            "--input".to_owned(),
            input.clone(),
            "--output".to_owned(),
            "recounted".to_owned(),
            "--application-id".to_owned(),
            app.to_owned(),
        ]
    };
    let run = |app| {
        let a = args(app);
        riffle(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let first = run("recount");
    assert!(first.contains("processed 50000 records"), "{first}");
    assert!(first.contains("500 keys"), "{first}");
    let second = run("recount");
    assert!(second.contains("processed 0 records"), "{second}");
}
