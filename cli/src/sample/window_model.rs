//! Windowed counts as Kafka Streams defines them, replayed from one task's records (key,
//! timestamp) in arrival order — written from Kafka's rules, independent of riffle's runtime,
//! so `riffle sample windowed-count` can check what the runtime wrote against it:
//!
//! - stream time is the largest timestamp the task has seen, the record's own included;
//! - time windows `[s, s + size)` start at every multiple of the advance from 0; a record joins
//!   each window holding it whose end is after `stream time - grace`, and is dropped for the
//!   others (counted once per window missed); a window closes when stream time reaches
//!   `end + grace`;
//! - sliding windows `[s, s + diff]` (both ends inclusive, KIP-450) are the left window
//!   `[t - diff, t]` of every record (`[0, diff]` for `t < diff`) and the right window
//!   `[t + 1, t + 1 + diff]` of every record with a later one within it. A window is open while
//!   `end >= stream time - grace`; it exists if the records that arrived while it was open
//!   define it, and counts them. A record is dropped outright when `t + diff < stream time -
//!   grace`. (Kafka's incremental algorithm agrees with this only when every record is either
//!   within grace of stream time or dropped outright: the sample generates no other.) A window
//!   closes one millisecond after `end + grace`;
//! - sessions: a record merges every session of its key ending at or after `t - gap` and
//!   starting at or before `t + gap` (and itself) into one session; it is dropped if that
//!   session would end before `stream time - grace - gap`. Merged-away sessions are deleted
//!   (tombstones when updates are emitted). A session closes one millisecond after
//!   `end + gap + grace`, and emit-on-close emits it then, once, with its final count: a closed
//!   session takes no record and merges with none (docs/design.md §7b).
//!
//! Unlike a brute-force replay (the unit tests compare against one) it costs O(log n) per record
//! and window, so it keeps up with a million generated records.

use std::collections::{BTreeMap, BTreeSet};

/// A window kind with its sizes, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Time windows of `size`, a new one every `advance` (tumbling when they are equal).
    Time { size: i64, advance: i64 },
    /// Sliding windows of `diff`.
    Sliding { diff: i64 },
    /// Sessions split by `gap` of inactivity.
    Session { gap: i64 },
}

/// A window definition with its grace period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) kind: Kind,
    pub(crate) grace: i64,
}

/// A window of a key: (key, start, end).
pub(crate) type WKey<K> = (K, i64, i64);

/// What a task's records make of the windows.
#[derive(Debug)]
pub(crate) struct Outcome<K> {
    /// Every window at the end, with its count.
    pub(crate) finals: BTreeMap<WKey<K>, i64>,
    /// Sessions that existed and were merged away (their last update is a tombstone).
    pub(crate) removed: BTreeSet<WKey<K>>,
    /// What emit-on-close emits by the end: every window stream time closed, once, with its
    /// count when it closed.
    pub(crate) emitted: BTreeMap<WKey<K>, i64>,
    /// Stream time at the end (-1 without records).
    pub(crate) stream_time: i64,
    /// Records dropped as late: once per window missed (time windows) or per record.
    pub(crate) dropped: u64,
}

impl<K> Default for Outcome<K> {
    fn default() -> Self {
        Outcome {
            finals: BTreeMap::new(),
            removed: BTreeSet::new(),
            emitted: BTreeMap::new(),
            stream_time: -1,
            dropped: 0,
        }
    }
}

impl Spec {
    /// The stream time at which a window ending at `end` closes.
    pub(crate) fn close_time(&self, end: i64) -> i64 {
        match self.kind {
            Kind::Time { .. } => end.saturating_add(self.grace),
            Kind::Sliding { .. } => end.saturating_add(self.grace).saturating_add(1),
            Kind::Session { gap } => end
                .saturating_add(gap)
                .saturating_add(self.grace)
                .saturating_add(1),
        }
    }

    /// Replays one task's records, in arrival order.
    pub(crate) fn run<K: Ord + Clone>(&self, records: &[(K, i64)]) -> Outcome<K> {
        let mut out = match self.kind {
            Kind::Time { size, advance } => self.run_time(records, size, advance),
            Kind::Sliding { diff } => self.run_sliding(records, diff),
            Kind::Session { gap } => self.run_session(records, gap),
        };
        if !matches!(self.kind, Kind::Session { .. }) {
            // A time or sliding window takes no record once closed: it emits its final count.
            let stream_time = out.stream_time;
            out.emitted = out
                .finals
                .iter()
                .filter(|((_, _, end), _)| self.close_time(*end) <= stream_time)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
        }
        out
    }

    fn run_time<K: Ord + Clone>(
        &self,
        records: &[(K, i64)],
        size: i64,
        advance: i64,
    ) -> Outcome<K> {
        let mut out = Outcome::default();
        for (key, ts) in records {
            let ts = *ts;
            out.stream_time = out.stream_time.max(ts);
            let close = out.stream_time.saturating_sub(self.grace);
            // The first multiple of the advance after ts - size (and not before 0), up to ts.
            let mut start = if ts >= size {
                ((ts - size) / advance + 1) * advance
            } else {
                0
            };
            while start <= ts {
                let end = start.saturating_add(size);
                if end > close {
                    *out.finals.entry((key.clone(), start, end)).or_insert(0) += 1;
                } else {
                    out.dropped += 1;
                }
                start += advance;
            }
        }
        out
    }

    fn run_sliding<K: Ord + Clone>(&self, records: &[(K, i64)], diff: i64) -> Outcome<K> {
        let mut out = Outcome::default();
        // Per key, the records taken in arrival order, each with `stream time - grace` when it
        // arrived (rising: stream time never goes back).
        let mut taken: BTreeMap<K, Vec<(i64, i64)>> = BTreeMap::new();
        for (key, ts) in records {
            out.stream_time = out.stream_time.max(*ts);
            let close = out.stream_time.saturating_sub(self.grace);
            if ts.saturating_add(diff) < close {
                out.dropped += 1;
                continue;
            }
            taken.entry(key.clone()).or_default().push((*ts, close));
        }
        for (key, recs) in taken {
            let left = |t: i64| if t < diff { 0 } else { t - diff };
            let starts: BTreeSet<i64> = recs.iter().flat_map(|&(t, _)| [left(t), t + 1]).collect();
            let mut times: Vec<i64> = recs.iter().map(|&(t, _)| t).collect();
            times.sort_unstable();
            times.dedup();
            let mut present = Fenwick::new(times.len());
            // Windows by start, so by end: the records that arrived while each was open (those
            // whose close is at most its end) are a prefix that only grows.
            let mut arrived = 0;
            for start in starts {
                let end = start.saturating_add(diff);
                while arrived < recs.len() && recs[arrived].1 <= end {
                    let at = times.partition_point(|&t| t < recs[arrived].0);
                    present.add(at);
                    arrived += 1;
                }
                let below = |t: i64| present.prefix(times.partition_point(|&x| x < t));
                let count = below(end.saturating_add(1)) - below(start);
                if count == 0 {
                    continue;
                }
                let has = |t: i64| times.binary_search(&t).is_ok_and(|i| present.at(i) > 0);
                // The left window of a record at `end`, the right window of one at `start - 1`
                // (it holds a later record: count > 0), or `[0, diff]`, every early record's.
                let defined = start == 0 || has(end) || has(start - 1);
                if defined {
                    out.finals.insert((key.clone(), start, end), count);
                }
            }
        }
        out
    }

    fn run_session<K: Ord + Clone>(&self, records: &[(K, i64)], gap: i64) -> Outcome<K> {
        let mut replay = SessionReplay::new(gap, self.grace);
        for (key, ts) in records {
            replay.push(key, *ts);
        }
        replay.finish()
    }
}

/// Sessions replayed a record at a time.
struct SessionReplay<K> {
    spec: Spec,
    gap: i64,
    /// Per key, its sessions by start: start -> (end, count). Sessions never overlap, so they
    /// are in the order of their ends too.
    sessions: BTreeMap<K, BTreeMap<i64, (i64, i64)>>,
    /// Sessions not emitted yet, by the stream time that closes them.
    waiting: BTreeSet<(i64, K, i64, i64)>,
    out: Outcome<K>,
}

impl<K: Ord + Clone> SessionReplay<K> {
    /// Sessions split by `gap`, with `grace`.
    pub(crate) fn new(gap: i64, grace: i64) -> Self {
        SessionReplay {
            spec: Spec {
                kind: Kind::Session { gap },
                grace,
            },
            gap,
            sessions: BTreeMap::new(),
            waiting: BTreeSet::new(),
            out: Outcome::default(),
        }
    }

    /// The stream time after a record at `ts`, and the end a session must reach for a record
    /// to join it then (`stream time - grace - gap`).
    fn close(&self, ts: i64) -> (i64, i64) {
        let stream_time = self.out.stream_time.max(ts);
        let close = stream_time
            .saturating_sub(self.spec.grace)
            .saturating_sub(self.gap);
        (stream_time, close)
    }

    /// The open sessions of `key` a record at `ts` merges: (start, end, count). A closed
    /// session is final: no record joins it.
    fn near(&self, key: &K, ts: i64) -> Vec<(i64, i64, i64)> {
        let Some(list) = self.sessions.get(key) else {
            return Vec::new();
        };
        let (stream_time, _) = self.close(ts);
        list.range(..=ts.saturating_add(self.gap))
            .rev()
            .take_while(|(_, (end, _))| *end >= ts.saturating_sub(self.gap))
            .filter(|(_, (end, _))| self.spec.close_time(*end) > stream_time)
            .map(|(&s, &(e, c))| (s, e, c))
            .collect()
    }

    /// Replays a record of `key` at `ts`.
    pub(crate) fn push(&mut self, key: &K, ts: i64) {
        let (stream_time, close) = self.close(ts);
        self.out.stream_time = stream_time;
        let near = self.near(key, ts);
        let start = near.iter().map(|s| s.0).fold(ts, i64::min);
        let end = near.iter().map(|s| s.1).fold(ts, i64::max);
        if end < close {
            self.out.dropped += 1;
        } else {
            let count = near.iter().map(|s| s.2).sum::<i64>() + 1;
            let list = self.sessions.entry(key.clone()).or_default();
            for &(s, e, _) in &near {
                list.remove(&s);
                self.waiting
                    .remove(&(self.spec.close_time(e), key.clone(), s, e));
                if (s, e) != (start, end) {
                    self.out.removed.insert((key.clone(), s, e));
                }
            }
            self.out.removed.remove(&(key.clone(), start, end));
            list.insert(start, (end, count));
            if !self.out.emitted.contains_key(&(key.clone(), start, end)) {
                self.waiting
                    .insert((self.spec.close_time(end), key.clone(), start, end));
            }
        }
        while let Some(first) = self.waiting.first() {
            if first.0 > self.out.stream_time {
                break;
            }
            let Some((_, k, s, e)) = self.waiting.pop_first() else {
                break;
            };
            let count = self
                .sessions
                .get(&k)
                .and_then(|l| l.get(&s))
                .map_or(0, |&(_, c)| c);
            self.out.emitted.entry((k, s, e)).or_insert(count);
        }
    }

    /// What the records replayed make of the sessions.
    pub(crate) fn finish(self) -> Outcome<K> {
        let mut out = self.out;
        for (key, list) in self.sessions {
            for (s, (e, c)) in list {
                out.finals.insert((key.clone(), s, e), c);
            }
        }
        out
    }
}

/// A Fenwick tree of counts over positions `0..n`.
struct Fenwick {
    tree: Vec<i64>,
    counts: Vec<i64>,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick {
            tree: vec![0; n + 1],
            counts: vec![0; n],
        }
    }

    /// Adds one at `at`.
    fn add(&mut self, at: usize) {
        self.counts[at] += 1;
        let mut i = at + 1;
        while i < self.tree.len() {
            self.tree[i] += 1;
            i += i & i.wrapping_neg();
        }
    }

    /// The count at `at`.
    fn at(&self, at: usize) -> i64 {
        self.counts[at]
    }

    /// The sum over `0..n`.
    fn prefix(&self, n: usize) -> i64 {
        let mut i = n;
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

#[cfg(test)]
#[path = "../../../runtime/tests/window_model/mod.rs"]
mod brute;

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::brute;
    use super::{Kind, Spec};

    /// Records like the runtime's model test draws them: mostly rising timestamps, some out of
    /// order by up to 60 ms.
    fn records(rng: &mut StdRng) -> Vec<(String, i64)> {
        let n = rng.random_range(1..120);
        let mut base = 0i64;
        (0..n)
            .map(|_| {
                base += rng.random_range(0..12);
                let ts = if rng.random_bool(0.15) {
                    (base - rng.random_range(0..60)).max(0)
                } else {
                    base
                };
                (format!("k{}", rng.random_range(0..3)), ts)
            })
            .collect()
    }

    fn spec(rng: &mut StdRng) -> Spec {
        let kind = match rng.random_range(0..4) {
            0 => {
                let size = rng.random_range(1..40);
                Kind::Time {
                    size,
                    advance: size,
                }
            }
            1 => {
                let size = rng.random_range(2..40);
                Kind::Time {
                    size,
                    advance: rng.random_range(1..40).min(size),
                }
            }
            2 => Kind::Sliding {
                diff: rng.random_range(1..30),
            },
            _ => Kind::Session {
                gap: rng.random_range(1..20),
            },
        };
        Spec {
            kind,
            grace: rng.random_range(0..30),
        }
    }

    fn brute_spec(spec: &Spec) -> brute::Spec {
        let kind = match spec.kind {
            Kind::Time { size, advance } => brute::Kind::Time { size, advance },
            Kind::Sliding { diff } => brute::Kind::Sliding { diff },
            Kind::Session { gap } => brute::Kind::Session { gap },
        };
        brute::Spec {
            kind,
            grace: spec.grace,
        }
    }

    /// On thousands of random inputs, every window kind gives what a brute-force replay of the
    /// same rules gives: the final windows, the merged-away sessions, what emit-on-close emits,
    /// stream time and the records dropped.
    #[test]
    fn the_model_equals_a_brute_force_replay() {
        let mut rng = StdRng::seed_from_u64(7);
        for case in 0..4_000 {
            let spec = spec(&mut rng);
            let mut records = records(&mut rng);
            if let Kind::Sliding { diff } = spec.kind {
                brute::sliding_in_model_reach(&mut records, diff, spec.grace);
            }
            let fast = spec.run(&records);
            let slow_spec = brute_spec(&spec);
            let slow = slow_spec.run(&records);
            let context = format!("case {case}: {spec:?} over {records:?}");
            assert_eq!(fast.finals, slow.finals, "{context}");
            assert_eq!(fast.removed, slow.removed, "{context}");
            assert_eq!(fast.emitted, slow_spec.closed(&slow), "{context}");
            assert_eq!(fast.stream_time, slow.stream_time, "{context}");
            assert_eq!(fast.dropped, slow.dropped, "{context}");
        }
    }

    /// Hand-made cases of each kind, as Kafka's rules give them.
    #[test]
    fn windows_of_each_kind_by_hand() {
        let recs = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
            v.iter().map(|(k, t)| ((*k).to_owned(), *t)).collect()
        };
        // Tumbling 10, grace 5: 3 and 7 in [0, 10); 12 in [10, 20); 4 arrives at stream time
        // 16 > 10 + 5: dropped; [0, 10) closed at 15, [10, 20) open.
        let tumbling = Spec {
            kind: Kind::Time {
                size: 10,
                advance: 10,
            },
            grace: 5,
        };
        let out = tumbling.run(&recs(&[("a", 3), ("a", 7), ("a", 12), ("a", 16), ("a", 4)]));
        assert_eq!(out.dropped, 1);
        assert_eq!(
            out.emitted.into_iter().collect::<Vec<_>>(),
            [(("a".to_owned(), 0, 10), 2)]
        );
        assert_eq!(out.finals.len(), 2);
        // Sessions with gap 5: 1 and 4 make [1, 4] ([1, 1] merged away); 20 starts another; 12
        // (within grace) is its own session [12, 12]; 16 merges [12, 12] and [20, 20] into
        // [12, 20].
        let sessions = Spec {
            kind: Kind::Session { gap: 5 },
            grace: 10,
        };
        let out = sessions.run(&recs(&[
            ("a", 1),
            ("a", 4),
            ("a", 20),
            ("a", 12),
            ("a", 16),
        ]));
        let finals: Vec<_> = out.finals.into_iter().collect();
        assert_eq!(
            finals,
            [(("a".to_owned(), 1, 4), 2), (("a".to_owned(), 12, 20), 3)]
        );
        let removed: Vec<_> = out.removed.into_iter().collect();
        assert_eq!(
            removed,
            [
                ("a".to_owned(), 1, 1),
                ("a".to_owned(), 12, 12),
                ("a".to_owned(), 20, 20)
            ]
        );
        // [1, 4] closed at 4 + 5 + 10 + 1 = 20.
        assert_eq!(
            out.emitted.into_iter().collect::<Vec<_>>(),
            [(("a".to_owned(), 1, 4), 2)]
        );
        // Sliding 10: records at 5 and 12 make [0, 10] (5), [2, 12] (5, 12) and [6, 16] (12).
        let sliding = Spec {
            kind: Kind::Sliding { diff: 10 },
            grace: 0,
        };
        let out = sliding.run(&recs(&[("a", 5), ("a", 12)]));
        let finals: Vec<_> = out.finals.into_iter().collect();
        assert_eq!(
            finals,
            [
                (("a".to_owned(), 0, 10), 1),
                (("a".to_owned(), 2, 12), 2),
                (("a".to_owned(), 6, 16), 1)
            ]
        );
    }
}
