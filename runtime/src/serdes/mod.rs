//! Serdes: how keys and values become bytes and back.
//!
//! Encodings match Kafka's built-in serdes byte for byte, so data written by riffle reads the
//! same with Kafka's Java clients and the other way round:
//!
//! | riffle | Rust type | Kafka | bytes |
//! |---|---|---|---|
//! | [`Serdes::string`] | `String` | `StringSerde` | UTF-8 |
//! | [`Serdes::bytes`], [`Serdes::byte_vec`] | `Bytes`, `Vec<u8>` | `BytesSerde`, `ByteArraySerde` | unchanged |
//! | [`Serdes::i16`] | `i16` | `ShortSerde` | 2, big-endian |
//! | [`Serdes::i32`] | `i32` | `IntegerSerde` | 4, big-endian |
//! | [`Serdes::i64`] | `i64` | `LongSerde` | 8, big-endian |
//! | [`Serdes::u64`] | `u64` | (none; as `LongSerde`) | 8, big-endian |
//! | [`Serdes::f32`] | `f32` | `FloatSerde` | 4, the IEEE 754 bits, big-endian |
//! | [`Serdes::f64`] | `f64` | `DoubleSerde` | 8, the IEEE 754 bits, big-endian |
//! | [`Serdes::bool`] | `bool` | `BooleanSerde` | 1: `0x01` or `0x00` (nothing else reads) |
//! | [`Serdes::uuid`] | [`Uuid`] | `UUIDSerde` | the 36-character string form, UTF-8 |
//! | [`Serdes::void`] | `()` | `VoidSerde` | always null; non-null bytes do not read |
//! | [`Serdes::list`] | `Vec<T>` | `ListSerde` | see [`ListSerde`] |
//! | [`Serdes::json`] | any `serde` type | (none) | JSON |
//!
//! A null on the wire reads as [`SerdeError::UnexpectedNull`] except through
//! [`Serdes::optional`] (`None`), [`Serdes::void`], and the two raw-bytes serdes (empty).
//!
//! Serializing can fail ([`SerdeError::Unserializable`]: a JSON value `serde_json` refuses, a
//! list too long for its length field). A sink hands the failure to the production exception
//! handler as [`Error::Serialize`](crate::types::error::Error::Serialize) (Kafka's
//! `handleSerializationException`, origin key or value); a store's serde failing inside a
//! processor is [`Error::SerializeState`](crate::types::error::Error::SerializeState), for the
//! processing exception handler.
//!
//! Calls without serdes (`group_by_key()`) take the types' [`DefaultSerde`]: the primitives
//! above have one, and [`json_default_serde!`](crate::json_default_serde) gives any `serde`
//! type JSON as its default.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
pub use uuid::Uuid;

use crate::types::error::SerdeError;
use crate::types::window::{Window, Windowed};

/// Turns values of `T` into bytes and back. Implementations must be cheap to call per record:
/// `serialize` appends to a buffer the caller owns and reuses.
pub trait Serde<T>: Send + Sync + 'static {
    /// Appends the encoding of `value` to `out`. On an error `out` may hold part of the
    /// encoding: the caller discards it.
    fn serialize(&self, value: &T, out: &mut Vec<u8>) -> Result<(), SerdeError>;
    /// Decodes `bytes`; `None` is a null key or value.
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<T, SerdeError>;
    /// Decodes a key or value of a fetched record, which is a slice of its batch: a serde may
    /// keep it without copying ([`BytesSerde`] does). The default calls
    /// [`Serde::deserialize`].
    fn deserialize_bytes(&self, bytes: Option<&Bytes>) -> Result<T, SerdeError> {
        self.deserialize(bytes.map(|b| &b[..]))
    }
    /// Whether `value` is written as a null (a tombstone) rather than as bytes: [`OptionSerde`]'s
    /// `None` and [`VoidSerde`]'s `()` are.
    fn is_null(&self, value: &T) -> bool {
        let _ = value;
        false
    }
    /// Whether [`Serde::is_null`] is ever true: operators that drop null keys or values skip
    /// the check for serdes that have no null.
    fn has_null(&self) -> bool {
        false
    }
    /// The size of every encoding, for the serdes Kafka's `ListSerde` writes without per-entry
    /// lengths (its `CONSTANT_SIZE` strategy: Kafka's Short, Integer, Float, Long, Double and
    /// UUID serdes, and riffle's `u64`); `None` for the rest, [`BoolSerde`] included (Kafka
    /// gives its lists per-entry lengths).
    fn constant_size(&self) -> Option<usize> {
        None
    }
}

/// A shared handle to a serde, as the topology stores it.
pub type SerdeRef<T> = Arc<dyn Serde<T>>;

/// Types with a serde to use when none is given (Kafka's `default.key.serde` and
/// `default.value.serde`, per type): what `group_by_key()` and the other calls without serdes
/// take. `String`, `Vec<u8>`, `Bytes`, the integers, floats, `bool`, [`Uuid`], `()` and
/// `Option<T>` of those have one. Give a `serde` type JSON as its default with
/// [`json_default_serde!`](crate::json_default_serde), or any serde with an impl:
///
/// ```
/// use riffle::serde::{DefaultSerde, SerdeRef};
/// use riffle::Serdes;
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct PageView { page: String }
///
/// impl DefaultSerde for PageView {
///     fn default_serde() -> SerdeRef<Self> {
///         Serdes::json()
///     }
/// }
/// ```
///
/// A type without one does not compile where a default is needed, and the error says which
/// type and what to do:
///
/// ```compile_fail,E0277
/// use riffle::{Consumed, Serdes, StreamsBuilder};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct PageView { page: String }
///
/// let builder = StreamsBuilder::new();
/// builder
///     .stream("views", Consumed::with(Serdes::string(), Serdes::json::<PageView>()))
///     .group_by_key() // error: `PageView` has no default serde
///     .count();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no default serde",
    label = "`{Self}` does not implement `DefaultSerde`",
    note = "give the serdes explicitly: `group_by_key_with(Grouped::with(key_serde, value_serde))`, \
            `Consumed::with(key_serde, value_serde)`, `Materialized::with(key_serde, value_serde)`",
    note = "or give `{Self}` a default once: `riffle::json_default_serde!({Self});` for a serde \
            type, or `impl riffle::serde::DefaultSerde for {Self}`"
)]
pub trait DefaultSerde: Sized + 'static {
    /// The serde for this type.
    fn default_serde() -> SerdeRef<Self>;
}

/// Gives each listed type JSON ([`Serdes::json`]) as its [`DefaultSerde`], so `group_by_key()`,
/// `count()` and the other calls without serdes take it. The types must implement `serde`'s
/// `Serialize` and `Deserialize`.
///
/// ```
/// use riffle::{Consumed, Serdes, StreamsBuilder};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct PageView { page: String }
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Order { id: u64 }
///
/// riffle::json_default_serde!(PageView, Order);
///
/// let builder = StreamsBuilder::new();
/// builder
///     .stream("views", Consumed::with(Serdes::string(), Serdes::json::<PageView>()))
///     .group_by_key()
///     .count();
/// ```
#[macro_export]
macro_rules! json_default_serde {
    ($($ty:ty),+ $(,)?) => {
        $(
            impl $crate::serde::DefaultSerde for $ty {
                fn default_serde() -> $crate::serde::SerdeRef<Self> {
                    $crate::serde::Serdes::json::<Self>()
                }
            }
        )+
    };
}

/// UTF-8 strings.
#[derive(Clone, Copy, Debug, Default)]
pub struct StringSerde;

impl Serde<String> for StringSerde {
    fn serialize(&self, value: &String, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.extend_from_slice(value.as_bytes());
        Ok(())
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

/// Raw bytes, unchanged, as [`Bytes`] (Kafka's `BytesSerde`): a fetched record's key or value
/// is a slice of its batch, so reading one allocates nothing. A null decodes as empty bytes
/// (Kafka's decodes as null: read nullable bytes with
/// `Serdes::optional(Serdes::bytes())`).
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesSerde;

impl Serde<Bytes> for BytesSerde {
    fn serialize(&self, value: &Bytes, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.extend_from_slice(value);
        Ok(())
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Bytes, SerdeError> {
        Ok(bytes.map(Bytes::copy_from_slice).unwrap_or_default())
    }
    fn deserialize_bytes(&self, bytes: Option<&Bytes>) -> Result<Bytes, SerdeError> {
        Ok(bytes.cloned().unwrap_or_default())
    }
}

/// Raw bytes, unchanged, copied into a `Vec<u8>` (Kafka's `ByteArraySerde`). A null decodes as
/// an empty vector.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByteVecSerde;

impl Serde<Vec<u8>> for ByteVecSerde {
    fn serialize(&self, value: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.extend_from_slice(value);
        Ok(())
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Vec<u8>, SerdeError> {
        Ok(bytes.map(<[u8]>::to_vec).unwrap_or_default())
    }
}

/// Exactly `N` bytes of a non-null key or value, or an error naming `type_name`.
fn exact<const N: usize>(
    bytes: Option<&[u8]>,
    type_name: &'static str,
) -> Result<[u8; N], SerdeError> {
    let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name })?;
    bytes.try_into().map_err(|_| SerdeError::Invalid {
        type_name,
        reason: format!("expected {N} bytes, got {}", bytes.len()),
    })
}

macro_rules! be_serde {
    ($name:ident, $ty:ty, $size:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Serde<$ty> for $name {
            fn serialize(&self, value: &$ty, out: &mut Vec<u8>) -> Result<(), SerdeError> {
                out.extend_from_slice(&value.to_be_bytes());
                Ok(())
            }
            fn deserialize(&self, bytes: Option<&[u8]>) -> Result<$ty, SerdeError> {
                Ok(<$ty>::from_be_bytes(exact::<$size>(
                    bytes,
                    stringify!($ty),
                )?))
            }
            fn constant_size(&self) -> Option<usize> {
                Some($size)
            }
        }
    };
}

be_serde!(
    I16Serde,
    i16,
    2,
    "2-byte big-endian `i16`, like Kafka's `ShortSerde`."
);
be_serde!(
    I32Serde,
    i32,
    4,
    "4-byte big-endian `i32`, like Kafka's `IntegerSerde`."
);
be_serde!(
    I64Serde,
    i64,
    8,
    "8-byte big-endian `i64`, like Kafka's `LongSerde`."
);
be_serde!(
    U64Serde,
    u64,
    8,
    "8-byte big-endian `u64` (Kafka has no unsigned serde: its `LongSerde` reads the same \
     bytes as an `i64`)."
);
be_serde!(
    F32Serde,
    f32,
    4,
    "`f32` as its IEEE 754 bits, 4 bytes big-endian, like Kafka's `FloatSerde` (NaN payloads \
     kept)."
);
be_serde!(
    F64Serde,
    f64,
    8,
    "`f64` as its IEEE 754 bits, 8 bytes big-endian, like Kafka's `DoubleSerde` (NaN payloads \
     kept)."
);

/// `bool` as one byte, `0x01` or `0x00`, like Kafka's `BooleanSerde`; as Kafka's, reading
/// takes exactly one byte and only those two values.
#[derive(Clone, Copy, Debug, Default)]
pub struct BoolSerde;

impl Serde<bool> for BoolSerde {
    fn serialize(&self, value: &bool, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        out.push(u8::from(*value));
        Ok(())
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<bool, SerdeError> {
        match exact::<1>(bytes, "bool")? {
            [0x01] => Ok(true),
            [0x00] => Ok(false),
            [other] => Err(SerdeError::Invalid {
                type_name: "bool",
                reason: format!("byte {other:#04x} is neither 0x01 (true) nor 0x00 (false)"),
            }),
        }
    }
}

/// A [`Uuid`] as its string form (`8-4-4-4-12` lowercase hex digits, 36 bytes of UTF-8), like
/// Kafka's `UUIDSerde`. Reading takes that form only, hex digits in either case (the form
/// Java's `UUID.fromString` documents; Java also takes shorter groups, which no Kafka client
/// writes).
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidSerde;

/// The length of a UUID's string form.
const UUID_LEN: usize = 36;

impl Serde<Uuid> for UuidSerde {
    fn serialize(&self, value: &Uuid, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        let mut buf = [0u8; UUID_LEN];
        out.extend_from_slice(value.hyphenated().encode_lower(&mut buf).as_bytes());
        Ok(())
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Uuid, SerdeError> {
        let bytes = exact::<UUID_LEN>(bytes, "Uuid")?;
        // At 36 bytes the only form `uuid` parses is the hyphenated one.
        Uuid::try_parse_ascii(&bytes).map_err(|e| SerdeError::Invalid {
            type_name: "Uuid",
            reason: format!("{e} ({:?})", String::from_utf8_lossy(&bytes)),
        })
    }
    fn constant_size(&self) -> Option<usize> {
        Some(UUID_LEN)
    }
}

/// `()` as a null, always, like Kafka's `VoidSerde` ([`Serde::is_null`] says so: as a value,
/// a sink writes a tombstone), and reading anything but a null is an error, as Kafka's.
#[derive(Clone, Copy, Debug, Default)]
pub struct VoidSerde;

impl Serde<()> for VoidSerde {
    fn serialize(&self, _: &(), _: &mut Vec<u8>) -> Result<(), SerdeError> {
        Ok(())
    }
    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<(), SerdeError> {
        match bytes {
            None => Ok(()),
            Some(b) => Err(SerdeError::Invalid {
                type_name: "()",
                reason: format!("a void key or value must be null, got {} bytes", b.len()),
            }),
        }
    }
    fn is_null(&self, _: &()) -> bool {
        true
    }
    fn has_null(&self) -> bool {
        true
    }
}

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
    fn serialize(&self, value: &T, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        // Writing into a Vec fails only if T's Serialize impl fails (a map with keys that are
        // not strings, an error of its own).
        serde_json::to_writer(&mut *out, value).map_err(|e| SerdeError::Unserializable {
            type_name: std::any::type_name::<T>(),
            reason: e.to_string(),
        })
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

/// Lists in the layout of Kafka's `ListSerde` (its `ListSerializer` and `ListDeserializer`),
/// every integer a 4-byte big-endian `int`:
///
/// - one byte: the serialization strategy, `0` (`CONSTANT_SIZE`) when the entries' serde has
///   a [`Serde::constant_size`], else `1` (`VARIABLE_SIZE`);
/// - `CONSTANT_SIZE` only: the number of null entries, then each null entry's index;
/// - the number of entries;
/// - each entry: under `CONSTANT_SIZE` its bytes (a null entry has none); under
///   `VARIABLE_SIZE` its length, then its bytes (a null entry: length `-1`, no bytes).
///
/// An entry is null when its serde says so ([`Serde::is_null`]: a list of
/// `Serdes::optional(..)` entries, `Vec<Option<T>>`, holds nulls), and a null entry reads
/// through its serde's `deserialize(None)`.
///
/// Reading fails where Kafka's reader fails (an unknown strategy, a list cut short, a negative
/// count or length other than a null entry's `-1`) and, stricter than Kafka's, on bytes after
/// the last entry, which Kafka's reader ignores and its writer never writes.
pub struct ListSerde<T> {
    inner: SerdeRef<T>,
}

/// Kafka's `ListSerde.SerializationStrategy` ordinals and null entry length.
const CONSTANT_SIZE: u8 = 0;
const VARIABLE_SIZE: u8 = 1;
const NULL_ENTRY: i32 = -1;

const LIST: &str = "List";

fn list_len(n: usize, what: &str) -> Result<[u8; 4], SerdeError> {
    i32::try_from(n)
        .map(i32::to_be_bytes)
        .map_err(|_| SerdeError::Unserializable {
            type_name: LIST,
            reason: format!("{what} {n} is more than a 4-byte length holds"),
        })
}

fn list_invalid(reason: String) -> SerdeError {
    SerdeError::Invalid {
        type_name: LIST,
        reason,
    }
}

/// A cursor over a list's bytes.
struct ListReader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> ListReader<'b> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'b [u8], SerdeError> {
        let rest = &self.bytes[self.at..];
        if rest.len() < n {
            return Err(list_invalid(format!(
                "{what} needs {n} bytes at offset {}, {} left",
                self.at,
                rest.len()
            )));
        }
        self.at += n;
        Ok(&rest[..n])
    }

    fn int(&mut self, what: &str) -> Result<i32, SerdeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4, what)?);
        Ok(i32::from_be_bytes(b))
    }

    /// A count or index: an `int` that must not be negative.
    fn count(&mut self, what: &str) -> Result<usize, SerdeError> {
        let n = self.int(what)?;
        usize::try_from(n).map_err(|_| list_invalid(format!("{what} is negative ({n})")))
    }
}

impl<T: 'static> ListSerde<T> {
    fn entry(&self, i: usize, bytes: Option<&[u8]>) -> Result<T, SerdeError> {
        self.inner
            .deserialize(bytes)
            .map_err(|e| list_invalid(format!("entry {i}: {e}")))
    }
}

impl<T: 'static> Serde<Vec<T>> for ListSerde<T> {
    fn serialize(&self, list: &Vec<T>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        let size = list_len(list.len(), "a list of")?;
        let Some(entry_size) = self.inner.constant_size() else {
            out.push(VARIABLE_SIZE);
            out.extend_from_slice(&size);
            for entry in list {
                if self.inner.is_null(entry) {
                    out.extend_from_slice(&NULL_ENTRY.to_be_bytes());
                    continue;
                }
                let at = out.len();
                out.extend_from_slice(&[0; 4]);
                self.inner.serialize(entry, out)?;
                let len = list_len(out.len() - at - 4, "an entry of length")?;
                out[at..at + 4].copy_from_slice(&len);
            }
            return Ok(());
        };
        out.push(CONSTANT_SIZE);
        let nulls = list.iter().filter(|e| self.inner.is_null(e)).count();
        out.extend_from_slice(&list_len(nulls, "a list of")?);
        for (i, entry) in list.iter().enumerate() {
            if self.inner.is_null(entry) {
                out.extend_from_slice(&list_len(i, "an index")?);
            }
        }
        out.extend_from_slice(&size);
        for (i, entry) in list.iter().enumerate() {
            if self.inner.is_null(entry) {
                continue;
            }
            let at = out.len();
            self.inner.serialize(entry, out)?;
            let len = out.len() - at;
            if len != entry_size {
                return Err(SerdeError::Unserializable {
                    type_name: LIST,
                    reason: format!(
                        "entry {i} is {len} bytes, but its serde's constant size is {entry_size}"
                    ),
                });
            }
        }
        Ok(())
    }

    fn deserialize(&self, bytes: Option<&[u8]>) -> Result<Vec<T>, SerdeError> {
        let bytes = bytes.ok_or(SerdeError::UnexpectedNull { type_name: LIST })?;
        let mut r = ListReader { bytes, at: 0 };
        let flag = r.take(1, "the serialization strategy")?[0];
        let mut list;
        match flag {
            CONSTANT_SIZE => {
                let entry_size = self.inner.constant_size().ok_or_else(|| {
                    list_invalid(
                        "a constant-size list (strategy 0), but its entries' serde has no \
                         constant size"
                            .into(),
                    )
                })?;
                let null_count = r.count("the number of null entries")?;
                // Bounded by the bytes there are, not by the count the bytes claim.
                let mut nulls = Vec::with_capacity(null_count.min(bytes.len() / 4));
                for _ in 0..null_count {
                    nulls.push(r.count("a null entry's index")?);
                }
                nulls.sort_unstable();
                let size = r.count("the number of entries")?;
                list = Vec::with_capacity(size.min(bytes.len()));
                for i in 0..size {
                    let entry = if nulls.binary_search(&i).is_ok() {
                        None
                    } else {
                        Some(r.take(entry_size, "an entry")?)
                    };
                    list.push(self.entry(i, entry)?);
                }
            }
            VARIABLE_SIZE => {
                let size = r.count("the number of entries")?;
                list = Vec::with_capacity(size.min(bytes.len() / 4));
                for i in 0..size {
                    let entry = match r.int("an entry's length")? {
                        NULL_ENTRY => None,
                        len => {
                            let len = usize::try_from(len).map_err(|_| {
                                list_invalid(format!("entry {i}'s length is negative ({len})"))
                            })?;
                            Some(r.take(len, "an entry")?)
                        }
                    };
                    list.push(self.entry(i, entry)?);
                }
            }
            other => {
                return Err(list_invalid(format!(
                    "unknown serialization strategy {other} (0: constant size, 1: variable size)"
                )));
            }
        }
        if r.at != bytes.len() {
            return Err(list_invalid(format!(
                "{} bytes after the last of its {} entries",
                bytes.len() - r.at,
                list.len()
            )));
        }
        Ok(list)
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
    fn serialize(&self, value: &Windowed<K>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        self.inner.serialize(&value.key, out)?;
        out.extend_from_slice(&value.window.start.to_be_bytes());
        Ok(())
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
    fn serialize(&self, value: &Windowed<K>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        self.inner.serialize(&value.key, out)?;
        out.extend_from_slice(&value.window.end.to_be_bytes());
        out.extend_from_slice(&value.window.start.to_be_bytes());
        Ok(())
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
    fn serialize(&self, value: &Option<T>, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        match value {
            Some(v) => self.inner.serialize(v, out),
            None => Ok(()),
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
    fn constant_size(&self) -> Option<usize> {
        self.inner.constant_size()
    }
}

/// Shorthands for the built-in serdes, as shared handles (Kafka's `Serdes`).
#[derive(Debug)]
pub struct Serdes;

impl Serdes {
    /// UTF-8 strings (Kafka's `Serdes.String()`).
    pub fn string() -> SerdeRef<String> {
        Arc::new(StringSerde)
    }
    /// Raw bytes as [`Bytes`], sharing the fetched batch's buffer (no copy per record; Kafka's
    /// `Serdes.Bytes()`).
    pub fn bytes() -> SerdeRef<Bytes> {
        Arc::new(BytesSerde)
    }
    /// Raw bytes copied into a `Vec<u8>` (Kafka's `Serdes.ByteArray()`).
    pub fn byte_vec() -> SerdeRef<Vec<u8>> {
        Arc::new(ByteVecSerde)
    }
    /// 2-byte big-endian `i16` (Kafka's `Serdes.Short()`).
    pub fn i16() -> SerdeRef<i16> {
        Arc::new(I16Serde)
    }
    /// 4-byte big-endian `i32` (Kafka's `Serdes.Integer()`).
    pub fn i32() -> SerdeRef<i32> {
        Arc::new(I32Serde)
    }
    /// 8-byte big-endian `i64` (Kafka's `Serdes.Long()`).
    pub fn i64() -> SerdeRef<i64> {
        Arc::new(I64Serde)
    }
    /// 8-byte big-endian `u64`.
    pub fn u64() -> SerdeRef<u64> {
        Arc::new(U64Serde)
    }
    /// `f32`'s 4 bytes, big-endian (Kafka's `Serdes.Float()`).
    pub fn f32() -> SerdeRef<f32> {
        Arc::new(F32Serde)
    }
    /// `f64`'s 8 bytes, big-endian (Kafka's `Serdes.Double()`).
    pub fn f64() -> SerdeRef<f64> {
        Arc::new(F64Serde)
    }
    /// One byte, `0x01` or `0x00` (Kafka's `Serdes.Boolean()`).
    pub fn bool() -> SerdeRef<bool> {
        Arc::new(BoolSerde)
    }
    /// A UUID's 36-character string form (Kafka's `Serdes.UUID()`).
    pub fn uuid() -> SerdeRef<Uuid> {
        Arc::new(UuidSerde)
    }
    /// Always null (Kafka's `Serdes.Void()`).
    pub fn void() -> SerdeRef<()> {
        Arc::new(VoidSerde)
    }
    /// Lists of `inner`'s values in Kafka's `ListSerde` layout (Kafka's
    /// `Serdes.ListSerde(ArrayList.class, inner)`); entries that may be null are
    /// `Serdes::list(Serdes::optional(inner))`.
    pub fn list<T: 'static>(inner: SerdeRef<T>) -> SerdeRef<Vec<T>> {
        Arc::new(ListSerde { inner })
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

macro_rules! default_serdes {
    ($($ty:ty => $serde:ident),+ $(,)?) => {
        $(
            impl DefaultSerde for $ty {
                fn default_serde() -> SerdeRef<Self> {
                    Serdes::$serde()
                }
            }
        )+
    };
}

default_serdes!(
    String => string,
    Vec<u8> => byte_vec,
    Bytes => bytes,
    i16 => i16,
    i32 => i32,
    i64 => i64,
    u64 => u64,
    f32 => f32,
    f64 => f64,
    bool => bool,
    Uuid => uuid,
    () => void,
);

impl<T: DefaultSerde> DefaultSerde for Option<T> {
    fn default_serde() -> SerdeRef<Self> {
        Serdes::optional(T::default_serde())
    }
}

#[cfg(test)]
mod tests;
