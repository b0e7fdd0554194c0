//! The write cache's tests: reads see the cache and the store sees only committed writes,
//! dirty entries' order, range reads after reordering, timestamped stores.

use super::*;
use crate::state::InMemoryKeyValueStore;

#[test]
fn reads_see_the_cache_and_the_store_sees_only_committed_writes() {
    let mut store = CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")));
    let mut out = Vec::new();
    let h = Headers::new();
    store.put(b"a", Some(b"1"), 1, &h);
    store.put(b"a", Some(b"2"), 2, &h);
    store.put(b"b", Some(b"3"), 3, &h);
    assert!(store.get_into(b"a", &mut out).unwrap_or(false));
    assert_eq!(out, b"2");
    assert!(
        !store.inner.get_into(b"a", &mut out).unwrap_or(true),
        "not in the store before commit"
    );
    assert_eq!(store.dirty_len(), 2, "one entry per key");
    assert_eq!(store.dirty(0), (&b"a"[..], Some(&b"2"[..]), 2));
    store.write_to_store(None).ok();
    assert_eq!(store.dirty_len(), 0);
    assert!(store.inner.get_into(b"a", &mut out).unwrap_or(false));
    assert_eq!(out, b"2");
    store.put(b"a", None, 4, &h);
    assert!(
        !store.get_into(b"a", &mut out).unwrap_or(true),
        "a cached delete hides the store's value"
    );
    store.discard();
    assert!(
        store.get_into(b"a", &mut out).unwrap_or(false),
        "discarded writes never reach the store"
    );
}

/// Kafka's cache flushes keys in the order of their last write.
#[test]
fn dirty_entries_come_in_the_order_of_their_last_write() {
    let mut store = CachedStore::new(Box::new(InMemoryKeyValueStore::new("s")));
    let h = Headers::new();
    for (k, ts) in [(&b"a"[..], 1), (b"b", 2), (b"c", 3), (b"a", 4), (b"c", 5)] {
        store.put(k, Some(b"v"), ts, &h);
    }
    store.order_by_last_write();
    let order: Vec<(Vec<u8>, i64)> = (0..store.dirty_len())
        .map(|i| (store.dirty(i).0.to_vec(), store.dirty(i).2))
        .collect();
    assert_eq!(
        order,
        [(b"b".to_vec(), 2), (b"a".to_vec(), 4), (b"c".to_vec(), 5)]
    );
    let mut out = Vec::new();
    assert_eq!(
        store.get_with_timestamp(b"a", &mut out).ok(),
        Some(Some(4)),
        "index follows"
    );
    store.put(b"b", Some(b"w"), 6, &h);
    assert_eq!(store.dirty_len(), 3, "still one entry per key");
}

/// Reordering keeps the ordered index of a window store pointing at the right entries.
#[test]
fn reordering_keeps_a_window_stores_range_reads_right() {
    use crate::state::{SegmentedKind, SegmentedStore, window_entry_key};
    let inner = SegmentedStore::in_memory("w", SegmentedKind::Window, 1_000, 100);
    let mut store = CachedStore::configured(Box::new(inner), false, true, true);
    let h = Headers::new();
    let key = |k: &[u8], start| {
        let mut out = Vec::new();
        window_entry_key(k, start, 0, &mut out);
        out
    };
    for (k, start, v) in [
        (&b"a"[..], 0, &b"1"[..]),
        (b"b", 0, b"2"),
        (b"a", 10, b"3"),
        (b"a", 0, b"4"),
    ] {
        store.put(&key(k, start), Some(v), start, &h);
    }
    store.order_by_last_write();
    let got: Vec<Vec<u8>> = store
        .scan_window(&[], &[], 0, 100)
        .unwrap_or_default()
        .into_iter()
        .map(|(_, v, _)| v)
        .collect();
    assert_eq!(
        got,
        [b"4".to_vec(), b"3".to_vec(), b"2".to_vec()],
        "by key, then start"
    );
}

#[test]
fn a_timestamped_store_keeps_each_values_timestamp_and_refuses_a_value_too_short_for_one() {
    let mut store = CachedStore::timestamped(Box::new(InMemoryKeyValueStore::new("t")));
    let h = Headers::new();
    let mut out = Vec::new();
    store.put(b"a", Some(b"1"), 42, &h);
    assert_eq!(
        store.get_with_timestamp(b"a", &mut out).ok(),
        Some(Some(42))
    );
    store.write_to_store(None).ok();
    assert_eq!(
        store.get_with_timestamp(b"a", &mut out).ok(),
        Some(Some(42)),
        "read back from the store"
    );
    assert_eq!(out, b"1", "the value without its timestamp");
    let mut raw = Vec::new();
    assert!(store.inner.get_into(b"a", &mut raw).unwrap_or(false));
    assert_eq!(
        raw,
        [&42i64.to_be_bytes()[..], b"1"].concat(),
        "8-byte BE prefix"
    );
    assert_eq!(
        store.scan(None, None).ok(),
        Some(vec![(b"a".to_vec(), b"1".to_vec())])
    );
    store.inner.put(b"short", b"1234").ok();
    assert!(matches!(
        store.get_with_timestamp(b"short", &mut out),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(store.scan(None, None).is_err());
}

mod model {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::super::*;
    use crate::state::InMemoryKeyValueStore;

    #[derive(Clone, Debug)]
    enum Op {
        /// Key number, value (`None`: delete), timestamp.
        Put(u8, Option<Vec<u8>>, i64),
        Get(u8),
        OrderByLastWrite,
        Commit,
        Discard,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..12, proptest::option::weighted(0.85, proptest::collection::vec(any::<u8>(), 0..40)), 0i64..1_000)
                .prop_map(|(k, v, ts)| Op::Put(k, v, ts)),
            3 => (0u8..12).prop_map(Op::Get),
            1 => Just(Op::OrderByLastWrite),
            1 => Just(Op::Commit),
            1 => Just(Op::Discard),
        ]
    }

    /// Keys of different lengths, so that keys and values of all sizes share the arena.
    fn key(k: u8) -> Vec<u8> {
        vec![k; 1 + (k as usize % 5) * 7]
    }

    type Write = (Vec<u8>, Option<Vec<u8>>, i64);

    /// What the cache must hold: for caching, each key's latest write in the order of the
    /// last writes; otherwise every write in order.
    fn expected_dirty(writes: &[Write], caching: bool) -> Vec<Write> {
        if !caching {
            return writes.to_vec();
        }
        let mut out: Vec<Write> = Vec::new();
        for w in writes {
            out.retain(|o| o.0 != w.0);
            out.push(w.clone());
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The arena cache against a model: a committed `BTreeMap` and the writes since.
        #[test]
        fn the_cache_reads_and_commits_like_its_model(
            timestamped in any::<bool>(),
            caching in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let inner = Box::new(InMemoryKeyValueStore::new("m"));
            let mut store = CachedStore::configured(inner, timestamped, caching, false);
            let h = Headers::new();
            let mut committed: BTreeMap<Vec<u8>, (Vec<u8>, i64)> = BTreeMap::new();
            let mut writes: Vec<Write> = Vec::new();
            let mut out = Vec::new();
            for op in ops {
                match op {
                    Op::Put(k, v, ts) => {
                        store.put(&key(k), v.as_deref(), ts, &h);
                        writes.push((key(k), v, ts));
                    }
                    Op::Get(k) => {
                        let k = key(k);
                        let want = match writes.iter().rev().find(|w| w.0 == k) {
                            Some((_, v, ts)) => v.clone().map(|v| (v, *ts)),
                            None => committed.get(&k).map(|(v, ts)| {
                                (v.clone(), if timestamped { *ts } else { NO_TIMESTAMP })
                            }),
                        };
                        let got = store.get_with_timestamp(&k, &mut out);
                        prop_assert!(got.is_ok());
                        let got = got.ok().flatten().map(|ts| (out.clone(), ts));
                        prop_assert_eq!(got, want);
                    }
                    Op::OrderByLastWrite => {
                        store.order_by_last_write();
                        let want = expected_dirty(&writes, caching);
                        let got: Vec<Write> = (0..store.dirty_len())
                            .map(|i| {
                                let (k, v, ts) = store.dirty(i);
                                (k.to_vec(), v.map(<[u8]>::to_vec), ts)
                            })
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                    Op::Commit => {
                        prop_assert_eq!(store.dirty_len(), expected_dirty(&writes, caching).len());
                        let min: usize = expected_dirty(&writes, caching)
                            .iter()
                            .map(|w| w.0.len() + w.1.as_ref().map_or(0, Vec::len))
                            .sum();
                        prop_assert!(store.cache_bytes() >= min);
                        for (k, v, ts) in writes.drain(..) {
                            match v {
                                Some(v) => { committed.insert(k, (v, ts)); }
                                None => { committed.remove(&k); }
                            }
                        }
                        prop_assert!(store.write_to_store(None).is_ok());
                        prop_assert_eq!(store.dirty_len(), 0);
                        prop_assert_eq!(store.cache_bytes(), 0);
                    }
                    Op::Discard => {
                        writes.clear();
                        store.discard();
                    }
                }
                let mut merged: BTreeMap<Vec<u8>, Vec<u8>> =
                    committed.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect();
                for (k, v, _) in &writes {
                    match v {
                        Some(v) => { merged.insert(k.clone(), v.clone()); }
                        None => { merged.remove(k); }
                    }
                }
                let scanned = store.scan(None, None);
                prop_assert!(scanned.is_ok());
                prop_assert_eq!(scanned.unwrap_or_default(), merged.into_iter().collect::<Vec<_>>());
            }
            // What reached the store, read past the cache.
            store.discard();
            for (k, (v, ts)) in &committed {
                prop_assert_eq!(
                    store.get_with_timestamp(k, &mut out).ok().flatten(),
                    Some(if timestamped { *ts } else { NO_TIMESTAMP })
                );
                prop_assert_eq!(&out, v);
            }
        }
    }
}
