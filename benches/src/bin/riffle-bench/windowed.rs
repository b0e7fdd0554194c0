//! `cargo run --release -p riffle-bench -- windowed`: windowed counts end to end on the embedded
//! log — a tumbling count and a session count per store type, beside the plain groupByKey count of
//! the `throughput` bench on the same input in the same run, and the tumbling count with longer
//! retentions (how the cost of expiring segments grows with the windows the store keeps).
//!
//! The input: N records over K keys (uniformly random, seeded), event time rising evenly over a
//! span (4 h by default) from 2026-01-01T00:00:00Z, a fraction of the records (1 % by default)
//! moved back in time by up to `--late-max-s`, so some land in windows already closed (dropped,
//! Kafka's `dropped-records`). Every run's output is checked: the tumbling count against a
//! replay of Kafka's window rules per partition (every window's count, and the dropped records),
//! the session count by its total (the latest count of each live session sums to the records
//! not dropped).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use rand::{Rng, SeedableRng};
use riffle::{
    Consumed, EmbeddedBackend, Materialized, Produced, Serdes, SessionWindows, StreamsApp,
    StreamsBuilder, StreamsConfig, TimeWindows, state::SegmentedStoreTotals, window::EmitStrategy,
};
use riffle_cli::sample::{Store, latest_counts, store_type};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};
use serde::Serialize;

use super::{
    count_process_wide, load_average, process_totals, progress_bar, thousands, write_json_rows,
};

/// The first event time: 2026-01-01T00:00:00Z (a multiple of every window size in seconds).
const EPOCH_MS: i64 = 1_767_225_600_000;
const INPUT: &str = "events";
const OUTPUT: &str = "windowed-counts";
const STORE: &str = "windowed-counts";

/// Arguments of `cargo run --release -p riffle-bench -- windowed`.
///
/// Defaults: 1,000,000 records over 10,000 keys in 4 partitions, one stream thread; event time
/// rising evenly over 4 h (14,400 s), so 60 s tumbling windows give 240 windows and each key
/// ~0.4 records per window; sessions with a 150 s inactivity gap (a key's records come ~144 s
/// apart on average, so its sessions hold ~2.8 records); 30 s of grace for both; 1 % of the
/// records moved back by up to 240 s (about 3/4 of them too late for their tumbling window's
/// grace, and at most 1/4 for a session's gap plus grace: dropped).
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Records to generate.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Distinct keys (each record's key is uniformly random).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Input partitions (tasks).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Stream threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Stores to measure: memory, persistent.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "memory,persistent"
    )]
    stores: Vec<Store>,
    /// Aggregations to measure: tumbling (count per key and tumbling window), session (count
    /// per key and session), count (the plain groupByKey count of the `throughput` bench, the
    /// baseline).
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "count,tumbling,session"
    )]
    windows: Vec<Kind>,
    /// When the windowed counts forward their results: `update` (every change, collapsed per
    /// window between commits by the cache) or `final` (each window once, when it closes).
    #[arg(long, value_enum, default_value = "update")]
    emit: Emit,
    /// Tumbling window size, in seconds.
    #[arg(long, default_value_t = 60)]
    window_s: u64,
    /// Session inactivity gap, in seconds.
    #[arg(long, default_value_t = 150)]
    gap_s: u64,
    /// Grace period of both, in seconds.
    #[arg(long, default_value_t = 30)]
    grace_s: u64,
    /// Event-time span of the input, in seconds: record i is at i × span / records.
    #[arg(long, default_value_t = 14_400)]
    span_s: u64,
    /// Fraction of the records moved back in time (out of order).
    #[arg(long, default_value_t = 0.01)]
    out_of_order: f64,
    /// An out-of-order record is moved back by a uniformly random time below this, in seconds.
    #[arg(long, default_value_t = 240)]
    late_max_s: u64,
    /// Retentions of the tumbling count's store, as the number of windows it keeps per key:
    /// retention = n × window size + grace (1: the minimum, Kafka's default). One row each.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    retained_windows: Vec<u64>,
    /// Timed runs of each row, taken in turn (row A, B, C, A, B, C, ...); one more run with
    /// allocation counting gives allocations per record.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Skip the allocation-counting run (for profiling the timed runs alone).
    #[arg(long)]
    no_allocations: bool,
    /// Commit interval in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    commit_interval_ms: u64,
    /// Seed of the keys and the out-of-order choices.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--windows` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// The plain groupByKey count (no windows): the baseline.
    Count,
    /// Tumbling windows.
    Tumbling,
    /// Session windows.
    Session,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Count => "count",
            Kind::Tumbling => "tumbling",
            Kind::Session => "session",
        }
    }
}

/// `--emit` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Emit {
    /// Every update (EmitStrategy::on_window_update, the default).
    Update,
    /// Each window's final result once it closes (EmitStrategy::on_window_close).
    Final,
}

impl Emit {
    fn label(self) -> &'static str {
        match self {
            Emit::Update => "update",
            Emit::Final => "final",
        }
    }
}

fn store_label(store: Store) -> &'static str {
    match store {
        Store::Memory => "memory",
        Store::Persistent => "persistent",
    }
}

/// One row of the table: an aggregation on a store with a retention.
#[derive(Clone, Copy, Debug)]
struct Setup {
    kind: Kind,
    store: Store,
    /// Windows kept per key (tumbling only; 1 otherwise).
    retained: u64,
}

/// The parameters every row shares, as the JSON states them.
#[derive(Clone, Debug, Serialize)]
struct Params {
    records: u64,
    keys: u64,
    partitions: u32,
    threads: usize,
    emit: &'static str,
    window_ms: i64,
    gap_ms: i64,
    grace_ms: i64,
    span_ms: i64,
    first_timestamp_ms: i64,
    out_of_order: f64,
    late_max_ms: i64,
    commit_interval_ms: u64,
    seed: u64,
}

/// One timed run, as written to the JSON file.
#[derive(Clone, Debug, Serialize)]
struct Row {
    #[serde(flatten)]
    params: Params,
    aggregation: &'static str,
    store: &'static str,
    run: usize,
    /// Windows per key the store keeps (retention = n × window + grace); tumbling only.
    retained_windows: Option<u64>,
    retention_ms: Option<i64>,
    segment_interval_ms: Option<i64>,
    seconds: f64,
    records_per_sec: f64,
    /// CPU time of the stream threads (from /proc), per record: less disturbed by other
    /// processes than the wall time.
    stream_thread_cpu_seconds: f64,
    cpu_ns_per_record: f64,
    /// From the separate counting run of this row (`None` with --no-allocations).
    allocs_per_record: Option<f64>,
    bytes_per_record: Option<f64>,
    /// Windows (sessions) in the output: distinct windowed keys whose latest value is a count.
    windows: u64,
    /// Sessions in the output whose latest value is a tombstone: replaced by a longer one (a
    /// record extended them, or merged them with another).
    replaced: u64,
    /// Kafka's `dropped-records`: records too late for their window.
    dropped: u64,
    /// Records written to the output topic.
    output_records: u64,
    /// Tumbling: windows the stores keep at the end of the run (from the replay).
    retained_at_end: Option<u64>,
    /// The window or session stores during the run (`riffle::state::segmented_store_totals`): entry
    /// writes applied at commits, writes ignored for their segment having expired, and the
    /// segments dropped.
    store_writes: u64,
    expired_writes: u64,
    segment_drops: u64,
    segments_dropped: u64,
    entries_dropped: u64,
    segment_drop_ms: f64,
    /// Segments created on disk (fjall keyspaces) and the time it took.
    segments_created: u64,
    segment_create_ms: f64,
    load_average: String,
}

/// The generated input: each record's key and timestamp, in log order.
struct Input {
    keys: Vec<String>,
    /// The partition of each key.
    partition_of: Vec<u32>,
    records: Vec<(u32, i64)>,
}

impl Input {
    fn generate(args: &Args) -> Input {
        let keys: Vec<String> = (0..args.keys.max(1)).map(|k| format!("key-{k}")).collect();
        let partition_of = keys
            .iter()
            .map(|k| partition_for_key(k.as_bytes(), args.partitions))
            .collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
        let span = i128::from(args.span_s) * 1_000;
        let late_max = (args.late_max_s * 1_000).max(1) as i64;
        let records = (0..args.records)
            .map(|i| {
                let key = rng.random_range(0..keys.len() as u32);
                let mut ts = EPOCH_MS + (i128::from(i) * span / i128::from(args.records)) as i64;
                if rng.random_bool(args.out_of_order.clamp(0.0, 1.0)) {
                    ts -= rng.random_range(0..late_max);
                }
                (key, ts)
            })
            .collect();
        Input {
            keys,
            partition_of,
            records,
        }
    }

    /// Writes the input into a new log at `dir`, a batch per 256 KB per partition.
    fn write(&self, dir: &std::path::Path, partitions: u32) -> anyhow::Result<Log> {
        let log = Log::open(dir, LogOptions::default())?;
        log.create_topic(INPUT, partitions)?;
        let topic: Arc<str> = INPUT.into();
        let mut builders: Vec<BatchBuilder> = (0..partitions)
            .map(|_| BatchBuilder::new(Compression::None))
            .collect();
        for &(key, ts) in &self.records {
            let p = self.partition_of[key as usize] as usize;
            builders[p].push(ts, Some(self.keys[key as usize].as_bytes()), Some(b"1"));
            if builders[p].size_bytes() >= 256 << 10 {
                log.append(
                    &TopicPartition::new(topic.clone(), p as u32),
                    &mut builders[p],
                )?;
            }
        }
        for (p, builder) in builders.iter_mut().enumerate() {
            if !builder.is_empty() {
                log.append(&TopicPartition::new(topic.clone(), p as u32), builder)?;
            }
        }
        log.sync()?;
        Ok(log)
    }

    /// The records per key (the plain count's result).
    fn totals(&self) -> HashMap<String, i64> {
        let mut totals = HashMap::new();
        for &(key, _) in &self.records {
            *totals.entry(self.keys[key as usize].clone()).or_insert(0) += 1;
        }
        totals
    }
}

/// Kafka's tumbling-window rules replayed per partition: a record lands in the window holding
/// its timestamp unless stream time (the partition's largest timestamp so far, this record's
/// included) has reached the window's end plus the grace.
struct TumblingReplay {
    /// (key, window start) → count.
    counts: HashMap<(u32, i64), i64>,
    dropped: u64,
    /// Each partition's final stream time.
    stream_time: Vec<i64>,
    partition_of: Vec<u32>,
    size: i64,
    grace: i64,
}

impl TumblingReplay {
    fn new(input: &Input, partitions: u32, size: i64, grace: i64) -> Self {
        let mut stream_time = vec![i64::MIN; partitions as usize];
        let mut counts = HashMap::new();
        let mut dropped = 0;
        for &(key, ts) in &input.records {
            let p = input.partition_of[key as usize] as usize;
            stream_time[p] = stream_time[p].max(ts);
            let start = ts.div_euclid(size) * size;
            if start + size <= stream_time[p] - grace {
                dropped += 1;
            } else {
                *counts.entry((key, start)).or_insert(0) += 1;
            }
        }
        TumblingReplay {
            counts,
            dropped,
            stream_time,
            partition_of: input.partition_of.clone(),
            size,
            grace,
        }
    }

    /// Whether the window of `key` at `start` has closed at the end of the input.
    fn closed(&self, key: u32, start: i64) -> bool {
        let p = self.partition_of[key as usize] as usize;
        start + self.size + self.grace <= self.stream_time[p]
    }

    /// The windows a store with `retention` and `segment` keeps at the end: those in segments
    /// at or above `(observed - retention + 1) / segment`, observed being the partition's
    /// largest window start.
    fn retained_at_end(&self, retention: i64, segment: i64) -> u64 {
        let mut observed = vec![i64::MIN; self.stream_time.len()];
        for &(key, start) in self.counts.keys() {
            let p = self.partition_of[key as usize] as usize;
            observed[p] = observed[p].max(start);
        }
        self.counts
            .keys()
            .filter(|&&(key, start)| {
                let p = self.partition_of[key as usize] as usize;
                let bound = (observed[p] - retention + 1).div_euclid(segment);
                start.div_euclid(segment) >= bound
            })
            .count() as u64
    }
}

/// Every record of `topic` in log order: (key, value), `None` for a tombstone.
type OutputRecords = Vec<(Vec<u8>, Option<Vec<u8>>)>;

fn read_output(log: &Log, topic: &str) -> anyhow::Result<OutputRecords> {
    let backend = EmbeddedBackend::new(log.clone());
    let backend: &dyn riffle::backend::Backend = &backend;
    let mut out = Vec::new();
    let Some(partitions) = backend.partitions(topic)? else {
        return Ok(out);
    };
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        riffle_cli::sample::for_each_record(backend, &tp, |record| {
            let key = record.key().map(|k| k.to_vec()).unwrap_or_default();
            out.push((key, record.value().map(|v| v.to_vec())));
            Ok(())
        })?;
    }
    Ok(out)
}

fn count_of(value: &[u8]) -> anyhow::Result<i64> {
    let bytes: [u8; 8] = value
        .try_into()
        .context("an output value is not an 8-byte count")?;
    Ok(i64::from_be_bytes(bytes))
}

/// A windowed output key: the record key and the `n` big-endian times after it.
fn split_windowed<const N: usize>(key: &[u8]) -> anyhow::Result<(&str, [i64; N])> {
    let at = key
        .len()
        .checked_sub(8 * N)
        .context("an output key shorter than its window")?;
    let (head, tail) = key.split_at(at);
    let mut times = [0i64; N];
    for (i, chunk) in tail.chunks_exact(8).enumerate() {
        times[i] = i64::from_be_bytes(chunk.try_into()?);
    }
    Ok((std::str::from_utf8(head)?, times))
}

fn key_id(key: &str) -> anyhow::Result<u32> {
    key.strip_prefix("key-")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("unexpected output key {key:?}"))
}

/// What a run's output holds, once checked.
struct Checked {
    windows: u64,
    replaced: u64,
    output_records: u64,
}

/// Checks the tumbling count's output against the replay.
fn check_tumbling(
    output: &OutputRecords,
    replay: &TumblingReplay,
    emit: Emit,
    dropped: u64,
) -> anyhow::Result<Checked> {
    ensure!(
        dropped == replay.dropped,
        "{dropped} records dropped, the replay of Kafka's rules drops {}",
        replay.dropped
    );
    let mut latest: HashMap<(u32, i64), i64> = HashMap::new();
    for (key, value) in output {
        let (key, [start]) = split_windowed::<1>(key)?;
        let id = key_id(key)?;
        let value = value
            .as_deref()
            .context("a tombstone from a tumbling count")?;
        let previous = latest.insert((id, start), count_of(value)?);
        if emit == Emit::Final && previous.is_some() {
            bail!("{key}@{start} was emitted twice with emit final");
        }
    }
    let expected: HashMap<(u32, i64), i64> = match emit {
        Emit::Update => replay.counts.clone(),
        Emit::Final => replay
            .counts
            .iter()
            .filter(|&(&(key, start), _)| replay.closed(key, start))
            .map(|(&w, &c)| (w, c))
            .collect(),
    };
    if latest != expected {
        let wrong = expected
            .iter()
            .filter(|(w, c)| latest.get(w) != Some(c))
            .count();
        bail!(
            "the tumbling counts differ from the replay of Kafka's rules: {} windows in the \
             output, {} expected, {wrong} missing or different",
            latest.len(),
            expected.len()
        );
    }
    Ok(Checked {
        windows: latest.len() as u64,
        replaced: 0,
        output_records: output.len() as u64,
    })
}

/// Checks the session count's output by its total.
fn check_session(
    output: &OutputRecords,
    records: u64,
    emit: Emit,
    dropped: u64,
) -> anyhow::Result<Checked> {
    let mut latest: HashMap<&[u8], Option<i64>> = HashMap::new();
    for (key, value) in output {
        let (name, [end, start]) = split_windowed::<2>(key)?;
        key_id(name)?;
        ensure!(
            start <= end,
            "session {name}@{start}/{end} ends before it starts"
        );
        let value = value.as_deref().map(count_of).transpose()?;
        let previous = latest.insert(key, value);
        if emit == Emit::Final && previous.is_some() {
            bail!("session {name}@{start}/{end} was emitted twice with emit final");
        }
    }
    let sum: i64 = latest.values().flatten().sum();
    let kept = records - dropped;
    match emit {
        Emit::Update => ensure!(
            sum as u64 == kept,
            "the live sessions count {sum} records, {kept} were not dropped"
        ),
        Emit::Final => ensure!(
            sum as u64 <= kept,
            "the closed sessions count {sum} records, only {kept} were not dropped"
        ),
    }
    Ok(Checked {
        windows: latest.values().filter(|v| v.is_some()).count() as u64,
        replaced: latest.values().filter(|v| v.is_none()).count() as u64,
        output_records: output.len() as u64,
    })
}

/// What one run measured.
struct Measured {
    seconds: f64,
    /// CPU time of the stream threads.
    cpu_seconds: f64,
    allocs: u64,
    bytes: u64,
    dropped: u64,
    checked: Checked,
    expiry: SegmentedStoreTotals,
}

/// The tumbling store's retention for `retained` windows per key, and its segment interval
/// (the DSL's: half the retention, at least a minute).
fn retention(args: &Args, retained: u64) -> (i64, i64) {
    let r = (retained.max(1) * args.window_s + args.grace_s) as i64 * 1_000;
    (r, (r / 2).max(60_000))
}

fn topology(args: &Args, setup: Setup) -> riffle::Result<riffle::Topology> {
    if setup.kind == Kind::Count {
        return riffle_cli::sample::topology(INPUT, OUTPUT, setup.store);
    }
    let builder = StreamsBuilder::new();
    let grouped = builder
        .stream(INPUT, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    let emit = match args.emit {
        Emit::Update => EmitStrategy::on_window_update(),
        Emit::Final => EmitStrategy::on_window_close(),
    };
    let grace = Duration::from_secs(args.grace_s);
    let materialized = Materialized::named(STORE).with_store_type(store_type(setup.store));
    match setup.kind {
        Kind::Tumbling => {
            let size = Duration::from_secs(args.window_s);
            let (retention_ms, _) = retention(args, setup.retained);
            grouped
                .windowed_by(TimeWindows::of_size_and_grace(size, grace))
                .emit_strategy(emit)
                .count_with(materialized.with_retention(Duration::from_millis(retention_ms as u64)))
                .to_stream()
                .to(
                    OUTPUT,
                    Produced::with(Serdes::time_windowed(Serdes::string(), size), Serdes::i64()),
                );
        }
        Kind::Session => {
            grouped
                .windowed_by(SessionWindows::of_inactivity_gap_and_grace(
                    Duration::from_secs(args.gap_s),
                    grace,
                ))
                .emit_strategy(emit)
                .count_with(materialized)
                .to_stream()
                .to(
                    OUTPUT,
                    Produced::with(Serdes::session_windowed(Serdes::string()), Serdes::i64()),
                );
        }
        Kind::Count => unreachable!("handled above"),
    }
    builder.build()
}

struct Expected {
    input: Input,
    totals: HashMap<String, i64>,
    tumbling: Option<TumblingReplay>,
}

/// One run over a fresh log holding the input.
fn run_once(
    args: &Args,
    setup: Setup,
    expected: &Expected,
    count_allocations: bool,
) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir()?;
    let log = expected
        .input
        .write(&dir.path().join("log"), args.partitions)?;
    let mut config = StreamsConfig::new("windowed-bench");
    config.num_stream_threads = args.threads;
    config.state_dir = dir.path().join("state");
    config.poll = Duration::from_millis(10);
    config.commit_interval = Some(Duration::from_millis(args.commit_interval_ms));
    let mut app = StreamsApp::new(
        topology(args, setup)?,
        config,
        EmbeddedBackend::new(log.clone()).shared(),
    )?;
    let metrics = app.thread_metrics();
    let bar = progress_bar(args.records);
    bar.set_message(format!(
        "{} / {} / {} windows{}",
        setup.kind.label(),
        store_label(setup.store),
        setup.retained,
        if count_allocations {
            " (counting allocations)"
        } else {
            ""
        }
    ));
    let expiry0 = riffle::state::segmented_store_totals();
    let (b0, c0) = process_totals();
    count_process_wide(count_allocations);
    let start = Instant::now();
    app.start()?;
    while !app.is_idle() && !app.is_shutting_down() {
        bar.set_position(app.records_processed().min(args.records));
        std::thread::sleep(Duration::from_millis(20));
    }
    // The stream threads' CPU time, while they are still there.
    let mut cpu = Duration::ZERO;
    for m in &metrics {
        let (used, _) = riffle_bench::thread_cpu_time(m.os_thread_id())
            .context("reading a stream thread's CPU time")?;
        cpu += used;
    }
    let summary = app.close()?;
    let seconds = start.elapsed().as_secs_f64();
    count_process_wide(false);
    let (b1, c1) = process_totals();
    let expiry = riffle::state::segmented_store_totals().since(&expiry0);
    bar.finish_and_clear();
    ensure!(
        summary.records_processed == args.records,
        "processed {} records, expected {}",
        summary.records_processed,
        args.records
    );
    let dropped: u64 = metrics.iter().map(|m| m.dropped_records()).sum();
    let checked = match setup.kind {
        Kind::Count => {
            ensure!(
                latest_counts(&EmbeddedBackend::new(log.clone()), OUTPUT)? == expected.totals,
                "the counts differ from an independent HashMap count of the input"
            );
            Checked {
                windows: 0,
                replaced: 0,
                output_records: read_output(&log, OUTPUT)?.len() as u64,
            }
        }
        Kind::Tumbling => {
            let replay = expected
                .tumbling
                .as_ref()
                .context("no tumbling replay computed")?;
            check_tumbling(&read_output(&log, OUTPUT)?, replay, args.emit, dropped)?
        }
        Kind::Session => check_session(
            &read_output(&log, OUTPUT)?,
            args.records,
            args.emit,
            dropped,
        )?,
    };
    Ok(Measured {
        seconds,
        cpu_seconds: cpu.as_secs_f64(),
        allocs: c1 - c0,
        bytes: b1 - b0,
        dropped,
        checked,
        expiry,
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A row of the printed table: the median of its timed runs, the counts of the last.
struct Summary {
    setup: Setup,
    rate: f64,
    cpu_ns: f64,
    runs: String,
    allocs: Option<(f64, f64)>,
    windows: u64,
    replaced: u64,
    dropped: u64,
    output: u64,
    retained_at_end: Option<u64>,
    store: SegmentedStoreTotals,
    drop_ms: f64,
    create_ms: f64,
}

fn print_summary(args: &Args, summary: &[Summary], load_before: &str) {
    println!(
        "{} records over {} keys, {} partitions, {} stream thread(s), emit {}; event time over \
         {} s; {} s tumbling windows, {} s session gap, {} s grace; {:.1} % out of order by up \
         to {} s; load average {} before, {} after",
        thousands(args.records as f64),
        thousands(args.keys as f64),
        args.partitions,
        args.threads,
        args.emit.label(),
        thousands(args.span_s as f64),
        args.window_s,
        args.gap_s,
        args.grace_s,
        args.out_of_order * 100.0,
        args.late_max_s,
        load_before,
        load_average()
    );
    println!(
        "{:<9} {:<10} {:>8} {:>8} {:>6} {:>16} {:>10} {:>7} {:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8} {:>7} {:>9}",
        "agg",
        "store",
        "retained",
        "M rec/s",
        "/count",
        "runs M rec/s",
        "CPU ns/rec",
        "allocs",
        "B/rec",
        "windows",
        "replaced",
        "dropped",
        "output",
        "to store",
        "expired",
        "kept@end",
        "drops",
        "drop ms",
        "created",
        "create ms"
    );
    let dash = || "-".to_owned();
    for row in summary {
        let setup = row.setup;
        let baseline = summary
            .iter()
            .find(|s| s.setup.kind == Kind::Count && s.setup.store == setup.store)
            .map(|s| s.rate);
        println!(
            "{:<9} {:<10} {:>8} {:>8.2} {:>6} {:>16} {:>10.0} {:>7} {:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8.1} {:>7} {:>9.1}",
            setup.kind.label(),
            store_label(setup.store),
            if setup.kind == Kind::Tumbling {
                setup.retained.to_string()
            } else {
                dash()
            },
            row.rate / 1e6,
            baseline.map_or_else(dash, |b| format!("{:.2}", row.rate / b)),
            row.runs,
            row.cpu_ns,
            row.allocs.map_or_else(dash, |(a, _)| format!("{a:.2}")),
            row.allocs.map_or_else(dash, |(_, b)| format!("{b:.0}")),
            thousands(row.windows as f64),
            thousands(row.replaced as f64),
            thousands(row.dropped as f64),
            thousands(row.output as f64),
            thousands(row.store.writes as f64),
            thousands(row.store.expired_writes as f64),
            row.retained_at_end
                .map_or_else(dash, |n| thousands(n as f64)),
            row.store.drops,
            row.drop_ms,
            row.store.segments_created,
            row.create_ms
        );
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    ensure!(args.records > 0, "--records must be positive");
    ensure!(args.partitions > 0, "--partitions must be positive");
    ensure!(args.runs > 0, "--runs must be positive");
    ensure!(
        args.window_s > 0 && args.gap_s > 0,
        "--window-s and --gap-s must be positive"
    );
    ensure!(
        (0.0..=1.0).contains(&args.out_of_order),
        "--out-of-order is a fraction in [0, 1]"
    );
    ensure!(
        args.retained_windows.iter().all(|&n| n > 0),
        "--retained-windows: each value must be positive"
    );
    if let Some(path) = &args.json {
        super::check_writable(path)?;
    }
    let mut setups = Vec::new();
    for &store in &super::distinct(&args.stores, "--stores")? {
        for &kind in &super::distinct(&args.windows, "--windows")? {
            if kind == Kind::Tumbling {
                for &retained in &super::distinct(&args.retained_windows, "--retained-windows")? {
                    setups.push(Setup {
                        kind,
                        store,
                        retained,
                    });
                }
            } else {
                setups.push(Setup {
                    kind,
                    store,
                    retained: 1,
                });
            }
        }
    }
    let input = Input::generate(&args);
    let size_ms = args.window_s as i64 * 1_000;
    let grace_ms = args.grace_s as i64 * 1_000;
    let tumbling = setups
        .iter()
        .any(|s| s.kind == Kind::Tumbling)
        .then(|| TumblingReplay::new(&input, args.partitions, size_ms, grace_ms));
    let expected = Expected {
        totals: input.totals(),
        input,
        tumbling,
    };
    let params = Params {
        records: args.records,
        keys: args.keys,
        partitions: args.partitions,
        threads: args.threads,
        emit: args.emit.label(),
        window_ms: size_ms,
        gap_ms: args.gap_s as i64 * 1_000,
        grace_ms,
        span_ms: args.span_s as i64 * 1_000,
        first_timestamp_ms: EPOCH_MS,
        out_of_order: args.out_of_order,
        late_max_ms: args.late_max_s as i64 * 1_000,
        commit_interval_ms: args.commit_interval_ms,
        seed: args.seed,
    };
    let load_before = load_average();
    // Timed runs in turn, then one counting run per row.
    let mut timed: Vec<Vec<(Measured, String)>> = setups.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.runs {
        for (i, &setup) in setups.iter().enumerate() {
            let measured = run_once(&args, setup, &expected, false)?;
            timed[i].push((measured, load_average()));
        }
    }
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for (i, &setup) in setups.iter().enumerate() {
        let counted = if args.no_allocations {
            None
        } else {
            Some(run_once(&args, setup, &expected, true)?)
        };
        let n = args.records as f64;
        let tumbling = setup.kind == Kind::Tumbling;
        let (retention_ms, segment_ms) = retention(&args, setup.retained);
        let retained_at_end = expected
            .tumbling
            .as_ref()
            .filter(|_| tumbling)
            .map(|r| r.retained_at_end(retention_ms, segment_ms));
        for (run, (m, load)) in timed[i].iter().enumerate() {
            rows.push(Row {
                params: params.clone(),
                aggregation: setup.kind.label(),
                store: store_label(setup.store),
                run: run + 1,
                retained_windows: tumbling.then_some(setup.retained),
                retention_ms: tumbling.then_some(retention_ms),
                segment_interval_ms: tumbling.then_some(segment_ms),
                seconds: m.seconds,
                records_per_sec: n / m.seconds,
                stream_thread_cpu_seconds: m.cpu_seconds,
                cpu_ns_per_record: m.cpu_seconds * 1e9 / n,
                allocs_per_record: counted.as_ref().map(|c| c.allocs as f64 / n),
                bytes_per_record: counted.as_ref().map(|c| c.bytes as f64 / n),
                windows: m.checked.windows,
                replaced: m.checked.replaced,
                dropped: m.dropped,
                output_records: m.checked.output_records,
                retained_at_end,
                store_writes: m.expiry.writes,
                expired_writes: m.expiry.expired_writes,
                segment_drops: m.expiry.drops,
                segments_dropped: m.expiry.segments_dropped,
                entries_dropped: m.expiry.entries_dropped,
                segment_drop_ms: m.expiry.drop_nanos as f64 / 1e6,
                segments_created: m.expiry.segments_created,
                segment_create_ms: m.expiry.create_nanos as f64 / 1e6,
                load_average: load.clone(),
            });
        }
        let mut rates: Vec<f64> = timed[i].iter().map(|(m, _)| n / m.seconds).collect();
        let mut drop_ms: Vec<f64> = timed[i]
            .iter()
            .map(|(m, _)| m.expiry.drop_nanos as f64 / 1e6)
            .collect();
        let mut create_ms: Vec<f64> = timed[i]
            .iter()
            .map(|(m, _)| m.expiry.create_nanos as f64 / 1e6)
            .collect();
        let mut cpu: Vec<f64> = timed[i]
            .iter()
            .map(|(m, _)| m.cpu_seconds * 1e9 / n)
            .collect();
        let (last, _) = &timed[i][timed[i].len() - 1];
        let runs = rates
            .iter()
            .map(|r| format!("{:.2}", r / 1e6))
            .collect::<Vec<_>>()
            .join(" ");
        summary.push(Summary {
            setup,
            rate: median(&mut rates),
            cpu_ns: median(&mut cpu),
            runs,
            allocs: counted
                .as_ref()
                .map(|c| (c.allocs as f64 / n, c.bytes as f64 / n)),
            windows: last.checked.windows,
            replaced: last.checked.replaced,
            dropped: last.dropped,
            output: last.checked.output_records,
            retained_at_end,
            store: last.expiry,
            drop_ms: median(&mut drop_ms),
            create_ms: median(&mut create_ms),
        });
    }
    print_summary(&args, &summary, &load_before);
    if let Some(path) = &args.json {
        write_json_rows(path, &rows)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windowed_keys_split_into_key_and_times() {
        let mut key = b"key-7".to_vec();
        key.extend_from_slice(&120_000i64.to_be_bytes());
        key.extend_from_slice(&60_000i64.to_be_bytes());
        let (name, [end, start]) = split_windowed::<2>(&key).expect("split");
        assert_eq!((name, end, start), ("key-7", 120_000, 60_000));
        assert!(split_windowed::<2>(b"short").is_err());
    }

    #[test]
    fn the_replay_drops_records_past_the_grace_and_closes_windows() {
        let input = Input {
            keys: vec!["key-0".into()],
            partition_of: vec![0],
            // 60 s windows, 10 s grace: the record at 50 s comes after stream time 65 s, within
            // the grace of [0, 60); the one at 10 s after 130 s, too late.
            records: vec![
                (0, 5_000),
                (0, 65_000),
                (0, 50_000),
                (0, 130_000),
                (0, 10_000),
            ],
        };
        let replay = TumblingReplay::new(&input, 1, 60_000, 10_000);
        assert_eq!(replay.dropped, 1);
        assert_eq!(replay.counts.get(&(0, 0)), Some(&2));
        assert_eq!(replay.counts.get(&(0, 60_000)), Some(&1));
        assert_eq!(replay.counts.get(&(0, 120_000)), Some(&1));
        assert!(replay.closed(0, 0));
        assert!(
            replay.closed(0, 60_000),
            "[60 s, 120 s) closes at 130 s, its end + grace"
        );
        assert!(!replay.closed(0, 120_000));
    }
}
