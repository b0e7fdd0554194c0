//! The test topics: [`TestRecord`], and the [`TestInputTopic`] and [`TestOutputTopic`] a
//! [`TopologyTestDriver`](super::TopologyTestDriver) hands out, which serialize what a test
//! pipes in and deserialize what the topology wrote.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::rc::Rc;
use std::time::Duration;

use riffle_record::TopicPartition;

use super::driver::Inner;
use crate::serdes::{Serde, SerdeRef};
use crate::types::error::SerializationExceptionOrigin::{self, Key, Value};
use crate::types::error::{Error, Result};
use crate::types::record::Headers;

/// A record read from or piped into a test topic: key, value, timestamp and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRecord<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
    /// The timestamp, in ms.
    pub timestamp: i64,
    /// The headers.
    pub headers: Headers,
}

impl<K, V> TestRecord<K, V> {
    /// A record without headers.
    pub fn new(key: K, value: V, timestamp: i64) -> Self {
        TestRecord {
            key,
            value,
            timestamp,
            headers: Headers::new(),
        }
    }
}

/// An input topic of a [`TopologyTestDriver`](super::TopologyTestDriver).
pub struct TestInputTopic<K, V> {
    pub(super) inner: Rc<RefCell<Inner>>,
    pub(super) topic: String,
    pub(super) key_serde: SerdeRef<K>,
    pub(super) value_serde: SerdeRef<V>,
    pub(super) time: std::cell::Cell<i64>,
    pub(super) advance: i64,
}

impl<K: 'static, V: 'static> TestInputTopic<K, V> {
    /// Pipes `key`/`value` with the topic's current time, then processes and commits it.
    pub fn pipe_input(&self, key: K, value: V) -> Result<()> {
        let ts = self.time.get();
        self.time.set(ts.saturating_add(self.advance));
        self.pipe_input_at(key, value, ts)
    }

    /// Pipes a record with timestamp `timestamp_ms`.
    pub fn pipe_input_at(&self, key: K, value: V, timestamp_ms: i64) -> Result<()> {
        self.pipe_record(TestRecord::new(key, value, timestamp_ms))
    }

    /// Pipes a record with its headers. A key or value its serde writes as a null
    /// ([`Serdes::optional`](crate::serdes::Serdes::optional)'s `None`) is piped as a null.
    pub fn pipe_record(&self, record: TestRecord<K, V>) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let key = self.encode_key(&record.key, &mut key)?;
        let null = self.value_serde.is_null(&record.value);
        if !null {
            self.serialize(&*self.value_serde, &record.value, &mut value, Value)?;
        }
        let value = (!null).then_some(&value[..]);
        self.inner
            .borrow_mut()
            .pipe(&self.topic, key, value, record.timestamp, &record.headers)
    }

    /// `key`'s bytes in `buf`, or `None` for a key its serde calls null.
    fn encode_key<'b>(&self, key: &K, buf: &'b mut Vec<u8>) -> Result<Option<&'b [u8]>> {
        if self.key_serde.is_null(key) {
            return Ok(None);
        }
        self.serialize(&*self.key_serde, key, buf, Key)?;
        Ok(Some(&buf[..]))
    }

    /// Pipes a record without a value (a tombstone: a table's delete) with timestamp
    /// `timestamp_ms` (Kafka's `pipeInput(key, null)`).
    pub fn pipe_tombstone_at(&self, key: K, timestamp_ms: i64) -> Result<()> {
        let mut bytes = Vec::new();
        let key = self.encode_key(&key, &mut bytes)?;
        self.inner
            .borrow_mut()
            .pipe(&self.topic, key, None, timestamp_ms, &Headers::new())
    }

    /// Pipes `value` with a null key and the topic's current time (Kafka's
    /// `pipeInput(value)`): the topology reads the key as its key serde reads a null (`None`
    /// with [`Serdes::optional`](crate::serdes::Serdes::optional); an error with a serde that
    /// has no null, as a real record without a key would be).
    pub fn pipe_input_value(&self, value: V) -> Result<()> {
        let ts = self.time.get();
        self.time.set(ts.saturating_add(self.advance));
        self.pipe_value_at(value, ts)
    }

    /// Pipes `value` with a null key and timestamp `timestamp_ms`.
    pub fn pipe_value_at(&self, value: V, timestamp_ms: i64) -> Result<()> {
        let mut bytes = Vec::new();
        let null = self.value_serde.is_null(&value);
        if !null {
            self.serialize(&*self.value_serde, &value, &mut bytes, Value)?;
        }
        let value = (!null).then_some(&bytes[..]);
        self.inner
            .borrow_mut()
            .pipe(&self.topic, None, value, timestamp_ms, &Headers::new())
    }

    /// Pipes each value with a null key and the topic's current time (Kafka's
    /// `pipeValueList`).
    pub fn pipe_value_list(&self, values: impl IntoIterator<Item = V>) -> Result<()> {
        for value in values {
            self.pipe_input_value(value)?;
        }
        Ok(())
    }

    /// `value` through `serde`; a failure is an error naming the topic, as a producer's
    /// (Kafka's `TestInputTopic` throws the serializer's exception).
    fn serialize<T: 'static>(
        &self,
        serde: &dyn Serde<T>,
        value: &T,
        out: &mut Vec<u8>,
        origin: SerializationExceptionOrigin,
    ) -> Result<()> {
        serde
            .serialize(value, out)
            .map_err(|source| Error::Serialize {
                origin,
                topic: self.topic.clone(),
                partition: None,
                source,
            })
    }

    /// Pipes the records one after another (each processed and committed before the next).
    pub fn pipe_record_list(
        &self,
        records: impl IntoIterator<Item = TestRecord<K, V>>,
    ) -> Result<()> {
        for record in records {
            self.pipe_record(record)?;
        }
        Ok(())
    }

    /// Pipes `(key, value)` pairs with the topic's current time.
    pub fn pipe_key_value_list(&self, records: impl IntoIterator<Item = (K, V)>) -> Result<()> {
        for (k, v) in records {
            self.pipe_input(k, v)?;
        }
        Ok(())
    }

    /// Moves the topic's current time on.
    pub fn advance_time(&self, advance: Duration) {
        let ms = i64::try_from(advance.as_millis()).unwrap_or(i64::MAX);
        self.time.set(self.time.get().saturating_add(ms));
    }
}

/// An output topic of a [`TopologyTestDriver`](super::TopologyTestDriver): reads what the
/// topology wrote, in order.
pub struct TestOutputTopic<K, V> {
    pub(super) inner: Rc<RefCell<Inner>>,
    pub(super) tp: TopicPartition,
    pub(super) key_serde: SerdeRef<K>,
    pub(super) value_serde: SerdeRef<V>,
    pub(super) position: std::cell::Cell<u64>,
}

impl<K: 'static, V: 'static> TestOutputTopic<K, V> {
    fn decode(&self, record: &riffle_record::Record) -> Result<TestRecord<K, V>> {
        let error = |part, source| Error::Deserialize {
            part,
            topic: self.tp.topic.to_string(),
            partition: 0,
            offset: record.offset(),
            source,
        };
        let key = self
            .key_serde
            .deserialize(record.key().map(|b| &b[..]))
            .map_err(|e| error("key", e))?;
        let value = self
            .value_serde
            .deserialize(record.value().map(|b| &b[..]))
            .map_err(|e| error("value", e))?;
        Ok(TestRecord {
            key,
            value,
            timestamp: record.timestamp(),
            headers: Headers::from_log(record),
        })
    }

    /// The next record not read yet.
    pub fn read_record(&self) -> Result<Option<TestRecord<K, V>>> {
        let records = self
            .inner
            .borrow()
            .read_at_most(&self.tp, self.position.get(), 1)?;
        match records.first() {
            Some(r) => {
                self.position.set(r.offset() + 1);
                self.decode(r).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The next record's key and value.
    pub fn read_key_value(&self) -> Result<Option<(K, V)>> {
        Ok(self.read_record()?.map(|r| (r.key, r.value)))
    }

    /// The next record's value.
    pub fn read_value(&self) -> Result<Option<V>> {
        Ok(self.read_record()?.map(|r| r.value))
    }

    /// Every record not read yet.
    pub fn read_records_to_list(&self) -> Result<Vec<TestRecord<K, V>>> {
        let records = self.inner.borrow().read(&self.tp, self.position.get())?;
        if let Some(last) = records.last() {
            self.position.set(last.offset() + 1);
        }
        records.iter().map(|r| self.decode(r)).collect()
    }

    /// The keys and values of every record not read yet.
    pub fn read_key_values_to_list(&self) -> Result<Vec<(K, V)>> {
        Ok(self
            .read_records_to_list()?
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect())
    }

    /// The latest value per key of every record not read yet (a table's state).
    pub fn read_key_values_to_map(&self) -> Result<HashMap<K, V>>
    where
        K: Hash + Eq,
    {
        Ok(self.read_key_values_to_list()?.into_iter().collect())
    }

    /// How many records are not read yet.
    pub fn queue_size(&self) -> Result<usize> {
        Ok(self
            .inner
            .borrow()
            .read(&self.tp, self.position.get())?
            .len())
    }

    /// Whether every record was read.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.queue_size()? == 0)
    }
}
