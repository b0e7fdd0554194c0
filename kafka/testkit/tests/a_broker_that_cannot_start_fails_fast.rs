//! A broker that cannot start (here: an invalid setting) fails `start()` as soon as its process
//! exits, with the broker's own message — not after the readiness timeout.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use riffle_kafka_testkit::KafkaBroker;

#[test]
fn an_invalid_setting_fails_at_once_with_the_brokers_message() {
    let started = Instant::now();
    let err = KafkaBroker::builder()
        .config("num.network.threads", "not-a-number")
        .start()
        .expect_err("the broker refuses the setting");
    let message = err.to_string();
    assert!(message.contains("exited"), "{message}");
    assert!(message.contains("num.network.threads"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "failed after {:?}, not at once",
        started.elapsed()
    );
}
