//! Target `recovery_point`: a partition's recovery point as an open uses it (log/FORMAT.md,
//! *Recovery point*): a segment file of the fuzzer's bytes, opened once without a `lock` file
//! (no recovery point) and once with one, and a `start` file in both.
//!
//! Input: a flags byte, a recovery point selector (8 bytes, big-endian), a start selector (1
//! byte), two length-prefixed fields (raw `lock` bytes, raw `start` bytes: a length byte, then
//! up to that many bytes), then the segment. Flags: bit 0 rewrites every batch's CRC (and a
//! length past the end) so mutations reach past the checksum; bits 1–2 pick the lock file
//! (none; slots written by the log with the recovery point; the raw bytes; slots written twice,
//! the second write torn by one changed byte); bits 3–4 pick the start file (none; written by
//! the log for the start selector; the raw bytes); bits 5–6 pick the segment's base offset (0,
//! 1,000, `u32::MAX`, 5 below `u64::MAX`). The recovery point is the base plus the selector
//! modulo 512, or, with its top bit set, the selector as it is.
//!
//! Checked: no panic; errors are corruption errors. The lock file only decides between a cut
//! and an error: the open without it either fails, and then so does the open with it, or it
//! reads up to an end offset `E` (cutting a torn tail past it); then the open with a recovery
//! point at most `E` reads exactly the same records and leaves the same bytes, and one with a
//! recovery point past `E` fails with `Error::Corrupt` naming the segment, cutting nothing —
//! never fewer records than the recovery point says were durable. Unreadable slots fail the
//! open with `Error::Corrupt` naming the lock file. A start file that does not decode fails
//! both opens; one that does is the start offset read back.

use riffle_log::fuzzing::{MemDir, decode_slots, decode_start, encode_start, write_slots};
use riffle_log::{Error, LogOptions};

use crate::model::read_all;
use crate::{assert_data_error, fix_segment_crcs, segment_name, tp};

/// The partition directory of the target's log.
const PARTITION: &str = "topics/t/0";

fn field<'a>(data: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (&len, rest) = data.split_first()?;
    let len = usize::from(len).min(rest.len());
    let (bytes, rest) = rest.split_at(len);
    *data = rest;
    Some(bytes)
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((head, mut rest)) = data.split_at_checked(10) else {
        return;
    };
    let flags = head[0];
    let selector = u64::from_be_bytes(head[1..9].try_into().unwrap_or_default());
    let start_sel = head[9];
    let (Some(raw_lock), Some(raw_start)) = (field(&mut rest), field(&mut rest)) else {
        return;
    };
    let base = match (flags >> 5) & 3 {
        0 => 0,
        1 => 1000,
        2 => u64::from(u32::MAX),
        _ => u64::MAX - 5,
    };
    let mut seg = rest.to_vec();
    if flags & 1 != 0 {
        fix_segment_crcs(&mut seg, base);
    }
    let point = if selector >> 63 == 0 {
        base.saturating_add(selector % 512)
    } else {
        selector
    };
    // The lock file: 16 bytes of writer coordination (a memory-backed log has no other writer
    // and ignores them), then the slots.
    let lock = match (flags >> 1) & 3 {
        0 => None,
        1 => Some(slots_file(raw_lock, &[point])),
        2 => Some(raw_lock.to_vec()),
        _ => {
            let mut lock = slots_file(raw_lock, &[point, point.wrapping_add(selector >> 32)]);
            // The second write went into the second slot; a crash tore it.
            let at = 16 + 24 + usize::from(start_sel) % 24;
            lock[at] ^= 0x5a;
            Some(lock)
        }
    };
    let start = match (flags >> 3) & 3 {
        0 => None,
        1 => Some(encode_start(base.saturating_add(u64::from(start_sel) % 64))),
        _ => Some(raw_start.to_vec()),
    };
    let seg_path = format!("{PARTITION}/{}", segment_name(base));
    let make = |lock: Option<&[u8]>| {
        let dir = MemDir::new();
        dir.write("topics/t/partitions", b"1\n");
        dir.write(&seg_path, &seg);
        if let Some(lock) = lock {
            dir.write(&format!("{PARTITION}/lock"), lock);
        }
        if let Some(start) = &start {
            dir.write(&format!("{PARTITION}/start"), start);
        }
        dir
    };
    let options = LogOptions::default().with_index_interval_bytes(128);

    let plain = make(None);
    let without = plain.open(options.clone()).and_then(|log| {
        let tp = tp(0);
        let start = log.start_offset(&tp)?;
        let end = log.end_offset(&tp)?;
        Ok((start, end, read_all(&log, &tp, start, 1 << 20)?))
    });
    if let (Some(start), Ok((read, _, _))) = (&start, &without) {
        assert_eq!(
            decode_start(start).ok(),
            Some(*read),
            "the start offset read"
        );
    }
    if let Err(e) = &without {
        assert_data_error(e, "the open without a recovery point");
        if let Some(start) = &start
            && decode_start(start).is_err()
        {
            assert!(is_corrupt(e, "start"), "{e:?}");
        }
    }
    let Some(lock) = lock else {
        return;
    };
    let slots = decode_slots(lock.get(16..).unwrap_or_default());
    let dir = make(Some(&lock));
    let before = dir.snapshot();
    let with = dir.open(options).and_then(|log| {
        let tp = tp(0);
        let start = log.start_offset(&tp)?;
        let end = log.end_offset(&tp)?;
        Ok((start, end, read_all(&log, &tp, start, 1 << 20)?))
    });
    let point = match slots {
        Err(_) => {
            let e = with.expect_err("unreadable slots fail the open");
            assert!(is_corrupt(&e, "lock"), "{e:?}");
            return;
        }
        Ok(slots) => slots.map_or(0, |(value, _)| value),
    };
    match (&without, &with) {
        (Err(_), Err(e)) => assert_data_error(e, "the open with a recovery point"),
        (Err(e), Ok(_)) => panic!("a recovery point made a failing open succeed: {e}"),
        (Ok((_, end, _)), Err(e)) => {
            assert!(
                point > *end && is_corrupt(e, &segment_name(base)),
                "an open with recovery point {point} of a segment ending at {end}: {e}"
            );
            // It cut nothing (it may have created the segment's missing index file).
            let after = dir.snapshot();
            assert!(
                dir.read(&seg_path).as_deref() == Some(&seg[..]),
                "a failed open cut the segment"
            );
            assert!(
                before.iter().all(|(path, bytes)| after
                    .iter()
                    .any(|(p, b)| p == path && b.len() >= bytes.len())),
                "a failed open removed or shortened a file"
            );
        }
        (Ok(a), Ok(b)) => {
            assert!(
                point <= a.1,
                "records below recovery point {point} cut (end {})",
                a.1
            );
            assert!(
                a == b,
                "a recovery point below the end changed what was read"
            );
            assert!(
                dir.read(&seg_path) == plain.read(&seg_path),
                "a recovery point below the end changed the cut"
            );
        }
    }
}

/// A lock file of the first 16 bytes of `head` (zero-filled), then slots the log wrote with
/// `values`, one after the other.
fn slots_file(head: &[u8], values: &[u64]) -> Vec<u8> {
    let mut slots = Vec::new();
    for &v in values {
        slots = write_slots(&slots, v).expect("writing into fresh slots");
    }
    let mut lock = vec![0u8; 16];
    lock[..head.len().min(16)].copy_from_slice(&head[..head.len().min(16)]);
    lock.extend_from_slice(&slots);
    lock
}

/// Whether `e` is `Error::Corrupt` about a file named `name`.
fn is_corrupt(e: &Error, name: &str) -> bool {
    matches!(e, Error::Corrupt { path, .. } if path.file_name().is_some_and(|n| n == name))
}
