//! Restarting the sample on the same log directory continues from the committed offsets,
//! without counting committed work twice, and restores the counts from the changelog.

mod common;

use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
};
use std::time::Duration;

fn run(log: &Log, state: &std::path::Path, threads: usize) -> u64 {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let mut config = StreamsConfig::new("restart");
    config.state_dir = state.to_owned();
    config.num_stream_threads = threads;
    config.poll = Duration::from_millis(5);
    let app = StreamsApp::new(
        builder.build().expect("topology"),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.run_until_idle().expect("run").records_processed
}

#[test]
fn a_second_run_processes_only_new_records_and_counts_stay_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let first: Vec<(String, String)> = (0..2000)
        .map(|i| (format!("k{}", i % 37), "v".into()))
        .collect();
    let second: Vec<(String, String)> = (0..700)
        .map(|i| (format!("k{}", i % 53), "v".into()))
        .collect();
    {
        let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
        common::produce(&log, "in", 4, &first);
        assert_eq!(run(&log, &state, 2), 2000);
    }
    // Reopen everything, as a new process would.
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("reopen");
    common::produce(&log, "in", 4, &second);
    assert_eq!(
        run(&log, &state, 3),
        700,
        "only the new records are processed"
    );
    let all = first.iter().chain(&second).map(|(k, _)| k.as_str());
    assert_eq!(common::latest_longs(&log, "out"), common::count_model(all));
    // A third run with nothing new processes nothing.
    assert_eq!(run(&log, &state, 1), 0);
}
