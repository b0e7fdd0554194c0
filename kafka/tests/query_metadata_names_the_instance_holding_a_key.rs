//! Interactive-query routing on a real broker (KIP-1071's `UserEndpoint` and
//! `PartitionsByUserEndpoint`): two instances of the count app, each naming its own
//! `application_server`, split the four tasks with one standby each. Both instances'
//! `query_metadata_for_key` agree, for every key, on the partition (the default partitioner's)
//! and on the instance running it — and that instance's store has the key's count (a `HashMap`
//! model of the input) while the other's running tasks do not have the key; the standby host
//! is the other instance. `metadata_for_all_streams_clients` lists both endpoints with two
//! active partitions each, as the broker's StreamsGroupDescribe assigns them.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{fast_broker, latest_counts, produce_words, stable_assignment, task_count, wait_for};
use riffle::batch::partition_for_key;
use riffle::{
    Serdes, StreamsApp, dsl::StoreType, query::HostInfo, query::QueryableStoreTypes,
    query::StoreQueryParameters,
};
use riffle_kafka::{KafkaBackend, KafkaConfig};

fn instance(bootstrap: &str, state: &std::path::Path, server: &str) -> StreamsApp {
    let backend = KafkaBackend::connect(KafkaConfig::new(bootstrap)).unwrap();
    let mut config = common::config("iq-routing", state, 1);
    config.set("application.server", server).unwrap();
    let mut app = StreamsApp::new(
        common::count_topology("words", "counts", StoreType::InMemory),
        config,
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    app
}

#[test]
fn both_instances_route_every_key_to_the_one_that_counts_it() {
    let broker = fast_broker(1);
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let expected = produce_words(&backend, "words", 4, 4_000, 200, 0);
    let dirs = tempfile::tempdir().unwrap();
    let hosts = [
        HostInfo::new("127.0.0.1", 7101),
        HostInfo::new("127.0.0.1", 7102),
    ];
    let apps = [
        instance(broker.bootstrap(), &dirs.path().join("a"), "127.0.0.1:7101"),
        instance(broker.bootstrap(), &dirs.path().join("b"), "127.0.0.1:7102"),
    ];
    wait_for(
        "two members with two tasks each",
        Duration::from_secs(90),
        || {
            stable_assignment(&backend, "iq-routing")
                .filter(|m| m.len() == 2 && m.iter().all(|(_, t)| task_count(t) == 2))
        },
    );
    wait_for("every key counted", Duration::from_secs(90), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    // Each instance hears of both endpoints, with two active and two standby partitions.
    for app in &apps {
        let all = wait_for("both endpoints known", Duration::from_secs(60), || {
            let all = app.metadata_for_all_streams_clients().ok()?;
            (all.len() == 2
                && all
                    .iter()
                    .all(|m| m.active_partitions.len() == 2 && m.standby_partitions.len() == 2))
            .then_some(all)
        });
        let named: BTreeSet<HostInfo> = all.iter().map(|m| m.host_info.clone()).collect();
        assert_eq!(named, hosts.iter().cloned().collect());
        let active: BTreeSet<_> = all.iter().flat_map(|m| &m.active_partitions).collect();
        assert_eq!(active.len(), 4, "{all:?}");
    }
    let stores = apps.each_ref().map(|app| {
        app.store(StoreQueryParameters::from_name_and_type(
            "counts",
            QueryableStoreTypes::key_value::<String, i64>(),
        ))
        .unwrap()
    });
    let serde = Serdes::string();
    let mut held = [0usize; 2];
    for (key, count) in &expected {
        let a = apps[0]
            .query_metadata_for_key("counts", key, &serde)
            .unwrap();
        let b = apps[1]
            .query_metadata_for_key("counts", key, &serde)
            .unwrap();
        assert_eq!(a, b, "{key}");
        assert_eq!(a.partition, partition_for_key(key.as_bytes(), 4), "{key}");
        let active = a.active_host.clone().expect("an active host");
        let owner = hosts.iter().position(|h| *h == active).unwrap();
        held[owner] += 1;
        let other = 1 - owner;
        assert_eq!(
            a.standby_hosts,
            BTreeSet::from([hosts[other].clone()]),
            "{key}"
        );
        assert_eq!(stores[owner].get(key).unwrap(), Some(*count), "{key}");
        assert_eq!(stores[other].get(key).unwrap(), None, "{key}");
    }
    println!("keys held: {held:?}");
    assert!(held.iter().all(|&n| n > 0));
    assert!(
        apps[0]
            .query_metadata_for_key("nope", &"k".to_owned(), &serde)
            .is_err()
    );
    for app in apps {
        app.close().unwrap();
    }
}
