//! A consumer waiting in `wait_for_append` on one handle of a log directory wakes when another
//! handle — as another process would, with its own memory — appends, without a timer.

use std::time::{Duration, Instant};

use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

#[test]
fn a_waiter_wakes_within_milliseconds_of_another_handles_append_and_not_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = Log::open(dir.path(), LogOptions::default()).expect("open writer");
    writer.create_topic("t", 2).expect("create");
    let reader = Log::open(dir.path(), LogOptions::default()).expect("open reader");
    let tp = TopicPartition::new("t", 1);

    // Nothing appended: the wait runs to its timeout.
    let seen = reader.append_version();
    let started = Instant::now();
    assert_eq!(
        reader.wait_for_append(seen, Duration::from_millis(300)),
        seen
    );
    assert!(started.elapsed() >= Duration::from_millis(290));

    let mut latencies = Vec::new();
    for round in 0..20 {
        let seen = reader.append_version();
        let appender = {
            let writer = writer.clone();
            let tp = tp.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let mut batch = BatchBuilder::new(Compression::None);
                batch.push(0, Some(b"k"), Some(b"v"));
                let at = Instant::now();
                writer.append(&tp, &mut batch).expect("append");
                at
            })
        };
        let now = reader.wait_for_append(seen, Duration::from_secs(10));
        let woke = Instant::now();
        let appended = appender.join().expect("appender");
        assert_ne!(now, seen, "round {round}: the version moved");
        latencies.push(woke.saturating_duration_since(appended));
        let mut named = Vec::new();
        reader.appended_since(seen, &mut named);
        assert!(
            named.is_empty() || named.contains(&tp),
            "round {round}: {named:?}"
        );
    }
    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    let max = latencies[latencies.len() - 1];
    println!("another handle's append → waiter awake: p50 {p50:?}, max {max:?}");
    assert!(max < Duration::from_secs(2), "woken late: {latencies:?}");
}

#[test]
fn wake_waiters_ends_a_wait_without_new_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.create_topic("t", 1).expect("create");
    let seen = log.append_version();
    let waker = {
        let log = log.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            log.wake_waiters();
        })
    };
    let started = Instant::now();
    assert_eq!(log.wait_for_append(seen, Duration::from_secs(10)), seen);
    assert!(started.elapsed() < Duration::from_secs(5));
    waker.join().expect("waker");
}

/// A wake-up that lands after a consumer read the wake count (and then looked at its stop
/// flag) but before it began to wait ends that wait at once, on both kinds of log: the
/// stream threads rely on it so that a stop or a group change is never slept through.
#[test]
fn a_wake_up_between_the_look_and_the_wait_is_not_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let on_disk = Log::open(dir.path(), LogOptions::default()).expect("open");
    for log in [Log::in_memory(), on_disk] {
        log.create_topic("t", 1).expect("create");
        let seen = log.append_version();
        let woken = log.wake_count();
        log.wake_waiters();
        let started = Instant::now();
        assert_eq!(
            log.wait_for_append_or_wake(seen, woken, Duration::from_secs(30)),
            seen
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the wake-up before the wait was lost: waited {:?}",
            started.elapsed()
        );
        // With the count read after the wake-up, the wait runs to its timeout.
        let woken = log.wake_count();
        let started = Instant::now();
        assert_eq!(
            log.wait_for_append_or_wake(seen, woken, Duration::from_millis(50)),
            seen
        );
        assert!(started.elapsed() >= Duration::from_millis(45));
    }
}
