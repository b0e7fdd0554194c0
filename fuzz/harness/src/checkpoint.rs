//! Target `checkpoint`: Kafka Streams' checkpoint file (`state-dir/src/checkpoint.rs`).
//!
//! Input: one mode byte, then the rest. Mode 0: the rest is a file, read as
//! `Checkpoint::read` reads one (UTF-8, then `Checkpoint::parse`). Mode 1: the rest describes a
//! checkpoint (the model), which is rendered with `to_text` and must parse to exactly itself.
//!
//! Checked: no panic; a file that does not parse is `Error::CorruptCheckpoint`; one that parses
//! renders (`to_text`) to a file that parses to the same checkpoint, and renders the same again.

use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use riffle_state_dir::{Checkpoint, Error, TopicPartition};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let path = Path::new("0_1/.checkpoint");
    if mode % 2 == 0 {
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        match Checkpoint::parse(text, path) {
            Ok(cp) => {
                let rendered = cp.to_text();
                let back =
                    Checkpoint::parse(&rendered, path).expect("a rendered checkpoint parses");
                assert_eq!(back, cp, "parse -> to_text -> parse");
                assert_eq!(back.to_text(), rendered, "rendering is stable");
                let sum = cp.iter().fold(0i64, |s, (_, o)| s.saturating_add(o as i64));
                assert_eq!(cp.offset_sum(), sum);
            }
            Err(e) => assert!(
                matches!(e, Error::CorruptCheckpoint { .. }),
                "wrong error kind: {e:?}"
            ),
        }
        return;
    }
    let mut u = Unstructured::new(rest);
    let Ok(entries) = Vec::<(String, u32, u64)>::arbitrary(&mut u) else {
        return;
    };
    // What a checkpoint can hold: Kafka topic names, offsets that fit a signed 64-bit integer.
    let cp: Checkpoint = entries
        .into_iter()
        .filter(|(t, _, _)| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
        .map(|(t, p, o)| (TopicPartition::new(t, p), o >> 1))
        .collect();
    let back = Checkpoint::parse(&cp.to_text(), path).expect("a rendered checkpoint parses");
    assert_eq!(back, cp, "model -> to_text -> parse");
}
