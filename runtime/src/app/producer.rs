//! A typed producer for application authors: keys and values through serdes, partitioned by
//! Kafka's murmur2 of the serialized key (a record without a key sticks to one partition per
//! batch, as Kafka's sticky partitioner), batched per partition, on either backend.
//!
//! A batch is appended once it holds `batch_size` bytes, or once its first record is
//! `linger` old (a background thread per producer looks), or at [`Producer::flush`] and
//! [`Producer::close`]. An append's error is returned by the call that appended, or — for an
//! append the linger thread made — by the next `send`, `flush` or `close`.
//!
//! ```
//! use riffle::log::Log;
//! use riffle::{EmbeddedBackend, producer::Producer, Serdes};
//! use riffle::backend::{Backend, TopicKind};
//!
//! let backend = EmbeddedBackend::new(Log::in_memory()).shared();
//! backend.create_topic("words", 4, TopicKind::User)?;
//! let mut producer = Producer::new(backend.clone(), Serdes::string(), Serdes::i64());
//! producer.send("words", &"hello".to_owned(), &1)?;
//! producer.flush()?;
//! # Ok::<(), riffle::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use riffle_record::{BatchBuilder, Compression, TopicPartition, partition_for_key};

use crate::backend::Backend;
use crate::serdes::SerdeRef;
use crate::types::error::{Error, Result, SerializationExceptionOrigin};
use crate::types::record::Headers;

/// How a [`Producer`] batches (Kafka's producer settings of the same names).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// How long a batch waits for more records before it is appended (`linger.ms`; Kafka's
    /// default since 4.0, 5 ms).
    pub linger: Duration,
    /// A batch is appended once it holds this many bytes (`batch.size`, 16 KiB).
    pub batch_size: usize,
    /// The codec of the batches (`compression.type`).
    pub compression: Compression,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger: Duration::from_millis(5),
            batch_size: 16 << 10,
            compression: Compression::None,
        }
    }
}

impl ProducerConfig {
    /// Sets `linger`.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }
    /// Sets `batch_size`.
    pub fn with_batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = bytes;
        self
    }
    /// Sets `compression`.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
}

/// One record to send: a key (`None`: no key), a value (`None`: a tombstone), and optionally
/// its timestamp (default: now), partition (default: by key) and headers.
#[derive(Debug)]
pub struct ProducerRecord<'a, K, V> {
    /// The key.
    pub key: Option<&'a K>,
    /// The value; `None` writes a tombstone.
    pub value: Option<&'a V>,
    /// Milliseconds since the epoch; `None`: the time of the send.
    pub timestamp: Option<i64>,
    /// The partition; `None`: Kafka's partitioner.
    pub partition: Option<u32>,
    /// Record headers.
    pub headers: Option<&'a Headers>,
}

impl<'a, K, V> ProducerRecord<'a, K, V> {
    /// A record with `key` and `value`, partitioned by key, stamped with the time of the send.
    pub fn new(key: &'a K, value: &'a V) -> Self {
        ProducerRecord {
            key: Some(key),
            value: Some(value),
            timestamp: None,
            partition: None,
            headers: None,
        }
    }
    /// Sets the timestamp.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }
}

/// A partition's batch and when its first record came.
struct Pending {
    batch: BatchBuilder,
    since: Option<Instant>,
}

/// A topic's batches, by partition.
struct TopicBatches {
    partitions: Vec<Pending>,
    /// Where records without a key go until their batch is appended.
    sticky: u32,
}

struct Accumulator {
    topics: HashMap<String, TopicBatches>,
    /// An append the linger thread failed: for the next call to return.
    failed: Option<Error>,
    closed: bool,
}

struct Shared {
    backend: Arc<dyn Backend>,
    config: ProducerConfig,
    state: Mutex<Accumulator>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Accumulator> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends every batch older than `linger` (all of them with `all`).
    fn append_due(&self, state: &mut Accumulator, all: bool) -> Result<()> {
        let now = Instant::now();
        for (topic, batches) in &mut state.topics {
            let count = batches.partitions.len() as u32;
            for (p, pending) in batches.partitions.iter_mut().enumerate() {
                let due = pending
                    .since
                    .is_some_and(|since| all || now.duration_since(since) >= self.config.linger);
                if due {
                    let tp = TopicPartition::new(topic.as_str(), p as u32);
                    self.backend.append(&tp, &mut pending.batch)?;
                    pending.since = None;
                    if batches.sticky == p as u32 {
                        batches.sticky = (batches.sticky + 1) % count;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A typed producer (see the module documentation).
pub struct Producer<K, V> {
    shared: Arc<Shared>,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    key: Vec<u8>,
    value: Vec<u8>,
    lingerer: Option<JoinHandle<()>>,
}

impl<K: 'static, V: 'static> Producer<K, V> {
    /// A producer writing to `backend` with Kafka's default batching.
    pub fn new(
        backend: Arc<dyn Backend>,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> Self {
        Self::with_config(backend, key_serde, value_serde, ProducerConfig::default())
    }

    /// A producer with `config`'s batching.
    pub fn with_config(
        backend: Arc<dyn Backend>,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        config: ProducerConfig,
    ) -> Self {
        let shared = Arc::new(Shared {
            backend,
            config,
            state: Mutex::new(Accumulator {
                topics: HashMap::new(),
                failed: None,
                closed: false,
            }),
            wake: Condvar::new(),
        });
        let lingering = shared.clone();
        let lingerer = std::thread::Builder::new()
            .name("riffle-producer-linger".into())
            .spawn(move || linger(&lingering))
            .ok();
        Producer {
            shared,
            key_serde,
            value_serde,
            key: Vec::new(),
            value: Vec::new(),
            lingerer,
        }
    }

    /// Sends `value` under `key` to `topic`, partitioned by the serialized key.
    pub fn send(&mut self, topic: &str, key: &K, value: &V) -> Result<()> {
        self.send_record(topic, ProducerRecord::new(key, value))
    }

    /// Sends a tombstone (a null value) for `key` to `topic`.
    pub fn send_tombstone(&mut self, topic: &str, key: &K) -> Result<()> {
        self.send_record(
            topic,
            ProducerRecord {
                key: Some(key),
                value: None,
                timestamp: None,
                partition: None,
                headers: None,
            },
        )
    }

    /// Sends `record` to `topic`. The topic must exist ([`Error::UnknownTopic`] otherwise); a
    /// partition it does not have is an error naming both.
    pub fn send_record(&mut self, topic: &str, record: ProducerRecord<'_, K, V>) -> Result<()> {
        self.key.clear();
        self.value.clear();
        let unserializable = |origin, source| Error::Serialize {
            origin,
            topic: topic.to_owned(),
            partition: record.partition,
            source,
        };
        // A key its serde calls null (`Serdes::optional`'s `None`) is a null key, as no key is.
        let key = record.key.filter(|k| !self.key_serde.is_null(k));
        if let Some(key) = key
            && let Err(e) = self.key_serde.serialize(key, &mut self.key)
        {
            return Err(unserializable(SerializationExceptionOrigin::Key, e));
        }
        let value = record.value.filter(|v| !self.value_serde.is_null(v));
        if let Some(value) = value
            && let Err(e) = self.value_serde.serialize(value, &mut self.value)
        {
            return Err(unserializable(SerializationExceptionOrigin::Value, e));
        }
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let shared = &*self.shared;
        let mut state = shared.lock();
        if let Some(e) = state.failed.take() {
            return Err(e);
        }
        if !state.topics.contains_key(topic) {
            let Some(partitions) = shared.backend.partitions(topic)? else {
                return Err(Error::UnknownTopic {
                    topic: topic.to_owned(),
                });
            };
            let partitions = (0..partitions.max(1))
                .map(|_| Pending {
                    batch: BatchBuilder::new(shared.config.compression),
                    since: None,
                })
                .collect();
            state.topics.insert(
                topic.to_owned(),
                TopicBatches {
                    partitions,
                    sticky: 0,
                },
            );
        }
        let Some(batches) = state.topics.get_mut(topic) else {
            return Ok(());
        };
        let count = batches.partitions.len() as u32;
        let partition = match (record.partition, key) {
            (Some(p), _) if p < count => p,
            (Some(p), _) => {
                return Err(Error::Config(format!(
                    "topic {topic} has {count} partitions: there is no partition {p}"
                )));
            }
            (None, Some(_)) => partition_for_key(&self.key, count),
            (None, None) => batches.sticky,
        };
        let pending = &mut batches.partitions[partition as usize];
        let headers = record.headers.map(Headers::encoded);
        pending.batch.push_with_headers(
            timestamp,
            key.is_some().then_some(&self.key[..]),
            value.is_some().then_some(&self.value[..]),
            headers.into_iter().flatten(),
        );
        if pending.since.is_none() {
            pending.since = Some(Instant::now());
            shared.wake.notify_one();
        }
        if pending.batch.size_bytes() >= shared.config.batch_size {
            shared
                .backend
                .append(&TopicPartition::new(topic, partition), &mut pending.batch)?;
            pending.since = None;
            if batches.sticky == partition {
                batches.sticky = (partition + 1) % count;
            }
        }
        Ok(())
    }

    /// Appends every batch now (Kafka's `flush`): when it returns, every record sent before is
    /// in the backend.
    pub fn flush(&self) -> Result<()> {
        let mut state = self.shared.lock();
        if let Some(e) = state.failed.take() {
            return Err(e);
        }
        self.shared.append_due(&mut state, true)
    }

    /// Flushes and stops the linger thread.
    pub fn close(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let flushed = self.flush();
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.lingerer.take() {
            let _ = thread.join();
        }
        flushed
    }
}

impl<K, V> Drop for Producer<K, V> {
    fn drop(&mut self) {
        if self.lingerer.is_none() {
            return;
        }
        let mut state = self.shared.lock();
        if let Err(e) = self.shared.append_due(&mut state, true) {
            tracing::error!(error = %e, "a dropped producer could not append its last records");
        }
        state.closed = true;
        drop(state);
        self.shared.wake.notify_all();
        if let Some(thread) = self.lingerer.take() {
            let _ = thread.join();
        }
    }
}

/// The linger thread: sleeps until the oldest batch is `linger` old, appends what is due.
fn linger(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.closed {
            return;
        }
        let oldest = state
            .topics
            .values()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.since)
            .min();
        let Some(oldest) = oldest else {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        let due = oldest + shared.config.linger;
        let now = Instant::now();
        if due > now {
            state = shared
                .wake
                .wait_timeout(state, due - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        if let Err(e) = shared.append_due(&mut state, false) {
            tracing::warn!(error = %e, "appending a lingering batch failed; the next call returns it");
            state.failed = Some(e);
            // Keep the batches: the next flush retries them.
            state = shared
                .wake
                .wait_timeout(state, shared.config.linger.max(Duration::from_millis(100)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
