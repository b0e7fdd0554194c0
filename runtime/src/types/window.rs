//! Window definitions, as Kafka Streams' `kstream` package has them: [`TimeWindows`] (tumbling
//! and hopping), [`SlidingWindows`] (KIP-450), [`SessionWindows`], the [`Window`] a result
//! belongs to, [`Windowed`] keys and the [`EmitStrategy`] of a windowed aggregation.
//!
//! Times are milliseconds since the epoch; windows are aligned to the epoch. A window accepts
//! records until stream time reaches its end plus its grace period; later records for it are
//! dropped (the `dropped-records` metric) and its result is final.

use std::time::Duration;

use crate::types::error::{Error, Result};

/// A window's bounds in milliseconds. Time windows hold `start <= t < end`; sliding windows and
/// sessions hold `start <= t <= end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// The first millisecond of the window.
    pub start: i64,
    /// The window's end: exclusive for time windows, inclusive for sliding and session windows.
    pub end: i64,
}

impl Window {
    /// A window from `start` to `end`.
    pub fn new(start: i64, end: i64) -> Self {
        Window { start, end }
    }
}

/// A key and the window its result belongs to: the key of a windowed aggregation's table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Windowed<K> {
    /// The record key.
    pub key: K,
    /// The window.
    pub window: Window,
}

impl<K> Windowed<K> {
    /// `key` in `window`.
    pub fn new(key: K, window: Window) -> Self {
        Windowed { key, window }
    }
}

impl<K: std::fmt::Display> std::fmt::Display for Windowed<K> {
    /// `key@start/end`, as `riffle consume --key-serde windowed-string` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}/{}", self.key, self.window.start, self.window.end)
    }
}

/// Tumbling (advance = size) or hopping (advance < size) windows of a fixed size, aligned to the
/// epoch (Kafka's `TimeWindows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindows {
    pub(crate) size_ms: i64,
    pub(crate) advance_ms: i64,
    pub(crate) grace_ms: i64,
}

impl TimeWindows {
    /// Tumbling windows of `size` that accept no late record.
    pub fn of_size_with_no_grace(size: Duration) -> Self {
        Self::of_size_and_grace(size, Duration::ZERO)
    }

    /// Tumbling windows of `size` that accept records up to `grace` after their end.
    pub fn of_size_and_grace(size: Duration, grace: Duration) -> Self {
        let size_ms = size.as_millis().min(i64::MAX as u128) as i64;
        TimeWindows {
            size_ms,
            advance_ms: size_ms,
            grace_ms: grace.as_millis().min(i64::MAX as u128) as i64,
        }
    }

    /// Hopping windows: a new window starts every `advance` (at most the size).
    pub fn advance_by(mut self, advance: Duration) -> Self {
        self.advance_ms = advance.as_millis().min(i64::MAX as u128) as i64;
        self
    }

    /// The window size in milliseconds.
    pub fn size_ms(&self) -> i64 {
        self.size_ms
    }

    /// The advance in milliseconds.
    pub fn advance_ms(&self) -> i64 {
        self.advance_ms
    }

    /// The grace period in milliseconds.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.size_ms <= 0 {
            return Err(Error::Config(
                "a time window's size must be positive".into(),
            ));
        }
        if self.advance_ms <= 0 || self.advance_ms > self.size_ms {
            return Err(Error::Config(format!(
                "a time window's advance ({} ms) must be positive and at most its size ({} ms)",
                self.advance_ms, self.size_ms
            )));
        }
        Ok(())
    }

    /// The starts of the windows that hold `timestamp`, ascending (Kafka's `windowsFor`): from
    /// the first aligned start after `timestamp - size` (at least 0) up to `timestamp`.
    pub fn window_starts(&self, timestamp: i64) -> impl Iterator<Item = i64> + use<> {
        let first = ((timestamp - self.size_ms + self.advance_ms).max(0) / self.advance_ms)
            * self.advance_ms;
        let advance = self.advance_ms as usize;
        (first..=timestamp).step_by(advance.max(1))
    }
}

/// Sliding windows (KIP-450): windows of `time_difference` (both ends inclusive) that move with
/// the records: each record makes the window that ends at it and, if a later record is within
/// the difference, the one that starts just after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindows {
    pub(crate) difference_ms: i64,
    pub(crate) grace_ms: i64,
}

impl SlidingWindows {
    /// Sliding windows of `difference` accepting records up to `grace` after their end.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        SlidingWindows {
            difference_ms: difference.as_millis().min(i64::MAX as u128) as i64,
            grace_ms: grace.as_millis().min(i64::MAX as u128) as i64,
        }
    }

    /// Sliding windows of `difference` that accept no late record.
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// The time difference in milliseconds.
    pub fn time_difference_ms(&self) -> i64 {
        self.difference_ms
    }

    /// The grace period in milliseconds.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.difference_ms <= 0 {
            return Err(Error::Config(
                "a sliding window's time difference must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// Session windows: a key's records closer together than the inactivity gap form one session,
/// and sessions that a record brings within the gap of each other merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionWindows {
    pub(crate) gap_ms: i64,
    pub(crate) grace_ms: i64,
}

impl SessionWindows {
    /// Sessions split by `gap` of inactivity, accepting records up to `grace` after a session's
    /// end plus the gap.
    pub fn of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> Self {
        SessionWindows {
            gap_ms: gap.as_millis().min(i64::MAX as u128) as i64,
            grace_ms: grace.as_millis().min(i64::MAX as u128) as i64,
        }
    }

    /// Sessions split by `gap` of inactivity that accept no late record.
    pub fn of_inactivity_gap_with_no_grace(gap: Duration) -> Self {
        Self::of_inactivity_gap_and_grace(gap, Duration::ZERO)
    }

    /// The inactivity gap in milliseconds.
    pub fn inactivity_gap_ms(&self) -> i64 {
        self.gap_ms
    }

    /// The grace period in milliseconds.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.gap_ms <= 0 {
            return Err(Error::Config(
                "a session window's inactivity gap must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// When a windowed aggregation forwards its results (KIP-825).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EmitStrategy {
    /// Every update (collapsed per window between commits when the store caches).
    #[default]
    OnWindowUpdate,
    /// Once per window, its final result, when stream time closes it.
    OnWindowClose,
}

impl EmitStrategy {
    /// Emit every update (the default).
    pub fn on_window_update() -> Self {
        EmitStrategy::OnWindowUpdate
    }

    /// Emit each window's final result once it closes.
    pub fn on_window_close() -> Self {
        EmitStrategy::OnWindowClose
    }
}

/// What a windowed table knows of its windows: suppression needs the grace period, and the
/// serdes the size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowKind {
    Time(TimeWindows),
    Sliding(SlidingWindows),
    Session(SessionWindows),
}

impl WindowKind {
    /// The stream time at which a window ending at `end` can no longer change (Kafka's close
    /// rules): a time window (exclusive end) once stream time reaches `end + grace`; a sliding
    /// window or session (inclusive end, and for sessions the gap a record may still bridge)
    /// one millisecond after their last open instant.
    pub(crate) fn close_time(&self, end: i64) -> i64 {
        match self {
            WindowKind::Time(w) => end.saturating_add(w.grace_ms),
            WindowKind::Sliding(w) => end.saturating_add(w.grace_ms).saturating_add(1),
            WindowKind::Session(w) => end
                .saturating_add(w.gap_ms)
                .saturating_add(w.grace_ms)
                .saturating_add(1),
        }
    }

    /// The shortest retention a user may ask for, as Kafka Streams checks it: the window size
    /// (time difference, inactivity gap) plus the grace period.
    pub(crate) fn min_retention_ms(&self) -> i64 {
        match self {
            WindowKind::Time(w) => w.size_ms + w.grace_ms,
            WindowKind::Sliding(w) => w.difference_ms + w.grace_ms,
            WindowKind::Session(w) => w.gap_ms + w.grace_ms,
        }
    }

    /// How long the store keeps windows for a requested `retention`: at least until every
    /// window the aggregation may still read has closed — a session one millisecond past its
    /// gap and grace (it closes then), a sliding window as far back as a record's look-back of
    /// twice the difference reaches.
    pub(crate) fn store_retention_ms(&self, retention: i64) -> i64 {
        let needed = match self {
            WindowKind::Time(w) => w.size_ms + w.grace_ms,
            WindowKind::Sliding(w) => 2 * w.difference_ms + w.grace_ms + 1,
            WindowKind::Session(w) => w.gap_ms + w.grace_ms + 1,
        };
        retention.max(needed)
    }
}

/// Kafka's default segment interval: half the retention, at least a minute.
pub(crate) fn segment_interval(retention_ms: i64) -> i64 {
    (retention_ms / 2).max(60_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `windowsFor` examples: tumbling windows hold one window per record, hopping
    /// windows size/advance, and the first windows start at 0, not before.
    #[test]
    fn window_starts_follow_kafkas_windows_for() {
        let tumbling = TimeWindows::of_size_with_no_grace(Duration::from_millis(10));
        assert_eq!(tumbling.window_starts(0).collect::<Vec<_>>(), [0]);
        assert_eq!(tumbling.window_starts(9).collect::<Vec<_>>(), [0]);
        assert_eq!(tumbling.window_starts(10).collect::<Vec<_>>(), [10]);
        let hopping = TimeWindows::of_size_with_no_grace(Duration::from_millis(10))
            .advance_by(Duration::from_millis(5));
        assert_eq!(hopping.window_starts(3).collect::<Vec<_>>(), [0]);
        assert_eq!(hopping.window_starts(7).collect::<Vec<_>>(), [0, 5]);
        assert_eq!(hopping.window_starts(12).collect::<Vec<_>>(), [5, 10]);
        assert_eq!(hopping.window_starts(15).collect::<Vec<_>>(), [10, 15]);
        for ts in 0..100 {
            for start in hopping.window_starts(ts) {
                assert!(
                    start <= ts && ts < start + 10,
                    "{ts} in [{start}, {})",
                    start + 10
                );
            }
        }
    }
}
