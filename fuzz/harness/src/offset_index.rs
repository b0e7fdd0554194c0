//! Target `offset_index`: valid segments (random records, each codec, small segments and a
//! dense index) whose `.index` files are then damaged at random — replaced, entries rewritten,
//! cut, extended, bits flipped.
//!
//! Whatever the index says, an open leaves the `.log` files alone and either fails with a
//! corruption error (the same on a second try) or succeeds, and then a fetch from any offset (all
//! of them, or 64 spread over a longer log) returns exactly the model's records from that offset
//! on — an index entry is never trusted to point at the batch it names — and a second open
//! changes no file.

use arbitrary::{Arbitrary, Unstructured};
use riffle_log::fuzzing::MemDir;

use crate::model::Rec;
use crate::{assert_data_error, codec, small_options, tp};

#[derive(Arbitrary, Debug)]
enum Edit {
    Replace { seg: u8, bytes: Vec<u8> },
    SetEntry { seg: u8, at: u8, rel: u32, pos: u32 },
    Push { seg: u8, rel: u32, pos: u32 },
    Truncate { seg: u8, len: u16 },
    Flip { seg: u8, at: u16, bit: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    segment_bytes: u16,
    index_interval: u8,
    max_bytes: u16,
    appends: Vec<(u8, Vec<Rec>)>,
    edits: Vec<Edit>,
}

const DIR: &str = "topics/t/0";

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let options = small_options(input.segment_bytes % 4096, u16::from(input.index_interval));
    let dir = MemDir::new();
    let log = dir.open(options.clone()).expect("open an empty log");
    log.create_topic(crate::TOPIC, 1).expect("create topic");
    let tp = tp(0);
    let mut model: Vec<Rec> = Vec::new();
    for (sel, records) in input.appends.iter().take(32) {
        let mut b = crate::builder(codec(*sel));
        for r in records {
            r.push(&mut b);
        }
        log.append(&tp, &mut b).expect("append");
        crate::give_back(b);
        model.extend(records.iter().cloned());
    }
    drop(log);
    let indexes: Vec<String> = dir
        .list(DIR)
        .into_iter()
        .filter(|n| n.ends_with(".index"))
        .collect();
    for edit in input.edits.iter().take(16) {
        apply(&dir, &indexes, edit);
    }
    let logs = |d: &MemDir| -> Vec<(String, Vec<u8>)> {
        d.snapshot()
            .into_iter()
            .filter(|(p, _)| p.ends_with(".log"))
            .collect()
    };
    let data_before = logs(&dir);
    let opened = dir.open(options.clone());
    assert!(
        logs(&dir) == data_before,
        "an open changed segment data over a damaged index"
    );
    let log = match opened {
        Ok(log) => log,
        Err(e) => {
            // Where the index holds more than derived data (a sealed segment's seal), damage
            // to it may be reported; never as anything but corruption, and the same twice.
            assert_data_error(&e, "open over a damaged index");
            let again = dir.open(options).expect_err("a second open fails too");
            assert_eq!(e.to_string(), again.to_string(), "two opens disagree");
            return;
        }
    };
    let max_bytes = usize::from(input.max_bytes);
    let end = model.len() as u64;
    assert_eq!(log.end_offset(&tp).expect("end"), end);
    // Every offset of a short log; 64 spread over a longer one.
    let step = end.div_ceil(64).max(1);
    for from in (0..end).step_by(step as usize) {
        let batches = log
            .fetch(&tp, from, max_bytes)
            .expect("fetch of intact data");
        let first = batches
            .first()
            .expect("a fetch below the end returns a batch");
        assert!(
            first.base_offset() <= from && from <= first.last_offset(),
            "fetch at {from} returned a batch holding {}..={}",
            first.base_offset(),
            first.last_offset()
        );
        let mut next = first.base_offset();
        for b in &batches {
            assert_eq!(b.base_offset(), next, "batches of one fetch are contiguous");
            for r in b.records() {
                let r = r.expect("records of intact data decode");
                let want = &model[r.offset() as usize];
                assert_eq!(r.offset(), next);
                assert!(
                    r.timestamp() == want.timestamp
                        && r.key().map(|k| &k[..]) == want.key.as_deref()
                        && r.value().map(|v| &v[..]) == want.value.as_deref(),
                    "record {} differs from the model",
                    r.offset()
                );
                next += 1;
            }
        }
    }
    drop(log);
    let before = dir.snapshot();
    let _log = dir.open(options).expect("reopen");
    assert!(dir.snapshot() == before, "a second open changed the files");
}

fn apply(dir: &MemDir, indexes: &[String], edit: &Edit) {
    let (Edit::Replace { seg, .. }
    | Edit::SetEntry { seg, .. }
    | Edit::Push { seg, .. }
    | Edit::Truncate { seg, .. }
    | Edit::Flip { seg, .. }) = edit;
    if indexes.is_empty() {
        return;
    }
    let name = &indexes[usize::from(*seg) % indexes.len()];
    let path = format!("{DIR}/{name}");
    let mut v = dir.read(&path).unwrap_or_default();
    match edit {
        Edit::Replace { bytes, .. } => v.clone_from(bytes),
        Edit::SetEntry { at, rel, pos, .. } => {
            let n = v.len() / 8;
            if n > 0 {
                let i = usize::from(*at) % n * 8;
                v[i..i + 4].copy_from_slice(&rel.to_be_bytes());
                v[i + 4..i + 8].copy_from_slice(&pos.to_be_bytes());
            }
        }
        Edit::Push { rel, pos, .. } => {
            v.extend_from_slice(&rel.to_be_bytes());
            v.extend_from_slice(&pos.to_be_bytes());
        }
        Edit::Truncate { len, .. } => v.truncate(usize::from(*len)),
        Edit::Flip { at, bit, .. } => {
            if !v.is_empty() {
                let i = usize::from(*at) % v.len();
                v[i] ^= 1 << (bit % 8);
            }
        }
    }
    dir.write(&path, &v);
}
