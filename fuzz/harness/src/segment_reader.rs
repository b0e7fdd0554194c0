//! Target `segment_reader`: a partition whose segment file holds the fuzzer's bytes, opened
//! (recovery), then read from its start — header parsing, checksums, decompression (LZ4,
//! Zstandard) and record decoding.
//!
//! Input: one flags byte, then the segment's bytes. Flags: bit 0 rewrites every batch's CRC (and
//! a length running past the end) so mutations reach past the checksum; bits 1–2 pick the
//! segment's base offset (0, 1,000, `u32::MAX`, or 5 below `u64::MAX`); bit 3 makes it a sealed
//! segment, followed by an empty active one named after the offset its last batch claims to end
//! at; bits 4–5 pick the fetch size (1 byte, 100 bytes, 64 KiB, 16 MiB).
//!
//! Checked: no panic; an error is a corruption error; an open that succeeds changed nothing but
//! cut a tail off the segment; a second open finds the same and changes nothing (or fails the
//! same way); the partition reads back from start to end (batches contiguous, each record
//! inside its batch's range: compaction leaves gaps) — the same records whatever the fetch
//! size — or fails with a corruption error.

use riffle_log::LogOptions;
use riffle_log::fuzzing::MemDir;

use crate::model::read_all;
use crate::{assert_data_error, fix_segment_crcs, segment_name, tp};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&flags, seg)) = data.split_first() else {
        return;
    };
    let mut seg = seg.to_vec();
    let base = match (flags >> 1) & 3 {
        0 => 0,
        1 => 1000,
        2 => u64::from(u32::MAX),
        _ => u64::MAX - 5,
    };
    let claimed_end = if flags & 1 != 0 {
        fix_segment_crcs(&mut seg, base)
    } else {
        base
    };
    let max_bytes = [1, 100, 64 << 10, 16 << 20][usize::from((flags >> 4) & 3)];
    let dir = MemDir::new();
    dir.write("topics/t/partitions", b"1\n");
    let seg_path = format!("topics/t/0/{}", segment_name(base));
    dir.write(&seg_path, &seg);
    let sealed = flags & 8 != 0 && claimed_end > base;
    if sealed {
        dir.write(&format!("topics/t/0/{}", segment_name(claimed_end)), b"");
    }
    let options = LogOptions::default().with_index_interval_bytes(128);
    let first = dir.open(options.clone());
    let after_first = dir.snapshot();
    let second = dir.open(options);
    assert!(
        dir.snapshot() == after_first,
        "a second open changed the files"
    );
    let (log, log2) = match (first, second) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(a), Err(b)) => {
            assert_data_error(&a, "open");
            assert_eq!(
                a.to_string(),
                b.to_string(),
                "two opens of the same files disagree"
            );
            return;
        }
        (a, b) => panic!("two opens of the same files disagree: {a:?} / {b:?}"),
    };
    let now = dir.read(&seg_path).expect("the segment is still there");
    assert!(
        sealed && now == seg || !sealed && seg.starts_with(&now),
        "open changed the segment other than by cutting its tail ({} -> {} bytes)",
        seg.len(),
        now.len()
    );
    let tp = tp(0);
    let end = log.end_offset(&tp).expect("end offset");
    assert_eq!(
        end,
        log2.end_offset(&tp).expect("end offset"),
        "two opens disagree on the end"
    );
    let start = log.start_offset(&tp).expect("start offset");
    assert!(start <= end);
    let small = read_all(&log, &tp, start, max_bytes);
    let large = read_all(&log2, &tp, start, 64 << 20);
    match (&small, &large) {
        (Ok(a), Ok(b)) => assert!(a == b, "the fetch size changed what was read"),
        (Err(a), Err(b)) => {
            assert_data_error(a, "fetch");
            assert_data_error(b, "fetch");
        }
        (a, b) => panic!("the fetch size changed whether the data reads: {a:?} / {b:?}"),
    }
}
