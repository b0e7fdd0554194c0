//! The same sample command on both backends: `riffle sample group-by-key-count` with
//! `--bootstrap-servers` counts generated records on a real Kafka 4.4 broker (started by the
//! test kit) and checks them against a HashMap count, exactly as on the embedded log; and with
//! `--input`/`--output` it counts an existing Kafka topic, resuming from its committed offsets.
//! `riffle sample windowed-count --bootstrap-servers` passes its window check there too, and
//! Kafka's console consumer with Kafka Streams' `TimeWindowedDeserializer` reads back exactly its
//! windows. `riffle sample enrich` (a stream–table join, then windowed totals through a
//! repartition topic) passes its check on Kafka and prints the same totals' digest as on the
//! embedded log.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use riffle_kafka_testkit::KafkaBroker;

fn riffle(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "riffle {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_enrich_sample_gives_the_same_totals_on_kafka_as_on_the_embedded_log() {
    let broker = KafkaBroker::start().unwrap();
    let flags = [
        "--orders",
        "40000",
        "--customers",
        "2000",
        "--store",
        "memory",
    ];
    let digest = |out: &str| {
        assert!(
            out.contains(
                "totals equal the orders summed per region and window from the generated data: yes"
            ),
            "{out}"
        );
        out.lines()
            .find(|l| l.starts_with("digest of the totals: "))
            .unwrap_or_else(|| panic!("no digest in {out}"))
            .to_owned()
    };
    let mut embedded = vec!["sample", "enrich"];
    embedded.extend(flags);
    let on_log = riffle(&embedded);
    let mut kafka = embedded.clone();
    kafka.extend(["--bootstrap-servers", broker.bootstrap()]);
    let on_kafka = riffle(&kafka);
    println!("{on_log}\n{on_kafka}");
    assert!(
        on_kafka.contains("on 127.0.0.1") || on_kafka.contains("on localhost"),
        "{on_kafka}"
    );
    assert_eq!(digest(&on_log), digest(&on_kafka), "{on_log}\n{on_kafka}");
}

#[test]
fn the_sample_counts_exactly_once_over_sasl_ssl() {
    let broker = KafkaBroker::builder()
        .secure()
        .config("transaction.state.log.num.partitions", "3")
        .start()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = broker.client_cert_files();
    let properties = dir.path().join("client.properties");
    std::fs::write(
        &properties,
        format!(
            "# Kafka client properties, as for Kafka's own tools\n\
             security.protocol=SASL_SSL\n\
             sasl.mechanism=SCRAM-SHA-256\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"{}\";\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location={}\n\
             ssl.certificate.location={}\n\
             ssl.key.location={}\n",
            riffle_kafka_testkit::SASL_USER,
            riffle_kafka_testkit::SASL_PASSWORD,
            broker.ca_file().display(),
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let out = riffle(&[
        "sample",
        "group-by-key-count",
        "--bootstrap-servers",
        broker.sasl_ssl_bootstrap().unwrap(),
        "--command-config",
        properties.to_str().unwrap(),
        "--records",
        "50000",
        "--keys",
        "500",
        "--processing-guarantee",
        "exactly_once",
    ]);
    println!("{out}");
    assert!(
        out.contains("counts equal an independent HashMap count of the input: yes"),
        "{out}"
    );
}

#[test]
fn the_sample_counts_exactly_on_kafka() {
    let broker = KafkaBroker::start().unwrap();
    let generated = riffle(&[
        "sample",
        "group-by-key-count",
        "--bootstrap-servers",
        broker.bootstrap(),
        "--records",
        "50000",
        "--keys",
        "500",
        "--store",
        "memory",
    ]);
    assert!(
        generated.contains("counts equal an independent HashMap count of the input: yes"),
        "{generated}"
    );
    let input = generated
        .split_whitespace()
        .find(|w| w.starts_with("riffle-sample-words-"))
        .unwrap()
        .to_owned();

    // Count the generated topic again under another application id: all of it, then nothing
    // (the second run resumes from the first one's committed offsets).
    let args = |app: &'static str| {
        vec![
            "sample".to_owned(),
            "group-by-key-count".to_owned(),
            "--bootstrap-servers".to_owned(),
            broker.bootstrap().to_owned(),
            "--input".to_owned(),
            input.clone(),
            "--output".to_owned(),
            "recounted".to_owned(),
            "--application-id".to_owned(),
            app.to_owned(),
        ]
    };
    let run = |app| {
        let a = args(app);
        riffle(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let first = run("recount");
    assert!(first.contains("processed 50000 records"), "{first}");
    assert!(first.contains("500 keys"), "{first}");
    let second = run("recount");
    assert!(second.contains("processed 0 records"), "{second}");
}

/// `riffle sample windowed-count --bootstrap-servers`: tumbling windows with final results over
/// generated timestamped input on a real broker pass the same check as on the embedded log;
/// Kafka's own console consumer, decoding the keys with Kafka Streams'
/// `TimeWindowedDeserializer`, prints exactly the windows and counts the sample wrote, each
/// window once.
#[test]
fn the_windowed_sample_counts_on_kafka_and_kafkas_deserializer_reads_its_windows() {
    let broker = KafkaBroker::start().unwrap();
    let generated = riffle(&[
        "sample",
        "windowed-count",
        "--bootstrap-servers",
        broker.bootstrap(),
        "--records",
        "20000",
        "--keys",
        "100",
        "--window",
        "10s",
        "--grace",
        "2s",
        "--emit",
        "final",
        "--store",
        "memory",
        "--top",
        "1000000",
    ]);
    assert!(
        generated.contains(
            "windows equal an independent replay of Kafka's window rules over the input: yes"
        ),
        "{generated}"
    );
    let output = generated
        .split_whitespace()
        .find(|w| w.starts_with("riffle-sample-windowed-counts-"))
        .unwrap()
        .to_owned();
    // Every window the sample printed: `  key@start/end<TAB>count`.
    let mut printed: Vec<String> = generated
        .lines()
        .filter(|l| l.starts_with("  key-"))
        .map(|l| l.trim().to_owned())
        .collect();
    let records: usize = generated
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(" windows in ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap();
    assert_eq!(
        printed.len(),
        records,
        "final results: one record per window"
    );
    assert!(records > 1_000, "{records} windows");

    let window_size = "10000";
    let lines = broker
        .console_consume(
            &output,
            records,
            &[
                ("print.key", "true"),
                (
                    "key.deserializer",
                    "org.apache.kafka.streams.kstream.TimeWindowedDeserializer",
                ),
                ("key.deserializer.window.size.ms", window_size),
                // Despite its name, this takes a Serde class (Kafka 4.4's TimeWindowedDeserializer
                // makes a Serde of it; a Deserializer class is a ClassCastException).
                (
                    "key.deserializer.windowed.inner.deserializer.class",
                    "org.apache.kafka.common.serialization.Serdes$StringSerde",
                ),
                (
                    "value.deserializer",
                    "org.apache.kafka.common.serialization.LongDeserializer",
                ),
            ],
        )
        .unwrap();
    // Kafka prints a Windowed key as `[key@start/end]`.
    let mut consumed: Vec<String> = lines
        .iter()
        .map(|line| {
            let (key, count) = line.split_once('\t').unwrap_or_else(|| panic!("{line:?}"));
            let key = key
                .strip_prefix('[')
                .and_then(|k| k.strip_suffix(']'))
                .unwrap_or_else(|| panic!("not a windowed key: {line:?}"));
            let (_, window) = key.rsplit_once('@').unwrap();
            let (start, end) = window.split_once('/').unwrap();
            let (start, end): (i64, i64) = (start.parse().unwrap(), end.parse().unwrap());
            assert_eq!(end - start, 10_000, "{line:?}");
            assert_eq!(start % 10_000, 0, "{line:?}");
            format!("{key}\t{count}")
        })
        .collect();
    printed.sort();
    consumed.sort();
    assert_eq!(consumed, printed);
}

/// `--follow` on Kafka: the sample counts an existing topic, keeps counting what Kafka's console
/// producer appends afterwards, prints progress lines, and ends cleanly on Ctrl-C with the
/// counts of everything appended.
#[test]
fn the_sample_follows_a_kafka_topic_until_ctrl_c() {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use riffle::backend::Backend;
    use riffle::log::TopicPartition;

    let broker = KafkaBroker::start().unwrap();
    broker.create_topic("follow-in", 2).unwrap();
    let mut model: HashMap<String, i64> = HashMap::new();
    let mut produce = |from: usize, n: usize| {
        let lines: Vec<String> = (from..from + n)
            .map(|i| format!("key-{}\t1", i % 23))
            .collect();
        for line in &lines {
            let key = line.split('\t').next().unwrap().to_owned();
            *model.entry(key).or_default() += 1;
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        broker
            .console_produce("follow-in", &lines, &[("parse.key", "true")])
            .unwrap();
    };
    produce(0, 300);
    let mut sample = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "sample",
            "group-by-key-count",
            "--bootstrap-servers",
            broker.bootstrap(),
            "--input",
            "follow-in",
            "--output",
            "follow-out",
            "--application-id",
            "follow-app",
            "--store",
            "memory",
            "--follow",
            "--progress-every",
            "200ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = sample.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |processed: usize| {
        let want = format!(": {processed} records processed,");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !seen
            .iter()
            .any(|l: &String| l.contains(&want) && l.ends_with("caught up"))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("no line saying {processed} records and caught up: {seen:?}"),
            }
        }
    };
    wait_for(300);
    produce(300, 200);
    wait_for(500);
    let killed = Command::new("kill")
        .args(["-INT", &sample.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = sample.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let backend =
        riffle_kafka::KafkaBackend::connect(riffle_kafka::KafkaConfig::new(broker.bootstrap()))
            .unwrap();
    let mut counts = HashMap::new();
    for p in 0..backend.partitions("follow-out").unwrap().unwrap() {
        let tp = TopicPartition::new("follow-out", p);
        for batch in backend.fetch(&tp, 0, 1 << 20).unwrap() {
            for record in batch.records() {
                let record = record.unwrap();
                let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                let value = <[u8; 8]>::try_from(&record.value().unwrap()[..]).unwrap();
                counts.insert(key, i64::from_be_bytes(value));
            }
        }
    }
    assert_eq!(counts, model);
}

/// `--serve` on Kafka with two instances of one application: each answers `GET /counts/<key>`
/// for the keys it counts and redirects (307, `Location`) to the other instance for the rest,
/// as the broker's endpoint map names it; following the redirect gives the count of a `HashMap`
/// model of the input, for every key.
#[test]
fn two_serving_samples_redirect_to_the_instance_that_counts_a_key() {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let broker = KafkaBroker::start().unwrap();
    broker.create_topic("serve-in", 4).unwrap();
    let mut model: HashMap<String, i64> = HashMap::new();
    let lines: Vec<String> = (0..400).map(|i| format!("key-{}\t1", i % 40)).collect();
    for line in &lines {
        *model
            .entry(line.split('\t').next().unwrap().to_owned())
            .or_default() += 1;
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    broker
        .console_produce("serve-in", &lines, &[("parse.key", "true")])
        .unwrap();
    let spawn = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_riffle"))
            .args([
                "sample",
                "group-by-key-count",
                "--bootstrap-servers",
                broker.bootstrap(),
                "--input",
                "serve-in",
                "--output",
                "serve-out",
                "--application-id",
                "serve-app",
                "--store",
                "memory",
                "--threads",
                "1",
                "--follow",
                "--serve",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "no --serve line");
            if let Some(addr) = line
                .trim()
                .strip_prefix("serving counts at http://")
                .and_then(|l| l.strip_suffix("/counts/<key>"))
            {
                break addr.to_owned();
            }
        };
        // Keep draining its output.
        std::thread::spawn(move || for _ in stdout.lines() {});
        (child, addr)
    };
    let (mut a, a_addr) = spawn();
    let (mut b, b_addr) = spawn();
    let get = |addr: &str, path: &str| -> (u16, Option<String>, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let location = head
            .lines()
            .find_map(|l| l.strip_prefix("Location: "))
            .map(str::to_owned);
        (status, location, body.trim().to_owned())
    };
    // Until the group settles: every key answered, some by each instance.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (direct, redirected) = loop {
        let mut direct = 0;
        let mut redirected = 0;
        let mut wrong = Vec::new();
        for (key, count) in &model {
            let path = format!("/counts/{key}");
            let answer = match get(&a_addr, &path) {
                (200, _, body) => {
                    direct += 1;
                    body
                }
                (307, Some(location), _) => {
                    let rest = location.strip_prefix("http://").unwrap();
                    let (host, path) = rest.split_once('/').unwrap();
                    assert_eq!(host, b_addr, "redirected to the other instance");
                    redirected += 1;
                    get(host, &format!("/{path}")).2
                }
                (status, _, body) => format!("{status} {body}"),
            };
            if answer != count.to_string() {
                wrong.push((key.clone(), answer));
            }
        }
        if wrong.is_empty() && direct > 0 && redirected > 0 {
            break (direct, redirected);
        }
        assert!(
            Instant::now() < deadline,
            "answers still wrong: {wrong:?} ({direct} direct, {redirected} redirected)"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("{direct} keys answered by the first instance, {redirected} redirected");
    for child in [&mut a, &mut b] {
        let pid = child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
        assert!(child.wait().unwrap().success());
    }
}
