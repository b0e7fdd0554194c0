//! The segmented store's tests, by what they check: the key encoding (`keys.rs`), the store
//! against a model under random writes and reads, in memory and on disk (`model.rs`), segment
//! expiry (`expiry.rs`) and what a store on disk keeps across reopening (`reopening.rs`). Here:
//! the helpers they share, and finding a segmented store behind the trait.

use proptest::prelude::*;

use super::segments::Backend;
use crate::state::InMemoryKeyValueStore;
// Through the store module's re-exports, as the operators will reach them.
use crate::state::{
    BytesStore, SegmentedStore, StoreError, meta_key, session_entry_key, window_entry_key,
};

use crate::state::SegmentedKind::Session;

mod expiry;
mod keys;
mod model;
mod reopening;

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
