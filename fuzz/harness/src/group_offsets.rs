//! Target `group_offsets`: the group-offsets file (`groups/<group>.offsets`, FORMAT.md).
//!
//! Input: one mode byte, then the rest. Mode 0: the rest is a file, as is. Mode 1: the same with
//! its trailing CRC32C fixed, so mutations reach the entry parser. Mode 2: the rest describes
//! offsets (the model), which are encoded and must decode to exactly themselves.
//!
//! Checked: no panic; a file that does not decode is `Error::Corrupt`; one that decodes is
//! exactly what the writer writes for the offsets read (entries sorted and unique, nothing
//! else), so a parse that succeeds re-serializes to the same bytes, which parse to the same
//! offsets.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use riffle_log::Error;
use riffle_log::TopicPartition;
use riffle_log::fuzzing::{decode_group_offsets, encode_group_offsets};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => check_file(rest),
        1 => {
            let mut file = rest.to_vec();
            if file.len() >= 4 {
                let n = file.len() - 4;
                let crc = crc32c::crc32c(&file[..n]);
                file[n..].copy_from_slice(&crc.to_be_bytes());
            }
            check_file(&file);
        }
        _ => {
            let mut u = Unstructured::new(rest);
            let Ok(entries) = Vec::<(String, u32, u64)>::arbitrary(&mut u) else {
                return;
            };
            let offsets: BTreeMap<TopicPartition, u64> = entries
                .into_iter()
                .filter(|(t, _, _)| t.len() <= 249)
                .map(|(t, p, o)| (TopicPartition::new(t, p), o))
                .collect();
            let bytes = encode_group_offsets(&offsets);
            let back = decode_group_offsets(&bytes).expect("what the writer writes decodes");
            assert!(back == offsets, "offsets round trip");
        }
    }
}

fn check_file(file: &[u8]) {
    match decode_group_offsets(file) {
        Ok(offsets) => {
            let again = encode_group_offsets(&offsets);
            assert!(
                again == file,
                "a file that decodes must be exactly what the writer writes for its offsets"
            );
            let back = decode_group_offsets(&again).expect("re-encoded offsets decode");
            assert!(back == offsets, "re-encoded offsets decode to the same");
        }
        Err(e) => assert!(
            matches!(e, Error::Corrupt { .. }),
            "wrong error kind: {e:?}"
        ),
    }
}
