//! Kafka's default partitioner for keyed records: the Java client's `Utils.murmur2`, then
//! `toPositive(hash) % partitions`. Byte-compatible, so riffle and Kafka place keys alike.

/// murmur2 as Kafka's Java client computes it (seed `0x9747b28c`), as a signed 32-bit value.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Java's `int` arithmetic: wrapping, the length taken as a 32-bit int.
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate().rev() {
            h ^= u32::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's Java producer picks for `key`: `(murmur2(key) & 0x7fffffff) % partitions`.
/// Returns 0 when `partitions` is 0 (there is no valid answer; callers validate the count).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    if partitions == 0 {
        return 0;
    }
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}
