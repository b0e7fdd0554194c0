//! Serdes: how keys and values become bytes and back.
//!
//! Encodings match Kafka's built-in serdes, so data written by riffle reads the same with Kafka's
//! Java clients: `i64`/`u64` are 8-byte big-endian (Kafka's `LongSerde`), strings are UTF-8.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::SerdeError;

/// Turns values of `T` into bytes and back. Implementations must be cheap to call per record:
/// `serialize` appends to a buffer the caller owns and reuses.
pub trait Serde<T>: Send + Sync + 'static {
    /// Appends the encoding of `value` to `out`.
    fn serialize(&self, value: &T, out: &mut Vec<u8>);
    /// Decodes `bytes`; `None` is a null key or value.
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<T, SerdeError>;
    /// Decodes a key or value of a fetched record, which is a slice of its batch: a serde may
    /// keep it without copying ([`BytesSerde`] does). The default calls
    /// [`Serde::deserialize`].
    fn deserialize_bytes(&self, bytes: Option<&Bytes>) -> Result<T, SerdeError> {
        self.deserialize(bytes.map(|b| &b[..]))
    }
}

/// A shared handle to a serde, as the topology stores it.
pub type SerdeRef<T> = Arc<dyn Serde<T>>;

/// Types with a serde to use when none is given (Kafka's `default.key.serde`, typed).
pub trait DefaultSerde: Sized + 'static {
    /// The serde for this type.
    fn default_serde() -> SerdeRef<Self>;
}

/// UTF-8 strings.
#[derive(Clone, Copy, Debug, Default)]
pub struct StringSerde;

impl Serde<String> for StringSerde {
    fn serialize(&self, value: &String, out: &mut Vec<u8>) {
        out.extend_from_slice(value.as_bytes());
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<String, SerdeError> {
        let bytes = bytes.ok_or(SerdeError::UnexpectedNull {
            type_name: "String",
        })?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(SerdeError::Invalid {
                type_name: "String",
                reason: e.to_string(),
            }),
        }
    }
}

/// Raw bytes, unchanged, as [`Bytes`]: a fetched record's key or value is a slice of its batch,
/// so reading one allocates nothing. A null decodes as empty bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesSerde;

impl Serde<Bytes> for BytesSerde {
    fn serialize(&self, value: &Bytes, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Bytes, SerdeError> {
        Ok(bytes.map(Bytes::copy_from_slice).unwrap_or_default())
    }
    fn deserialize_bytes(&self, bytes: Option<&Bytes>) -> Result<Bytes, SerdeError> {
        Ok(bytes.cloned().unwrap_or_default())
    }
}

/// Raw bytes, unchanged, copied into a `Vec<u8>`. A null decodes as an empty vector.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByteVecSerde;

impl Serde<Vec<u8>> for ByteVecSerde {
    fn serialize(&self, value: &Vec<u8>, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Vec<u8>, SerdeError> {
        Ok(bytes.map(<[u8]>::to_vec).unwrap_or_default())
    }
}

macro_rules! be_serde {
    ($name:ident, $ty:ty, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Serde<$ty> for $name {
            fn serialize(&self, value: &$ty, out: &mut Vec<u8>) {
                out.extend_from_slice(&value.to_be_bytes());
            }
            fn deserialize(&self, bytes: Option<&[u8]>) -> Result<$ty, SerdeError> {
                let type_name = stringify!($ty);
                let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name })?;
                let array: [u8; 8] = bytes.try_into().map_err(|_| SerdeError::Invalid {
                    type_name,
                    reason: format!("expected 8 bytes, got {}", bytes.len()),
                })?;
                Ok(<$ty>::from_be_bytes(array))
            }
        }
    };
}

be_serde!(
    I64Serde,
    i64,
    "8-byte big-endian `i64`, like Kafka's `LongSerde`."
);
be_serde!(U64Serde, u64, "8-byte big-endian `u64`.");

/// JSON through serde.
pub struct JsonSerde<T>(PhantomData<fn() -> T>);

impl<T> JsonSerde<T> {
    /// A JSON serde for `T`.
    pub fn new() -> Self {
        JsonSerde(PhantomData)
    }
}

impl<T> Default for JsonSerde<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for JsonSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonSerde")
    }
}

impl<T> Serde<T> for JsonSerde<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    fn serialize(&self, value: &T, out: &mut Vec<u8>) {
        // Writing JSON into a Vec fails only if T's Serialize impl fails; a Serialize impl that
        // fails (e.g. a map with non-string keys) writes `null`, which reads back as an error.
        if serde_json::to_writer(&mut *out, value).is_err() {
            out.extend_from_slice(b"null");
        }
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<T, SerdeError> {
        let type_name = std::any::type_name::<T>();
        let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name })?;
        serde_json::from_slice(bytes).map_err(|e| SerdeError::Invalid {
            type_name,
            reason: e.to_string(),
        })
    }
}

/// Shorthands for the built-in serdes, as shared handles.
#[derive(Debug)]
pub struct Serdes;

impl Serdes {
    /// UTF-8 strings.
    pub fn string() -> SerdeRef<String> {
        Arc::new(StringSerde)
    }
    /// Raw bytes as [`Bytes`], sharing the fetched batch's buffer (no copy per record).
    pub fn bytes() -> SerdeRef<Bytes> {
        Arc::new(BytesSerde)
    }
    /// Raw bytes copied into a `Vec<u8>`.
    pub fn byte_vec() -> SerdeRef<Vec<u8>> {
        Arc::new(ByteVecSerde)
    }
    /// 8-byte big-endian `i64` (Kafka's `LongSerde`).
    pub fn i64() -> SerdeRef<i64> {
        Arc::new(I64Serde)
    }
    /// 8-byte big-endian `u64`.
    pub fn u64() -> SerdeRef<u64> {
        Arc::new(U64Serde)
    }
    /// JSON via serde.
    pub fn json<T>() -> SerdeRef<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        Arc::new(JsonSerde::<T>::new())
    }
}

impl DefaultSerde for String {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::string()
    }
}
impl DefaultSerde for Vec<u8> {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::byte_vec()
    }
}
impl DefaultSerde for Bytes {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::bytes()
    }
}
impl DefaultSerde for i64 {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::i64()
    }
}
impl DefaultSerde for u64 {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_serde_is_big_endian_like_kafka() {
        let mut out = Vec::new();
        I64Serde.serialize(&258, &mut out);
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(I64Serde.deserialize(Some(&out)).ok(), Some(258));
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        assert!(I64Serde.deserialize(Some(&[1, 2, 3])).is_err());
        assert!(StringSerde.deserialize(Some(&[0xff, 0xfe])).is_err());
        assert!(StringSerde.deserialize(None).is_err());
        assert!(
            JsonSerde::<Vec<u32>>::new()
                .deserialize(Some(b"{"))
                .is_err()
        );
    }

    #[test]
    fn json_round_trips() {
        let serde = JsonSerde::<Vec<u32>>::new();
        let mut out = Vec::new();
        serde.serialize(&vec![1, 2], &mut out);
        assert_eq!(serde.deserialize(Some(&out)).ok(), Some(vec![1, 2]));
    }
}
