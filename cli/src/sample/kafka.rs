//! `riffle sample group-by-key-count --bootstrap-servers HOST:PORT` (and `windowed-count`): the
//! same samples on an Apache Kafka 4.x cluster (riffle-kafka) instead of the embedded log.
//!
//! Without `--input`/`--output` it generates the input into fresh topics named after the run
//! (so a second run on the same cluster starts from nothing, as a fresh embedded log does) and
//! checks the counts against a HashMap count; with them it counts existing topics, resuming
//! from the application's committed offsets.

use std::collections::HashMap;
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use riffle::backend::{Backend, TopicKind};
use riffle::log::TopicPartition;
use riffle::{StreamsApp, StreamsConfig};
use riffle_kafka::{KafkaBackend, KafkaConfig};

use super::{CountArgs, topology};

/// A connection to the cluster at `servers`, and this run's number (seconds since the epoch)
/// for the names of generated topics and applications.
pub(super) fn connect(
    servers: &str,
    command_config: Option<&std::path::Path>,
) -> anyhow::Result<(KafkaBackend, u64)> {
    let mut config = KafkaConfig::new(servers);
    if let Some(path) = command_config {
        config.load_properties(path)?;
    }
    let backend = KafkaBackend::connect(config)
        .with_context(|| format!("connecting to Kafka at {servers}"))?;
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    Ok((backend, run))
}

pub(super) fn group_by_key_count(args: CountArgs, servers: &str) -> anyhow::Result<()> {
    let (backend, run) = connect(servers, args.command_config.as_deref())?;
    let (input, output, application_id, expected) = match (&args.input, &args.output) {
        (Some(input), Some(output)) => {
            super::refuse_same_topic(input, output)?;
            (
                input.clone(),
                output.clone(),
                args.application_id.clone(),
                None,
            )
        }
        (None, None) => {
            let input = format!("riffle-sample-words-{run}");
            let expected = generate(&backend, &input, args.records, args.keys, args.partitions)?;
            (
                input,
                format!("riffle-sample-counts-{run}"),
                format!("{}-{run}", args.application_id),
                Some(expected),
            )
        }
        _ => anyhow::bail!("--input and --output go together"),
    };
    println!("counting {input} into {output} as application {application_id} on {servers}");
    let _temp;
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => {
            _temp = tempfile::tempdir().context("creating a temporary state directory")?;
            _temp.path().to_owned()
        }
    };
    let mut config = StreamsConfig::new(application_id.clone());
    config.num_stream_threads = args.threads;
    config.commit_interval = Some(Duration::from_millis(args.commit_interval_ms));
    config.poll = Duration::from_millis(10);
    config.state_dir = state_dir;
    config.set("processing_guarantee", &args.processing_guarantee)?;
    for setting in &args.settings {
        let (name, value) = setting
            .split_once('=')
            .with_context(|| format!("--set {setting}: expected NAME=VALUE"))?;
        config.set(name, value)?;
    }
    args.follow.configure(&mut config);
    let listener = args
        .serve
        .as_deref()
        .map(|addr| super::bind_serve(addr, &mut config))
        .transpose()?;
    let remaining = remaining_input(&backend, &application_id, &input)?;
    let mut app = StreamsApp::new(
        topology(&input, &output, args.store)?,
        config,
        backend.shared(),
    )?;
    if let Some(listener) = listener {
        super::serve_counts(&mut app, listener)?;
    }
    let (summary, elapsed, interrupted) = super::run_with_progress(
        app,
        remaining,
        move |app| app.records_processed() >= remaining,
        args.follow.clone(),
    )?;
    // Under exactly_once the last transaction's records are readable once its markers are
    // written.
    backend.wait_until_stable(&output, Duration::from_secs(30))?;
    let counts = super::latest_counts(&backend, &output)?;
    super::report(&summary, elapsed, interrupted, &counts, expected.as_ref())
}

/// Writes `records` random records over `keys` keys to a new topic (as the embedded sample
/// generates them); returns their counts.
fn generate(
    backend: &KafkaBackend,
    topic: &str,
    records: u64,
    keys: u64,
    partitions: u32,
) -> anyhow::Result<HashMap<String, i64>> {
    backend.create_topic(topic, partitions, TopicKind::User)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut producer = super::bulk_producer(backend.clone().shared());
    let mut expected = HashMap::new();
    let bar = ProgressBar::new(records);
    bar.set_style(
        ProgressStyle::with_template("producing to Kafka [{bar:40}] {pos}/{len} records")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let one = "1".to_owned();
    for i in 0..records {
        let key = format!("key-{}", rng.random_range(0..keys.max(1)));
        producer.send_record(
            topic,
            riffle::producer::ProducerRecord::new(&key, &one).with_timestamp(i as i64),
        )?;
        *expected.entry(key).or_insert(0) += 1;
        if i % 65_536 == 0 {
            bar.set_position(i);
        }
    }
    producer.close()?;
    bar.finish_and_clear();
    Ok(expected)
}

/// Records of `topic` after the application's committed offsets.
fn remaining_input(
    backend: &KafkaBackend,
    application_id: &str,
    topic: &str,
) -> anyhow::Result<u64> {
    let ends = backend.end_offsets(topic)?;
    anyhow::ensure!(!ends.is_empty(), "input topic {topic} does not exist");
    let mut total = 0;
    for (p, end) in ends.into_iter().enumerate() {
        let tp = TopicPartition::new(topic, p as u32);
        let committed = backend.committed_offset(application_id, &tp)?.unwrap_or(0);
        total += end.saturating_sub(committed);
    }
    Ok(total)
}

/// `riffle sample windowed-count --bootstrap-servers HOST:PORT`: without `--input`/`--output`
/// the input is generated into fresh topics named after the run and the output checked against
/// the model; with them an existing topic is counted (checked with `--check`), resuming from
/// the application's committed offsets.
pub(super) fn windowed_count(
    args: super::windowed::WindowedArgs,
    spec: super::window_model::Spec,
    servers: &str,
) -> anyhow::Result<()> {
    use super::windowed::{self, Expected};
    let (backend, run) = connect(servers, None)?;
    let (input, output, application_id, generated) = match (&args.input, &args.output) {
        (Some(input), Some(output)) => {
            super::refuse_same_topic(input, output)?;
            (
                input.clone(),
                output.clone(),
                args.application_id.clone(),
                None,
            )
        }
        (None, None) => {
            let input = format!("riffle-sample-events-{run}");
            let generated = windowed::generate(&args, &spec)?;
            backend.create_topic(&input, args.partitions, TopicKind::User)?;
            generated.write("producing to Kafka", backend.clone().shared(), &input)?;
            (
                input,
                format!("riffle-sample-windowed-counts-{run}"),
                format!("{}-{run}", args.application_id),
                Some(generated),
            )
        }
        _ => anyhow::bail!("--input and --output go together"),
    };
    println!(
        "counting {input} into {output} as application {application_id} on {servers}: {}",
        windowed::describe(&spec)
    );
    let _temp;
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => {
            _temp = tempfile::tempdir().context("creating a temporary state directory")?;
            _temp.path().to_owned()
        }
    };
    let config = args.config(&application_id, state_dir)?;
    let remaining = remaining_input(&backend, &application_id, &input)?;
    let app = StreamsApp::new(
        windowed::topology(&input, &output, &spec, args.emit, args.store)?,
        config,
        backend.shared(),
    )?;
    let metrics = app.thread_metrics();
    let (summary, elapsed, interrupted) = super::run_with_progress(
        app,
        remaining,
        move |app| app.records_processed() >= remaining,
        args.follow.clone(),
    )?;
    let dropped: u64 = metrics.iter().map(|m| m.dropped_records()).sum();
    backend.wait_until_stable(&output, Duration::from_secs(30))?;
    let (written, records) = windowed::read_output(&backend, &output, &spec)?;
    let expected = match (&generated, args.check) {
        (Some(generated), _) => Some(generated.expected(&spec)),
        (None, true) => Some(Expected::of_topic(&backend, &input, &spec)?),
        (None, false) => None,
    };
    let run = windowed::Run {
        top: args.top,
        summary: &summary,
        elapsed,
        interrupted,
        dropped,
        dropped_comparable: generated.is_some(),
    };
    windowed::report(&run, &spec, args.emit, &written, records, expected.as_ref())
}
