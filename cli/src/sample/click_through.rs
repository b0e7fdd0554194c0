//! `riffle sample click-through`: a stream–stream windowed join on the embedded log,
//!
//! ```text
//! stream(impressions)                                  ad -> impression id
//!     .join(stream(clicks), "<impression>+<click>",
//!           JoinWindows.ofTimeDifferenceAndGrace(window, grace))
//!     .to(output)                                      ad -> "<impression>+<click>"
//! ```
//!
//! Generated (without `--log-dir`): impressions and clicks over `--keys` ads, one record per
//! ms of event time, checked against the pairs within the windows counted independently. The
//! grace period (a day by default) covers the input, so every pair in the windows joins
//! whatever order a task reads its two partitions in — and, under exactly-once, exactly once
//! however often the application is killed and restarted (cli/tests/crash_kill9_stream_join_exactly_once.rs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, JoinWindows, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, dsl::StreamJoined,
};

use super::{Store, store_type};
use crate::duration::{parse_duration_ms, parse_duration_or_zero_ms};

/// Arguments of the click-through sample.
#[derive(clap::Args, Debug)]
pub struct ClickThroughArgs {
    /// Join existing topics of this log (with --impressions, --clicks, --output) until they are
    /// drained, instead of generating them.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// The impressions topic (the join's left side).
    #[arg(long, default_value = "impressions")]
    impressions: String,
    /// The clicks topic (the right side).
    #[arg(long, default_value = "clicks")]
    clicks: String,
    /// The output topic: `<impression>+<click>` per joined pair.
    #[arg(long, default_value = "click-through")]
    output: String,
    /// How far apart, either way, an impression and a click of one ad join.
    #[arg(long, value_parser = parse_duration_ms, default_value = "10s")]
    window: i64,
    /// How late a record may be.
    #[arg(long, value_parser = parse_duration_or_zero_ms, default_value = "1d")]
    grace: i64,
    /// Records of each side to generate (without --log-dir).
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Ads to generate records for (without --log-dir).
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Partitions of the generated topics (without --log-dir).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Where the join's window stores keep their data.
    #[arg(long, value_enum, default_value = "persistent")]
    store: Store,
    /// `at_least_once` or `exactly_once`.
    #[arg(long, default_value = "at_least_once")]
    processing_guarantee: String,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The state directory (default: <log-dir>/state, or a temporary directory).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The application id.
    #[arg(long, default_value = "click-through")]
    application_id: String,
    /// Commit interval in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    commit_interval_ms: u64,
    /// Extra options, Kafka-style: --set name=value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
    #[command(flatten)]
    follow: super::RunArgs,
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0) as u64)
}

/// Generated records: each side's (ad, id, timestamp), by partition, in order.
type Side = Vec<(String, String, i64)>;

/// Writes `records` impressions and clicks, alternately, one per ms; returns both sides.
fn generate(log: &Log, args: &ClickThroughArgs) -> anyhow::Result<(Side, Side)> {
    let mut rng = StdRng::seed_from_u64(42);
    let (mut impressions, mut clicks) = (Side::new(), Side::new());
    for topic in [&args.impressions, &args.clicks] {
        log.create_topic(topic, args.partitions)?;
    }
    let mut builders: Vec<Vec<BatchBuilder>> = (0..2)
        .map(|_| {
            (0..args.partitions)
                .map(|_| BatchBuilder::new(Compression::None))
                .collect()
        })
        .collect();
    for i in 0..args.records * 2 {
        let ad = format!("ad-{}", rng.random_range(0..args.keys.max(1)));
        let side = (i % 2) as usize;
        let id = format!("{}{}", if side == 0 { "i" } else { "c" }, i / 2);
        let ts = i as i64;
        let p = partition_for_key(ad.as_bytes(), args.partitions) as usize;
        builders[side][p].push(ts, Some(ad.as_bytes()), Some(id.as_bytes()));
        if side == 0 {
            &mut impressions
        } else {
            &mut clicks
        }
        .push((ad, id, ts));
    }
    for (side, topic) in [&args.impressions, &args.clicks].into_iter().enumerate() {
        for (p, b) in builders[side].iter_mut().enumerate() {
            if !b.is_empty() {
                log.append(&TopicPartition::new(topic.as_str(), p as u32), b)?;
            }
        }
    }
    log.sync()?;
    Ok((impressions, clicks))
}

/// Every pair of an impression and a click of one ad at most `window` apart, as the join
/// writes it: ad → `<impression>+<click>` values, sorted.
pub(crate) fn pairs(
    impressions: &Side,
    clicks: &Side,
    window: i64,
) -> BTreeMap<String, Vec<String>> {
    let mut by_ad: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    for (ad, id, ts) in clicks {
        by_ad.entry(ad).or_default().push((id, *ts));
    }
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (ad, id, ts) in impressions {
        for (click, ct) in by_ad.get(ad.as_str()).into_iter().flatten() {
            if (ts - ct).abs() <= window {
                out.entry(ad.clone())
                    .or_default()
                    .push(format!("{id}+{click}"));
            }
        }
    }
    for values in out.values_mut() {
        values.sort();
    }
    out
}

/// The output topic: ad → its values, sorted.
fn read_output(log: &Log, topic: &str) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in 0..log.partitions(topic).unwrap_or(0) {
        let tp = TopicPartition::new(topic, p);
        for batch in log.fetch(&tp, 0, usize::MAX)? {
            for record in batch.records() {
                let record = record?;
                let key = record.key().context("a keyless output record")?;
                let value = record.value().context("an output record without a value")?;
                out.entry(String::from_utf8_lossy(&key[..]).into_owned())
                    .or_default()
                    .push(String::from_utf8_lossy(&value[..]).into_owned());
            }
        }
    }
    for values in out.values_mut() {
        values.sort();
    }
    Ok(out)
}

/// Runs the sample.
pub(crate) fn click_through(args: ClickThroughArgs) -> anyhow::Result<()> {
    let _temp;
    let (log_dir, generated) = match &args.log_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            _temp = tempfile::tempdir().context("creating a temporary directory")?;
            let dir = _temp.path().join("log");
            let log = Log::open(&dir, LogOptions::default())?;
            let sides = generate(&log, &args)?;
            (dir, Some(sides))
        }
    };
    let log = Log::open(&log_dir, LogOptions::default())
        .with_context(|| format!("opening {}", log_dir.display()))?;
    let mut config = StreamsConfig::new(args.application_id.clone());
    config.num_stream_threads = args.threads;
    config.commit_interval = Some(Duration::from_millis(args.commit_interval_ms));
    config.poll = Duration::from_millis(10);
    config.state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| log_dir.join("state"));
    config.set("processing_guarantee", &args.processing_guarantee)?;
    for setting in &args.settings {
        let (name, value) = setting
            .split_once('=')
            .with_context(|| format!("--set {setting}: expected NAME=VALUE"))?;
        config.set(name, value)?;
    }
    args.follow.configure(&mut config);
    let builder = StreamsBuilder::new();
    let clicks = builder.stream(
        &args.clicks,
        Consumed::with(Serdes::string(), Serdes::string()),
    );
    builder
        .stream(
            &args.impressions,
            Consumed::with(Serdes::string(), Serdes::string()),
        )
        .join_stream(
            &clicks,
            |impression, click| format!("{impression}+{click}"),
            JoinWindows::of_time_difference_and_grace(ms(args.window), ms(args.grace)),
            StreamJoined::with(Serdes::string(), Serdes::string(), Serdes::string())
                .with_store_name("click-through")
                .with_store_type(store_type(args.store)),
        )
        .to(
            &args.output,
            Produced::with(Serdes::string(), Serdes::string()),
        );
    let total =
        super::input_size(&log, &args.impressions)? + super::input_size(&log, &args.clicks)?;
    let app = StreamsApp::new(
        builder.build()?,
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )?;
    let (summary, elapsed, interrupted) =
        super::run_with_progress(app, total, StreamsApp::is_idle, args.follow.clone())?;
    let got = read_output(&log, &args.output)?;
    let joined: usize = got.values().map(Vec::len).sum();
    println!(
        "processed {} records in {:.2} s{}; {joined} pairs joined",
        summary.records_processed,
        elapsed.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" }
    );
    if let Some((impressions, clicks)) = generated {
        let want = pairs(&impressions, &clicks, args.window);
        let exact = want == got;
        println!(
            "pairs equal those within the windows counted independently: {}",
            if exact { "yes" } else { "NO" }
        );
        anyhow::ensure!(exact, "the joined pairs differ from the independent count");
    }
    Ok(())
}
