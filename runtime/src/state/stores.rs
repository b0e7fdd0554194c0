//! Stores for the processor API (Kafka Streams' `Stores`): pick where a store lives, then
//! build it with its serdes, caching and changelog.
//!
//! ```
//! use riffle::{Serdes, Stores, StreamsBuilder};
//! let builder = StreamsBuilder::new();
//! builder.add_state_store(
//!     Stores::key_value_store_builder(
//!         Stores::persistent_key_value_store("seen"),
//!         Serdes::string(),
//!         Serdes::i64(),
//!     )
//!     .with_caching_enabled(),
//! );
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use std::time::Duration;

use crate::serdes::SerdeRef;
use crate::state::def::StoreSerdes;
use crate::state::def::{StoreDef, StoreKind};
use crate::types::window::segment_interval;

/// Where a key-value store keeps its bytes (Kafka's `KeyValueBytesStoreSupplier`).
#[derive(Clone, Debug)]
pub struct KeyValueBytesStoreSupplier {
    name: String,
    persistent: bool,
}

impl KeyValueBytesStoreSupplier {
    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Where a window store keeps its bytes and for how long (Kafka's
/// `WindowBytesStoreSupplier`).
#[derive(Clone, Debug)]
pub struct WindowBytesStoreSupplier {
    name: String,
    persistent: bool,
    retention_ms: i64,
    window_ms: i64,
    retain_duplicates: bool,
}

impl WindowBytesStoreSupplier {
    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Where a session store keeps its bytes and for how long (Kafka's `SessionBytesStoreSupplier`).
#[derive(Clone, Debug)]
pub struct SessionBytesStoreSupplier {
    name: String,
    persistent: bool,
    retention_ms: i64,
}

impl SessionBytesStoreSupplier {
    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// Builds a store for processors: name, serdes, caching and changelog (Kafka's
/// `StoreBuilder`). Logging is on and caching off unless changed, as in Kafka. Key-value,
/// window and session stores are built alike; a processor asks for the matching handle
/// (`get_state_store`, `get_window_store`, `get_session_store`).
pub struct StoreBuilder<K, V> {
    supplier: KeyValueBytesStoreSupplier,
    kind: StoreKind,
    key_serde: SerdeRef<K>,
    value_serde: SerdeRef<V>,
    caching: bool,
    logging: bool,
}

impl<K, V> std::fmt::Debug for StoreBuilder<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("name", &self.supplier.name)
            .field("persistent", &self.supplier.persistent)
            .field("caching", &self.caching)
            .field("logging", &self.logging)
            .finish()
    }
}

impl<K: 'static, V: 'static> StoreBuilder<K, V> {
    /// The store's name; its changelog is `<application_id>-<name>-changelog`.
    pub fn name(&self) -> &str {
        &self.supplier.name
    }

    /// Caches writes between commits: the changelog gets each key's latest value once per
    /// commit instead of every write.
    pub fn with_caching_enabled(mut self) -> Self {
        self.caching = true;
        self
    }

    /// Every write goes to the changelog at the next commit (the default).
    pub fn with_caching_disabled(mut self) -> Self {
        self.caching = false;
        self
    }

    /// Keeps a changelog (the default). `config` is Kafka's changelog topic configs; riffle
    /// does not apply them yet (the embedded log has no per-topic configs, and the Kafka
    /// backend creates every changelog compacted with the broker's defaults).
    pub fn with_logging_enabled(mut self, config: BTreeMap<String, String>) -> Self {
        let _ = config;
        self.logging = true;
        self
    }

    /// No changelog: the store is not restored after its state is lost (an in-memory store
    /// starts empty on every start).
    pub fn with_logging_disabled(mut self) -> Self {
        self.logging = false;
        self
    }

    pub(crate) fn into_def(self) -> StoreDef {
        StoreDef {
            name: self.supplier.name,
            logged: self.logging,
            persistent: self.supplier.persistent,
            caching: self.caching,
            timestamped: false,
            serdes: Some(Arc::new(StoreSerdes {
                key: self.key_serde,
                value: self.value_serde,
            })),
            kind: self.kind,
            ordered_cache: false,
            source_topic: None,
        }
    }
}

/// Factories for stores (Kafka Streams' `Stores`).
#[derive(Debug)]
pub struct Stores;

impl Stores {
    /// A store on disk (fjall) in the task's state directory.
    pub fn persistent_key_value_store(name: impl Into<String>) -> KeyValueBytesStoreSupplier {
        KeyValueBytesStoreSupplier {
            name: name.into(),
            persistent: true,
        }
    }

    /// A store in memory, rebuilt from its changelog when its task starts.
    pub fn in_memory_key_value_store(name: impl Into<String>) -> KeyValueBytesStoreSupplier {
        KeyValueBytesStoreSupplier {
            name: name.into(),
            persistent: false,
        }
    }

    /// A builder for a typed key-value store over `supplier`.
    pub fn key_value_store_builder<K: 'static, V: 'static>(
        supplier: KeyValueBytesStoreSupplier,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> StoreBuilder<K, V> {
        StoreBuilder {
            supplier,
            kind: StoreKind::KeyValue,
            key_serde,
            value_serde,
            caching: false,
            logging: true,
        }
    }

    /// A window store on disk (fjall), keeping windows `retention` (at least `window_size`)
    /// in time segments; `retain_duplicates` keeps every put of a key and window (for joins).
    pub fn persistent_window_store(
        name: impl Into<String>,
        retention: Duration,
        window_size: Duration,
        retain_duplicates: bool,
    ) -> WindowBytesStoreSupplier {
        WindowBytesStoreSupplier {
            name: name.into(),
            persistent: true,
            retention_ms: ms(retention).max(ms(window_size)),
            window_ms: ms(window_size),
            retain_duplicates,
        }
    }

    /// A window store in memory, rebuilt from its changelog when its task starts.
    pub fn in_memory_window_store(
        name: impl Into<String>,
        retention: Duration,
        window_size: Duration,
        retain_duplicates: bool,
    ) -> WindowBytesStoreSupplier {
        WindowBytesStoreSupplier {
            persistent: false,
            ..Self::persistent_window_store(name, retention, window_size, retain_duplicates)
        }
    }

    /// A session store on disk (fjall), keeping sessions `retention` after their end.
    pub fn persistent_session_store(
        name: impl Into<String>,
        retention: Duration,
    ) -> SessionBytesStoreSupplier {
        SessionBytesStoreSupplier {
            name: name.into(),
            persistent: true,
            retention_ms: ms(retention),
        }
    }

    /// A session store in memory, rebuilt from its changelog when its task starts.
    pub fn in_memory_session_store(
        name: impl Into<String>,
        retention: Duration,
    ) -> SessionBytesStoreSupplier {
        SessionBytesStoreSupplier {
            persistent: false,
            ..Self::persistent_session_store(name, retention)
        }
    }

    /// A builder for a typed window store over `supplier`.
    pub fn window_store_builder<K: 'static, V: 'static>(
        supplier: WindowBytesStoreSupplier,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> StoreBuilder<K, V> {
        StoreBuilder {
            supplier: KeyValueBytesStoreSupplier {
                name: supplier.name,
                persistent: supplier.persistent,
            },
            kind: StoreKind::Window {
                retention_ms: supplier.retention_ms,
                segment_ms: segment_interval(supplier.retention_ms),
                ordered: true,
                window_ms: supplier.window_ms,
                retain_duplicates: supplier.retain_duplicates,
            },
            key_serde,
            value_serde,
            caching: false,
            logging: true,
        }
    }

    /// A builder for a typed session store over `supplier`.
    pub fn session_store_builder<K: 'static, V: 'static>(
        supplier: SessionBytesStoreSupplier,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
    ) -> StoreBuilder<K, V> {
        StoreBuilder {
            supplier: KeyValueBytesStoreSupplier {
                name: supplier.name,
                persistent: supplier.persistent,
            },
            kind: StoreKind::Session {
                retention_ms: supplier.retention_ms,
                segment_ms: segment_interval(supplier.retention_ms),
            },
            key_serde,
            value_serde,
            caching: false,
            logging: true,
        }
    }
}
