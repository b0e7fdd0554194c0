//! Kafka 4.4 freezes a streams group's topology. Running a changed topology (another store,
//! so another changelog) under the same application id stops the application with an error
//! that says what to do: delete the group or use a new application id.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{config, latest_counts, produce_words, wait_for};
use riffle::{Consumed, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder, Topology};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

fn counting_into(store: &str) -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count_with(Materialized::named(store))
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().unwrap()
}

#[test]
fn a_changed_topology_under_the_same_application_id_is_refused_with_a_hint() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let expected = produce_words(&backend, "words", 2, 1_000, 50, 0);
    let state = tempfile::tempdir().unwrap();
    let connect = || KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();

    let mut first = StreamsApp::new(
        counting_into("counts"),
        config("app-t", state.path(), 1),
        connect().shared(),
    )
    .unwrap();
    first.start().unwrap();
    wait_for("counts", Duration::from_secs(60), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    first.close().unwrap();

    let mut changed = StreamsApp::new(
        counting_into("tallies"),
        config("app-t", state.path(), 1),
        connect().shared(),
    )
    .unwrap();
    changed.start().unwrap();
    wait_for(
        "the changed application to stop",
        Duration::from_secs(30),
        || changed.is_shutting_down().then_some(()),
    );
    let err = changed.close().expect_err("refused").to_string();
    assert!(err.contains("Topology updates are not supported"), "{err}");
    assert!(
        err.contains("kafka-streams-groups --delete --group app-t"),
        "{err}"
    );
}
