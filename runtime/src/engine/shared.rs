//! What the stream threads of one application instance share: configuration, topology,
//! backend, state directory, coordinator, the stop flag and per-thread slots.
//!
//! Its own module so the application (`app`) and the stream threads (`thread`) both depend on
//! it and not on each other's internals.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use riffle_state_dir::StateDirectory;

use crate::backend::Backend;
use crate::backend::group::{GroupCoordinator, GroupInfo};
use crate::config::StreamsConfig;
use crate::engine::metrics::Registry;
use crate::engine::metrics::ThreadMetrics;
use crate::engine::query::StoreQuery;
use crate::processor::collector::TopicTable;
use crate::state::StoreDatabase;
use crate::state::global::GlobalStore;
use crate::topology::Topology;
use crate::types::error::{Error, Result};

/// What to do when a stream thread dies (Kafka Streams'
/// `StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamThreadExceptionResponse {
    /// Start a new stream thread; the dead thread's tasks move to the live threads and resume
    /// from their stores and checkpoints.
    ReplaceThread,
    /// Stop this application instance (the default).
    ShutdownClient,
}

/// Decides what happens when a stream thread dies.
pub(crate) type ExceptionHandler =
    Arc<dyn Fn(&Error) -> StreamThreadExceptionResponse + Send + Sync>;

/// What the threads of one application share.
pub(crate) struct AppShared {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Topology,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) topics: Arc<TopicTable>,
    pub(crate) state_dir: Arc<StateDirectory>,
    /// The one database of every persistent store, if the topology has any.
    pub(crate) store_db: Option<Arc<StoreDatabase>>,
    pub(crate) coordinator: Arc<dyn GroupCoordinator>,
    pub(crate) group: GroupInfo,
    pub(crate) shutdown: AtomicBool,
    pub(crate) records_processed: AtomicU64,
    /// Per thread: the data version at which it was last idle, `u64::MAX` while busy.
    pub(crate) idle_versions: Vec<AtomicU64>,
    /// The global tables' stores, by the topology's index ([`crate::engine::global`]).
    pub(crate) globals: Vec<Arc<GlobalStore>>,
    /// The global thread's idle version (as `idle_versions`; `u64::MAX` while busy), counted
    /// by [`crate::StreamsApp::is_idle`] when there are global tables.
    pub(crate) global_idle: AtomicU64,
    /// Records the global thread read restoring the global stores at start.
    pub(crate) global_records_restored: AtomicU64,
    pub(crate) thread_metrics: Vec<Arc<ThreadMetrics>>,
    pub(crate) handles: Mutex<Vec<JoinHandle<Result<()>>>>,
    pub(crate) handler: Mutex<ExceptionHandler>,
    pub(crate) thread_numbers: AtomicUsize,
    pub(crate) threads_replaced: AtomicU64,
    /// The input record (topic, partition, offset) a stream thread last died on: a
    /// replacement dying on the same record shuts the application down instead of replaying it
    /// forever.
    pub(crate) last_failed_record: Mutex<Option<(String, u32, u64)>>,
    /// The tasks' and stores' metrics.
    pub(crate) registry: Registry,
    /// Per thread slot: interactive queries waiting for the thread, and whether there are any
    /// (what the thread's loop looks at).
    pub(crate) queries: Vec<Mutex<Vec<StoreQuery>>>,
    pub(crate) query_pending: Vec<AtomicBool>,
}
