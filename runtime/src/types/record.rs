//! Records as processors see them: [`Record`] (key, value, timestamp, [`Headers`]), and the
//! [`RecordMetadata`] of the input record being processed.

use std::sync::Arc;

use bytes::Bytes;
pub use riffle_record::Header;

/// A record's headers: Kafka's record headers, in order, keys may repeat.
///
/// Cloning is O(1) (the list is shared, copied on the first change), and an empty `Headers`
/// holds no allocation, so records without headers cost nothing for them anywhere on the
/// record path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    list: Option<Arc<Vec<Header>>>,
}

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Headers::default()
    }

    /// The headers of a record read from a topic (slices of its batch, no copy of the bytes).
    pub(crate) fn from_log(record: &riffle_record::Record) -> Self {
        if record.header_count() == 0 {
            return Headers::default();
        }
        Headers {
            list: Some(Arc::new(record.headers().collect())),
        }
    }

    /// Appends a header (an existing one with the same key stays: Kafka's `Headers.add`).
    pub fn add(&mut self, key: impl Into<Bytes>, value: Option<Bytes>) -> &mut Self {
        let list = self.list.get_or_insert_with(Default::default);
        Arc::make_mut(list).push(Header::new(key, value));
        self
    }

    /// Removes every header with `key` (Kafka's `Headers.remove`).
    pub fn remove(&mut self, key: &[u8]) -> &mut Self {
        if let Some(list) = &mut self.list {
            if list.iter().any(|h| h.key == key) {
                Arc::make_mut(list).retain(|h| h.key != key);
            }
            if list.is_empty() {
                self.list = None;
            }
        }
        self
    }

    /// The last header with `key` (Kafka's `Headers.lastHeader`).
    pub fn last_header(&self, key: &[u8]) -> Option<&Header> {
        self.iter().rev().find(|h| h.key == key)
    }

    /// Every header with `key`, in order.
    pub fn headers<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = &'a Header> + 'a {
        self.iter().filter(move |h| h.key == key)
    }

    /// All headers, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Header> {
        self.list.as_deref().map_or(&[][..], Vec::as_slice).iter()
    }

    /// How many headers there are.
    pub fn len(&self) -> usize {
        self.list.as_ref().map_or(0, |l| l.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The headers as the batch builder takes them.
    pub(crate) fn encoded(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + Clone {
        self.iter().map(|h| (&h.key[..], h.value.as_deref()))
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = &'a Header;
    type IntoIter = std::slice::Iter<'a, Header>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Into<Bytes>> FromIterator<(K, Option<Bytes>)> for Headers {
    fn from_iter<I: IntoIterator<Item = (K, Option<Bytes>)>>(iter: I) -> Self {
        let list: Vec<Header> = iter.into_iter().map(|(k, v)| Header::new(k, v)).collect();
        Headers {
            list: (!list.is_empty()).then(|| Arc::new(list)),
        }
    }
}

/// A record as the processor API passes it: key, value, timestamp (ms) and headers (Kafka
/// Streams' `Record`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<K, V> {
    key: K,
    value: V,
    timestamp: i64,
    headers: Headers,
}

impl<K, V> Record<K, V> {
    /// A record without headers.
    pub fn new(key: K, value: V, timestamp: i64) -> Self {
        Record {
            key,
            value,
            timestamp,
            headers: Headers::new(),
        }
    }

    /// A record with headers.
    pub fn with_headers_of(key: K, value: V, timestamp: i64, headers: Headers) -> Self {
        Record {
            key,
            value,
            timestamp,
            headers,
        }
    }

    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The value.
    pub fn value(&self) -> &V {
        &self.value
    }

    /// The timestamp, in ms.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The headers.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The headers, to change.
    pub fn headers_mut(&mut self) -> &mut Headers {
        &mut self.headers
    }

    /// This record with another key.
    pub fn with_key<K2>(self, key: K2) -> Record<K2, V> {
        Record {
            key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// This record with another value.
    pub fn with_value<V2>(self, value: V2) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// This record with another timestamp.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// This record with other headers.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// Key, value, timestamp and headers.
    pub fn into_parts(self) -> (K, V, i64, Headers) {
        (self.key, self.value, self.timestamp, self.headers)
    }
}

/// A record whose key a [`crate::FixedKeyProcessor`] cannot change (Kafka Streams'
/// `FixedKeyRecord`): only its value, timestamp and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedKeyRecord<K, V> {
    inner: Record<K, V>,
}

impl<K, V> FixedKeyRecord<K, V> {
    pub(crate) fn new(inner: Record<K, V>) -> Self {
        FixedKeyRecord { inner }
    }

    pub(crate) fn into_record(self) -> Record<K, V> {
        self.inner
    }

    /// The key.
    pub fn key(&self) -> &K {
        &self.inner.key
    }

    /// The value.
    pub fn value(&self) -> &V {
        &self.inner.value
    }

    /// The timestamp, in ms.
    pub fn timestamp(&self) -> i64 {
        self.inner.timestamp
    }

    /// The headers.
    pub fn headers(&self) -> &Headers {
        &self.inner.headers
    }

    /// The headers, to change.
    pub fn headers_mut(&mut self) -> &mut Headers {
        &mut self.inner.headers
    }

    /// This record with another value.
    pub fn with_value<V2>(self, value: V2) -> FixedKeyRecord<K, V2> {
        FixedKeyRecord {
            inner: self.inner.with_value(value),
        }
    }

    /// This record with another timestamp.
    pub fn with_timestamp(self, timestamp: i64) -> Self {
        FixedKeyRecord {
            inner: self.inner.with_timestamp(timestamp),
        }
    }

    /// This record with other headers.
    pub fn with_headers(self, headers: Headers) -> Self {
        FixedKeyRecord {
            inner: self.inner.with_headers(headers),
        }
    }
}

/// Where the input record being processed came from (absent while punctuating).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Its topic.
    pub topic: Arc<str>,
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_add_remove_and_last_header_follow_kafka() {
        let mut h = Headers::new();
        assert!(h.is_empty() && h.list.is_none(), "empty holds nothing");
        h.add("a", Some(Bytes::from_static(b"1")))
            .add("b", None)
            .add("a", Some(Bytes::from_static(b"2")));
        assert_eq!(h.len(), 3);
        assert_eq!(
            h.last_header(b"a").and_then(|x| x.value.clone()),
            Some(Bytes::from_static(b"2"))
        );
        assert_eq!(h.headers(b"a").count(), 2);
        let shared = h.clone();
        h.remove(b"a");
        assert_eq!(h.len(), 1);
        assert_eq!(shared.len(), 3, "a clone is not changed by the original");
        h.remove(b"b");
        assert!(h.is_empty() && h.list.is_none());
    }
}
