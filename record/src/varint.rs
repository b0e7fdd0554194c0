//! Zig-zag varints as Kafka's record format uses them (`ByteUtils.writeVarint/writeVarlong`).

/// Appends `v` zig-zag encoded as a LEB128 varint (at most 10 bytes).
pub fn put_varlong(buf: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// Encoded length of `v` as [`put_varlong`] writes it.
pub fn varlong_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decodes a zig-zag varlong at `*pos`, advancing it. `None` on truncation or overlong input.
pub fn get_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// Decodes a varint that must fit an `i32` (Kafka's `readVarint`).
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    get_varlong(buf, pos).and_then(|v| i32::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_lengths_match() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            -65,
            300,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
        ] {
            let mut buf = Vec::new();
            put_varlong(&mut buf, v);
            assert_eq!(buf.len(), varlong_len(v), "length of {v}");
            let mut pos = 0;
            assert_eq!(get_varlong(&buf, &mut pos), Some(v));
            assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn kafka_encodings() {
        // zig-zag: 0 -> 00, -1 -> 01, 1 -> 02, -64 -> 7f, 64 -> 80 01
        let enc = |v| {
            let mut b = Vec::new();
            put_varlong(&mut b, v);
            b
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(-1), [0x01]);
        assert_eq!(enc(1), [0x02]);
        assert_eq!(enc(-64), [0x7f]);
        assert_eq!(enc(64), [0x80, 0x01]);
    }

    #[test]
    fn truncated_and_overlong_inputs_are_rejected() {
        assert_eq!(get_varlong(&[0x80], &mut 0), None);
        assert_eq!(get_varlong(&[0xff; 11], &mut 0), None);
        assert_eq!(get_varint(&[0x80, 0x80, 0x80, 0x80, 0x20], &mut 0), None);
    }
}
