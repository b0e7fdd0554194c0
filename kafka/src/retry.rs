//! The one retry policy of riffle-kafka. Every request that a passing error may fail — a
//! leader or coordinator that moved or is loading, a broker that cannot be reached, a
//! transaction still being completed, offsets not yet stable, a new topic's leaders not yet
//! elected — goes through [`until`]: it is tried again after an exponential backoff with
//! jitter (10 ms doubling up to 250 ms, each delay plus up to as much again at random, so never
//! more than 500 ms) until it succeeds, fails with an error no retry mends, or its deadline (the
//! request timeout, [`KafkaConfig::request_timeout`](crate::KafkaConfig), or the caller's own
//! timeout) has passed, when the last error is returned.
//!
//! The backoff and the blocking retry loop are `backon`'s; what is retried is each caller's
//! call: an attempt returns a [`Failure`] that says whether another attempt may help.

use std::time::{Duration, Instant};

use backon::{BlockingRetryable, ExponentialBuilder};

use crate::cluster::is_stale_metadata;
use crate::error::Error;

/// The first delay.
const MIN_DELAY: Duration = Duration::from_millis(10);
/// The longest delay before jitter (jitter adds up to as much again).
const MAX_DELAY: Duration = Duration::from_millis(250);

/// The backoff between attempts: no limit on their number, the deadline ends them.
fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// Why an attempt failed, and whether another one may succeed.
#[derive(Debug)]
pub(crate) struct Failure {
    error: Error,
    retriable: bool,
}

impl Failure {
    /// `error`, retried (until the deadline) when `retriable`.
    pub(crate) fn new(error: Error, retriable: bool) -> Self {
        Failure { error, retriable }
    }

    /// An error another attempt may mend.
    pub(crate) fn retriable(error: Error) -> Self {
        Failure::new(error, true)
    }

    /// A request's error: retried when the broker could not be reached, or it answered with a
    /// code that says metadata moved or that Kafka marks retriable.
    pub(crate) fn of_request(error: Error) -> Self {
        let retriable = match &error {
            Error::Broker { code, .. } => is_stale_metadata(code.0) || code.is_retriable(),
            Error::Io { .. } => true,
            _ => false,
        };
        Failure::new(error, retriable)
    }
}

/// An error passed on with `?` ends the retries.
impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::new(error, false)
    }
}

/// Runs `attempt` until it succeeds, fails with an error that is not retriable, or `timeout`
/// has passed since the first attempt began (checked after each failed attempt); then the last
/// error is returned. Sleeps the policy's backoff between attempts.
pub(crate) fn until<T>(
    timeout: Duration,
    attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<T, Error> {
    let deadline = Instant::now() + timeout;
    attempt
        .retry(backoff())
        .sleep(std::thread::sleep)
        .when(|failure| failure.retriable && Instant::now() < deadline)
        .call()
        .map_err(|failure| failure.error)
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder;

    use super::*;

    fn timeout(what: &str) -> Error {
        Error::Timeout {
            what: what.into(),
            millis: 0,
        }
    }

    #[test]
    fn the_backoff_grows_from_10_ms_and_never_passes_500_ms() {
        let delays: Vec<Duration> = backoff().build().take(50).collect();
        assert_eq!(delays.len(), 50, "no limit on the number of attempts");
        assert!(
            delays[0] >= MIN_DELAY && delays[0] < 2 * MIN_DELAY,
            "{delays:?}"
        );
        assert!(
            delays.iter().all(|d| *d < Duration::from_millis(500)),
            "{delays:?}"
        );
        assert!(delays[10..].iter().all(|d| *d >= MAX_DELAY), "{delays:?}");
    }

    #[test]
    fn a_retriable_failure_is_retried_until_it_succeeds() {
        let mut attempts = 0;
        let result = until(Duration::from_secs(30), || {
            attempts += 1;
            if attempts < 4 {
                Err(Failure::retriable(timeout("not yet")))
            } else {
                Ok(attempts)
            }
        });
        assert_eq!(result.ok(), Some(4));
    }

    #[test]
    fn a_fatal_failure_ends_at_once() {
        let mut attempts = 0;
        let result: Result<(), Error> = until(Duration::from_secs(30), || {
            attempts += 1;
            Err(Error::Config("broken".into()).into())
        });
        assert_eq!(attempts, 1);
        assert!(matches!(result, Err(Error::Config(_))), "{result:?}");
    }

    #[test]
    fn the_last_error_comes_back_once_the_deadline_passed() {
        let started = Instant::now();
        let mut attempts = 0;
        let result: Result<(), Error> = until(Duration::from_millis(200), || {
            attempts += 1;
            Err(Failure::retriable(timeout(&format!("attempt {attempts}"))))
        });
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        assert!(attempts > 1);
        match result {
            Err(Error::Timeout { what, .. }) => assert_eq!(what, format!("attempt {attempts}")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn requests_retry_io_and_moved_or_retriable_broker_errors_only() {
        let broker = |code| Error::Broker {
            api: "Produce",
            context: String::new(),
            code: crate::ErrorCode(code),
            message: None,
        };
        let io = Error::Io {
            broker: "b:9092".into(),
            what: "send".into(),
            source: std::io::Error::other("reset"),
        };
        assert!(Failure::of_request(io).retriable);
        assert!(
            Failure::of_request(broker(6)).retriable,
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert!(
            Failure::of_request(broker(19)).retriable,
            "NOT_ENOUGH_REPLICAS"
        );
        assert!(
            !Failure::of_request(broker(10)).retriable,
            "MESSAGE_TOO_LARGE"
        );
        assert!(!Failure::of_request(Error::Config("x".into())).retriable);
    }
}
