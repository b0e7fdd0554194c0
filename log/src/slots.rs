//! A `u64` kept in two checksummed slots of a file that is written in place and never fsynced:
//! the partitions' recovery points (log/src/partition/recovery_point.rs) and the transaction
//! journal's committed length (log/src/txn/mod.rs), both in lock files.
//!
//! Each slot is 24 bytes: the value `u64`, a sequence number `u64`, the CRC32C of those 16
//! bytes, 4 zero bytes (big-endian). The valid slot with the higher sequence holds the value; a
//! new value goes into the other slot, so a write torn by a crash spoils one slot and the other
//! still holds the previous value. Such a value is only ever a *lower bound* of something that
//! was made durable before it was written: losing its write leaves an older, lower value, which
//! is always safe to trust.

use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::storage::{Storage, StorageFile};

const SLOT_LEN: usize = 24;
/// The bytes the two slots take.
pub(crate) const SLOTS_LEN: usize = 2 * SLOT_LEN;

/// What the slots hold: the value and the sequence number of its write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slotted {
    pub(crate) value: u64,
    seq: u64,
}

impl Slotted {
    /// The sequence number of the write that put the value there.
    pub(crate) fn seq(self) -> u64 {
        self.seq
    }
}

fn encode_slot(s: Slotted) -> [u8; SLOT_LEN] {
    let mut slot = [0u8; SLOT_LEN];
    slot[..8].copy_from_slice(&s.value.to_be_bytes());
    slot[8..16].copy_from_slice(&s.seq.to_be_bytes());
    let crc = crc32c::crc32c(&slot[..16]);
    slot[16..20].copy_from_slice(&crc.to_be_bytes());
    slot
}

/// A slot that checks out; `None` for an empty (never written) or a torn one.
fn decode_slot(slot: &[u8]) -> Option<Slotted> {
    let (body, rest) = slot.split_at_checked(16)?;
    let crc = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    if crc32c::crc32c(body) != crc || rest.get(4..8)? != [0u8; 4] {
        return None;
    }
    Some(Slotted {
        value: u64::from_be_bytes(body.get(..8)?.try_into().ok()?),
        seq: u64::from_be_bytes(body.get(8..16)?.try_into().ok()?),
    })
}

/// The value the two slots in `bytes` hold (`None`: never written); bytes missing at the end
/// read as zeros (a file that ends inside them). Two slots that are both neither empty nor
/// valid are an [`Error::Corrupt`] naming `path`, byte `at` and `what` they hold: a crash tears
/// at most the one being written.
pub(crate) fn decode(path: &Path, at: u64, what: &str, bytes: &[u8]) -> Result<Option<Slotted>> {
    let mut both = [0u8; SLOTS_LEN];
    let have = bytes.len().min(SLOTS_LEN);
    both[..have].copy_from_slice(&bytes[..have]);
    let (a, b) = both.split_at(SLOT_LEN);
    let empty = |s: &[u8]| s.iter().all(|&x| x == 0);
    match (decode_slot(a), decode_slot(b)) {
        (Some(x), Some(y)) => Ok(Some(if x.seq >= y.seq { x } else { y })),
        (Some(x), None) | (None, Some(x)) => Ok(Some(x)),
        (None, None) if empty(a) || empty(b) => Ok(None),
        (None, None) => Err(Error::Corrupt {
            path: path.to_path_buf(),
            position: at,
            reason: format!(
                "both slots of {what} (bytes {at}..{}) are damaged (a crash tears at most one); \
                 stop every process using the log, delete the file, and check the log with \
                 `riffle log repair --dry-run`",
                at + SLOTS_LEN as u64
            ),
        }),
    }
}

/// Reads the slots at byte `at` of `file` (see [`decode`]).
pub(crate) fn read(
    file: &mut dyn StorageFile,
    path: &Path,
    at: u64,
    what: &str,
) -> Result<Option<Slotted>> {
    let len = file.refresh_len().at(path)?;
    let have = usize::try_from(len.saturating_sub(at))
        .unwrap_or(SLOTS_LEN)
        .min(SLOTS_LEN);
    let mut bytes = [0u8; SLOTS_LEN];
    if have > 0 {
        file.read_exact_at(at, &mut bytes[..have]).at(path)?;
    }
    decode(path, at, what, &bytes)
}

/// Writes `value` after `current` (what [`read`] returned) into the slots at byte `at` of
/// `file`, without an fsync. A file that ends before the slots' end is zero-filled to it first.
pub(crate) fn write(
    file: &mut dyn StorageFile,
    path: &Path,
    at: u64,
    current: Option<Slotted>,
    value: u64,
) -> Result<()> {
    let len = file.refresh_len().at(path)?;
    let end = at + SLOTS_LEN as u64;
    if len < end {
        // Both slots exist from the first write on (zeros: empty).
        let fill = vec![0u8; usize::try_from(end - len).unwrap_or(0)];
        file.write_at(len, &fill).at(path)?;
    }
    let seq = current.map_or(0, |c| c.seq.wrapping_add(1));
    let slot_at = at + (seq % 2) * SLOT_LEN as u64;
    file.write_at(slot_at, &encode_slot(Slotted { value, seq }))
        .at(path)
}

/// The value in the slots at byte `at` of the file `path` (0: none written, or no such file),
/// read without keeping the file open (on open, and by `riffle log repair`).
pub(crate) fn read_file(storage: &dyn Storage, path: &Path, at: u64, what: &str) -> Result<u64> {
    let Some(mut file) = storage.open_existing(path, false).at(path)? else {
        return Ok(0);
    };
    Ok(read(&mut *file, path, at, what)?.map_or(0, |s| s.value))
}

/// Sets the value in the slots at byte `at` of the existing file `path` to `value`, lower or
/// higher (`riffle log repair`, after cutting what they vouched for). A missing file, or a
/// value of 0 where none was written, is left alone.
pub(crate) fn set_file(
    storage: &dyn Storage,
    path: &Path,
    at: u64,
    what: &str,
    value: u64,
) -> Result<()> {
    let Some(mut file) = storage.open_existing(path, true).at(path)? else {
        return Ok(());
    };
    let current = read(&mut *file, path, at, what)?;
    if current.is_none() && value == 0 {
        return Ok(());
    }
    write(&mut *file, path, at, current, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(bytes: &mut [u8], current: Option<Slotted>, value: u64) -> usize {
        let seq = current.map_or(0, |c| c.seq.wrapping_add(1));
        let at = (seq % 2) as usize * SLOT_LEN;
        bytes[at..at + SLOT_LEN].copy_from_slice(&encode_slot(Slotted { value, seq }));
        at
    }

    fn value(bytes: &[u8]) -> Slotted {
        decode(Path::new("lock"), 16, "x", bytes)
            .expect("decodes")
            .expect("a value")
    }

    #[test]
    fn the_newer_valid_slot_wins_and_a_torn_one_falls_back() {
        let path = Path::new("lock");
        let mut bytes = [0u8; SLOTS_LEN];
        assert_eq!(decode(path, 16, "x", &bytes).expect("decodes"), None);
        let first_at = put(&mut bytes, None, 10);
        let first = value(&bytes);
        assert_eq!(first.value, 10);
        let second_at = put(&mut bytes, Some(first), 25);
        assert_ne!(first_at, second_at);
        assert_eq!(value(&bytes).value, 25);
        // A torn write of the newer slot: the older value stands.
        bytes[second_at + 3] ^= 0xff;
        assert_eq!(value(&bytes).value, 10);
        // Both damaged: an error, never "no value".
        bytes[first_at + 3] ^= 0xff;
        assert!(matches!(
            decode(path, 16, "x", &bytes),
            Err(Error::Corrupt { .. })
        ));
        // Too short: never written (an older file).
        assert_eq!(decode(path, 16, "x", &[0u8; 20]).expect("decodes"), None);
    }
}
