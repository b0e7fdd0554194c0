//! The serdes against byte layouts written out by hand from Kafka's serializers and
//! deserializers (its `ShortSerializer` … `ListSerializer`, `ListDeserializer`), round trips,
//! and bad input.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn encode<T: 'static>(serde: &dyn Serde<T>, value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    serde
        .serialize(value, &mut out)
        .expect("a value this serde encodes");
    out
}

/// The message of a decoding error (which must name the type).
fn decode_error<T: std::fmt::Debug + 'static>(
    serde: &dyn Serde<T>,
    bytes: Option<&[u8]>,
) -> String {
    match serde.deserialize(bytes) {
        Ok(v) => panic!("{bytes:?} decoded as {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn integers_are_big_endian_like_kafka() {
    assert_eq!(encode(&I16Serde, &0x0102), [0x01, 0x02]);
    assert_eq!(encode(&I16Serde, &-2), [0xff, 0xfe]);
    assert_eq!(encode(&I32Serde, &0x0102_0304), [0x01, 0x02, 0x03, 0x04]);
    assert_eq!(encode(&I32Serde, &1), [0, 0, 0, 1]);
    assert_eq!(encode(&I32Serde, &-1), [0xff, 0xff, 0xff, 0xff]);
    assert_eq!(encode(&I32Serde, &i32::MIN), [0x80, 0, 0, 0]);
    assert_eq!(encode(&I64Serde, &258), [0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(encode(&U64Serde, &u64::MAX), [0xff; 8]);
    assert_eq!(I32Serde.deserialize(Some(&[0, 0, 1, 0])).ok(), Some(256));
    assert_eq!(I16Serde.deserialize(Some(&[0x80, 0])).ok(), Some(i16::MIN));
}

#[test]
fn floats_are_their_ieee_bits_big_endian_like_kafka() {
    // 1.0f32 is 0x3f800000, -2.5f32 is 0xc0200000, 1.0f64 is 0x3ff0000000000000, 0.1f64 is
    // 0x3fb999999999999a.
    assert_eq!(encode(&F32Serde, &1.0), [0x3f, 0x80, 0, 0]);
    assert_eq!(encode(&F32Serde, &-2.5), [0xc0, 0x20, 0, 0]);
    assert_eq!(encode(&F64Serde, &1.0), [0x3f, 0xf0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        encode(&F64Serde, &0.1),
        [0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a]
    );
    // Kafka's floatToRawIntBits keeps a NaN's payload.
    let nan = f32::from_bits(0x7fc0_0001);
    assert_eq!(encode(&F32Serde, &nan), [0x7f, 0xc0, 0, 1]);
    let back = F32Serde.deserialize(Some(&[0x7f, 0xc0, 0, 1])).ok();
    assert_eq!(back.map(f32::to_bits), Some(0x7fc0_0001));
}

#[test]
fn booleans_are_one_byte_and_read_only_zero_or_one() {
    assert_eq!(encode(&BoolSerde, &true), [0x01]);
    assert_eq!(encode(&BoolSerde, &false), [0x00]);
    assert_eq!(BoolSerde.deserialize(Some(&[1])).ok(), Some(true));
    assert_eq!(BoolSerde.deserialize(Some(&[0])).ok(), Some(false));
    // Kafka's BooleanDeserializer: exactly one byte, and only 0x01 or 0x00.
    for bad in [&[2u8][..], &[0xff], &[], &[1, 0]] {
        assert!(decode_error(&BoolSerde, Some(bad)).starts_with("bool: "));
    }
    assert!(decode_error(&BoolSerde, None).contains("null"));
}

#[test]
fn uuids_are_their_string_form() {
    let text = "123e4567-e89b-12d3-a456-426614174000";
    let uuid = Uuid::from_u128(0x123e_4567_e89b_12d3_a456_4266_1417_4000);
    assert_eq!(encode(&UuidSerde, &uuid), text.as_bytes());
    assert_eq!(
        UuidSerde.deserialize(Some(text.as_bytes())).ok(),
        Some(uuid)
    );
    // Upper-case hex digits read, as Java's UUID.fromString reads them.
    let upper = text.to_ascii_uppercase();
    assert_eq!(
        UuidSerde.deserialize(Some(upper.as_bytes())).ok(),
        Some(uuid)
    );
    for bad in [
        // The simple (no hyphens), braced and URN forms are not the string form Kafka writes.
        &b"123e4567e89b12d3a456426614174000"[..],
        b"{123e4567-e89b-12d3-a456-426614174000}",
        b"urn:uuid:123e4567-e89b-12d3-a456-426614174000",
        b"123e4567-e89b-12d3-a456-42661417400g",
        b"123e4567+e89b-12d3-a456-426614174000",
        b"",
        &[0xff; 36],
    ] {
        assert!(
            decode_error(&UuidSerde, Some(bad)).starts_with("Uuid: "),
            "{bad:?}"
        );
    }
}

#[test]
fn void_is_always_null() {
    assert!(VoidSerde.is_null(&()));
    assert_eq!(encode(&VoidSerde, &()), b"");
    assert_eq!(VoidSerde.deserialize(None).ok(), Some(()));
    // Kafka's VoidDeserializer refuses any bytes, even none.
    assert!(decode_error(&VoidSerde, Some(b"")).starts_with("(): "));
    assert!(decode_error(&VoidSerde, Some(b"x")).contains("1 bytes"));
}

#[test]
fn bytes_are_unchanged() {
    let bytes = Bytes::from_static(b"\x00\xffab");
    assert_eq!(encode(&BytesSerde, &bytes), b"\x00\xffab");
    assert_eq!(
        BytesSerde.deserialize(Some(b"\x00\xffab")).ok(),
        Some(bytes)
    );
    assert_eq!(BytesSerde.deserialize(None).ok(), Some(Bytes::new()));
    assert_eq!(encode(&ByteVecSerde, &vec![1, 2]), [1, 2]);
}

#[test]
fn fixed_size_numbers_of_the_wrong_length_are_errors_naming_the_type() {
    for len in [0, 1, 3, 9] {
        let message = decode_error(&I16Serde, Some(&vec![0; len]));
        assert!(message.starts_with(&format!("i16: expected 2 bytes, got {len}")));
    }
    assert!(decode_error(&I32Serde, Some(&[1, 2, 3])).starts_with("i32: expected 4 bytes, got 3"));
    assert!(decode_error(&I64Serde, Some(&[1, 2, 3])).starts_with("i64: "));
    assert!(decode_error(&F32Serde, Some(&[1; 8])).starts_with("f32: "));
    assert!(decode_error(&F64Serde, Some(&[1; 4])).starts_with("f64: "));
    assert!(decode_error(&I32Serde, None).starts_with("i32: unexpected null"));
    assert!(decode_error(&StringSerde, Some(&[0xff, 0xfe])).starts_with("String: "));
    assert!(decode_error(&StringSerde, None).starts_with("String: "));
    assert!(
        JsonSerde::<Vec<u32>>::new()
            .deserialize(Some(b"{"))
            .is_err()
    );
}

/// Kafka's ListSerializer with an Integer inner serde (CONSTANT_SIZE): the strategy byte 0,
/// the null index list (its length, then each index), the size, then each non-null entry's 4
/// bytes.
#[test]
fn lists_of_constant_size_entries_are_laid_out_as_kafka_writes_them() {
    let ints = Serdes::list(Serdes::i32());
    #[rustfmt::skip]
    let expected = [
        0x00,               // CONSTANT_SIZE
        0, 0, 0, 0,         // no null entries
        0, 0, 0, 2,         // two entries
        0, 0, 0, 1,         // 1
        0xff, 0xff, 0xff, 0xfe, // -2
    ];
    assert_eq!(encode(&*ints, &vec![1, -2]), expected);
    assert_eq!(ints.deserialize(Some(&expected)).ok(), Some(vec![1, -2]));

    let nullable = Serdes::list(Serdes::optional(Serdes::i32()));
    #[rustfmt::skip]
    let expected = [
        0x00,               // CONSTANT_SIZE
        0, 0, 0, 2,         // two null entries:
        0, 0, 0, 1,         //   index 1
        0, 0, 0, 3,         //   index 3
        0, 0, 0, 4,         // four entries
        0, 0, 0, 7,         // 7
        0xff, 0xff, 0xff, 0xff, // -1 (not a null: nulls have no bytes here)
    ];
    let list = vec![Some(7), None, Some(-1), None];
    assert_eq!(encode(&*nullable, &list), expected);
    assert_eq!(nullable.deserialize(Some(&expected)).ok(), Some(list));

    let empty = [0x00, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(encode(&*Serdes::list(Serdes::i64()), &vec![]), empty);

    // UUIDs are constant-size too (36 bytes each).
    let uuids = Serdes::list(Serdes::uuid());
    let uuid = Uuid::from_u128(1);
    let mut expected = vec![0x00, 0, 0, 0, 0, 0, 0, 0, 1];
    expected.extend_from_slice(b"00000000-0000-0000-0000-000000000001");
    assert_eq!(encode(&*uuids, &vec![uuid]), expected);
    assert_eq!(uuids.deserialize(Some(&expected)).ok(), Some(vec![uuid]));
}

/// Kafka's ListSerializer with any other inner serde (VARIABLE_SIZE): the strategy byte 1, the
/// size, then each entry's length and bytes, a null entry's length -1 and no bytes.
#[test]
fn lists_of_variable_size_entries_are_laid_out_as_kafka_writes_them() {
    let strings = Serdes::list(Serdes::optional(Serdes::string()));
    #[rustfmt::skip]
    let expected = [
        0x01,                       // VARIABLE_SIZE
        0, 0, 0, 4,                 // four entries
        0, 0, 0, 1, b'a',           // "a"
        0, 0, 0, 0,                 // ""
        0xff, 0xff, 0xff, 0xff,     // null
        0, 0, 0, 2, b'b', b'c',     // "bc"
    ];
    let list = vec![
        Some("a".into()),
        Some(String::new()),
        None,
        Some("bc".into()),
    ];
    assert_eq!(encode(&*strings, &list), expected);
    assert_eq!(strings.deserialize(Some(&expected)).ok(), Some(list));

    // Kafka's list keeps per-entry lengths for booleans (BooleanSerializer is not among its
    // fixed-length serializers).
    let bools = Serdes::list(Serdes::bool());
    #[rustfmt::skip]
    let expected = [0x01, 0, 0, 0, 2, 0, 0, 0, 1, 0x01, 0, 0, 0, 1, 0x00];
    assert_eq!(encode(&*bools, &vec![true, false]), expected);
    assert_eq!(
        bools.deserialize(Some(&expected)).ok(),
        Some(vec![true, false])
    );

    assert_eq!(
        encode(&*Serdes::list(Serdes::string()), &vec![]),
        [0x01, 0, 0, 0, 0]
    );

    // A list of lists: the inner lists are variable-size entries.
    let nested = Serdes::list(Serdes::list(Serdes::i16()));
    #[rustfmt::skip]
    let expected = [
        0x01, 0, 0, 0, 1,                       // VARIABLE_SIZE, one entry
        0, 0, 0, 11,                            // of 11 bytes:
        0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0x01, 0x02, // CONSTANT_SIZE, no nulls, [0x0102]
    ];
    assert_eq!(encode(&*nested, &vec![vec![0x0102]]), expected);
    assert_eq!(
        nested.deserialize(Some(&expected)).ok(),
        Some(vec![vec![0x0102]])
    );
}

#[test]
fn bad_lists_are_errors_not_panics() {
    let ints = Serdes::list(Serdes::i32());
    let strings = Serdes::list(Serdes::string());
    let cases: [(&[u8], &str); 7] = [
        (&[], "the serialization strategy"),
        (&[2, 0, 0, 0, 0], "unknown serialization strategy 2"),
        (&[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0], "an entry needs 4 bytes"),
        (&[0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff], "negative"),
        (
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
            "1 bytes after the last of its 0",
        ),
        (
            &[0, 0x7f, 0xff, 0xff, 0xff],
            "a null entry's index needs 4 bytes",
        ),
        // A null entry of a list whose entries cannot be null.
        (
            &[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1],
            "entry 0: i32: unexpected null",
        ),
    ];
    for (bytes, expected) in cases {
        let message = decode_error(&*ints, Some(bytes));
        assert!(message.starts_with("List: "), "{message}");
        assert!(message.contains(expected), "{message}, not {expected}");
    }
    let cases: [(&[u8], &str); 5] = [
        // Constant-size entries for a serde without a constant size.
        (&[0, 0, 0, 0, 0, 0, 0, 0, 0], "no constant size"),
        (
            &[1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe],
            "entry 0's length is negative (-2)",
        ),
        (
            &[1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff],
            "entry 0: String: unexpected null",
        ),
        (&[1, 0, 0, 0, 1, 0, 0, 0, 3, b'a'], "an entry needs 3 bytes"),
        (&[1, 0, 0, 0, 1, 0, 0, 0, 1, 0xff], "entry 0: String: "),
    ];
    for (bytes, expected) in cases {
        let message = decode_error(&*strings, Some(bytes));
        assert!(message.contains(expected), "{message}, not {expected}");
    }
    assert!(decode_error(&*ints, None).starts_with("List: unexpected null"));
    // A count claiming more entries than there are bytes allocates no more than the bytes.
    assert!(
        ints.deserialize(Some(&[1, 0x7f, 0xff, 0xff, 0xff]))
            .is_err()
    );
}

/// A serde claiming a constant size it does not write cannot make a list Kafka would misread.
#[test]
fn a_constant_size_entry_of_the_wrong_size_is_a_serialization_error() {
    struct Liar;
    impl Serde<String> for Liar {
        fn serialize(&self, value: &String, out: &mut Vec<u8>) -> Result<(), SerdeError> {
            StringSerde.serialize(value, out)
        }
        fn deserialize(&self, bytes: Option<&[u8]>) -> Result<String, SerdeError> {
            StringSerde.deserialize(bytes)
        }
        fn constant_size(&self) -> Option<usize> {
            Some(2)
        }
    }
    let list = Serdes::list(Arc::new(Liar));
    let mut out = Vec::new();
    let error = list.serialize(&vec!["abc".into()], &mut out);
    assert!(matches!(error, Err(SerdeError::Unserializable { .. })));
}

#[test]
fn json_that_cannot_be_written_is_an_error_not_null() {
    let serde = JsonSerde::<BTreeMap<Vec<u8>, u32>>::new();
    let mut out = Vec::new();
    let error = serde.serialize(&BTreeMap::from([(vec![1], 2)]), &mut out);
    match error {
        Err(SerdeError::Unserializable { type_name, reason }) => {
            assert!(type_name.contains("BTreeMap"), "{type_name}");
            assert!(reason.contains("key must be a string"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let mut out = Vec::new();
    serde
        .serialize(&BTreeMap::new(), &mut out)
        .expect("an empty map");
    assert_eq!(out, b"{}");
}

/// The byte layouts of Kafka's `TimeWindowedSerializer` and `SessionWindowedSerializer`.
#[test]
fn windowed_keys_are_laid_out_as_kafka_writes_them() {
    let time = Serdes::time_windowed(Serdes::string(), std::time::Duration::from_secs(60));
    let key = Windowed::new("ab".to_string(), Window::new(120_000, 180_000));
    let out = encode(&*time, &key);
    assert_eq!(out, [&b"ab"[..], &120_000i64.to_be_bytes()].concat());
    assert_eq!(time.deserialize(Some(&out)).ok(), Some(key.clone()));
    assert!(time.deserialize(Some(b"short")).is_err(), "no panic");
    let session = Serdes::session_windowed(Serdes::string());
    assert_eq!(
        encode(&*session, &key),
        [
            &b"ab"[..],
            &180_000i64.to_be_bytes(),
            &120_000i64.to_be_bytes()
        ]
        .concat(),
        "end before start"
    );
    assert_eq!(
        session.deserialize(Some(&encode(&*session, &key))).ok(),
        Some(key)
    );
    let optional = Serdes::optional(Serdes::i64());
    assert!(optional.is_null(&None) && !optional.is_null(&Some(1)));
    assert_eq!(optional.deserialize(None).ok(), Some(None));
}

#[test]
fn json_round_trips() {
    let serde = JsonSerde::<Vec<u32>>::new();
    let out = encode(&serde, &vec![1, 2]);
    assert_eq!(serde.deserialize(Some(&out)).ok(), Some(vec![1, 2]));
}

#[test]
fn the_primitives_have_default_serdes() {
    fn layout<T: DefaultSerde>(value: T) -> Vec<u8> {
        encode(&*T::default_serde(), &value)
    }
    assert_eq!(layout(1i16), [0, 1]);
    assert_eq!(layout(1i32), [0, 0, 0, 1]);
    assert_eq!(layout(1i64), [0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(layout(1.0f32), [0x3f, 0x80, 0, 0]);
    assert_eq!(layout(true), [1]);
    assert_eq!(layout(String::from("é")), [0xc3, 0xa9]);
    assert!(<()>::default_serde().is_null(&()));
    assert!(<Option<i32>>::default_serde().is_null(&None));
    assert_eq!(layout(Some(2i32)), [0, 0, 0, 2]);
}

/// The length a list of `entries` takes in Kafka's layout, from the layout's description.
fn constant_list_len(entries: &[Option<i32>]) -> usize {
    let nulls = entries.iter().filter(|e| e.is_none()).count();
    1 + 4 + 4 * nulls + 4 + 4 * (entries.len() - nulls)
}

fn variable_list_len(entries: &[Option<String>]) -> usize {
    1 + 4
        + entries
            .iter()
            .map(|e| 4 + e.as_ref().map_or(0, String::len))
            .sum::<usize>()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn numbers_round_trip(a: i16, b: i32, c: i64, d: u64, e: f32, f: f64, g: bool) {
        prop_assert_eq!(I16Serde.deserialize(Some(&encode(&I16Serde, &a))).ok(), Some(a));
        prop_assert_eq!(I32Serde.deserialize(Some(&encode(&I32Serde, &b))).ok(), Some(b));
        prop_assert_eq!(I64Serde.deserialize(Some(&encode(&I64Serde, &c))).ok(), Some(c));
        prop_assert_eq!(U64Serde.deserialize(Some(&encode(&U64Serde, &d))).ok(), Some(d));
        let e2 = F32Serde.deserialize(Some(&encode(&F32Serde, &e))).ok();
        prop_assert_eq!(e2.map(f32::to_bits), Some(e.to_bits()));
        let f2 = F64Serde.deserialize(Some(&encode(&F64Serde, &f))).ok();
        prop_assert_eq!(f2.map(f64::to_bits), Some(f.to_bits()));
        prop_assert_eq!(BoolSerde.deserialize(Some(&encode(&BoolSerde, &g))).ok(), Some(g));
        prop_assert_eq!(encode(&I32Serde, &b), b.to_be_bytes());
    }

    #[test]
    fn uuids_round_trip(bits: u128) {
        let uuid = Uuid::from_u128(bits);
        let out = encode(&UuidSerde, &uuid);
        prop_assert_eq!(out.len(), 36);
        let text = uuid.to_string();
        prop_assert_eq!(&out, text.as_bytes());
        prop_assert_eq!(UuidSerde.deserialize(Some(&out)).ok(), Some(uuid));
    }

    #[test]
    fn lists_round_trip_at_the_layouts_length(
        ints in proptest::collection::vec(proptest::option::of(any::<i32>()), 0..20),
        strings in proptest::collection::vec(proptest::option::of(".{0,5}"), 0..20),
        nested in proptest::collection::vec(proptest::collection::vec(any::<i64>(), 0..4), 0..6),
    ) {
        let serde = Serdes::list(Serdes::optional(Serdes::i32()));
        let out = encode(&*serde, &ints);
        prop_assert_eq!(out.len(), constant_list_len(&ints));
        prop_assert_eq!(serde.deserialize(Some(&out)).ok(), Some(ints));

        let serde = Serdes::list(Serdes::optional(Serdes::string()));
        let out = encode(&*serde, &strings);
        prop_assert_eq!(out.len(), variable_list_len(&strings));
        prop_assert_eq!(serde.deserialize(Some(&out)).ok(), Some(strings));

        let serde = Serdes::list(Serdes::list(Serdes::i64()));
        let out = encode(&*serde, &nested);
        prop_assert_eq!(serde.deserialize(Some(&out)).ok(), Some(nested));
    }

    /// Any bytes decode or fail; none panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Serdes::list(Serdes::optional(Serdes::i32())).deserialize(Some(&bytes));
        let _ = Serdes::list(Serdes::optional(Serdes::string())).deserialize(Some(&bytes));
        let _ = Serdes::list(Serdes::list(Serdes::uuid())).deserialize(Some(&bytes));
        let _ = UuidSerde.deserialize(Some(&bytes));
        let _ = BoolSerde.deserialize(Some(&bytes));
        let _ = F64Serde.deserialize(Some(&bytes));
        let _ = VoidSerde.deserialize(Some(&bytes));
    }
}
