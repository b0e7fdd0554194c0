//! The key encoding: escaped keys, terminators and sign-flipped times order entries as their
//! fields do and decode back; any bytes decode or fail cleanly; malformed keys are refused.

use proptest::prelude::*;

use super::super::key::{Malformed, flip, parse_entry, unflip};
use super::{fail, listing, meta, session_key, window_key};
use crate::state::{
    BytesStore, DecodedEntry, SegmentedKind, SegmentedStore, StoreError, decode_entry, encode_key,
    is_meta, key_bounds,
};

use SegmentedKind::{Session, Window};

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
