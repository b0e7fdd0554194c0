//! `cargo run --release -p riffle-bench -- soak`: the groupByKey-count sample under `--follow` (a
//! child process) while this process writes a steady input to the same embedded log for minutes:
//! the child's RSS, threads and open files sampled from `/proc/<pid>` every `--sample-every`, and
//! the RSS growth after the warm-up (a least-squares slope in MiB per minute, and last minus
//! first). At the end the input stops, the child catches up and is stopped with SIGINT, and its
//! counts are checked against a `HashMap` count of everything written. Each sample also measures
//! the topics' segment files: the input topic, changelogs, repartition topics and the rest (the
//! input topic can be given Kafka's topic configs, `--input-config retention.bytes=…`, to see
//! retention hold it; the output topic `--output-config`) and the compaction of the child's log
//! cleaner: the child's processing rate from its progress lines, the partitions and MiB its cleaner
//! compacted, and the cleaner thread's CPU time from `/proc/<pid>/task`, so the rate before and
//! after compaction starts and the cleaner's CPU per MiB. Not for CI: it runs for `--minutes` (10
//! by default).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng};
use riffle::{EmbeddedBackend, producer::ProducerRecord};
use riffle_bench::proc_stats::{Footprint, footprint, named_threads_cpu_time};
use riffle_cli::sample::{bulk_producer, latest_counts};
use riffle_log::{Log, LogOptions, TopicConfig};
use serde::Serialize;

/// Arguments of `cargo run --release -p riffle-bench -- soak`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// How long to write input, in minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Records written per second.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Distinct keys (uniformly random).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Partitions of the input.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// How often to sample the child, in seconds.
    #[arg(long, default_value_t = 10)]
    sample_every_s: u64,
    /// Samples before this many seconds are the warm-up, left out of the growth figures (the
    /// stores' memory budget fills in the first minutes: about 160 s at the defaults).
    #[arg(long, default_value_t = 180)]
    warmup_s: u64,
    /// `memory` or `persistent` (the sample's --store).
    #[arg(long, default_value = "persistent")]
    store: String,
    /// Write the samples and the summary as JSON rows here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// A topic config of the input topic, `key=value` (Kafka's names, repeatable), e.g.
    /// `--input-config retention.bytes=67108864 --input-config segment.bytes=8388608`.
    #[arg(long = "input-config", value_name = "KEY=VALUE")]
    input_configs: Vec<String>,
    /// Run the sample with --repartition: its count reads a repartition topic, which the stream
    /// threads purge after commits.
    #[arg(long)]
    repartition: bool,
    /// The sample's log segment size (its --segment-bytes), for the changelog.
    #[arg(long, default_value_t = LogOptions::default().segment_bytes)]
    segment_bytes: u64,
    /// A topic config of the output topic `counts` (created before the sample starts).
    #[arg(long = "output-config", value_name = "KEY=VALUE")]
    output_configs: Vec<String>,
    /// Passed to the sample as its --set NAME=VALUE (repeatable), e.g.
    /// `--set statestore_memory_max_bytes=100663296`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
}

/// One sample of the child.
#[derive(Serialize, Debug, Clone)]
struct Sample {
    elapsed_s: f64,
    records_written: u64,
    rss_mib: f64,
    /// The anonymous part of the RSS (heap), from `RssAnon`.
    rss_anon_mib: f64,
    /// The file-backed part (mapped files), from `RssFile`.
    rss_file_mib: f64,
    threads: u64,
    open_files: u64,
    /// Disk use of the input topic's segment files.
    input_mib: f64,
    /// Of the changelog topics'.
    changelog_mib: f64,
    /// Of the repartition topics'.
    repartition_mib: f64,
    /// Of the other topics' (the output).
    other_topics_mib: f64,
    /// Records the child processed, and its rate, from its last progress line.
    processed: u64,
    processed_per_s: f64,
    /// The child's log cleaner so far: partitions compacted, MiB read and written, records
    /// removed, and the cleaner thread's CPU time.
    cleaner_partitions: u64,
    cleaner_io_mib: f64,
    cleaner_records_removed: u64,
    cleaner_cpu_s: f64,
}

/// The run's figures.
#[derive(Serialize, Debug)]
struct Summary {
    minutes: f64,
    rate: u64,
    keys: u64,
    store: String,
    records: u64,
    rss_first_after_warmup_mib: f64,
    rss_last_mib: f64,
    rss_max_mib: f64,
    rss_slope_mib_per_min: f64,
    threads_max: u64,
    open_files_max: u64,
    input_mib_last: f64,
    input_mib_max: f64,
    changelog_mib_last: f64,
    repartition_mib_last: f64,
    other_topics_mib_last: f64,
    changelog_mib_max: f64,
    /// When the cleaner first compacted a partition (s), and the child's mean rate before and
    /// after (samples after the warm-up).
    compaction_started_s: Option<f64>,
    processed_per_s_before_compaction: f64,
    processed_per_s_after_compaction: f64,
    cleaner_io_mib: f64,
    cleaner_cpu_s: f64,
    cleaner_cpu_ms_per_mib: f64,
    counts_exact: bool,
}

/// The fields of a progress line of the sample: (records processed, records/s, partitions
/// compacted, MiB compacted, records removed).
fn parse_progress(line: &str) -> Option<(u64, f64, u64, f64, u64)> {
    let word_before = |marker: &str| -> Option<&str> {
        let at = line.find(marker)?;
        line[..at].split_whitespace().last()
    };
    let processed = word_before(" records processed")?.parse().ok()?;
    let rate = word_before(" records/s")?.parse().ok()?;
    let partitions = word_before(" partitions cleaned").and_then(|w| w.parse().ok());
    let mib = word_before(" MiB read and written").and_then(|w| w.parse().ok());
    let removed = word_before(" records removed").and_then(|w| w.parse().ok());
    Some((
        processed,
        rate,
        partitions.unwrap_or(0),
        mib.unwrap_or(0.0),
        removed.unwrap_or(0),
    ))
}

/// CPU seconds (user and system) of the child's threads named like the log cleaner.
fn cleaner_cpu_s(pid: u32) -> f64 {
    i32::try_from(pid)
        .ok()
        .and_then(|pid| named_threads_cpu_time(pid, "riffle-log-clea").ok())
        .map_or(0.0, |t| t.as_secs_f64())
}

/// `key=value` pairs as a topic config.
fn topic_config(flag: &str, pairs: &[String]) -> anyhow::Result<TopicConfig> {
    let mut split = Vec::new();
    for config in pairs {
        split.push(
            config
                .split_once('=')
                .with_context(|| format!("{flag} {config:?} is not key=value"))?,
        );
    }
    TopicConfig::from_pairs(split.iter().copied())
        .map_err(|(key, reason)| anyhow::anyhow!("{flag} {key}: {reason}"))
}

/// Bytes of the files under `path`, recursively (0 if it is gone: retention may remove a file
/// between the listing and the look).
fn bytes_under(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// The segment files' sizes in MiB: (the input topic, changelogs, repartition topics, the other
/// topics).
fn disk_use(dir: &std::path::Path, input: &str) -> (f64, f64, f64, f64) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let (mut inp, mut changelog, mut repartition, mut other) = (0, 0, 0, 0);
    if let Ok(topics) = std::fs::read_dir(dir.join("topics")) {
        for topic in topics.filter_map(Result::ok) {
            let name = topic.file_name().to_string_lossy().into_owned();
            let bytes = bytes_under(&topic.path());
            if name == input {
                inp += bytes;
            } else if name.ends_with("-changelog") {
                changelog += bytes;
            } else if name.ends_with("-repartition") {
                repartition += bytes;
            } else {
                other += bytes;
            }
        }
    }
    (mib(inp), mib(changelog), mib(repartition), mib(other))
}

/// The least-squares slope of `points` (x in minutes, y in MiB).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den > 0.0 { num / den } else { 0.0 }
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let root = tempfile::tempdir().context("creating a temporary directory")?;
    let dir = root.path().join("log");
    // The application's process compacts its log (its cleaner thread); this one only writes
    // the input and applies its retention.
    let log = Log::open(
        &dir,
        LogOptions::default().with_compaction_check_interval(None),
    )?;
    let input_config = topic_config("--input-config", &args.input_configs)?;
    log.create_topic_with("words", args.partitions, &input_config)?;
    if !args.output_configs.is_empty() {
        let output_config = topic_config("--output-config", &args.output_configs)?;
        log.create_topic_with("counts", args.partitions, &output_config)?;
    }
    // This binary's hidden `sample` subcommand: `riffle sample`'s code (riffle_cli::sample),
    // with this binary's counting allocator.
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut child = Command::new(exe)
        .args(["sample", "group-by-key-count", "--log-dir"])
        .arg(&dir)
        .args([
            "--input",
            "words",
            "--output",
            "counts",
            "--store",
            &args.store,
        ])
        .args(["--follow", "--progress-every", "1s"])
        .args(["--segment-bytes", &args.segment_bytes.to_string()])
        .args(args.repartition.then_some("--repartition"))
        .args(args.settings.iter().flat_map(|s| ["--set", s.as_str()]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the sample")?;
    let pid = child.id();
    let out = child.stdout.take().context("the sample's output")?;
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });

    let backend = EmbeddedBackend::new(log.clone()).shared();
    let mut producer = bulk_producer(backend.clone());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut model: HashMap<String, i64> = HashMap::new();
    let one = "1".to_owned();
    let start = Instant::now();
    let run_for = Duration::from_secs_f64(args.minutes * 60.0);
    let every = Duration::from_secs(args.sample_every_s.max(1));
    let mut next_sample = start + every;
    let mut written = 0u64;
    let mut samples = Vec::new();
    let mut progress = (0u64, 0.0f64, 0u64, 0.0f64, 0u64);
    println!(
        "soak: {} records/s over {} keys for {:.1} min, the sample (pid {pid}, --store {}) following",
        args.rate, args.keys, args.minutes, args.store
    );
    while start.elapsed() < run_for {
        // Write what is due by now, then sleep a little.
        let due = (start.elapsed().as_secs_f64() * args.rate as f64) as u64;
        while written < due {
            let key = format!("key-{}", rng.random_range(0..args.keys.max(1)));
            producer.send_record("words", ProducerRecord::new(&key, &one))?;
            *model.entry(key).or_insert(0) += 1;
            written += 1;
        }
        producer.flush()?;
        if Instant::now() >= next_sample {
            next_sample += every;
            // This process's log applies the input's retention: it writes the input.
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            log.enforce_retention(now_ms)?;
            let (input_mib, changelog_mib, repartition_mib, other_topics_mib) =
                disk_use(&dir, "words");
            let (processed, processed_per_s, cleaner_partitions, cleaner_io_mib, removed) =
                progress;
            let child = i32::try_from(pid)
                .ok()
                .map_or_else(Footprint::default, |pid| footprint(Some(pid)));
            let sample = Sample {
                elapsed_s: start.elapsed().as_secs_f64(),
                records_written: written,
                rss_mib: child.rss_kib as f64 / 1024.0,
                rss_anon_mib: child.rss_anon_kib as f64 / 1024.0,
                rss_file_mib: child.rss_file_kib as f64 / 1024.0,
                threads: child.threads,
                open_files: child.open_files,
                input_mib,
                changelog_mib,
                repartition_mib,
                other_topics_mib,
                processed,
                processed_per_s,
                cleaner_partitions,
                cleaner_io_mib,
                cleaner_records_removed: removed,
                cleaner_cpu_s: cleaner_cpu_s(pid),
            };
            println!(
                "{:>6.0} s: {:>10} records written, {:>10} processed ({:.0}/s), child RSS {:.1} MiB (anon {:.1}, file {:.1}), {} threads, {} files; topics: input {:.1} MiB, changelogs {:.1}, repartition {:.1}, output {:.1}; cleaner: {} partitions, {:.1} MiB, {} records removed, {:.2} s CPU",
                sample.elapsed_s,
                sample.records_written,
                sample.processed,
                sample.processed_per_s,
                sample.rss_mib,
                sample.rss_anon_mib,
                sample.rss_file_mib,
                sample.threads,
                sample.open_files,
                sample.input_mib,
                sample.changelog_mib,
                sample.repartition_mib,
                sample.other_topics_mib,
                sample.cleaner_partitions,
                sample.cleaner_io_mib,
                sample.cleaner_records_removed,
                sample.cleaner_cpu_s
            );
            samples.push(sample);
        }
        while let Ok(line) = rx.try_recv() {
            if let Some(p) = parse_progress(&line) {
                progress = p;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    producer.close()?;
    // Let it catch up, then stop it.
    // With a repartition topic each record is processed twice (by each sub-topology).
    let processed_per_record = if args.repartition { 2 } else { 1 };
    let want = format!(": {} records processed,", written * processed_per_record);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(&want) && line.ends_with("caught up") => break,
            Ok(_) => {}
            Err(_) => bail!("the sample did not catch up with {written} records"),
        }
    }
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .context("stopping the sample")?;
    let status = child.wait().context("waiting for the sample")?;
    if !status.success() {
        bail!("the sample ended with {status}");
    }
    let counts = latest_counts(&*backend, "counts")?;
    let exact = counts == model;

    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.elapsed_s >= args.warmup_s as f64)
        .collect();
    let points: Vec<(f64, f64)> = after
        .iter()
        .map(|s| (s.elapsed_s / 60.0, s.rss_mib))
        .collect();
    let started = samples.iter().find(|s| s.cleaner_partitions > 0);
    let compaction_started_s = started.map(|s| s.elapsed_s);
    let mean_rate = |keep: &dyn Fn(&Sample) -> bool| {
        let rates: Vec<f64> = after
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.processed_per_s)
            .collect();
        if rates.is_empty() {
            0.0
        } else {
            rates.iter().sum::<f64>() / rates.len() as f64
        }
    };
    let before = mean_rate(&|s: &Sample| compaction_started_s.is_none_or(|t| s.elapsed_s < t));
    let since = mean_rate(&|s: &Sample| compaction_started_s.is_some_and(|t| s.elapsed_s >= t));
    let last = samples.last();
    let (cleaner_io_mib, cleaner_cpu) =
        last.map_or((0.0, 0.0), |s| (s.cleaner_io_mib, s.cleaner_cpu_s));
    let summary = Summary {
        minutes: args.minutes,
        rate: args.rate,
        keys: args.keys,
        store: args.store.clone(),
        records: written,
        rss_first_after_warmup_mib: after.first().map_or(0.0, |s| s.rss_mib),
        rss_last_mib: after.last().map_or(0.0, |s| s.rss_mib),
        rss_max_mib: samples.iter().map(|s| s.rss_mib).fold(0.0, f64::max),
        rss_slope_mib_per_min: slope(&points),
        threads_max: samples.iter().map(|s| s.threads).max().unwrap_or(0),
        open_files_max: samples.iter().map(|s| s.open_files).max().unwrap_or(0),
        input_mib_last: samples.last().map_or(0.0, |s| s.input_mib),
        input_mib_max: samples.iter().map(|s| s.input_mib).fold(0.0, f64::max),
        changelog_mib_last: samples.last().map_or(0.0, |s| s.changelog_mib),
        repartition_mib_last: samples.last().map_or(0.0, |s| s.repartition_mib),
        other_topics_mib_last: samples.last().map_or(0.0, |s| s.other_topics_mib),
        changelog_mib_max: samples.iter().map(|s| s.changelog_mib).fold(0.0, f64::max),
        compaction_started_s,
        processed_per_s_before_compaction: before,
        processed_per_s_after_compaction: since,
        cleaner_io_mib,
        cleaner_cpu_s: cleaner_cpu,
        cleaner_cpu_ms_per_mib: if cleaner_io_mib > 0.0 {
            cleaner_cpu * 1000.0 / cleaner_io_mib
        } else {
            0.0
        },
        counts_exact: exact,
    };
    println!(
        "after {} s of warm-up: RSS {:.1} MiB first, {:.1} MiB last, max {:.1} MiB, slope {:+.2} MiB/min; \
         threads ≤ {}, files ≤ {}; counts equal a HashMap count of the input: {}",
        args.warmup_s,
        summary.rss_first_after_warmup_mib,
        summary.rss_last_mib,
        summary.rss_max_mib,
        summary.rss_slope_mib_per_min,
        summary.threads_max,
        summary.open_files_max,
        if exact { "yes" } else { "NO" }
    );
    println!(
        "compaction: first at {}, the child's rate {:.0} records/s before and {:.0} after; the cleaner read and wrote {:.1} MiB with {:.2} s of CPU ({:.2} ms per MiB)",
        summary
            .compaction_started_s
            .map_or_else(|| "never".to_owned(), |t| format!("{t:.0} s")),
        summary.processed_per_s_before_compaction,
        summary.processed_per_s_after_compaction,
        summary.cleaner_io_mib,
        summary.cleaner_cpu_s,
        summary.cleaner_cpu_ms_per_mib
    );
    println!(
        "topics at the end: input {:.1} MiB (max {:.1}), changelogs {:.1} MiB (max {:.1}), repartition {:.1} MiB, output {:.1} MiB",
        summary.input_mib_last,
        summary.input_mib_max,
        summary.changelog_mib_last,
        summary.changelog_mib_max,
        summary.repartition_mib_last,
        summary.other_topics_mib_last
    );
    if let Some(path) = &args.json {
        let mut rows: Vec<serde_json::Value> = samples
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        rows.push(serde_json::to_value(&summary)?);
        super::write_json_rows(path, &rows)?;
    }
    if !exact {
        bail!("the counts differ from the input's");
    }
    Ok(())
}
