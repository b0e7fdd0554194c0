//! The bytes of a group's files (log/FORMAT.md, *Groups of processes*): a member's record and
//! the group's state record, each with a CRC-32C.

use std::fs::File;
use std::path::Path;

use crate::error::{IoContext, Result};

const MEMBER_RECORD_LEN: usize = 20;
const STATE_MAGIC: &[u8; 4] = b"RFGS";
const STATE_VERSION: u8 = 1;
/// Magic, version, generation, length.
const STATE_HEADER_LEN: usize = 4 + 1 + 8 + 4;
/// Where the generation ends: a step reads only this far when the record did not change.
pub(super) const STATE_GENERATION_END: usize = 4 + 1 + 8;

/// The generation of a state file's header; `None` if the header is not one.
pub(super) fn header_generation(header: &[u8; STATE_GENERATION_END]) -> Option<u64> {
    if header[..4] != *STATE_MAGIC || header[4] != STATE_VERSION {
        return None;
    }
    Some(u64::from_be_bytes(header[5..13].try_into().ok()?))
}

/// What a member's file says: its last heartbeat, its session timeout, its process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberRecord {
    /// Wall-clock time of its last heartbeat, in ms since the epoch.
    pub heartbeat_ms: i64,
    /// How long it may stay silent before a step declares it gone.
    pub session_timeout_ms: u32,
    /// Its operating-system process id.
    pub pid: u32,
}

impl MemberRecord {
    /// This process's heartbeat now, for a member with `session_timeout_ms`.
    pub(super) fn now(session_timeout_ms: u32) -> MemberRecord {
        MemberRecord {
            heartbeat_ms: super::now_ms(),
            session_timeout_ms,
            pid: std::process::id(),
        }
    }

    pub(super) fn encode(&self) -> [u8; MEMBER_RECORD_LEN] {
        let mut out = [0u8; MEMBER_RECORD_LEN];
        out[0..8].copy_from_slice(&self.heartbeat_ms.to_be_bytes());
        out[8..12].copy_from_slice(&self.session_timeout_ms.to_be_bytes());
        out[12..16].copy_from_slice(&self.pid.to_be_bytes());
        let crc = crc32c::crc32c(&out[..16]);
        out[16..20].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a record; `None` if it is short or its checksum fails (a member that crashed
    /// mid-write, or a file just created).
    pub(super) fn decode(bytes: &[u8]) -> Option<MemberRecord> {
        let bytes: &[u8; MEMBER_RECORD_LEN] = bytes.get(..MEMBER_RECORD_LEN)?.try_into().ok()?;
        let (body, crc) = bytes.split_at(16);
        if crc32c::crc32c(body).to_be_bytes() != *crc {
            return None;
        }
        let (hb, rest) = body.split_at(8);
        let (timeout, pid) = rest.split_at(4);
        Some(MemberRecord {
            heartbeat_ms: i64::from_be_bytes(hb.try_into().ok()?),
            session_timeout_ms: u32::from_be_bytes(timeout.try_into().ok()?),
            pid: u32::from_be_bytes(pid.try_into().ok()?),
        })
    }

    /// Reads a member's file.
    pub(super) fn read(file: &File, path: &Path) -> Result<Option<MemberRecord>> {
        let mut buf = [0u8; MEMBER_RECORD_LEN];
        match read_at(file, &mut buf) {
            Ok(()) => Ok(MemberRecord::decode(&buf)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e).at(path),
        }
    }
}

#[cfg(unix)]
pub(super) fn read_at(file: &File, buf: &mut [u8]) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, 0)
}

#[cfg(not(unix))]
pub(super) fn read_at(file: &File, buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(0))?;
    file.read_exact(buf)
}

/// The state file: `RFGS`, version 1, generation (u64), length (u32), the record, CRC-32C of
/// everything before it (u32), big-endian.
pub(super) fn encode_state(generation: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(STATE_HEADER_LEN + data.len() + 4);
    out.extend_from_slice(STATE_MAGIC);
    out.push(STATE_VERSION);
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Decodes the state file: its generation and record, or the byte position and reason of the
/// damage.
pub(super) fn decode_state(bytes: &[u8]) -> Result<(u64, Vec<u8>), (u64, String)> {
    if bytes.get(..4) != Some(STATE_MAGIC.as_slice()) {
        return Err((0, "not a group state record (no RFGS magic)".into()));
    }
    if bytes.get(4) != Some(&STATE_VERSION) {
        return Err((4, format!("unknown group state version {:?}", bytes.get(4))));
    }
    let field = |at: usize, len: usize| {
        bytes
            .get(at..at + len)
            .ok_or((at as u64, "cut short".to_owned()))
    };
    let generation = u64::from_be_bytes(
        field(5, 8)?
            .try_into()
            .map_err(|_| (5u64, "cut short".to_owned()))?,
    );
    let len = u32::from_be_bytes(
        field(13, 4)?
            .try_into()
            .map_err(|_| (13u64, "cut short".to_owned()))?,
    ) as usize;
    let end = STATE_HEADER_LEN + len;
    let data = field(STATE_HEADER_LEN, len)?;
    let crc = field(end, 4)?;
    if bytes.len() != end + 4 {
        return Err((
            end as u64 + 4,
            format!("{} bytes after the record", bytes.len() - end - 4),
        ));
    }
    let body = bytes.get(..end).ok_or((0, "cut short".to_owned()))?;
    if crc32c::crc32c(body).to_be_bytes() != *crc {
        return Err((end as u64, "checksum mismatch".into()));
    }
    Ok((generation, data.to_vec()))
}
