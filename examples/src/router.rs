//! A router, as Kafka Streams applications route with `split()` and a `TopicNameExtractor`:
//! orders of 1,000 or more go to `orders-large`, refunds (negative amounts) to
//! `orders-refunds`, and every other order to its region's topic, `orders-<region>`, named per
//! record by the extractor.

use std::collections::HashMap;

use riffle::dsl::Branched;
use riffle::{Consumed, Produced, Result, Serdes, StreamsBuilder, Topology};
use serde::{Deserialize, Serialize};

/// The input topic (order id → order).
pub const ORDERS: &str = "orders";
/// The regions, each with a topic `orders-<region>`.
pub const REGIONS: [&str; 3] = ["eu", "us", "apac"];

/// An order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Order {
    /// Where it was placed.
    pub region: String,
    /// Its amount in cents (negative: a refund).
    pub amount: i64,
}

/// The topic an order goes to, by the router's rules (the model the tests check it against).
pub fn route(order: &Order) -> String {
    if order.amount >= 1_000 {
        "orders-large".into()
    } else if order.amount < 0 {
        "orders-refunds".into()
    } else {
        format!("orders-{}", order.region)
    }
}

/// The topology.
pub fn topology() -> Result<Topology> {
    let builder = StreamsBuilder::new();
    let produced = || Produced::with(Serdes::string(), Serdes::json::<Order>());
    let branches: HashMap<_, _> = builder
        .stream(
            ORDERS,
            Consumed::with(Serdes::string(), Serdes::json::<Order>()),
        )
        .split_named(riffle::Named::as_("route-"))
        .branch_with(|_, o| o.amount >= 1_000, Branched::as_("large"))
        .branch_with(|_, o| o.amount < 0, Branched::as_("refunds"))
        .default_branch_with(Branched::as_("by-region"));
    branches["route-large"].to("orders-large", produced());
    branches["route-refunds"].to("orders-refunds", produced());
    branches["route-by-region"].to_dynamic(
        |_: &String, order: Option<&Order>, _: &riffle::processor::RecordContext<'_>| {
            format!("orders-{}", order.map_or("unknown", |o| o.region.as_str()))
        },
        produced(),
    );
    builder.build()
}
