//! The groupByKey-count sample, written against riffle's public API only.
//!
//! ```text
//! cargo run -p riffle-examples --example group_by_key_count -- [RECORDS] [KEYS]
//! ```
//!
//! It writes RECORDS records over KEYS keys to a topic `words` of an embedded log in a fresh
//! temporary directory, counts them per key with two stream threads, and prints the top keys.

use std::collections::HashMap;
use std::error::Error;
use std::time::Instant;

use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let keys: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1_000);
    let dir = std::env::temp_dir().join(format!("riffle-example-{}", std::process::id()));
    let log = Log::open(dir.join("log"), LogOptions::default())?;

    // Input: `records` records over `keys` keys, partitioned like Kafka's producer would.
    let partitions = 4;
    log.create_topic("words", partitions)?;
    let mut batches: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for i in 0..records {
        let key = format!("key-{}", (i * 7919) % keys);
        let p = partition_for_key(key.as_bytes(), partitions);
        batches[p as usize].push(i as i64, Some(key.as_bytes()), Some(b"hello"));
    }
    for (p, batch) in batches.iter_mut().enumerate() {
        log.append(&TopicPartition::new("words", p as u32), batch)?;
    }

    // stream("words").groupByKey().count().toStream().to("counts")
    let builder = StreamsBuilder::new();
    builder
        .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    let topology = builder.build()?;
    println!("{}", topology.describe());

    let mut config = StreamsConfig::new("group-by-key-count-example");
    config.num_stream_threads = 2;
    config.state_dir = dir.join("state");
    let start = Instant::now();
    let summary = StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared())?
        .run_until_idle()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "counted {} records in {secs:.2} s ({:.0} records/s)",
        summary.records_processed,
        summary.records_processed as f64 / secs
    );

    // Read the latest count per key back.
    let mut counts: HashMap<String, i64> = HashMap::new();
    for p in 0..log.partitions("counts").unwrap_or(0) {
        let tp = TopicPartition::new("counts", p);
        for batch in log.fetch(&tp, 0, usize::MAX)? {
            for record in batch.records() {
                let record = record?;
                let key = String::from_utf8_lossy(record.key().map(|k| &k[..]).unwrap_or_default())
                    .into_owned();
                let value = record
                    .value()
                    .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok())
                    .ok_or("not a count")?;
                counts.insert(key, i64::from_be_bytes(value));
            }
        }
    }
    let mut top: Vec<_> = counts.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (key, count) in top.iter().take(5) {
        println!("{key}\t{count}");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
