//! `kill -9` the click-through sample (a stream–stream windowed join) under exactly-once at
//! random points while its two inputs grow between runs, and restart it until a run drains them.
//! Each side's window store and the join's output are written in the transaction that commits
//! the input offsets, so the output must hold every pair of an impression and a click of one ad
//! within the window exactly once — none lost, none repeated — with the in-memory stores
//! (restored from their changelogs on every start) and the persistent ones. The grace period
//! (a day) covers the input, so which pairs join does not depend on the order a task reads its
//! two partitions in, nor on the join's stream time starting again after each restart.
//!
//! `RIFFLE_CRASH_KILLS` sets the kill points per store (default 12); `RIFFLE_CRASH_SEED` replays
//! a failing seed (each scenario prints its seed).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{APP, Fixture, INPUT, OUTPUT, PARTITIONS, kill_and_restart_with, kills, rng, seed};
use rand::Rng;
use rand::rngs::StdRng;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};

/// CI's kill points per store.
const CI_KILLS: usize = 12;
/// The clicks topic (the impressions are the fixture's input topic).
const CLICKS: &str = "clicks";
/// The join's time difference, in ms.
const WINDOW_MS: i64 = 200;

/// Both inputs as written: (ad, id, timestamp) per side.
#[derive(Default)]
struct Input {
    next: i64,
    impressions: Vec<(String, String, i64)>,
    clicks: Vec<(String, String, i64)>,
}

impl Input {
    /// Appends a chunk of impressions and clicks, alternately one per ms; returns the number of
    /// impressions (the fixture's input topic).
    fn append(&mut self, fixture: &Fixture, rng: &mut StdRng) -> usize {
        let n = rng.random_range(2_000..6_000);
        let log = Log::open(&fixture.log_dir, LogOptions::default()).expect("open the log");
        let mut builders: Vec<Vec<BatchBuilder>> = (0..2)
            .map(|_| {
                (0..PARTITIONS)
                    .map(|_| BatchBuilder::new(Compression::None))
                    .collect()
            })
            .collect();
        for topic in [INPUT, CLICKS] {
            log.create_topic(topic, PARTITIONS).expect("create topic");
        }
        for i in 0..2 * n {
            let side = i % 2;
            let ad = format!("ad-{}", rng.random_range(0..200));
            let ts = self.next + i as i64;
            let records = if side == 0 {
                &mut self.impressions
            } else {
                &mut self.clicks
            };
            let id = format!("{}{}", if side == 0 { "i" } else { "c" }, records.len());
            let p = partition_for_key(ad.as_bytes(), PARTITIONS) as usize;
            builders[side][p].push(ts, Some(ad.as_bytes()), Some(id.as_bytes()));
            records.push((ad, id, ts));
        }
        self.next += 2 * n as i64;
        for (side, topic) in [INPUT, CLICKS].into_iter().enumerate() {
            for (p, b) in builders[side].iter_mut().enumerate() {
                if !b.is_empty() {
                    log.append(&TopicPartition::new(topic, p as u32), b)
                        .expect("append");
                }
            }
        }
        log.sync().expect("sync");
        n
    }

    /// Every pair within the window: ad → `<impression>+<click>`, sorted.
    fn pairs(&self) -> BTreeMap<String, Vec<String>> {
        let mut clicks: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
        for (ad, id, ts) in &self.clicks {
            clicks.entry(ad).or_default().push((id, *ts));
        }
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (ad, id, ts) in &self.impressions {
            for (click, ct) in clicks.get(ad.as_str()).into_iter().flatten() {
                if (ts - ct).abs() <= WINDOW_MS {
                    out.entry(ad.clone())
                        .or_default()
                        .push(format!("{id}+{click}"));
                }
            }
        }
        for values in out.values_mut() {
            values.sort();
        }
        out
    }
}

/// The output topic: ad → its values, sorted (the embedded log's transactions are all or
/// nothing, so what it holds is committed).
fn output(fixture: &Fixture) -> BTreeMap<String, Vec<String>> {
    let log = Log::open(&fixture.log_dir, LogOptions::default()).expect("open the log");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in 0..log.partitions(OUTPUT).unwrap_or(0) {
        let tp = TopicPartition::new(OUTPUT, p);
        for batch in log.fetch(&tp, 0, usize::MAX).expect("fetch") {
            for record in batch.records() {
                let record = record.expect("record");
                let key = String::from_utf8(record.key().expect("key").to_vec()).expect("utf8");
                let value =
                    String::from_utf8(record.value().expect("value").to_vec()).expect("utf8");
                out.entry(key).or_default().push(value);
            }
        }
    }
    for values in out.values_mut() {
        values.sort();
    }
    out
}

fn sample(fixture: &Fixture, store: &str, extra: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_riffle"));
    cmd.args(["sample", "click-through", "--log-dir"])
        .arg(&fixture.log_dir)
        .args([
            "--impressions",
            INPUT,
            "--clicks",
            CLICKS,
            "--output",
            OUTPUT,
        ])
        .args(["--window", &format!("{WINDOW_MS}ms"), "--state-dir"])
        .arg(&fixture.state_dir)
        .args(["--application-id", APP, "--store", store])
        .args(["--processing-guarantee", "exactly_once"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn every_pair_once_after_kill_9(store: &str) {
    let scenario = format!("kill -9 click-through exactly_once --store {store}");
    let seed = seed(&scenario);
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    let start = Instant::now();
    let mut input = Input::default();
    let report = kill_and_restart_with(
        &fixture,
        kills(CI_KILLS),
        &mut rng,
        seed,
        &mut |rng| input.append(&fixture, rng),
        &|extra| sample(&fixture, store, extra),
    );
    let want = input.pairs();
    let got = output(&fixture);
    let ads: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let problems: Vec<String> = ads
        .into_iter()
        .filter(|ad| want.get(*ad) != got.get(*ad))
        .map(|ad| {
            let (w, g) = (
                want.get(ad).map_or(0, Vec::len),
                got.get(ad).map_or(0, Vec::len),
            );
            format!("{ad}: {w} pairs in the windows, {g} written")
        })
        .collect();
    let pairs: usize = want.values().map(Vec::len).sum();
    assert!(
        problems.is_empty(),
        "{scenario}, seed {seed}: {} ads differ ({report:?}): {:?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    assert!(pairs > 1_000, "only {pairs} pairs");
    println!(
        "{scenario}: {report:?}; {pairs} pairs, each written once; {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn kill_9_under_exactly_once_joins_every_pair_once_with_in_memory_stores() {
    every_pair_once_after_kill_9("memory");
}

#[test]
fn kill_9_under_exactly_once_joins_every_pair_once_with_persistent_stores() {
    every_pair_once_after_kill_9("persistent");
}
