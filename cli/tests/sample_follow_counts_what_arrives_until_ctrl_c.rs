//! `riffle sample group-by-key-count --follow` keeps counting after its input is drained:
//! records another process appends in rounds are counted as they arrive, a progress line comes
//! every `--progress-every`, and Ctrl-C (SIGINT) ends it cleanly (exit status 0), with the counts
//! equal to a model of everything appended. SIGTERM ends it the same way. With
//! `--metrics-addr`, Prometheus' text at `/metrics` counts what it processed; with `--serve`,
//! `GET /counts/<key>` answers each key's count from the running application's store
//! (the key percent-decoded); one server answers both paths at both addresses; and 200 idle
//! clients with half-sent requests delay neither a query nor a scrape by more than 100 ms, nor
//! cost the sample a thread each.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::SeedableRng;

mod common;

use common::{Counts, Fixture, merge};

/// Waits for a progress line saying `processed` records and caught up.
fn wait_for_line(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, processed: usize) {
    let want = format!(": {processed} records processed,");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if seen
            .iter()
            .any(|l| l.contains(&want) && l.ends_with("caught up"))
        {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line saying {processed} records and caught up: {seen:?}"),
        }
    }
}

/// `GET path` from `addr` (`host:port`): the whole response.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    response
}

fn scrape(addr: &str) -> String {
    http_get(addr, "/metrics")
}

/// The median time of five `GET path`s from `addr`, each on a new connection, and the last
/// response.
fn timed_get(addr: &str, path: &str) -> (Duration, String) {
    let mut response = String::new();
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            response = http_get(addr, path);
            started.elapsed()
        })
        .collect();
    times.sort();
    (times[2], response)
}

/// Threads of process `pid` now.
fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/<pid>/task")
        .count()
}

/// The sum of every sample of `family`.
fn sum(body: &str, family: &str) -> f64 {
    body.lines()
        .filter(|l| l.split('{').next() == Some(family))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn follow_and_stop(signal: &str) {
    let fixture = Fixture::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed("follow"));
    let mut model = fixture.append_input(&mut rng, 500, 40);
    let mut sample = fixture
        .sample(
            "persistent",
            "at_least_once",
            &[
                "--follow".into(),
                "--progress-every".into(),
                "100ms".into(),
                "--metrics-addr".into(),
                "127.0.0.1:0".into(),
                "--serve".into(),
                "127.0.0.1:0".into(),
            ],
        )
        .spawn()
        .expect("spawn the sample");
    let stdout = sample.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    wait_for_line(&rx, &mut seen, 500);
    let addr = seen
        .iter()
        .find_map(|l| {
            l.strip_prefix("metrics at http://")?
                .strip_suffix("/metrics")
        })
        .unwrap_or_else(|| panic!("no metrics address: {seen:?}"))
        .to_owned();
    let body = scrape(&addr);
    assert_eq!(
        sum(&body, "kafka_streams_stream_thread_metrics_process_total"),
        500.0,
        "{body}"
    );
    let mut total = 500;
    for round in 0..3 {
        let more: Counts = fixture.append_input(&mut rng, 200 + 100 * round, 40);
        merge(&mut model, &more);
        total += 200 + 100 * round;
        wait_for_line(&rx, &mut seen, total);
    }
    let body = scrape(&addr);
    assert_eq!(
        sum(&body, "kafka_streams_stream_task_metrics_process_total"),
        total as f64,
        "{body}"
    );
    let serve = seen
        .iter()
        .find_map(|l| {
            l.strip_prefix("serving counts at http://")?
                .strip_suffix("/counts/<key>")
        })
        .unwrap_or_else(|| panic!("no --serve address: {seen:?}"))
        .to_owned();
    for (key, count) in &model {
        let response = http_get(&serve, &format!("/counts/{key}"));
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(
            response.ends_with(&format!("\r\n\r\n{count}\n")),
            "{key}: {response}"
        );
    }
    let absent = http_get(&serve, "/counts/nobody");
    assert!(absent.starts_with("HTTP/1.1 404"), "{absent}");
    // A key is percent-decoded: every byte of it encoded reads the same count.
    let (key, count) = model.iter().next().expect("a key");
    let encoded: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
    let response = http_get(&serve, &format!("/counts/{encoded}"));
    assert!(
        response.ends_with(&format!("\r\n\r\n{count}\n")),
        "{key} as {encoded}: {response}"
    );
    // One server: each address answers both paths.
    let response = http_get(&addr, &format!("/counts/{key}"));
    assert!(
        response.ends_with(&format!("\r\n\r\n{count}\n")),
        "/counts at the metrics address: {response}"
    );
    assert!(
        scrape(&serve).contains("kafka_streams_stream_thread_metrics_process_total"),
        "/metrics at the --serve address"
    );
    let (query_alone, _) = timed_get(&serve, &format!("/counts/{key}"));
    let (scrape_alone, _) = timed_get(&addr, "/metrics");
    let threads_alone = threads_of(sample.id());
    // 200 clients that connect and send half a request do not hold up the others.
    let idle: Vec<std::net::TcpStream> = (0..200)
        .map(|i| {
            use std::io::Write;
            let addr = if i % 2 == 0 { &serve } else { &addr };
            let mut s = std::net::TcpStream::connect(addr).expect("connect");
            s.write_all(b"GET /counts/").expect("half a request");
            s
        })
        .collect();
    let (query, response) = timed_get(&serve, &format!("/counts/{key}"));
    assert!(
        response.ends_with(&format!("\r\n\r\n{count}\n")),
        "{response}"
    );
    let (metrics, body) = timed_get(&addr, "/metrics");
    assert!(body.contains("kafka_streams_stream_thread_metrics_process_total"));
    let threads_idle = threads_of(sample.id());
    println!(
        "a count query took {query_alone:?} alone, {query:?} with 200 idle clients; a scrape \
         {scrape_alone:?}, {metrics:?}; the sample's threads: {threads_alone}, {threads_idle}"
    );
    let bound = Duration::from_millis(100);
    assert!(
        query < query_alone + bound && metrics < scrape_alone + bound,
        "held up by idle clients: query {query_alone:?} → {query:?}, scrape {scrape_alone:?} → \
         {metrics:?}"
    );
    assert!(
        threads_idle < threads_alone + 10,
        "idle clients cost threads: {threads_alone} → {threads_idle}"
    );
    drop(idle);
    let pid = sample.id().to_string();
    let killed = Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = sample.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "the sample did not end cleanly on {signal}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The reader thread ends with the sample's standard output.
    seen.extend(rx.iter());
    assert!(
        seen.iter()
            .any(|l| l.starts_with(&format!("processed {total} records in"))),
        "{seen:?}"
    );
    assert_eq!(
        fixture.output_counts(),
        model,
        "the counts of everything appended"
    );
}

#[test]
fn follow_counts_records_as_they_arrive_until_ctrl_c() {
    follow_and_stop("-INT");
}

#[test]
fn follow_ends_cleanly_on_sigterm() {
    follow_and_stop("-TERM");
}
