//! `riffle reset --bootstrap-servers` on a real broker: refused while a member of the streams
//! group runs (even one with another state directory); once it stopped, the reset moves the
//! group's input offsets to the earliest (OffsetCommit as Kafka's admin client does it), deletes
//! the changelog topic (DeleteTopics) and wipes the state directory, and the sample's next run
//! counts the whole input again: the counts equal a model of it, not twice it.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use riffle::backend::Backend;
use riffle::log::TopicPartition;
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

const APP: &str = "reset-app";

fn riffle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn latest_counts(backend: &KafkaBackend, topic: &str) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for p in 0..backend.partitions(topic).unwrap().unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        let end = backend.end_offset(&tp).unwrap();
        let mut at = 0;
        while at < end {
            let batches = backend.fetch(&tp, at, 1 << 20).unwrap();
            for batch in &batches {
                for record in batch.records() {
                    let record = record.unwrap();
                    if record.offset() < at {
                        continue;
                    }
                    let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                    let value = <[u8; 8]>::try_from(&record.value().unwrap()[..]).unwrap();
                    counts.insert(key, i64::from_be_bytes(value));
                }
            }
            at = batches.last().map_or(end, |b| b.last_offset() + 1);
        }
    }
    counts
}

#[test]
fn reset_on_kafka_lets_the_sample_recount_from_scratch() {
    let broker = KafkaBroker::start().unwrap();
    let bootstrap = broker.bootstrap().to_owned();
    broker.create_topic("reset-in", 2).unwrap();
    let lines: Vec<String> = (0..300).map(|i| format!("key-{}\t1", i % 17)).collect();
    let mut model: HashMap<String, i64> = HashMap::new();
    for line in &lines {
        *model
            .entry(line.split('\t').next().unwrap().to_owned())
            .or_default() += 1;
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    broker
        .console_produce("reset-in", &lines, &[("parse.key", "true")])
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap().to_owned();
    let sample = |extra: &[&str], state_dir: &str| -> Vec<String> {
        let mut args = vec![
            "sample",
            "group-by-key-count",
            "--bootstrap-servers",
            &bootstrap,
            "--input",
            "reset-in",
            "--output",
            "reset-out",
            "--application-id",
            APP,
            "--state-dir",
            state_dir,
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect()
    };
    let run = |state_dir: &str| {
        let args = sample(&[], state_dir);
        ok(
            "the sample",
            &riffle(&args.iter().map(String::as_str).collect::<Vec<_>>()),
        )
    };
    let first = run(&state_dir);
    assert!(first.contains("processed 300 records"), "{first}");
    let backend = KafkaBackend::connect(KafkaConfig::new(bootstrap.as_str())).unwrap();
    assert_eq!(latest_counts(&backend, "reset-out"), model);
    let changelog = format!("{APP}-counts-changelog");
    assert!(
        backend
            .topics()
            .unwrap()
            .iter()
            .any(|(t, _)| *t == changelog)
    );

    // An instance with another state directory (two stream threads: two members): the group
    // has them, so the reset is refused.
    let other = tempfile::tempdir().unwrap();
    let args = sample(
        &["--follow", "--progress-every", "200ms"],
        other.path().to_str().unwrap(),
    );
    let mut follower = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while backend
        .describe_streams_group(APP)
        .map_or(true, |g| g.members.is_empty())
    {
        assert!(Instant::now() < deadline, "the follower never joined");
        std::thread::sleep(Duration::from_millis(200));
    }
    let reset_args = [
        "reset",
        "--application-id",
        APP,
        "--bootstrap-servers",
        &bootstrap,
        "--state-dir",
        &state_dir,
    ];
    let refused = riffle(&reset_args);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "refused: the streams group {APP} has 2 running member(s)"
        )),
        "{stderr}"
    );
    assert!(
        backend
            .topics()
            .unwrap()
            .iter()
            .any(|(t, _)| *t == changelog)
    );
    Command::new("kill")
        .args(["-INT", &follower.id().to_string()])
        .status()
        .unwrap();
    let stopped = follower.wait_with_output().unwrap();
    assert!(
        stopped.status.success(),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    drop(rx);

    // Stopped: the member left the group, and the reset goes through.
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = loop {
        let out = riffle(&reset_args);
        if out.status.success() || Instant::now() >= deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let text = ok("reset", &done);
    assert!(
        text.contains(&format!("delete internal topic {changelog}")),
        "{text}"
    );
    assert!(
        !backend
            .topics()
            .unwrap()
            .iter()
            .any(|(t, _)| *t == changelog)
    );
    let offsets = backend.group_offsets(APP).unwrap();
    assert!(
        offsets
            .iter()
            .filter(|(tp, _)| &*tp.topic == "reset-in")
            .all(|(_, o)| *o == 0),
        "{offsets:?}"
    );
    assert!(!state.path().join(APP).exists());

    let second = run(&state_dir);
    assert!(second.contains("processed 300 records"), "{second}");
    assert_eq!(
        latest_counts(&backend, "reset-out"),
        model,
        "counted again from nothing"
    );
}
