//! Sessionization with final results: clicks per user are grouped into sessions (a gap of
//! inactivity ends one) and each session's summary is written once, when stream time closes
//! it (`EmitStrategy::on_window_close`, Kafka Streams' `emitStrategy(EmitStrategy.onWindowClose())`).

use std::time::Duration;

use riffle::window::EmitStrategy;
use riffle::{
    Consumed, Materialized, Produced, Result, Serdes, SessionWindows, StreamsBuilder, Topology,
};
use serde::{Deserialize, Serialize};

/// The clicks topic (user → page).
pub const CLICKS: &str = "clicks";
/// The sessions topic (user → summary of one session).
pub const SESSIONS: &str = "sessions";

/// A finished session.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Session {
    /// The first click's time, in ms.
    pub start: i64,
    /// The last click's time, in ms.
    pub end: i64,
    /// Clicks in the session.
    pub clicks: u64,
    /// Pages clicked, in click order (of merged sessions, earlier session first).
    pub pages: Vec<String>,
}

/// The topology: sessions of `gap` inactivity, closed `grace` after they could last grow.
pub fn topology(gap: Duration, grace: Duration) -> Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream(CLICKS, Consumed::with(Serdes::string(), Serdes::string()))
        .group_by_key()
        .windowed_by(SessionWindows::of_inactivity_gap_and_grace(gap, grace))
        .emit_strategy(EmitStrategy::on_window_close())
        .aggregate(
            Vec::<String>::new,
            |_, page, mut pages| {
                pages.push(page);
                pages
            },
            |_, mut a, b| {
                a.extend(b);
                a
            },
            Materialized::new(),
            Serdes::json(),
        )
        .to_stream()
        .map(|key, pages| {
            let session = Session {
                start: key.window.start,
                end: key.window.end,
                clicks: pages.len() as u64,
                pages,
            };
            (key.key, session)
        })
        .to(SESSIONS, Produced::with(Serdes::string(), Serdes::json()));
    builder.build()
}
