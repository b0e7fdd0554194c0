//! Appends from many threads: per-partition offsets stay dense and unique, and an idle consumer
//! wakes on `wait_for_append` instead of polling partitions.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{read_all, simple};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

#[test]
fn log_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Log>();
    fn assert_send<T: Send>() {}
    assert_send::<BatchBuilder>();
    assert_send::<riffle_log::FetchedBatch>();
    assert_send::<riffle_log::Record>();
}

#[test]
fn threads_appending_to_shared_and_separate_partitions_get_dense_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default().with_segment_bytes(4096)).expect("open");
    log.create_topic("t", 3).expect("create");
    // Two threads share partition 0; partitions 1 and 2 have one each.
    let handles: Vec<_> = [0u32, 0, 1, 2]
        .into_iter()
        .enumerate()
        .map(|(writer, partition)| {
            let log = log.clone();
            thread::spawn(move || {
                let tp = TopicPartition::new("t", partition);
                let codec = [Compression::None, Compression::Lz4][writer % 2];
                let mut b = BatchBuilder::new(codec);
                let mut bases = Vec::new();
                for i in 0..100 {
                    for (ts, k, v) in simple(3, i) {
                        b.push(ts, k.as_deref(), v.as_deref());
                    }
                    bases.push(log.append(&tp, &mut b).expect("append"));
                }
                (partition, bases)
            })
        })
        .collect();
    let mut bases_0 = Vec::new();
    for h in handles {
        let (partition, bases) = h.join().expect("writer");
        if partition == 0 {
            bases_0.extend(bases);
        }
    }
    bases_0.sort_unstable();
    assert_eq!(bases_0, (0..200).map(|i| i * 3).collect::<Vec<u64>>());
    for (p, end) in [(0, 600), (1, 300), (2, 300)] {
        let tp = TopicPartition::new("t", p);
        assert_eq!(log.end_offset(&tp).expect("end"), end);
        assert_eq!(read_all(&log, &tp, 0, 1000).len() as u64, end);
    }
}

#[test]
fn an_idle_consumer_waits_for_appends() {
    let log = Log::in_memory();
    log.create_topic("t", 1).expect("create");
    let tp = TopicPartition::new("t", 0);
    let seen = log.append_version();
    // Nothing appended: the wait times out and reports the same version.
    let start = Instant::now();
    assert_eq!(log.wait_for_append(seen, Duration::from_millis(30)), seen);
    assert!(start.elapsed() >= Duration::from_millis(25));
    assert_eq!(log.wait_for_append(seen, Duration::ZERO), seen);

    let done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (log, tp, done) = (log.clone(), tp.clone(), Arc::clone(&done));
        thread::spawn(move || {
            let (mut version, mut next, mut wakeups) = (seen, 0u64, 0);
            while next < 50 {
                let now = log.wait_for_append(version, Duration::from_secs(10));
                assert_ne!(now, version, "woken without an append");
                version = now;
                wakeups += 1;
                next += read_all(&log, &tp, next, 1 << 20).len() as u64;
            }
            done.store(true, Ordering::SeqCst);
            (next, wakeups)
        })
    };
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..10 {
        for (ts, k, v) in simple(5, i) {
            b.push(ts, k.as_deref(), v.as_deref());
        }
        log.append(&tp, &mut b).expect("append");
        thread::sleep(Duration::from_millis(2));
    }
    let (read, wakeups) = consumer.join().expect("consumer");
    assert!(done.load(Ordering::SeqCst));
    assert_eq!(read, 50);
    assert!((1..=10).contains(&wakeups), "{wakeups} wakeups");
    assert_eq!(log.append_version(), seen + 10);
}
