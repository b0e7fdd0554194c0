//! The processor API on real stream threads over the embedded log: a sleeping idle thread wakes
//! for wall-clock punctuators, a punctuator's output is committed (in the transaction under
//! exactly_once), a processor's store is changelogged and restored, `commit()` commits at
//! once, and headers go from an input topic through an application to its output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, ProcessingGuarantee, Processor, ProcessorContext, Produced, Record,
    Result, Serdes, Stores, StreamsApp, StreamsBuilder, StreamsConfig, Topology,
    processor::PunctuationType,
};

/// Counts records per key in store `seen`; forwards nothing per record, but every `tick` of
/// wall-clock time forwards `tick -> <records counted so far>`; `commit()` on key `now`.
struct Ticker {
    tick: Duration,
}

impl Processor<String, String, String, String> for Ticker {
    fn init(&mut self, ctx: &mut ProcessorContext<'_, String, String>) -> Result<()> {
        ctx.schedule(self.tick, PunctuationType::WallClockTime, |ctx, time| {
            let total: i64 = ctx
                .get_state_store::<String, i64>("seen")?
                .all()?
                .iter()
                .map(|(_, n)| n)
                .sum();
            ctx.forward(Record::new("tick".into(), total.to_string(), time))
        })?;
        Ok(())
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        if record.key() == "now" {
            ctx.commit();
        }
        let mut store = ctx.get_state_store::<String, i64>("seen")?;
        let n = store.get(record.key())?.unwrap_or(0) + 1;
        store.put(record.key(), &n)
    }
}

fn topology(tick: Duration) -> Topology {
    let builder = StreamsBuilder::new();
    builder.add_state_store(Stores::key_value_store_builder(
        Stores::in_memory_key_value_store("seen"),
        Serdes::string(),
        Serdes::i64(),
    ));
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(move || Ticker { tick }, &["seen"])
        .to("ticks", Produced::with(Serdes::string(), Serdes::string()));
    builder.build().unwrap()
}

fn config(app: &str, state: &std::path::Path) -> StreamsConfig {
    let mut config = StreamsConfig::new(app);
    config.state_dir = state.to_owned();
    config.commit_interval = Some(Duration::from_secs(60));
    config
}

fn values(log: &Log, topic: &str) -> Vec<String> {
    let mut out = Vec::new();
    for batch in log
        .fetch(&TopicPartition::new(topic, 0), 0, usize::MAX)
        .unwrap()
    {
        for r in batch.records() {
            out.push(String::from_utf8(r.unwrap().value().unwrap().to_vec()).unwrap());
        }
    }
    out
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_idle_thread_wakes_for_wall_clock_punctuators_and_their_output_is_committed() {
    for guarantee in [
        ProcessingGuarantee::AtLeastOnce,
        ProcessingGuarantee::ExactlyOnce,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
        common::produce(
            &log,
            "in",
            1,
            &[("a".into(), "1".into()), ("b".into(), "2".into())],
        );
        let mut config = config("tick", &dir.path().join("state"));
        config.processing_guarantee = guarantee;
        // Heartbeats every 5 s and a 60 s commit interval: only the punctuators' deadlines
        // (and the commits of what they forward) can wake the thread this often.
        config.commit_interval = Some(Duration::from_secs(60));
        let mut app = StreamsApp::new(
            topology(Duration::from_millis(50)),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .unwrap();
        let started = Instant::now();
        app.start().unwrap();
        wait_for("ten ticks in the output", || {
            values(&log, "ticks").len() >= 10
        });
        let elapsed = started.elapsed();
        app.close().unwrap();
        let ticks = values(&log, "ticks");
        assert!(
            ticks.iter().all(|t| t == "2" || t == "0"),
            "{guarantee:?}: a tick reports the records counted: {ticks:?}"
        );
        assert_eq!(ticks.last().map(String::as_str), Some("2"), "{guarantee:?}");
        assert!(
            elapsed < Duration::from_secs(5),
            "{guarantee:?}: ten 50 ms ticks took {elapsed:?}"
        );
    }
}

#[test]
fn a_commit_requested_by_a_processor_lands_promptly_under_a_60_s_interval() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    common::produce(&log, "in", 1, &[("a".into(), "1".into())]);
    let app = StreamsApp::new(
        topology(Duration::from_secs(3600)),
        config("committer", &dir.path().join("state")),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    let mut app = app;
    app.start().unwrap();
    let tp = TopicPartition::new("in", 0);
    wait_for("the first record committed", || {
        log.committed_offset("committer", &tp).unwrap() == Some(1)
    });
    // A record asking for a commit, while the caught-up commit spacing (100 ms) has passed:
    // committed at once.
    std::thread::sleep(Duration::from_millis(200));
    common::produce(&log, "in", 1, &[("now".into(), "2".into())]);
    let sent = Instant::now();
    wait_for("the commit the processor asked for", || {
        log.committed_offset("committer", &tp).unwrap() == Some(2)
    });
    println!("committed {:?} after the record", sent.elapsed());
    app.close().unwrap();
}

#[test]
fn a_processor_store_is_changelogged_and_restored_after_its_state_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let records: Vec<(String, String)> = (0..300)
        .map(|i| (format!("k{}", i % 13), i.to_string()))
        .collect();
    common::produce(&log, "in", 1, &records[..200]);
    let app = StreamsApp::new(
        topology(Duration::from_secs(3600)),
        config("restore", &dir.path().join("state-1")),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    app.run_until_idle().unwrap();
    assert!(
        log.partitions("restore-seen-changelog").is_some(),
        "the store has a changelog"
    );
    // A new state directory: the in-memory store comes back from its changelog only.
    common::produce(&log, "in", 1, &records[200..]);
    let app = StreamsApp::new(
        topology(Duration::from_secs(3600)),
        config("restore", &dir.path().join("state-2")),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    let summary = app.run_until_idle().unwrap();
    assert_eq!(summary.records_processed, 100, "only the new records");
    let restored = common::latest_longs(&log, "restore-seen-changelog");
    let keys: Vec<&str> = records.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(restored, common::count_model(keys), "counts span both runs");
}

#[test]
fn headers_go_from_the_input_through_an_app_to_the_output_on_the_embedded_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    log.create_topic("in", 2).unwrap();
    let mut batch = BatchBuilder::new(Compression::Lz4);
    let h: [(&[u8], Option<&[u8]>); 2] = [(b"trace", Some(b"t-1")), (b"nil", None)];
    batch.push_with_headers(1, Some(b"k1"), Some(b"v"), h.iter().copied());
    batch.push(2, Some(b"k2"), Some(b"w"));
    log.append(&TopicPartition::new("in", 0), &mut batch)
        .unwrap();
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::bytes(), Serdes::string()))
        .map_values(|v| v.to_uppercase())
        .to("out", Produced::with(Serdes::bytes(), Serdes::string()));
    let app = StreamsApp::new(
        builder.build().unwrap(),
        config("hdr", &dir.path().join("state")),
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    app.run_until_idle().unwrap();
    let mut out = Vec::new();
    for p in 0..2 {
        for b in log
            .fetch(&TopicPartition::new("out", p), 0, usize::MAX)
            .unwrap()
        {
            for r in b.records() {
                let r = r.unwrap();
                let headers: Vec<(Bytes, Option<Bytes>)> =
                    r.headers().map(|h| (h.key, h.value)).collect();
                out.push((
                    r.key().unwrap().clone(),
                    r.value().unwrap().clone(),
                    headers,
                ));
            }
        }
    }
    out.sort();
    assert_eq!(
        out,
        [
            (
                Bytes::from_static(b"k1"),
                Bytes::from_static(b"V"),
                vec![
                    (
                        Bytes::from_static(b"trace"),
                        Some(Bytes::from_static(b"t-1"))
                    ),
                    (Bytes::from_static(b"nil"), None),
                ]
            ),
            (Bytes::from_static(b"k2"), Bytes::from_static(b"W"), vec![]),
        ]
    );
}

#[test]
fn an_aggregate_restored_from_its_changelog_keeps_its_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    log.create_topic("in", 1).unwrap();
    let tp = TopicPartition::new("in", 0);
    let append = |ts: i64| {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(ts, Some(b"a"), Some(b"x"));
        log.append(&tp, &mut b).unwrap();
    };
    let topology = common::persistent_count_topology;
    append(10);
    let state = dir.path().join("state-1");
    let backend = EmbeddedBackend::new(log.clone()).shared();
    StreamsApp::new(topology(), config("tsr", &state), backend.clone())
        .unwrap()
        .run_until_idle()
        .unwrap();
    // Once from the store on disk (same state directory), once restored from the changelog
    // into a new one: both know the aggregate's timestamp is 10.
    for (ts, state) in [(3, "state-1"), (4, "state-2")] {
        append(ts);
        StreamsApp::new(
            topology(),
            config("tsr", &dir.path().join(state)),
            backend.clone(),
        )
        .unwrap()
        .run_until_idle()
        .unwrap();
    }
    let mut out = Vec::new();
    for b in log
        .fetch(&TopicPartition::new("out", 0), 0, usize::MAX)
        .unwrap()
    {
        for r in b.records() {
            let r = r.unwrap();
            let n = i64::from_be_bytes(r.value().unwrap()[..].try_into().unwrap());
            out.push((n, r.timestamp()));
        }
    }
    assert_eq!(out, [(1, 10), (2, 10), (3, 10)]);
}
