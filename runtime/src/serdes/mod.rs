//! Serdes: how keys and values become bytes and back.
//!
//! Encodings match Kafka's built-in serdes, so data written by riffle reads the same with Kafka's
//! Java clients: `i64`/`u64` are 8-byte big-endian (Kafka's `LongSerde`), strings are UTF-8.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use crate::types::error::SerdeError;
use crate::types::window::{Window, Windowed};

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
    /// Whether `value` is written as a null (a tombstone) rather than as bytes: only
    /// [`OptionSerde`]'s `None` is.
    fn is_null(&self, value: &T) -> bool {
        let _ = value;
        false
    }
    /// Whether [`Serde::is_null`] is ever true: operators that drop null keys or values skip
    /// the check for serdes that have no null.
    fn has_null(&self) -> bool {
        false
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

/// Windowed keys as Kafka Streams' `TimeWindowedSerializer` writes them: the inner key, then the
/// window start as an 8-byte big-endian long. The end is not on the wire: the deserializer adds
/// the window size (Kafka's `window.size.ms`).
pub struct TimeWindowedSerde<K> {
    inner: SerdeRef<K>,
    size_ms: i64,
}

impl<K: 'static> Serde<Windowed<K>> for TimeWindowedSerde<K> {
    fn serialize(&self, value: &Windowed<K>, out: &mut Vec<u8>) {
        self.inner.serialize(&value.key, out);
        out.extend_from_slice(&value.window.start.to_be_bytes());
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Windowed<K>, SerdeError> {
        let (key, start) = split_suffix::<1>(bytes, "Windowed (time)")?;
        let key = self.inner.deserialize(Some(key))?;
        let start = start[0];
        Ok(Windowed::new(
            key,
            Window::new(start, start.saturating_add(self.size_ms)),
        ))
    }
}

/// Session keys as Kafka Streams' `SessionWindowedSerializer` writes them: the inner key, then
/// the session end, then its start, each an 8-byte big-endian long.
pub struct SessionWindowedSerde<K> {
    inner: SerdeRef<K>,
}

impl<K: 'static> Serde<Windowed<K>> for SessionWindowedSerde<K> {
    fn serialize(&self, value: &Windowed<K>, out: &mut Vec<u8>) {
        self.inner.serialize(&value.key, out);
        out.extend_from_slice(&value.window.end.to_be_bytes());
        out.extend_from_slice(&value.window.start.to_be_bytes());
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Windowed<K>, SerdeError> {
        let (key, times) = split_suffix::<2>(bytes, "Windowed (session)")?;
        let key = self.inner.deserialize(Some(key))?;
        Ok(Windowed::new(key, Window::new(times[1], times[0])))
    }
}

/// Splits `N` trailing big-endian longs off a windowed key.
fn split_suffix<'b, const N: usize>(
    bytes: Option<&'b [u8]>,
    type_name: &'static str,
) -> Result<(&'b [u8], [i64; N]), SerdeError> {
    let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name })?;
    let Some(split) = bytes.len().checked_sub(8 * N) else {
        return Err(SerdeError::Invalid {
            type_name,
            reason: format!(
                "{} bytes, fewer than the {} of its window",
                bytes.len(),
                8 * N
            ),
        });
    };
    let (key, tail) = bytes.split_at(split);
    let mut times = [0i64; N];
    for (i, t) in times.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&tail[8 * i..8 * i + 8]);
        *t = i64::from_be_bytes(b);
    }
    Ok((key, times))
}

/// Nullable values: `None` is a null on the wire (a tombstone: a sink writes a record without a
/// value) and a null reads as `None`.
pub struct OptionSerde<T> {
    inner: SerdeRef<T>,
}

impl<T: 'static> Serde<Option<T>> for OptionSerde<T> {
    fn serialize(&self, value: &Option<T>, out: &mut Vec<u8>) {
        if let Some(v) = value {
            self.inner.serialize(v, out);
        }
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Option<T>, SerdeError> {
        bytes.map(|b| self.inner.deserialize(Some(b))).transpose()
    }
    fn deserialize_bytes(&self, bytes: Option<&Bytes>) -> Result<Option<T>, SerdeError> {
        bytes
            .map(|b| self.inner.deserialize_bytes(Some(b)))
            .transpose()
    }
    fn is_null(&self, value: &Option<T>) -> bool {
        value.is_none()
    }
    fn has_null(&self) -> bool {
        true
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
    /// Time-windowed keys in Kafka's layout (inner key, then the 8-byte start), for windows of
    /// `size` (which gives each window's end when reading).
    pub fn time_windowed<K: 'static>(
        inner: SerdeRef<K>,
        size: std::time::Duration,
    ) -> SerdeRef<Windowed<K>> {
        Arc::new(TimeWindowedSerde {
            inner,
            size_ms: size.as_millis().min(i64::MAX as u128) as i64,
        })
    }
    /// Session-windowed keys in Kafka's layout (inner key, then the 8-byte end and start).
    pub fn session_windowed<K: 'static>(inner: SerdeRef<K>) -> SerdeRef<Windowed<K>> {
        Arc::new(SessionWindowedSerde { inner })
    }
    /// `Option<T>`: `None` is a null (a tombstone when written).
    pub fn optional<T: 'static>(inner: SerdeRef<T>) -> SerdeRef<Option<T>> {
        Arc::new(OptionSerde { inner })
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
/// A nullable `T`: `None` is a null key or value.
impl<T: DefaultSerde> DefaultSerde for Option<T> {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::optional(T::default_serde())
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

    /// The byte layouts of Kafka's `TimeWindowedSerializer` and `SessionWindowedSerializer`.
    #[test]
    fn windowed_keys_are_laid_out_as_kafka_writes_them() {
        let time = Serdes::time_windowed(Serdes::string(), std::time::Duration::from_secs(60));
        let key = Windowed::new("ab".to_string(), Window::new(120_000, 180_000));
        let mut out = Vec::new();
        time.serialize(&key, &mut out);
        assert_eq!(out, [&b"ab"[..], &120_000i64.to_be_bytes()].concat());
        assert_eq!(time.deserialize(Some(&out)).ok(), Some(key.clone()));
        assert!(time.deserialize(Some(b"short")).is_err(), "no panic");
        let session = Serdes::session_windowed(Serdes::string());
        out.clear();
        session.serialize(&key, &mut out);
        assert_eq!(
            out,
            [
                &b"ab"[..],
                &180_000i64.to_be_bytes(),
                &120_000i64.to_be_bytes()
            ]
            .concat(),
            "end before start"
        );
        assert_eq!(session.deserialize(Some(&out)).ok(), Some(key));
        let optional = Serdes::optional(Serdes::i64());
        assert!(optional.is_null(&None) && !optional.is_null(&Some(1)));
        assert_eq!(optional.deserialize(None).ok(), Some(None));
    }

    #[test]
    fn json_round_trips() {
        let serde = JsonSerde::<Vec<u32>>::new();
        let mut out = Vec::new();
        serde.serialize(&vec![1, 2], &mut out);
        assert_eq!(serde.deserialize(Some(&out)).ok(), Some(vec![1, 2]));
    }
}
