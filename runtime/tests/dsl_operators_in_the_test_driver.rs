//! The DSL's operators in the topology test driver, each output compared record by record with
//! a plain model of the operator (what used to be checked end to end only by counts). The end-
//! to-end scenarios on stream threads and logs stay in the other test files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use riffle::{
    Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder, StreamsConfig,
    TopologyTestDriver, testing::TestRecord,
};

#[test]
fn stateless_operators_compose_record_by_record() {
    let builder = StreamsBuilder::new();
    let a = builder.stream("a", Consumed::with(Serdes::string(), Serdes::string()));
    let b = builder.stream("b", Consumed::with(Serdes::string(), Serdes::string()));
    a.merge(&b)
        .map_values(|v| v.parse::<i64>().unwrap_or(-1))
        .filter(|_, v| v % 2 == 0)
        .filter_not(|_, v| v % 3 == 0)
        .flat_map_values(|v| vec![v, v + 1])
        .map(|k, v| (format!("{k}-x"), v))
        .select_key(|k, _| k.to_uppercase())
        .to("out", Produced::with(Serdes::string(), Serdes::i64()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("ops")).unwrap();
    let inputs = [
        driver.create_input_topic("a", Serdes::string(), Serdes::string()),
        driver.create_input_topic("b", Serdes::string(), Serdes::string()),
    ];
    let out = driver.create_output_topic("out", Serdes::string(), Serdes::i64());
    let mut model = Vec::new();
    for i in 0..200i64 {
        let key = format!("k{}", i % 7);
        inputs[(i % 2) as usize]
            .pipe_input_at(key.clone(), i.to_string(), 1_000 + i)
            .unwrap();
        if i % 2 == 0 && i % 3 != 0 {
            for v in [i, i + 1] {
                model.push(TestRecord::new(
                    format!("{key}-X").to_uppercase(),
                    v,
                    1_000 + i,
                ));
            }
        }
    }
    assert_eq!(
        out.read_records_to_list().unwrap(),
        model,
        "keys, values and the input's timestamps"
    );
}

#[test]
fn count_reduce_and_aggregate_follow_their_models_after_each_record() {
    let builder = StreamsBuilder::new();
    let words = builder.stream("words", Consumed::with(Serdes::string(), Serdes::string()));
    let grouped = words.group_by_key();
    grouped
        .count_with(Materialized::named("counts"))
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    grouped
        .reduce(|a, b| format!("{a}+{b}"), Materialized::named("joined"))
        .to_stream()
        .to("joined", Produced::with(Serdes::string(), Serdes::string()));
    grouped
        .aggregate(
            || 0i64,
            |_, v, total| total + v.len() as i64,
            Materialized::named("lengths"),
            Serdes::i64(),
        )
        .to_stream()
        .to("lengths", Produced::with(Serdes::string(), Serdes::i64()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("agg")).unwrap();
    let input = driver.create_input_topic("words", Serdes::string(), Serdes::string());
    let counts = driver.create_output_topic("counts", Serdes::string(), Serdes::i64());
    let joined = driver.create_output_topic("joined", Serdes::string(), Serdes::string());
    let lengths = driver.create_output_topic("lengths", Serdes::string(), Serdes::i64());
    let (mut c, mut j, mut l): (
        HashMap<String, i64>,
        HashMap<String, String>,
        HashMap<String, i64>,
    ) = Default::default();
    for i in 0..120u32 {
        let key = format!("k{}", (i * 5) % 9);
        let value = "v".repeat((i % 4) as usize + 1);
        input
            .pipe_input_at(key.clone(), value.clone(), i64::from(i))
            .unwrap();
        *c.entry(key.clone()).or_default() += 1;
        j.entry(key.clone())
            .and_modify(|s| *s = format!("{s}+{value}"))
            .or_insert(value.clone());
        *l.entry(key.clone()).or_default() += value.len() as i64;
        // The driver commits after every record: each update comes out at once, with the
        // timestamp of the record that made it.
        assert_eq!(
            counts.read_record().unwrap(),
            Some(TestRecord::new(key.clone(), c[&key], i64::from(i)))
        );
        assert_eq!(
            joined.read_key_value().unwrap(),
            Some((key.clone(), j[&key].clone()))
        );
        assert_eq!(
            lengths.read_key_value().unwrap(),
            Some((key.clone(), l[&key]))
        );
    }
    let store = driver.get_key_value_store::<String, i64>("counts").unwrap();
    let mut model: Vec<(String, i64)> = c.into_iter().collect();
    model.sort();
    assert_eq!(store.all().unwrap(), model);
}

#[test]
fn grouping_by_a_new_key_repartitions_and_counts_exactly() {
    let builder = StreamsBuilder::new();
    builder
        .stream("lines", Consumed::with(Serdes::string(), Serdes::string()))
        .flat_map(|_, line: String| {
            line.split_whitespace()
                .map(|w| (w.to_owned(), w.to_owned()))
                .collect::<Vec<_>>()
        })
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::string()).named("by-word"))
        .count()
        .to_stream()
        .to(
            "word-counts",
            Produced::with(Serdes::string(), Serdes::i64()),
        );
    let topology = builder.build().unwrap();
    assert_eq!(topology.subtopology_count(), 2);
    let driver = TopologyTestDriver::new(topology, StreamsConfig::new("wc")).unwrap();
    let input = driver.create_input_topic("lines", Serdes::string(), Serdes::string());
    let out = driver.create_output_topic("word-counts", Serdes::string(), Serdes::i64());
    let lines = ["a b a", "c a", "b b b"];
    let mut model: HashMap<String, i64> = HashMap::new();
    let mut updates = Vec::new();
    for line in lines {
        input.pipe_input("line".into(), line.into()).unwrap();
        for w in line.split_whitespace() {
            *model.entry(w.into()).or_default() += 1;
        }
        // One committed update per distinct word of the line (cached within the record).
        let mut words: Vec<&str> = line.split_whitespace().collect();
        words.sort();
        words.dedup();
        let mut got = out.read_key_values_to_list().unwrap();
        got.sort();
        let want: Vec<(String, i64)> = words.iter().map(|w| (w.to_string(), model[*w])).collect();
        assert_eq!(got, want, "after {line:?}");
        updates.extend(got);
    }
    let repartitioned = driver.read_raw("wc-by-word-repartition", 0).unwrap();
    assert_eq!(
        repartitioned.len(),
        8,
        "every word went through the repartition topic"
    );
}

#[test]
fn an_aggregate_keeps_the_largest_timestamp_of_its_inputs_like_kafka() {
    let builder = StreamsBuilder::new();
    builder
        .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("ts")).unwrap();
    let input = driver.create_input_topic("words", Serdes::string(), Serdes::string());
    let counts = driver.create_output_topic("counts", Serdes::string(), Serdes::i64());
    // Each record is committed before the next, so the later ones read the aggregate (and its
    // timestamp) back from the store, not from the cache.
    for ts in [5, 3, 7, 6] {
        input.pipe_input_at("a".into(), "x".into(), ts).unwrap();
    }
    let got: Vec<(i64, i64)> = counts
        .read_records_to_list()
        .unwrap()
        .into_iter()
        .map(|r| (r.value, r.timestamp))
        .collect();
    assert_eq!(got, [(1, 5), (2, 5), (3, 7), (4, 7)]);
}

/// The joins' `ValueJoinerWithKey` twins hand the joiner the record's key: stream–table inner
/// and left, and stream–stream inner, left and outer, each against the same join without the
/// key.
#[test]
fn joiners_with_key_see_the_key() {
    use riffle::JoinWindows;
    use riffle::dsl::StreamJoined;
    use std::time::Duration;
    let builder = StreamsBuilder::new();
    let table = builder.table(
        "t",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::new(),
    );
    let left = builder.stream("l", Consumed::with(Serdes::string(), Serdes::string()));
    let right = builder.stream("r", Consumed::with(Serdes::string(), Serdes::string()));
    let out = |name: &str, s: riffle::KStream<String, String>| {
        s.to(name, Produced::with(Serdes::string(), Serdes::string()));
    };
    out(
        "st-inner",
        left.join_with_key(&table, |k, v, t| format!("{k}:{v}+{t}")),
    );
    out(
        "st-left",
        left.left_join_with_key(&table, |k, v, t: Option<String>| {
            format!("{k}:{v}+{}", t.unwrap_or_default())
        }),
    );
    let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10));
    let joined = || StreamJoined::with(Serdes::string(), Serdes::string(), Serdes::string());
    out(
        "ss-inner",
        left.join_stream_with_key(&right, |k, l, r| format!("{k}:{l}+{r}"), windows, joined()),
    );
    out(
        "ss-left",
        left.left_join_stream_with_key(
            &right,
            |k, l, r| format!("{k}:{l}+{}", r.cloned().unwrap_or_default()),
            windows,
            joined().with_store_name("ss-left"),
        ),
    );
    out(
        "ss-outer",
        left.outer_join_stream_with_key(
            &right,
            |k, l, r| {
                format!(
                    "{k}:{}+{}",
                    l.cloned().unwrap_or_default(),
                    r.cloned().unwrap_or_default()
                )
            },
            windows,
            joined().with_store_name("ss-outer"),
        ),
    );
    let driver =
        TopologyTestDriver::new(builder.build().unwrap(), StreamsConfig::new("with-key")).unwrap();
    let t = driver.create_input_topic("t", Serdes::string(), Serdes::string());
    let l = driver.create_input_topic("l", Serdes::string(), Serdes::string());
    let r = driver.create_input_topic("r", Serdes::string(), Serdes::string());
    t.pipe_input_at("a".into(), "T".into(), 0).unwrap();
    r.pipe_input_at("a".into(), "R".into(), 1).unwrap();
    l.pipe_input_at("a".into(), "L".into(), 2).unwrap();
    let read = |topic: &str| {
        driver
            .create_output_topic(topic, Serdes::string(), Serdes::string())
            .read_key_values_to_list()
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect::<Vec<_>>()
    };
    assert_eq!(read("st-inner"), ["a:L+T"]);
    assert_eq!(read("st-left"), ["a:L+T"]);
    assert_eq!(read("ss-inner"), ["a:L+R"]);
    assert_eq!(read("ss-left"), ["a:L+R"]);
    assert_eq!(read("ss-outer"), ["a:L+R"]);
}
