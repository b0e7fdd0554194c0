//! Target `durability_records`: the readers of the log's second records (issue 35) — the two
//! checksummed slots of log/src/slots.rs (a partition's recovery point in its `lock` file, the
//! journal's committed length in `txn/lock`), the group registry of `txn/lock`, and the
//! partition `start` file — each against a model written from log/FORMAT.md.
//!
//! Input: one mode byte, then the rest.
//! - 0: the rest is two slots as a file holds them (missing bytes read as zeros).
//! - 1: the rest describes a file and values written into its slots one after the other.
//! - 2: the rest is a group registry (`txn/lock` from byte 64 on).
//! - 3: the rest describes group names, registered one after the other, and a torn last entry.
//! - 4: the rest is a `start` file.
//! - 5: the rest describes a start offset.
//!
//! Checked: no panic; an error is `Error::Corrupt`; the slots, the registry and the start file
//! decode exactly as the models say; what the writers write decodes to what was written (a
//! value written into the slots reads back, with the next sequence number; the registry reads
//! back its names, up to a torn entry at the end; a start offset reads back); a torn write of
//! the slot being written leaves the previous value readable; no single flipped bit of a start
//! file reads as another start offset.

use std::collections::BTreeSet;

use arbitrary::{Arbitrary, Unstructured};
use riffle_log::Error;
use riffle_log::fuzzing::{
    decode_slots, decode_start, encode_start, group_registry_entry, parse_group_registry,
    write_slots,
};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 6 {
        0 => {
            check_slots(rest);
        }
        1 => slot_writes(rest),
        2 => check_registry(rest),
        3 => registry_writes(rest),
        4 => check_start(rest),
        _ => start_writes(rest),
    }
}

const SLOT_LEN: usize = 24;

/// One slot as FORMAT.md (*Recovery point*) defines it: value, sequence number, CRC32C of those
/// 16 bytes, 4 zero bytes. `None` if it does not check out.
fn model_slot(slot: &[u8]) -> Option<(u64, u64)> {
    let crc = u32::from_be_bytes(slot[16..20].try_into().ok()?);
    if crc32c::crc32c(&slot[..16]) != crc || slot[20..24] != [0; 4] {
        return None;
    }
    let value = u64::from_be_bytes(slot[..8].try_into().ok()?);
    let seq = u64::from_be_bytes(slot[8..16].try_into().ok()?);
    Some((value, seq))
}

/// What the two slots at the start of `bytes` hold, as FORMAT.md says: the valid slot with the
/// higher sequence (`Err(Some(..))`: equal sequences, either may be taken), `None` if neither is
/// valid and one is all zeros (never written), an error (`Err(None)`) if neither is valid
/// and neither is empty. Also which slot holds the value.
type ModelSlots = Result<Option<((u64, u64), usize)>, Option<[(u64, u64); 2]>>;

fn model_slots(bytes: &[u8]) -> ModelSlots {
    let mut both = [0u8; 2 * SLOT_LEN];
    let n = bytes.len().min(both.len());
    both[..n].copy_from_slice(&bytes[..n]);
    let (a, b) = both.split_at(SLOT_LEN);
    match (model_slot(a), model_slot(b)) {
        (Some(x), Some(y)) if x.1 == y.1 && x.0 != y.0 => Err(Some([x, y])),
        (Some(x), Some(y)) => Ok(Some(if x.1 >= y.1 { (x, 0) } else { (y, 1) })),
        (Some(x), None) => Ok(Some((x, 0))),
        (None, Some(y)) => Ok(Some((y, 1))),
        (None, None) if a.iter().all(|&x| x == 0) || b.iter().all(|&x| x == 0) => Ok(None),
        (None, None) => Err(None),
    }
}

/// Decodes with the log and checks against the model; returns what the log read.
fn check_slots(bytes: &[u8]) -> Option<(u64, u64)> {
    let got = decode_slots(bytes);
    match (model_slots(bytes), &got) {
        (Ok(want), Ok(got)) => assert_eq!(want.map(|(v, _)| v), *got, "the slots"),
        (Err(Some(tie)), Ok(Some(got))) => assert!(tie.contains(got), "a tie: {got:?}"),
        (Err(None), Err(e)) => assert!(matches!(e, Error::Corrupt { .. }), "{e:?}"),
        (want, got) => panic!("the slots: the model says {want:?}, the log {got:?}"),
    }
    got.ok().flatten()
}

/// Mode 1: a file, then values written into its slots as the log writes them.
#[derive(Arbitrary, Debug)]
struct SlotWrites {
    file: Vec<u8>,
    values: Vec<u64>,
    /// Where in the slot just written a torn write changed a byte, and how.
    tear: (u8, u8),
}

fn slot_writes(rest: &[u8]) {
    let Ok(input) = SlotWrites::arbitrary(&mut Unstructured::new(rest)) else {
        return;
    };
    let mut file = input.file;
    for &value in input.values.iter().take(8) {
        let before = model_slots(&file);
        let written = write_slots(&file, value);
        let Ok(before) = before else {
            // Unreadable slots (or a tie, which only a crafted file has): the log reads them
            // before writing, so it refuses, or writes after one of the tied values.
            if let Err(e) = &written {
                assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
            }
            return;
        };
        let after = written.expect("readable slots take a write");
        assert!(
            after.len() >= 2 * SLOT_LEN,
            "both slots exist after a write"
        );
        assert_eq!(
            after[2 * SLOT_LEN..],
            file[(2 * SLOT_LEN).min(file.len())..]
        );
        let prev = before.map(|(p, _)| p);
        let seq = prev.map_or(0, |(_, s)| s.wrapping_add(1));
        if prev.is_some_and(|(_, s)| s == u64::MAX) {
            // The sequence wraps after 2^64 writes: only a crafted file gets there.
            return;
        }
        let read = check_slots(&after);
        assert_eq!(read, Some((value, seq)), "a written value reads back");
        // A crash tears at most the slot being written; if the previous value is in the other
        // slot (where the log wrote it), it stands.
        let slot = usize::try_from(seq % 2).unwrap_or(0);
        if let Some((p, at)) = before
            && at != slot
        {
            let mut torn = after.clone();
            let (pos, xor) = input.tear;
            torn[slot * SLOT_LEN + usize::from(pos) % SLOT_LEN] ^= xor.max(1);
            assert_eq!(
                check_slots(&torn),
                Some(p),
                "a torn write loses the older value"
            );
        }
        file = after;
    }
}

/// The registry as FORMAT.md (*Group offsets*) defines it, read in order: entries of a length
/// `u16`, that many bytes of UTF-8 (at least one), the CRC32C of both, up to the first that does
/// not check out. The names and the byte after the last valid entry.
fn model_registry(bytes: &[u8]) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let mut at = 0;
    while let Some(len) = bytes.get(at..at + 2) {
        let n = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let (Some(entry), Some(crc)) =
            (bytes.get(at..at + 2 + n), bytes.get(at + 2 + n..at + 6 + n))
        else {
            break;
        };
        let Ok(name) = std::str::from_utf8(&entry[2..]) else {
            break;
        };
        if n == 0 || crc32c::crc32c(entry).to_be_bytes() != crc {
            break;
        }
        names.push(name.to_owned());
        at += 6 + n;
    }
    (names, at)
}

fn check_registry(bytes: &[u8]) {
    let (names, end) = model_registry(bytes);
    let (got, got_end) = parse_group_registry(bytes);
    assert_eq!(got_end, end as u64, "where the registry ends");
    assert_eq!(
        got,
        names.iter().cloned().collect::<BTreeSet<_>>(),
        "the groups"
    );
    // What decodes is exactly what the writer writes for those names.
    let again: Vec<u8> = names.iter().flat_map(|n| group_registry_entry(n)).collect();
    assert!(
        again == bytes[..end],
        "registry entries re-encode to the same bytes"
    );
}

/// Mode 3: groups registered in turn, then a write of one more torn after `torn` bytes.
#[derive(Arbitrary, Debug)]
struct RegistryWrites {
    names: Vec<String>,
    torn: (String, u16),
}

fn registry_writes(rest: &[u8]) {
    let Ok(input) = RegistryWrites::arbitrary(&mut Unstructured::new(rest)) else {
        return;
    };
    // Group names are 1 to 243 bytes (the log checks them before it registers one).
    let ok = |n: &String| (1..=243).contains(&n.len());
    let names: Vec<String> = input.names.into_iter().filter(ok).collect();
    let mut bytes: Vec<u8> = names.iter().flat_map(|n| group_registry_entry(n)).collect();
    let whole = bytes.len();
    if ok(&input.torn.0) {
        let entry = group_registry_entry(&input.torn.0);
        let cut = usize::from(input.torn.1) % entry.len();
        bytes.extend_from_slice(&entry[..cut]);
    }
    let (got, end) = parse_group_registry(&bytes);
    assert_eq!(
        end, whole as u64,
        "the registry ends after the last whole entry"
    );
    assert_eq!(
        got,
        names.into_iter().collect::<BTreeSet<_>>(),
        "the groups"
    );
    check_registry(&bytes);
}

/// A `start` file as FORMAT.md (*Start offset*) defines it: the offset in decimal, a space, the
/// CRC32C of the digits in 8 lowercase hex digits, a newline; or, from older logs, the offset
/// and a newline — unless those digits are an offset, `0`, and that offset's CRC32C in hex (a
/// checksummed line whose space a flipped bit turned into a `0`).
fn model_start(bytes: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let digits_ok = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let hex = |d: &str| format!("{:08x}", crc32c::crc32c(d.as_bytes()));
    match line.split_once(' ') {
        Some((digits, crc)) if digits_ok(digits) && crc == hex(digits) => digits.parse().ok(),
        Some(_) => None,
        None if digits_ok(line) => {
            let flipped = line.len() > 9 && {
                let (offset, rest) = line.split_at(line.len() - 9);
                rest.strip_prefix('0') == Some(&hex(offset))
            };
            if flipped { None } else { line.parse().ok() }
        }
        None => None,
    }
}

fn check_start(bytes: &[u8]) {
    match (model_start(bytes), decode_start(bytes)) {
        (Some(want), Ok(got)) => assert_eq!(want, got, "the start offset"),
        (None, Err(e)) => assert!(
            matches!(&e, Error::Corrupt { path, .. } if path.ends_with("start")),
            "{e:?}"
        ),
        (want, got) => panic!("the start file: the model says {want:?}, the log {got:?}"),
    }
}

/// Mode 5: a start offset is written; it reads back, and no single flipped bit or cut reads as
/// another one.
fn start_writes(rest: &[u8]) {
    let Ok(offset) = u64::arbitrary(&mut Unstructured::new(rest)) else {
        return;
    };
    let file = encode_start(offset);
    assert_eq!(
        decode_start(&file).ok(),
        Some(offset),
        "a start offset reads back"
    );
    check_start(&file);
    let mut flipped = file.clone();
    for i in 0..file.len() * 8 {
        flipped[i / 8] ^= 1 << (i % 8);
        if let Ok(other) = decode_start(&flipped) {
            assert_eq!(other, offset, "a flipped bit reads as another start offset");
        }
        flipped[i / 8] ^= 1 << (i % 8);
    }
    for cut in 0..file.len() {
        assert!(
            decode_start(&file[..cut]).is_err(),
            "a cut start file reads"
        );
    }
}
