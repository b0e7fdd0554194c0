//! Cogrouped aggregations (`KGroupedStream::cogroup`, `CogroupedKStream`) against a model: three
//! streams — one re-keyed, so repartitioned first — each folded into one aggregate per key by
//! its own aggregator. In the test driver every record's update equals the model's aggregate
//! after that record (proptest); on two stream threads over the embedded log with two
//! partitions the output's latest aggregate per key equals the model's, and so does the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, Topology, TopologyTestDriver,
};

/// (sum of `amounts`, characters of `notes`, largest of `levels`).
type Agg = (i64, i64, i64);

/// `amounts` (key → i64) summed, `notes` (key → text) counted in characters, `levels`
/// (`"<key>:<level>"`, keyed by anything) re-keyed by the key before the colon and maxed.
fn topology() -> Topology {
    let builder = StreamsBuilder::new();
    let amounts = builder
        .stream("amounts", Consumed::with(Serdes::string(), Serdes::i64()))
        .group_by_key();
    let notes = builder
        .stream("notes", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    let levels = builder
        .stream("levels", Consumed::with(Serdes::string(), Serdes::string()))
        .select_key(|_, v| v.split(':').next().unwrap_or_default().to_owned())
        .map_values(|v| {
            v.split(':')
                .nth(1)
                .and_then(|l| l.parse().ok())
                .unwrap_or(0i64)
        })
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::i64()).named("levels-by-key"));
    amounts
        .cogroup(|_, amount, (sum, chars, max): Agg| (sum + amount, chars, max))
        .cogroup(&notes, |_, note, (sum, chars, max)| {
            (sum, chars + note.chars().count() as i64, max)
        })
        .cogroup(&levels, |_, level, (sum, chars, max)| {
            (sum, chars, max.max(level))
        })
        .aggregate(
            || (0, 0, i64::MIN),
            Materialized::named("cogrouped"),
            Serdes::json(),
        )
        .to_stream()
        .to(
            "out",
            Produced::with(Serdes::string(), Serdes::json::<Agg>()),
        );
    builder.build().unwrap()
}

#[derive(Clone, Debug)]
enum Input {
    Amount(String, i64),
    Note(String, String),
    Level(String, i64),
}

fn inputs() -> impl Strategy<Value = Vec<Input>> {
    let key = (0u8..6).prop_map(|k| format!("k{k}"));
    let input = prop_oneof![
        (key.clone(), -50i64..50).prop_map(|(k, a)| Input::Amount(k, a)),
        (key.clone(), "[a-z]{0,6}").prop_map(|(k, n)| Input::Note(k, n)),
        (key, 0i64..100).prop_map(|(k, l)| Input::Level(k, l)),
    ];
    prop::collection::vec(input, 1..120)
}

/// The model: each key's aggregate after each input.
fn fold(model: &mut BTreeMap<String, Agg>, input: &Input) -> (String, Agg) {
    let (key, f): (&String, Box<dyn Fn(Agg) -> Agg>) = match input {
        Input::Amount(k, a) => (k, Box::new(move |(s, c, m)| (s + a, c, m))),
        Input::Note(k, n) => {
            let len = n.chars().count() as i64;
            (k, Box::new(move |(s, c, m)| (s, c + len, m)))
        }
        Input::Level(k, l) => (k, Box::new(move |(s, c, m)| (s, c, m.max(*l)))),
    };
    let agg = model.entry(key.clone()).or_insert((0, 0, i64::MIN));
    *agg = f(*agg);
    (key.clone(), *agg)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_update_is_the_models_aggregate_in_the_test_driver(inputs in inputs()) {
        let driver = TopologyTestDriver::new(topology(), StreamsConfig::new("cogroup")).unwrap();
        let amounts = driver.create_input_topic("amounts", Serdes::string(), Serdes::i64());
        let notes = driver.create_input_topic("notes", Serdes::string(), Serdes::string());
        let levels = driver.create_input_topic("levels", Serdes::string(), Serdes::string());
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::json::<Agg>());
        let mut model = BTreeMap::new();
        let mut expected = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let ts = i as i64;
            match input {
                Input::Amount(k, a) => amounts.pipe_input_at(k.clone(), *a, ts).unwrap(),
                Input::Note(k, n) => notes.pipe_input_at(k.clone(), n.clone(), ts).unwrap(),
                Input::Level(k, l) => levels
                    .pipe_input_at(format!("x{i}"), format!("{k}:{l}"), ts)
                    .unwrap(),
            }
            expected.push(fold(&mut model, input));
        }
        prop_assert_eq!(out.read_key_values_to_list().unwrap(), expected);
        let store = driver.get_key_value_store::<String, Agg>("cogrouped").unwrap();
        prop_assert_eq!(store.all().unwrap().into_iter().collect::<BTreeMap<_, _>>(), model);
    }
}

fn append(log: &Log, topic: &str, records: &[(String, Vec<u8>)]) {
    if log.partitions(topic).is_none() {
        log.create_topic(topic, 2).unwrap();
    }
    let mut builders: Vec<BatchBuilder> = (0..2)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (i, (k, v)) in records.iter().enumerate() {
        let p = partition_for_key(k.as_bytes(), 2) as usize;
        builders[p].push(i as i64, Some(k.as_bytes()), Some(v));
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            log.append(&TopicPartition::new(topic, p as u32), b)
                .unwrap();
        }
    }
}

#[test]
fn the_latest_aggregate_per_key_is_the_models_on_stream_threads() {
    let mut rng_inputs = Vec::new();
    for i in 0..3_000i64 {
        let key = format!("k{}", (i * 7) % 23);
        rng_inputs.push(match i % 3 {
            0 => Input::Amount(key, i % 41 - 20),
            1 => Input::Note(key, "x".repeat((i % 5) as usize)),
            _ => Input::Level(key, (i * 13) % 97),
        });
    }
    let mut model = BTreeMap::new();
    for input in &rng_inputs {
        fold(&mut model, input);
    }
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let (mut amounts, mut notes, mut levels) = (Vec::new(), Vec::new(), Vec::new());
    for (i, input) in rng_inputs.iter().enumerate() {
        match input {
            Input::Amount(k, a) => amounts.push((k.clone(), a.to_be_bytes().to_vec())),
            Input::Note(k, n) => notes.push((k.clone(), n.as_bytes().to_vec())),
            Input::Level(k, l) => levels.push((format!("x{i}"), format!("{k}:{l}").into_bytes())),
        }
    }
    append(&log, "amounts", &amounts);
    append(&log, "notes", &notes);
    append(&log, "levels", &levels);
    let config = common::two_thread_config("cogroup", &dir.path().join("state"));
    let app = StreamsApp::new(
        topology(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    common::run_until_idle(app);
    let mut latest = BTreeMap::new();
    for p in 0..2 {
        for batch in log
            .fetch(&TopicPartition::new("out", p), 0, usize::MAX)
            .unwrap()
        {
            for record in batch.records() {
                let record = record.unwrap();
                let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                let agg: Agg = serde_json::from_slice(record.value().unwrap()).unwrap();
                latest.insert(key, agg);
            }
        }
    }
    assert_eq!(latest, model);
    assert!(
        log.partitions("cogroup-levels-by-key-repartition")
            .is_some(),
        "the re-keyed input went through its repartition topic"
    );
}

/// Two streams cogrouped in windows: `amounts` summed, `notes` counted.
fn windowed_topology(windows: &str) -> Topology {
    use std::time::Duration;
    let builder = StreamsBuilder::new();
    let amounts = builder
        .stream("amounts", Consumed::with(Serdes::string(), Serdes::i64()))
        .group_by_key();
    let notes = builder
        .stream("notes", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    let cogrouped = amounts
        .cogroup(|_, amount, (sum, n): (i64, i64)| (sum + amount, n))
        .cogroup(&notes, |_, _note, (sum, n)| (sum, n + 1));
    let table = match windows {
        "hopping" => cogrouped
            .windowed_by(
                riffle::TimeWindows::of_size_and_grace(
                    Duration::from_millis(10),
                    Duration::from_secs(60),
                )
                .advance_by(Duration::from_millis(5)),
            )
            .aggregate(|| (0, 0), Materialized::named("windowed"), Serdes::json()),
        _ => cogrouped
            .windowed_by(riffle::SessionWindows::of_inactivity_gap_and_grace(
                Duration::from_millis(4),
                Duration::from_secs(60),
            ))
            .aggregate(
                || (0, 0),
                |_, (s1, n1), (s2, n2)| (s1 + s2, n1 + n2),
                Materialized::named("windowed"),
                Serdes::json(),
            ),
    };
    table
        .to_stream_with_deletes()
        .map(|w, agg| {
            (
                format!("{}@{}/{}", w.key, w.window.start, w.window.end),
                agg,
            )
        })
        .to(
            "out",
            Produced::with(
                Serdes::string(),
                Serdes::optional(Serdes::json::<(i64, i64)>()),
            ),
        );
    builder.build().unwrap()
}

/// The model of both windowed cogroups over records in time order (`(key, amount or note,
/// timestamp)`): each window's (sum, notes), keyed as the topology writes them.
fn windowed_model(
    windows: &str,
    records: &[(String, Option<i64>, i64)],
) -> BTreeMap<String, (i64, i64)> {
    let mut out = BTreeMap::new();
    let add = |agg: &mut (i64, i64), amount: &Option<i64>| match amount {
        Some(a) => agg.0 += a,
        None => agg.1 += 1,
    };
    if windows == "hopping" {
        for (k, amount, ts) in records {
            let mut start = (ts - 10 + 5).max(0) / 5 * 5;
            while start <= *ts {
                if *ts < start + 10 {
                    add(
                        out.entry(format!("{k}@{start}/{}", start + 10))
                            .or_insert((0, 0)),
                        amount,
                    );
                }
                start += 5;
            }
        }
        return out;
    }
    // Session windows: in time order a record joins its key's last session window if it is
    // within the gap. Per key, its session windows: (start, end, aggregate).
    type SessionWindows = Vec<(i64, i64, (i64, i64))>;
    let mut sessions: BTreeMap<String, SessionWindows> = BTreeMap::new();
    for (k, amount, ts) in records {
        let list = sessions.entry(k.clone()).or_default();
        match list.last_mut() {
            Some((_, end, agg)) if ts - *end <= 4 => {
                *end = *ts;
                add(agg, amount);
            }
            _ => {
                let mut agg = (0, 0);
                add(&mut agg, amount);
                list.push((*ts, *ts, agg));
            }
        }
    }
    for (k, list) in sessions {
        for (start, end, agg) in list {
            out.insert(format!("{k}@{start}/{end}"), agg);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Hopping and session windows: the output read as a table (a tombstone deleting a merged
    /// session) equals the model's windows, in the test driver.
    #[test]
    fn windowed_cogroups_match_the_model(
        steps in prop::collection::vec((0u8..3, prop::option::of(-9i64..10), 0i64..4), 1..80),
        sessions in any::<bool>(),
    ) {
        let windows = if sessions { "session" } else { "hopping" };
        let driver = TopologyTestDriver::new(windowed_topology(windows), StreamsConfig::new("cogroup-windows")).unwrap();
        let amounts = driver.create_input_topic("amounts", Serdes::string(), Serdes::i64());
        let notes = driver.create_input_topic("notes", Serdes::string(), Serdes::string());
        let out = driver.create_output_topic("out", Serdes::string(), Serdes::optional(Serdes::json::<(i64, i64)>()));
        let mut ts = 0;
        let mut records = Vec::new();
        for (k, amount, step) in steps {
            ts += step;
            let key = format!("k{k}");
            match amount {
                Some(a) => amounts.pipe_input_at(key.clone(), a, ts).unwrap(),
                None => notes.pipe_input_at(key.clone(), "n".into(), ts).unwrap(),
            }
            records.push((key, amount, ts));
        }
        let mut table = BTreeMap::new();
        for (k, v) in out.read_key_values_to_list().unwrap() {
            match v {
                Some(v) => { table.insert(k, v); }
                None => { prop_assert!(table.remove(&k).is_some(), "a tombstone deletes a window the output holds: {}", k); }
            }
        }
        prop_assert_eq!(table, windowed_model(windows, &records));
    }
}
