//! A cogroup of three streams, as Kafka Streams' `cogroup` is documented: clicks, cart additions
//! and purchases of each customer folded into one summary per customer, each stream by its own
//! aggregator, in one store. Clicks come keyed by session and are re-keyed by customer first
//! (so they go through a repartition topic), as a real click stream often is.

use riffle::{Consumed, Grouped, Materialized, Produced, Result, Serdes, StreamsBuilder, Topology};
use serde::{Deserialize, Serialize};

/// Clicks (session id → `customer:page`).
pub const CLICKS: &str = "customer-clicks";
/// Cart additions (customer → item).
pub const CARTS: &str = "carts";
/// Purchases (customer → amount in cents).
pub const PURCHASES: &str = "purchases";
/// The summaries (customer → summary).
pub const SUMMARIES: &str = "customer-activity";

/// A customer's activity so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// Pages clicked.
    pub clicks: u64,
    /// Items added to a cart.
    pub cart_items: u64,
    /// Purchases.
    pub purchases: u64,
    /// Cents spent.
    pub spent: i64,
}

/// The topology.
pub fn topology() -> Result<Topology> {
    let builder = StreamsBuilder::new();
    let clicks = builder
        .stream(CLICKS, Consumed::with(Serdes::string(), Serdes::string()))
        .select_key(|_session, click| click.split(':').next().unwrap_or_default().to_owned())
        .group_by_key_with(
            Grouped::with(Serdes::string(), Serdes::string()).named("clicks-by-customer"),
        );
    let carts = builder
        .stream(CARTS, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key();
    let purchases = builder
        .stream(PURCHASES, Consumed::with(Serdes::string(), Serdes::i64()))
        .group_by_key();
    clicks
        .cogroup(|_, _click, mut a: Activity| {
            a.clicks += 1;
            a
        })
        .cogroup(&carts, |_, _item, mut a| {
            a.cart_items += 1;
            a
        })
        .cogroup(&purchases, |_, cents, mut a| {
            a.purchases += 1;
            a.spent += cents;
            a
        })
        .aggregate(
            Activity::default,
            Materialized::named("customer-activity-store"),
            Serdes::json(),
        )
        .to_stream()
        .to(SUMMARIES, Produced::with(Serdes::string(), Serdes::json()));
    builder.build()
}
