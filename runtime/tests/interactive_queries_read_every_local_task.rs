//! Interactive queries on a running application (Kafka's `KafkaStreams#store`): a read-only view
//! of the groupByKey count's store over the four tasks of two stream threads gives, for every
//! key, the count of a `HashMap` model — by `get`, by `range` and by `all` — while the
//! application runs and after more input; the entry count matches; an unknown store, a store of
//! other types and a stopped application are `InvalidStateStore` errors, never wrong answers.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use riffle::log::{Log, LogOptions};
use riffle::{
    EmbeddedBackend, Error, StreamsApp, StreamsConfig, query::QueryableStoreTypes,
    query::StoreQueryParameters,
};

mod common;

fn wait_idle(app: &StreamsApp) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !app.is_idle() {
        assert!(Instant::now() < deadline, "never idle");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn input(n: usize, seed: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("key-{:03}", (i * 7 + seed) % 113), "v".to_owned()))
        .collect()
}

fn model(records: &[(String, String)]) -> HashMap<String, i64> {
    common::count_model(records.iter().map(|(k, _)| k.as_str()))
}

#[test]
fn queries_see_every_local_tasks_counts_while_the_app_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let mut written = input(3_000, 0);
    common::produce(&log, "in", 4, &written);
    let mut config = StreamsConfig::new("queries");
    config.state_dir = dir.path().join("state");
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    let mut app = StreamsApp::new(
        common::persistent_count_topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");

    let unknown = app.store(StoreQueryParameters::from_name_and_type(
        "nope",
        QueryableStoreTypes::key_value::<String, i64>(),
    ));
    assert!(matches!(unknown, Err(Error::InvalidStateStore { .. })));
    let wrong = app.store(StoreQueryParameters::from_name_and_type(
        "counts",
        QueryableStoreTypes::key_value::<String, String>(),
    ));
    let err = wrong.expect_err("counts holds i64 values");
    assert!(err.to_string().contains("does not hold keys"), "{err}");

    let store = app
        .store(StoreQueryParameters::from_name_and_type(
            "counts",
            QueryableStoreTypes::key_value::<String, i64>(),
        ))
        .expect("the count's store");
    app.start().expect("start");
    wait_idle(&app);
    for round in 0..2 {
        let expected = model(&written);
        for (key, count) in &expected {
            assert_eq!(
                store.get(key).expect("get"),
                Some(*count),
                "round {round}: {key}"
            );
        }
        assert_eq!(store.get(&"absent".to_owned()).expect("get"), None);
        let all: BTreeMap<String, i64> = store.all().expect("all").into_iter().collect();
        let sorted: BTreeMap<String, i64> = expected.clone().into_iter().collect();
        assert_eq!(all, sorted, "round {round}");
        let from = "key-020".to_owned();
        let to = "key-040".to_owned();
        let range = store.range(&from, &to).expect("range");
        let in_range: Vec<(String, i64)> = sorted
            .iter()
            .filter(|(k, _)| **k >= from && **k <= to)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(range, in_range, "round {round}");
        assert_eq!(
            store.approximate_num_entries().expect("count"),
            expected.len() as u64
        );
        // More input while it runs.
        let more = input(1_000, round + 1);
        common::produce(&log, "in", 4, &more);
        written.extend(more);
        wait_idle(&app);
    }
    app.close().expect("close");
    let err = store
        .get(&"key-001".to_owned())
        .expect_err("the application stopped");
    assert!(matches!(err, Error::InvalidStateStore { .. }), "{err}");
}

#[test]
fn on_the_embedded_log_this_instance_holds_every_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    common::produce(&log, "in", 4, &input(100, 0));
    let app_with = |server: Option<&str>, state: &str| {
        let mut config = StreamsConfig::new("where");
        config.state_dir = dir.path().join(state);
        if let Some(server) = server {
            config.set("application.server", server).expect("host:port");
        }
        StreamsApp::new(
            common::persistent_count_topology(),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
    };
    let bad = app_with(Some("no-port"), "bad").expect_err("not host:port");
    assert!(bad.to_string().contains("host:port"), "{bad}");
    let app = app_with(Some("localhost:8080"), "a").expect("app");
    let serde = riffle::Serdes::string();
    for key in ["key-001", "key-050", "absent"] {
        let meta = app
            .query_metadata_for_key("counts", &key.to_owned(), &serde)
            .expect("metadata");
        assert_eq!(
            meta.active_host,
            Some(riffle::query::HostInfo::new("localhost", 8080))
        );
        assert!(meta.standby_hosts.is_empty());
        assert_eq!(
            meta.partition,
            riffle::log::partition_for_key(key.as_bytes(), 4)
        );
    }
    let all = app.metadata_for_all_streams_clients().expect("metadata");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].active_partitions.len(), 4);
    let err = app
        .query_metadata_for_key("nope", &"k".to_owned(), &serde)
        .expect_err("no such store");
    assert!(matches!(err, Error::InvalidStateStore { .. }), "{err}");
    drop(app);
    let unnamed = app_with(None, "b").expect("app");
    let meta = unnamed
        .query_metadata_for_key("counts", &"key-001".to_owned(), &serde)
        .expect("metadata");
    assert_eq!(
        meta.active_host, None,
        "no application_server: no host to name"
    );
    assert!(
        unnamed
            .metadata_for_all_streams_clients()
            .expect("metadata")
            .is_empty()
    );
}
