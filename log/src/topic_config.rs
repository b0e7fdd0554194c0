//! A topic's configuration: Kafka's topic configs, by Kafka's names, the ones the embedded log
//! applies. Set when the topic is created ([`Log::create_topic_with`](crate::Log::create_topic_with),
//! `riffle topics --create T --partitions P --config k=v`), stored with the topic (the
//! `config` file, log/FORMAT.md) and never changed after.
//!
//! | key | default | what the log does with it |
//! |---|---|---|
//! | `cleanup.policy` | `delete` | `delete`: retention below applies; `compact`: the cleaner keeps the latest record per key (`partition/compact/`); `compact,delete`: both |
//! | `retention.ms` | -1 (no limit; see below) | a sealed segment whose newest record is older than this is deleted; -1: no limit |
//! | `retention.bytes` | -1 (no limit) | the oldest sealed segments are deleted while the partition stays at least this big without them |
//! | `delete.retention.ms` | 86400000 (a day) | how long compaction keeps a tombstone after the cleaning that first kept it |
//! | `min.cleanable.dirty.ratio` | 0.5 | the cleaner cleans a partition once this share of its sealed bytes is new since its last cleaning |
//! | `segment.bytes` | the log's [`LogOptions::segment_bytes`](crate::LogOptions::segment_bytes) | the topic's segment size |
//!
//! The defaults are a broker's, and one default differs from a Kafka broker's: `retention.ms`
//! is -1, where Kafka's `log.retention.hours` is 7 days. The embedded log is a database on the
//! application's disk, and retention by time compares record timestamps with the clock: records
//! with old or synthetic timestamps (a replay, a test, a sample) would be deleted minutes after
//! they were written, before an application read them. A topic keeps everything unless its
//! creator sets `retention.ms` or `retention.bytes`; the runtime's internal topics get Kafka
//! Streams' configs (repartition topics are purged after commits, windowed changelogs deleted
//! after their store's retention).
//!
//! Any other key is refused ([`Error::InvalidTopicConfig`](crate::Error::InvalidTopicConfig)),
//! naming it: a config the log would silently ignore is worse than an error.

use std::fmt;

/// What happens to a topic's old records: Kafka's `cleanup.policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CleanupPolicy {
    /// Whole segments are deleted by `retention.ms` and `retention.bytes`.
    Delete,
    /// Only the latest record per key is kept (compaction).
    Compact,
    /// Both: compacted, and deleted by retention.
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether retention deletes segments.
    pub fn deletes(self) -> bool {
        matches!(self, Self::Delete | Self::CompactDelete)
    }

    /// Whether the topic is compacted.
    pub fn compacts(self) -> bool {
        matches!(self, Self::Compact | Self::CompactDelete)
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Delete => "delete",
            Self::Compact => "compact",
            Self::CompactDelete => "compact,delete",
        })
    }
}

/// A topic's configuration (see the module docs for the keys and defaults).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TopicConfig {
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `retention.ms`; `None` is -1, no limit.
    pub retention_ms: Option<u64>,
    /// `retention.bytes`; `None` is -1, no limit.
    pub retention_bytes: Option<u64>,
    /// `delete.retention.ms`.
    pub delete_retention_ms: u64,
    /// `segment.bytes`; `None`: the log's segment size.
    pub segment_bytes: Option<u64>,
    /// `min.cleanable.dirty.ratio`, from 0 to 1.
    pub min_cleanable_dirty_ratio: f64,
}

/// Kafka's default `min.cleanable.dirty.ratio`.
pub const DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;

/// Kafka's default `delete.retention.ms`: a day.
pub const DEFAULT_DELETE_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

impl Default for TopicConfig {
    /// `delete`, no time or size limit (`retention.ms` -1: see the module docs), tombstones
    /// kept a day, the log's segment size.
    fn default() -> Self {
        Self {
            cleanup_policy: CleanupPolicy::Delete,
            retention_ms: None,
            retention_bytes: None,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            segment_bytes: None,
            min_cleanable_dirty_ratio: DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
        }
    }
}

/// The keys [`TopicConfig`] knows, in the order they are shown.
pub const TOPIC_CONFIG_KEYS: [&str; 6] = [
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "delete.retention.ms",
    "segment.bytes",
    "min.cleanable.dirty.ratio",
];

/// `-1` or a non-negative number, Kafka's "no limit" convention.
fn limit(value: &str) -> Result<Option<u64>, String> {
    match value.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(v) if v >= 0 => Ok(Some(v as u64)),
        _ => Err(format!(
            "expected -1 (no limit) or a number ≥ 0, not {value:?}"
        )),
    }
}

fn show_limit(v: Option<u64>) -> String {
    v.map_or_else(|| "-1".to_owned(), |v| v.to_string())
}

impl TopicConfig {
    /// The defaults with `pairs` applied in order; the first bad pair is an error `(key,
    /// reason)`.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, (String, String)> {
        let mut config = Self::default();
        for (key, value) in pairs {
            config
                .set(key, value)
                .map_err(|reason| (key.to_owned(), reason))?;
        }
        Ok(config)
    }

    /// Sets `key` to `value` (Kafka's names and value syntax); why not, if it cannot.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let value = value.trim();
        match key.trim() {
            "cleanup.policy" => {
                let mut parts: Vec<&str> = value.split(',').map(str::trim).collect();
                parts.sort_unstable();
                parts.dedup();
                self.cleanup_policy = match parts.as_slice() {
                    ["delete"] => CleanupPolicy::Delete,
                    ["compact"] => CleanupPolicy::Compact,
                    ["compact", "delete"] => CleanupPolicy::CompactDelete,
                    _ => {
                        return Err(format!(
                            "expected delete, compact or compact,delete, not {value:?}"
                        ));
                    }
                };
            }
            "retention.ms" => self.retention_ms = limit(value)?,
            "retention.bytes" => self.retention_bytes = limit(value)?,
            "delete.retention.ms" => {
                self.delete_retention_ms = limit(value)?
                    .ok_or_else(|| "expected a number of milliseconds ≥ 0".to_owned())?;
            }
            "segment.bytes" => match value.parse::<u64>() {
                Ok(v) if (1..=i32::MAX as u64).contains(&v) => self.segment_bytes = Some(v),
                _ => {
                    return Err(format!(
                        "expected a size in bytes from 1 to {}, not {value:?}",
                        i32::MAX
                    ));
                }
            },
            "min.cleanable.dirty.ratio" => match value.parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => self.min_cleanable_dirty_ratio = v,
                _ => return Err(format!("expected a number from 0 to 1, not {value:?}")),
            },
            other => {
                return Err(format!(
                    "not a topic config the embedded log applies (it knows {}); {other:?} would \
                     be ignored",
                    TOPIC_CONFIG_KEYS.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The value of `key` as Kafka writes it (`None`: an unknown key, or `segment.bytes` left
    /// to the log).
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "cleanup.policy" => self.cleanup_policy.to_string(),
            "retention.ms" => show_limit(self.retention_ms),
            "retention.bytes" => show_limit(self.retention_bytes),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "segment.bytes" => self.segment_bytes?.to_string(),
            "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio.to_string(),
            _ => return None,
        })
    }

    /// The keys whose value differs from the default, with their values, in
    /// [`TOPIC_CONFIG_KEYS`] order: what the topic's `config` file holds and what `riffle
    /// topics --describe` lists under `Configs:`, as Kafka's `kafka-topics.sh` does.
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        let defaults = Self::default();
        TOPIC_CONFIG_KEYS
            .iter()
            .filter_map(|&key| {
                let value = self.get(key)?;
                (defaults.get(key).as_ref() != Some(&value)).then_some((key, value))
            })
            .collect()
    }

    /// The `config` file's content: one `key=value` line per override.
    pub(crate) fn to_file(&self) -> String {
        self.overrides()
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }

    /// Parses a `config` file; the reason it is not one.
    pub(crate) fn from_file(text: &str) -> Result<Self, String> {
        let mut config = Self::default();
        for (n, line) in text.lines().enumerate() {
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {} is not key=value: {line:?}", n + 1));
            };
            config
                .set(key, value)
                .map_err(|reason| format!("line {} ({key}): {reason}", n + 1))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_and_values_round_trip_through_the_file() {
        let config = TopicConfig::from_pairs([
            ("cleanup.policy", "delete,compact"),
            ("retention.ms", "604800000"),
            ("retention.bytes", "1048576"),
            ("segment.bytes", "4096"),
        ])
        .expect("valid");
        assert_eq!(config.cleanup_policy, CleanupPolicy::CompactDelete);
        assert_eq!(config.retention_ms, Some(604_800_000));
        assert_eq!(config.retention_bytes, Some(1 << 20));
        let file = config.to_file();
        assert_eq!(
            file,
            "cleanup.policy=compact,delete\nretention.ms=604800000\nretention.bytes=1048576\nsegment.bytes=4096\n"
        );
        assert_eq!(TopicConfig::from_file(&file), Ok(config));
        assert_eq!(TopicConfig::default().to_file(), "");
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_refused_by_name() {
        let (key, reason) =
            TopicConfig::from_pairs([("min.insync.replicas", "2")]).expect_err("unknown");
        assert_eq!(key, "min.insync.replicas");
        assert!(reason.contains("retention.ms"), "{reason}");
        for (key, value) in [
            ("retention.ms", "-2"),
            ("retention.bytes", "lots"),
            ("cleanup.policy", "archive"),
            ("segment.bytes", "0"),
            ("delete.retention.ms", "-1"),
        ] {
            let (k, _) = TopicConfig::from_pairs([(key, value)]).expect_err(value);
            assert_eq!(k, key);
        }
        assert!(TopicConfig::from_file("retention.ms").is_err());
    }
}
