//! Segments and retention: a segment expires whole once the observed time passes its
//! retention, and a reopened store keeps its observed time and goes on expiring.

use super::{listing, meta, scanned, session_key, window_key};
use crate::state::{BytesStore, SegmentedKind, SegmentedStore, key_bounds};

use SegmentedKind::{Session, Window};

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
