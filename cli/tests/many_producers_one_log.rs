//! Many processes on one log directory. Several `riffle produce`
//! processes append to one topic at once (racing to create it), some SIGKILLed at random
//! points, while `riffle consume --follow` and the groupByKey-count sample read it; every record
//! lands once, with dense offsets and no torn batch, and the counts are exact against an
//! independent count of what the producers wrote.
//!
//! `RIFFLE_CRASH_SEED` replays a failing seed (each scenario prints its seed).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Counts, Fixture, INPUT, PARTITIONS, assert_exact, rng, run_to_end, seed};
use rand::Rng;
use riffle_log::{Log, LogOptions, TopicPartition};

const TOPIC: &str = "shared";

/// `riffle produce` of `lines` into `topic` (created with [`PARTITIONS`] partitions if missing).
fn produce(log_dir: &Path, topic: &str, file: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_riffle"));
    cmd.args(["produce", "--log-dir"])
        .arg(log_dir)
        .args(["--topic", topic, "--partitions", &PARTITIONS.to_string()])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Writes `n` lines `p<producer>-<i><TAB><i>` to a file in `dir`; returns its path and lines.
fn input_file(dir: &Path, producer: usize, n: usize) -> (std::path::PathBuf, Vec<String>) {
    let path = dir.join(format!("producer-{producer}.txt"));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create input"));
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        writeln!(f, "p{producer}-{i}\t{i}").expect("write input");
        keys.push(format!("p{producer}-{i}"));
    }
    f.flush().expect("flush input");
    (path, keys)
}

/// Every record of `topic`, read through the log: checks that each partition's offsets are
/// dense from 0, and returns the keys with how often each occurs.
fn read_topic(log_dir: &Path, topic: &str) -> BTreeMap<String, usize> {
    let log = Log::open_read_only(log_dir, LogOptions::default()).expect("open read-only");
    let partitions = log.partitions(topic).expect("the topic exists");
    let mut keys = BTreeMap::new();
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let end = log.end_offset(&tp).expect("end offset");
        let mut next = 0;
        while next < end {
            let batches = log.fetch(&tp, next, 1 << 20).expect("fetch");
            assert!(
                !batches.is_empty(),
                "{tp}: nothing at {next} below end {end}"
            );
            for batch in batches {
                assert_eq!(batch.base_offset(), next, "{tp}: a gap or overlap");
                for record in batch.records() {
                    let record = record.expect("record");
                    assert_eq!(record.offset(), next, "{tp}: offsets not dense");
                    next += 1;
                    let key =
                        String::from_utf8(record.key().expect("key").to_vec()).expect("utf-8");
                    *keys.entry(key).or_insert(0) += 1;
                }
            }
        }
    }
    keys
}

#[test]
fn concurrent_producers_land_every_record_once_while_consume_follow_sees_them_all() {
    let fixture = Fixture::new();
    std::fs::create_dir_all(&fixture.log_dir).expect("log dir");
    let producers = 4;
    let per_producer = 40_000;
    let inputs: Vec<_> = (0..producers)
        .map(|i| input_file(fixture.state_dir.parent().expect("root"), i, per_producer))
        .collect();
    // The topic exists before `consume --follow` starts; the producers race on creating it
    // anyway (a second one finds it).
    run_to_end(
        "produce (create)",
        produce(
            &fixture.log_dir,
            TOPIC,
            &input_file(fixture.state_dir.parent().expect("root"), 99, 0).0,
        ),
    );
    let mut follow = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["consume", "--log-dir"])
        .arg(&fixture.log_dir)
        .args(["--topic", TOPIC, "--from-beginning", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn consume --follow");
    let stdout = follow.stdout.take().expect("stdout");
    let total = producers * per_producer;
    let reader = std::thread::spawn(move || {
        let mut seen = BTreeMap::<String, usize>::new();
        let mut n = 0;
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("a line");
            let (key, _) = line.split_once('\t').expect("key<TAB>value");
            *seen.entry(key.to_owned()).or_insert(0) += 1;
            n += 1;
            if n == total {
                break;
            }
        }
        seen
    });
    let started = Instant::now();
    let children: Vec<Child> = inputs
        .iter()
        .map(|(path, _)| {
            produce(&fixture.log_dir, TOPIC, path)
                .spawn()
                .expect("spawn produce")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait for produce");
        common::assert_clean_exit("produce", &out);
    }
    let produced = started.elapsed();
    let stored = read_topic(&fixture.log_dir, TOPIC);
    let mut expected = BTreeMap::new();
    for (_, keys) in &inputs {
        for k in keys {
            expected.insert(k.clone(), 1);
        }
    }
    assert_eq!(stored.len(), expected.len(), "records lost or invented");
    assert_eq!(stored, expected, "every record exactly once");
    // `consume --follow` printed every record, as the producers appended them.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = reader.is_finished();
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        finished,
        "consume --follow did not print all {total} records within 60 s"
    );
    let followed = reader.join().expect("reader");
    assert_eq!(followed, expected, "consume --follow saw each record once");
    println!(
        "{producers} producers × {per_producer} records in {:.2} s; consume --follow saw all",
        produced.as_secs_f64()
    );
}

#[test]
fn producers_killed_with_sigkill_tear_no_batch_and_block_no_one() {
    let scenario = "kill -9 producers";
    let seed = seed(scenario);
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    std::fs::create_dir_all(&fixture.log_dir).expect("log dir");
    let root = fixture.state_dir.parent().expect("root").to_path_buf();
    let mut expected_once: Vec<String> = Vec::new();
    let mut maybe: Vec<String> = Vec::new();
    let mut kills = 0;
    for round in 0..4 {
        let inputs: Vec<_> = (0..3)
            .map(|i| input_file(&root, round * 10 + i, 150_000))
            .collect();
        let mut children: Vec<(Child, bool)> = inputs
            .iter()
            .enumerate()
            .map(|(i, (path, _))| {
                let child = produce(&fixture.log_dir, TOPIC, path)
                    .spawn()
                    .expect("spawn");
                (child, i < 2) // the first two are killed
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(5..400)));
        for (child, kill) in &mut children {
            if *kill {
                std::thread::sleep(Duration::from_millis(rng.random_range(0..50)));
                let _ = child.kill();
            }
        }
        for ((child, kill), (_, keys)) in children.into_iter().zip(&inputs) {
            let out = child.wait_with_output().expect("wait");
            if out.status.signal() == Some(9) {
                kills += 1;
                maybe.extend(keys.iter().cloned());
            } else {
                // Not killed, or it finished before the kill landed.
                let _ = kill;
                common::assert_clean_exit("produce", &out);
                expected_once.extend(keys.iter().cloned());
            }
        }
    }
    // One more producer after all the kills: it appends where the killed ones stopped.
    let (after, keys) = input_file(&root, 999, 1_000);
    run_to_end(
        "produce after the kills",
        produce(&fixture.log_dir, TOPIC, &after),
    );
    expected_once.extend(keys);
    let stored = read_topic(&fixture.log_dir, TOPIC);
    for key in &expected_once {
        assert_eq!(
            stored.get(key),
            Some(&1),
            "seed {seed}: {key} of a producer that finished"
        );
    }
    let maybe: std::collections::BTreeSet<&String> = maybe.iter().collect();
    let once: std::collections::BTreeSet<&String> = expected_once.iter().collect();
    for (key, n) in &stored {
        assert_eq!(*n, 1, "seed {seed}: {key} stored {n} times");
        assert!(
            maybe.contains(key) || once.contains(key),
            "seed {seed}: {key} was never produced"
        );
    }
    let produced: usize = stored.len();
    assert!(produced >= expected_once.len());
    assert!(
        produced <= expected_once.len() + maybe.len(),
        "seed {seed}: records invented"
    );
    println!(
        "{scenario}: seed {seed}; {kills} producers killed; {produced} records stored, dense, none twice"
    );
}

/// `riffle produce` in a loop beside the running sample: under exactly_once the counts equal an
/// independent count of what was produced. The sample exits when it is idle, so it is started
/// again until, once the producers are done, a run drains the input.
fn produce_loop_beside_the_sample(guarantee: &str) {
    let fixture = Fixture::new();
    let root = fixture.state_dir.parent().expect("root").to_path_buf();
    let mut model = fixture.append_keys(&["key-0".to_owned()]);
    let rounds = 12;
    let producer = {
        let log_dir = fixture.log_dir.clone();
        std::thread::spawn(move || {
            let mut model = Counts::new();
            for round in 0..rounds {
                let path = root.join(format!("loop-{round}.txt"));
                let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
                for i in 0..5_000 {
                    let key = format!("key-{}", (i * 7 + round) % 500);
                    writeln!(f, "{key}\t1").expect("write");
                    *model.entry(key).or_default() += 1;
                }
                f.flush().expect("flush");
                drop(f);
                run_to_end("produce", produce(&log_dir, INPUT, &path));
                std::thread::sleep(Duration::from_millis(30));
            }
            model
        })
    };
    let mut runs = 0;
    loop {
        let done = producer.is_finished();
        run_to_end(
            "sample",
            fixture.sample(
                "persistent",
                guarantee,
                &["--commit-interval-ms".to_owned(), "100".to_owned()],
            ),
        );
        runs += 1;
        if done {
            break;
        }
    }
    let produced = producer.join().expect("producer");
    common::merge(&mut model, &produced);
    let got = fixture.output_counts();
    assert_exact(
        &model,
        &got,
        &format!("{guarantee}: a produce loop beside the sample ({runs} sample runs)"),
    );
    println!("{guarantee}: {runs} sample runs beside {rounds} produce runs; counts exact");
}

#[test]
fn a_produce_loop_beside_the_sample_counts_exactly_under_exactly_once() {
    produce_loop_beside_the_sample("exactly_once");
}

#[test]
fn a_produce_loop_beside_the_sample_counts_exactly_under_at_least_once() {
    produce_loop_beside_the_sample("at_least_once");
}
