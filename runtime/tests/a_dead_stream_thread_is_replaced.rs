//! When user code panics in a stream thread, the uncaught-exception handler decides: replace the
//! thread (its tasks move to live threads and resume from their stores and checkpoints) or shut
//! the application down.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use riffle::log::{Log, LogOptions};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, dsl::StoreType, errors::StreamThreadExceptionResponse,
};

/// groupByKey-count whose `peek` panics once, on the `nth` record it sees.
fn app(
    log: &Log,
    state: &std::path::Path,
    nth: u64,
    response: StreamThreadExceptionResponse,
) -> StreamsApp {
    let seen = Arc::new(AtomicU64::new(0));
    let fired = Arc::new(AtomicBool::new(false));
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .peek(move |_, _| {
            if seen.fetch_add(1, Ordering::Relaxed) == nth && !fired.swap(true, Ordering::Relaxed) {
                panic!("injected failure in user code");
            }
        })
        .group_by_key()
        .count_with(Materialized::named("counts").with_store_type(StoreType::Persistent))
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let mut config = StreamsConfig::new("replace");
    config.state_dir = state.to_owned();
    config.num_stream_threads = 2;
    config.poll = Duration::from_millis(5);
    config.commit_interval = Some(Duration::from_millis(20));
    config.checkpoint_offset_delta = 1;
    let mut app = StreamsApp::new(
        builder.build().expect("topology"),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .expect("app");
    app.set_uncaught_exception_handler(move |_| response)
        .expect("handler");
    app
}

fn input() -> Vec<(String, String)> {
    (0..20_000)
        .map(|i| (format!("k{}", (i * 31) % 509), String::new()))
        .collect()
}

#[test]
fn with_replace_thread_the_counts_are_exact_and_the_tasks_resume_from_their_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let records = input();
    common::produce(&log, "in", 4, &records);
    let app = app(
        &log,
        &dir.path().join("state"),
        12_000,
        StreamThreadExceptionResponse::ReplaceThread,
    );
    // Watch the replacement happen, then let the run finish.
    let mut app = app;
    app.start().expect("start");
    while app.threads_replaced() == 0 && !app.is_idle() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let restored_before = app.records_restored();
    while !app.is_idle() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(app.threads_replaced(), 1);
    let restored = app.records_restored() - restored_before;
    app.close()
        .expect("a replaced thread is not an application error");
    // Nothing uncommitted reached a store or a topic, so nothing is counted twice even under
    // at-least-once; and nothing is lost.
    let expected = common::count_model(records.iter().map(|(k, _)| k.as_str()));
    assert_eq!(common::latest_longs(&log, "out"), expected);
    // The moved tasks resumed from checkpoints written at every commit: at most the changelog
    // records of one commit per task were restored, never the whole changelog.
    let mut changelog = 0;
    for p in 0..4 {
        changelog += log
            .end_offset(&riffle::log::TopicPartition::new(
                "replace-counts-changelog",
                p,
            ))
            .expect("end");
    }
    assert!(
        restored < changelog / 2,
        "restored {restored} of {changelog} changelog records"
    );
}

#[test]
fn with_shutdown_client_the_app_stops_with_the_panic_as_its_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    common::produce(&log, "in", 2, &input()[..2_000]);
    let app = app(
        &log,
        &dir.path().join("state"),
        500,
        StreamThreadExceptionResponse::ShutdownClient,
    );
    let err = app.run_until_idle().expect_err("the panic stops the app");
    let message = err.to_string();
    assert!(
        message.contains("injected failure in user code"),
        "{message}"
    );
}
