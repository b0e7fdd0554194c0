//! The groupByKey-count sample, written against riffle's public API only.
//!
//! ```text
//! cargo run -p riffle-examples --example group_by_key_count -- [--bootstrap-servers HOST:PORT] [RECORDS] [KEYS]
//! ```
//!
//! It writes RECORDS records over KEYS keys to a topic `words` — of an embedded log in a fresh
//! temporary directory, or, with `--bootstrap-servers`, of an Apache Kafka 4.x cluster (topic
//! names then carry a run id, so every run starts from nothing) — counts them per key with two
//! stream threads, and prints the top keys. The application code is the same on both backends.

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use riffle::backend::{Backend, TopicKind};
use riffle::log::{Log, LogOptions, TopicPartition};
use riffle::{
    Consumed, EmbeddedBackend, Produced, Serdes, StreamsApp, StreamsBuilder, StreamsConfig,
    producer::Producer,
};
use riffle_kafka::{KafkaBackend, KafkaConfig};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut servers = None;
    if let Some(i) = args.iter().position(|a| a == "--bootstrap-servers") {
        args.remove(i);
        if i >= args.len() {
            return Err("--bootstrap-servers needs HOST:PORT".into());
        }
        servers = Some(args.remove(i));
    }
    let mut args = args.into_iter();
    let records: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let keys: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1_000);
    let dir = std::env::temp_dir().join(format!("riffle-example-{}", std::process::id()));

    // The backend: the embedded log, or a Kafka cluster. Everything below is the same on both.
    let (backend, words, counts): (Arc<dyn Backend>, String, String) = match &servers {
        None => {
            let log = Log::open(dir.join("log"), LogOptions::default())?;
            (
                EmbeddedBackend::new(log).shared(),
                "words".into(),
                "counts".into(),
            )
        }
        Some(servers) => {
            let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            (
                KafkaBackend::connect(KafkaConfig::new(servers.as_str()))?.shared(),
                format!("words-{run}"),
                format!("counts-{run}"),
            )
        }
    };

    // Input: `records` records over `keys` keys, through riffle's typed producer (partitioned
    // by Kafka's murmur2 of the key, batched per partition).
    backend.create_topic(&words, 4, TopicKind::User)?;
    let mut producer = Producer::new(backend.clone(), Serdes::string(), Serdes::string());
    let hello = "hello".to_owned();
    for i in 0..records {
        producer.send(&words, &format!("key-{}", (i * 7919) % keys), &hello)?;
    }
    producer.close()?;

    // stream("words").groupByKey().count().toStream().to("counts")
    let builder = StreamsBuilder::new();
    builder
        .stream(&words, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .count()
        .to_stream()
        .to(&counts, Produced::with(Serdes::string(), Serdes::i64()));
    let topology = builder.build()?;
    println!("{}", topology.describe());

    let mut config = StreamsConfig::new(format!("group-by-key-count-example-{words}"));
    config.num_stream_threads = 2;
    config.state_dir = dir.join("state");
    let start = Instant::now();
    let mut app = StreamsApp::new(topology, config, backend.clone())?;
    app.start()?;
    while app.records_processed() < records && !app.is_shutting_down() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = app.close()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "counted {} records in {secs:.2} s ({:.0} records/s)",
        summary.records_processed,
        summary.records_processed as f64 / secs
    );

    // Read the latest count per key back.
    let mut latest: HashMap<String, i64> = HashMap::new();
    for p in 0..backend.partitions(&counts)?.unwrap_or(0) {
        let tp = TopicPartition::new(counts.as_str(), p);
        let end = backend.end_offset(&tp)?;
        let mut position = 0;
        while position < end {
            let fetched = backend.fetch(&tp, position, 1 << 20)?;
            if fetched.is_empty() {
                break;
            }
            for batch in fetched {
                for record in batch.records() {
                    let record = record?;
                    if record.offset() < position {
                        continue;
                    }
                    let key =
                        String::from_utf8_lossy(record.key().map(|k| &k[..]).unwrap_or_default())
                            .into_owned();
                    let value = record
                        .value()
                        .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok())
                        .ok_or("not a count")?;
                    latest.insert(key, i64::from_be_bytes(value));
                }
                position = batch.last_offset() + 1;
            }
        }
    }
    let mut top: Vec<_> = latest.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (key, count) in top.iter().take(5) {
        println!("{key}\t{count}");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
