//! `KTable::suppress`: holding a table's updates back, per key, until its window closes or a
//! time limit passes (Kafka's `Suppressed`, KIP-328).
//!
//! The buffer is a store of its own (in memory, changelogged like every store), so buffered
//! updates survive a crash: under exactly-once an emitted result is neither lost nor repeated.
//! Entries are `0x01 ‖ key` with the value `buffer time (8 bytes BE) ‖ 1 ‖ value bytes` (or
//! `‖ 0` for a buffered tombstone); the observed stream time is the meta entry `0x00 ‖
//! "observed"`. An in-memory index orders the keys by buffer time; it is rebuilt from the store
//! when the task starts.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::processor::Lifecycle;
use crate::processor::node::FlushNode;
use crate::processor::node::{Forward, Node, ProcessingContext, unserializable_state};
use crate::serdes::SerdeRef;
use crate::state::StoreError;
use crate::types::error::SerializationExceptionOrigin::{Key, Value};
use crate::types::error::{Error, Result};
use crate::types::record::Headers;

/// How many updates a suppression buffer may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferConfig {
    pub(crate) max_records: Option<u64>,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) shut_down_when_full: bool,
}

impl BufferConfig {
    /// No limit (Kafka's `unbounded()`): the buffer grows with the open windows' keys.
    pub fn unbounded() -> Self {
        BufferConfig {
            max_records: None,
            max_bytes: None,
            shut_down_when_full: true,
        }
    }

    /// At most `n` buffered keys; when full, the oldest are emitted early.
    pub fn max_records(n: u64) -> Self {
        BufferConfig {
            max_records: Some(n),
            max_bytes: None,
            shut_down_when_full: false,
        }
    }

    /// At most `b` bytes of buffered keys and values; when full, the oldest are emitted early.
    pub fn max_bytes(b: u64) -> Self {
        BufferConfig {
            max_records: None,
            max_bytes: Some(b),
            shut_down_when_full: false,
        }
    }

    /// When full, emit the oldest updates early (the default of a bounded buffer).
    pub fn emit_early_when_full(mut self) -> Self {
        self.shut_down_when_full = false;
        self
    }

    /// When full, stop the application with an error rather than emit early.
    pub fn should_shut_down_when_full(mut self) -> Self {
        self.shut_down_when_full = true;
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SuppressUntil {
    /// A windowed table's final results: each window's last update once the window closes.
    WindowCloses,
    /// An update once it has waited this long (stream time) since its key was buffered.
    TimeLimit(i64),
}

/// What `KTable::suppress` holds back.
#[derive(Clone, Debug)]
pub struct Suppressed {
    pub(crate) until: SuppressUntil,
    pub(crate) buffer: BufferConfig,
    pub(crate) name: Option<String>,
}

impl Suppressed {
    /// Only each window's final result, once stream time has closed the window (Kafka's
    /// `untilWindowCloses`). The buffer must not emit early: give
    /// [`BufferConfig::unbounded`] or a bounded one that shuts down when full.
    pub fn until_window_closes(buffer: BufferConfig) -> Self {
        Suppressed {
            until: SuppressUntil::WindowCloses,
            buffer,
            name: None,
        }
    }

    /// A key's latest update once `limit` of stream time has passed since the key was first
    /// buffered (Kafka's `untilTimeLimit`, a rate limit per key).
    pub fn until_time_limit(limit: Duration, buffer: BufferConfig) -> Self {
        Suppressed {
            until: SuppressUntil::TimeLimit(limit.as_millis().min(i64::MAX as u128) as i64),
            buffer,
            name: None,
        }
    }

    /// Names the buffer's store (and so its changelog topic).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

const OBSERVED: &[u8] = b"\x00observed";

/// A key's buffer time from the key and its update's timestamp.
pub(crate) type BufferTimeFn<K> = Arc<dyn Fn(&K, i64) -> i64 + Send + Sync>;

/// The suppression node.
pub(crate) struct SuppressNode<K, V> {
    pub(crate) store: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    /// The buffer time of a key's first update, from the key and the update's timestamp.
    pub(crate) buffer_time: BufferTimeFn<K>,
    /// How long after its buffer time an update is emitted (0 for final results, whose buffer
    /// time is their window's close).
    pub(crate) delay_ms: i64,
    pub(crate) config: BufferConfig,
    /// Tombstones are dropped rather than emitted (final results: a window's delete needs no
    /// final result).
    pub(crate) drop_tombstones: bool,
    pub(crate) name: String,
    pub(crate) forward: Forward<K, V>,
    pub(crate) observed: i64,
    pub(crate) observed_dirty: bool,
    /// (buffer time, entry key), the next to emit first.
    pub(crate) order: BTreeSet<(i64, Vec<u8>)>,
    /// Entry key → (buffer time, bytes charged).
    pub(crate) index: HashMap<Vec<u8>, (i64, usize)>,
    pub(crate) bytes: usize,
}

impl<K: Clone + 'static, V: Clone + 'static> SuppressNode<K, V> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        store: usize,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        buffer_time: BufferTimeFn<K>,
        delay_ms: i64,
        config: BufferConfig,
        drop_tombstones: bool,
        name: String,
        forward: Forward<K, V>,
    ) -> Self {
        SuppressNode {
            store,
            key_serde,
            value_serde,
            buffer_time,
            delay_ms,
            config,
            drop_tombstones,
            name,
            forward,
            observed: -1,
            observed_dirty: false,
            order: BTreeSet::new(),
            index: HashMap::new(),
            bytes: 0,
        }
    }

    fn buffer(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: Option<V>) -> Result<()> {
        if ctx.timestamp > self.observed {
            self.observed = ctx.timestamp;
            self.observed_dirty = true;
        }
        let mut entry = vec![1u8];
        if let Err(e) = self.key_serde.serialize(&key, &mut entry) {
            return Err(unserializable_state(ctx, self.store, Key, e));
        }
        let time = match self.index.get(&entry) {
            Some(&(time, _)) => time,
            None => (self.buffer_time)(&key, ctx.timestamp),
        };
        let mut bytes = Vec::with_capacity(9 + 16);
        bytes.extend_from_slice(&time.to_be_bytes());
        match &value {
            Some(v) => {
                bytes.push(1);
                if let Err(e) = self.value_serde.serialize(v, &mut bytes) {
                    return Err(unserializable_state(ctx, self.store, Value, e));
                }
            }
            None => bytes.push(0),
        }
        let charge = entry.len() + bytes.len();
        ctx.stores[self.store].put(&entry, Some(&bytes), ctx.timestamp, &ctx.headers);
        if let Some((_, old)) = self.index.insert(entry.clone(), (time, charge)) {
            self.bytes -= old;
        } else {
            self.order.insert((time, entry));
        }
        self.bytes += charge;
        self.enforce(ctx)
    }

    fn over_capacity(&self) -> bool {
        self.config
            .max_records
            .is_some_and(|n| self.index.len() as u64 > n)
            || self.config.max_bytes.is_some_and(|b| self.bytes as u64 > b)
    }

    fn enforce(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let expiry = self.observed.saturating_sub(self.delay_ms);
        while self.order.first().is_some_and(|(t, _)| *t <= expiry) {
            self.emit_first(ctx)?;
        }
        if self.over_capacity() {
            if self.config.shut_down_when_full {
                return Err(Error::IllegalState(format!(
                    "suppression buffer {} is full: {} records, {} bytes (limits {:?} records, {:?} bytes)",
                    self.name,
                    self.index.len(),
                    self.bytes,
                    self.config.max_records,
                    self.config.max_bytes
                )));
            }
            while self.over_capacity() && !self.order.is_empty() {
                self.emit_first(ctx)?;
            }
        }
        Ok(())
    }

    /// Forwards the buffered update with the earliest buffer time and deletes it.
    fn emit_first(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        let Some((_, entry)) = self.order.pop_first() else {
            return Ok(());
        };
        if let Some((_, charge)) = self.index.remove(&entry) {
            self.bytes -= charge;
        }
        let mut bytes = Vec::new();
        let found = ctx.stores[self.store].get_with_timestamp(&entry, &mut bytes)?;
        ctx.stores[self.store].put(&entry, None, ctx.timestamp, &ctx.headers);
        let Some(timestamp) = found else {
            return Ok(());
        };
        let corrupt = |reason: String| {
            Error::Store(StoreError::Corrupt {
                store: self.name.clone(),
                reason,
            })
        };
        if bytes.len() < 9 {
            return Err(corrupt(format!(
                "a buffered update has {} bytes, fewer than its 9-byte header",
                bytes.len()
            )));
        }
        let key = self
            .key_serde
            .deserialize(Some(&entry[1..]))
            .map_err(|e| corrupt(e.to_string()))?;
        let saved = ctx.timestamp;
        ctx.timestamp = timestamp;
        let result = if bytes[8] == 1 {
            match self.value_serde.deserialize(Some(&bytes[9..])) {
                Ok(v) => self.forward.send(ctx, key, v),
                Err(e) => Err(corrupt(e.to_string())),
            }
        } else if self.drop_tombstones {
            Ok(())
        } else {
            self.forward.send_tombstone(ctx, key)
        };
        ctx.timestamp = saved;
        result
    }
}

impl<K: Clone + 'static, V: Clone + 'static> Node<K, V> for SuppressNode<K, V> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        self.buffer(ctx, key, Some(value))
    }
    fn process_tombstone(&mut self, ctx: &mut ProcessingContext<'_>, key: K) -> Result<()> {
        self.buffer(ctx, key, None)
    }
}

impl<K: Clone + 'static, V: Clone + 'static> FlushNode for SuppressNode<K, V> {
    fn flush(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        if self.observed_dirty {
            let headers = Headers::new();
            ctx.stores[self.store].put(
                OBSERVED,
                Some(&self.observed.to_be_bytes()),
                self.observed,
                &headers,
            );
            self.observed_dirty = false;
        }
        Ok(())
    }
}

impl<K: Clone + 'static, V: Clone + 'static> Lifecycle for SuppressNode<K, V> {
    fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
        self.order.clear();
        self.index.clear();
        self.bytes = 0;
        for (entry, bytes) in ctx.stores[self.store].scan(None, None)? {
            if entry.as_slice() == OBSERVED {
                if let Ok(b) = <[u8; 8]>::try_from(bytes.as_slice()) {
                    self.observed = i64::from_be_bytes(b);
                }
                continue;
            }
            let Some(time) = bytes.get(..8) else { continue };
            let mut b = [0u8; 8];
            b.copy_from_slice(time);
            let time = i64::from_be_bytes(b);
            let charge = entry.len() + bytes.len();
            self.bytes += charge;
            self.index.insert(entry.clone(), (time, charge));
            self.order.insert((time, entry));
        }
        Ok(())
    }
    fn close(&mut self) {}
}
