//! `riffle topics`: list, create and describe the topics of the embedded log, as Kafka's
//! `kafka-topics.sh --list / --create / --describe`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use riffle_log::{Log, LogOptions, TopicConfig, TopicPartition};

/// `riffle topics`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The embedded log's directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Create the topic named by --topic (with --partitions and any --config). A topic that
    /// exists with that partition count and configuration is left as it is (and says so); one
    /// with another count or configuration is an error naming both, and is not changed.
    #[arg(long, conflicts_with = "describe", requires = "topic")]
    create: bool,
    /// Show each topic's configuration (the keys set at creation, as `kafka-topics.sh
    /// --describe` shows them) and each partition's start and end offsets, segments and bytes
    /// (for a compacted topic also the cleaner's checkpoint and the dirty ratio).
    #[arg(long)]
    describe: bool,
    /// The topic to create, or the only one to describe.
    #[arg(long)]
    topic: Option<String>,
    /// The partition count of a topic to create.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// A topic config for --create, `key=value` (Kafka's names: cleanup.policy, retention.ms,
    /// retention.bytes, delete.retention.ms, segment.bytes); repeat it for several.
    #[arg(long = "config", value_name = "KEY=VALUE", requires = "create")]
    configs: Vec<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if args.create {
        return create(&args);
    }
    if !args.log_dir.exists() {
        anyhow::bail!("no log at {}", args.log_dir.display());
    }
    let log = Log::open_read_only(&args.log_dir, LogOptions::default())
        .with_context(|| format!("opening {}", args.log_dir.display()))?;
    if args.describe {
        describe(&log, args.topic.as_deref())
    } else {
        list(&log)
    }
}

fn create(args: &Args) -> anyhow::Result<()> {
    let topic = args.topic.as_deref().unwrap_or_default();
    let mut pairs = Vec::new();
    for config in &args.configs {
        let (key, value) = config
            .split_once('=')
            .with_context(|| format!("--config {config:?} is not key=value"))?;
        pairs.push((key, value));
    }
    let config = TopicConfig::from_pairs(pairs.iter().copied())
        .map_err(|(key, reason)| anyhow::anyhow!("--config {key}: {reason}"))?;
    let log = open_writable(&args.log_dir)?;
    let existed = log.partitions(topic).is_some();
    log.create_topic_with(topic, args.partitions, &config)
        .with_context(|| format!("creating topic {topic:?}"))?;
    let stored = log
        .topic_config(topic)?
        .with_context(|| format!("topic {topic:?} is gone right after its creation"))?;
    if stored != config {
        anyhow::bail!(
            "topic {topic:?} already exists with the configuration [{}], not the [{}] asked for; \
             nothing was changed (a topic keeps the configuration it was created with)",
            describe_config(&stored),
            describe_config(&config)
        );
    }
    if existed {
        println!("Topic {topic} already exists with this configuration.");
    } else {
        println!("Created topic {topic}.");
    }
    Ok(())
}

/// A configuration as `key=value` pairs, the keys set at creation (as `--describe` shows them).
fn describe_config(config: &TopicConfig) -> String {
    let pairs: Vec<String> = config
        .overrides()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    pairs.join(",")
}

fn open_writable(dir: &Path) -> anyhow::Result<Log> {
    // Creating a topic needs no cleaner thread: this process exits right after.
    Log::open(
        dir,
        LogOptions::default().with_retention_check_interval(None),
    )
    .with_context(|| format!("opening {}", dir.display()))
}

fn list(log: &Log) -> anyhow::Result<()> {
    println!(
        "{:<40} {:>10} {:>14}  end offsets",
        "TOPIC", "PARTITIONS", "RECORDS"
    );
    for (topic, partitions) in log.topics() {
        let mut ends = Vec::new();
        let mut total = 0;
        for p in 0..partitions {
            let tp = TopicPartition::new(topic.as_str(), p);
            let end = log.end_offset(&tp)?;
            total += end - log.start_offset(&tp)?;
            ends.push(end.to_string());
        }
        println!(
            "{topic:<40} {partitions:>10} {total:>14}  [{}]",
            ends.join(", ")
        );
    }
    Ok(())
}

fn describe(log: &Log, only: Option<&str>) -> anyhow::Result<()> {
    let topics: Vec<(String, u32)> = match only {
        Some(name) => {
            let partitions = log
                .partitions(name)
                .with_context(|| format!("no topic {name:?} in the log"))?;
            vec![(name.to_owned(), partitions)]
        }
        None => log.topics(),
    };
    for (topic, partitions) in topics {
        let config = log.topic_config(&topic)?.unwrap_or_default();
        println!(
            "Topic: {topic}\tPartitionCount: {partitions}\tConfigs: {}",
            describe_config(&config)
        );
        for p in 0..partitions {
            let info = log.partition_info(&TopicPartition::new(topic.as_str(), p))?;
            // A compacted topic also shows how far the cleaner got and the share of the
            // sealed bytes it has not cleaned yet (a pass is due at min.cleanable.dirty.ratio).
            let cleaner = if config.cleanup_policy.compacts() {
                let ratio = if info.sealed_bytes == 0 {
                    0.0
                } else {
                    info.dirty_bytes as f64 / info.sealed_bytes as f64
                };
                format!("\tCleanedTo: {}\tDirtyRatio: {ratio:.2}", info.cleaned_to)
            } else {
                String::new()
            };
            println!(
                "\tTopic: {topic}\tPartition: {p}\tStartOffset: {}\tEndOffset: {}\tSegments: {}\tBytes: {}{cleaner}",
                info.start_offset, info.end_offset, info.segments, info.bytes
            );
        }
    }
    Ok(())
}
