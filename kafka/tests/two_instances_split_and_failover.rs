//! Scenario (b): two instances of the count app (separate processes, one stream thread each)
//! join one streams group and split its four tasks, as the broker's StreamsGroupDescribe
//! shows. One is killed (SIGKILL: no commit, no leave); once the broker's session timeout
//! fences it, the survivor takes all four tasks, restores their counts from the changelog and
//! counts the rest of the input: the final counts are complete.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    Instance, fast_broker, latest_counts, produce_words, stable_assignment, task_count, wait_for,
};
use riffle::dsl::StoreType;
use riffle_kafka::{KafkaBackend, KafkaConfig};

#[test]
fn instance() {
    common::child_instance();
}

#[test]
fn two_instances_split_the_tasks_and_the_survivor_takes_them_all() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        return;
    }
    let broker = fast_broker(0);
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let mut expected = produce_words(&backend, "words", 4, 10_000, 400, 0);
    let dirs = tempfile::tempdir().unwrap();
    let a = Instance::spawn(
        "instance",
        broker.bootstrap(),
        "count-b",
        &dirs.path().join("a"),
        1,
        StoreType::InMemory,
    );
    let b = Instance::spawn(
        "instance",
        broker.bootstrap(),
        "count-b",
        &dirs.path().join("b"),
        1,
        StoreType::InMemory,
    );

    let split = wait_for(
        "two members with two tasks each",
        Duration::from_secs(90),
        || {
            stable_assignment(&backend, "count-b")
                .filter(|m| m.len() == 2 && m.iter().all(|(_, t)| task_count(t) == 2))
        },
    );
    println!("split: {split:?}");
    println!(
        "{}",
        broker
            .describe_streams_group("count-b", &["--members", "--verbose"])
            .unwrap()
    );
    wait_for("the first half counted", Duration::from_secs(90), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    // Both idle and committed; now a crash.
    std::thread::sleep(Duration::from_secs(1));
    let killed_at = Instant::now();
    a.kill();

    for (k, n) in produce_words(&backend, "words", 4, 10_000, 400, 17) {
        *expected.entry(k).or_default() += n;
    }
    let survivor = wait_for(
        "the survivor owning all four tasks",
        Duration::from_secs(60),
        || {
            stable_assignment(&backend, "count-b")
                .filter(|m| m.len() == 1 && task_count(&m[0].1) == 4)
        },
    );
    println!(
        "survivor {} owns all tasks {:.1} s after the kill",
        survivor[0].0,
        killed_at.elapsed().as_secs_f64()
    );
    let counts = wait_for(
        "complete counts after the failover",
        Duration::from_secs(90),
        || {
            let counts = latest_counts(&backend, "counts");
            (counts.len() == expected.len() && counts.iter().all(|(k, &n)| n >= expected[k]))
                .then_some(counts)
        },
    );
    let reprocessed: i64 = counts.iter().map(|(k, &n)| n - expected[k]).sum();
    println!("final counts complete; {reprocessed} records counted twice");
    assert_eq!(
        counts, expected,
        "the killed instance had committed everything it counted: nothing is counted twice"
    );
    b.stop();
}
