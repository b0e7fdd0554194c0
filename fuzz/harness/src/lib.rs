//! What riffle's fuzz targets check: one function per target (in its module), taking the
//! fuzzer's bytes, that panics exactly when the code under test misbehaves — a panic of its own,
//! an error of the wrong kind, or an answer that differs from the target's model. The targets in
//! `fuzz/fuzz_targets/` only call these; the seed generator (`src/bin/seeds.rs`) writes inputs
//! for them. Nothing here needs nightly or libFuzzer.
//!
//! Everything goes through entry points that stay put while the readers' internals change: the
//! public `Log` API on a log directory held in memory (`riffle_log::fuzzing::MemDir`), whose
//! files the targets write byte by byte, `Checkpoint::parse`, the group-offsets codec, a topic's
//! `partitions` file and metadata repair, and the readers of the slots, the group registry and
//! the `start` file (`riffle_log::fuzzing`).
//! What a reader may answer is kept loose where the corruption rules are being changed (torn
//! tail cut, or an error) and strict where it is not (no panic, nothing changed but a cut tail,
//! only `Error::Corrupt` and friends, the same answer twice, never records that differ from the
//! data).

pub mod checkpoint;
pub mod durability_records;
pub mod group_offsets;
pub mod model;
pub mod offset_index;
pub mod records;
pub mod recovery_point;
pub mod seeds;
pub mod segment_reader;
pub mod topic_meta;
pub mod txn_journal;

use riffle_log::{BatchBuilder, Compression, Error, LogOptions, RecordError, TopicPartition};

/// The topic every target's log has.
pub const TOPIC: &str = "t";

/// Partition `p` of [`TOPIC`].
pub fn tp(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// The codec a selector byte stands for.
pub fn codec(sel: u8) -> Compression {
    match sel % 3 {
        0 => Compression::None,
        1 => Compression::Lz4,
        _ => Compression::Zstd,
    }
}

/// Options with small segments and a dense index, so a few records roll segments and index.
pub fn small_options(segment_bytes: u16, index_interval: u16) -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(u64::from(segment_bytes).max(64))
        .with_index_interval_bytes(u32::from(index_interval).max(1))
        .with_txn_journal_bytes(u64::MAX)
}

/// Panics unless `e` is one of the errors a reader may give for bad bytes.
pub fn assert_data_error(e: &Error, what: &str) {
    assert!(
        matches!(
            e,
            Error::Corrupt { .. }
                | Error::Record(
                    RecordError::CorruptRecord { .. } | RecordError::Compression { .. }
                )
        ),
        "{what}: bad bytes must be a corruption error, got {e:?}"
    );
}

/// Name of the segment file at `base`, as FORMAT.md defines it.
pub fn segment_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// Batch header length and the fields the harness needs (log/FORMAT.md, "Batch": Kafka's v2
/// record batch).
pub const HEADER_LEN: usize = 61;
/// The base offset and length fields, before what the length counts.
const LOG_OVERHEAD: usize = 12;

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Walks `seg` batch by batch as its length fields say and rewrites each batch's CRC to match
/// its bytes (and, if the length runs past the end, the length to what is there), so that
/// mutated bytes get past the checksum into the header checks, the decompressors and the record
/// decoder. Returns the offset after the last batch whose header names one (for naming a next
/// segment).
pub fn fix_segment_crcs(seg: &mut [u8], base: u64) -> u64 {
    let mut pos = 0usize;
    let mut next = base;
    while seg.len() - pos >= HEADER_LEN {
        let left = seg.len() - pos;
        let mut len = be_u32(seg, pos + 8).unwrap_or(0) as usize;
        if len < HEADER_LEN - LOG_OVERHEAD || len + LOG_OVERHEAD > left {
            len = left - LOG_OVERHEAD;
            seg[pos + 8..pos + 12].copy_from_slice(&(len as u32).to_be_bytes());
        }
        let batch = &mut seg[pos..pos + len + LOG_OVERHEAD];
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        let b = be_u64(batch, 0).unwrap_or(0);
        let last_delta = be_u32(batch, 23).unwrap_or(0);
        next = b.saturating_add(u64::from(last_delta)).saturating_add(1);
        pos += len + LOG_OVERHEAD;
    }
    next
}

thread_local! {
    /// Builders kept between runs: a zstd builder's compression context costs more to create
    /// than a whole run of most inputs.
    static BUILDERS: std::cell::RefCell<Vec<BatchBuilder>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An empty builder for `c`, reused from an earlier run if one is free.
pub fn builder(c: Compression) -> BatchBuilder {
    let reused = BUILDERS.with(|b| {
        let mut pool = b.borrow_mut();
        let i = pool.iter().position(|b| b.compression() == c)?;
        Some(pool.swap_remove(i))
    });
    reused.unwrap_or_else(|| BatchBuilder::new(c))
}

/// Returns `b` to the pool (cleared).
pub fn give_back(mut b: BatchBuilder) {
    b.clear();
    BUILDERS.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < 16 {
            pool.push(b);
        }
    });
}
