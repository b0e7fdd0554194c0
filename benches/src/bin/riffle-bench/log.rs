//! `cargo run --release -p riffle-bench -- log`: the embedded log shared by processes.
//! Append and fetch throughput with 1 and 4 producer (and reader) processes on 1 and 100
//! partitions, and the cross-process wake-up latency: an append in one process until an application
//! waiting in `Log::wait_for_append` in another has the record, p50/p99.
//!
//! The processes are this binary run again with `--child` (hidden): each opens the log, says
//! `ready`, waits for a start file, then works; the parent times from the start file to the last
//! exit, so process start-up is not measured.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use serde::Serialize;

use super::{load_average, write_json_rows};

/// Arguments of `cargo run --release -p riffle-bench -- log`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Records each producer process appends.
    #[arg(long, default_value_t = 400_000)]
    records: u64,
    /// Records per appended batch.
    #[arg(long, default_value_t = 100)]
    batch_records: u64,
    /// Bytes per record value (keys are 16 bytes).
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Wake-ups measured.
    #[arg(long, default_value_t = 300)]
    wakeups: usize,
    /// Write the results as JSON rows to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Internal: run as a child process (`append`, `fetch` or `wake`).
    #[arg(long, hide = true)]
    child: Option<String>,
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    #[arg(long, hide = true, default_value_t = 1)]
    partitions: u32,
    #[arg(long, hide = true, default_value_t = 0)]
    id: u64,
}

const TOPIC: &str = "bench";

#[derive(Serialize)]
struct Row {
    case: String,
    processes: usize,
    partitions: u32,
    records: u64,
    records_per_s: f64,
    mb_per_s: f64,
    seconds: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    max_us: Option<f64>,
    load_average: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if let Some(mode) = args.child.clone() {
        return child(&mode, &args);
    }
    let mut rows = Vec::new();
    for processes in [1usize, 4] {
        for partitions in [1u32, 100] {
            let (append, fetch) = throughput(&args, processes, partitions)?;
            for row in [append, fetch] {
                println!(
                    "{:<7} {} process(es), {:>3} partition(s): {:>12.0} records/s {:>8.1} MB/s ({:.2} s)",
                    row.case,
                    row.processes,
                    row.partitions,
                    row.records_per_s,
                    row.mb_per_s,
                    row.seconds
                );
                rows.push(row);
            }
        }
    }
    let wake = wakeup(&args)?;
    println!(
        "wake-up across processes: p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs over {} appends",
        wake.p50_us.unwrap_or_default(),
        wake.p99_us.unwrap_or_default(),
        wake.max_us.unwrap_or_default(),
        wake.records
    );
    rows.push(wake);
    if let Some(path) = &args.json {
        write_json_rows(path, &rows)?;
    }
    Ok(())
}

/// Spawns `n` children in `mode` on `dir`, waits until each said `ready`, starts them, and
/// returns the time from the start to the last exit.
fn run_children(
    args: &Args,
    mode: &str,
    dir: &Path,
    n: usize,
    partitions: u32,
) -> anyhow::Result<Duration> {
    let exe = std::env::current_exe().context("finding this binary")?;
    let go = dir.join("go");
    let _ = std::fs::remove_file(&go);
    let mut children: Vec<Child> = Vec::new();
    for id in 0..n {
        let child = Command::new(&exe)
            .args(["log", "--child", mode, "--dir"])
            .arg(dir)
            .args(["--partitions", &partitions.to_string()])
            .args(["--id", &id.to_string()])
            .args(["--records", &args.records.to_string()])
            .args(["--batch-records", &args.batch_records.to_string()])
            .args(["--value-bytes", &args.value_bytes.to_string()])
            .args(["--wakeups", &args.wakeups.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning a child")?;
        children.push(child);
    }
    for child in &mut children {
        let stdout = child.stdout.take().context("child stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        anyhow::ensure!(line.trim() == "ready", "a child said {line:?}");
    }
    let start = Instant::now();
    std::fs::write(&go, b"go")?;
    for mut child in children {
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "a {mode} child failed: {status}");
    }
    Ok(start.elapsed())
}

fn throughput(args: &Args, processes: usize, partitions: u32) -> anyhow::Result<(Row, Row)> {
    let temp = tempfile::tempdir()?;
    let dir = temp.path().join("log");
    Log::open(&dir, LogOptions::default())?.create_topic(TOPIC, partitions)?;
    let records = args.records * processes as u64;
    let record_bytes = args.value_bytes as f64 + 16.0;
    let row = |case: &str, records: u64, elapsed: Duration| Row {
        case: case.to_owned(),
        processes,
        partitions,
        records,
        records_per_s: records as f64 / elapsed.as_secs_f64(),
        mb_per_s: records as f64 * record_bytes / elapsed.as_secs_f64() / 1e6,
        seconds: elapsed.as_secs_f64(),
        p50_us: None,
        p99_us: None,
        max_us: None,
        load_average: load_average(),
    };
    let appended = run_children(args, "append", &dir, processes, partitions)?;
    // Every reader reads the whole topic: `processes` times the records.
    let fetched = run_children(args, "fetch", &dir, processes, partitions)?;
    Ok((
        row("append", records, appended),
        row("fetch", records * processes as u64, fetched),
    ))
}

fn wait_for_go(dir: &Path) {
    println!("ready");
    while !dir.join("go").exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn child(mode: &str, args: &Args) -> anyhow::Result<()> {
    let dir = args.dir.clone().context("--dir")?;
    let log = Log::open(&dir, LogOptions::default())?;
    let value = vec![b'v'; args.value_bytes];
    match mode {
        "append" => {
            let tps: Vec<TopicPartition> = (0..args.partitions)
                .map(|p| TopicPartition::new(TOPIC, p))
                .collect();
            let mut b = BatchBuilder::new(Compression::None);
            wait_for_go(&dir);
            let batches = args.records / args.batch_records.max(1);
            for i in 0..batches {
                for r in 0..args.batch_records {
                    let key = format!(
                        "{:08}{:08}",
                        args.id,
                        (i * args.batch_records + r) % 100_000_000
                    );
                    b.push(0, Some(key.as_bytes()), Some(&value));
                }
                let tp = &tps[((i + args.id) % u64::from(args.partitions)) as usize];
                log.append(tp, &mut b)?;
            }
        }
        "fetch" => {
            wait_for_go(&dir);
            let partitions = log.partitions(TOPIC).context("the bench topic")?;
            let mut n = 0u64;
            for p in 0..partitions {
                let tp = TopicPartition::new(TOPIC, p);
                let mut next = 0;
                loop {
                    let batches = log.fetch(&tp, next, 1 << 20)?;
                    if batches.is_empty() {
                        break;
                    }
                    for batch in batches {
                        for record in batch.records() {
                            let record = record?;
                            next = record.offset() + 1;
                            n += 1;
                        }
                    }
                }
            }
            anyhow::ensure!(n > 0, "read nothing");
        }
        "wake" => {
            let tp = TopicPartition::new("wake", 0);
            let mut b = BatchBuilder::new(Compression::None);
            wait_for_go(&dir);
            let mut state = args.id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for _ in 0..args.wakeups {
                // 2–12 ms apart, so the waiter is asleep when the append lands.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                std::thread::sleep(Duration::from_micros(2_000 + state % 10_000));
                b.push(0, None, Some(now_ns().to_string().as_bytes()));
                log.append(&tp, &mut b)?;
            }
        }
        other => anyhow::bail!("unknown child mode {other}"),
    }
    Ok(())
}

fn wakeup(args: &Args) -> anyhow::Result<Row> {
    let temp = tempfile::tempdir()?;
    let dir = temp.path().join("log");
    let log = Log::open(&dir, LogOptions::default())?;
    let tp = TopicPartition::new("wake", 0);
    log.create_topic("wake", 1)?;
    let waiter = {
        let log = log.clone();
        let tp = tp.clone();
        let wakeups = args.wakeups;
        std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
            let mut latencies = Vec::with_capacity(wakeups);
            let mut seen = log.append_version();
            let mut next = 0;
            let deadline = Instant::now() + Duration::from_secs(120);
            while latencies.len() < wakeups && Instant::now() < deadline {
                seen = log.wait_for_append(seen, Duration::from_millis(100));
                for batch in log.fetch(&tp, next, 1 << 20)? {
                    for record in batch.records() {
                        let record = record?;
                        next = record.offset() + 1;
                        let value = record.value().map(|v| v.to_vec()).unwrap_or_default();
                        let sent: u128 = std::str::from_utf8(&value)?.parse()?;
                        latencies.push(now_ns().saturating_sub(sent) as f64 / 1e3);
                    }
                }
            }
            Ok(latencies)
        })
    };
    let elapsed = run_children(args, "wake", &dir, 1, 1)?;
    let mut latencies = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("the waiter panicked"))??;
    anyhow::ensure!(!latencies.is_empty(), "no wake-up measured");
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Ok(Row {
        case: "wakeup".to_owned(),
        processes: 2,
        partitions: 1,
        records: latencies.len() as u64,
        records_per_s: latencies.len() as f64 / elapsed.as_secs_f64(),
        mb_per_s: 0.0,
        seconds: elapsed.as_secs_f64(),
        p50_us: Some(at(0.5)),
        p99_us: Some(at(0.99)),
        max_us: latencies.last().copied(),
        load_average: load_average(),
    })
}
