//! The driver: [`TopologyTestDriver`] sets up a topology's tasks over an in-memory log and runs
//! them as a stream thread would (process, punctuate, commit) until nothing is left; it hands
//! out the test topics and stores of `topics.rs` and `stores.rs`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use riffle_log::Log;
use riffle_record::{BatchBuilder, Compression, TopicPartition};
use riffle_state_dir::TaskId;

use super::stores::{StoreAt, TestKeyValueStore, TestSessionStore, TestWindowStore};
use super::topics::{TestInputTopic, TestOutputTopic};
use crate::app::add_dead_letter_queue;
use crate::app::resolve_topics;
use crate::backend::{Backend, EmbeddedBackend, TopicKind};
use crate::config::StreamsConfig;
use crate::engine::global::GlobalState;
use crate::engine::task::{StreamTask, TaskStores};
use crate::processor::collector::RecordCollector;
use crate::processor::node::Scratch;
use crate::processor::{StoreSerdes, system_time_ms};
use crate::serdes::SerdeRef;
use crate::topology::StoreKind;
use crate::topology::{TopicRef, Topology};
use crate::types::error::{Error, Result};
use crate::types::handlers::Handlers;
use crate::types::record::Headers;

pub(super) struct Inner {
    app_id: String,
    pub(super) topology: Arc<Topology>,
    log: Log,
    backend: Arc<dyn Backend>,
    /// One task per sub-topology, in sub-topology order.
    pub(super) tasks: Vec<StreamTask>,
    collector: RecordCollector,
    pub(super) scratch: Scratch,
    builder: BatchBuilder,
    wall_clock_ms: i64,
    fetch_max_bytes: usize,
    dropped_records: u64,
    handlers: Handlers,
    /// The global tables, caught up before the tasks process (as the global thread restores
    /// them before the stream threads start, and follows them).
    globals: GlobalState,
}

/// Runs a topology without threads, files or a backend, for unit tests. Every store is in
/// memory, whatever its `StoreType` (Kafka's driver opens its persistent stores in a temporary
/// state directory): the DSL's results are the same on both types.
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
        mut topology: Topology,
        config: StreamsConfig,
        wall_clock_ms: i64,
    ) -> Result<Self> {
        config.validate()?;
        topology.configure_caching(config.statestore_cache_max_bytes);
        if topology.nodes.is_empty() {
            return Err(Error::Topology("the topology has no nodes".into()));
        }
        // Every topic has one partition here, a repartition topic given more too (Kafka's
        // driver has no partitions at all).
        topology.partition_counts.clear();
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
        // A topic a `TopicNameExtractor` names is created, as Kafka's driver takes any topic.
        collector.create_missing_dynamic_topics();
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

    pub(super) fn pipe(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
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
            .push_with_headers(timestamp, key, value, headers.encoded());
        self.log.append(&tp, &mut self.builder)?;
        self.run(false)
    }

    /// The records of `tp` from offset `from` on, at most `max`.
    pub(super) fn read_at_most(
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

    pub(super) fn read(
        &self,
        tp: &TopicPartition,
        from: u64,
    ) -> Result<Vec<riffle_record::Record>> {
        self.read_at_most(tp, from, usize::MAX)
    }
}
