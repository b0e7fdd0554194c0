//! What a store on disk keeps across reopening: its changelog position (gone with a wipe), the
//! last of a batch's writes to one key, and its kind and segment interval (another is refused).

use super::{listing, window_key};
use crate::state::{BytesStore, SegmentedKind, SegmentedStore, StoreError};

use SegmentedKind::{Session, Window};

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
