//! Scenario (c): the heartbeat's `TaskOffsets` are the offset-sum snapshot, as the broker sees
//! it. Instance A counts everything alone with persistent stores (checkpointed), then B joins
//! and takes two of the four tasks. A's snapshot now holds the two tasks it gave away — their
//! checkpoints are still in A's state directory (docs/design.md §4 rule 1; its running tasks are
//! omitted by rule 2) — and StreamsGroupDescribe shows exactly those sums for A's member, with
//! end offsets equal to them (A was caught up when it gave them away). B, whose tasks are all
//! running, reports an empty snapshot.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{config, count_topology, fast_broker, latest_counts, produce_words, wait_for};
use riffle::{StreamsApp, TaskId, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig, TaskOffset};
use riffle_state_dir::Checkpoint;

fn by_task(offsets: &[TaskOffset]) -> BTreeMap<(String, i32), i64> {
    offsets
        .iter()
        .map(|o| ((o.subtopology.clone(), o.partition), o.offset))
        .collect()
}

#[test]
fn heartbeat_task_offsets_are_the_snapshot_the_broker_shows() {
    common::init_tracing();
    let broker = fast_broker(0);
    let connect = || KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let backend = connect();
    let expected = produce_words(&backend, "words", 4, 8_000, 300, 0);
    let dirs = tempfile::tempdir().unwrap();
    let (dir_a, dir_b) = (dirs.path().join("a"), dirs.path().join("b"));

    let app = |dir: &std::path::Path| {
        let mut a = StreamsApp::new(
            count_topology("words", "counts", StoreType::Persistent),
            config("count-c", dir, 1),
            connect().shared(),
        )
        .unwrap();
        a.start().unwrap();
        a
    };
    let a = app(&dir_a);
    wait_for("A counted everything", Duration::from_secs(90), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    let b = app(&dir_b);
    let split = wait_for(
        "A and B with two tasks each",
        Duration::from_secs(90),
        || {
            common::stable_assignment(&backend, "count-c")
                .filter(|m| m.len() == 2 && m.iter().all(|(_, t)| common::task_count(t) == 2))
        },
    );
    let process_a = a.group_info().process_id.clone();
    let given_away: Vec<TaskId> = {
        let own = &split.iter().find(|(p, _)| *p == process_a).unwrap().1;
        (0..4)
            .filter(|p| !own.iter().any(|t| t.partitions.contains(&(*p as i32))))
            .map(|p| TaskId {
                subtopology: 0,
                partition: p,
            })
            .collect()
    };
    // The snapshot by rule 1, computed independently: the checkpoint files in A's directory.
    let from_disk: BTreeMap<(String, i32), i64> = given_away
        .iter()
        .map(|t| {
            let path = dir_a
                .join("count-c")
                .join(t.to_string())
                .join(".checkpoint");
            let checkpoint = Checkpoint::read(&path)
                .unwrap()
                .expect("checkpoint written");
            (
                (t.subtopology.to_string(), t.partition as i32),
                checkpoint.offset_sum(),
            )
        })
        .collect();
    assert!(from_disk.values().all(|&sum| sum > 0), "{from_disk:?}");

    let described = wait_for(
        "A's task offsets at the broker (sent within the 2 s task-offset interval)",
        Duration::from_secs(30),
        || {
            let g = backend.describe_streams_group("count-c").ok()?;
            let m = g.members.iter().find(|m| m.process_id == process_a)?;
            (by_task(&m.task_offsets) == from_disk).then(|| g.clone())
        },
    );
    let member_a = described
        .members
        .iter()
        .find(|m| m.process_id == process_a)
        .unwrap();
    println!(
        "A's TaskOffsets {:?}, TaskEndOffsets {:?}",
        by_task(&member_a.task_offsets),
        by_task(&member_a.task_end_offsets)
    );
    assert_eq!(
        by_task(&member_a.task_end_offsets),
        from_disk,
        "A was caught up when it gave the tasks away: end offsets equal the checkpoints"
    );
    let member_b = described
        .members
        .iter()
        .find(|m| m.process_id != process_a)
        .unwrap();
    assert!(
        member_b.task_offsets.is_empty(),
        "B's tasks are all running, so its snapshot is empty: {:?}",
        member_b.task_offsets
    );
    println!(
        "{}",
        broker
            .describe_streams_group("count-c", &["--members", "--verbose"])
            .unwrap()
    );
    a.close().unwrap();
    b.close().unwrap();
}
