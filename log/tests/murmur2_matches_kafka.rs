//! The partitioner places keys exactly where Kafka's Java client does.

use riffle_log::{murmur2, partition_for_key};

/// Kafka's `UtilsTest.testMurmur2` vectors (clients/src/test/java/org/apache/kafka/common/utils).
const KAFKA_UTILS_TEST: &[(&str, i32)] = &[
    ("21", -973_932_308),
    ("foobar", -790_332_482),
    ("a-little-bit-long-string", -985_981_536),
    ("a-little-bit-longer-string", -1_486_304_829),
    (
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        -58_897_971,
    ),
    ("abc", 479_470_107),
];

/// Values of Kafka's `Utils.murmur2` quoted by Akka's Kafka-compatible port (`Murmur2Spec`):
/// every tail length 1–5.
const TAIL_LENGTHS: &[(&str, i32)] = &[
    ("1", -1_993_445_489),
    ("12", 126_087_238),
    ("123", -267_702_483),
    ("1234", -1_614_185_708),
    ("12345", -1_188_365_604),
];

#[test]
fn murmur2_matches_kafka_utils_test_vectors() {
    for &(key, expected) in KAFKA_UTILS_TEST.iter().chain(TAIL_LENGTHS) {
        assert_eq!(murmur2(key.as_bytes()), expected, "murmur2({key:?})");
    }
}

#[test]
fn partition_for_key_is_to_positive_modulo() {
    for &(key, hash) in KAFKA_UTILS_TEST {
        for n in [1u32, 2, 3, 7, 12, 100] {
            let expected = ((hash & 0x7fff_ffff) as u32) % n;
            assert_eq!(
                partition_for_key(key.as_bytes(), n),
                expected,
                "{key:?} over {n}"
            );
        }
    }
    // "foobar" hashes negative: toPositive masks the sign bit instead of taking abs().
    assert_eq!(
        partition_for_key(b"foobar", 1 << 31),
        (-790_332_482i32 & 0x7fff_ffff) as u32
    );
    assert_eq!(partition_for_key(b"", 0), 0);
}
