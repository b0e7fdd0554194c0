//! Timestamp extractors: which time a record counts as having (Kafka Streams'
//! `TimestampExtractor`), for the order a task processes its inputs in, stream time, windows and
//! the timestamps of output records.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use riffle_record::Record;

use crate::types::error::{Error, Result};
use std::time::{SystemTime, UNIX_EPOCH};

/// Gives each input record its timestamp.
///
/// `partition_time` is the largest timestamp extracted from the record's partition so far (-1
/// before the first). An `Err` stops the stream thread; an `Ok` with a negative timestamp
/// drops the record with a warning, as Kafka Streams does.
pub trait TimestampExtractor: Send + Sync + 'static {
    /// The record's timestamp, in ms.
    fn extract(&self, record: &Record, partition_time: i64) -> Result<i64>;
}

/// A shared handle to an extractor, as configs and sources hold it.
#[derive(Clone)]
pub struct TimestampExtractorRef(Option<Arc<dyn TimestampExtractor>>);

impl TimestampExtractorRef {
    /// Wraps an extractor.
    pub fn new(extractor: impl TimestampExtractor) -> Self {
        TimestampExtractorRef(Some(Arc::new(extractor)))
    }

    /// An extractor from a function of the record and the partition time.
    pub fn from_fn(f: impl Fn(&Record, i64) -> i64 + Send + Sync + 'static) -> Self {
        struct FnExtractor<F>(F);
        impl<F: Fn(&Record, i64) -> i64 + Send + Sync + 'static> TimestampExtractor for FnExtractor<F> {
            fn extract(&self, record: &Record, partition_time: i64) -> Result<i64> {
                Ok((self.0)(record, partition_time))
            }
        }
        TimestampExtractorRef(Some(Arc::new(FnExtractor(f))))
    }

    /// The record's timestamp; the default (`FailOnInvalidTimestamp`) without a virtual call.
    #[inline]
    pub(crate) fn extract(&self, record: &Record, partition_time: i64) -> Result<i64> {
        match &self.0 {
            None => FailOnInvalidTimestamp.extract(record, partition_time),
            Some(e) => e.extract(record, partition_time),
        }
    }
}

impl Default for TimestampExtractorRef {
    /// `FailOnInvalidTimestamp`, Kafka's default.
    fn default() -> Self {
        TimestampExtractorRef(None)
    }
}

impl fmt::Debug for TimestampExtractorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TimestampExtractor")
    }
}

impl FromStr for TimestampExtractorRef {
    type Err = Error;
    /// Kafka's built-in extractors by class name (with or without the package).
    fn from_str(s: &str) -> Result<Self> {
        let name = s.rsplit('.').next().unwrap_or(s);
        Ok(match name {
            "FailOnInvalidTimestamp" => TimestampExtractorRef::default(),
            "LogAndSkipOnInvalidTimestamp" => {
                TimestampExtractorRef::new(LogAndSkipOnInvalidTimestamp)
            }
            "UsePartitionTimeOnInvalidTimestamp" => {
                TimestampExtractorRef::new(UsePartitionTimeOnInvalidTimestamp)
            }
            "WallclockTimestampExtractor" => {
                TimestampExtractorRef::new(WallclockTimestampExtractor)
            }
            other => {
                return Err(Error::Config(format!(
                    "default.timestamp.extractor: unknown extractor {other:?} (FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, UsePartitionTimeOnInvalidTimestamp or WallclockTimestampExtractor)"
                )));
            }
        })
    }
}

#[cold]
fn invalid(record: &Record, what: &str) -> Error {
    let tp = record.topic_partition();
    Error::InvalidTimestamp {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        offset: record.offset(),
        timestamp: record.timestamp(),
        reason: what.to_owned(),
    }
}

/// The record's own timestamp; a negative one stops the thread (Kafka's default,
/// `FailOnInvalidTimestamp`).
#[derive(Clone, Copy, Debug, Default)]
pub struct FailOnInvalidTimestamp;

impl TimestampExtractor for FailOnInvalidTimestamp {
    #[inline]
    fn extract(&self, record: &Record, _: i64) -> Result<i64> {
        match record.timestamp() {
            ts if ts >= 0 => Ok(ts),
            _ => Err(invalid(
                record,
                "negative timestamps are refused by FailOnInvalidTimestamp",
            )),
        }
    }
}

/// The record's own timestamp; a record with a negative one is dropped with a warning.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogAndSkipOnInvalidTimestamp;

impl TimestampExtractor for LogAndSkipOnInvalidTimestamp {
    fn extract(&self, record: &Record, _: i64) -> Result<i64> {
        Ok(record.timestamp())
    }
}

/// The record's own timestamp; a negative one is replaced by the partition time, and fails if
/// there is none yet.
#[derive(Clone, Copy, Debug, Default)]
pub struct UsePartitionTimeOnInvalidTimestamp;

impl TimestampExtractor for UsePartitionTimeOnInvalidTimestamp {
    fn extract(&self, record: &Record, partition_time: i64) -> Result<i64> {
        match record.timestamp() {
            ts if ts >= 0 => Ok(ts),
            _ if partition_time >= 0 => Ok(partition_time),
            _ => Err(invalid(
                record,
                "a negative timestamp and no partition time to use instead",
            )),
        }
    }
}

/// The wall-clock time at extraction, ignoring the record's timestamp.
#[derive(Clone, Copy, Debug, Default)]
pub struct WallclockTimestampExtractor;

impl TimestampExtractor for WallclockTimestampExtractor {
    fn extract(&self, _: &Record, _: i64) -> Result<i64> {
        Ok(system_time_ms())
    }
}

/// The wall-clock time in ms since the Unix epoch.
pub(crate) fn system_time_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
