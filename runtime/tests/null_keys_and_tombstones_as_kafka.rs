//! Null keys, null values and a table's deletes, as Kafka Streams has them, each checked
//! against a model of Kafka's rules:
//! - a source reads a null key as `None` with a nullable key serde (`Serdes::optional`), and a
//!   sink writes `None` back as a null key (not an empty one); an empty key is a key, placed by
//!   murmur2 of zero bytes;
//! - key-based operators drop what they cannot take, counted in `dropped-records`: an
//!   aggregation a null key or value (after a repartition topic too), an inner stream–table
//!   join a null key; a left stream–table join joins a null key with no row (KIP-962);
//! - a table's deletes reach `to()` as tombstones through the operators that keep the key, and
//!   reach any operator as `None` through `to_stream_with_deletes`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Grouped, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, TopologyTestDriver, testing::TestRecord,
};

type Opt = Option<String>;

fn opt() -> riffle::SerdeRef<Opt> {
    Serdes::optional(Serdes::string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random records with null keys and values through a copy, a count by key and a count by
    /// a new key (through a repartition topic): the copy keeps every null, each count equals a
    /// HashMap count of what Kafka keeps, and `dropped-records` counts exactly what Kafka drops.
    #[test]
    fn null_keys_and_values_through_copy_count_and_repartition(
        records in prop::collection::vec(
            (prop::option::weighted(0.8, 0u8..5), prop::option::weighted(0.8, 0u8..4)),
            1..80,
        )
    ) {
        let builder = StreamsBuilder::new();
        let stream = builder.stream("in", Consumed::with(opt(), opt()));
        stream.to("copy", Produced::with(opt(), opt()));
        stream
            .group_by_key_with(Grouped::with(opt(), opt()))
            .count()
            .to_stream()
            .to("by-key", Produced::with(opt(), Serdes::i64()));
        stream
            .group_by(|_, v| v.clone(), Grouped::with(opt(), opt()))
            .count()
            .to_stream()
            .to("by-value", Produced::with(opt(), Serdes::i64()));
        let driver = TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("nulls")).unwrap();
        let input = driver.create_input_topic("in", opt(), opt());
        let copy = driver.create_output_topic("copy", opt(), opt());
        let by_key = driver.create_output_topic("by-key", opt(), Serdes::i64());
        let by_value = driver.create_output_topic("by-value", opt(), Serdes::i64());

        let records: Vec<(Opt, Opt)> = records
            .into_iter()
            .map(|(k, v)| (k.map(|k| format!("k{k}")), v.map(|v| format!("v{v}"))))
            .collect();
        let (mut key_counts, mut value_counts) = (HashMap::new(), HashMap::new());
        let mut dropped = 0u64;
        for (i, (k, v)) in records.iter().enumerate() {
            input.pipe_input_at(k.clone(), v.clone(), i as i64).unwrap();
            // Kafka: the aggregation skips a null key or value; a null new key (here: the null
            // value it is made of) goes through the repartition topic and is skipped after it.
            match (k, v) {
                (Some(k), Some(_)) => *key_counts.entry(k.clone()).or_insert(0i64) += 1,
                _ => dropped += 1,
            }
            match v {
                Some(v) => *value_counts.entry(v.clone()).or_insert(0i64) += 1,
                None => dropped += 1,
            }
        }
        let copied: Vec<(Opt, Opt)> = copy.read_key_values_to_list().unwrap();
        prop_assert_eq!(&copied, &records, "a copy keeps null keys and values as nulls");
        let last = |list: Vec<(Opt, i64)>| -> HashMap<String, i64> {
            list.into_iter().map(|(k, c)| (k.expect("an aggregation's key is never null"), c)).collect()
        };
        prop_assert_eq!(last(by_key.read_key_values_to_list().unwrap()), key_counts);
        prop_assert_eq!(last(by_value.read_key_values_to_list().unwrap()), value_counts);
        prop_assert_eq!(driver.dropped_records(), dropped);
    }

    /// Random puts and deletes on a table topic: `to_stream().map_values(..)` passes each delete
    /// of a key the table held on to `to()` as a tombstone, and `to_stream_with_deletes` hands
    /// it to the next operator as `None`; `to_stream().map(..)`, which needs the value to make
    /// a key, drops it, counted. The outputs replayed as tables equal the model table.
    #[test]
    fn a_tables_deletes_reach_the_sink_as_tombstones(
        ops in prop::collection::vec((0u8..4, prop::option::weighted(0.6, 0i64..100)), 1..60)
    ) {
        let builder = StreamsBuilder::new();
        let table = builder.table(
            "prices",
            Consumed::with(Serdes::string(), Serdes::i64()),
            Materialized::named("prices-store"),
        );
        table
            .to_stream()
            .map_values(|v| v * 2)
            .to("doubled", Produced::with(Serdes::string(), Serdes::i64()));
        table
            .to_stream_with_deletes()
            .map_values(|v| v.map(|v| v + 1))
            .to("plus-one", Produced::with(Serdes::string(), Serdes::optional(Serdes::i64())));
        table
            .to_stream()
            .map(|k, v| (format!("{k}!"), v))
            .to("rekeyed", Produced::with(Serdes::string(), Serdes::i64()));
        let driver = TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("deletes")).unwrap();
        let input = driver.create_input_topic("prices", Serdes::string(), Serdes::i64());
        let doubled = driver.create_output_topic("doubled", Serdes::string(), Serdes::optional(Serdes::i64()));
        let plus_one = driver.create_output_topic("plus-one", Serdes::string(), Serdes::optional(Serdes::i64()));
        let rekeyed = driver.create_output_topic("rekeyed", Serdes::string(), Serdes::i64());

        let mut model: BTreeMap<String, i64> = BTreeMap::new();
        let (mut expect_doubled, mut expect_plus, mut expect_rekeyed) = (Vec::new(), Vec::new(), Vec::new());
        let mut dropped = 0u64;
        for (i, (k, v)) in ops.iter().enumerate() {
            let key = format!("p{k}");
            match v {
                Some(v) => {
                    input.pipe_input_at(key.clone(), *v, i as i64).unwrap();
                    model.insert(key.clone(), *v);
                    expect_doubled.push((key.clone(), Some(v * 2)));
                    expect_plus.push((key.clone(), Some(v + 1)));
                    expect_rekeyed.push((format!("{key}!"), *v));
                }
                None => {
                    input.pipe_tombstone_at(key.clone(), i as i64).unwrap();
                    // A delete of a key the table did not hold goes nowhere (Kafka's cached
                    // table); one it held is a tombstone downstream.
                    if model.remove(&key).is_some() {
                        expect_doubled.push((key.clone(), None));
                        expect_plus.push((key.clone(), None));
                        dropped += 1;
                    }
                }
            }
        }
        prop_assert_eq!(doubled.read_key_values_to_list().unwrap(), expect_doubled);
        prop_assert_eq!(plus_one.read_key_values_to_list().unwrap(), expect_plus);
        prop_assert_eq!(rekeyed.read_key_values_to_list().unwrap(), expect_rekeyed);
        prop_assert_eq!(driver.dropped_records(), dropped, "map drops each delete, counted");
    }
}

/// Kafka's stream–table join rules for null keys (KIP-962): the inner join drops a record with
/// a null key, counted; the left join joins it with no row, without looking the table up (a
/// table keyed `Some("")` must not answer a null key).
#[test]
fn stream_table_joins_take_null_keys_as_kafka() {
    let builder = StreamsBuilder::new();
    let table = builder.table(
        "names",
        Consumed::with(opt(), Serdes::string()),
        Materialized::new(),
    );
    let orders = builder.stream("orders", Consumed::with(opt(), Serdes::i64()));
    orders
        .join(&table, |amount, name| format!("{name}:{amount}"))
        .to("inner", Produced::with(opt(), Serdes::string()));
    orders
        .left_join(&table, |amount, name: Option<String>| {
            format!("{}:{amount}", name.unwrap_or_else(|| "-".into()))
        })
        .to("left", Produced::with(opt(), Serdes::string()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("joins")).unwrap();
    let names = driver.create_input_topic("names", opt(), Serdes::string());
    let orders = driver.create_input_topic("orders", opt(), Serdes::i64());
    let inner = driver.create_output_topic("inner", opt(), Serdes::string());
    let left = driver.create_output_topic("left", opt(), Serdes::string());
    names
        .pipe_input_at(Some(String::new()), "empty".into(), 1)
        .unwrap();
    names
        .pipe_input_at(Some("a".into()), "ann".into(), 2)
        .unwrap();
    names.pipe_input_at(None, "nobody".into(), 3).unwrap();
    assert_eq!(
        driver.dropped_records(),
        1,
        "a table drops a record without a key"
    );
    orders.pipe_input_at(Some("a".into()), 10, 4).unwrap();
    orders.pipe_input_at(None, 20, 5).unwrap();
    orders.pipe_input_at(Some(String::new()), 30, 6).unwrap();
    assert_eq!(
        inner.read_records_to_list().unwrap(),
        vec![
            TestRecord::new(Some("a".into()), "ann:10".to_string(), 4),
            TestRecord::new(Some(String::new()), "empty:30".to_string(), 6),
        ]
    );
    assert_eq!(
        left.read_key_values_to_list().unwrap(),
        vec![
            (Some("a".into()), "ann:10".to_string()),
            (None, "-:20".to_string()),
            (Some(String::new()), "empty:30".to_string()),
        ]
    );
    assert_eq!(
        driver.dropped_records(),
        2,
        "the inner join drops the null key, counted"
    );
}

/// A windowed count drops null keys and values as the plain count does.
#[test]
fn windowed_counts_drop_null_keys_counted() {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", Consumed::with(opt(), Serdes::string()))
        .group_by_key_with(Grouped::with(opt(), Serdes::string()))
        .windowed_by(riffle::TimeWindows::of_size_with_no_grace(
            std::time::Duration::from_secs(10),
        ))
        .count()
        .to_stream()
        .map(|w, c| (w.key.unwrap_or_default(), c))
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("windows")).unwrap();
    let input = driver.create_input_topic("in", opt(), Serdes::string());
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    input
        .pipe_input_at(Some("a".into()), "x".into(), 1)
        .unwrap();
    input.pipe_value_at("y".into(), 2).unwrap();
    input
        .pipe_input_at(Some("a".into()), "z".into(), 3)
        .unwrap();
    assert_eq!(
        out.read_key_values_to_list().unwrap(),
        vec![("a".to_string(), 1), ("a".to_string(), 2)]
    );
    assert_eq!(driver.dropped_records(), 1);
}

/// A key serde without a null meets a record without a key: the error names the record and
/// says how to read null keys.
#[test]
fn a_null_key_for_a_serde_without_null_is_an_error_naming_the_record_and_the_way_out() {
    let builder = StreamsBuilder::new();
    builder
        .stream("lines", Consumed::with(Serdes::string(), Serdes::string()))
        .to("out", Produced::with(Serdes::string(), Serdes::string()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("strict")).unwrap();
    let input = driver.create_input_topic("lines", Serdes::string(), Serdes::string());
    let error = input
        .pipe_input_value("hello".into())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("lines-0 offset 0") && error.contains("Serdes::optional"),
        "{error}"
    );
}

/// Appends `values` with null keys to `topic` (created with `partitions`), spread round-robin.
fn produce_without_keys(log: &Log, topic: &str, partitions: u32, values: &[String]) {
    log.create_topic(topic, partitions).unwrap();
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for (i, v) in values.iter().enumerate() {
        builders[i % partitions as usize].push(i as i64, None, Some(v.as_bytes()));
    }
    for (p, b) in builders.iter_mut().enumerate() {
        log.append(&TopicPartition::new(topic, p as u32), b)
            .unwrap();
    }
}

/// On stream threads over the embedded log: Kafka's WordCountDemo input (lines without keys,
/// as Kafka's console producer writes them) counted per word equals a HashMap count, and a copy
/// of keyed and unkeyed records into a three-partition topic writes a null key as null, on its
/// task's partition, and an empty key as an empty key, on murmur2's partition for zero bytes.
#[test]
fn word_count_of_unkeyed_lines_and_null_keys_on_stream_threads() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let lines: Vec<String> = (0..400)
        .map(|i| format!("w{} w{} W{}", i % 7, i % 11, i % 3))
        .collect();
    produce_without_keys(&log, "lines", 2, &lines);
    log.create_topic("keyed", 1).unwrap();
    let mut batch = BatchBuilder::new(Compression::None);
    for (i, key) in [Some(&b""[..]), None, Some(&b"k"[..])].iter().enumerate() {
        batch.push(i as i64, *key, Some(b"v"));
    }
    log.append(&TopicPartition::new("keyed", 0), &mut batch)
        .unwrap();
    log.create_topic("copy", 3).unwrap();

    let builder = StreamsBuilder::new();
    builder
        .stream("lines", Consumed::with(opt(), Serdes::string()))
        .flat_map_values(|line: String| {
            line.to_lowercase()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_, word| word.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    builder
        .stream("keyed", Consumed::with(opt(), Serdes::string()))
        .to("copy", Produced::with(opt(), Serdes::string()));
    let config = common::two_thread_config("word-count", &dir.path().join("state"));
    let app = StreamsApp::new(
        builder.build().unwrap(),
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )
    .unwrap();
    common::run_until_idle(app);

    let words: Vec<String> = lines
        .iter()
        .flat_map(|l| {
            l.to_lowercase()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        common::latest_longs(&log, "counts"),
        common::count_model(words.iter().map(String::as_str))
    );
    let mut copied = Vec::new();
    for p in 0..3 {
        for batch in log
            .fetch(&TopicPartition::new("copy", p), 0, usize::MAX)
            .unwrap()
        {
            for record in batch.records() {
                let record = record.unwrap();
                copied.push((record.key().map(|k| k.to_vec()), p));
            }
        }
    }
    copied.sort();
    let mut expected = vec![
        (None, 0), // the task of keyed-0 keeps a null key on partition 0 % 3
        (Some(Vec::new()), partition_for_key(b"", 3)),
        (Some(b"k".to_vec()), partition_for_key(b"k", 3)),
    ];
    expected.sort();
    assert_eq!(copied, expected);
}

/// Stream–stream joins take null keys as KIP-962 says: the inner join drops a record with a
/// null key, counted; the left and outer joins emit it at once, unjoined.
#[test]
fn stream_stream_joins_take_null_keys_as_kafka() {
    use riffle::JoinWindows;
    use riffle::dsl::StreamJoined;
    let builder = StreamsBuilder::new();
    let left = builder.stream("l", Consumed::with(opt(), Serdes::string()));
    let right = builder.stream("r", Consumed::with(opt(), Serdes::string()));
    let windows = JoinWindows::of_time_difference_with_no_grace(std::time::Duration::from_secs(1));
    let joined = |store: &str| {
        StreamJoined::with(opt(), Serdes::string(), Serdes::string()).with_store_name(store)
    };
    left.join_stream(&right, |l, r| format!("{l}+{r}"), windows, joined("inner"))
        .to("inner", Produced::with(opt(), Serdes::string()));
    left.left_join_stream(
        &right,
        |l, r| format!("{l}+{}", r.cloned().unwrap_or_else(|| "-".into())),
        windows,
        joined("left"),
    )
    .to("left", Produced::with(opt(), Serdes::string()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("ss")).unwrap();
    let l = driver.create_input_topic("l", opt(), Serdes::string());
    let r = driver.create_input_topic("r", opt(), Serdes::string());
    let inner = driver.create_output_topic("inner", opt(), Serdes::string());
    let left_out = driver.create_output_topic("left", opt(), Serdes::string());
    r.pipe_input_at(Some("a".into()), "R".into(), 0).unwrap();
    l.pipe_input_at(Some("a".into()), "L".into(), 1).unwrap();
    l.pipe_value_at("N".into(), 2).unwrap();
    assert_eq!(
        inner.read_key_values_to_list().unwrap(),
        [(Some("a".to_string()), "L+R".to_string())]
    );
    assert_eq!(
        left_out.read_key_values_to_list().unwrap(),
        [
            (Some("a".to_string()), "L+R".to_string()),
            (None, "N+-".to_string())
        ],
        "the left join emits the null key at once, unjoined"
    );
    assert_eq!(
        driver.dropped_records(),
        1,
        "the inner join drops the null key, counted"
    );
}
