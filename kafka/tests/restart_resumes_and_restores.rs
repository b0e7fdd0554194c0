//! Scenario (d): after a clean stop, a restart resumes from the committed offsets (it
//! processes only the new records) and restores the counts from the changelog (a fresh state
//! directory with in-memory stores has nothing else to start from) — the counts stay exact.
//! A second restart with persistent stores and the same state directory needs no restoring.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{config, count_topology, fast_broker, latest_counts, produce_words, wait_for};
use riffle::{StreamsApp, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};

fn run_until_counts(
    broker: &str,
    state_dir: &std::path::Path,
    store: StoreType,
    expected: &std::collections::HashMap<String, i64>,
    backend: &KafkaBackend,
) -> u64 {
    let mut app = StreamsApp::new(
        count_topology("words", "counts", store),
        config("count-d", state_dir, 2),
        KafkaBackend::connect(KafkaConfig::new(broker))
            .unwrap()
            .shared(),
    )
    .unwrap();
    app.start().unwrap();
    wait_for("exact counts", Duration::from_secs(90), || {
        (latest_counts(backend, "counts") == *expected).then_some(())
    });
    app.close().unwrap().records_processed
}

#[test]
fn a_restart_resumes_from_committed_offsets_and_restores_from_the_changelog() {
    let broker = fast_broker(0);
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let dirs = tempfile::tempdir().unwrap();

    let mut expected = produce_words(&backend, "words", 4, 6_000, 300, 0);
    let first = run_until_counts(
        broker.bootstrap(),
        &dirs.path().join("first"),
        StoreType::InMemory,
        &expected,
        &backend,
    );
    assert_eq!(first, 6_000);

    for (k, n) in produce_words(&backend, "words", 4, 4_000, 300, 11) {
        *expected.entry(k).or_default() += n;
    }
    let second = run_until_counts(
        broker.bootstrap(),
        &dirs.path().join("second"),
        StoreType::InMemory,
        &expected,
        &backend,
    );
    assert_eq!(second, 4_000, "resumed from the committed offsets");

    for (k, n) in produce_words(&backend, "words", 4, 2_000, 300, 23) {
        *expected.entry(k).or_default() += n;
    }
    let third = run_until_counts(
        broker.bootstrap(),
        &dirs.path().join("second"),
        StoreType::InMemory,
        &expected,
        &backend,
    );
    assert_eq!(third, 2_000);
}
