//! The window and session stores against a model under random writes, reads, wipes and
//! reopenings: what every read returns, the whole contents, the observed time, the expired
//! writes and the segments held, in memory and on disk.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{fail, listing, meta, session_key, window_key};
use crate::state::long_keys::SEGMENT;
use crate::state::long_keys::tests::{any_key, stem};
use crate::state::{BytesStore, SegmentedKind, SegmentedStore, key_bounds};

use SegmentedKind::{Session, Window};

/// A model key: an entry (record key, entry time, second field) or a meta key's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ModelKey {
    Entry(Vec<u8>, i64, i64),
    Meta(Vec<u8>),
}

/// What the store should hold: every entry ever written (visible iff its segment is live),
/// the meta keys, the observed time and the expired writes.
struct Model {
    kind: SegmentedKind,
    retention: i64,
    interval: i64,
    entries: BTreeMap<(Vec<u8>, i64, i64), Vec<u8>>,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    observed: i64,
    expired: u64,
}

impl Model {
    fn segment(&self, t: i64) -> i64 {
        t.div_euclid(self.interval)
    }
    /// `segment_id(observed - retention + 1)`, computed without overflow.
    fn bound(&self) -> i64 {
        let t = i128::from(self.observed) - i128::from(self.retention) + 1;
        let id = t.div_euclid(i128::from(self.interval));
        i64::try_from(id).unwrap_or(i64::MIN)
    }
    fn visible(&self, t: i64) -> bool {
        self.segment(t) >= self.bound()
    }
    /// Where relative times count from.
    fn base(&self) -> i64 {
        if self.observed == i64::MIN {
            0
        } else {
            self.observed
        }
    }
    fn encode(&self, key: &ModelKey) -> Vec<u8> {
        match (key, self.kind) {
            (ModelKey::Meta(name), _) => meta(name),
            (ModelKey::Entry(k, t, s), Window) => {
                window_key(k, *t, u32::try_from(*s).unwrap_or_default())
            }
            (ModelKey::Entry(k, t, s), Session) => session_key(k, *t, *s),
        }
    }
    /// The absolute key a generated write means now.
    fn resolve(&self, w: &W) -> (ModelKey, Option<Vec<u8>>) {
        match w {
            W::Entry {
                key,
                dt,
                second,
                value,
            } => {
                let t = self.base().saturating_add(*dt);
                (self.entry_key(key, t, *second), value.map(|v| vec![v]))
            }
            W::Meta { name, value } => (ModelKey::Meta(vec![*name]), value.map(|v| vec![v])),
        }
    }
    fn entry_key(&self, key: &[u8], t: i64, second: i64) -> ModelKey {
        match self.kind {
            Window => ModelKey::Entry(key.to_vec(), t, second),
            Session => ModelKey::Entry(key.to_vec(), t, t.saturating_sub(second * 3)),
        }
    }
    /// A batch: the observed time rises to its largest entry time first; writes into
    /// segments expired then are ignored and counted.
    fn apply(&mut self, writes: &[(ModelKey, Option<Vec<u8>>)]) {
        for (key, _) in writes {
            if let ModelKey::Entry(_, t, _) = key {
                self.observed = self.observed.max(*t);
            }
        }
        for (key, value) in writes {
            match key {
                ModelKey::Meta(name) => match value {
                    Some(v) => {
                        self.meta.insert(name.clone(), v.clone());
                    }
                    None => {
                        self.meta.remove(name);
                    }
                },
                ModelKey::Entry(k, t, s) => {
                    if !self.visible(*t) {
                        self.expired += 1;
                        continue;
                    }
                    match value {
                        Some(v) => {
                            self.entries.insert((k.clone(), *t, *s), v.clone());
                        }
                        None => {
                            self.entries.remove(&(k.clone(), *t, *s));
                        }
                    }
                }
            }
        }
    }
    fn get(&self, key: &ModelKey) -> Option<Vec<u8>> {
        match key {
            ModelKey::Meta(name) => self.meta.get(name).cloned(),
            ModelKey::Entry(k, t, s) => self
                .entries
                .get(&(k.clone(), *t, *s))
                .filter(|_| self.visible(*t))
                .cloned(),
        }
    }
    /// Visible entries with `from <= key < to` and time in `[t0, t1]`, by segment, then key.
    fn entries_in(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        t0: i64,
        t1: i64,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut found: Vec<_> = self
            .entries
            .iter()
            .filter(|((_, t, _), _)| self.visible(*t) && (t0..=t1).contains(t))
            .map(|((k, t, s), v)| {
                let key = self.encode(&ModelKey::Entry(k.clone(), *t, *s));
                (self.segment(*t), key, v.clone())
            })
            .filter(|(_, key, _)| key.as_slice() >= from && to.is_none_or(|to| key.as_slice() < to))
            .collect();
        found.sort();
        found.into_iter().map(|(_, k, v)| (k, v)).collect()
    }
    /// What `range` (or `for_each`, with no `to`) visits: meta keys, then entries.
    fn listing(&self, from: &[u8], to: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all: Vec<_> = self
            .meta
            .iter()
            .map(|(name, v)| (meta(name), v.clone()))
            .filter(|(key, _)| key.as_slice() >= from && to.is_none_or(|to| key.as_slice() < to))
            .collect();
        all.extend(self.entries_in(from, to, i64::MIN, i64::MAX));
        all
    }
    fn existing(&self, i: prop::sample::Index) -> Option<ModelKey> {
        if self.entries.is_empty() {
            return None;
        }
        let (k, t, s) = self.entries.keys().nth(i.index(self.entries.len()))?;
        Some(ModelKey::Entry(k.clone(), *t, *s))
    }
}

/// A generated write; its time is relative to the model's observed time.
#[derive(Debug, Clone)]
enum W {
    Entry {
        key: Vec<u8>,
        dt: i64,
        second: i64,
        value: Option<u8>,
    },
    Meta {
        name: u8,
        value: Option<u8>,
    },
}

#[derive(Debug, Clone)]
enum Op {
    Write(W),
    DeleteExisting(prop::sample::Index),
    PutAt {
        key: Vec<u8>,
        time: i64,
        value: u8,
    },
    Batch(Vec<W>),
    Restore(Vec<W>),
    Get {
        key: Vec<u8>,
        dt: i64,
        second: i64,
    },
    GetExisting(prop::sample::Index),
    /// `bounds`: 0, the key bounds of `a`; 1, from the smaller key's lower bound to the
    /// larger's upper; 2, the raw bytes `a..b`.
    ScanTime {
        a: Vec<u8>,
        b: Vec<u8>,
        bounds: u8,
        dt: i64,
        len: i64,
    },
    /// `scan_time` over the key bounds of an existing entry's key, around its time.
    ScanExisting {
        entry: prop::sample::Index,
        dt: i64,
        len: i64,
    },
    Range {
        from: Vec<u8>,
        to: Vec<u8>,
    },
    Wipe,
    Reopen,
}

fn small_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xFF, b'a']), 0..3)
}

/// Record keys: small ones, and (`long`) keys whose entry keys are longer than fjall takes
/// (runtime/src/state/long_keys.rs), many sharing their head.
fn record_key(long: bool) -> BoxedStrategy<Vec<u8>> {
    if !long {
        return small_key().boxed();
    }
    // The escaped key and its times (12 or 16 bytes) are the entry key: lengths around the
    // longest written as is.
    let mut escaped = 2 + 14;
    let crossing = stem()
        .iter()
        .position(|&b| {
            escaped += if b == 0 { 2 } else { 1 };
            escaped > SEGMENT.inline_max()
        })
        .unwrap_or_default();
    prop_oneof![
        1 => small_key(),
        3 => any_key(crossing),
    ]
    .boxed()
}

fn raw_bound() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0xFF, b'a']), 0..4)
}

fn write(long: bool) -> impl Strategy<Value = W> {
    prop_oneof![
        6 => (record_key(long), -40i64..12, 0i64..4, prop::option::weighted(0.8, any::<u8>()))
            .prop_map(|(key, dt, second, value)| W::Entry { key, dt, second, value }),
        1 => (0u8..3, prop::option::weighted(0.8, any::<u8>()))
            .prop_map(|(name, value)| W::Meta { name, value }),
    ]
}

/// Writes on few keys, so that a batch often writes one key twice.
fn dense_write() -> impl Strategy<Value = W> {
    prop_oneof![
        4 => (prop::sample::select(vec![vec![], vec![0u8]]), -2i64..1, prop::option::of(0u8..3))
            .prop_map(|(key, dt, value)| W::Entry { key, dt, second: 0, value }),
        1 => prop::option::of(0u8..3).prop_map(|value| W::Meta { name: 0, value }),
    ]
}

fn op(long: bool) -> impl Strategy<Value = Op> {
    let write = move || write(long);
    let small_key = move || record_key(long);
    prop_oneof![
        8 => write().prop_map(Op::Write),
        2 => any::<prop::sample::Index>().prop_map(Op::DeleteExisting),
        1 => (
            small_key(),
            prop::sample::select(vec![i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX]),
            any::<u8>(),
        ).prop_map(|(key, time, value)| Op::PutAt { key, time, value }),
        3 => prop::collection::vec(prop_oneof![write(), dense_write()], 0..8).prop_map(Op::Batch),
        2 => prop::collection::vec(prop_oneof![write(), dense_write()], 0..8).prop_map(Op::Restore),
        3 => (small_key(), -40i64..12, 0i64..4).prop_map(|(key, dt, second)| Op::Get { key, dt, second }),
        3 => any::<prop::sample::Index>().prop_map(Op::GetExisting),
        5 => (small_key(), small_key(), 0u8..3, -50i64..12, -3i64..60)
            .prop_map(|(a, b, bounds, dt, len)| Op::ScanTime { a, b, bounds, dt, len }),
        3 => (any::<prop::sample::Index>(), -30i64..1, 0i64..40)
            .prop_map(|(entry, dt, len)| Op::ScanExisting { entry, dt, len }),
        2 => (raw_bound(), raw_bound()).prop_map(|(from, to)| Op::Range { from, to }),
        1 => Just(Op::Wipe),
        2 => Just(Op::Reopen),
    ]
}

fn open(
    kind: SegmentedKind,
    retention: i64,
    interval: i64,
    dir: Option<&std::path::Path>,
) -> Result<SegmentedStore, TestCaseError> {
    match dir {
        Some(dir) => {
            SegmentedStore::persistent_in("s", kind, retention, interval, dir).map_err(fail)
        }
        None => Ok(SegmentedStore::in_memory("s", kind, retention, interval)),
    }
}

fn check_scan(
    store: &SegmentedStore,
    model: &Model,
    from: &[u8],
    to: &[u8],
    t0: i64,
    t1: i64,
) -> Result<(), TestCaseError> {
    let mut got = Vec::new();
    store
        .scan_time(from, to, t0, t1, &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()))
        })
        .map_err(fail)?;
    prop_assert_eq!(
        got,
        // An empty `to` is no upper bound.
        model.entries_in(from, (!to.is_empty()).then_some(to), t0, t1),
        "scan_time {:?}..{:?} [{}, {}]",
        from,
        to,
        t0,
        t1
    );
    Ok(())
}

/// Runs `ops` on a store (on disk in `dir`, else in memory) and on the model, checking
/// every read, and after every operation the whole contents, the observed time and the
/// expired writes.
fn run_against_model(
    kind: SegmentedKind,
    retention: i64,
    interval: i64,
    ops: &[Op],
    dir: Option<&std::path::Path>,
) -> Result<(), TestCaseError> {
    let mut store = open(kind, retention, interval, dir)?;
    let mut model = Model {
        kind,
        retention,
        interval,
        entries: BTreeMap::new(),
        meta: BTreeMap::new(),
        observed: i64::MIN,
        expired: 0,
    };
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Write(w) => {
                let (key, value) = model.resolve(w);
                let encoded = model.encode(&key);
                match &value {
                    Some(v) => store.put(&encoded, v),
                    None => store.delete(&encoded),
                }
                .map_err(fail)?;
                model.apply(&[(key, value)]);
            }
            Op::DeleteExisting(i) => {
                if let Some(key) = model.existing(*i) {
                    store.delete(&model.encode(&key)).map_err(fail)?;
                    model.apply(&[(key, None)]);
                }
            }
            Op::PutAt { key, time, value } => {
                let key = model.entry_key(key, *time, 1);
                store.put(&model.encode(&key), &[*value]).map_err(fail)?;
                model.apply(&[(key, Some(vec![*value]))]);
            }
            Op::Batch(ws) => {
                let writes: Vec<_> = ws.iter().map(|w| model.resolve(w)).collect();
                let encoded: Vec<_> = writes
                    .iter()
                    .map(|(k, v)| (model.encode(k), v.clone()))
                    .collect();
                store
                    .write_batch(&mut encoded.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
                    .map_err(fail)?;
                model.apply(&writes);
            }
            Op::Restore(ws) => {
                // As restoration gives them: each key once (its last write), ascending.
                let mut last = BTreeMap::new();
                for w in ws {
                    let (key, value) = model.resolve(w);
                    last.insert(model.encode(&key), (key, value));
                }
                store
                    .restore_sorted(
                        &mut last.iter().map(|(k, (_, v))| (k.as_slice(), v.as_deref())),
                    )
                    .map_err(fail)?;
                let writes: Vec<_> = last.into_values().collect();
                model.apply(&writes);
            }
            Op::Get { key, dt, second } => {
                let key = model.entry_key(key, model.base().saturating_add(*dt), *second);
                let found = store
                    .get_into(&model.encode(&key), &mut out)
                    .map_err(fail)?;
                prop_assert_eq!(found.then(|| out.clone()), model.get(&key), "get {:?}", key);
            }
            Op::GetExisting(i) => {
                if let Some(key) = model.existing(*i) {
                    let found = store
                        .get_into(&model.encode(&key), &mut out)
                        .map_err(fail)?;
                    prop_assert_eq!(found.then(|| out.clone()), model.get(&key), "get {:?}", key);
                }
            }
            Op::ScanTime {
                a,
                b,
                bounds,
                dt,
                len,
            } => {
                let (from, to) = match bounds {
                    0 => key_bounds(a),
                    1 => (key_bounds(a.min(b)).0, key_bounds(a.max(b)).1),
                    _ => (a.clone(), b.clone()),
                };
                let t0 = model.base().saturating_add(*dt);
                check_scan(&store, &model, &from, &to, t0, t0.saturating_add(*len))?;
            }
            Op::ScanExisting { entry, dt, len } => {
                if let Some(ModelKey::Entry(key, t, _)) = model.existing(*entry) {
                    let (from, to) = key_bounds(&key);
                    let t0 = t.saturating_add(*dt);
                    check_scan(&store, &model, &from, &to, t0, t0.saturating_add(*len))?;
                }
            }
            Op::Range { from, to } => {
                let mut got = Vec::new();
                store
                    .range(from, to, &mut |k, v| got.push((k.to_vec(), v.to_vec())))
                    .map_err(fail)?;
                prop_assert_eq!(
                    got,
                    model.listing(from, Some(to)),
                    "range {:?}..{:?}",
                    from,
                    to
                );
            }
            Op::Wipe => {
                store.wipe().map_err(fail)?;
                model.entries.clear();
                model.meta.clear();
                model.observed = i64::MIN;
            }
            Op::Reopen => {
                if dir.is_some() {
                    store.flush().map_err(fail)?;
                    drop(store);
                    store = open(kind, retention, interval, dir)?;
                    // The counter is the running store's, for a metric.
                    model.expired = 0;
                }
            }
        }
        prop_assert_eq!(listing(&store), model.listing(&[], None), "after {:?}", op);
        prop_assert_eq!(store.observed_time(), model.observed, "after {:?}", op);
        prop_assert_eq!(store.expired_writes(), model.expired, "after {:?}", op);
        let live_segments: std::collections::BTreeSet<i64> = model
            .entries
            .keys()
            .filter(|(_, t, _)| model.visible(*t))
            .map(|(_, t, _)| model.segment(*t))
            .collect();
        if dir.is_none() {
            let visible = model
                .entries
                .keys()
                .filter(|(_, t, _)| model.visible(*t))
                .count();
            prop_assert_eq!(store.approximate_len(), visible + model.meta.len());
            prop_assert_eq!(
                store.segment_ids(),
                live_segments.into_iter().collect::<Vec<_>>()
            );
        } else {
            // On disk a segment emptied by deletes stays until it expires.
            let held = store.segment_ids();
            prop_assert!(live_segments.iter().all(|s| held.contains(s)));
            prop_assert!(held.iter().all(|&s| s >= model.bound()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The in-memory window and session stores read as the model says, expiry included.
    #[test]
    fn the_in_memory_store_reads_like_its_model(
        retention in 1i64..60,
        interval in 1i64..25,
        ops in prop::collection::vec(op(false), 1..50),
    ) {
        for kind in [Window, Session] {
            run_against_model(kind, retention, interval, &ops, None)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The persistent window and session stores read as the model says, expiry included,
    /// across closing and reopening.
    #[test]
    fn the_persistent_store_reads_like_its_model_across_reopening(
        retention in 1i64..60,
        interval in 1i64..25,
        ops in prop::collection::vec(op(false), 1..50),
    ) {
        for kind in [Window, Session] {
            let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
            run_against_model(kind, retention, interval, &ops, Some(dir.path()))?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The persistent window and session stores with record keys of up to 200,000 bytes, many
    /// sharing a head longer than fjall's key limit leaves for it: every read, fetch by key
    /// and time, and range as the model says, across reopening.
    #[test]
    fn the_persistent_store_with_long_keys_reads_like_its_model(
        retention in 1i64..60,
        interval in 1i64..25,
        ops in prop::collection::vec(op(true), 1..30),
    ) {
        for kind in [Window, Session] {
            let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
            run_against_model(kind, retention, interval, &ops, Some(dir.path()))?;
        }
    }
}
