//! Exactly-once on a real broker. The count app ("words" → "counts"), in its own process under
//! `processing_guarantee=exactly_once` with a 100 ms commit interval, is killed with SIGKILL at
//! random points — while it joins, restores, processes or commits — and restarted on the same
//! state directory, with new input before each run. Afterwards Kafka's own console consumer
//! with `--isolation-level read_committed` reads the output: each key's counts rise strictly
//! (no update was emitted twice, whatever a kill interrupted) and end at a HashMap count of
//! the input. Two instances, one of them killed while both process, end the same way.
//!
//! `RIFFLE_CRASH_KILLS` sets the kill points (default 20); `RIFFLE_CRASH_SEED` replays a
//! failing seed (the test prints its seed).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{
    Instance, all_records, check_read_committed_by_kafka, latest_counts,
    produce_words_now as produce_words, wait_for,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use riffle::dsl::StoreType;
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

#[test]
fn instance() {
    common::child_instance();
}

/// A pause of `lo..hi` ms, at random.
fn millis(rng: &mut StdRng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..hi))
}

fn seed() -> u64 {
    std::env::var("RIFFLE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

/// A broker whose streams groups let a killed member's tasks go within seconds.
fn broker() -> KafkaBroker {
    KafkaBroker::builder()
        .config("group.streams.min.session.timeout.ms", "2000")
        .config("group.streams.session.timeout.ms", "3000")
        .config("group.streams.min.heartbeat.interval.ms", "500")
        .config("group.streams.heartbeat.interval.ms", "500")
        .config("group.streams.min.task.offset.interval.ms", "1000")
        .config("group.streams.task.offset.interval.ms", "2000")
        // The transaction log's 50 default partitions take seconds to create.
        .config("transaction.state.log.num.partitions", "3")
        .start()
        .unwrap()
}

/// A backend that reads everything, and one that reads committed data only.
fn backends(broker: &KafkaBroker) -> (KafkaBackend, KafkaBackend) {
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let mut committed = KafkaConfig::new(broker.bootstrap());
    committed.read_committed = true;
    (backend, KafkaBackend::connect(committed).unwrap())
}

const EXACTLY_ONCE: [(&str, &str); 2] = [("GUARANTEE", "exactly_once"), ("COMMIT_MS", "100")];

#[test]
fn kill_9_at_random_points_under_exactly_once_gives_exact_counts_read_committed() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        return;
    }
    let kills: usize = std::env::var("RIFFLE_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed = seed();
    println!("kill -9 exactly_once on Kafka: seed {seed} (RIFFLE_CRASH_SEED replays it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let broker = broker();
    let (backend, committed) = backends(&broker);
    let dirs = tempfile::tempdir().unwrap();
    let state = dirs.path().join("instance");
    let started = Instant::now();
    let mut expected: HashMap<String, i64> = HashMap::new();
    for kill in 0..kills {
        // New input for every run, so each one has records to process when it is killed.
        for (k, n) in produce_words(&backend, "words", 4, 4_000, 300, kill as u64 * 31) {
            *expected.entry(k).or_default() += n;
        }
        let instance = Instance::spawn_with(
            "instance",
            broker.bootstrap(),
            "count-eos",
            &state,
            2,
            if kill % 2 == 0 {
                StoreType::Persistent
            } else {
                StoreType::InMemory
            },
            &EXACTLY_ONCE,
        );
        std::thread::sleep(millis(&mut rng, 300, 4_000));
        instance.kill();
    }
    let instance = Instance::spawn_with(
        "instance",
        broker.bootstrap(),
        "count-eos",
        &state,
        2,
        StoreType::Persistent,
        &EXACTLY_ONCE,
    );
    wait_for("exact counts", Duration::from_secs(180), || {
        (latest_counts(&committed, "counts") == expected).then_some(())
    });
    instance.stop();
    // Kafka's transactions tool lists the stream threads' transactional producers.
    let listed = broker
        .run_tool(
            "org.apache.kafka.tools.TransactionsCommand",
            &["--bootstrap-server", broker.bootstrap(), "list"],
        )
        .unwrap();
    println!("{listed}");
    assert!(
        listed.lines().any(|l| l.starts_with("count-eos-")),
        "no transactional id of the application in:\n{listed}"
    );
    let read = check_read_committed_by_kafka(&broker, &committed, &expected, "after the kills");
    let written = all_records(&backend);
    println!(
        "{kills} kills in {:.1} s: {} keys, {read} committed output records, {} more in aborted transactions",
        started.elapsed().as_secs_f64(),
        expected.len(),
        written - read
    );
}

#[test]
fn two_instances_under_exactly_once_one_killed_give_exact_counts() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        return;
    }
    let seed = seed();
    println!("two instances, exactly_once on Kafka: seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let broker = broker();
    let (backend, committed) = backends(&broker);
    let dirs = tempfile::tempdir().unwrap();
    let mut expected = produce_words(&backend, "words", 4, 20_000, 400, 0);
    let spawn = |name: &str| {
        Instance::spawn_with(
            "instance",
            broker.bootstrap(),
            "count-eos-two",
            &dirs.path().join(name),
            1,
            StoreType::InMemory,
            &EXACTLY_ONCE,
        )
    };
    let a = spawn("a");
    let b = spawn("b");
    // More input while both run; kill one of them in the middle of the last round.
    for round in 0..4u64 {
        std::thread::sleep(millis(&mut rng, 200, 1_000));
        for (k, n) in produce_words(&backend, "words", 4, 10_000, 400, 100 + round) {
            *expected.entry(k).or_default() += n;
        }
    }
    std::thread::sleep(millis(&mut rng, 0, 300));
    a.kill();
    for (k, n) in produce_words(&backend, "words", 4, 5_000, 400, 200) {
        *expected.entry(k).or_default() += n;
    }
    wait_for("exact counts", Duration::from_secs(120), || {
        (latest_counts(&committed, "counts") == expected).then_some(())
    });
    b.stop();
    let read = check_read_committed_by_kafka(&broker, &committed, &expected, "two instances");
    println!(
        "two instances, one killed: {} keys, {read} committed output records, {} more in aborted transactions",
        expected.len(),
        all_records(&backend) - read
    );
}

#[test]
fn a_fenced_producer_closes_its_tasks_dirty_and_goes_on_exactly() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        return;
    }
    common::init_tracing();
    let broker = broker();
    let (backend, committed) = backends(&broker);
    let dirs = tempfile::tempdir().unwrap();
    let mut expected = produce_words(&backend, "words", 4, 5_000, 200, 0);
    let mut config = common::config("count-fence", dirs.path(), 1);
    config.processing_guarantee = riffle::ProcessingGuarantee::ExactlyOnce;
    config.commit_interval = Some(Duration::from_millis(100));
    let mut app = riffle::StreamsApp::new(
        common::count_topology("words", "counts", StoreType::InMemory),
        config,
        KafkaBackend::connect(KafkaConfig::new(broker.bootstrap()))
            .unwrap()
            .shared(),
    )
    .unwrap();
    app.start().unwrap();
    wait_for("the first counts", Duration::from_secs(90), || {
        (latest_counts(&committed, "counts") == expected).then_some(())
    });
    // Kafka's transactions tool (`forceTerminateTransaction`) takes the thread's transactional id over (a new producer
    // epoch): the thread's next commit is fenced.
    let transactional_id = format!("count-fence-{}-1", app.group_info().process_id);
    let out = broker
        .run_tool(
            "org.apache.kafka.tools.TransactionsCommand",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "forceTerminateTransaction",
                "--transactionalId",
                &transactional_id,
            ],
        )
        .unwrap();
    println!("force-terminate {transactional_id}: {out}");
    for (k, n) in produce_words(&backend, "words", 4, 5_000, 200, 7) {
        *expected.entry(k).or_default() += n;
    }
    wait_for(
        "exact counts after the fence",
        Duration::from_secs(90),
        || (latest_counts(&committed, "counts") == expected).then_some(()),
    );
    let fenced: u64 = app.thread_metrics().iter().map(|m| m.fenced()).sum();
    assert!(fenced >= 1, "the thread was never fenced");
    let summary = app.close().unwrap();
    let read = check_read_committed_by_kafka(&broker, &committed, &expected, "after a fence");
    println!(
        "fenced {fenced} time(s); {} records processed (10,000 in the input), {read} committed output records, {} more in aborted transactions",
        summary.records_processed,
        all_records(&backend) - read
    );
}
