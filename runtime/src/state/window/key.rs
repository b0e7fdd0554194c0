//! Entry keys: a record key and its window's or session's times encoded so that byte order is
//! key order, then time order (the layout is in the module documentation of `state::window`);
//! meta keys; and decoding an entry key back, a malformed one being a corrupt-store error.
//!
//! Pure functions of bytes: nothing here reads or writes a store.

use crate::state::StoreError;

/// The first two bytes of every meta key.
pub(super) const META_PREFIX: [u8; 2] = [0x00, 0x01];
/// The smallest key above every meta key.
pub(super) const META_END: [u8; 2] = [0x00, 0x02];

/// Appends `key` escaped to `out`: each 0x00 as 0x00 0xFF, every other byte as is, then the
/// terminator 0x00 0x00. Order-preserving and prefix-free: comparing two encodings compares the
/// keys lexicographically, whatever follows each.
pub(crate) fn encode_key(key: &[u8], out: &mut Vec<u8>) {
    out.reserve(key.len() + 2);
    let mut rest = key;
    while let Some(i) = rest.iter().position(|&b| b == 0) {
        out.extend_from_slice(&rest[..=i]);
        out.push(0xFF);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0x00, 0x00]);
}

/// `t` as 8 bytes that sort as the times do: big-endian with the sign bit flipped.
pub(crate) fn flip(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// The time [`flip`] made `bytes` of.
pub(crate) fn unflip(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// Appends the key of the window entry of `key` starting at `start` to `out`:
/// `encode_key(key) ‖ flip(start) ‖ seq` (big-endian). Its entry time is `start`.
pub(crate) fn window_entry_key(key: &[u8], start: i64, seq: u32, out: &mut Vec<u8>) {
    encode_key(key, out);
    out.extend_from_slice(&flip(start));
    out.extend_from_slice(&seq.to_be_bytes());
}

/// Appends the key of the session entry of `key` over `[start, end]` to `out`:
/// `encode_key(key) ‖ flip(end) ‖ flip(start)`. Its entry time is `end`.
pub(crate) fn session_entry_key(key: &[u8], end: i64, start: i64, out: &mut Vec<u8>) {
    encode_key(key, out);
    out.extend_from_slice(&flip(end));
    out.extend_from_slice(&flip(start));
}

/// Appends the meta key `name` to `out`: `0x00 0x01 ‖ name`.
pub(crate) fn meta_key(name: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&META_PREFIX);
    out.extend_from_slice(name);
}

/// Whether `bytes` is a meta key.
pub(crate) fn is_meta(bytes: &[u8]) -> bool {
    bytes.starts_with(&META_PREFIX)
}

/// `[lower, upper)` holding exactly the entries of `key`: lower is `encode_key(key)`, upper the
/// same with its last byte (the terminator's 0x00) made 0x01.
pub(crate) fn key_bounds(key: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lower = Vec::with_capacity(key.len() + 2);
    encode_key(key, &mut lower);
    let mut upper = lower.clone();
    if let Some(last) = upper.last_mut() {
        *last = 0x01;
    }
    (lower, upper)
}

/// What a segmented store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentedKind {
    /// Windows, keyed by record key, start and sequence number; entry time: the start.
    Window,
    /// Sessions, keyed by record key, end and start; entry time: the end.
    Session,
}

impl SegmentedKind {
    /// The bytes after an entry key's encoded record key.
    pub(super) fn tail_len(self) -> usize {
        match self {
            SegmentedKind::Window => 12,
            SegmentedKind::Session => 16,
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            SegmentedKind::Window => "window",
            SegmentedKind::Session => "session",
        }
    }

    pub(super) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(SegmentedKind::Window),
            1 => Some(SegmentedKind::Session),
            _ => None,
        }
    }

    pub(super) fn to_byte(self) -> u8 {
        match self {
            SegmentedKind::Window => 0,
            SegmentedKind::Session => 1,
        }
    }
}

/// An entry key taken apart by [`decode_entry`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DecodedEntry {
    /// The record key, unescaped.
    pub(crate) key: Vec<u8>,
    /// The entry time: a window's start, a session's end.
    pub(crate) time: i64,
    /// The second field: a window's sequence number, a session's start.
    pub(crate) second: i64,
}

/// Why bytes are not an entry key.
#[derive(Debug, Clone, Copy)]
pub(super) enum Malformed {
    Meta,
    BadEscape { at: usize, byte: u8 },
    Unterminated,
    Tail { kind: SegmentedKind, len: usize },
}

impl Malformed {
    pub(super) fn into_error(self, store: &str, len: usize) -> StoreError {
        let what = match self {
            Malformed::Meta => "is a meta key (0x00 0x01 ...), not an entry".to_owned(),
            Malformed::BadEscape { at, byte } => format!(
                "has 0x00 followed by 0x{byte:02x} at byte {at}, neither an escaped 0x00 \
                 (0x00 0xFF) nor the record key's terminator (0x00 0x00)"
            ),
            Malformed::Unterminated => {
                "has no terminator (0x00 0x00) after its record key".to_owned()
            }
            Malformed::Tail { kind, len } => format!(
                "has {len} bytes after its record key, not the {} of a {} entry",
                kind.tail_len(),
                kind.describe()
            ),
        };
        StoreError::Corrupt {
            store: store.to_owned(),
            reason: format!("an entry key of {len} bytes {what}"),
        }
    }
}

/// Where the escaped record key at the start of `bytes` ends (just past its terminator).
pub(super) fn encoded_key_end(bytes: &[u8]) -> Result<usize, Malformed> {
    let mut from = 0;
    loop {
        let Some(zero) = bytes
            .get(from..)
            .and_then(|rest| rest.iter().position(|&b| b == 0))
        else {
            return Err(Malformed::Unterminated);
        };
        let at = from + zero;
        match bytes.get(at + 1) {
            Some(0x00) => return Ok(at + 2),
            Some(0xFF) => from = at + 2,
            Some(&byte) => return Err(Malformed::BadEscape { at, byte }),
            None => return Err(Malformed::Unterminated),
        }
    }
}

/// An entry key's parts, without copying its record key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Parsed {
    /// Where the encoded record key (with its terminator) ends.
    pub(super) key_end: usize,
    pub(super) time: i64,
    pub(super) second: i64,
}

pub(super) fn parse_entry(kind: SegmentedKind, bytes: &[u8]) -> Result<Parsed, Malformed> {
    if is_meta(bytes) {
        return Err(Malformed::Meta);
    }
    let key_end = encoded_key_end(bytes)?;
    let tail = bytes.get(key_end..).unwrap_or_default();
    let malformed = Malformed::Tail {
        kind,
        len: tail.len(),
    };
    let Some((time, rest)) = tail.split_first_chunk::<8>() else {
        return Err(malformed);
    };
    let second = match kind {
        SegmentedKind::Window => match <[u8; 4]>::try_from(rest) {
            Ok(seq) => i64::from(u32::from_be_bytes(seq)),
            Err(_) => return Err(malformed),
        },
        SegmentedKind::Session => match <[u8; 8]>::try_from(rest) {
            Ok(start) => unflip(start),
            Err(_) => return Err(malformed),
        },
    };
    Ok(Parsed {
        key_end,
        time: unflip(*time),
        second,
    })
}

/// Takes the entry key `bytes` of the `kind` store `store` apart. Bytes that are not such a key
/// (a meta key included) are a [`StoreError::Corrupt`] naming the store and what is wrong.
pub(crate) fn decode_entry(
    store: &str,
    kind: SegmentedKind,
    bytes: &[u8],
) -> Result<DecodedEntry, StoreError> {
    let mut out = DecodedEntry {
        key: Vec::new(),
        time: 0,
        second: 0,
    };
    decode_entry_into(store, kind, bytes, &mut out)?;
    Ok(out)
}

/// As [`decode_entry`], into `out`, reusing its key's buffer.
pub(crate) fn decode_entry_into(
    store: &str,
    kind: SegmentedKind,
    bytes: &[u8],
    out: &mut DecodedEntry,
) -> Result<(), StoreError> {
    let parsed = parse_entry(kind, bytes).map_err(|m| m.into_error(store, bytes.len()))?;
    let encoded = bytes
        .get(..parsed.key_end.saturating_sub(2))
        .unwrap_or_default();
    let key = &mut out.key;
    key.clear();
    key.reserve(encoded.len());
    let mut bytes = encoded.iter();
    while let Some(&b) = bytes.next() {
        key.push(b);
        if b == 0 {
            // The escape's 0xFF.
            bytes.next();
        }
    }
    out.time = parsed.time;
    out.second = parsed.second;
    Ok(())
}
