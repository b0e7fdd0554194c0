//! The test driver and real stream threads over the embedded log give the same output for the
//! same topology and random inputs: a stateful processor (every output record, in order per
//! key) next to a DSL count (the latest count per key; threads cache and commit on their own
//! schedule, so they may forward fewer intermediate counts).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use proptest::prelude::*;
use riffle::log::{Log, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Processor, ProcessorContext, Produced, Record, Result, Serdes,
    Stores, StreamsApp, StreamsBuilder, StreamsConfig, Topology, TopologyTestDriver,
};

/// Keeps each key's longest value so far; forwards `key -> "value:length"` when it grows.
struct Longest;

impl Processor<String, String, String, String> for Longest {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        let mut store = ctx.get_state_store::<String, String>("longest")?;
        let best = store.get(record.key())?;
        if best.as_ref().is_none_or(|b| record.value().len() > b.len()) {
            store.put(record.key(), record.value())?;
            let out = format!("{}:{}", record.value(), record.value().len());
            ctx.forward(record.with_value(out))?;
        }
        Ok(())
    }
}

fn topology() -> Topology {
    let builder = StreamsBuilder::new();
    builder.add_state_store(
        Stores::key_value_store_builder(
            Stores::in_memory_key_value_store("longest"),
            Serdes::string(),
            Serdes::string(),
        )
        .with_caching_enabled(),
    );
    let words = builder.stream("words", Consumed::with(Serdes::string(), Serdes::string()));
    words.process(|| Longest, &["longest"]).to(
        "longest-out",
        Produced::with(Serdes::string(), Serdes::string()),
    );
    words
        .group_by_key()
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    builder.build().unwrap()
}

/// Per key, the values of `topic` in offset order.
fn per_key(log: &Log, topic: &str) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        for batch in log
            .fetch(&TopicPartition::new(topic, p), 0, usize::MAX)
            .unwrap()
        {
            for r in batch.records() {
                let r = r.unwrap();
                let key = String::from_utf8(r.key().unwrap().to_vec()).unwrap();
                let value = String::from_utf8(r.value().unwrap().to_vec()).unwrap();
                out.entry(key).or_default().push(value);
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn the_driver_and_stream_threads_agree(
        records in proptest::collection::vec((0u8..12, 0usize..20), 1..400),
        partitions in 1u32..4,
    ) {
        let records: Vec<(String, String)> = records
            .iter()
            .map(|&(k, len)| (format!("k{k}"), "x".repeat(len)))
            .collect();

        let driver = TopologyTestDriver::new(topology(), StreamsConfig::new("agree")).unwrap();
        let input = driver.create_input_topic("words", Serdes::string(), Serdes::string());
        let longest = driver.create_output_topic("longest-out", Serdes::string(), Serdes::string());
        let counts = driver.create_output_topic("counts", Serdes::string(), Serdes::i64());
        for (i, (k, v)) in records.iter().enumerate() {
            input.pipe_input_at(k.clone(), v.clone(), i as i64).unwrap();
        }
        let mut driver_longest: HashMap<String, Vec<String>> = HashMap::new();
        for (k, v) in longest.read_key_values_to_list().unwrap() {
            driver_longest.entry(k).or_default().push(v);
        }
        let driver_counts = counts.read_key_values_to_map().unwrap();

        let log = Log::in_memory();
        common::produce(&log, "words", partitions, &records);
        let state = tempfile::tempdir().unwrap();
        let mut config = StreamsConfig::new("agree");
        config.state_dir = state.path().to_owned();
        config.num_stream_threads = 2;
        let app = StreamsApp::new(topology(), config, EmbeddedBackend::new(log.clone()).shared())
            .unwrap();
        app.run_until_idle().unwrap();

        prop_assert_eq!(per_key(&log, "longest-out"), driver_longest);
        prop_assert_eq!(common::latest_longs(&log, "counts"), driver_counts.clone());
        let keys: Vec<&str> = records.iter().map(|(k, _)| k.as_str()).collect();
        prop_assert_eq!(driver_counts, common::count_model(keys));
    }
}
