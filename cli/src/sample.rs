//! `riffle sample group-by-key-count`: the bundled groupByKey-count application; `riffle sample
//! windowed-count`: the bundled windowed count (`sample/windowed.rs`); `riffle sample enrich`:
//! a stream–table join and a windowed total (`sample/enrich.rs`); `riffle sample click-through`:
//! a stream–stream join (`sample/click_through.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
    StreamsConfig, dsl::StoreType, producer::Producer, producer::ProducerConfig,
    producer::ProducerRecord,
};
use riffle_log::{Log, LogOptions, TopicPartition};

mod click_through;
mod enrich;
mod kafka;
mod serve;
mod window_model;
mod windowed;

pub(crate) use serve::{bind_serve, serve_counts};

pub use click_through::ClickThroughArgs;
pub use enrich::EnrichArgs;
pub use windowed::WindowedArgs;

/// The bundled samples.
#[derive(clap::Subcommand, Debug)]
pub enum Sample {
    /// Count records per key: stream(input).groupByKey().count().toStream().to(output).
    GroupByKeyCount(CountArgs),
    /// Count records per key and window:
    /// stream(input).groupByKey().windowedBy(windows).count().toStream().to(output).
    ///
    /// By default over generated timestamped input, checked against an independent replay of
    /// Kafka's window rules; with --input, over an existing topic, by record timestamp, until
    /// it is drained.
    ///
    /// Window kinds: tumbling windows of --window (the default, 60s), hopping ones with
    /// --advance, sessions with --session-gap, sliding windows with --sliding; all accept records
    /// up to --grace late.
    ///
    /// Generated input (without --input): --records records over --keys keys (`key-N`,
    /// uniformly, partitioned by Kafka's murmur2 of the key), one every --span / --records ms of
    /// event time from 2024-01-01T00:00:00Z; 5 % arrive out of order, about half of them within
    /// grace and half beyond it. For sliding windows a record beyond grace for its own windows
    /// but within grace of a later one is moved to the edge of grace (where Kafka's incremental
    /// algorithm agrees with the plain definition of the windows).
    ///
    /// The check: after the run the output topic is compared with an independent replay of
    /// Kafka's window rules over each partition's records (stream time is per task): with
    /// --emit final, every window stream time closed exactly once with its count, and nothing
    /// else; with --emit updates, the latest value of every window is its count (a tombstone for
    /// a session merged away); and the records dropped as late (time windows and sessions).
    /// Stream time only moves with records and the generated input ends without records far in
    /// the future, so the last windows of each partition stay open: --emit final does not emit
    /// them, and the check counts them as still open. The exit status is non-zero if the check
    /// fails.
    WindowedCount(WindowedArgs),
    /// Enrich orders with their customers' regions, then total them per region and window:
    /// stream(orders).join(table(customers)).map(region, amount).groupByKey()
    /// .windowedBy(windows).reduce(+).toStream().to(totals).
    ///
    /// Generates --customers customers over --regions regions and writes them first; once the
    /// application holds them all, writes --orders orders (uniformly over the customers, a
    /// --unknown share for customers the table does not have, which the inner join drops)
    /// spanning --span of event time. Checks that the latest total of every region and window
    /// equals the orders' amounts summed from the generated data, and prints a digest of the
    /// totals, the same on the embedded log and on Kafka (--bootstrap-servers) for the same
    /// flags. The exit status is non-zero if the check fails.
    Enrich(EnrichArgs),
    /// Join impressions with clicks of the same ad within a window (a stream–stream join):
    /// stream(impressions).join(stream(clicks), windows).to(output).
    ///
    /// Generated (without --log-dir): --records impressions and as many clicks over --keys
    /// ads, checked against every pair within --window counted independently (the default
    /// grace, a day, covers the input, so every such pair joins). With --log-dir, joins
    /// existing topics until they are drained.
    ClickThrough(ClickThroughArgs),
}

/// How the samples run: `--follow` and `--metrics-addr`, for both.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RunArgs {
    /// Keep running once the input is drained, counting records as they arrive (from other
    /// processes on the same log, or other producers on Kafka), until Ctrl-C or SIGTERM; a
    /// progress line every --progress-every instead of the progress bar.
    #[arg(long)]
    pub(crate) follow: bool,
    /// With --follow: how often to print a progress line, like `500ms`, `5s` or `1m`.
    #[arg(long, value_parser = crate::duration::parse_duration_ms, default_value = "5s")]
    pub(crate) progress_every: i64,
    /// Serve the application's metrics for Prometheus at http://HOST:PORT/metrics while it
    /// runs (`metrics_http_addr`: the instance's HTTP server, which also answers --serve's
    /// queries there).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics_addr: Option<String>,
    /// The embedded log the application runs on, if it does: the progress lines report its
    /// cleaner's compaction.
    #[arg(skip)]
    pub(crate) log: Option<Log>,
}

impl RunArgs {
    /// Sets what these options configure.
    pub(crate) fn configure(&self, config: &mut StreamsConfig) {
        if let Some(addr) = &self.metrics_addr {
            config.metrics_http_addr = Some(addr.clone());
        }
    }
}

/// Arguments of the groupByKey-count sample.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("backend").args(["log_dir", "bootstrap_servers"])))]
pub struct CountArgs {
    /// Count an existing log instead of generating one (needs --input and --output).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Run on an Apache Kafka 4.x cluster instead of the embedded log (a streams group named
    /// after the application id). Without --input/--output the input is generated into new
    /// topics.
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap_servers: Option<String>,
    /// The input topic (with --log-dir or --bootstrap-servers).
    #[arg(long, requires = "backend")]
    input: Option<String>,
    /// With --bootstrap-servers: Kafka client properties (`name=value` lines, as Kafka's tools
    /// read `--command-config`), e.g. `security.protocol=SASL_SSL`, `sasl.mechanism`,
    /// `sasl.username`, `sasl.password` or `sasl.jaas.config`, `ssl.ca.location`.
    #[arg(long, value_name = "FILE", requires = "bootstrap_servers")]
    pub(crate) command_config: Option<PathBuf>,
    /// The output topic: counts as 8-byte big-endian longs (with --log-dir or
    /// --bootstrap-servers).
    #[arg(long, requires = "backend")]
    output: Option<String>,
    /// Stream threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The state directory (default: <log-dir>/state, or a temporary directory).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The application id.
    #[arg(long, default_value = "group-by-key-count")]
    application_id: String,
    /// Commit interval in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    commit_interval_ms: u64,
    /// Records to generate (without --log-dir).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Distinct keys to generate (without --log-dir).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Partitions of the generated input topic (without --log-dir).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Where the counts are stored: `memory` (restored from the changelog on start) or
    /// `persistent` (on disk in the state directory, checkpointed).
    #[arg(long, value_enum, default_value = "persistent")]
    store: Store,
    /// `at_least_once` or `exactly_once`.
    #[arg(long, default_value = "at_least_once")]
    processing_guarantee: String,
    /// Extra options, Kafka-style: --set name=value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
    /// Group through a repartition topic (`group_by` on the same key) instead of `group_by_key`.
    #[arg(long)]
    repartition: bool,
    /// With --log-dir: the embedded log's segment size in bytes (`LogOptions::segment_bytes`),
    /// for topics that do not set `segment.bytes`, such as the changelog.
    #[arg(long, default_value_t = LogOptions::default().segment_bytes)]
    segment_bytes: u64,
    #[command(flatten)]
    follow: RunArgs,
    /// Answer `GET /counts/<key>` (the key percent-encoded as in any URL, UTF-8) at
    /// http://HOST:PORT (also this instance's
    /// `application_server`) from the running application's store (an interactive query over
    /// every local task): the key's count, 404 if it has none; on Kafka, a 307 redirect to the
    /// instance that counts the key when another one does; 503 while the store migrates.
    /// The instance's one HTTP server answers it, and /metrics, at HOST:PORT and at
    /// --metrics-addr if that names another address.
    #[arg(long, value_name = "HOST:PORT")]
    serve: Option<String>,
}

/// Where the sample keeps its counts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// In memory.
    Memory,
    /// On disk (fjall).
    Persistent,
}

/// The DSL's store type for `store`.
pub fn store_type(store: Store) -> StoreType {
    match store {
        Store::Memory => StoreType::InMemory,
        Store::Persistent => StoreType::Persistent,
    }
}

/// The sample's topology: `stream(input).groupByKey().count().toStream().to(output)`, with the
/// counts in the store `counts`.
pub fn topology(input: &str, output: &str, store: Store) -> riffle::Result<riffle::Topology> {
    topology_with(input, output, store, false)
}

/// [`topology`], grouping through a repartition topic (`group_by` on the same key, as
/// `groupBy` does in Kafka Streams) when `repartition` is set.
fn topology_with(
    input: &str,
    output: &str,
    store: Store,
    repartition: bool,
) -> riffle::Result<riffle::Topology> {
    let store_type = store_type(store);
    let builder = StreamsBuilder::new();
    let stream = builder.stream(input, Consumed::with(Serdes::string(), Serdes::string()));
    let grouped = if repartition {
        stream.group_by(
            |k: &String, _: &String| k.clone(),
            riffle::Grouped::with(Serdes::string(), Serdes::string()).named("by-word"),
        )
    } else {
        stream.group_by_key()
    };
    grouped
        .count_with(Materialized::named("counts").with_store_type(store_type))
        .to_stream()
        .to(output, Produced::with(Serdes::string(), Serdes::i64()));
    builder.build()
}

/// Runs `sample` (`riffle sample …`).
pub fn run(sample: Sample) -> anyhow::Result<()> {
    match sample {
        Sample::GroupByKeyCount(args) => group_by_key_count(args),
        Sample::WindowedCount(args) => windowed::windowed_count(args),
        Sample::Enrich(args) => enrich::enrich(args),
        Sample::ClickThrough(args) => click_through::click_through(args),
    }
}

fn group_by_key_count(mut args: CountArgs) -> anyhow::Result<()> {
    if let Some(servers) = args.bootstrap_servers.clone() {
        return kafka::group_by_key_count(args, &servers);
    }
    let _temp;
    let (log_dir, input, output, expected) = match &args.log_dir {
        Some(dir) => {
            let (input, output) = given_topics(&args.input, &args.output)?;
            (dir.clone(), input, output, None)
        }
        None => {
            _temp = tempfile::tempdir().context("creating a temporary directory")?;
            let dir = _temp.path().join("log");
            let expected = generate(&dir, "words", args.records, args.keys, args.partitions)?;
            (dir, "words".to_owned(), "counts".to_owned(), Some(expected))
        }
    };
    let log = Log::open(
        &log_dir,
        LogOptions::default().with_segment_bytes(args.segment_bytes),
    )
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
    args.follow.log = Some(log.clone());
    let listener = args
        .serve
        .as_deref()
        .map(|addr| bind_serve(addr, &mut config))
        .transpose()?;
    let total_input: u64 = input_size(&log, &input)?;
    let mut app = StreamsApp::new(
        topology_with(&input, &output, args.store, args.repartition)?,
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )?;
    if let Some(listener) = listener {
        serve_counts(&mut app, listener)?;
    }
    let (summary, elapsed, interrupted) =
        run_with_progress(app, total_input, StreamsApp::is_idle, args.follow.clone())?;
    let counts = latest_counts(&EmbeddedBackend::new(log.clone()), &output)?;
    report(&summary, elapsed, interrupted, &counts, expected.as_ref())
}

/// Runs `app` with a progress bar over `total` records until `finished` (or Ctrl-C); returns
/// the summary, the time taken and whether it was interrupted. With `--follow`, runs until
/// Ctrl-C or SIGTERM whatever `finished` says, printing a progress line every
/// `--progress-every`.
pub(crate) fn run_with_progress(
    mut app: StreamsApp,
    total: u64,
    finished: impl Fn(&StreamsApp) -> bool,
    follow: RunArgs,
) -> anyhow::Result<(riffle::RunSummary, Duration, bool)> {
    let shutdown = app.shutdown_handle();
    ctrlc::set_handler(move || shutdown.shutdown()).context("installing the Ctrl-C handler")?;
    if follow.follow {
        return follow_until_stopped(app, follow);
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} counting [{bar:40}] {pos}/{len} records ({per_sec}, {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let start = Instant::now();
    app.start()?;
    if let Some(addr) = app.metrics_addr() {
        bar.println(format!("metrics at http://{addr}/metrics"));
    }
    while !finished(&app) && !app.is_shutting_down() {
        bar.set_position(app.records_processed().min(total));
        let restored = app.records_restored();
        if restored > 0 {
            bar.set_message(format!("· {restored} changelog records restored"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let interrupted = app.is_shutting_down();
    let summary = app.close()?;
    bar.finish_and_clear();
    Ok((summary, start.elapsed(), interrupted))
}

/// `--follow`: runs `app` until it is shut down (Ctrl-C, SIGTERM, or an error), printing a
/// line every `--progress-every`: records processed, the rate since the last line, records
/// restored, and whether the application is caught up with its input.
fn follow_until_stopped(
    mut app: StreamsApp,
    follow: RunArgs,
) -> anyhow::Result<(riffle::RunSummary, Duration, bool)> {
    use std::io::Write;
    let every = Duration::from_millis(u64::try_from(follow.progress_every).unwrap_or(5_000));
    let start = Instant::now();
    app.start()?;
    if let Some(addr) = app.metrics_addr() {
        println!("metrics at http://{addr}/metrics");
    }
    println!(
        "following: counting records as they arrive; a line every {} ms; Ctrl-C to stop",
        every.as_millis()
    );
    let (mut last_at, mut last_processed) = (start, 0u64);
    while !app.is_shutting_down() {
        std::thread::sleep(Duration::from_millis(20).min(every));
        let now = Instant::now();
        if now.duration_since(last_at) < every {
            continue;
        }
        let processed = app.records_processed();
        let rate = (processed - last_processed.min(processed)) as f64
            / now.duration_since(last_at).as_secs_f64();
        let cleaner = follow.log.as_ref().map_or_else(String::new, |log| {
            let c = log.compaction_totals();
            format!(
                "compaction: {} partitions cleaned, {:.1} MiB read and written, {} records removed; ",
                c.partitions,
                c.bytes_io as f64 / (1 << 20) as f64,
                c.records_removed
            )
        });
        println!(
            "{:.1} s: {processed} records processed, {rate:.0} records/s, {} restored, {cleaner}{}",
            now.duration_since(start).as_secs_f64(),
            app.records_restored(),
            if app.is_idle() {
                "caught up"
            } else {
                "catching up"
            }
        );
        let _ = std::io::stdout().flush();
        (last_at, last_processed) = (now, processed);
    }
    let summary = app.close()?;
    Ok((summary, start.elapsed(), true))
}

/// Prints a run's throughput and top keys, and checks the counts against the input's when the
/// sample generated it.
pub(crate) fn report(
    summary: &riffle::RunSummary,
    elapsed: Duration,
    interrupted: bool,
    counts: &HashMap<String, i64>,
    expected: Option<&HashMap<String, i64>>,
) -> anyhow::Result<()> {
    let secs = elapsed.as_secs_f64();
    println!(
        "processed {} records in {:.2} s: {:.0} records/s{}",
        summary.records_processed,
        secs,
        summary.records_processed as f64 / secs.max(1e-9),
        if interrupted { " (interrupted)" } else { "" }
    );
    let mut top: Vec<(&String, &i64)> = counts.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!("{} keys; top keys:", counts.len());
    for (key, count) in top.iter().take(10) {
        println!("  {key}\t{count}");
    }
    if let Some(expected) = expected {
        let exact = expected == counts;
        println!(
            "counts equal an independent HashMap count of the input: {}",
            if exact { "yes" } else { "NO" }
        );
        if !exact {
            anyhow::bail!("the counts differ from the input's");
        }
    }
    Ok(())
}

/// A producer for generated input: string keys and values, 256 KiB batches.
pub fn bulk_producer(backend: Arc<dyn riffle::backend::Backend>) -> Producer<String, String> {
    let config = ProducerConfig::default()
        .with_batch_size(256 << 10)
        .with_linger(Duration::from_secs(1));
    Producer::with_config(backend, Serdes::string(), Serdes::string(), config)
}

/// Writes `records` random records over `keys` keys; returns their counts.
pub fn generate(
    dir: &std::path::Path,
    topic: &str,
    records: u64,
    keys: u64,
    partitions: u32,
) -> anyhow::Result<HashMap<String, i64>> {
    let log = Log::open(dir, LogOptions::default())?;
    log.create_topic(topic, partitions)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut producer = bulk_producer(EmbeddedBackend::new(log.clone()).shared());
    let mut expected = HashMap::new();
    let bar = ProgressBar::new(records);
    bar.set_style(
        ProgressStyle::with_template("generating [{bar:40}] {pos}/{len} records")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let one = "1".to_owned();
    for i in 0..records {
        let key = format!("key-{}", rng.random_range(0..keys.max(1)));
        producer.send_record(
            topic,
            ProducerRecord::new(&key, &one).with_timestamp(i as i64),
        )?;
        *expected.entry(key).or_insert(0) += 1;
        if i % 65_536 == 0 {
            bar.set_position(i);
        }
    }
    producer.close()?;
    log.sync()?;
    bar.finish_and_clear();
    Ok(expected)
}

fn input_size(log: &Log, topic: &str) -> anyhow::Result<u64> {
    let partitions = log
        .partitions(topic)
        .with_context(|| format!("input topic {topic} does not exist"))?;
    let mut total = 0;
    for p in 0..partitions {
        total += log.end_offset(&TopicPartition::new(topic, p))?;
    }
    Ok(total)
}

/// The `--input` and `--output` topics that `--log-dir` needs.
pub(crate) fn given_topics(
    input: &Option<String>,
    output: &Option<String>,
) -> anyhow::Result<(String, String)> {
    let input = input
        .clone()
        .context("--input is required with --log-dir")?;
    let output = output
        .clone()
        .context("--output is required with --log-dir")?;
    refuse_same_topic(&input, &output)?;
    Ok((input, output))
}

/// `--input` and `--output` naming one topic: the sample would read its own counts back as
/// input and write into the topic it counts.
pub(crate) fn refuse_same_topic(input: &str, output: &str) -> anyhow::Result<()> {
    if input == output {
        anyhow::bail!(
            "--input and --output are both {input:?}: the sample would read its own counts back \
             as input and write into the topic it counts; name another output topic"
        );
    }
    Ok(())
}

/// The latest count per key in `topic`, on either backend.
pub fn latest_counts(
    backend: &dyn riffle::backend::Backend,
    topic: &str,
) -> anyhow::Result<HashMap<String, i64>> {
    let mut counts = HashMap::new();
    let Some(partitions) = backend.partitions(topic)? else {
        return Ok(counts);
    };
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        for_each_record(backend, &tp, |record| {
            let key = String::from_utf8_lossy(record.key().map(|k| &k[..]).unwrap_or_default())
                .into_owned();
            let value = record
                .value()
                .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok());
            let value = value
                .with_context(|| format!("{tp} offset {}: not an 8-byte count", record.offset()))?;
            counts.insert(key, i64::from_be_bytes(value));
            Ok(())
        })?;
    }
    Ok(counts)
}

/// Calls `f` with every record of `tp`, from its first offset to its end now.
pub fn for_each_record(
    backend: &dyn riffle::backend::Backend,
    tp: &TopicPartition,
    mut f: impl FnMut(&riffle::log::Record) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let end = backend.end_offset(tp)?;
    let mut position = 0;
    while position < end {
        let batches = backend.fetch(tp, position, 4 << 20)?;
        if batches.is_empty() {
            break;
        }
        for batch in batches {
            for record in batch.records() {
                let record = record?;
                if record.offset() < position {
                    continue;
                }
                f(&record)?;
            }
            position = batch.last_offset() + 1;
        }
    }
    Ok(())
}
