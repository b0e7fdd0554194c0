//! [`KStream::to_table`]: a table of a stream's records, the latest value per key (Kafka
//! Streams' `KStream.toTable`). A value its serde calls null (`Serde::is_null`, as
//! `Serdes::optional`'s `None`) deletes the key. Its processor is `KSTREAM-TOTABLE-<n>`; a
//! stream whose key changed goes through the repartition topic `<name>-repartition` first.

use crate::dsl::named::node_name;
use crate::dsl::table::add_table_store;
use crate::dsl::topics::{RepartitionSpec, repartition_through};
use crate::dsl::{KStream, KTable, Materialized, Named};
use crate::serdes::{DefaultSerde, SerdeRef};

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// A table of the stream, its keys and values written with the default serdes of `K` and
    /// `V`, in a store named `KSTREAM-TOTABLE-STATE-STORE-<n>`.
    pub fn to_table(&self) -> KTable<K, V>
    where
        K: DefaultSerde,
        V: DefaultSerde,
    {
        let (k, v) = (K::default_serde(), V::default_serde());
        self.to_table_as(None, k, v, Materialized::new())
    }

    /// [`KStream::to_table`], its processor named `named`.
    pub fn to_table_named(&self, named: Named) -> KTable<K, V>
    where
        K: DefaultSerde,
        V: DefaultSerde,
    {
        let (k, v) = (K::default_serde(), V::default_serde());
        self.to_table_as(Some(&named), k, v, Materialized::new())
    }

    /// A table of the stream, kept in the store `materialized` describes, its keys and values
    /// written with these serdes (`materialized`'s value serde, if it has one). A value
    /// `value_serde` calls null deletes the key.
    ///
    /// ```
    /// use riffle::{Consumed, Materialized, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let table = builder
    ///     .stream("prices", Consumed::with(Serdes::string(), Serdes::optional(Serdes::i64())))
    ///     .to_table_with(Serdes::string(), Serdes::optional(Serdes::i64()), Materialized::named("prices"));
    /// let topology = builder.build().unwrap();
    /// assert!(topology.describe().to_string().contains("Processor: KSTREAM-TOTABLE-0000000001 (stores: [prices])"));
    /// # drop(table);
    /// ```
    pub fn to_table_with(
        &self,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        self.to_table_as(None, key_serde, value_serde, materialized)
    }

    /// [`KStream::to_table_with`], its processor named `named`.
    pub fn to_table_named_with(
        &self,
        named: Named,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        self.to_table_as(Some(&named), key_serde, value_serde, materialized)
    }

    fn to_table_as(
        &self,
        named: Option<&Named>,
        key_serde: SerdeRef<K>,
        value_serde: SerdeRef<V>,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        let key_serde = materialized.key_serde_or(&key_serde);
        let value_serde = materialized.value_serde_or(&value_serde);
        // Named in Kafka's order: the processor, the store (when unnamed), then the
        // repartition topic's nodes.
        let (name, store_name) = {
            let mut g = self.graph.borrow_mut();
            let name = node_name(&mut g, "KSTREAM-TOTABLE", named);
            let store_name = match &materialized.name {
                Some(store) => store.clone(),
                None => g.next_name("KSTREAM-TOTABLE-STATE-STORE"),
            };
            (name, store_name)
        };
        let parent = if self.repartition_required {
            let spec = RepartitionSpec {
                key_serde: key_serde.clone(),
                value_serde: value_serde.clone(),
                partitioner: None,
                partitions: None,
                optimizable: true,
                reuse: false,
            };
            repartition_through(&self.graph, self.node, &name, spec)
        } else {
            self.node
        };
        let null = value_serde.clone();
        let (node, view) = add_table_store(
            &self.graph,
            name,
            &[parent],
            store_name,
            &materialized,
            key_serde.clone(),
            value_serde.clone(),
            std::sync::Arc::new(move |_, v: V| (!null.is_null(&v)).then_some(v)),
            None,
        );
        KTable {
            graph: self.graph.clone(),
            node,
            key_serde,
            value_serde,
            windows: None,
            window_end: None,
            view: Some(view),
        }
    }
}
