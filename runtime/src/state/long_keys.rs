//! Keys of any length in fjall, whose keys are at most 65,535 bytes (`u16::MAX`; a longer one
//! panics inside fjall, on a write and on a read alike).
//!
//! Every fjall key riffle writes for a store is `prefix ‖ key`: `prefix` the store's id (4 bytes,
//! the key-value stores' shared keyspace) or nothing (a window or session store's segment
//! keyspace), `key` the store's own key (a record key, or a segmented store's entry key). A key
//! of at most [`Layout::inline_max`] bytes is written as is, and pays nothing. A longer one, a
//! *long key*, is written under
//!
//! ```text
//! prefix ‖ key[..inline_max] ‖ SHA-256(key)        (exactly 65,535 bytes)
//! ```
//!
//! with its value `tail length (4 bytes, big-endian) ‖ key[inline_max..] ‖ value`: the full key
//! is the fjall key's head and the value's tail. Only a long key's fjall key is longer than
//! `prefix_len + inline_max`, so the length says which kind an entry is.
//!
//! Order: fjall's order is the keys' order except among long keys sharing their first
//! `inline_max` bytes (their *head*), which sort by hash. Those are adjacent in fjall (no other
//! key lies between two of them: a short key starting with the head is the head itself, which
//! sorts before them in both orders), so a scan sorts each such run by full key before visiting
//! it ([`visit`]). A bound longer than `inline_max` is cut to its head for fjall, and the entries
//! outside the true bound are skipped.
//!
//! A point read of a long key checks the tail it finds against the key: a mismatch (a SHA-256
//! collision, or a damaged value) is a corrupt-store error, never another key's value.

use std::ops::Bound;

use fjall::{Keyspace, UserKey, UserValue};
use sha2::{Digest, Sha256};

/// fjall's longest key.
pub(crate) const FJALL_MAX_KEY: usize = u16::MAX as usize;
/// The hash after a long key's head.
const HASH_LEN: usize = 32;
/// fjall's longest value.
const FJALL_MAX_VALUE: usize = u32::MAX as usize;

/// What fails reading or writing entries through a [`Layout`].
#[derive(Debug)]
pub(crate) enum DiskError {
    /// fjall failed.
    Fjall(fjall::Error),
    /// An entry is not what the layout wrote.
    Corrupt(String),
    /// A write fjall cannot hold (a value of 4 GiB or more with its key's tail).
    TooLarge(String),
}

impl From<fjall::Error> for DiskError {
    fn from(e: fjall::Error) -> Self {
        DiskError::Fjall(e)
    }
}

impl std::fmt::Display for DiskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskError::Fjall(e) => write!(f, "{e}"),
            DiskError::Corrupt(reason) | DiskError::TooLarge(reason) => f.write_str(reason),
        }
    }
}

/// The layout of one keyspace's keys: how many bytes of prefix precede a store's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    prefix_len: usize,
}

/// A key-value store's entries: its 4-byte id, then the key.
pub(crate) const KV: Layout = Layout { prefix_len: 4 };
/// A segmented store's segment and meta keyspaces: the entry key alone.
pub(crate) const SEGMENT: Layout = Layout { prefix_len: 0 };

impl Layout {
    /// The longest key written as is; a long key's head is this long.
    pub(crate) const fn inline_max(self) -> usize {
        FJALL_MAX_KEY - self.prefix_len - HASH_LEN
    }

    /// Whether `key` is a long key.
    #[inline]
    pub(crate) fn is_long(self, key: &[u8]) -> bool {
        key.len() > self.inline_max()
    }

    /// Calls `f` with the fjall key of `key` after `prefix` (`prefix_len` bytes): on the stack
    /// when short (no allocation, and no shared buffer, so a store can be read from several
    /// threads), else in a new vector.
    #[inline]
    pub(crate) fn with_key<T>(self, prefix: &[u8], key: &[u8], f: impl FnOnce(&[u8]) -> T) -> T {
        debug_assert_eq!(prefix.len(), self.prefix_len);
        const INLINE: usize = 128;
        let len = prefix.len() + key.len();
        if len <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..prefix.len()].copy_from_slice(prefix);
            buf[prefix.len()..len].copy_from_slice(key);
            f(&buf[..len])
        } else if !self.is_long(key) {
            let mut full = Vec::with_capacity(len);
            full.extend_from_slice(prefix);
            full.extend_from_slice(key);
            f(&full)
        } else {
            f(&self.long_key(prefix, key))
        }
    }

    /// `prefix ‖ key[..inline_max] ‖ SHA-256(key)`.
    fn long_key(self, prefix: &[u8], key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(FJALL_MAX_KEY);
        out.extend_from_slice(prefix);
        out.extend_from_slice(&key[..self.inline_max()]);
        out.extend_from_slice(&Sha256::digest(key));
        out
    }

    /// The fjall key of `key` after `prefix`.
    pub(crate) fn key(self, prefix: &[u8], key: &[u8]) -> UserKey {
        self.with_key(prefix, key, |k| UserKey::from(k))
    }

    /// The fjall value of `value` at `key`: the value itself, or a long key's tail and the value.
    /// A value fjall cannot hold (4 GiB or more, with a long key's tail) is an error.
    pub(crate) fn value(self, key: &[u8], value: &[u8]) -> Result<UserValue, DiskError> {
        if !self.is_long(key) {
            if value.len() > FJALL_MAX_VALUE {
                return Err(too_large(key.len(), value.len()));
            }
            return Ok(UserValue::from(value));
        }
        let tail = &key[self.inline_max()..];
        let len = 4 + tail.len() + value.len();
        let tail_len = u32::try_from(tail.len()).map_err(|_| too_large(key.len(), value.len()))?;
        if len > FJALL_MAX_VALUE {
            return Err(too_large(key.len(), value.len()));
        }
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&tail_len.to_be_bytes());
        out.extend_from_slice(tail);
        out.extend_from_slice(value);
        Ok(UserValue::from(out))
    }

    /// The store's key and value of the fjall entry `(key, value)` (its prefix cut off): the
    /// key is borrowed from `key` unless it is a long key's.
    pub(crate) fn decode<'a>(
        self,
        key: &'a [u8],
        value: &'a [u8],
    ) -> Result<(std::borrow::Cow<'a, [u8]>, &'a [u8]), DiskError> {
        let own = key.get(self.prefix_len..).unwrap_or_default();
        if own.len() <= self.inline_max() {
            return Ok((own.into(), value));
        }
        let (tail, value) = split_tail(value).ok_or_else(|| bad_tail(own.len(), value.len()))?;
        let mut full = Vec::with_capacity(self.inline_max() + tail.len());
        full.extend_from_slice(&own[..self.inline_max()]);
        full.extend_from_slice(tail);
        Ok((full.into(), value))
    }

    /// Copies the value of `key` (after `prefix`) in `keyspace` into `out` (cleared first);
    /// `false` if there is none.
    pub(crate) fn get(
        self,
        keyspace: &Keyspace,
        prefix: &[u8],
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, DiskError> {
        out.clear();
        let Some(found) = self.with_key(prefix, key, |k| keyspace.get(k))? else {
            return Ok(false);
        };
        if !self.is_long(key) {
            out.extend_from_slice(&found);
            return Ok(true);
        }
        let (tail, value) = split_tail(&found)
            .ok_or_else(|| bad_tail(FJALL_MAX_KEY - self.prefix_len, found.len()))?;
        if tail != &key[self.inline_max()..] {
            return Err(DiskError::Corrupt(format!(
                "the entry of a {}-byte key holds the tail of another key ({} bytes): a \
                 damaged value",
                key.len(),
                self.inline_max() + tail.len()
            )));
        }
        out.extend_from_slice(value);
        Ok(true)
    }

    /// Visits, in key order, the entries of `keyspace` whose fjall keys are `prefix ‖ key` with
    /// `from <= key < to` (`to` `None`: every key after `prefix`), while `f` returns `true`;
    /// `false` if `f` stopped it. Runs of long keys sharing a head are sorted by full key first
    /// (see the module documentation).
    pub(crate) fn visit(
        self,
        keyspace: &Keyspace,
        prefix: &[u8],
        from: &[u8],
        to: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool, DiskError> {
        if to.is_some_and(|to| from >= to) {
            return Ok(true);
        }
        let inline_max = self.inline_max();
        let cut_from = from.len() > inline_max;
        let cut_to = to.is_some_and(|to| to.len() > inline_max);
        let mut lower = prefix.to_vec();
        lower.extend_from_slice(&from[..from.len().min(inline_max)]);
        let upper = match to {
            Some(to) if !cut_to => {
                let mut upper = prefix.to_vec();
                upper.extend_from_slice(to);
                Some(upper)
            }
            Some(to) => {
                let mut head = prefix.to_vec();
                head.extend_from_slice(&to[..inline_max]);
                successor(head)
            }
            None => successor(prefix.to_vec()),
        };
        if upper.as_ref().is_some_and(|upper| lower >= *upper) {
            return Ok(true);
        }
        let hi = upper.map_or(Bound::Unbounded, Bound::Excluded);
        // Whether an entry is below `from` (to skip) or at or past `to` (to stop): only asked
        // when a bound was cut, so short keys between short bounds compare nothing more.
        let below = |key: &[u8]| cut_from && key < from;
        let past = |key: &[u8]| cut_to && to.is_some_and(|to| key >= to);
        // Whether `f` stopped the visit (`emit` returns `false` at the range's end too).
        let stopped = std::cell::Cell::new(false);
        let mut emit = |key: &[u8], value: &[u8]| -> bool {
            if below(key) {
                return true;
            }
            if past(key) {
                return false;
            }
            let go_on = f(key, value);
            stopped.set(!go_on);
            go_on
        };
        let mut run: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for guard in keyspace.range::<Vec<u8>, _>((Bound::Included(lower), hi)) {
            let (k, v) = guard.into_inner()?;
            let own = k.get(self.prefix_len..).unwrap_or_default();
            if own.len() > inline_max {
                if run
                    .first()
                    .is_some_and(|(first, _)| first[..inline_max] != own[..inline_max])
                    && !flush(&mut run, &mut emit)
                {
                    return Ok(!stopped.get());
                }
                let (key, value) = self.decode(&k, &v)?;
                run.push((key.into_owned(), value.to_vec()));
                continue;
            }
            if !flush(&mut run, &mut emit) || !emit(own, &v) {
                return Ok(!stopped.get());
            }
        }
        flush(&mut run, &mut emit);
        Ok(!stopped.get())
    }
}

/// Visits a run of long keys sharing a head in key order, and empties it; `false` if `emit`
/// stopped.
fn flush(run: &mut Vec<(Vec<u8>, Vec<u8>)>, emit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> bool {
    if run.is_empty() {
        return true;
    }
    run.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let go_on = run.iter().all(|(k, v)| emit(k, v));
    run.clear();
    go_on
}

/// The smallest key above every key starting with `bytes`; `None` if there is none.
fn successor(mut bytes: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(&last) = bytes.last() {
        if last < u8::MAX {
            if let Some(last) = bytes.last_mut() {
                *last += 1;
            }
            return Some(bytes);
        }
        bytes.pop();
    }
    None
}

/// A long key's fjall value: its tail, and the store's value.
fn split_tail(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = value.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

fn bad_tail(key_len: usize, value_len: usize) -> DiskError {
    DiskError::Corrupt(format!(
        "the entry of a long key ({key_len} bytes in fjall) has a {value_len}-byte value, too \
         short for the key's tail it must start with"
    ))
}

fn too_large(key_len: usize, value_len: usize) -> DiskError {
    DiskError::TooLarge(format!(
        "a {value_len}-byte value at a {key_len}-byte key is more than fjall holds (4 GiB with \
         the key's tail)"
    ))
}

#[cfg(test)]
pub(crate) mod tests;
