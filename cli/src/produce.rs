//! `riffle produce`: `key<TAB>value` lines into a topic, partitioned like Kafka's producer.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};

/// Arguments of `riffle produce` (its `--help` text, in `main.rs`, says it is not atomic).
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The embedded log's directory (created if missing).
    #[arg(long)]
    log_dir: PathBuf,
    /// The topic to append to.
    #[arg(long)]
    topic: String,
    /// Partitions of the topic: created with this many (1 if not given) if missing; an
    /// existing topic with another count is an error.
    #[arg(long)]
    partitions: Option<u32>,
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
    let partitions = match (log.partitions(&args.topic), args.partitions) {
        (Some(existing), None) => existing,
        (_, requested) => {
            // Creates it, or fails naming both counts if it exists with another.
            let requested = requested.unwrap_or(1);
            log.create_topic(&args.topic, requested)?;
            requested
        }
    };
    let mut input: Box<dyn BufRead> = match &args.file {
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
    let flush_all = |log: &Log, builders: &mut [BatchBuilder]| -> anyhow::Result<()> {
        for p in 0..builders.len() {
            flush(log, builders, p)?;
        }
        log.sync()?;
        Ok(())
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut written = 0u64;
    let mut raw = Vec::new();
    for number in 1.. {
        raw.clear();
        let read = input.read_until(b'\n', &mut raw);
        let problem = match read {
            Ok(0) => break,
            Ok(_) => {
                let line = raw.strip_suffix(b"\n").unwrap_or(&raw);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                match std::str::from_utf8(line) {
                    Err(e) => Some(format!("not UTF-8 ({e})")),
                    Ok(line) => match line.split_once('\t') {
                        None => Some("expected `key<TAB>value`, found no tab".to_owned()),
                        Some((key, value)) => {
                            let p = partition_for_key(key.as_bytes(), partitions) as usize;
                            builders[p].push(now, Some(key.as_bytes()), Some(value.as_bytes()));
                            written += 1;
                            if builders[p].size_bytes() >= BATCH_BYTES {
                                flush(&log, &mut builders, p)?;
                            }
                            None
                        }
                    },
                }
            }
            Err(e) => Some(format!("cannot be read ({e})")),
        };
        if let Some(problem) = problem {
            // Everything before this line is appended whole and made durable; nothing of it
            // or after it is.
            flush_all(&log, &mut builders).with_context(|| {
                format!(
                    "line {number}: {problem}; writing the {written} records before it failed too"
                )
            })?;
            bail!(
                "line {number}: {problem}; the {written} records before it were written to {} \
                 (and fsynced), nothing from line {number} on",
                args.topic
            );
        }
    }
    flush_all(&log, &mut builders)?;
    eprintln!(
        "wrote {written} records to {} ({partitions} partitions)",
        args.topic
    );
    Ok(())
}
