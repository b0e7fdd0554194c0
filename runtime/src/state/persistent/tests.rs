//! The persistent key-value store on its own: a write-back large enough to be ingested.

use std::collections::BTreeMap;

use super::*;

/// A write-back large enough to be ingested (puts over keys already on disk, deletes of
/// some of them, new keys) reads, scans and reopens like a `BTreeMap`, with its position.
#[test]
fn a_large_write_back_is_ingested_and_reads_like_a_btreemap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |offset| StorePosition {
        changelog: riffle_record::TopicPartition::new("app-s-changelog", 0),
        offset,
    };
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let n = INGESTION_MIN_ENTRIES * 3;
    {
        let mut store = PersistentKeyValueStore::open_in("s", dir.path()).expect("open");
        // First on disk: every even key, through the memtable (a small write-back) and an
        // ingestion (a large one).
        for (round, keys) in [(0..100usize), (100..n)].into_iter().enumerate() {
            let writes: Vec<(Vec<u8>, Vec<u8>)> = keys
                .filter(|i| i % 2 == 0)
                .map(|i| (format!("k{i:06}").into_bytes(), b"old".to_vec()))
                .collect();
            let mut batch = writes.iter().map(|(k, v)| (&k[..], Some(&v[..])));
            store
                .write_batch_at(&mut batch, &at(round as u64 + 1))
                .expect("write");
            store.persist().expect("write back");
            model.extend(writes);
        }
        // Then, in one write-back: every third key rewritten, every fifth deleted.
        let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for i in (0..n).rev() {
            let key = format!("k{i:06}").into_bytes();
            if i % 5 == 0 {
                writes.push((key.clone(), None));
                model.remove(&key);
            } else if i % 3 == 0 {
                writes.push((key.clone(), Some(format!("new{i}").into_bytes())));
                model.insert(key, format!("new{i}").into_bytes());
            }
        }
        assert!(writes.len() >= INGESTION_MIN_ENTRIES, "{}", writes.len());
        let mut batch = writes.iter().map(|(k, v)| (&k[..], v.as_deref()));
        store.write_batch_at(&mut batch, &at(9)).expect("write");
        assert!(store.has_unpersisted());
        store.persist().expect("write back");
        store.flush().expect("flush");
        assert_eq!(store.position().ok(), Some(Some(at(9))));
        let mut out = Vec::new();
        for i in (0..n).step_by(7) {
            let key = format!("k{i:06}").into_bytes();
            let found = store.get_into(&key, &mut out).expect("get");
            assert_eq!(found.then(|| out.clone()), model.get(&key).cloned(), "{i}");
        }
    }
    let store = PersistentKeyValueStore::open_in("s", dir.path()).expect("reopen");
    assert_eq!(store.position().ok(), Some(Some(at(9))));
    let mut listed = BTreeMap::new();
    store
        .for_each(&mut |k, v| {
            listed.insert(k.to_vec(), v.to_vec());
        })
        .expect("scan");
    assert_eq!(listed, model);
}
