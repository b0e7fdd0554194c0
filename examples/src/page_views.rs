//! Kafka's page-view demo (`org.apache.kafka.streams.examples.pageview.PageViewTypedDemo`),
//! ported: page views are enriched with the viewer's region by a left join with the user
//! profiles table, re-keyed by region and counted in hopping windows. Values are JSON, as the
//! demo's are.
//!
//! The demo counts in 7-day windows advancing by 1 s (604,800 windows per view); the port takes
//! the window size and advance as parameters so tests can use windows of seconds.

use std::time::Duration;

use riffle::{
    Consumed, Grouped, Materialized, Produced, Result, Serdes, StreamsBuilder, TimeWindows,
    Topology,
};
use serde::{Deserialize, Serialize};

/// The page-view topic (user → view).
pub const VIEWS: &str = "streams-pageview-input";
/// The user-profile topic (user → profile): a table.
pub const PROFILES: &str = "streams-userprofile-input";
/// The output: views per region and window.
pub const OUTPUT: &str = "streams-pageviewstats-typed-output";

/// A page view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageView {
    /// Who viewed.
    pub user: String,
    /// What.
    pub page: String,
    /// When, in ms.
    pub timestamp: i64,
}

/// A user's profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserProfile {
    /// Where the user is.
    pub region: String,
    /// When the profile was written, in ms.
    pub timestamp: i64,
}

/// A view with its viewer's region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageViewByRegion {
    /// Who viewed.
    pub user: String,
    /// What.
    pub page: String,
    /// The viewer's region, `UNKNOWN` without a profile.
    pub region: String,
}

/// The output key: a region in one window.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WindowedPageViewByRegion {
    /// The window's start, in ms.
    #[serde(rename = "windowStart")]
    pub window_start: i64,
    /// The region.
    pub region: String,
}

/// The output value: a region's count of views in the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionCount {
    /// Views.
    pub count: i64,
    /// The region.
    pub region: String,
}

/// The topology, counting in windows of `size` advancing by `advance`, closed `grace` after
/// their end.
pub fn topology(size: Duration, advance: Duration, grace: Duration) -> Result<Topology> {
    let builder = StreamsBuilder::new();
    let users = builder.table(
        PROFILES,
        Consumed::with(Serdes::string(), Serdes::json::<UserProfile>()),
        Materialized::new(),
    );
    builder
        .stream(
            VIEWS,
            Consumed::with(Serdes::string(), Serdes::json::<PageView>()),
        )
        .left_join(&users, |view: PageView, profile: Option<UserProfile>| {
            PageViewByRegion {
                user: view.user,
                page: view.page,
                region: profile.map_or_else(|| "UNKNOWN".to_owned(), |p| p.region),
            }
        })
        .map(|_user, view| (view.region.clone(), view))
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::json()))
        .windowed_by(TimeWindows::of_size_and_grace(size, grace).advance_by(advance))
        .count()
        .to_stream()
        .map(|key, count| {
            let region = key.key;
            (
                WindowedPageViewByRegion {
                    window_start: key.window.start,
                    region: region.clone(),
                },
                RegionCount { count, region },
            )
        })
        .to(OUTPUT, Produced::with(Serdes::json(), Serdes::json()));
    builder.build()
}
