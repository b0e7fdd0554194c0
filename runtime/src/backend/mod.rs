//! What a backend implements: where records live ([`Backend`]) and how the stream threads form a
//! group ([`GroupCoordinator`], [`Heartbeat`], [`Assignment`]), with the embedded log's
//! implementation (`EmbeddedBackend`, in `embedded/`, also at the crate root, with the group of
//! an application's instances on one log directory in `embedded/group.rs`; the `embedded`
//! feature, on by default).
//!
//! This is all the runtime sees of storage and membership (docs/design.md §5). The embedded log
//! is the default; the Kafka backend (riffle-kafka) implements the same traits. Batches are
//! riffle-record's types on both: a fetched batch shares its metadata with its records, and an
//! outgoing batch is encoded once, in place. Application authors need none of this module
//! beyond `EmbeddedBackend` — or a backend's `shared()` handle — to run an application.

pub(crate) mod assignor;
pub(crate) mod coordinator;
#[cfg(feature = "embedded")]
pub(crate) mod embedded;
pub(crate) mod group;

use std::sync::Arc;
use std::time::Duration;

use riffle_record::{BatchBuilder, FetchedBatch, TopicPartition};

pub use crate::backend::group::{
    Assignment, GroupCoordinator, GroupInfo, GroupIntervals, GroupSettings, Heartbeat,
    SubtopologyInfo,
};
use crate::types::error::Result;

/// What kind of topic the runtime asks a backend to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopicKind {
    /// A repartition topic (deleted-by-time in Kafka).
    Repartition,
    /// A store's changelog (compacted).
    Changelog,
    /// A window or session store's changelog: compacted, and deleted by time after the
    /// store's retention (in ms) plus a day, as Kafka Streams creates them.
    WindowedChangelog {
        /// The store's retention.
        retention_ms: i64,
    },
    /// A user topic.
    User,
}

impl TopicKind {
    /// The topic configs Kafka Streams creates this kind of topic with, by Kafka's names
    /// (`InternalTopicManager`'s defaults), for every backend: a repartition topic is deleted
    /// only by purging (`retention.ms=-1`, 50 MiB segments, so purged segments go early), a
    /// changelog is compacted, a windowed changelog also deleted after the store's retention
    /// plus a day. A user topic gets the backend's defaults.
    pub fn configs(self) -> Vec<(&'static str, String)> {
        match self {
            TopicKind::Repartition => vec![
                ("cleanup.policy", "delete".to_owned()),
                ("retention.ms", "-1".to_owned()),
                ("segment.bytes", "52428800".to_owned()),
            ],
            TopicKind::Changelog => vec![("cleanup.policy", "compact".to_owned())],
            TopicKind::WindowedChangelog { retention_ms } => vec![
                ("cleanup.policy", "compact,delete".to_owned()),
                (
                    "retention.ms",
                    retention_ms
                        .saturating_add(WINDOWED_CHANGELOG_ADDITIONAL_RETENTION_MS)
                        .to_string(),
                ),
            ],
            TopicKind::User => Vec::new(),
        }
    }
}

/// Kafka Streams' `windowstore.changelog.additional.retention.ms` default (a day): a windowed
/// changelog keeps records this much longer than its store, so a restore finds every window
/// the store still keeps.
pub const WINDOWED_CHANGELOG_ADDITIONAL_RETENTION_MS: i64 = 86_400_000;

/// Storage and coordination, as the stream threads use them.
pub trait Backend: Send + Sync + 'static {
    /// Creates `topic` with `partitions` partitions unless it exists with that many.
    fn create_topic(&self, topic: &str, partitions: u32, kind: TopicKind) -> Result<()>;
    /// The partition count of `topic`, `None` if it does not exist.
    fn partitions(&self, topic: &str) -> Result<Option<u32>>;
    /// Batches at or after `offset` (the first may start before it).
    fn fetch(
        &self,
        tp: &TopicPartition,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Vec<FetchedBatch>>;
    /// Appends `batch` (and clears it); returns the base offset.
    fn append(&self, tp: &TopicPartition, batch: &mut BatchBuilder) -> Result<u64>;
    /// The next offset to be written to `tp`.
    fn end_offset(&self, tp: &TopicPartition) -> Result<u64>;
    /// The first offset still in `tp` (0 until records are deleted).
    fn start_offset(&self, tp: &TopicPartition) -> Result<u64>;
    /// Deletes the records of `tp` below `offset` (Kafka's `deleteRecords`): how the stream
    /// threads purge a repartition topic up to the offset the application committed.
    fn delete_records(&self, tp: &TopicPartition, offset: u64) -> Result<()>;
    /// The offset of the first record of `tp` whose timestamp is at or after `timestamp`
    /// (milliseconds since the epoch), or the end offset if there is none (Kafka's ListOffsets
    /// by timestamp).
    fn offset_for_timestamp(&self, tp: &TopicPartition, timestamp: i64) -> Result<u64>;
    /// Commits `offsets` for `group` durably, after everything appended before it, as `member`
    /// (a streams group accepts commits only from its current members).
    fn commit_offsets(
        &self,
        group: &str,
        member: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()>;
    /// The committed offset of `group` for `tp`.
    fn committed_offset(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>>;
    /// A counter that moves whenever new data may be available.
    fn data_version(&self) -> u64;
    /// Waits until [`Backend::data_version`] differs from `seen`, [`Backend::wake_count`]
    /// differs from `woken`, or `timeout` passes.
    fn wait_for_data(&self, seen: u64, woken: u64, timeout: Duration) -> u64;
    /// Ends every [`Backend::wait_for_data`] under way in this process now, without new data,
    /// and moves [`Backend::wake_count`]: for a stream thread that has something else to look
    /// at (its group changed, the application is stopping). The default does nothing, and
    /// waits run to their timeout.
    fn wake_waiters(&self) {}
    /// How many times [`Backend::wake_waiters`] was called in this process. A waiter reads it
    /// *before* it looks at what a wake-up signals (the stop flag, the group's generation)
    /// and passes it to [`Backend::wait_for_data`], so a wake-up between its look and its wait
    /// ends the wait instead of being slept through. The default never moves.
    fn wake_count(&self) -> u64 {
        0
    }
    /// Pushes onto `out` the partitions that may have new data since [`Backend::data_version`]
    /// was `seen` (duplicates allowed), and returns the current version — or `None` when the
    /// backend cannot tell which, and the caller fetches every partition it reads. This is what
    /// keeps a stream thread's loop O(partitions with new data) instead of O(tasks). The
    /// default cannot tell.
    fn changed_partitions(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        let _ = (seen, out);
        None
    }
    /// The coordinator of the application's group (joined by each stream thread).
    fn group_coordinator(&self, group: &GroupInfo) -> Result<Arc<dyn GroupCoordinator>>;
    /// Whether a position past a partition's end means lost records rather than a partition
    /// that legitimately became shorter: true on the embedded log, which never truncates below
    /// a committed offset (Kafka may, after an unclean leader election, and its consumers then
    /// follow `auto.offset.reset`).
    fn position_past_end_is_lost_data(&self) -> bool {
        false
    }
    /// Whether [`Backend::commit_transaction`] is available (`processing_guarantee =
    /// exactly_once` needs it).
    fn supports_exactly_once(&self) -> bool {
        false
    }
    /// Appends every batch and commits `group`'s offsets as `member`, atomically: after a crash
    /// either all of it is durable and visible or none of it is. Returns each batch's base
    /// offset and clears the builders.
    fn commit_transaction(
        &self,
        group: &str,
        member: &str,
        batches: &mut [(TopicPartition, &mut BatchBuilder)],
        offsets: &[(TopicPartition, u64)],
    ) -> Result<Vec<u64>> {
        let _ = (group, member, batches, offsets);
        Err(Error::Config(
            "this backend does not support exactly_once".into(),
        ))
    }
}

#[cfg(feature = "embedded")]
pub use crate::backend::embedded::EmbeddedBackend;
/// The record of an application's group on a log directory, as `riffle groups` reads it.
#[cfg(feature = "embedded")]
pub use crate::backend::embedded::group::{
    GroupRecord, MemberState, RecordTasks, SubtopologyRecord,
};
use crate::types::error::Error;
