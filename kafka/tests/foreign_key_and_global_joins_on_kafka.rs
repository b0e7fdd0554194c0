//! Table joins on a real Kafka 4.4 broker: orders (3 partitions) joined by foreign key with
//! customers (2 partitions), inner and left, and orders' stream joined with a global table of
//! the customers. Orders and customers change while the application runs (foreign keys move,
//! customers are renamed and deleted); the joins' results converge to a model computed from the
//! input, read back with riffle and with Kafka's own console consumer. The subscription topics
//! get Kafka's names and the two tables' partition counts, and the broker sees both
//! sub-topologies in the streams group.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::{config, for_each_batch, wait_for};
use riffle::backend::{Backend, TopicKind};
use riffle::batch::{BatchBuilder, Compression, TopicPartition, partition_for_key};
use riffle::{
    Consumed, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder, dsl::TableJoined,
};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

/// An order's value: `<customer>:<amount>`.
fn customer_of(order: &str) -> Option<String> {
    order.split_once(':').map(|(c, _)| c.to_owned())
}

fn joined(order: &str, name: Option<&str>) -> String {
    format!("{order}@{}", name.unwrap_or("-"))
}

fn produce(
    backend: &KafkaBackend,
    topic: &str,
    partitions: u32,
    records: &[(String, Option<String>)],
) {
    let mut batches: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(Compression::Lz4))
        .collect();
    for (k, v) in records {
        let p = partition_for_key(k.as_bytes(), partitions) as usize;
        batches[p].push(0, Some(k.as_bytes()), v.as_ref().map(|v| v.as_bytes()));
    }
    for (p, b) in batches.iter_mut().enumerate() {
        if !b.is_empty() {
            backend
                .append(&TopicPartition::new(topic, p as u32), b)
                .unwrap();
        }
    }
}

/// Each key's last value of `topic` (a null deletes it).
fn table_of(backend: &KafkaBackend, topic: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for_each_batch(backend, topic, |batch, position| {
        for record in batch.records() {
            let record = record.unwrap();
            if record.offset() < position {
                continue;
            }
            let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
            match record.value() {
                Some(v) => out.insert(key, String::from_utf8(v.to_vec()).unwrap()),
                None => out.remove(&key),
            };
        }
    });
    out
}

#[derive(Default)]
struct Model {
    orders: HashMap<String, String>,
    customers: HashMap<String, String>,
    /// Each order record's key and the stream join's output for it, in order per key.
    enriched: BTreeMap<String, Vec<String>>,
}

impl Model {
    fn result(&self, left: bool) -> BTreeMap<String, String> {
        self.orders
            .iter()
            .filter_map(|(k, v)| {
                let name = customer_of(v).and_then(|c| self.customers.get(&c));
                (left || name.is_some()).then(|| (k.clone(), joined(v, name.map(String::as_str))))
            })
            .collect()
    }
}

#[test]
fn foreign_key_and_global_table_joins_converge_to_the_model_on_kafka() {
    common::init_tracing();
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    backend.create_topic("orders", 3, TopicKind::User).unwrap();
    backend
        .create_topic("customers", 2, TopicKind::User)
        .unwrap();
    backend
        .create_topic("order-events", 2, TopicKind::User)
        .unwrap();

    let builder = StreamsBuilder::new();
    let string = || Consumed::with(Serdes::string(), Serdes::string());
    let orders = builder.table("orders", string(), Materialized::named("orders-rows"));
    let customers = builder.table("customers", string(), Materialized::named("customer-rows"));
    let out = || Produced::with(Serdes::string(), Serdes::optional(Serdes::string()));
    let fk = |_: &String, v: &String| customer_of(v);
    orders
        .join_foreign(
            &customers,
            fk,
            |o, name| joined(&o, Some(&name)),
            Serdes::string(),
        )
        .map_values(Some, Serdes::optional(Serdes::string()))
        .to_stream()
        .to("orders-inner", out());
    orders
        .left_join_foreign_with(
            &customers,
            fk,
            |o, name| joined(&o, name.as_deref()),
            Serdes::string(),
            TableJoined::new(),
            Materialized::named("orders-left"),
        )
        .map_values(Some, Serdes::optional(Serdes::string()))
        .to_stream()
        .to("orders-left", out());
    let directory = builder.global_table(
        "customers",
        string(),
        Materialized::named("customer-directory"),
    );
    builder
        .stream("order-events", string())
        .left_join_global(
            &directory,
            |_, v| customer_of(v).unwrap_or_default(),
            |o, name| joined(&o, name.as_deref()),
        )
        .to(
            "order-events-enriched",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    let topology = builder.build().unwrap();
    // The subscription topics, as the topology names them (Kafka's names).
    let description = topology.describe().to_string();
    let internal = |kind: &str| -> Vec<String> {
        let mut names: Vec<String> = description
            .split(['[', ']', ' ', ')', '\n'])
            .filter(|w| w.contains(kind) && w.ends_with("-topic"))
            .map(|w| format!("fk-kafka-{w}"))
            .collect();
        names.sort();
        names.dedup();
        names
    };
    let (registrations, responses) = (
        internal("SUBSCRIPTION-REGISTRATION"),
        internal("SUBSCRIPTION-RESPONSE"),
    );
    assert_eq!(
        (registrations.len(), responses.len()),
        (2, 2),
        "{description}"
    );

    let mut model = Model::default();
    let customers_round = |model: &mut Model, round: u32| {
        let mut records = Vec::new();
        for c in 0..8u32 {
            let key = format!("c{c}");
            let value = (!(c + round).is_multiple_of(5)).then(|| format!("name-{c}-{round}"));
            match &value {
                Some(v) => model.customers.insert(key.clone(), v.clone()),
                None => model.customers.remove(&key),
            };
            records.push((key, value));
        }
        produce(&backend, "customers", 2, &records);
    };
    let orders_round = |model: &mut Model, round: u32| {
        let mut records = Vec::new();
        for o in 0..40u32 {
            let key = format!("o{o}");
            let value = (!(o + round).is_multiple_of(7))
                .then(|| format!("c{}:{}", (o * 3 + round) % 9, o + round));
            match &value {
                Some(v) => model.orders.insert(key.clone(), v.clone()),
                None => model.orders.remove(&key),
            };
            records.push((key, value));
        }
        produce(&backend, "orders", 3, &records);
    };
    customers_round(&mut model, 0);
    orders_round(&mut model, 0);

    let state = tempfile::tempdir().unwrap();
    let mut app = StreamsApp::new(
        topology,
        config("fk-kafka", state.path(), 2),
        backend.shared(),
    )
    .unwrap();
    app.start().unwrap();
    // Order events once the global table was restored (start returns after it): each meets
    // the customers as they are now.
    let mut events = Vec::new();
    for e in 0..30u32 {
        let key = format!("e{e}");
        let value = format!("c{}:{e}", e % 9);
        let name = customer_of(&value).and_then(|c| model.customers.get(&c).cloned());
        model
            .enriched
            .entry(key.clone())
            .or_default()
            .push(joined(&value, name.as_deref()));
        events.push((key, Some(value)));
    }
    produce(&backend, "order-events", 2, &events);
    let wait = |model: &Model| {
        let (inner, left) = (model.result(false), model.result(true));
        wait_for("the joins to converge", Duration::from_secs(90), || {
            (table_of(&backend, "orders-inner") == inner
                && table_of(&backend, "orders-left") == left)
                .then_some(())
        });
    };
    wait(&model);
    let mut enriched: BTreeMap<String, Vec<String>> = BTreeMap::new();
    wait_for(
        "every order event enriched",
        Duration::from_secs(60),
        || {
            enriched.clear();
            for_each_batch(&backend, "order-events-enriched", |batch, position| {
                for record in batch.records() {
                    let record = record.unwrap();
                    if record.offset() >= position {
                        let key = String::from_utf8(record.key().unwrap().to_vec()).unwrap();
                        enriched
                            .entry(key)
                            .or_default()
                            .push(String::from_utf8(record.value().unwrap().to_vec()).unwrap());
                    }
                }
            });
            (enriched.values().map(Vec::len).sum::<usize>() == 30).then_some(())
        },
    );
    assert_eq!(enriched, model.enriched, "the stream-global-table join");
    // While running: customers renamed and deleted, foreign keys moved, orders deleted.
    for round in 1..4 {
        customers_round(&mut model, round);
        orders_round(&mut model, round);
        wait(&model);
    }
    // Kafka's own consumer reads the same result.
    let records: usize = {
        let mut n = 0;
        for_each_batch(&backend, "orders-left", |batch, position| {
            n += batch
                .records()
                .filter(|r| r.as_ref().is_ok_and(|r| r.offset() >= position))
                .count();
        });
        n
    };
    let console = broker
        .run_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--topic",
                "orders-left",
                "--from-beginning",
                "--max-messages",
                &records.to_string(),
                "--timeout-ms",
                "20000",
                "--formatter-property",
                "print.key=true",
            ],
        )
        .unwrap();
    let mut read: BTreeMap<String, String> = BTreeMap::new();
    let mut lines = 0;
    for line in console.lines().filter(|l| l.contains('\t')) {
        lines += 1;
        let (k, v) = line.split_once('\t').unwrap();
        // A null value prints as "null".
        if v == "null" {
            read.remove(k);
        } else {
            read.insert(k.to_owned(), v.to_owned());
        }
    }
    assert_eq!(lines, records, "the console consumer read every record");
    // Per key, the console's last value is the key's last (one partition per key).
    assert_eq!(
        read,
        model.result(true),
        "read back by Kafka's console consumer"
    );

    for topic in &registrations {
        assert_eq!(
            backend.partitions(topic).unwrap(),
            Some(2),
            "{topic}: the customers' count"
        );
    }
    for topic in &responses {
        assert_eq!(
            backend.partitions(topic).unwrap(),
            Some(3),
            "{topic}: the orders' count"
        );
    }
    let group = backend.describe_streams_group("fk-kafka").unwrap();
    assert_eq!(group.subtopologies.len(), 3, "{group:?}");
    app.close().unwrap();
}
