//! [`TopologyTestDriver`]: runs a [`Topology`] in the calling thread, with no stream threads,
//! no files and no backend to set up (Kafka Streams' `TopologyTestDriver`).
//!
//! Every topic has one partition, so each sub-topology is one task (`<sub>_0`). A piped record
//! is appended to its topic in an in-memory log, then the driver does what a stream thread
//! does — the same tasks, nodes, record caches and commit code — until nothing is left: it
//! processes every task's records (stream-time punctuators fire as stream time reaches them),
//! then commits (cached aggregates are forwarded, changelogs and outputs written), and repeats
//! while a repartition topic has records for a downstream task. So, as in Kafka's driver,
//! each piped record is committed before `pipe_input` returns; wall-clock punctuators fire
//! only when [`TopologyTestDriver::advance_wall_clock_time`] moves the mocked clock.
//!
//! ```
//! use riffle::{Consumed, Produced, Serdes, StreamsBuilder, StreamsConfig, TopologyTestDriver};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("words", Consumed::with(Serdes::string(), Serdes::string()))
//!     .group_by_key()
//!     .count()
//!     .to_stream()
//!     .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
//! let driver = TopologyTestDriver::new(builder.build()?, StreamsConfig::new("test"))?;
//! let words = driver.create_input_topic("words", Serdes::string(), Serdes::string());
//! let counts = driver.create_output_topic("counts", Serdes::string(), Serdes::i64());
//! words.pipe_input("a".into(), "x".into())?;
//! words.pipe_input("a".into(), "y".into())?;
//! assert_eq!(counts.read_key_values_to_list()?, [("a".to_string(), 1), ("a".to_string(), 2)]);
//! # Ok::<(), riffle::Error>(())
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use riffle_log::Log;
use riffle_record::{BatchBuilder, Compression, TopicPartition};
use riffle_state_dir::TaskId;

use crate::app::add_dead_letter_queue;
use crate::app::resolve_topics;
use crate::backend::{Backend, EmbeddedBackend, TopicKind};
use crate::config::StreamsConfig;
use crate::engine::global::GlobalState;
use crate::engine::task::{StreamTask, TaskStores};
use crate::processor::StoreScratch;
use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::processor::window_store::SessionStore;
use crate::processor::window_store::WindowStore;
use crate::processor::{KeyValueStore, StoreSerdes, system_time_ms};
use crate::serdes::SerdeRef;
use crate::state::CachedStore;
use crate::topology::StoreDef;
use crate::topology::StoreKind;
use crate::topology::{TopicRef, Topology};
use crate::types::error::{Error, Result};
use crate::types::handlers::Handlers;
use crate::types::record::Headers;
use crate::types::window::Windowed;

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

struct Inner {
    app_id: String,
    topology: Arc<Topology>,
    log: Log,
    backend: Arc<dyn Backend>,
    /// One task per sub-topology, in sub-topology order.
    tasks: Vec<StreamTask>,
    collector: RecordCollector,
    scratch: Scratch,
    builder: BatchBuilder,
    wall_clock_ms: i64,
    fetch_max_bytes: usize,
    dropped_records: u64,
    handlers: Handlers,
    /// The global tables, caught up before the tasks process (as the global thread restores
    /// them before the stream threads start, and follows them).
    globals: GlobalState,
}

/// Runs a topology without threads, files or a backend, for unit tests.
pub struct TopologyTestDriver {
    inner: Rc<RefCell<Inner>>,
}

impl std::fmt::Debug for TopologyTestDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyTestDriver").finish_non_exhaustive()
    }
}

impl TopologyTestDriver {
    /// A driver for `topology`, its mocked wall clock starting at the current time.
    pub fn new(topology: Topology, config: StreamsConfig) -> Result<Self> {
        Self::with_wall_clock(topology, config, system_time_ms())
    }

    /// A driver whose mocked wall clock starts at `wall_clock_ms`.
    pub fn with_wall_clock(
        topology: Topology,
        config: StreamsConfig,
        wall_clock_ms: i64,
    ) -> Result<Self> {
        config.validate()?;
        if topology.nodes.is_empty() {
            return Err(Error::Topology("the topology has no nodes".into()));
        }
        let log = Log::in_memory();
        let backend = EmbeddedBackend::new(log.clone()).shared();
        let app_id = config.application_id.clone();
        for sub in &topology.subtopologies {
            for topic in &sub.source_topics {
                if let TopicRef::External(name) = topic {
                    backend.create_topic(name, 1, TopicKind::User)?;
                }
            }
        }
        for global in &topology.globals {
            if backend.partitions(&global.topic)?.is_none() {
                backend.create_topic(&global.topic, 1, TopicKind::User)?;
            }
        }
        let globals = GlobalState::open(
            &topology,
            &*backend,
            None,
            config.deserialization_exception_handler.clone(),
        )?;
        let (mut topics, _) = resolve_topics(&topology, &app_id, &*backend)?;
        add_dead_letter_queue(&mut topics, &config, &*backend)?;
        let topics = Arc::new(topics);
        let mut collector = RecordCollector::new(
            backend.clone(),
            topics.clone(),
            Compression::None,
            config.batch_max_bytes,
            config.max_request_size,
            false,
            &Handlers::of(&config),
        );
        let mut scratch = Scratch::default();
        let mut tasks = Vec::new();
        for sub in &topology.subtopologies {
            let id = TaskId::new(sub.id, 0);
            let stores = TaskStores::open(id, &topology, sub, &topics, &app_id, None, None)?;
            let mut task = StreamTask::create(
                stores,
                &topology,
                sub,
                &topics,
                &app_id,
                &*backend,
                &config,
                globals.stores(),
            )?;
            task.init(&mut collector, &mut scratch, wall_clock_ms)?;
            tasks.push(task);
        }
        let inner = Inner {
            app_id,
            topology: Arc::new(topology),
            log,
            backend,
            tasks,
            collector,
            scratch,
            builder: BatchBuilder::new(Compression::None),
            wall_clock_ms,
            fetch_max_bytes: config.fetch_max_bytes,
            dropped_records: 0,
            handlers: Handlers::of(&config),
            globals,
        };
        let driver = TopologyTestDriver {
            inner: Rc::new(RefCell::new(inner)),
        };
        // What `init` forwarded or wrote, committed as a thread would.
        driver.inner.borrow_mut().run(true)?;
        Ok(driver)
    }

    /// An input topic of the topology; piped records get the driver's wall-clock time at
    /// creation as their timestamp unless given one.
    pub fn create_input_topic<K: 'static, V: 'static>(
        &self,
        topic: &str,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> TestInputTopic<K, V> {
        let time = self.inner.borrow().wall_clock_ms;
        TestInputTopic {
            inner: self.inner.clone(),
            topic: topic.to_owned(),
            key_serde,
            value_serde,
            time: std::cell::Cell::new(time),
            advance: 0,
        }
    }

    /// An input topic whose piped records start at `start_ms` and advance by `auto_advance`
    /// each (Kafka's `createInputTopic(name, ..., startTimestamp, autoAdvance)`).
    pub fn create_input_topic_at<K: 'static, V: 'static>(
        &self,
        topic: &str,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        start_ms: i64,
        auto_advance: Duration,
    ) -> TestInputTopic<K, V> {
        let mut input = self.create_input_topic(topic, key_serde, value_serde);
        input.time.set(start_ms);
        input.advance = i64::try_from(auto_advance.as_millis()).unwrap_or(i64::MAX);
        input
    }

    /// A topic the topology writes, read from its first record on.
    pub fn create_output_topic<K: 'static, V: 'static>(
        &self,
        topic: &str,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> TestOutputTopic<K, V> {
        TestOutputTopic {
            inner: self.inner.clone(),
            tp: TopicPartition::new(topic, 0),
            key_serde,
            value_serde,
            position: std::cell::Cell::new(0),
        }
    }

    /// Moves the mocked wall clock on by `advance`, fires the wall-clock punctuators due, and
    /// processes and commits what they produced.
    pub fn advance_wall_clock_time(&self, advance: Duration) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        let ms = i64::try_from(advance.as_millis()).unwrap_or(i64::MAX);
        inner.wall_clock_ms = inner.wall_clock_ms.saturating_add(ms);
        inner.punctuate_wall_clock()?;
        inner.run(true)
    }

    /// The mocked wall-clock time, in ms.
    pub fn wall_clock_ms(&self) -> i64 {
        self.inner.borrow().wall_clock_ms
    }

    /// The key-value store `name`, typed as its builder (or its DSL aggregation) made it.
    pub fn get_key_value_store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> Result<TestKeyValueStore<K, V>> {
        let (store, task, slot) = self.locate::<K, V>(name)?;
        let kind = self.inner.borrow().topology.stores[store].kind;
        if kind != StoreKind::KeyValue {
            return Err(Error::Topology(format!(
                "store {name:?} is a window or session store: read it with get_window_store or get_session_store"
            )));
        }
        Ok(TestKeyValueStore {
            at: StoreAt {
                inner: self.inner.clone(),
                store,
                task,
                slot,
            },
            _types: std::marker::PhantomData,
        })
    }

    /// The window store `name` (a windowed aggregation's, keyed by the aggregation's key, or
    /// one built with [`crate::Stores::window_store_builder`]).
    pub fn get_window_store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> Result<TestWindowStore<K, V>> {
        let (store, task, slot) = self.locate::<K, V>(name)?;
        Ok(TestWindowStore {
            at: StoreAt {
                inner: self.inner.clone(),
                store,
                task,
                slot,
            },
            _types: std::marker::PhantomData,
        })
    }

    /// The session store `name` (a session aggregation's, or one built with
    /// [`crate::Stores::session_store_builder`]).
    pub fn get_session_store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> Result<TestSessionStore<K, V>> {
        let (store, task, slot) = self.locate::<K, V>(name)?;
        Ok(TestSessionStore {
            at: StoreAt {
                inner: self.inner.clone(),
                store,
                task,
                slot,
            },
            _types: std::marker::PhantomData,
        })
    }

    /// The store `name` holding `K` keys and `V` values: its index, its task and its slot in
    /// the task.
    fn locate<K: 'static, V: 'static>(&self, name: &str) -> Result<(usize, usize, usize)> {
        let inner = self.inner.borrow();
        let topology = &inner.topology;
        let Some(store) = topology.stores.iter().position(|s| s.name == name) else {
            return Err(Error::Topology(format!("no store is named {name:?}")));
        };
        let Some(sub) = topology
            .subtopologies
            .iter()
            .position(|s| s.stores.contains(&store))
        else {
            return Err(Error::Topology(format!(
                "store {name:?} is not connected to any processor"
            )));
        };
        let ok = topology.stores[store]
            .serdes
            .as_ref()
            .is_some_and(|s| s.downcast_ref::<StoreSerdes<K, V>>().is_some());
        if !ok {
            return Err(Error::Topology(format!(
                "store {name:?} does not hold {} keys and {} values",
                std::any::type_name::<K>(),
                std::any::type_name::<V>()
            )));
        }
        let slot = topology.subtopologies[sub]
            .stores
            .iter()
            .position(|&s| s == store)
            .unwrap_or_default();
        Ok((store, sub, slot))
    }

    /// Records of `topic` (partition 0) the topology wrote, from offset `from`: for tests
    /// reading internal topics.
    pub fn read_raw(&self, topic: &str, from: u64) -> Result<Vec<riffle_record::Record>> {
        let inner = self.inner.borrow();
        inner.read(&TopicPartition::new(topic, 0), from)
    }

    /// Closes every processor (`Processor::close`) and drops the driver's state (Kafka's
    /// `TopologyTestDriver.close`). Topics and stores handed out before fail afterwards.
    pub fn close(self) {
        let mut inner = self.inner.borrow_mut();
        for task in std::mem::take(&mut inner.tasks) {
            drop(task.into_stores());
        }
    }

    /// Records dropped so far because they came too late for their windows (Kafka's
    /// `dropped-records` metric).
    pub fn dropped_records(&self) -> u64 {
        self.inner.borrow().dropped_records
    }

    /// The application id internal topics are named with.
    pub fn application_id(&self) -> String {
        self.inner.borrow().app_id.clone()
    }
}

impl Inner {
    /// Processes and commits until no task has anything left, as a stream thread would.
    /// `force`: commit every task even if it processed nothing (after `init` or punctuation).
    fn run(&mut self, force: bool) -> Result<()> {
        let mut dirty = vec![force; self.tasks.len()];
        self.globals
            .catch_up_fully(&*self.backend, self.fetch_max_bytes)?;
        loop {
            loop {
                let mut round = 0;
                for (t, task) in self.tasks.iter_mut().enumerate() {
                    for i in 0..task.input_partitions().len() {
                        task.fetch_input(i, &*self.backend, self.fetch_max_bytes)?;
                    }
                    task.set_wall_clock(self.wall_clock_ms);
                    let n = task.process(
                        usize::MAX,
                        &mut self.collector,
                        &mut self.scratch,
                        &self.handlers,
                    )?;
                    task.take_commit_request();
                    self.dropped_records += task.take_dropped_records();
                    if n > 0 {
                        dirty[t] = true;
                        round += n;
                    }
                }
                // Repartition topics' records become visible to the tasks reading them.
                self.collector.flush()?;
                if round == 0 {
                    break;
                }
            }
            if !dirty.iter().any(|&d| d) {
                return Ok(());
            }
            // A commit may forward cached aggregates into a repartition topic: the next round
            // processes them.
            self.commit(&dirty)?;
            dirty.iter_mut().for_each(|d| *d = false);
        }
    }

    /// The stream thread's commit, for the tasks marked `dirty`.
    fn commit(&mut self, dirty: &[bool]) -> Result<()> {
        for (t, task) in self.tasks.iter_mut().enumerate() {
            if dirty[t] {
                task.flush_nodes(&mut self.collector, &mut self.scratch)?;
            }
        }
        for (t, task) in self.tasks.iter_mut().enumerate() {
            if dirty[t] {
                task.write_changelogs(&mut self.collector)?;
            }
        }
        let mut offsets = Vec::new();
        for (t, task) in self.tasks.iter().enumerate() {
            if dirty[t] && (task.uncommitted > 0 || task.offsets_moved) {
                task.committable_offsets(&mut offsets);
            }
        }
        self.collector.flush()?;
        self.backend
            .commit_offsets(&self.app_id, "test-driver", &offsets)?;
        for (t, task) in self.tasks.iter_mut().enumerate() {
            if dirty[t] {
                task.committed(&self.collector)?;
            }
        }
        Ok(())
    }

    fn punctuate_wall_clock(&mut self) -> Result<()> {
        for task in &mut self.tasks {
            task.punctuate_wall_clock(self.wall_clock_ms, &mut self.collector, &mut self.scratch)?;
            task.take_commit_request();
        }
        self.collector.flush()
    }

    fn pipe(
        &mut self,
        topic: &str,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &Headers,
    ) -> Result<()> {
        let tp = TopicPartition::new(topic, 0);
        if self.log.partitions(topic).is_none() {
            return Err(Error::Topology(format!(
                "{topic} is not an input topic of the topology"
            )));
        }
        self.builder
            .push_with_headers(timestamp, Some(key), value, headers.encoded());
        self.log.append(&tp, &mut self.builder)?;
        self.run(false)
    }

    /// The records of `tp` from offset `from` on, at most `max`.
    fn read_at_most(
        &self,
        tp: &TopicPartition,
        from: u64,
        max: usize,
    ) -> Result<Vec<riffle_record::Record>> {
        if self.log.partitions(&tp.topic).is_none() {
            return Err(Error::Topology(format!(
                "the topology writes no topic {}",
                tp.topic
            )));
        }
        let mut out = Vec::new();
        let mut at = from;
        while out.len() < max {
            let batches = self.log.fetch(tp, at, 1 << 20)?;
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for record in batch.records() {
                    let record = record?;
                    if record.offset() >= at && out.len() < max {
                        at = record.offset() + 1;
                        out.push(record);
                    }
                }
            }
        }
        Ok(out)
    }

    fn read(&self, tp: &TopicPartition, from: u64) -> Result<Vec<riffle_record::Record>> {
        self.read_at_most(tp, from, usize::MAX)
    }
}

/// An input topic of a [`TopologyTestDriver`].
pub struct TestInputTopic<K, V> {
    inner: Rc<RefCell<Inner>>,
    topic: String,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    time: std::cell::Cell<i64>,
    advance: i64,
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

    /// Pipes a record with its headers.
    pub fn pipe_record(&self, record: TestRecord<K, V>) -> Result<()> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        self.key_serde.serialize(&record.key, &mut key);
        // A value its serde writes as a null ([`crate::OptionSerde`]'s `None`) is piped as one.
        let null = self.value_serde.is_null(&record.value);
        if !null {
            self.value_serde.serialize(&record.value, &mut value);
        }
        let value = (!null).then_some(&value[..]);
        self.inner
            .borrow_mut()
            .pipe(&self.topic, &key, value, record.timestamp, &record.headers)
    }

    /// Pipes a record without a value (a tombstone: a table's delete) with timestamp
    /// `timestamp_ms` (Kafka's `pipeInput(key, null)`).
    pub fn pipe_tombstone_at(&self, key: K, timestamp_ms: i64) -> Result<()> {
        let mut bytes = Vec::new();
        self.key_serde.serialize(&key, &mut bytes);
        self.inner
            .borrow_mut()
            .pipe(&self.topic, &bytes, None, timestamp_ms, &Headers::new())
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

/// An output topic of a [`TopologyTestDriver`]: reads what the topology wrote, in order.
pub struct TestOutputTopic<K, V> {
    inner: Rc<RefCell<Inner>>,
    tp: TopicPartition,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    position: std::cell::Cell<u64>,
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

/// A store of a [`TopologyTestDriver`]'s task, to read (and write) between piped records.
pub struct TestKeyValueStore<K, V> {
    at: StoreAt,
    _types: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> TestKeyValueStore<K, V> {
    fn with<T>(&self, f: impl FnOnce(&mut KeyValueStore<'_, K, V>) -> Result<T>) -> Result<T> {
        self.at.with::<K, V, T>(|_, serdes, store, scratch, id| {
            f(&mut KeyValueStore::new(store, scratch, serdes, id))
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        self.with(|s| s.get(key))
    }

    /// Every entry, in key order.
    pub fn all(&self) -> Result<Vec<(K, V)>> {
        self.with(|s| s.all())
    }

    /// The entries with `from <= key <= to`.
    pub fn range(&self, from: &K, to: &K) -> Result<Vec<(K, V)>> {
        self.with(|s| s.range(from, to))
    }

    /// About how many entries there are.
    pub fn approximate_num_entries(&self) -> Result<u64> {
        self.with(|s| Ok(s.approximate_num_entries()))
    }

    /// Sets `key` to `value` (committed with the next piped record).
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        self.with(|s| s.put(key, value))
    }
}

/// A window store of a topology under test, read between piped records.
pub struct TestWindowStore<K, V> {
    at: StoreAt,
    _types: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> TestWindowStore<K, V> {
    fn with<T>(&self, f: impl FnOnce(&mut WindowStore<'_, K, V>) -> Result<T>) -> Result<T> {
        self.at.with::<K, V, T>(|def, serdes, store, scratch, id| {
            let StoreKind::Window {
                window_ms,
                retain_duplicates,
                ..
            } = def.kind
            else {
                return Err(Error::Topology(format!(
                    "store {:?} is not a window store",
                    def.name
                )));
            };
            f(&mut WindowStore::new(
                store,
                scratch,
                serdes,
                window_ms,
                retain_duplicates,
                0,
                id,
            ))
        })
    }

    /// `key`'s windows starting in `[time_from, time_to]`: (start, value).
    pub fn fetch(&self, key: &K, time_from: i64, time_to: i64) -> Result<Vec<(i64, V)>> {
        self.with(|s| s.fetch(key, time_from, time_to))
    }

    /// The windows of keys `key_from..=key_to` starting in `[time_from, time_to]`.
    pub fn fetch_range(
        &self,
        key_from: &K,
        key_to: &K,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.fetch_range(key_from, key_to, time_from, time_to))
    }

    /// Every window the store holds.
    pub fn all(&self) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.all())
    }

    /// Every key's windows starting in `[time_from, time_to]`.
    pub fn fetch_all(&self, time_from: i64, time_to: i64) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.fetch_all(time_from, time_to))
    }
}

/// A session store of a topology under test, read between piped records.
pub struct TestSessionStore<K, V> {
    at: StoreAt,
    _types: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> TestSessionStore<K, V> {
    fn with<T>(&self, f: impl FnOnce(&mut SessionStore<'_, K, V>) -> Result<T>) -> Result<T> {
        self.at.with::<K, V, T>(|def, serdes, store, scratch, id| {
            if !matches!(def.kind, StoreKind::Session { .. }) {
                return Err(Error::Topology(format!(
                    "store {:?} is not a session store",
                    def.name
                )));
            }
            f(&mut SessionStore::new(store, scratch, serdes, 0, id))
        })
    }

    /// Every session of `key`.
    pub fn fetch(&self, key: &K) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.fetch(key))
    }

    /// `key`'s sessions ending at or after `earliest_end` and starting at or before
    /// `latest_start`.
    pub fn find_sessions(
        &self,
        key: &K,
        earliest_end: i64,
        latest_start: i64,
    ) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.find_sessions(key, earliest_end, latest_start))
    }

    /// Every session the store holds.
    pub fn all(&self) -> Result<Vec<(Windowed<K>, V)>> {
        self.with(|s| s.all())
    }
}

/// Where a store of the driver's topology is: its index, its task, its slot in the task.
struct StoreAt {
    inner: Rc<RefCell<Inner>>,
    store: usize,
    task: usize,
    slot: usize,
}

impl StoreAt {
    /// Calls `f` with the store's definition, its typed serdes, the store, the scratch buffers
    /// and its task's id.
    fn with<K: 'static, V: 'static, T>(
        &self,
        f: impl FnOnce(
            &StoreDef,
            &StoreSerdes<K, V>,
            &mut CachedStore,
            &mut StoreScratch,
            riffle_state_dir::TaskId,
        ) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.inner.borrow_mut();
        let inner = &mut *guard;
        let topology = inner.topology.clone();
        let def = &topology.stores[self.store];
        let serdes = def
            .serdes
            .as_ref()
            .and_then(|s| s.downcast_ref::<StoreSerdes<K, V>>())
            .ok_or_else(|| Error::IllegalState("store serdes changed".into()))?;
        let task = &mut inner.tasks[self.task];
        let id = task.id;
        f(
            def,
            serdes,
            &mut task.stores.stores[self.slot],
            &mut inner.scratch.store,
            id,
        )
    }
}
