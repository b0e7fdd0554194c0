//! The README's test-driver example, run as written. The test below checks that the README's
//! block is this file's code between the markers, so the two cannot drift apart.
#![allow(clippy::unwrap_used)]

// README begin
use riffle::{Consumed, Produced, Serdes, StreamsBuilder, StreamsConfig, TopologyTestDriver};

#[test]
fn counts_words_per_key() -> riffle::Result<()> {
    let builder = StreamsBuilder::new();
    builder
        .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    let driver = TopologyTestDriver::new(builder.build()?, StreamsConfig::new("word-count"))?;
    let words = driver.create_input_topic("words", Serdes::string(), Serdes::string());
    let counts = driver.create_output_topic("counts", Serdes::string(), Serdes::i64());

    words.pipe_input_at("alice".into(), "hello".into(), 1_000)?;
    words.pipe_input_at("bob".into(), "hi".into(), 1_001)?;
    words.pipe_input_at("alice".into(), "again".into(), 1_002)?;

    let records = counts.read_records_to_list()?;
    let got: Vec<(&str, i64, i64)> = records
        .iter()
        .map(|r| (r.key.as_str(), r.value, r.timestamp))
        .collect();
    assert_eq!(
        got,
        [("alice", 1, 1_000), ("bob", 1, 1_001), ("alice", 2, 1_002)]
    );
    let store =
        driver.get_key_value_store::<String, i64>("KSTREAM-AGGREGATE-STATE-STORE-0000000001")?;
    assert_eq!(store.get(&"alice".to_string())?, Some(2));
    Ok(())
}
// README end

#[test]
fn the_readme_shows_this_test() {
    let readme = include_str!("../../README.md");
    let this = include_str!("readme_test_driver_example.rs");
    let code = this
        .split("// README begin\n")
        .nth(1)
        .and_then(|rest| rest.split("// README end").next())
        .unwrap();
    let block = readme
        .split("```rust\n")
        .find(|b| b.contains("TopologyTestDriver::new"))
        .and_then(|b| b.split("```").next())
        .unwrap();
    assert_eq!(
        block, code,
        "README.md's test-driver example differs from this file"
    );
}
