//! Scenario (e): with one standby replica (a broker setting in KIP-1071) and two instances,
//! each instance keeps the other's tasks up to date as standbys; after one is killed, the
//! survivor resumes them from its standby stores, restoring only the changelog's tail. The
//! same failover without standbys restores the tasks' whole changelogs. Prints the time from
//! the kill to the survivor's first processed record of the dead instance's tasks, both ways
//! (`docs/BENCHMARKS.md`).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{
    Instance, config, count_topology, fast_broker, latest_counts, produce_words, task_count,
    wait_for,
};
use riffle::backend::Backend;
use riffle::batch::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{StreamsApp, dsl::StoreType};
use riffle_kafka::{KafkaBackend, KafkaConfig};

#[test]
fn instance() {
    common::child_instance();
}

struct Failover {
    kill_to_reassigned: Duration,
    kill_to_first_record: Duration,
    /// Changelog records of the dead instance's tasks the survivor did not have at the kill:
    /// what it had to restore.
    tail_to_restore: i64,
    standby_tasks_before_kill: usize,
}

/// Appends `records` records to the partitions in `partitions` only (keys that hash there).
fn produce_to(
    backend: &KafkaBackend,
    partitions: &[u32],
    records: u64,
    keys: u64,
    expected: &mut HashMap<String, i64>,
) {
    let mut builders: Vec<BatchBuilder> = (0..4)
        .map(|_| BatchBuilder::new(Compression::None))
        .collect();
    let mut n = 0;
    let mut i = 0u64;
    while n < records {
        let key = format!("key-{}", (i * 7919) % keys);
        i += 1;
        let p = partition_for_key(key.as_bytes(), 4);
        if !partitions.contains(&p) {
            continue;
        }
        let b = &mut builders[p as usize];
        b.push(0, Some(key.as_bytes()), Some(b"1"));
        if b.size_bytes() >= 256 << 10 {
            backend.append(&TopicPartition::new("words", p), b).unwrap();
        }
        *expected.entry(key).or_default() += 1;
        n += 1;
    }
    for (p, b) in builders.iter_mut().enumerate() {
        if !b.is_empty() {
            backend
                .append(&TopicPartition::new("words", p as u32), b)
                .unwrap();
        }
    }
}

fn failover(standby_replicas: u32) -> Failover {
    let broker = fast_broker(standby_replicas);
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    // Many keys: state worth restoring.
    let keys = 150_000;
    let mut expected = produce_words(&backend, "words", 4, 300_000, keys, 0);
    let dirs = tempfile::tempdir().unwrap();
    let group = "count-e";
    let a = Instance::spawn(
        "instance",
        broker.bootstrap(),
        group,
        &dirs.path().join("a"),
        1,
        StoreType::InMemory,
    );
    let backend_b = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    let mut b = StreamsApp::new(
        count_topology("words", "counts", StoreType::InMemory),
        config(group, &dirs.path().join("b"), 1),
        backend_b.shared(),
    )
    .unwrap();
    b.start().unwrap();
    let process_b = b.group_info().process_id.clone();
    let described = wait_for(
        "two members, two active tasks each",
        Duration::from_secs(90),
        || {
            let g = backend.describe_streams_group(group).ok()?;
            let settled = g.state == "Stable"
                && g.members.len() == 2
                && g.members.iter().all(|m| {
                    m.assignment == m.target_assignment
                        && task_count(&m.assignment.active) == 2
                        && task_count(&m.assignment.standby) == 2 * standby_replicas as usize
                });
            settled.then_some(g)
        },
    );
    let member_a = described
        .members
        .iter()
        .find(|m| m.process_id != process_b)
        .unwrap();
    let member_b = described
        .members
        .iter()
        .find(|m| m.process_id == process_b)
        .unwrap();
    if standby_replicas > 0 {
        assert_eq!(
            member_b.assignment.standby, member_a.assignment.active,
            "B keeps A's tasks as standbys"
        );
        assert_eq!(member_a.assignment.standby, member_b.assignment.active);
    }
    let partitions_a: Vec<u32> = member_a.assignment.active[0]
        .partitions
        .iter()
        .map(|&p| p as u32)
        .collect();
    // A counts more of its own records; B's standbys follow A's changelog writes.
    produce_to(&backend, &partitions_a, 20_000, keys, &mut expected);
    wait_for("the input counted", Duration::from_secs(120), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    // What B has of A's tasks, as its heartbeats report it: standbys report their live
    // changelog offsets (docs/design.md §4 rule 2), next to the changelogs' end offsets.
    let a_tasks: Vec<(String, i32)> = partitions_a
        .iter()
        .map(|&p| ("0".into(), p as i32))
        .collect();
    let tail_to_restore = wait_for("B's report on A's tasks", Duration::from_secs(30), || {
        let g = backend.describe_streams_group(group).ok()?;
        let m = g.members.iter().find(|m| m.process_id == process_b)?;
        let offset = |list: &[riffle_kafka::TaskOffset], t: &(String, i32)| {
            list.iter()
                .find(|o| o.subtopology == t.0 && o.partition == t.1)
                .map(|o| o.offset)
        };
        let ends: Vec<i64> = backend
            .end_offsets("count-e-counts-changelog")
            .ok()?
            .iter()
            .map(|&e| e as i64)
            .collect();
        let mut tail = 0;
        for t in &a_tasks {
            let end = ends[t.1 as usize];
            match offset(&m.task_offsets, t) {
                // A standby still catching up: wait for the next report.
                Some(have) if have < end => return None,
                Some(have) => tail += end - have,
                None if standby_replicas > 0 => return None,
                None => tail += end,
            }
        }
        Some(tail)
    });
    let epoch_before = backend_b.members(group)[0].1.epoch;
    let processed_before = b.records_processed();
    let killed = Instant::now();
    a.kill();
    produce_to(&backend, &partitions_a, 1_000, keys, &mut expected);
    let mut kill_to_reassigned = None;
    let kill_to_first_record = loop {
        if kill_to_reassigned.is_none() && backend_b.members(group)[0].1.epoch != epoch_before {
            kill_to_reassigned = Some(killed.elapsed());
        }
        if b.records_processed() > processed_before {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "B never took over"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    wait_for("complete counts", Duration::from_secs(120), || {
        (latest_counts(&backend, "counts") == expected).then_some(())
    });
    b.close().unwrap();
    Failover {
        kill_to_reassigned: kill_to_reassigned.unwrap_or(kill_to_first_record),
        kill_to_first_record,
        tail_to_restore,
        standby_tasks_before_kill: task_count(&member_b.assignment.standby),
    }
}

#[test]
fn standbys_keep_the_other_instances_tasks_and_take_over_with_only_the_tail() {
    if std::env::var_os(common::CHILD_ENV).is_some() {
        return;
    }
    common::init_tracing();
    let with = failover(1);
    if std::env::var_os("ONLY_STANDBY").is_some() {
        return;
    }
    let without = failover(0);
    for (name, f) in [("1 standby replica", &with), ("no standby", &without)] {
        println!(
            "{name}: kill → reassigned {:.2} s, kill → first record of the dead instance's tasks {:.2} s, changelog records to restore {} (standby tasks on the survivor before: {})",
            f.kill_to_reassigned.as_secs_f64(),
            f.kill_to_first_record.as_secs_f64(),
            f.tail_to_restore,
            f.standby_tasks_before_kill
        );
    }
    assert_eq!(with.standby_tasks_before_kill, 2);
    assert_eq!(
        with.tail_to_restore, 0,
        "the standbys were caught up: nothing but the tail (here empty) to restore"
    );
    assert!(
        without.tail_to_restore > 10_000,
        "without standbys the whole changelog of the dead instance's tasks is restored"
    );
}
