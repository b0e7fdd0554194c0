//! A copy of the brute-force replay of Kafka Streams' window rules from the runtime's model test
//! (runtime/tests/window_model), to check the fast model of `sample windowed-count` against.
//! Test code only.

#![allow(dead_code, unreachable_pub, clippy::type_complexity)]

use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Time windows of `size`, a new one every `advance`.
    Time {
        size: i64,
        advance: i64,
    },
    Sliding {
        diff: i64,
    },
    Session {
        gap: i64,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub kind: Kind,
    pub grace: i64,
}

/// A window of a key: (key, start, end).
pub type WKey = (String, i64, i64);

#[derive(Debug, Default)]
pub struct Outcome {
    /// Every window's count at the end.
    pub finals: BTreeMap<WKey, i64>,
    /// Sessions that existed and were merged away (their last output is a tombstone).
    pub removed: BTreeSet<WKey>,
    /// Stream time at the end.
    pub stream_time: i64,
    /// Records dropped, counted once per window missed (time windows) or per record.
    pub dropped: u64,
    /// Sessions only: what emit-on-close emits, computed as records arrive (a session closed
    /// and emitted may still be merged into a later one by a record that bridges the gap to a
    /// live session, as in Kafka Streams).
    pub emitted: Option<BTreeMap<WKey, i64>>,
}

impl Spec {
    /// The stream time at which a window ending at `end` can no longer change.
    pub fn close_time(&self, end: i64) -> i64 {
        match self.kind {
            Kind::Time { .. } => end + self.grace,
            Kind::Sliding { .. } => end + self.grace + 1,
            Kind::Session { gap } => end + gap + self.grace + 1,
        }
    }

    /// What emit-on-close emits by the end: each window closed by then, once, with its final
    /// count.
    pub fn closed(&self, outcome: &Outcome) -> BTreeMap<WKey, i64> {
        if let Some(emitted) = &outcome.emitted {
            return emitted.clone();
        }
        outcome
            .finals
            .iter()
            .filter(|((_, _, end), _)| self.close_time(*end) <= outcome.stream_time)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    pub fn run(&self, records: &[(String, i64)]) -> Outcome {
        match self.kind {
            Kind::Time { size, advance } => self.run_time(records, size, advance),
            Kind::Sliding { diff } => self.run_sliding(records, diff),
            Kind::Session { gap } => self.run_session(records, gap),
        }
    }

    fn run_time(&self, records: &[(String, i64)], size: i64, advance: i64) -> Outcome {
        let mut out = Outcome {
            stream_time: -1,
            ..Outcome::default()
        };
        for (key, ts) in records {
            out.stream_time = out.stream_time.max(*ts);
            let close = out.stream_time - self.grace;
            // Every aligned start: brute force over all multiples up to ts.
            let mut start = 0;
            while start <= *ts {
                let end = start + size;
                if start <= *ts && *ts < end {
                    if end > close {
                        *out.finals.entry((key.clone(), start, end)).or_insert(0) += 1;
                    } else {
                        out.dropped += 1;
                    }
                }
                start += advance;
            }
        }
        out
    }

    fn run_session(&self, records: &[(String, i64)], gap: i64) -> Outcome {
        let mut out = Outcome {
            stream_time: -1,
            ..Outcome::default()
        };
        let mut sessions: BTreeMap<String, Vec<(i64, i64, i64)>> = BTreeMap::new();
        let mut emitted = BTreeMap::new();
        for (key, ts) in records {
            out.stream_time = out.stream_time.max(*ts);
            let close = out.stream_time - self.grace - gap;
            let list = sessions.entry(key.clone()).or_default();
            let (near, far): (Vec<&(i64, i64, i64)>, Vec<&(i64, i64, i64)>) = list
                .iter()
                .partition(|(s, e, _)| *e >= ts - gap && *s <= ts + gap);
            let start = near.iter().map(|s| s.0).fold(*ts, i64::min);
            let end = near.iter().map(|s| s.1).fold(*ts, i64::max);
            if end < close {
                out.dropped += 1;
                self.emit_sessions(&sessions, out.stream_time, &mut emitted);
                continue;
            }
            let count = near.iter().map(|s| s.2).sum::<i64>() + 1;
            for (s, e, _) in &near {
                if (*s, *e) != (start, end) {
                    out.removed.insert((key.clone(), *s, *e));
                }
            }
            out.removed.remove(&(key.clone(), start, end));
            let mut rest: Vec<(i64, i64, i64)> = far.into_iter().copied().collect();
            rest.push((start, end, count));
            *list = rest;
            self.emit_sessions(&sessions, out.stream_time, &mut emitted);
        }
        out.emitted = Some(emitted);
        for (key, list) in sessions {
            for (s, e, c) in list {
                out.finals.insert((key.clone(), s, e), c);
            }
        }
        out
    }

    /// Emits every session closed at `stream_time` not emitted yet.
    fn emit_sessions(
        &self,
        sessions: &BTreeMap<String, Vec<(i64, i64, i64)>>,
        stream_time: i64,
        emitted: &mut BTreeMap<WKey, i64>,
    ) {
        for (key, list) in sessions {
            for &(s, e, c) in list {
                if self.close_time(e) <= stream_time {
                    emitted.entry((key.clone(), s, e)).or_insert(c);
                }
            }
        }
    }

    fn run_sliding(&self, records: &[(String, i64)], diff: i64) -> Outcome {
        let mut out = Outcome {
            stream_time: -1,
            ..Outcome::default()
        };
        // Per key, the accepted records in arrival order with the close time they met.
        let mut accepted: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        for (key, ts) in records {
            out.stream_time = out.stream_time.max(*ts);
            let close = out.stream_time - self.grace;
            if ts + diff < close {
                out.dropped += 1;
                continue;
            }
            accepted.entry(key.clone()).or_default().push((*ts, close));
        }
        for (key, recs) in accepted {
            // Every window any prefix could define.
            let mut candidates = BTreeSet::new();
            for &(t, _) in &recs {
                candidates.insert(if t < diff { 0 } else { t - diff });
                candidates.insert(t + 1);
            }
            for start in candidates {
                let end = start + diff;
                // The records that arrived while the window was open: a prefix.
                let open: Vec<i64> = recs
                    .iter()
                    .take_while(|(_, close)| end >= *close)
                    .map(|(t, _)| *t)
                    .collect();
                let defined = open.iter().any(|&t| {
                    let left = if t < diff { 0 } else { t - diff };
                    left == start
                        || (t + 1 == start && open.iter().any(|&u| u > t && u <= t + 1 + diff))
                });
                if !defined {
                    continue;
                }
                let count = open.iter().filter(|&&t| t >= start && t <= end).count() as i64;
                if count > 0 {
                    out.finals.insert((key.clone(), start, end), count);
                }
            }
        }
        out
    }
}

/// Moves each record that is late for its own sliding windows but within grace of a later
/// window (where Kafka's incremental algorithm and the brute force part ways) to the edge of
/// the grace period, so the model applies. `records` is one task's input in arrival order.
pub fn sliding_in_model_reach(records: &mut [(String, i64)], diff: i64, grace: i64) {
    let mut stream_time = -1;
    for (_, ts) in records.iter_mut() {
        let close = stream_time - grace;
        if *ts < close && *ts + diff >= close {
            *ts = close;
        }
        stream_time = stream_time.max(*ts);
    }
}
