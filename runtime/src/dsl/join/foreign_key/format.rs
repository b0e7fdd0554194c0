//! A foreign-key join's records as Kafka Streams writes them (KIP-213), so its internal topics
//! and its subscription store read the same with Kafka's tools: the left row's hash
//! ([`row_hash`]), a subscription ([`Subscription`], [`SubscriptionSerde`]) and its
//! [`Instruction`], an answer ([`Response`], [`ResponseSerde`]), and the subscription store's
//! key ([`key_prefix`]). The nodes that send and read them are in `node.rs`.

use crate::serdes::Serde;
use crate::types::error::{Result, SerdeError};

/// Kafka's seed for the row hashes (`Murmur3.DEFAULT_SEED`).
const HASH_SEED: u32 = 104_729;

/// A left row's hash: Kafka's `Murmur3.hash128` of its serialized value, the two longs
/// big-endian.
pub(crate) type RowHash = [u8; 16];

/// The hash of a serialized row.
pub(crate) fn row_hash(bytes: &[u8]) -> RowHash {
    let (h1, h2) = mur3::murmurhash3_x64_128(bytes, HASH_SEED);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&h1.to_be_bytes());
    out[8..].copy_from_slice(&h2.to_be_bytes());
    out
}

/// What the right side does with a subscription (Kafka's `SubscriptionWrapper.Instruction`,
/// with its byte values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instruction {
    /// Forget the subscription; answer nothing.
    DeleteKeyNoPropagate = 0,
    /// Forget the subscription; answer "no right row" (the left row is gone).
    DeleteKeyAndPropagate = 1,
    /// Keep it; answer with the right row, or "none" if there is none.
    PropagateNullIfNoFkValAvailable = 2,
    /// Keep it; answer only if there is a right row.
    PropagateOnlyIfFkValAvailable = 3,
}

impl Instruction {
    fn from_byte(b: u8) -> Option<Instruction> {
        Some(match b {
            0 => Instruction::DeleteKeyNoPropagate,
            1 => Instruction::DeleteKeyAndPropagate,
            2 => Instruction::PropagateNullIfNoFkValAvailable,
            3 => Instruction::PropagateOnlyIfFkValAvailable,
            _ => return None,
        })
    }
}

/// A left key's subscription to a foreign key (Kafka's `SubscriptionWrapper`, version 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subscription {
    /// The left row's hash; `None`: the row was deleted.
    pub(crate) hash: Option<RowHash>,
    pub(crate) instruction: Instruction,
    /// The left key, serialized.
    pub(crate) primary_key: Vec<u8>,
    /// The left partition the answer goes to.
    pub(crate) primary_partition: u32,
}

fn invalid(type_name: &'static str, reason: impl Into<String>) -> SerdeError {
    SerdeError::Invalid {
        type_name,
        reason: reason.into(),
    }
}

/// The version byte's flag for an absent hash.
const NO_HASH: u8 = 0x80;

/// `{version | 0x80 without a hash}{instruction}{16-byte hash, if any}{left key}{left partition,
/// 4 bytes big-endian}` (Kafka's `SubscriptionWrapperSerde`; version 0 has no partition).
pub(crate) struct SubscriptionSerde;

impl Serde<Subscription> for SubscriptionSerde {
    fn serialize(&self, s: &Subscription, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.push(1 | if s.hash.is_none() { NO_HASH } else { 0 });
        out.push(s.instruction as u8);
        if let Some(hash) = &s.hash {
            out.extend_from_slice(hash);
        }
        out.extend_from_slice(&s.primary_key);
        out.extend_from_slice(&s.primary_partition.to_be_bytes());
        Ok(())
    }

    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Subscription, SerdeError> {
        const NAME: &str = "SubscriptionWrapper";
        let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name: NAME })?;
        let [version, instruction, rest @ ..] = bytes else {
            return Err(invalid(NAME, format!("{} bytes", bytes.len())));
        };
        let instruction = Instruction::from_byte(*instruction)
            .ok_or_else(|| invalid(NAME, format!("unknown instruction {instruction}")))?;
        let (hash, rest) = if version & NO_HASH != 0 {
            (None, rest)
        } else {
            let (hash, rest) = rest
                .split_first_chunk::<16>()
                .ok_or_else(|| invalid(NAME, "shorter than its hash"))?;
            (Some(*hash), rest)
        };
        let (primary_key, primary_partition) = match version & !NO_HASH {
            0 => (rest, 0),
            1 => {
                let (key, partition) = rest
                    .split_last_chunk::<4>()
                    .ok_or_else(|| invalid(NAME, "shorter than its partition"))?;
                (key, u32::from_be_bytes(*partition))
            }
            v => return Err(invalid(NAME, format!("unknown version {v}"))),
        };
        Ok(Subscription {
            hash,
            instruction,
            primary_key: primary_key.to_vec(),
            primary_partition,
        })
    }
}

/// The right side's answer to a subscription (Kafka's `SubscriptionResponseWrapper`, version
/// 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    /// The subscribed left row's hash.
    pub(crate) hash: Option<RowHash>,
    /// The right row, serialized; `None`: there is none.
    pub(crate) foreign: Option<Vec<u8>>,
    /// The left partition the answer goes to (not written: the record is in it).
    pub(crate) primary_partition: u32,
}

/// `{0 | 0x80 without a hash}{16-byte hash, if any}{right row, to the end; none if empty}`
/// (Kafka's `SubscriptionResponseWrapperSerde`).
pub(crate) struct ResponseSerde;

impl Serde<Response> for ResponseSerde {
    fn serialize(&self, r: &Response, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.push(if r.hash.is_none() { NO_HASH } else { 0 });
        if let Some(hash) = &r.hash {
            out.extend_from_slice(hash);
        }
        if let Some(foreign) = &r.foreign {
            out.extend_from_slice(foreign);
        }
        Ok(())
    }

    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Response, SerdeError> {
        const NAME: &str = "SubscriptionResponseWrapper";
        let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name: NAME })?;
        let (&version, rest) = bytes.split_first().ok_or_else(|| invalid(NAME, "empty"))?;
        if version & !NO_HASH != 0 {
            return Err(invalid(
                NAME,
                format!("unknown version {}", version & !NO_HASH),
            ));
        }
        let (hash, rest) = if version & NO_HASH != 0 {
            (None, rest)
        } else {
            let (hash, rest) = rest
                .split_first_chunk::<16>()
                .ok_or_else(|| invalid(NAME, "shorter than its hash"))?;
            (Some(*hash), rest)
        };
        Ok(Response {
            hash,
            foreign: (!rest.is_empty()).then(|| rest.to_vec()),
            primary_partition: 0,
        })
    }
}

/// Appends the subscription store's key prefix of foreign key `fk`: its length (4 bytes
/// big-endian) and its bytes (Kafka's `CombinedKeySchema`); the left key follows it.
pub(super) fn key_prefix(fk: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(fk.len() as u32).to_be_bytes());
    out.extend_from_slice(fk);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::dsl::table::node::ChangeSerde;
    use crate::processor::node::Change;
    use crate::serdes::Serdes;

    proptest! {
        /// What the foreign-key join's and the grouped table's topics hold is read back from
        /// bytes anyone can write: any bytes decode or are an error, never a panic, and what
        /// riffle writes reads back as it was.
        #[test]
        fn the_internal_topics_decoders_take_any_bytes(
            bytes in prop::collection::vec(any::<u8>(), 0..64),
            hash in prop::option::of(any::<[u8; 16]>()),
            key in prop::collection::vec(any::<u8>(), 0..16),
            partition in any::<u32>(),
            old in prop::option::of(any::<i64>()),
            new in prop::option::of(any::<i64>()),
        ) {
            let _ = SubscriptionSerde.deserialize(Some(&bytes));
            let _ = ResponseSerde.deserialize(Some(&bytes));
            let changes = ChangeSerde { inner: Serdes::i64() };
            let _ = changes.deserialize(Some(&bytes));
            let sub = Subscription {
                hash,
                instruction: Instruction::PropagateNullIfNoFkValAvailable,
                primary_key: key.clone(),
                primary_partition: partition,
            };
            let mut out = Vec::new();
            SubscriptionSerde.serialize(&sub, &mut out).expect("encodes");
            prop_assert_eq!(SubscriptionSerde.deserialize(Some(&out)).ok(), Some(sub));
            let response = Response {
                hash,
                foreign: (!key.is_empty()).then(|| key.clone()),
                primary_partition: 0,
            };
            out.clear();
            ResponseSerde.serialize(&response, &mut out).expect("encodes");
            prop_assert_eq!(ResponseSerde.deserialize(Some(&out)).ok(), Some(response));
            if new.is_some() || old.is_some() {
                let change = Change { new, old };
                out.clear();
                changes.serialize(&change, &mut out).expect("encodes");
                prop_assert_eq!(changes.deserialize(Some(&out)).ok(), Some(change));
            }
        }
    }

    /// Kafka's own `Murmur3.hash128` (kafka-streams 4.4.0) of these inputs, as `long[]{h1, h2}`.
    #[test]
    fn row_hashes_are_kafkas_murmur3() {
        let cases: [(&[u8], u64, u64); 5] = [
            (b"", 0x9d2764a018e32942, 0x8c3cf3b035938518),
            (b"a", 0x3361634e7e0f5188, 0xe9c7dda24eae326b),
            (b"hello world", 0xbd699b58e4689408, 0x7d50ce87a7f20429),
            (
                b"0123456789abcdefXYZ",
                0xbb31fe14c8ec1d0e,
                0x325aa157c895f535,
            ),
            (
                &[
                    0x80, 0xff, 0x01, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0x90, 0xa0,
                ],
                0x583695927ed1df37,
                0x64771be0b5b9cdb1,
            ),
        ];
        for (input, h1, h2) in cases {
            let mut want = [0u8; 16];
            want[..8].copy_from_slice(&h1.to_be_bytes());
            want[8..].copy_from_slice(&h2.to_be_bytes());
            assert_eq!(row_hash(input), want, "{input:?}");
        }
    }

    #[test]
    fn subscriptions_and_responses_round_trip_in_kafkas_layout() {
        let sub = Subscription {
            hash: Some([7; 16]),
            instruction: Instruction::PropagateOnlyIfFkValAvailable,
            primary_key: b"pk".to_vec(),
            primary_partition: 3,
        };
        let mut bytes = Vec::new();
        SubscriptionSerde
            .serialize(&sub, &mut bytes)
            .expect("encodes");
        let mut want = vec![1u8, 3];
        want.extend([7; 16]);
        want.extend(b"pk");
        want.extend(3u32.to_be_bytes());
        assert_eq!(bytes, want);
        assert_eq!(SubscriptionSerde.deserialize(Some(&bytes)).ok(), Some(sub));
        let deleted = Subscription {
            hash: None,
            instruction: Instruction::DeleteKeyAndPropagate,
            primary_key: b"k".to_vec(),
            primary_partition: 0,
        };
        bytes.clear();
        SubscriptionSerde
            .serialize(&deleted, &mut bytes)
            .expect("encodes");
        assert_eq!(bytes, [0x81, 1, b'k', 0, 0, 0, 0]);
        assert_eq!(
            SubscriptionSerde.deserialize(Some(&bytes)).ok(),
            Some(deleted)
        );
        for bad in [
            &[][..],
            &[1],
            &[1, 9, 0, 0, 0, 0],
            &[2, 0, 0, 0, 0, 0],
            &[1, 0, 1, 2],
        ] {
            assert!(SubscriptionSerde.deserialize(Some(bad)).is_err(), "{bad:?}");
        }
        let response = Response {
            hash: Some([9; 16]),
            foreign: Some(b"row".to_vec()),
            primary_partition: 0,
        };
        bytes.clear();
        ResponseSerde
            .serialize(&response, &mut bytes)
            .expect("encodes");
        assert_eq!(bytes.len(), 1 + 16 + 3);
        assert_eq!(ResponseSerde.deserialize(Some(&bytes)).ok(), Some(response));
        let none = Response {
            hash: None,
            foreign: None,
            primary_partition: 0,
        };
        bytes.clear();
        ResponseSerde.serialize(&none, &mut bytes).expect("encodes");
        assert_eq!(bytes, [0x80]);
        assert_eq!(ResponseSerde.deserialize(Some(&bytes)).ok(), Some(none));
        assert!(ResponseSerde.deserialize(Some(&[1])).is_err());
    }
}
