//! Global tables in the DSL: [`StreamsBuilder::global_table`]. A stream joins one through
//! runtime/src/dsl/join/stream_global/.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::dsl::StreamsBuilder;
use crate::dsl::{Consumed, Materialized, StoreType};
use crate::serdes::SerdeRef;
use crate::state::global::CheckFn;
use crate::topology::GlobalDef;

/// A table every application instance holds whole, every partition of its topic (Kafka
/// Streams' `GlobalKTable`): a stream joins it by any key it computes, without
/// co-partitioning or repartitioning.
pub struct GlobalKTable<K, V> {
    /// The topology's index of the global table.
    pub(crate) index: usize,
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for GlobalKTable<K, V> {
    fn clone(&self) -> Self {
        GlobalKTable {
            index: self.index,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for GlobalKTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalKTable")
            .field("index", &self.index)
            .finish()
    }
}

impl StreamsBuilder {
    /// A table of every record of every partition of `topic`, held whole by each instance
    /// (Kafka Streams' `StreamsBuilder.globalTable`): before the stream threads start, the
    /// application's global thread reads the topic to its end into the store `materialized`
    /// names (or `<topic>-STATE-STORE-<n>`), and it follows the topic while the application
    /// runs. A record without a value deletes its key; one without a key is skipped; one that
    /// does not decode goes to the deserialization exception handler (under `fail`, the
    /// default, the application stops). The topic
    /// is the store's changelog (no `-changelog` topic). A persistent store (the default)
    /// records how far it read each partition with its data, and reads on from there; an
    /// in-memory one is read again from the topic at each start.
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let products = builder.global_table(
    ///     "products",
    ///     Consumed::with(Serdes::string(), Serdes::string()),
    ///     Materialized::named("products-store"),
    /// );
    /// builder
    ///     .stream("orders", Consumed::with(Serdes::string(), Serdes::string()))
    ///     // An order's value is its product id.
    ///     .join_global(&products, |_order, product| product.clone(), |product, name| format!("{product}: {name}"))
    ///     .to("orders-with-names", Produced::with(Serdes::string(), Serdes::string()));
    /// builder.build().unwrap();
    /// ```
    pub fn global_table<K, V>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: Materialized<K, V>,
    ) -> GlobalKTable<K, V>
    where
        K: 'static,
        V: 'static,
    {
        let mut g = self.graph.borrow_mut();
        let store = match &materialized.name {
            Some(name) => name.clone(),
            None => g.next_name(&format!("{topic}-STATE-STORE")),
        };
        if g.stores.iter().any(|s| s.name == store) || g.globals.iter().any(|s| s.store == store) {
            g.errors
                .push(format!("a store named {store:?} already exists"));
        }
        if g.globals.iter().any(|s| s.topic == topic) {
            g.errors
                .push(format!("topic {topic:?} is read by two global tables"));
        }
        // Kafka's globalTable takes a source's and a table source's names after the store's:
        // taken here too, so later names are numbered as Kafka numbers them.
        g.next_name("KSTREAM-SOURCE");
        g.next_name("KTABLE-SOURCE");
        let (key_serde, value_serde) = (consumed.key.clone(), consumed.value.clone());
        let check: CheckFn = Arc::new(move |key, value| {
            key_serde.deserialize(Some(key)).map_err(|e| ("key", e))?;
            if let Some(value) = value {
                value_serde
                    .deserialize(Some(value))
                    .map_err(|e| ("value", e))?;
            }
            Ok(())
        });
        g.globals.push(GlobalDef {
            store,
            topic: topic.to_owned(),
            persistent: materialized.store_type == StoreType::Persistent,
            check,
        });
        GlobalKTable {
            index: g.globals.len() - 1,
            key_serde: consumed.key,
            value_serde: consumed.value,
            types: PhantomData,
        }
    }
}
