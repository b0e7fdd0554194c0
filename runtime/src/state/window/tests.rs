//! The segmented store's tests: the encoding, a model of the store under random writes and
//! reads (in memory and on disk), expiry, reopening and malformed keys.

use crate::state::InMemoryKeyValueStore;
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::key::{Malformed, decode_entry, flip, parse_entry, unflip};
use super::segments::Backend;
// Through the store module's re-exports, as the operators will reach them.
use crate::state::{
    BytesStore, DecodedEntry, SegmentedKind, SegmentedStore, StoreError, encode_key, is_meta,
    key_bounds, meta_key, session_entry_key, window_entry_key,
};

use SegmentedKind::{Session, Window};

impl SegmentedStore {
    /// The ids of the segments held, ascending.
    fn segment_ids(&self) -> Vec<i64> {
        match &self.backend {
            Backend::Memory(m) => m.segments.keys().copied().collect(),
            Backend::Disk(d) => d.segments.keys().copied().collect(),
        }
    }
}

fn window_key(key: &[u8], start: i64, seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    window_entry_key(key, start, seq, &mut out);
    out
}

fn session_key(key: &[u8], end: i64, start: i64) -> Vec<u8> {
    let mut out = Vec::new();
    session_entry_key(key, end, start, &mut out);
    out
}

fn meta(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    meta_key(name, &mut out);
    out
}

fn fail(e: StoreError) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Every entry and meta key, as `for_each` visits them.
fn listing(store: &dyn BytesStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut all = Vec::new();
    store
        .for_each(&mut |k, v| all.push((k.to_vec(), v.to_vec())))
        .expect("for_each");
    all
}

fn scanned(store: &SegmentedStore, from: &[u8], to: &[u8], t0: i64, t1: i64) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    store
        .scan_time(from, to, t0, t1, &mut |k, _| keys.push(k.to_vec()))
        .expect("scan_time");
    keys
}

fn record_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(1), Just(0xFE), Just(0xFF), any::<u8>()],
        0..5,
    )
}

fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        -3i64..3,
        prop::sample::select(vec![i64::MIN, i64::MIN + 1, i64::MAX - 1, i64::MAX]),
    ]
}

#[test]
fn the_encoding_escapes_zero_bytes_terminates_keys_and_flips_the_sign_bit() {
    let mut out = Vec::new();
    encode_key(&[0, 1, 0xFF, 0], &mut out);
    assert_eq!(out, [0, 0xFF, 1, 0xFF, 0, 0xFF, 0, 0]);
    assert_eq!(flip(i64::MIN), [0; 8]);
    assert_eq!(flip(-1), [0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    assert_eq!(flip(0), [0x80, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(flip(i64::MAX), [0xFF; 8]);
    for t in [i64::MIN, -1, 0, 1, i64::MAX] {
        assert_eq!(unflip(flip(t)), t);
    }
    assert_eq!(
        window_key(b"k", 0, 7),
        [b'k', 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]
    );
    assert_eq!(key_bounds(b""), (vec![0, 0], vec![0, 1]));
    assert_eq!(
        key_bounds(b"a\0"),
        (vec![b'a', 0, 0xFF, 0, 0], vec![b'a', 0, 0xFF, 0, 1])
    );
    let m = meta(b"time");
    assert_eq!(m, b"\x00\x01time");
    assert!(is_meta(&m));
    assert!(!is_meta(&window_key(b"", 0, 0)) && !is_meta(&window_key(b"\0", 0, 0)));
    match decode_entry("w", Window, &m) {
        Err(StoreError::Corrupt { store, reason }) => {
            assert_eq!(store, "w");
            assert!(reason.contains("meta key"), "{reason}");
        }
        other => panic!("a meta key decoded as an entry: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Encoded window keys compare as their (key, start, seq) and decode back to them.
    #[test]
    fn window_keys_compare_as_key_start_seq_and_decode_back(
        a in (record_key(), time(), prop_oneof![Just(0u32), any::<u32>()]),
        b in (record_key(), time(), prop_oneof![Just(0u32), any::<u32>()]),
    ) {
        let (ea, eb) = (window_key(&a.0, a.1, a.2), window_key(&b.0, b.1, b.2));
        prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
        let decoded = decode_entry("w", Window, &ea).map_err(fail)?;
        prop_assert_eq!(decoded, DecodedEntry { key: a.0.clone(), time: a.1, second: i64::from(a.2) });
    }

    /// Encoded session keys compare as their (key, end, start) and decode back to them.
    #[test]
    fn session_keys_compare_as_key_end_start_and_decode_back(
        a in (record_key(), time(), time()),
        b in (record_key(), time(), time()),
    ) {
        let (ea, eb) = (session_key(&a.0, a.1, a.2), session_key(&b.0, b.1, b.2));
        prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
        let decoded = decode_entry("s", Session, &ea).map_err(fail)?;
        prop_assert_eq!(decoded, DecodedEntry { key: a.0.clone(), time: a.1, second: a.2 });
    }

    /// `key_bounds(a)` holds an entry of `b` exactly when `a == b`, and no meta key.
    #[test]
    fn key_bounds_hold_exactly_the_entries_of_their_key(
        a in record_key(), b in record_key(), t in time(), u in time(), seq in any::<u32>(),
    ) {
        let (lower, upper) = key_bounds(&a);
        for entry in [window_key(&b, t, seq), session_key(&b, t, u)] {
            prop_assert_eq!(lower <= entry && entry < upper, a == b);
        }
        let m = meta(&b);
        prop_assert!(!(lower <= m && m < upper));
    }

    /// Any bytes decode or fail with a `Corrupt` naming the store; what decodes is exactly
    /// the encoding of what it decodes to.
    #[test]
    fn decoding_any_bytes_never_panics_and_what_decodes_encodes_back(
        bytes in prop_oneof![
            prop::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()], 0..40),
            (record_key(), prop::collection::vec(any::<u8>(), 10..18)).prop_map(|(k, tail)| {
                let mut out = Vec::new();
                encode_key(&k, &mut out);
                out.extend(tail);
                out
            }),
        ],
    ) {
        for kind in [Window, Session] {
            match decode_entry("s", kind, &bytes) {
                Ok(d) => {
                    let again = match kind {
                        Window => window_key(&d.key, d.time, u32::try_from(d.second).map_err(|e| TestCaseError::fail(e.to_string()))?),
                        Session => session_key(&d.key, d.time, d.second),
                    };
                    prop_assert_eq!(&again, &bytes);
                }
                Err(StoreError::Corrupt { store, .. }) => prop_assert_eq!(store, "s"),
                Err(e) => return Err(TestCaseError::fail(format!("not Corrupt: {e}"))),
            }
        }
    }
}

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

fn raw_bound() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0xFF, b'a']), 0..4)
}

fn write() -> impl Strategy<Value = W> {
    prop_oneof![
        6 => (small_key(), -40i64..12, 0i64..4, prop::option::weighted(0.8, any::<u8>()))
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

fn op() -> impl Strategy<Value = Op> {
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
        ops in prop::collection::vec(op(), 1..50),
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
        ops in prop::collection::vec(op(), 1..50),
    ) {
        for kind in [Window, Session] {
            let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
            run_against_model(kind, retention, interval, &ops, Some(dir.path()))?;
        }
    }
}

fn keyspace_dirs(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("keyspaces")).map_or(0, |d| d.count())
}

/// A write that moves the observed time past a segment's retention drops the segment whole:
/// its entries go at once, later writes into it are ignored and counted, and on disk its
/// keyspace is gone after reopening.
#[test]
fn expiring_a_segment_drops_it_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let persistent = |dir: &std::path::Path| {
        SegmentedStore::persistent_in("w", Window, 100, 10, dir).expect("open")
    };
    for mut store in [
        SegmentedStore::in_memory("w", Window, 100, 10),
        persistent(dir.path()),
    ] {
        for t in (0..50).step_by(5) {
            store.put(&window_key(b"k", t, 0), b"v").expect("put");
        }
        store.flush().expect("flush");
        assert_eq!(store.segment_ids(), [0, 1, 2, 3, 4]);
        let dirs_before = keyspace_dirs(dir.path());
        // 125 - 100 + 1 = 26: segments 0 and 1 (times 0..20) expire.
        store.put(&window_key(b"k", 125, 0), b"v").expect("put");
        assert_eq!(store.segment_ids(), [2, 3, 4, 12]);
        assert_eq!(store.segment_count(), 4);
        let (lo, hi) = key_bounds(b"k");
        let times: Vec<i64> = scanned(&store, &lo, &hi, i64::MIN, i64::MAX)
            .iter()
            .map(|k| store.decode(k).expect("decode").time)
            .collect();
        assert_eq!(times, [20, 25, 30, 35, 40, 45, 125]);
        let mut out = Vec::new();
        assert!(
            !store
                .get_into(&window_key(b"k", 5, 0), &mut out)
                .expect("get")
        );
        assert!(!store.is_live(19) && store.is_live(20));
        store.put(&window_key(b"k", 5, 0), b"late").expect("put");
        store.delete(&window_key(b"k", 15, 0)).expect("delete");
        assert_eq!(
            store.expired_writes(),
            2,
            "writes into expired segments are counted"
        );
        assert_eq!(store.segment_count(), 4, "and create no segment");
        if store.is_persistent() {
            store.flush().expect("flush");
            drop(store);
            let store = persistent(dir.path());
            assert_eq!(store.segment_ids(), [2, 3, 4, 12]);
            assert_eq!(store.observed_time(), 125);
            assert_eq!(
                keyspace_dirs(dir.path()),
                dirs_before - 2 + 1,
                "two segments' keyspaces deleted, one created"
            );
        }
    }
}

/// A reopened store keeps its observed time: writes that were expired before stay ignored,
/// and later writes go on expiring segments.
/// The changelog position goes with the batch it covers, survives reopening, is not an
/// entry (nor counted as one), and goes with a wipe.
#[test]
fn the_recorded_position_survives_reopening_and_goes_with_a_wipe() {
    use crate::state::StorePosition;
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || SegmentedStore::persistent_in("s", Window, 1_000, 100, dir.path()).expect("open");
    let at = |offset| StorePosition {
        changelog: riffle_record::TopicPartition::new("app-s-changelog", 3),
        offset,
    };
    let mut store = open();
    assert_eq!(
        store.position().ok(),
        Some(None),
        "a new store records none"
    );
    let key = window_key(b"a", 10, 0);
    store
        .write_batch_at(
            &mut std::iter::once((key.as_slice(), Some(&b"1"[..]))),
            &at(7),
        )
        .expect("batch");
    assert_eq!(store.approximate_len(), 1, "the position is not an entry");
    drop(store);
    let mut store = open();
    assert_eq!(store.position().ok(), Some(Some(at(7))));
    assert_eq!(listing(&store).len(), 1, "nor visited as one");
    store.record_position(&at(9)).expect("record");
    drop(store);
    let mut store = open();
    assert_eq!(store.position().ok(), Some(Some(at(9))));
    store.wipe().expect("wipe");
    assert_eq!(store.position().ok(), Some(None));
    drop(store);
    assert_eq!(open().position().ok(), Some(None), "gone on disk too");
}

#[test]
fn a_reopened_store_keeps_its_observed_time_and_goes_on_expiring() {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || SegmentedStore::persistent_in("s", Session, 50, 10, dir.path()).expect("open");
    let mut store = open();
    let batch = [
        (session_key(b"a", 10, 0), b"1".to_vec()),
        (session_key(b"b", 70, 60), b"2".to_vec()),
        (meta(b"stream-time"), b"70".to_vec()),
    ];
    store
        .write_batch(
            &mut batch
                .iter()
                .map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
        )
        .expect("batch");
    // 70 - 50 + 1 = 21: segment 1 expired, segment 2 (times 20..30) live.
    assert_eq!(store.segment_ids(), [7]);
    drop(store);
    let mut store = open();
    assert_eq!(store.observed_time(), 70);
    store.put(&session_key(b"c", 15, 12), b"late").expect("put");
    assert_eq!(store.expired_writes(), 1);
    store.put(&session_key(b"c", 25, 22), b"kept").expect("put");
    assert_eq!(store.segment_ids(), [2, 7]);
    store.put(&session_key(b"d", 100, 90), b"4").expect("put");
    assert_eq!(
        store.segment_ids(),
        [7, 10],
        "100 - 50 + 1 = 51: segment 2 goes"
    );
    let all = listing(&store);
    assert_eq!(
        all.first().map(|(k, v)| (k.clone(), v.clone())),
        Some((meta(b"stream-time"), b"70".to_vec()))
    );
    assert_eq!(all.len(), 3, "the meta key and two sessions: {all:?}");
    store.wipe().expect("wipe");
    assert_eq!(
        (
            store.observed_time(),
            store.segment_count(),
            listing(&store).len()
        ),
        (i64::MIN, 0, 0)
    );
    drop(store);
    assert_eq!(
        open().observed_time(),
        i64::MIN,
        "a wiped store starts over"
    );
}

/// A batch writing one key more than once (a store with caching disabled gets every write)
/// ends with the last write, also after reopening: pins fjall's behaviour that
/// `Disk::commit` relies on.
#[test]
fn a_batch_writing_a_key_twice_keeps_the_last_write_also_after_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || SegmentedStore::persistent_in("w", Window, 100, 10, dir.path()).expect("open");
    let mut store = open();
    let key = |i: u8| window_key(&[i], 5, 0);
    let (k0, k1, k2, k3) = (key(0), key(1), key(2), key(3));
    let writes: [(&[u8], Option<&[u8]>); 8] = [
        (&k0, Some(b"1")),
        (&k0, Some(b"2")),
        (&k1, Some(b"2")),
        (&k1, Some(b"1")),
        (&k2, Some(b"1")),
        (&k2, None),
        (&k3, None),
        (&k3, Some(b"1")),
    ];
    store.write_batch(&mut writes.into_iter()).expect("batch");
    let expected = vec![
        (k0.clone(), b"2".to_vec()),
        (k1.clone(), b"1".to_vec()),
        (k3.clone(), b"1".to_vec()),
    ];
    assert_eq!(listing(&store), expected);
    store.flush().expect("flush");
    drop(store);
    assert_eq!(listing(&open()), expected, "after replaying the journal");
}

/// Segment ids mean other times under another kind or segment interval: opening so is
/// refused.
#[test]
fn a_store_reopened_with_another_kind_or_segment_interval_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = SegmentedStore::persistent_in("w", Window, 100, 10, dir.path()).expect("open");
    store.put(&window_key(b"k", 5, 0), b"v").expect("put");
    drop(store);
    for (kind, interval) in [(Window, 20), (Session, 10)] {
        match SegmentedStore::persistent_in("w", kind, 100, interval, dir.path()) {
            Err(StoreError::Corrupt { store, reason }) => {
                assert_eq!(store, "w");
                assert!(
                    reason.contains("a window store with 10 ms segments"),
                    "{reason}"
                );
            }
            other => panic!("opened as {kind:?} with {interval} ms segments: {other:?}"),
        }
    }
    let store = SegmentedStore::persistent_in("w", Window, 500, 10, dir.path())
        .expect("another retention is fine");
    assert_eq!(store.approximate_len(), 1);
}

/// A key that is neither an entry of the store's kind nor a meta key fails the whole batch
/// with a `Corrupt` naming the store, before anything is written; reads refuse it too.
#[test]
fn malformed_keys_are_corrupt_errors_and_fail_their_batch_whole() {
    let mut store = SegmentedStore::in_memory("wins", Window, 100, 10);
    let good = window_key(b"k", 5, 0);
    let session = session_key(b"k", 5, 0);
    for bad in [&session[..], b"\x00\x02observed", b"k", b""] {
        let mut batch = [(&good[..], Some(&b"v"[..])), (bad, Some(&b"v"[..]))].into_iter();
        match store.write_batch(&mut batch) {
            Err(StoreError::Corrupt { store, .. }) => assert_eq!(store, "wins"),
            other => panic!("{bad:?} written: {other:?}"),
        }
        assert!(
            store.get_into(bad, &mut Vec::new()).is_err(),
            "{bad:?} read"
        );
    }
    assert_eq!(listing(&store), []);
    assert_eq!(store.observed_time(), i64::MIN);
    assert!(matches!(
        parse_entry(Window, &window_key(b"k", 1, 2)[..14]),
        Err(Malformed::Tail { len: 11, .. })
    ));
}

/// Behind the trait, a segmented store is found by `as_segmented`; other stores are not.
#[test]
fn as_segmented_finds_a_segmented_store_behind_the_trait() {
    let stores: Vec<Box<dyn BytesStore>> = vec![
        Box::new(SegmentedStore::in_memory("w", Session, 100, 10)),
        Box::new(InMemoryKeyValueStore::new("kv")),
    ];
    assert_eq!(
        stores[0].as_segmented().map(SegmentedStore::kind),
        Some(Session)
    );
    assert_eq!(
        stores[0].as_segmented().map(SegmentedStore::retention_ms),
        Some(100)
    );
    assert_eq!(
        stores[0]
            .as_segmented()
            .map(SegmentedStore::segment_interval_ms),
        Some(10)
    );
    assert!(stores[1].as_segmented().is_none());
}
