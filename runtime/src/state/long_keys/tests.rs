//! The persistent key-value store with keys of every length (0 to 200,000 bytes, many sharing
//! a long head) against a `BTreeMap`: point reads, full scans and ranges in key order, through
//! the write-back table, fjall's memtable, an ingestion and a reopening.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use proptest::prelude::*;

use super::*;
use crate::state::{BytesStore, PersistentKeyValueStore, StoreError, StorePosition};

/// 200,010 bytes every long key is a prefix of (then a short suffix): so long keys share heads,
/// and shorter keys are prefixes of longer ones.
pub(crate) fn stem() -> &'static [u8] {
    static STEM: OnceLock<Vec<u8>> = OnceLock::new();
    STEM.get_or_init(|| {
        let mut x: u32 = 0x9E37_79B9;
        (0..200_010)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                [1u8, b'a', 0xFF, 0][(x % 4) as usize]
            })
            .collect()
    })
}

/// A key of `len` bytes of the stem and then `suffix`.
pub(crate) fn stem_key(len: usize, suffix: &[u8]) -> Vec<u8> {
    let mut key = stem()[..len].to_vec();
    key.extend_from_slice(suffix);
    key
}

/// Lengths around `inline_max` (the longest key written as is), and far past it.
pub(crate) fn key_len(inline_max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => 0usize..4,
        3 => (inline_max - 3)..(inline_max + 4),
        2 => prop::sample::select(vec![70_000usize, 199_990]),
        1 => 0usize..200_000,
    ]
}

/// Keys of every length, many sharing their first `inline_max` bytes.
pub(crate) fn any_key(inline_max: usize) -> impl Strategy<Value = Vec<u8>> {
    (
        key_len(inline_max),
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xFF, b'a']), 0..3),
    )
        .prop_map(|(len, suffix)| stem_key(len, &suffix))
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, u8),
    Delete(Vec<u8>),
    /// Writes in one batch, a key possibly twice.
    Batch(Vec<(Vec<u8>, Option<u8>)>),
    /// As restoration gives them: ascending, each key once.
    Restore(Vec<(Vec<u8>, Option<u8>)>),
    Get(Vec<u8>),
    Range(Vec<u8>, Vec<u8>),
    Persist,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let key = || any_key(KV.inline_max());
    let write = move || (key(), prop::option::weighted(0.8, any::<u8>()));
    prop_oneof![
        6 => (key(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => key().prop_map(Op::Delete),
        2 => prop::collection::vec(write(), 0..6).prop_map(Op::Batch),
        2 => prop::collection::vec(write(), 0..6).prop_map(Op::Restore),
        4 => key().prop_map(Op::Get),
        4 => (key(), key()).prop_map(|(a, b)| Op::Range(a, b)),
        1 => Just(Op::Persist),
        1 => Just(Op::Reopen),
    ]
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Entries, in the order read.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn listing(store: &PersistentKeyValueStore) -> Result<Entries, TestCaseError> {
    let mut all = Vec::new();
    store
        .for_each(&mut |k, v| all.push((k.to_vec(), v.to_vec())))
        .map_err(fail)?;
    Ok(all)
}

fn run(ops: &[Op], dir: &std::path::Path) -> Result<(), TestCaseError> {
    let mut store = PersistentKeyValueStore::open_in("s", dir).map_err(fail)?;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut out = Vec::new();
    let apply = |model: &mut BTreeMap<Vec<u8>, Vec<u8>>, k: &[u8], v: Option<u8>| match v {
        Some(v) => model.insert(k.to_vec(), vec![v]),
        None => model.remove(k),
    };
    for op in ops {
        match op {
            Op::Put(k, v) => {
                store.put(k, &[*v]).map_err(fail)?;
                apply(&mut model, k, Some(*v));
            }
            Op::Delete(k) => {
                store.delete(k).map_err(fail)?;
                apply(&mut model, k, None);
            }
            Op::Batch(writes) => {
                let values: Vec<_> = writes.iter().map(|(k, v)| (k, v.map(|v| [v]))).collect();
                store
                    .write_batch(
                        &mut values
                            .iter()
                            .map(|(k, v)| (k.as_slice(), v.as_ref().map(|v| &v[..]))),
                    )
                    .map_err(fail)?;
                for (k, v) in writes {
                    apply(&mut model, k, *v);
                }
            }
            Op::Restore(writes) => {
                let last: BTreeMap<_, _> = writes.iter().cloned().collect();
                let values: Vec<_> = last.iter().map(|(k, v)| (k, v.map(|v| [v]))).collect();
                store
                    .restore_sorted(
                        &mut values
                            .iter()
                            .map(|(k, v)| (k.as_slice(), v.as_ref().map(|v| &v[..]))),
                    )
                    .map_err(fail)?;
                for (k, v) in last {
                    apply(&mut model, &k, v);
                }
            }
            Op::Get(k) => {
                let found = store.get_into(k, &mut out).map_err(fail)?;
                prop_assert_eq!(found.then(|| out.clone()), model.get(k).cloned());
            }
            Op::Range(from, to) => {
                let mut got = Vec::new();
                store
                    .range(from, to, &mut |k, v| got.push((k.to_vec(), v.to_vec())))
                    .map_err(fail)?;
                let want: Vec<_> = if from < to {
                    model
                        .range::<[u8], _>((Bound::Included(&from[..]), Bound::Excluded(&to[..])))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                prop_assert!(
                    got == want,
                    "range of {} and {} bytes",
                    from.len(),
                    to.len()
                );
            }
            Op::Persist => store.persist().map_err(fail)?,
            Op::Reopen => {
                store.persist().map_err(fail)?;
                store.flush().map_err(fail)?;
                drop(store);
                store = PersistentKeyValueStore::open_in("s", dir).map_err(fail)?;
            }
        }
    }
    let want: Vec<_> = model.into_iter().collect();
    prop_assert!(listing(&store)? == want, "the whole store");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Keys of 0 to 200,000 bytes, many sharing a head longer than fjall's key limit leaves
    /// for it, read and scanned as a `BTreeMap` holds them.
    #[test]
    fn keys_of_any_length_read_and_scan_like_a_btreemap(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().map_err(fail)?;
        run(&ops, dir.path())?;
    }
}

/// A write-back and a restoration large enough to be ingested as a table of fjall's own, with
/// long keys among the short ones: ingested in fjall's order, read back in the keys'.
#[test]
fn long_keys_in_an_ingestion_read_back_in_key_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = PersistentKeyValueStore::open_in("s", dir.path()).expect("open");
    let mut model = BTreeMap::new();
    let short: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| format!("k{i:06}").into_bytes())
        .collect();
    let long: Vec<Vec<u8>> = (0..24u8)
        .map(|i| stem_key(70_000 + usize::from(i % 3), &[i]))
        .collect();
    for (round, keys) in [&short[..10_000], &short[10_000..]].into_iter().enumerate() {
        let mut writes: Vec<(Vec<u8>, Vec<u8>)> = keys
            .iter()
            .map(|k| (k.clone(), vec![round as u8]))
            .collect();
        writes.extend(
            long.iter()
                .map(|k| (k.clone(), vec![round as u8, k[70_000]])),
        );
        writes.sort();
        if round == 0 {
            // A restoration: ascending keys.
            store
                .restore_sorted(&mut writes.iter().map(|(k, v)| (&k[..], Some(&v[..]))))
                .expect("restore");
        } else {
            let at = StorePosition {
                changelog: riffle_record::TopicPartition::new("app-s-changelog", 0),
                offset: 7,
            };
            store
                .write_batch_at(&mut writes.iter().map(|(k, v)| (&k[..], Some(&v[..]))), &at)
                .expect("write");
            store.persist().expect("write back");
        }
        model.extend(writes);
    }
    store.flush().expect("flush");
    drop(store);
    let store = PersistentKeyValueStore::open_in("s", dir.path()).expect("reopen");
    let want: Vec<_> = model.clone().into_iter().collect();
    assert!(listing(&store).expect("list") == want, "the whole store");
    let mut out = Vec::new();
    for key in &long {
        assert!(store.get_into(key, &mut out).expect("get"));
        assert_eq!(Some(&out), model.get(key));
    }
}

/// A long key's entry whose value lost its tail is a corrupt-store error on a read and a scan,
/// never a panic nor another key's value.
#[test]
fn a_long_key_whose_value_was_damaged_is_a_corrupt_store_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = PersistentKeyValueStore::open_in("s", dir.path()).expect("open");
    let key = stem_key(70_000, b"");
    store.put(&key, b"v").expect("put");
    store.persist().expect("write back");
    // What a damaged value would be: too short for its tail, then another key's tail.
    let fjall_key = KV.key(&0u32.to_be_bytes(), &key);
    let kv = store.database().kv().clone();
    kv.insert(fjall_key.clone(), [0u8, 0, 0x10, 0].as_slice())
        .expect("damage");
    let mut out = Vec::new();
    for result in [
        store.get_into(&key, &mut out).map(|_| ()),
        store.for_each(&mut |_, _| {}),
    ] {
        match result {
            Err(StoreError::Corrupt { store, reason }) => {
                assert_eq!(store, "s");
                assert!(reason.contains("too short"), "{reason}");
                let way_out = format!("delete {}", dir.path().display());
                assert!(reason.contains(&way_out), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    let mut other = KV.value(&key, b"v").expect("value").to_vec();
    other[4] ^= 0x01;
    kv.insert(fjall_key, other).expect("damage");
    match store.get_into(&key, &mut out) {
        Err(StoreError::Corrupt { reason, .. }) => {
            assert!(reason.contains("another key"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_layouts_fill_fjalls_longest_key_exactly() {
    for (layout, prefix) in [(KV, &[0u8, 0, 0, 7][..]), (SEGMENT, &[][..])] {
        let at_most = stem_key(layout.inline_max(), b"");
        assert_eq!(
            layout.key(prefix, &at_most).len(),
            prefix.len() + at_most.len()
        );
        let long = stem_key(layout.inline_max() + 1, b"");
        assert_eq!(layout.key(prefix, &long).len(), FJALL_MAX_KEY);
        let (key, value) = layout
            .decode(
                &layout.key(prefix, &long),
                &layout.value(&long, b"v").expect("value"),
            )
            .map(|(k, v)| (k.into_owned(), v.to_vec()))
            .expect("decode");
        assert_eq!((key, value), (long, b"v".to_vec()));
    }
    assert_eq!(successor(vec![1, 0xFF, 0xFF]), Some(vec![2]));
    assert_eq!(successor(vec![0xFF]), None);
}
