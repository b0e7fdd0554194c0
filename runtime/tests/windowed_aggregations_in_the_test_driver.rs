//! Windowed aggregations, suppression and window/session stores in the topology test driver:
//! one scenario each, with Kafka Streams' expected output written out by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use riffle::{
    Consumed, Error, Materialized, Processor, ProcessorContext, Produced, Record, Result, SerdeRef,
    Serdes, SessionWindows, SlidingWindows, Stores, StreamsBuilder, StreamsConfig, TimeWindows,
    TopologyTestDriver, Windowed, dsl::BufferConfig, dsl::Suppressed, testing::TestRecord,
    window::EmitStrategy, window::Window,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn drive(builder: StreamsBuilder, app: &str) -> TopologyTestDriver {
    TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new(app)).unwrap()
}

fn w(key: &str, start: i64, end: i64) -> Windowed<String> {
    Windowed::new(key.to_owned(), Window::new(start, end))
}

fn input(builder: &StreamsBuilder) -> riffle::KGroupedStream<String, String> {
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
}

fn pipe(driver: &TopologyTestDriver, records: &[(&str, i64)]) {
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    for (k, ts) in records {
        topic.pipe_input_at((*k).into(), "v".into(), *ts).unwrap();
    }
}

type Out = riffle::testing::TestOutputTopic<Windowed<String>, Option<i64>>;

fn output(driver: &TopologyTestDriver, key: SerdeRef<Windowed<String>>) -> Out {
    driver.create_output_topic("out", key, Serdes::optional(Serdes::i64()))
}

/// What the topology wrote since the last read.
fn read(out: &Out) -> Vec<TestRecord<Windowed<String>, Option<i64>>> {
    out.read_records_to_list().unwrap()
}

fn kv(
    records: &[TestRecord<Windowed<String>, Option<i64>>],
) -> Vec<(Windowed<String>, Option<i64>)> {
    records.iter().map(|r| (r.key.clone(), r.value)).collect()
}

/// Hopping windows of 10 advancing by 5: a record at 7 counts in [0,10) and [5,15); results
/// carry the largest timestamp of their window's records.
#[test]
fn a_hopping_count_updates_every_window_a_record_falls_in() {
    let builder = StreamsBuilder::new();
    let size = ms(10);
    input(&builder)
        .windowed_by(TimeWindows::of_size_with_no_grace(size).advance_by(ms(5)))
        .count()
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
        );
    let driver = drive(builder, "hopping");
    let topic = output(&driver, Serdes::time_windowed(Serdes::string(), size));
    pipe(&driver, &[("a", 7), ("a", 3), ("a", 12)]);
    let out = read(&topic);
    assert_eq!(
        kv(&out),
        [
            (w("a", 0, 10), Some(1)),
            (w("a", 5, 15), Some(1)),
            (w("a", 0, 10), Some(2)),
            (w("a", 5, 15), Some(2)),
            (w("a", 10, 20), Some(1)),
        ]
    );
    let timestamps: Vec<i64> = out.iter().map(|r| r.timestamp).collect();
    assert_eq!(
        timestamps,
        [7, 7, 7, 12, 12],
        "max(window's timestamp, record's)"
    );
    // [0,10) closed at stream time 12 with no grace: its late record is dropped.
    pipe(&driver, &[("a", 9)]);
    let late = read(&topic);
    assert_eq!(kv(&late), [(w("a", 5, 15), Some(3))]);
    assert_eq!(driver.dropped_records(), 1, "dropped for [0,10)");
}

/// Emit-on-close: nothing until stream time passes a window's end plus grace, then the final
/// count once.
#[test]
fn emit_on_close_emits_each_tumbling_window_once_when_grace_has_passed() {
    let builder = StreamsBuilder::new();
    let size = ms(10);
    input(&builder)
        .windowed_by(TimeWindows::of_size_and_grace(size, ms(5)))
        .emit_strategy(EmitStrategy::on_window_close())
        .count()
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
        );
    let driver = drive(builder, "final");
    let topic = output(&driver, Serdes::time_windowed(Serdes::string(), size));
    pipe(&driver, &[("a", 1), ("b", 2), ("a", 9), ("a", 14)]);
    assert!(read(&topic).is_empty(), "[0,10) closes at 15");
    pipe(&driver, &[("a", 3)]);
    assert!(
        read(&topic).is_empty(),
        "within grace: counted, not emitted"
    );
    pipe(&driver, &[("c", 15)]);
    assert_eq!(
        kv(&read(&topic)),
        [(w("a", 0, 10), Some(3)), (w("b", 0, 10), Some(1))]
    );
    pipe(&driver, &[("a", 4)]);
    assert!(
        read(&topic).is_empty(),
        "too late: dropped, nothing re-emitted"
    );
    assert_eq!(driver.dropped_records(), 1);
}

/// Sessions merge when a record bridges them; the merged-away sessions are deleted with
/// tombstones, as Kafka Streams forwards them.
#[test]
fn a_session_count_merges_sessions_and_deletes_the_merged_ones() {
    let builder = StreamsBuilder::new();
    input(&builder)
        .windowed_by(SessionWindows::of_inactivity_gap_and_grace(ms(5), ms(100)))
        .count_with(Materialized::named("sessions").with_caching_disabled())
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::session_windowed(Serdes::string()), Serdes::i64()),
        );
    let driver = drive(builder, "sessions");
    let topic = output(&driver, Serdes::session_windowed(Serdes::string()));
    pipe(&driver, &[("a", 0), ("a", 10), ("a", 5)]);
    let out = read(&topic);
    assert_eq!(
        kv(&out),
        [
            (w("a", 0, 0), Some(1)),
            (w("a", 10, 10), Some(1)),
            (w("a", 0, 0), None),
            (w("a", 10, 10), None),
            (w("a", 0, 10), Some(3)),
        ]
    );
    assert_eq!(
        out.last().map(|r| r.timestamp),
        Some(10),
        "a session's result carries its end"
    );
    let store = driver.get_session_store::<String, i64>("sessions").unwrap();
    assert_eq!(store.fetch(&"a".into()).unwrap(), [(w("a", 0, 10), 3)]);
    assert_eq!(
        store.find_sessions(&"a".into(), 11, 20).unwrap(),
        [],
        "ends before 11"
    );
}

/// Sliding windows (KIP-450): each record's left window, and the right window of a record with
/// a later one within the difference.
#[test]
fn a_sliding_count_makes_left_and_right_windows() {
    let builder = StreamsBuilder::new();
    let diff = ms(10);
    input(&builder)
        .windowed_by(SlidingWindows::of_time_difference_and_grace(diff, ms(100)))
        .count_with(Materialized::named("sliding"))
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::time_windowed(Serdes::string(), diff), Serdes::i64()),
        );
    let driver = drive(builder, "sliding");
    pipe(&driver, &[("a", 20), ("a", 25), ("a", 40)]);
    let store = driver.get_window_store::<String, i64>("sliding").unwrap();
    assert_eq!(
        store.fetch(&"a".into(), 0, 100).unwrap(),
        [(10, 1), (15, 2), (21, 1), (30, 1)],
        "[10,20] [15,25] [21,31] (right of 20) [30,40]; 25's right window is empty"
    );
}

/// Where Kafka's incremental sliding-window algorithm parts from a brute force (the model test
/// keeps records out of this reach): a record late for its own window but not for a later one
/// joins only windows that exist, so a window made later does not count it.
#[test]
fn a_sliding_record_late_for_its_own_window_joins_only_existing_windows() {
    let builder = StreamsBuilder::new();
    let diff = ms(13);
    input(&builder)
        .windowed_by(SlidingWindows::of_time_difference_with_no_grace(diff))
        .count_with(Materialized::named("sliding"))
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::time_windowed(Serdes::string(), diff), Serdes::i64()),
        );
    let driver = drive(builder, "sliding-late");
    // Stream time 14; `b` at 13: its left window [0,13] has closed, so it lands nowhere, and
    // `b` at 14 makes [1,14] with itself only.
    pipe(&driver, &[("a", 14), ("b", 13), ("b", 14)]);
    let store = driver.get_window_store::<String, i64>("sliding").unwrap();
    assert_eq!(store.fetch(&"b".into(), 0, 100).unwrap(), [(1, 1)]);
}

/// `suppress(until_window_closes)` turns an update stream into final results, dropping the
/// tombstones of merged sessions.
#[test]
fn suppress_until_window_closes_emits_final_results_only() {
    let builder = StreamsBuilder::new();
    let size = ms(10);
    input(&builder)
        .windowed_by(TimeWindows::of_size_and_grace(size, ms(2)))
        .count()
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
        );
    let driver = drive(builder, "suppress");
    let topic = output(&driver, Serdes::time_windowed(Serdes::string(), size));
    pipe(&driver, &[("a", 1), ("a", 2), ("b", 11)]);
    assert!(read(&topic).is_empty());
    pipe(&driver, &[("b", 12)]);
    let out = read(&topic);
    assert_eq!(kv(&out), [(w("a", 0, 10), Some(2))]);
    assert_eq!(out[0].timestamp, 2, "the buffered update's timestamp");
}

/// `until_time_limit` is a rate limit per key: a key's latest update once the limit of stream
/// time has passed since it was first buffered; a full buffer emits its oldest early.
#[test]
fn suppress_until_time_limit_rate_limits_each_key() {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .suppress(Suppressed::until_time_limit(
            ms(10),
            BufferConfig::max_records(2),
        ))
        .to_stream()
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let driver = drive(builder, "rate");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    for (k, ts) in [("a", 0), ("a", 5), ("b", 6)] {
        topic.pipe_input_at(k.into(), "v".into(), ts).unwrap();
    }
    assert!(out.read_key_values_to_list().unwrap().is_empty());
    topic.pipe_input_at("a".into(), "v".into(), 10).unwrap();
    assert_eq!(
        out.read_key_values_to_list().unwrap(),
        [("a".into(), 3)],
        "a was buffered at 0: emitted at 10 with its latest count"
    );
    // The buffer holds b; c and d make three keys: the oldest (b) goes early.
    topic.pipe_input_at("c".into(), "v".into(), 11).unwrap();
    topic.pipe_input_at("d".into(), "v".into(), 12).unwrap();
    assert_eq!(out.read_key_values_to_list().unwrap(), [("b".into(), 1)]);
}

/// A bounded buffer that must not emit early stops the application when full.
#[test]
fn a_full_buffer_that_should_shut_down_stops_with_an_error_naming_it() {
    let builder = StreamsBuilder::new();
    let size = ms(100);
    input(&builder)
        .windowed_by(TimeWindows::of_size_with_no_grace(size))
        .count()
        .suppress(
            Suppressed::until_window_closes(
                BufferConfig::max_records(1).should_shut_down_when_full(),
            )
            .with_name("final"),
        )
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
        );
    let driver = drive(builder, "full");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    topic.pipe_input_at("a".into(), "v".into(), 1).unwrap();
    let e = topic.pipe_input_at("b".into(), "v".into(), 2).unwrap_err();
    assert!(e.to_string().contains("final-store is full"), "{e}");
}

#[test]
fn mistakes_in_windowed_topologies_are_build_errors() {
    // A retention shorter than size + grace.
    let builder = StreamsBuilder::new();
    input(&builder)
        .windowed_by(TimeWindows::of_size_and_grace(ms(60), ms(10)))
        .count_with(Materialized::named("short").with_retention(ms(30)));
    let e = builder.build().unwrap_err();
    assert!(matches!(e, Error::Topology(_)), "{e}");
    assert!(e.to_string().contains("retention (30 ms)"), "{e}");
    // Final results of a table that has no windows.
    let builder = StreamsBuilder::new();
    input(&builder)
        .count()
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()));
    let e = builder.build().unwrap_err();
    assert!(
        e.to_string().contains("windowed aggregation's table only"),
        "{e}"
    );
    // A hopping advance larger than the size.
    let builder = StreamsBuilder::new();
    input(&builder)
        .windowed_by(TimeWindows::of_size_with_no_grace(ms(5)).advance_by(ms(6)))
        .count();
    let e = builder.build().unwrap_err();
    assert!(e.to_string().contains("at most its size"), "{e}");
}

/// Reduce and aggregate keep their own values per window.
#[test]
fn windowed_reduce_and_aggregate_fold_each_window() {
    let builder = StreamsBuilder::new();
    let size = ms(10);
    let grouped = builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    grouped
        .windowed_by(TimeWindows::of_size_with_no_grace(size))
        .reduce(|a, b| format!("{a}+{b}"), Materialized::named("reduced"))
        .to_stream()
        .to(
            "reduced",
            Produced::with(
                Serdes::time_windowed(Serdes::string(), size),
                Serdes::string(),
            ),
        );
    grouped
        .windowed_by(SessionWindows::of_inactivity_gap_with_no_grace(ms(3)))
        .aggregate(
            || 0i64,
            |_, v: String, acc| acc + v.len() as i64,
            |_, a, b| a + b,
            Materialized::named("lengths"),
            Serdes::i64(),
        )
        .to_stream()
        .to(
            "lengths",
            Produced::with(Serdes::session_windowed(Serdes::string()), Serdes::i64()),
        );
    let driver = drive(builder, "fold");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    for (v, ts) in [("x", 1), ("yy", 2), ("zzz", 11)] {
        topic.pipe_input_at("k".into(), v.into(), ts).unwrap();
    }
    let reduced = driver
        .get_window_store::<String, String>("reduced")
        .unwrap()
        .all()
        .unwrap();
    assert_eq!(
        reduced,
        [
            (w("k", 0, 10), "x+yy".into()),
            (w("k", 10, 20), "zzz".into())
        ]
    );
    let lengths = driver
        .get_session_store::<String, i64>("lengths")
        .unwrap()
        .all()
        .unwrap();
    assert_eq!(lengths, [(w("k", 1, 2), 3), (w("k", 11, 11), 3)]);
}

/// Counts per 10 ms window in a window store of its own, answering range queries.
struct PerWindow;

impl Processor<String, String, String, i64> for PerWindow {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, i64>,
        record: Record<String, String>,
    ) -> Result<()> {
        let start = record.timestamp() / 10 * 10;
        let mut store = ctx.get_window_store::<String, i64>("per-window")?;
        let n = store.fetch_window(record.key(), start)?.unwrap_or(0) + 1;
        store.put(record.key(), &n, start)?;
        let total: i64 = store
            .fetch(record.key(), 0, i64::MAX)?
            .iter()
            .map(|(_, v)| v)
            .sum();
        ctx.forward(record.with_value(total))
    }
}

#[test]
fn a_processor_keeps_its_own_window_store_and_queries_it_by_key_and_time() {
    let builder = StreamsBuilder::new();
    builder.add_state_store(Stores::window_store_builder(
        Stores::persistent_window_store("per-window", ms(1_000), ms(10), false),
        Serdes::string(),
        Serdes::i64(),
    ));
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(|| PerWindow, &["per-window"])
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let driver = drive(builder, "processor-windows");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    for (k, ts) in [("a", 1), ("a", 15), ("b", 3), ("a", 17), ("a", 31)] {
        topic.pipe_input_at(k.into(), "v".into(), ts).unwrap();
    }
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    assert_eq!(
        out.read_key_values_to_list().unwrap(),
        [
            ("a".into(), 1),
            ("a".into(), 2),
            ("b".into(), 1),
            ("a".into(), 3),
            ("a".into(), 4)
        ]
    );
    let store = driver
        .get_window_store::<String, i64>("per-window")
        .unwrap();
    assert_eq!(
        store.fetch(&"a".into(), 10, 30).unwrap(),
        [(10, 2), (30, 1)]
    );
    assert_eq!(
        store.fetch_range(&"a".into(), &"b".into(), 0, 9).unwrap(),
        [(w("a", 0, 10), 1), (w("b", 0, 10), 1)]
    );
    assert_eq!(store.fetch_all(10, 20).unwrap(), [(w("a", 10, 20), 2)]);
    assert_eq!(store.all().unwrap().len(), 4);
}

/// A processor asking for a store of the wrong kind gets an error naming both kinds.
struct WrongKind;

impl Processor<String, String, String, String> for WrongKind {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        _record: Record<String, String>,
    ) -> Result<()> {
        ctx.get_state_store::<String, i64>("per-window").map(|_| ())
    }
}

#[test]
fn a_window_store_asked_for_as_a_key_value_store_is_an_error() {
    let builder = StreamsBuilder::new();
    builder.add_state_store(Stores::window_store_builder(
        Stores::in_memory_window_store("per-window", ms(1_000), ms(10), false),
        Serdes::string(),
        Serdes::i64(),
    ));
    builder
        .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
        .process(|| WrongKind, &["per-window"]);
    let driver = drive(builder, "wrong-kind");
    let topic = driver.create_input_topic("in", Serdes::string(), Serdes::string());
    let e = topic.pipe_input("a".into(), "v".into()).unwrap_err();
    assert!(
        e.to_string()
            .contains("is a window store, not a key-value store"),
        "{e}"
    );
}
