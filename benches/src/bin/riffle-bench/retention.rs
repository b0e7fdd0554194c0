//! `cargo run --release -p riffle-bench -- retention`: what retention and record deletion cost on
//! the file-backed log. For each partition count: retention passes when nothing
//! is due (the first reads each sealed segment's newest timestamp; a later one is what the cleaner
//! thread pays every 5 minutes, per partition), a pass that deletes old segments (per segment
//! deleted: the sync, the `start` file, the unlinks), and `delete_records` as the stream threads
//! purge a repartition partition (per call). Each figure is the median of `--rounds`; the log lives
//! in a temporary directory.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicConfig, TopicPartition};
use serde::Serialize;

use super::write_json_rows;

/// Arguments of `cargo run --release -p riffle-bench -- retention`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Partition counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    partitions: Vec<u32>,
    /// Segments written per partition before the pass that deletes (all but the active one go).
    #[arg(long, default_value_t = 4)]
    segments: u32,
    /// Rounds of each measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Write the results as JSON rows to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct Row {
    partitions: u32,
    /// The first pass with nothing due, per partition (it reads each sealed segment's batch
    /// headers once, for their newest timestamp).
    first_pass_ns_per_partition: f64,
    /// A later pass with nothing due, per partition: the cleaner thread's steady cost.
    idle_pass_ns_per_partition: f64,
    /// A pass deleting every sealed segment, per segment deleted.
    deleting_pass_us_per_segment: f64,
    segments_deleted: usize,
    /// One `delete_records` that moves the start offset inside the active segment.
    delete_records_us: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// 200-byte records with timestamp `ts`, `batches` batches of 10 into `tp`.
fn fill(log: &Log, tp: &TopicPartition, batches: u32, ts: i64) -> anyhow::Result<()> {
    let mut b = BatchBuilder::new(Compression::None);
    for _ in 0..batches {
        for _ in 0..10 {
            b.push(ts, Some(b"key"), Some(&[7u8; 200]));
        }
        log.append(tp, &mut b)?;
    }
    Ok(())
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    // 4 KiB segments: two batches of 10 × 200 bytes each.
    let config = TopicConfig::from_pairs([("retention.ms", "1000"), ("segment.bytes", "4096")])
        .map_err(|(k, r)| anyhow::anyhow!("{k}: {r}"))?;
    let now = 10_000_000i64;
    for &partitions in &args.partitions {
        let (mut first, mut idle, mut deleting, mut purge) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut deleted = 0;
        for _ in 0..args.rounds.max(1) {
            let tmp = tempfile::tempdir().context("creating a temporary directory")?;
            let log = Log::open(
                tmp.path(),
                LogOptions::default().with_retention_check_interval(None),
            )?;
            log.create_topic_with("t", partitions, &config)?;
            let tps: Vec<TopicPartition> = (0..partitions)
                .map(|p| TopicPartition::new("t", p))
                .collect();
            for tp in &tps {
                // New records: nothing is due yet.
                fill(&log, tp, 2 * args.segments, now)?;
            }
            log.sync()?;
            for times in [&mut first, &mut idle] {
                let started = Instant::now();
                let report = log.enforce_retention(now)?;
                times.push(started.elapsed().as_nanos() as f64 / f64::from(partitions));
                anyhow::ensure!(report.segments_deleted == 0, "nothing was due: {report:?}");
            }
            // Much later: every sealed segment is due.
            let started = Instant::now();
            let report = log.enforce_retention(now + 10_000)?;
            let elapsed = started.elapsed();
            deleted = report.segments_deleted;
            deleting.push(elapsed.as_secs_f64() * 1e6 / deleted.max(1) as f64);
            // Purges inside the active segment, as after commits.
            let started = Instant::now();
            let n = tps.len().min(1000);
            for tp in tps.iter().take(n) {
                let end = log.end_offset(tp)?;
                log.delete_records(tp, end - 1)?;
            }
            purge.push(started.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        let row = Row {
            partitions,
            first_pass_ns_per_partition: median(first),
            idle_pass_ns_per_partition: median(idle),
            deleting_pass_us_per_segment: median(deleting),
            segments_deleted: deleted,
            delete_records_us: median(purge),
        };
        println!(
            "{partitions:>6} partitions: first pass {:>7.0} ns/partition, then {:>6.0} ns/partition ({:.2} ms in all); deleting pass {:>6.1} µs per segment ({} segments); delete_records {:>6.1} µs",
            row.first_pass_ns_per_partition,
            row.idle_pass_ns_per_partition,
            row.idle_pass_ns_per_partition * f64::from(partitions) / 1e6,
            row.deleting_pass_us_per_segment,
            row.segments_deleted,
            row.delete_records_us
        );
        rows.push(row);
    }
    if let Some(path) = &args.json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        write_json_rows(path, &rows)?;
    }
    Ok(())
}
