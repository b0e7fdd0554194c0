//! Kafka's flexible-version wire primitives, for the messages `kafka-protocol` has no types for
//! (the streams-group APIs 88 and 89): unsigned varints, compact (nullable) strings and arrays,
//! nullable-struct markers and tagged-field sections. The reader never panics: running out of
//! bytes or reading nonsense is an [`Error::Decode`] naming the API and the field.

use bytes::BufMut;

use crate::error::{Error, Result};

/// Appends `v` as an unsigned LEB128 varint.
pub(crate) fn put_uvarint(buf: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// A COMPACT_STRING.
pub(crate) fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_uvarint(buf, s.len() as u32 + 1);
    buf.put_slice(s.as_bytes());
}

/// A COMPACT_NULLABLE_STRING.
pub(crate) fn put_nullable_str(buf: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_str(buf, s),
        None => put_uvarint(buf, 0),
    }
}

/// The length prefix of a non-null COMPACT_ARRAY of `n` elements.
pub(crate) fn put_array_len(buf: &mut Vec<u8>, n: usize) {
    put_uvarint(buf, n as u32 + 1);
}

/// A null COMPACT_NULLABLE_ARRAY.
pub(crate) fn put_null_array(buf: &mut Vec<u8>) {
    put_uvarint(buf, 0);
}

/// A COMPACT_ARRAY of compact strings.
pub(crate) fn put_str_array<S: AsRef<str>>(buf: &mut Vec<u8>, items: &[S]) {
    put_array_len(buf, items.len());
    for s in items {
        put_str(buf, s.as_ref());
    }
}

/// An empty tagged-field section: every struct ends with one.
pub(crate) fn put_tags(buf: &mut Vec<u8>) {
    buf.put_u8(0);
}

/// Reads one response body of `api`, field by field.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    api: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], api: &'static str) -> Self {
        Reader { buf, pos: 0, api }
    }

    fn err(&self, field: &str, reason: impl std::fmt::Display) -> Error {
        Error::Decode {
            api: self.api,
            reason: format!("{field} at byte {}: {reason}", self.pos),
        }
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                self.err(
                    field,
                    format!("needs {n} bytes, {} left", self.buf.len() - self.pos),
                )
            })?;
        let out = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    pub(crate) fn i8(&mut self, field: &str) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array(field)?))
    }
    pub(crate) fn i16(&mut self, field: &str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }
    pub(crate) fn u16(&mut self, field: &str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }
    pub(crate) fn i32(&mut self, field: &str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }
    pub(crate) fn i64(&mut self, field: &str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }
    pub(crate) fn bool(&mut self, field: &str) -> Result<bool> {
        Ok(self.i8(field)? != 0)
    }

    pub(crate) fn uvarint(&mut self, field: &str) -> Result<u32> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.take(1, field)?.first().copied().unwrap_or_default();
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(field, "unsigned varint longer than 5 bytes"))
    }

    pub(crate) fn nullable_str(&mut self, field: &str) -> Result<Option<String>> {
        let n = self.uvarint(field)?;
        if n == 0 {
            return Ok(None);
        }
        let bytes = self.take(n as usize - 1, field)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| self.err(field, "not UTF-8"))
    }

    pub(crate) fn str(&mut self, field: &str) -> Result<String> {
        self.nullable_str(field)?
            .ok_or_else(|| self.err(field, "null where a string is required"))
    }

    /// The element count of a COMPACT_NULLABLE_ARRAY; `None` when null.
    pub(crate) fn nullable_array_len(&mut self, field: &str) -> Result<Option<usize>> {
        let n = self.uvarint(field)?;
        if n == 0 {
            return Ok(None);
        }
        let n = n as usize - 1;
        // Every element takes at least one byte: refuse counts the buffer cannot hold.
        if n > self.buf.len() - self.pos {
            return Err(self.err(field, format!("array of {n} elements in too few bytes")));
        }
        Ok(Some(n))
    }

    /// A nullable array, each element read by `f`.
    pub(crate) fn nullable_vec<T>(
        &mut self,
        field: &str,
        mut f: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(n) = self.nullable_array_len(field)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(f(self)?);
        }
        Ok(Some(out))
    }

    /// A non-null array, each element read by `f`.
    pub(crate) fn vec<T>(
        &mut self,
        field: &str,
        f: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.nullable_vec(field, f)?
            .ok_or_else(|| self.err(field, "null where an array is required"))
    }

    /// The int8 marker of a nullable struct: whether the struct follows.
    pub(crate) fn present(&mut self, field: &str) -> Result<bool> {
        match self.i8(field)? {
            -1 => Ok(false),
            1 => Ok(true),
            other => Err(self.err(field, format!("nullable-struct marker {other}"))),
        }
    }

    /// Skips a tagged-field section (riffle knows no tagged fields of these messages).
    pub(crate) fn tags(&mut self, field: &str) -> Result<()> {
        let n = self.uvarint(field)?;
        for _ in 0..n {
            self.uvarint(field)?;
            let size = self.uvarint(field)?;
            self.take(size as usize, field)?;
        }
        Ok(())
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.pos != self.buf.len() {
            return Err(self.err(
                "end",
                format!("{} trailing bytes", self.buf.len() - self.pos),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_strings_and_arrays_round_trip() {
        let mut b = Vec::new();
        put_uvarint(&mut b, 300);
        put_str(&mut b, "app1");
        put_nullable_str(&mut b, None);
        put_str_array(&mut b, &["a", "bc"]);
        put_null_array(&mut b);
        put_tags(&mut b);
        assert_eq!(&b[..2], &[0xac, 0x02]);
        let mut r = Reader::new(&b, "test");
        assert_eq!(r.uvarint("n").ok(), Some(300));
        assert_eq!(r.str("s").ok().as_deref(), Some("app1"));
        assert_eq!(r.nullable_str("s").ok(), Some(None));
        let v = r.vec("a", |r| r.str("x")).ok();
        assert_eq!(v, Some(vec!["a".to_owned(), "bc".to_owned()]));
        assert!(matches!(r.nullable_array_len("n"), Ok(None)));
        assert!(r.tags("t").is_ok());
        assert!(r.finish().is_ok());
    }

    #[test]
    fn truncated_or_absurd_input_is_an_error_not_a_panic() {
        let mut r = Reader::new(&[0x05, b'a'], "test");
        assert!(r.str("s").is_err());
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x7f], "test");
        assert!(r.nullable_array_len("a").is_err());
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], "test");
        assert!(r.uvarint("v").is_err());
        let mut r = Reader::new(&[2], "test");
        assert!(r.present("p").is_err());
    }
}
