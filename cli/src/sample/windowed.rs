//! `riffle sample windowed-count`: the bundled windowed count,
//! `stream(input).groupByKey().windowedBy(windows).emitStrategy(..).count().toStream().to(output)`,
//! over generated timestamped input checked against an independent replay of Kafka's window
//! rules ([`super::window_model`]), or over an existing topic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::backend::Backend;
use riffle::log::{TopicPartition, partition_for_key};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, SerdeRef, Serdes, SessionWindows,
    SlidingWindows, StreamsApp, StreamsBuilder, StreamsConfig, TimeWindows, Windowed,
    window::EmitStrategy,
};
use riffle_log::{Log, LogOptions};

use super::window_model::{Kind, Outcome, Spec, WKey};
use super::{Store, store_type};
use crate::duration::{parse_duration_ms, parse_duration_or_zero_ms};

/// The first generated timestamp: 2024-01-01T00:00:00Z.
pub(crate) const BASE_TIMESTAMP_MS: i64 = 1_704_067_200_000;
/// The share of generated records that arrive out of order.
const OUT_OF_ORDER: f64 = 0.05;

/// Arguments of the windowed-count sample (its help text is on `Sample::WindowedCount`).
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("backend").args(["log_dir", "bootstrap_servers"])))]
pub struct WindowedArgs {
    /// Count an existing log instead of generating one (needs --input and --output): windows
    /// by record timestamp, until the input is drained.
    #[arg(long)]
    pub(crate) log_dir: Option<std::path::PathBuf>,
    /// Run on an Apache Kafka 4.x cluster instead of the embedded log (a streams group named
    /// after the application id). Without --input/--output the input is generated into new
    /// topics.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) bootstrap_servers: Option<String>,
    /// The input topic (with --log-dir or --bootstrap-servers).
    #[arg(long, requires = "backend")]
    pub(crate) input: Option<String>,
    /// The output topic (with --log-dir or --bootstrap-servers): keys in Kafka Streams'
    /// windowed layouts (`riffle consume --key-serde windowed-string --window-size SIZE`, or
    /// `session-windowed-string` for sessions; sliding windows print with their time
    /// difference as the size), counts as 8-byte big-endian longs.
    #[arg(long, requires = "backend")]
    pub(crate) output: Option<String>,
    /// Tumbling windows of this size, like `500ms`, `60s`, `5m`, `1h` or `1d` (the default
    /// kind); hopping ones with --advance.
    #[arg(long, value_parser = parse_duration_ms, default_value = "60s",
          conflicts_with_all = ["session_gap", "sliding"])]
    pub(crate) window: i64,
    /// Hopping windows: a new window of --window starts every this long (at most --window).
    #[arg(long, value_parser = parse_duration_ms, conflicts_with_all = ["session_gap", "sliding"])]
    pub(crate) advance: Option<i64>,
    /// How late a record may be and still count: a window takes records until stream time
    /// passes its end plus this (`0` for none).
    #[arg(long, value_parser = parse_duration_or_zero_ms, default_value = "10s")]
    pub(crate) grace: i64,
    /// Session windows: a key's records closer than this form one session.
    #[arg(long, value_name = "GAP", value_parser = parse_duration_ms, conflicts_with = "sliding")]
    pub(crate) session_gap: Option<i64>,
    /// Sliding windows (KIP-450) of this time difference.
    #[arg(long, value_name = "DIFFERENCE", value_parser = parse_duration_ms)]
    pub(crate) sliding: Option<i64>,
    /// `updates`: every change of a window's count (collapsed per window between commits by
    /// the store's cache; a tombstone for a session merged away); `final`: each window's count
    /// once, when stream time closes it.
    #[arg(long, value_enum, default_value = "updates")]
    pub(crate) emit: Emit,
    /// Where the counts are stored: `memory` (restored from the changelog on start) or
    /// `persistent` (on disk in the state directory, checkpointed).
    #[arg(long, value_enum, default_value = "persistent")]
    pub(crate) store: Store,
    /// `at_least_once` or `exactly_once`.
    #[arg(long, default_value = "at_least_once")]
    pub(crate) processing_guarantee: String,
    /// Records to generate (without --input).
    #[arg(long, default_value_t = 200_000)]
    pub(crate) records: u64,
    /// Distinct keys to generate (without --input).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) keys: u64,
    /// Partitions of the generated input topic (without --input).
    #[arg(long, default_value_t = 4)]
    pub(crate) partitions: u32,
    /// The event time the generated input spans (without --input); default 100 times the
    /// window size, time difference or session gap.
    #[arg(long, value_parser = parse_duration_ms)]
    pub(crate) span: Option<i64>,
    /// The seed of the generated input (without --input).
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// With --input: check the whole output topic against a replay of the whole input topic
    /// (meaningful when the output holds only this application's results, from the start of
    /// the input, and no at-least-once run of it crashed).
    #[arg(long, requires = "input")]
    pub(crate) check: bool,
    /// How many of the windows with the largest counts to print (`key@start/end<TAB>count`, by
    /// count, then key and window).
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: usize,
    /// The state directory (default: <log-dir>/state, or a temporary directory).
    #[arg(long)]
    pub(crate) state_dir: Option<std::path::PathBuf>,
    /// The application id.
    #[arg(long, default_value = "windowed-count")]
    pub(crate) application_id: String,
    /// Commit interval in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) commit_interval_ms: u64,
    /// Extra options, Kafka-style: --set name=value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub(crate) settings: Vec<String>,
    #[command(flatten)]
    pub(crate) follow: super::RunArgs,
}

/// When the sample's windows emit their counts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Emit {
    /// Every update (`EmitStrategy::on_window_update`).
    Updates,
    /// Once per window, when it closes (`EmitStrategy::on_window_close`).
    Final,
}

impl WindowedArgs {
    /// The window definition the flags give.
    pub(crate) fn spec(&self) -> anyhow::Result<Spec> {
        let kind = match (self.session_gap, self.sliding) {
            (Some(gap), _) => Kind::Session { gap },
            (None, Some(diff)) => Kind::Sliding { diff },
            (None, None) => {
                let advance = self.advance.unwrap_or(self.window);
                anyhow::ensure!(
                    advance <= self.window,
                    "--advance ({advance} ms) must be at most --window ({} ms)",
                    self.window
                );
                Kind::Time {
                    size: self.window,
                    advance,
                }
            }
        };
        Ok(Spec {
            kind,
            grace: self.grace,
        })
    }

    /// The streams configuration the flags give, with `application_id` and `state_dir`.
    pub(crate) fn config(
        &self,
        application_id: &str,
        state_dir: std::path::PathBuf,
    ) -> anyhow::Result<StreamsConfig> {
        let mut config = StreamsConfig::new(application_id.to_owned());
        config.num_stream_threads = self.threads;
        config.commit_interval = Some(Duration::from_millis(self.commit_interval_ms));
        config.poll = Duration::from_millis(10);
        config.state_dir = state_dir;
        config.set("processing_guarantee", &self.processing_guarantee)?;
        for setting in &self.settings {
            let (name, value) = setting
                .split_once('=')
                .with_context(|| format!("--set {setting}: expected NAME=VALUE"))?;
            config.set(name, value)?;
        }
        self.follow.configure(&mut config);
        Ok(config)
    }
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0) as u64)
}

/// The serde of the output's windowed keys.
pub(crate) fn key_serde(spec: &Spec) -> SerdeRef<Windowed<String>> {
    match spec.kind {
        Kind::Time { size, .. } => Serdes::time_windowed(Serdes::string(), ms(size)),
        Kind::Sliding { diff } => Serdes::time_windowed(Serdes::string(), ms(diff)),
        Kind::Session { .. } => Serdes::session_windowed(Serdes::string()),
    }
}

/// How `spec` reads in a sentence.
pub(crate) fn describe(spec: &Spec) -> String {
    let kind = match spec.kind {
        Kind::Time { size, advance } if size == advance => format!("tumbling {size} ms windows"),
        Kind::Time { size, advance } => {
            format!("hopping {size} ms windows advancing by {advance} ms")
        }
        Kind::Sliding { diff } => format!("sliding windows of a {diff} ms time difference"),
        Kind::Session { gap } => format!("sessions split by a {gap} ms gap"),
    };
    format!("{kind}, grace {} ms", spec.grace)
}

/// The sample's topology: `stream(input).groupByKey().windowedBy(..).emitStrategy(..)
/// .count().toStream().to(output)`, with the counts in the store `counts`.
pub(crate) fn topology(
    input: &str,
    output: &str,
    spec: &Spec,
    emit: Emit,
    store: Store,
) -> riffle::Result<riffle::Topology> {
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream(input, Consumed::with(Serdes::string(), Serdes::bytes()))
        .group_by_key();
    let materialized = Materialized::named("counts").with_store_type(store_type(store));
    let strategy = match emit {
        Emit::Final => EmitStrategy::on_window_close(),
        Emit::Updates => EmitStrategy::on_window_update(),
    };
    let grace = ms(spec.grace);
    let table = match spec.kind {
        Kind::Time { size, advance } => grouped
            .windowed_by(TimeWindows::of_size_and_grace(ms(size), grace).advance_by(ms(advance)))
            .emit_strategy(strategy)
            .count_with(materialized),
        Kind::Sliding { diff } => grouped
            .windowed_by(SlidingWindows::of_time_difference_and_grace(
                ms(diff),
                grace,
            ))
            .emit_strategy(strategy)
            .count_with(materialized),
        Kind::Session { gap } => grouped
            .windowed_by(SessionWindows::of_inactivity_gap_and_grace(ms(gap), grace))
            .emit_strategy(strategy)
            .count_with(materialized),
    };
    table
        .to_stream()
        .to(output, Produced::with(key_serde(spec), Serdes::i64()));
    builder.build()
}

/// Generated input: key names, and each partition's records (key index, timestamp) in order.
pub(crate) struct Generated {
    pub(crate) keys: Vec<String>,
    pub(crate) partitions: Vec<Vec<(u32, i64)>>,
}

/// Generates the input the help text describes.
pub(crate) fn generate(args: &WindowedArgs, spec: &Spec) -> anyhow::Result<Generated> {
    anyhow::ensure!(args.partitions > 0, "--partitions must be positive");
    let keys = args.keys.clamp(1, u64::from(u32::MAX));
    let names: Vec<String> = (0..keys).map(|k| format!("key-{k}")).collect();
    let partition_of: Vec<u32> = names
        .iter()
        .map(|n| partition_for_key(n.as_bytes(), args.partitions))
        .collect();
    let extent = match spec.kind {
        Kind::Time { size, .. } => size,
        Kind::Sliding { diff } => diff,
        Kind::Session { gap } => gap,
    };
    let span = args.span.unwrap_or_else(|| extent.saturating_mul(100));
    let grace = spec.grace;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut partitions = vec![Vec::new(); args.partitions as usize];
    let mut stream_time = vec![-1i64; args.partitions as usize];
    let records = args.records.max(1);
    for i in 0..args.records {
        let key = rng.random_range(0..keys) as u32;
        let p = partition_of[key as usize] as usize;
        let nominal = BASE_TIMESTAMP_MS
            .saturating_add((i128::from(i) * i128::from(span) / i128::from(records)) as i64);
        let mut ts = nominal;
        if rng.random_bool(OUT_OF_ORDER) {
            let delay = if grace > 0 && rng.random_bool(0.5) {
                rng.random_range(1..=grace)
            } else {
                rng.random_range(grace + 1..=grace + 2 * extent)
            };
            ts = nominal.saturating_sub(delay).max(0);
        }
        match spec.kind {
            Kind::Sliding { diff } => {
                let close = stream_time[p] - grace;
                if ts < close && ts + diff >= close {
                    ts = close;
                }
            }
            Kind::Session { .. } => {}
            Kind::Time { .. } => {}
        }
        stream_time[p] = stream_time[p].max(ts);
        partitions[p].push((key, ts));
    }
    Ok(Generated {
        keys: names,
        partitions,
    })
}

impl Generated {
    /// Writes the records to `topic` through riffle's producer, each to the partition it was
    /// generated for (its key's murmur2 partition), in order.
    pub(crate) fn write(
        &self,
        what: &str,
        backend: std::sync::Arc<dyn riffle::backend::Backend>,
        topic: &str,
    ) -> anyhow::Result<()> {
        let total: usize = self.partitions.iter().map(Vec::len).sum();
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(&format!("{what} [{{bar:40}}] {{pos}}/{{len}} records"))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let mut producer = super::bulk_producer(backend);
        let one = "1".to_owned();
        let mut written = 0u64;
        for (p, records) in self.partitions.iter().enumerate() {
            for &(key, ts) in records {
                let mut record =
                    riffle::producer::ProducerRecord::new(&self.keys[key as usize], &one)
                        .with_timestamp(ts);
                record.partition = Some(p as u32);
                producer.send_record(topic, record)?;
                written += 1;
                if written.is_multiple_of(65_536) {
                    bar.set_position(written);
                }
            }
        }
        producer.close()?;
        bar.finish_and_clear();
        Ok(())
    }

    /// What the model says of the generated records.
    pub(crate) fn expected(&self, spec: &Spec) -> Expected {
        let mut expected = Expected::default();
        for records in &self.partitions {
            expected.add(spec.run(records), |k| self.keys[*k as usize].clone());
        }
        expected
    }
}

/// The model's windows over every partition (keys are in one partition each, so the
/// partitions' windows never collide).
#[derive(Debug, Default)]
pub(crate) struct Expected {
    pub(crate) finals: BTreeMap<WKey<String>, i64>,
    pub(crate) removed: BTreeSet<WKey<String>>,
    pub(crate) emitted: BTreeMap<WKey<String>, i64>,
    pub(crate) dropped: u64,
}

impl Expected {
    fn add<K>(&mut self, outcome: Outcome<K>, name: impl Fn(&K) -> String) {
        let rename = |(k, s, e): &WKey<K>| (name(k), *s, *e);
        self.finals
            .extend(outcome.finals.iter().map(|(w, c)| (rename(w), *c)));
        self.removed.extend(outcome.removed.iter().map(rename));
        self.emitted
            .extend(outcome.emitted.iter().map(|(w, c)| (rename(w), *c)));
        self.dropped += outcome.dropped;
    }

    /// The model of an existing topic's records, per partition in offset order (records
    /// without a key are left out, as `groupByKey` drops them).
    pub(crate) fn of_topic(
        backend: &dyn Backend,
        topic: &str,
        spec: &Spec,
    ) -> anyhow::Result<Expected> {
        let mut expected = Expected::default();
        let partitions = backend
            .partitions(topic)?
            .with_context(|| format!("input topic {topic} does not exist"))?;
        for p in 0..partitions {
            let mut records = Vec::new();
            super::for_each_record(backend, &TopicPartition::new(topic, p), |record| {
                if let Some(key) = record.key() {
                    records.push((
                        String::from_utf8_lossy(&key[..]).into_owned(),
                        record.timestamp(),
                    ));
                }
                Ok(())
            })?;
            expected.add(spec.run(&records), String::clone);
        }
        Ok(expected)
    }
}

/// The output topic: every value written for each window, in order.
pub(crate) type Written = BTreeMap<WKey<String>, Vec<Option<i64>>>;

/// Reads the output topic (on either backend): each window's values in order (a windowed key
/// is always in the same partition) and the number of records.
pub(crate) fn read_output(
    backend: &dyn Backend,
    topic: &str,
    spec: &Spec,
) -> anyhow::Result<(Written, u64)> {
    let mut written = Written::new();
    let mut records = 0;
    let Some(partitions) = backend.partitions(topic)? else {
        return Ok((written, 0));
    };
    let keys = key_serde(spec);
    let values = Serdes::optional(Serdes::i64());
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        super::for_each_record(backend, &tp, |record| {
            let at = || format!("{tp} offset {}", record.offset());
            let key = keys
                .deserialize(record.key().map(|k| &k[..]))
                .with_context(|| format!("{}: not a windowed key", at()))?;
            let value = values
                .deserialize(record.value().map(|v| &v[..]))
                .with_context(|| format!("{}: not an 8-byte count", at()))?;
            written
                .entry((key.key, key.window.start, key.window.end))
                .or_default()
                .push(value);
            records += 1;
            Ok(())
        })?;
    }
    Ok((written, records))
}

/// What differs between the output and the model: none when the output is right. With
/// `--emit final` every emitted window exactly once with its count and nothing else; with
/// `--emit updates` the last value of every window is its count (a tombstone for a session
/// merged away), and every window of the model has one.
pub(crate) fn differences(emit: Emit, expected: &Expected, written: &Written) -> Vec<String> {
    let show = |(k, s, e): &WKey<String>| format!("{k}@{s}/{e}");
    let mut problems = Vec::new();
    match emit {
        Emit::Final => {
            for (w, count) in &expected.emitted {
                match written.get(w).map(Vec::as_slice) {
                    None => problems.push(format!("{}: closed with {count}, not emitted", show(w))),
                    Some([Some(c)]) if c == count => {}
                    Some(values) => problems.push(format!(
                        "{}: closed with {count}, emitted {values:?}",
                        show(w)
                    )),
                }
            }
            for (w, values) in written {
                if !expected.emitted.contains_key(w) {
                    let what = match expected.finals.get(w) {
                        Some(c) => format!("still open with {c}"),
                        None => "not a window of the input".to_owned(),
                    };
                    problems.push(format!("{}: {what}, emitted {values:?}", show(w)));
                }
            }
        }
        Emit::Updates => {
            for (w, values) in written {
                let last = values.last().copied().flatten();
                match (expected.finals.get(w), last) {
                    (Some(count), Some(c)) if c == *count => {}
                    (None, None) if expected.removed.contains(w) => {}
                    (Some(count), _) => problems.push(format!(
                        "{}: counts {count}, last written {values:?}",
                        show(w)
                    )),
                    (None, _) if expected.removed.contains(w) => problems.push(format!(
                        "{}: merged away, but its last value is not a tombstone: {values:?}",
                        show(w)
                    )),
                    (None, _) => problems.push(format!(
                        "{}: not a window of the input, written {values:?}",
                        show(w)
                    )),
                }
            }
            for (w, count) in &expected.finals {
                if !written.contains_key(w) {
                    problems.push(format!("{}: counts {count}, never written", show(w)));
                }
            }
        }
    }
    problems
}

/// Runs the sample on the embedded log.
pub(crate) fn windowed_count(args: WindowedArgs) -> anyhow::Result<()> {
    let spec = args.spec()?;
    if let Some(servers) = args.bootstrap_servers.clone() {
        return super::kafka::windowed_count(args, spec, &servers);
    }
    let _temp;
    let (log_dir, input, output, generated) = match &args.log_dir {
        Some(dir) => {
            let (input, output) = super::given_topics(&args.input, &args.output)?;
            (dir.clone(), input, output, None)
        }
        None => {
            _temp = tempfile::tempdir().context("creating a temporary directory")?;
            let dir = _temp.path().join("log");
            let generated = generate(&args, &spec)?;
            let log = Log::open(&dir, LogOptions::default())?;
            log.create_topic("events", args.partitions)?;
            generated.write(
                "generating",
                EmbeddedBackend::new(log.clone()).shared(),
                "events",
            )?;
            log.sync()?;
            (
                dir,
                "events".to_owned(),
                "counts".to_owned(),
                Some(generated),
            )
        }
    };
    let log = Log::open(&log_dir, LogOptions::default())
        .with_context(|| format!("opening {}", log_dir.display()))?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| log_dir.join("state"));
    let config = args.config(&args.application_id, state_dir)?;
    let total_input = super::input_size(&log, &input)?;
    println!("counting {input} into {output}: {}", describe(&spec));
    let app = StreamsApp::new(
        topology(&input, &output, &spec, args.emit, args.store)?,
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )?;
    let metrics = app.thread_metrics();
    let (summary, elapsed, interrupted) =
        super::run_with_progress(app, total_input, StreamsApp::is_idle, args.follow.clone())?;
    let dropped: u64 = metrics.iter().map(|m| m.dropped_records()).sum();
    let backend = EmbeddedBackend::new(log.clone());
    let (written, records) = read_output(&backend, &output, &spec)?;
    let expected = match (&generated, args.check) {
        (Some(generated), _) => Some(generated.expected(&spec)),
        (None, true) => Some(Expected::of_topic(&backend, &input, &spec)?),
        (None, false) => None,
    };
    let run = Run {
        top: args.top,
        summary: &summary,
        elapsed,
        interrupted,
        dropped,
        // Only a run over all of its input counts every drop the model counts.
        dropped_comparable: generated.is_some(),
    };
    report(&run, &spec, args.emit, &written, records, expected.as_ref())
}

/// How a run went.
pub(crate) struct Run<'a> {
    /// Windows to print.
    pub(crate) top: usize,
    pub(crate) summary: &'a riffle::RunSummary,
    pub(crate) elapsed: Duration,
    pub(crate) interrupted: bool,
    /// The runtime's dropped-records metric, summed over the threads.
    pub(crate) dropped: u64,
    /// Whether the run saw the whole input, so its drops are all the model's.
    pub(crate) dropped_comparable: bool,
}

/// Prints throughput, the windows with the largest counts and, with a model, the check.
pub(crate) fn report(
    run: &Run<'_>,
    spec: &Spec,
    emit: Emit,
    written: &Written,
    records: u64,
    expected: Option<&Expected>,
) -> anyhow::Result<()> {
    let secs = run.elapsed.as_secs_f64();
    println!(
        "processed {} records in {:.2} s: {:.0} records/s{}; {} dropped as late",
        run.summary.records_processed,
        secs,
        run.summary.records_processed as f64 / secs.max(1e-9),
        if run.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        run.dropped
    );
    // Each window's latest count (final results are written once).
    let mut top: Vec<(&WKey<String>, i64)> = written
        .iter()
        .filter_map(|(w, values)| values.last().copied().flatten().map(|c| (w, c)))
        .collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    println!(
        "{} windows in {records} output records; top windows:",
        top.len()
    );
    for ((key, start, end), count) in top.iter().take(run.top) {
        println!("  {key}@{start}/{end}\t{count}");
    }
    let Some(expected) = expected else {
        return Ok(());
    };
    let mut problems = differences(emit, expected, written);
    // Kafka counts a drop per window missed (time windows) or per record (sessions); sliding
    // windows count one per window a record misses, which the model does not replay.
    let drops_compare =
        run.dropped_comparable && !matches!(spec.kind, Kind::Sliding { .. }) && !run.interrupted;
    if drops_compare && run.dropped != expected.dropped {
        problems.push(format!(
            "the runtime dropped {} records as late, the model {}",
            run.dropped, expected.dropped
        ));
    }
    let detail = match emit {
        Emit::Final => format!(
            "{} windows closed and emitted once, {} still open",
            expected.emitted.len(),
            expected.finals.len().saturating_sub(
                expected
                    .finals
                    .keys()
                    .filter(|w| expected.emitted.contains_key(*w))
                    .count()
            )
        ),
        Emit::Updates => format!(
            "{} windows at their latest count, {} merged-away sessions",
            expected.finals.len(),
            expected.removed.len()
        ),
    };
    let dropped = if drops_compare {
        format!(
            "; {} records dropped as late, as the model has it",
            expected.dropped
        )
    } else {
        format!("; the model drops {}", expected.dropped)
    };
    println!(
        "windows equal an independent replay of Kafka's window rules over the input: {} ({detail}{dropped})",
        if problems.is_empty() { "yes" } else { "NO" }
    );
    if !problems.is_empty() {
        for problem in problems.iter().take(20) {
            println!("  {problem}");
        }
        let n = problems.len();
        anyhow::bail!(
            "the output differs from the model of the input in {n} {}",
            if n == 1 { "place" } else { "places" }
        );
    }
    Ok(())
}
