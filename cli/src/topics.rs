//! `riffle topics`: the topics of the embedded log.

use std::path::Path;

use anyhow::Context;
use riffle_log::{Log, LogOptions, TopicPartition};

pub(crate) fn run(log_dir: &Path) -> anyhow::Result<()> {
    if !log_dir.exists() {
        anyhow::bail!("no log at {}", log_dir.display());
    }
    let log = Log::open_read_only(log_dir, LogOptions::default())
        .with_context(|| format!("opening {}", log_dir.display()))?;
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
