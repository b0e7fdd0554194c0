//! What one application instance is wired to, fixed once it is built: its configuration and
//! topology, the backend, the resolved topics, the state directory and store database, and its
//! group coordinator with the group it joined.
//!
//! The application (`app`) builds it and shares it, behind an `Arc`, with the parts that read it:
//! the stream and global threads, interactive queries and key metadata. What changes while the
//! instance runs lives elsewhere, each part in the module that owns it: the stop flag and idle
//! versions ([`super::lifecycle`]), the metrics ([`super::metrics`]), the query inboxes
//! ([`super::query`]), the global tables ([`super::global`]), and the threads' supervision (in
//! `app`).

use std::sync::Arc;

use riffle_state_dir::StateDirectory;

use crate::backend::Backend;
use crate::backend::group::{GroupCoordinator, GroupInfo};
use crate::config::StreamsConfig;
use crate::processor::collector::TopicTable;
use crate::state::StoreDatabase;
use crate::topology::Topology;

/// An application instance's static wiring.
pub(crate) struct InstanceWiring {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Topology,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) topics: Arc<TopicTable>,
    pub(crate) state_dir: Arc<StateDirectory>,
    /// The one database of every persistent store, if the topology has any.
    pub(crate) store_db: Option<Arc<StoreDatabase>>,
    pub(crate) coordinator: Arc<dyn GroupCoordinator>,
    pub(crate) group: GroupInfo,
}
