//! How the low-level API and the DSL read a source topic ([`Consumed`]) and write a sink
//! ([`Produced`]).

use crate::serdes::SerdeRef;
use crate::types::timestamp::TimestampExtractorRef;

/// How a source topic's keys and values are read, and which timestamps its records get.
pub struct Consumed<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
    pub(crate) extractor: Option<TimestampExtractorRef>,
}

impl<K, V> Consumed<K, V> {
    /// Read with these serdes, timestamps from the config's extractor.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Consumed {
            key,
            value,
            extractor: None,
        }
    }

    /// Timestamps from `extractor` instead of the config's `default_timestamp_extractor`.
    pub fn with_timestamp_extractor(mut self, extractor: TimestampExtractorRef) -> Self {
        self.extractor = Some(extractor);
        self
    }
}

/// How a sink writes keys and values.
pub struct Produced<K, V> {
    pub(crate) key: SerdeRef<K>,
    pub(crate) value: SerdeRef<V>,
}

impl<K, V> Produced<K, V> {
    /// Write with these serdes.
    pub fn with(key: SerdeRef<K>, value: SerdeRef<V>) -> Self {
        Produced { key, value }
    }
}
