//! TLS and SASL against a real broker (the test kit's secure broker: SASL_PLAINTEXT and
//! SASL_SSL listeners, certificates made in the test, SASL_SSL clients must show a
//! certificate). Every mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) writes and reads back a
//! batch over both listeners, configured Kafka-style; wrong credentials, an untrusted broker
//! certificate, a missing client certificate and the wrong protocol are clear errors that come
//! back in seconds; and the count app runs exactly_once over SASL_SSL with exact counts.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition};
use riffle::errors::BackendErrorKind;
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::{KafkaBroker, SASL_PASSWORD, SASL_USER};

/// A client configuration for `listener` of `broker`, Kafka-style.
fn client(broker: &KafkaBroker, protocol: &str, mechanism: &str, password: &str) -> KafkaConfig {
    let servers = match protocol {
        "SASL_SSL" => broker.sasl_ssl_bootstrap().unwrap(),
        _ => broker.sasl_plaintext_bootstrap().unwrap(),
    };
    let mut config = KafkaConfig::new(servers);
    config.request_timeout = Duration::from_secs(10);
    config.set("security.protocol", protocol).unwrap();
    config.set("sasl.mechanism", mechanism).unwrap();
    let module = if mechanism == "PLAIN" {
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    } else {
        "org.apache.kafka.common.security.scram.ScramLoginModule"
    };
    config
        .set(
            "sasl.jaas.config",
            &format!(r#"{module} required username="{SASL_USER}" password="{password}";"#),
        )
        .unwrap();
    if protocol == "SASL_SSL" {
        let (cert, key) = broker.client_cert_files();
        config
            .set("ssl.ca.location", broker.ca_file().to_str().unwrap())
            .unwrap();
        config
            .set("ssl.certificate.location", cert.to_str().unwrap())
            .unwrap();
        config
            .set("ssl.key.location", key.to_str().unwrap())
            .unwrap();
    }
    config
}

/// Connecting with `config` fails within 30 s; the error's text and kind.
fn refused(config: KafkaConfig) -> (String, BackendErrorKind) {
    let started = Instant::now();
    let err = KafkaBackend::connect(config).unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    (err.to_string(), err.kind())
}

#[test]
fn every_mechanism_writes_and_reads_over_sasl_plaintext_and_sasl_ssl() {
    let broker = KafkaBroker::builder().secure().start().unwrap();
    for protocol in ["SASL_PLAINTEXT", "SASL_SSL"] {
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let backend =
                KafkaBackend::connect(client(&broker, protocol, mechanism, SASL_PASSWORD))
                    .unwrap_or_else(|e| panic!("{protocol} {mechanism}: {e}"));
            let topic = format!("t-{}-{}", protocol.to_lowercase(), mechanism.to_lowercase());
            backend.create_topic(&topic, 1, TopicKind::User).unwrap();
            let tp = TopicPartition::new(topic.as_str(), 0);
            let mut batch = BatchBuilder::new(Compression::None);
            batch.push(1, Some(b"k"), Some(mechanism.as_bytes()));
            let base = backend.append(&tp, &mut batch).unwrap();
            let fetched = backend.fetch(&tp, base, 1 << 20).unwrap();
            let record = fetched[0].records().next().unwrap().unwrap();
            assert_eq!(
                record.value().map(|v| v.to_vec()),
                Some(mechanism.as_bytes().to_vec()),
                "{protocol} {mechanism}"
            );
            println!("{protocol} {mechanism}: wrote and read back offset {base}");
        }
    }
}

#[test]
fn bad_credentials_and_certificates_are_clear_errors_not_hangs() {
    let broker = KafkaBroker::builder().secure().start().unwrap();
    for (protocol, mechanism) in [
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ] {
        let (err, kind) = refused(client(&broker, protocol, mechanism, "wrong-password"));
        println!("{protocol} {mechanism}, wrong password: {err}");
        assert!(err.contains("SaslAuthenticate"), "{err}");
        assert!(err.contains(SASL_USER), "names the user: {err}");
        assert_eq!(kind, BackendErrorKind::Authorization, "{err}");
    }

    // A broker certificate signed by a CA the client does not trust.
    let mut untrusted = client(&broker, "SASL_SSL", "PLAIN", SASL_PASSWORD);
    untrusted
        .set(
            "ssl.ca.location",
            broker.untrusted_ca_file().to_str().unwrap(),
        )
        .unwrap();
    let (err, _) = refused(untrusted);
    println!("untrusted broker certificate: {err}");
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(
        err.contains("certificate") && err.contains(broker.sasl_ssl_bootstrap().unwrap()),
        "{err}"
    );

    // No client certificate where the broker requires one.
    let mut anonymous = KafkaConfig::new(broker.sasl_ssl_bootstrap().unwrap());
    anonymous.request_timeout = Duration::from_secs(10);
    for (k, v) in [
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", SASL_USER),
        ("sasl.password", SASL_PASSWORD),
        ("ssl.ca.location", broker.ca_file().to_str().unwrap()),
    ] {
        anonymous.set(k, v).unwrap();
    }
    let (err, _) = refused(anonymous);
    println!("no client certificate: {err}");
    assert!(err.contains(broker.sasl_ssl_bootstrap().unwrap()), "{err}");

    // Plain Kafka requests to the TLS listener, and TLS to the plaintext one.
    let mut plaintext = KafkaConfig::new(broker.sasl_ssl_bootstrap().unwrap());
    plaintext.request_timeout = Duration::from_secs(10);
    let (err, _) = refused(plaintext);
    println!("PLAINTEXT to the SASL_SSL listener: {err}");
    assert!(err.contains("answered with TLS"), "{err}");
    let mut tls_to_plain = client(&broker, "SASL_SSL", "PLAIN", SASL_PASSWORD);
    tls_to_plain.bootstrap_servers = broker.bootstrap().to_owned();
    let (err, _) = refused(tls_to_plain);
    println!("SASL_SSL to the PLAINTEXT listener: {err}");
    assert!(err.contains("TLS handshake"), "{err}");
}

#[test]
fn the_count_app_runs_exactly_once_over_sasl_ssl() {
    let broker = KafkaBroker::builder()
        .secure()
        .config("transaction.state.log.num.partitions", "3")
        .start()
        .unwrap();
    let config = || client(&broker, "SASL_SSL", "SCRAM-SHA-512", SASL_PASSWORD);
    let backend = KafkaBackend::connect(config()).unwrap();
    let expected = common::produce_words(&backend, "words", 4, 20_000, 500, 0);
    let dirs = tempfile::tempdir().unwrap();
    let mut app_config = common::config("count-secure", dirs.path(), 2);
    app_config.processing_guarantee = riffle::ProcessingGuarantee::ExactlyOnce;
    app_config.commit_interval = Some(Duration::from_millis(100));
    let mut app = riffle::StreamsApp::new(
        common::count_topology("words", "counts", riffle::dsl::StoreType::Persistent),
        app_config,
        KafkaBackend::connect(config()).unwrap().shared(),
    )
    .unwrap();
    app.start().unwrap();
    let mut reader_config = config();
    reader_config.read_committed = true;
    let reader = KafkaBackend::connect(reader_config).unwrap();
    common::wait_for(
        "exact counts over SASL_SSL",
        Duration::from_secs(90),
        || (common::latest_counts(&reader, "counts") == expected).then_some(()),
    );
    let summary = app.close().unwrap();
    println!(
        "over SASL_SSL (SCRAM-SHA-512, client certificate), exactly_once: {} records, {} keys exact",
        summary.records_processed,
        expected.len()
    );
}
