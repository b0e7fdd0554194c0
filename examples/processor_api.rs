//! A processor-API application: de-duplication by key with a persistent store and a
//! wall-clock punctuator that expires old keys (`riffle_examples::dedup`).
//!
//! ```text
//! cargo run -p riffle-examples --example processor_api -- [RECORDS] [KEYS]
//! ```
//!
//! It writes RECORDS records over KEYS keys (timestamps 1 ms apart) to a topic `events` of an
//! embedded log in a fresh temporary directory, drops every record whose key passed less than
//! 1 s (of record time) earlier, and checks the output against a brute-force model.

use std::error::Error;
use std::time::{Duration, Instant};

use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};
use riffle_examples::dedup;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let records: i64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let keys: i64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let ttl = Duration::from_secs(1);
    let dir = std::env::temp_dir().join(format!("riffle-processor-api-{}", std::process::id()));
    let log = Log::open(dir.join("log"), LogOptions::default())?;
    let partitions = 4;
    log.create_topic("events", partitions)?;
    let mut input = Vec::new();
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    for i in 0..records {
        let key = format!("user-{}", (i * 7919) % keys);
        let value = format!("event-{i}");
        let p = partition_for_key(key.as_bytes(), partitions);
        builders[p as usize].push(i, Some(key.as_bytes()), Some(value.as_bytes()));
        input.push((key, value, i));
    }
    for (p, b) in builders.iter_mut().enumerate() {
        log.append(&TopicPartition::new("events", p as u32), b)?;
    }

    let mut config = StreamsConfig::new("dedup");
    config.state_dir = dir.join("state");
    config.num_stream_threads = 2;
    let topology = dedup::topology("events", "unique-events", ttl, Duration::from_millis(200))?;
    println!("{}", topology.describe());
    let started = Instant::now();
    let app = StreamsApp::new(topology, config, EmbeddedBackend::new(log.clone()).shared())?;
    let summary = app.run_until_idle()?;
    let elapsed = started.elapsed();

    let mut passed = Vec::new();
    for p in 0..partitions {
        for batch in log.fetch(&TopicPartition::new("unique-events", p), 0, usize::MAX)? {
            for record in batch.records() {
                let record = record?;
                let text = |b: Option<&bytes::Bytes>| {
                    String::from_utf8_lossy(b.map_or(&[][..], |b| b)).into_owned()
                };
                passed.push((text(record.key()), text(record.value()), record.timestamp()));
            }
        }
    }
    let mut expected = dedup::model(&input, ttl);
    passed.sort();
    expected.sort();
    println!(
        "{} records in, {} passed the de-duplication in {elapsed:.2?}; the model lets {} pass: {}",
        summary.records_processed,
        passed.len(),
        expected.len(),
        if passed == expected {
            "same records"
        } else {
            "DIFFERENT"
        }
    );
    std::fs::remove_dir_all(&dir)?;
    if passed != expected {
        return Err("the output differs from the model".into());
    }
    Ok(())
}
