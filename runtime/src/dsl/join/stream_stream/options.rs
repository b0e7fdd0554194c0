//! What a stream–stream join is given: [`JoinWindows`] (which records of the two streams meet)
//! and [`StreamJoined`] (the serdes and stores of the join).

use std::time::Duration;

use crate::dsl::StoreType;
use crate::serdes::SerdeRef;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Which records of two streams join (Kafka Streams' `JoinWindows`): a left record at `t`
/// joins right records in `[t - before, t + after]`; records may arrive up to `grace` late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinWindows {
    pub(crate) before_ms: i64,
    pub(crate) after_ms: i64,
    pub(crate) grace_ms: i64,
}

impl JoinWindows {
    /// Records at most `difference` apart join, either way; records are accepted up to
    /// `grace` late.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        JoinWindows {
            before_ms: ms(difference),
            after_ms: ms(difference),
            grace_ms: ms(grace),
        }
    }

    /// [`JoinWindows::of_time_difference_and_grace`] without grace (Kafka Streams'
    /// `JoinWindows.ofTimeDifferenceWithNoGrace`).
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// [`JoinWindows::of_time_difference_with_no_grace`], by another name.
    pub fn of_time_difference_without_grace(difference: Duration) -> Self {
        Self::of_time_difference_with_no_grace(difference)
    }

    /// A left record at `t` joins right records from `t - before` (the other bound stays).
    pub fn before(mut self, before: Duration) -> Self {
        self.before_ms = ms(before);
        self
    }

    /// A left record at `t` joins right records up to `t + after` (the other bound stays).
    pub fn after(mut self, after: Duration) -> Self {
        self.after_ms = ms(after);
        self
    }

    /// The windows' size: `before + after`.
    pub fn size_ms(&self) -> i64 {
        self.before_ms.saturating_add(self.after_ms)
    }

    /// The grace period in ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// How long each side's store keeps a record: `before + after + grace`.
    pub(crate) fn retention_ms(&self) -> i64 {
        self.size_ms().saturating_add(self.grace_ms)
    }

    /// Whether the windows can hold anything (`before + after >= 0`).
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.size_ms() < 0 {
            return Err(format!(
                "join windows before {} ms and after {} ms are empty: before + after must be \
                 at least 0",
                self.before_ms, self.after_ms
            ));
        }
        Ok(())
    }
}

/// The serdes and stores of a stream–stream join (Kafka Streams' `StreamJoined`): the key and
/// both sides' values are kept in window stores (and repartitioned with these serdes when a
/// side's key changed upstream).
pub struct StreamJoined<K, V1, V2> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V1>,
    pub(crate) other_value: SerdeRef<V2>,
    pub(crate) store_name: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) store_type: StoreType,
    pub(crate) logging: bool,
}

impl<K, V1, V2> StreamJoined<K, V1, V2> {
    /// The serdes of the key, this stream's values and the other stream's values.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V1>, other_value: SerdeRef<V2>) -> Self {
        StreamJoined {
            key,
            value,
            other_value,
            store_name: None,
            name: None,
            store_type: StoreType::default(),
            logging: true,
        }
    }

    /// Names the stores `<name>-this-join-store` and `<name>-other-join-store` (and, for left
    /// and outer joins, `<name>-outer-shared-join-store`); by default they are named after the
    /// join's processors.
    pub fn with_store_name(mut self, name: impl Into<String>) -> Self {
        self.store_name = Some(name.into());
        self
    }

    /// Names the join's processors (and repartition topics) after `name`.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Where the stores keep their data ([`StoreType::Persistent`] by default, as Kafka's).
    pub fn with_store_type(mut self, store_type: StoreType) -> Self {
        self.store_type = store_type;
        self
    }

    /// No changelogs for the stores (they then start empty after a restart).
    pub fn without_logging(mut self) -> Self {
        self.logging = false;
        self
    }
}
