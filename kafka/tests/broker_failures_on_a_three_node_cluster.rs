//! Broker failures on a three-node KRaft cluster (the test kit's `KafkaCluster`: every topic
//! replicated three times, `min.insync.replicas=2`). The count app runs while input keeps
//! arriving; one node is killed with SIGKILL — the leader of some partitions, perhaps the
//! group's or the transactions' coordinator — and restarted a few seconds later. Leaders move
//! (NOT_LEADER_OR_FOLLOWER, metadata refreshed, requests retried with backoff within the
//! request timeout) and the app neither stops nor loses a record: under at_least_once no count
//! is lower than a HashMap count of the input, under exactly_once every count is exact and
//! Kafka's console consumer (read_committed) sees each key's counts rise strictly.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{check_read_committed_by_kafka, latest_counts, produce_words_now, wait_for};
use riffle::{ProcessingGuarantee, StreamsApp, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::{KafkaBroker, KafkaCluster};

fn cluster() -> KafkaCluster {
    KafkaCluster::start(
        3,
        KafkaBroker::builder()
            .config("transaction.state.log.num.partitions", "3")
            // The controller fences a silent broker after 3 s (9 s by default), so the dead
            // node's partitions get new leaders while it is down.
            .config("broker.session.timeout.ms", "3000")
            .config("broker.heartbeat.interval.ms", "500")
            .config("group.streams.min.session.timeout.ms", "3000")
            .config("group.streams.session.timeout.ms", "6000")
            .config("group.streams.min.heartbeat.interval.ms", "500")
            .config("group.streams.heartbeat.interval.ms", "1000"),
    )
    .unwrap()
}

fn survives_a_broker_failure(guarantee: ProcessingGuarantee, kill: usize) {
    common::init_tracing();
    let mut cluster = cluster();
    let bootstrap = cluster.bootstrap().to_owned();
    let backend = KafkaBackend::connect(KafkaConfig::new(bootstrap.as_str())).unwrap();
    let mut reader_config = KafkaConfig::new(bootstrap.as_str());
    reader_config.read_committed = true;
    let reader = KafkaBackend::connect(reader_config).unwrap();
    let mut expected = produce_words_now(&backend, "words", 4, 10_000, 300, 0);
    let dirs = tempfile::tempdir().unwrap();
    let mut config = common::config("count-failover", dirs.path(), 2);
    config.processing_guarantee = guarantee;
    config.commit_interval = Some(Duration::from_millis(100));
    let mut app = StreamsApp::new(
        common::count_topology("words", "counts", StoreType::Persistent),
        config,
        KafkaBackend::connect(KafkaConfig::new(bootstrap.as_str()))
            .unwrap()
            .shared(),
    )
    .unwrap();
    app.start().unwrap();
    // Input keeps coming, through the failure.
    let producer = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            let mut written: HashMap<String, i64> = HashMap::new();
            for round in 0..40u64 {
                for (k, n) in produce_words_now(&backend, "words", 4, 1_000, 300, 1 + round) {
                    *written.entry(k).or_default() += n;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            written
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    let killed_at = Instant::now();
    cluster.node(kill).kill();
    println!("killed node {}", kill + 1);
    // While it is down, the partitions it led get leaders among the live nodes.
    let live = (kill + 1) % cluster.len();
    let leaders = |cluster: &mut KafkaCluster| -> Vec<String> {
        let bootstrap = cluster.node(live).bootstrap().to_owned();
        let out = cluster
            .node(live)
            .run_tool(
                "org.apache.kafka.tools.TopicCommand",
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--describe",
                    "--topic",
                    "words",
                ],
            )
            .unwrap_or_default();
        out.lines()
            .filter_map(|l| l.split("Leader: ").nth(1))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    };
    let dead = (kill + 1).to_string();
    let moved = wait_for(
        "the dead node's partitions to get new leaders",
        Duration::from_secs(30),
        || {
            let l = leaders(&mut cluster);
            (l.len() == 4 && !l.contains(&dead)).then_some(l)
        },
    );
    println!(
        "leaders of words-0..3 with node {dead} down: {moved:?} ({:.1} s after the kill)",
        killed_at.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(3));
    cluster.node(kill).restart().unwrap();
    println!(
        "node {} back after {:.1} s",
        kill + 1,
        killed_at.elapsed().as_secs_f64()
    );
    for (k, n) in producer.join().unwrap() {
        *expected.entry(k).or_default() += n;
    }
    assert!(!app.is_shutting_down(), "the app stopped");
    match guarantee {
        ProcessingGuarantee::ExactlyOnce => {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let counts = latest_counts(&reader, "counts");
                if counts == expected {
                    break;
                }
                if Instant::now() > deadline {
                    let over: i64 = expected
                        .iter()
                        .map(|(k, n)| (counts.get(k).copied().unwrap_or(0) - n).max(0))
                        .sum();
                    let under: i64 = expected
                        .iter()
                        .map(|(k, n)| (n - counts.get(k).copied().unwrap_or(0)).max(0))
                        .sum();
                    panic!(
                        "exactly_once counts not exact after 120 s: {} keys of {}, {over} counted too many, {under} missing; {} records processed; shutting down: {}",
                        counts.len(),
                        expected.len(),
                        app.records_processed(),
                        app.is_shutting_down()
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            app.close().unwrap();
            let read =
                check_read_committed_by_kafka(cluster.node(live), &reader, &expected, "failover");
            println!("exactly_once through a broker failure: {read} output records, exact");
        }
        _ => {
            let counts = wait_for(
                "every count at least the input's",
                Duration::from_secs(120),
                || {
                    let counts = latest_counts(&backend, "counts");
                    (counts.len() == expected.len()
                        && expected.iter().all(|(k, n)| counts.get(k) >= Some(n)))
                    .then_some(counts)
                },
            );
            app.close().unwrap();
            let over: i64 = expected.iter().map(|(k, n)| counts[k] - n).sum();
            println!(
                "at_least_once through a broker failure: no count lower; {over} records counted twice"
            );
        }
    }
}

#[test]
fn at_least_once_never_counts_lower_when_a_broker_dies_and_returns() {
    survives_a_broker_failure(ProcessingGuarantee::AtLeastOnce, 0);
}

#[test]
fn exactly_once_stays_exact_when_a_broker_dies_and_returns() {
    survives_a_broker_failure(ProcessingGuarantee::ExactlyOnce, 1);
}
