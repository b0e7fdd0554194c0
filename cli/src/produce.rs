//! `riffle produce`: `key<TAB>value` lines into a topic, partitioned like Kafka's producer.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};

/// Arguments of `riffle produce`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The embedded log's directory (created if missing).
    #[arg(long)]
    log_dir: PathBuf,
    /// The topic to append to.
    #[arg(long)]
    topic: String,
    /// Partitions of the topic if it has to be created.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Compression of the written batches: none, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// The input file; standard input when absent.
    file: Option<PathBuf>,
}

/// Lines are appended in batches of this many bytes per partition.
const BATCH_BYTES: usize = 256 << 10;

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let compression: Compression = args
        .compression
        .parse()
        .map_err(|_| anyhow::anyhow!("unknown compression {:?}", args.compression))?;
    let log = Log::open(&args.log_dir, LogOptions::default())
        .with_context(|| format!("opening the log at {}", args.log_dir.display()))?;
    let partitions = match log.partitions(&args.topic) {
        Some(p) => p,
        None => {
            log.create_topic(&args.topic, args.partitions)?;
            args.partitions
        }
    };
    let input: Box<dyn BufRead> = match &args.file {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(compression))
        .collect();
    let topic: std::sync::Arc<str> = args.topic.as_str().into();
    let flush = |log: &Log, builders: &mut [BatchBuilder], p: usize| -> anyhow::Result<()> {
        if !builders[p].is_empty() {
            log.append(
                &TopicPartition::new(topic.clone(), p as u32),
                &mut builders[p],
            )?;
        }
        Ok(())
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut written = 0u64;
    for (index, line) in input.lines().enumerate() {
        let number = index + 1;
        let line = line.with_context(|| format!("reading line {number}"))?;
        let Some((key, value)) = line.split_once('\t') else {
            // Everything before this line is appended whole; nothing of it or after it is.
            for p in 0..builders.len() {
                flush(&log, &mut builders, p)?;
            }
            log.commit_offsets("riffle-produce", &[])?;
            bail!(
                "line {number}: expected `key<TAB>value`, found no tab; the {written} records before it were written, nothing after"
            );
        };
        let p = partition_for_key(key.as_bytes(), partitions) as usize;
        builders[p].push(now, Some(key.as_bytes()), Some(value.as_bytes()));
        written += 1;
        if builders[p].size_bytes() >= BATCH_BYTES {
            flush(&log, &mut builders, p)?;
        }
    }
    for p in 0..builders.len() {
        flush(&log, &mut builders, p)?;
    }
    log.sync()?;
    eprintln!(
        "wrote {written} records to {} ({partitions} partitions)",
        args.topic
    );
    Ok(())
}
