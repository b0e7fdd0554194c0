//! Damage that is not a torn tail is never cut silently: opening or reading the log fails with
//! `Error::Corrupt` naming the file, the byte position and the offsets, and no file changes.
//! Only damage at the end of the active segment with nothing intact after it (a torn write) is
//! truncated, with a warning.

mod common;

use std::path::{Path, PathBuf};

use common::{append, read_all, simple, snapshot};
use proptest::prelude::*;
use riffle_log::{BatchBuilder, Compression, Error, Log, LogOptions, TopicPartition};

/// Small segments (each holds a few batches) and an index entry for every batch.
fn options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(400)
        .with_index_interval_bytes(1)
}

fn partition_dir(dir: &Path) -> PathBuf {
    dir.join("topics/events/0")
}

/// `batches` appends of 2 records each (offsets `2i`, `2i+1`), synced; the segment files in
/// offset order.
fn build(dir: &Path, batches: usize) -> Vec<PathBuf> {
    let log = Log::open(dir, options()).expect("open");
    log.create_topic("events", 1).expect("create");
    let tp = TopicPartition::new("events", 0);
    for i in 0..batches {
        append(&log, &tp, Compression::None, &simple(2, i as i64 * 10));
    }
    log.sync().expect("sync");
    segments(dir)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(partition_dir(dir))
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    segments
}

/// Opening fails with `Error::Corrupt` about `file`, mentioning each of `words`, and changes
/// no file.
fn open_is_corrupt(dir: &Path, file: &Path, words: &[&str]) -> String {
    let before = snapshot(dir);
    let err = Log::open(dir, options()).expect_err("opening a damaged log must fail");
    let Error::Corrupt { path, .. } = &err else {
        panic!("expected Error::Corrupt, got {err}");
    };
    assert_eq!(path, file, "{err}");
    let message = err.to_string();
    for word in words {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    assert_eq!(snapshot(dir), before, "a failed open changed files");
    message
}

fn batch_positions(segment: &Path) -> Vec<u64> {
    let bytes = std::fs::read(segment).expect("read");
    let mut positions = Vec::new();
    let mut pos = 0usize;
    // Kafka's v2 batch: the length (bytes 8..12) counts what follows it.
    while pos + 12 <= bytes.len() {
        positions.push(pos as u64);
        let len = u32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().expect("4 bytes"));
        pos += len as usize + 12;
    }
    positions
}

#[test]
fn a_deleted_middle_segment_is_an_error_naming_the_missing_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    assert!(segs.len() >= 4, "{segs:?}");
    std::fs::remove_file(&segs[1]).expect("delete");
    std::fs::remove_file(segs[1].with_extension("index")).expect("delete index");
    let next = segs[2].file_name().and_then(|n| n.to_str()).expect("name");
    let base1: u64 = segs[1]
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("stem")
        .parse()
        .expect("base");
    let base2: u64 = next.trim_end_matches(".log").parse().expect("base");
    open_is_corrupt(
        dir.path(),
        &segs[0],
        &[next, &format!("offsets {base1}..{base2} are in no segment")],
    );
}

#[test]
fn a_sealed_segment_truncated_mid_batch_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    let positions = batch_positions(&segs[1]);
    let cut = positions[1] + 10;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segs[1])
        .expect("open");
    file.set_len(cut).expect("truncate");
    drop(file);
    let base1: u64 = segs[1]
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("stem")
        .parse()
        .expect("base");
    let message = open_is_corrupt(dir.path(), &segs[1], &["sealed segment"]);
    assert!(
        message.contains(&format!("at byte {}", positions[1])),
        "{message}"
    );
    assert!(
        message.contains(&format!("offset {} expected there", base1 + 2)),
        "{message}"
    );
}

#[test]
fn a_sealed_segment_truncated_at_a_batch_boundary_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    let positions = batch_positions(&segs[1]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segs[1])
        .expect("open");
    file.set_len(positions[1]).expect("truncate");
    drop(file);
    let base1: u64 = segs[1]
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("stem")
        .parse()
        .expect("base");
    open_is_corrupt(
        dir.path(),
        &segs[1],
        &[&format!("offsets {}..", base1 + 2), "lost"],
    );
}

#[test]
fn a_deleted_last_segment_is_an_error_not_a_lower_end_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    let last = segs.last().expect("segments");
    let base: u64 = last
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("stem")
        .parse()
        .expect("base");
    std::fs::remove_file(last).expect("delete");
    std::fs::remove_file(last.with_extension("index")).expect("delete index");
    open_is_corrupt(
        dir.path(),
        &segs[segs.len() - 2],
        &[&format!("offsets from {base} on are missing")],
    );
}

#[test]
fn a_deleted_first_segment_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    std::fs::remove_file(&segs[0]).expect("delete");
    let base1: u64 = segs[1]
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("stem")
        .parse()
        .expect("base");
    open_is_corrupt(
        dir.path(),
        &segs[1],
        &[&format!("offsets 0..{base1} are in no segment")],
    );
}

#[test]
fn a_partition_without_segments_or_directory_is_an_error_not_an_empty_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 2);
    assert_eq!(segs.len(), 1);
    std::fs::remove_file(&segs[0]).expect("delete");
    open_is_corrupt(
        dir.path(),
        &partition_dir(dir.path()),
        &["no segment", "events-0"],
    );
    std::fs::remove_dir_all(partition_dir(dir.path())).expect("delete dir");
    let err = Log::open(dir.path(), options()).expect_err("missing partition directory");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(
        !partition_dir(dir.path()).exists(),
        "the open recreated the directory"
    );
}

#[test]
fn a_flipped_byte_mid_active_segment_followed_by_intact_batches_is_an_error_and_nothing_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    log.create_topic("events", 1).expect("create");
    let tp = TopicPartition::new("events", 0);
    for i in 0..50 {
        append(&log, &tp, Compression::Lz4, &simple(2, i * 10));
    }
    log.sync().expect("sync");
    drop(log);
    let segment = segments(dir.path()).remove(0);
    let positions = batch_positions(&segment);
    let damaged = positions[10];
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[damaged as usize + 70] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write");
    let message = open_is_corrupt(
        dir.path(),
        &segment,
        &[
            &format!("at byte {damaged}"),
            "checksum mismatch",
            "offset 20 expected there",
            &format!("39 batches from byte {}", positions[11]),
            "offsets 22..100",
            "78 records",
        ],
    );
    assert!(message.contains("riffle log repair"), "{message}");
}

#[test]
fn a_batch_at_an_unexpected_offset_is_an_error_at_fetch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    // Swap two equally long batches of a sealed segment: every batch is intact, but the one
    // where offset base+2 is expected holds base+4..base+6.
    let segment = &segs[1];
    let base: u64 = segment
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("stem")
        .parse()
        .expect("base");
    let p = batch_positions(segment);
    let mut bytes = std::fs::read(segment).expect("read");
    let (a, b, c) = (p[1] as usize, p[2] as usize, p[3] as usize);
    assert_eq!(b - a, c - b, "equal batches");
    let second = bytes[a..b].to_vec();
    bytes.copy_within(b..c, a);
    bytes[b..c].copy_from_slice(&second);
    std::fs::write(segment, &bytes).expect("write");
    let log = Log::open(dir.path(), options()).expect("the tail of the segment is intact");
    let tp = TopicPartition::new("events", 0);
    let err = log
        .fetch(&tp, base + 2, 1 << 20)
        .expect_err("unexpected offset");
    let message = err.to_string();
    assert!(matches!(err, Error::Corrupt { .. }), "{message}");
    assert!(
        message.contains(&format!(
            "holds offsets {}..{} where offset {} was expected",
            base + 4,
            base + 6,
            base + 2
        )),
        "{message}"
    );
    let err = log
        .fetch(&tp, base, 1 << 20)
        .expect_err("reading across it");
    assert!(
        err.to_string()
            .contains(&format!("offset {} was expected", base + 2)),
        "{err}"
    );
}

#[test]
fn a_stale_index_entry_is_rebuilt_not_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    let index = segs[1].with_extension("index");
    let mut raw = std::fs::read(&index).expect("read");
    // The second entry's position moves one byte into its batch: still increasing, wrong.
    raw[15] += 1;
    std::fs::write(&index, &raw).expect("write");
    let log = Log::open(dir.path(), options()).expect("open");
    let tp = TopicPartition::new("events", 0);
    let records = read_all(&log, &tp, 0, 1 << 20);
    assert_eq!(records.len(), 40);
}

#[test]
fn an_index_entry_naming_a_later_offset_at_the_segment_start_is_rebuilt_not_an_error() {
    // Found by the offset_index fuzz target: entry (offset 1 → byte 0) passes the format
    // checks, and the batch at byte 0 holds offset 0; a fetch from offset 1 must still work.
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    let index = segs[1].with_extension("index");
    let mut raw = std::fs::read(&index).expect("read");
    // Entries name even relative offsets (2-record batches, one entry per batch): (1, 0) still
    // increases.
    raw[0..4].copy_from_slice(&1u32.to_be_bytes());
    raw[4..8].copy_from_slice(&0u32.to_be_bytes());
    std::fs::write(&index, &raw).expect("write");
    let log = Log::open(dir.path(), options()).expect("open");
    let tp = TopicPartition::new("events", 0);
    assert_eq!(read_all(&log, &tp, 0, 1 << 20).len(), 40);
    let first: u64 = segs[1]
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("segment name")
        .parse()
        .expect("base offset");
    for from in first..first + 5 {
        let records = read_all(&log, &tp, from, 1 << 20);
        assert_eq!(records.len() as u64, 40 - from, "fetch from {from}");
    }
}

#[test]
fn an_index_entry_pointing_past_the_segment_data_is_rebuilt_not_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segs = build(dir.path(), 20);
    let index = segs[1].with_extension("index");
    let size = std::fs::metadata(&segs[1]).expect("meta").len() as u32;
    let mut raw = std::fs::read(&index).expect("read");
    raw[4..8].copy_from_slice(&(size + 100).to_be_bytes());
    std::fs::write(&index, &raw).expect("write");
    let log = Log::open(dir.path(), options()).expect("open");
    let tp = TopicPartition::new("events", 0);
    assert_eq!(read_all(&log, &tp, 0, 1 << 20).len(), 40);
}

/// A journal of three committed transactions; returns its record boundaries.
fn three_transactions(dir: &Path) -> Vec<usize> {
    let log = Log::open(dir, options()).expect("open");
    log.create_topic("in", 1).expect("create");
    log.create_topic("out", 1).expect("create");
    let (input, out) = (TopicPartition::new("in", 0), TopicPartition::new("out", 0));
    let journal = dir.join("txn/journal");
    let mut bounds = vec![0];
    for i in 0..3u64 {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(1, Some(b"k"), Some(format!("value {i}").as_bytes()));
        log.commit_transaction(
            "app",
            &mut [(out.clone(), &mut b)],
            &[(input.clone(), i + 1)],
        )
        .expect("transaction");
        bounds.push(std::fs::metadata(&journal).expect("meta").len() as usize);
    }
    bounds
}

#[test]
fn a_flipped_byte_mid_journal_followed_by_intact_records_is_an_error_and_the_journal_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bounds = three_transactions(dir.path());
    let journal = dir.path().join("txn/journal");
    let mut bytes = std::fs::read(&journal).expect("read");
    bytes[bounds[1] + 20] ^= 0x01;
    std::fs::write(&journal, &bytes).expect("write");
    let message = open_is_corrupt(
        dir.path(),
        &journal,
        &[
            &format!("at byte {}", bounds[1]),
            &format!("1 intact records from byte {}", bounds[2]),
            "riffle log repair",
        ],
    );
    assert!(!message.contains("never committed"), "{message}");
}

#[test]
fn a_torn_journal_tail_is_dropped_and_earlier_transactions_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bounds = three_transactions(dir.path());
    let journal = dir.path().join("txn/journal");
    // What a writer that died mid-append leaves: part of a record past the committed ones.
    let mut bytes = std::fs::read(&journal).expect("read");
    let partial = bytes[bounds[2]..bounds[3] - 5].to_vec();
    bytes.extend_from_slice(&partial);
    std::fs::write(&journal, &bytes).expect("write");
    let log = Log::open(dir.path(), options()).expect("open");
    let input = TopicPartition::new("in", 0);
    // The torn record's transaction never committed; the three before it replay.
    assert_eq!(
        log.committed_offset("app", &input).expect("offset"),
        Some(3)
    );
}

#[test]
fn a_committed_journal_record_cut_short_is_an_error_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bounds = three_transactions(dir.path());
    let journal = dir.path().join("txn/journal");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .expect("open");
    file.set_len(bounds[3] as u64 - 5).expect("cut");
    drop(file);
    let message = open_is_corrupt(
        dir.path(),
        &journal,
        &[
            &format!("holds {} bytes", bounds[3] - 5),
            &format!("its first {} bytes were committed", bounds[3]),
            "riffle log repair",
        ],
    );
    assert!(!message.contains("never committed"), "{message}");
}

#[test]
fn a_flipped_byte_in_the_last_committed_journal_record_is_an_error_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bounds = three_transactions(dir.path());
    let journal = dir.path().join("txn/journal");
    let mut bytes = std::fs::read(&journal).expect("read");
    bytes[bounds[3] - 20] ^= 0x01;
    std::fs::write(&journal, &bytes).expect("write");
    let message = open_is_corrupt(
        dir.path(),
        &journal,
        &[
            &format!("record at byte {} does not check out", bounds[2]),
            &format!("below byte {} was committed", bounds[3]),
            "not a torn write",
            "riffle log repair",
        ],
    );
    assert!(!message.contains("never committed"), "{message}");
}

#[test]
fn a_deleted_or_emptied_journal_with_committed_transactions_is_an_error() {
    for how in ["delete", "empty"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let bounds = three_transactions(dir.path());
        let journal = dir.path().join("txn/journal");
        if how == "delete" {
            std::fs::remove_file(&journal).expect("rm");
        } else {
            std::fs::write(&journal, b"").expect("truncate");
        }
        open_is_corrupt(
            dir.path(),
            &journal,
            &[
                "is missing or empty",
                &format!("its first {} bytes were committed", bounds[3]),
                "riffle log repair",
            ],
        );
    }
}

/// A log of several segments, damaged once (a flipped byte or a truncation) in one file.
#[derive(Debug, Clone)]
enum Damage {
    Flip { file: usize, at: usize, bit: u8 },
    Truncate { file: usize, at: usize },
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever single damage a segment suffers, reading the whole partition either fails with
    /// `Error::Corrupt`, or returns exactly the records appended — minus, only when the damage
    /// is in the active segment's last batches with nothing intact after it, that torn tail.
    #[test]
    fn damage_is_reported_or_is_exactly_a_torn_tail(
        batches in 4usize..25,
        damage in prop_oneof![
            (0usize..8, any::<usize>(), 0u8..8).prop_map(|(file, at, bit)| Damage::Flip { file, at, bit }),
            (0usize..8, any::<usize>()).prop_map(|(file, at)| Damage::Truncate { file, at }),
        ],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let segs = build(dir.path(), batches);
        let model: Vec<u64> = (0..batches as u64 * 2).collect();
        let (file, active) = match &damage {
            Damage::Flip { file, .. } | Damage::Truncate { file, .. } => {
                let i = file % segs.len();
                (segs[i].clone(), i == segs.len() - 1)
            }
        };
        let mut bytes = std::fs::read(&file).expect("read");
        if bytes.is_empty() {
            return Ok(());
        }
        let positions = batch_positions(&file);
        let damaged_at = match damage {
            Damage::Flip { at, bit, .. } => {
                let at = at % bytes.len();
                bytes[at] ^= 1 << bit;
                at
            }
            Damage::Truncate { at, .. } => {
                let at = at % bytes.len();
                bytes.truncate(at);
                at
            }
        };
        std::fs::write(&file, &bytes).expect("write");
        let result = Log::open(dir.path(), options()).and_then(|log| {
            let tp = TopicPartition::new("events", 0);
            let mut offsets = Vec::new();
            let mut next = 0;
            loop {
                let fetched = log.fetch(&tp, next, 1 << 20)?;
                if fetched.is_empty() {
                    return Ok(offsets);
                }
                for batch in fetched {
                    for r in batch.records() {
                        let r = r?;
                        if r.offset() >= next {
                            next = r.offset() + 1;
                            offsets.push(r.offset());
                        }
                    }
                }
            }
        });
        match result {
            Err(Error::Corrupt { .. } | Error::Record(riffle_log::RecordError::CorruptRecord { .. })) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
            Ok(offsets) if offsets == model => {}
            Ok(offsets) => {
                // Only a torn tail may be lost: in the active segment, from the batch holding
                // the damaged byte to the end, which must be the last batch (a flip) or any
                // batch (a truncation: nothing follows it).
                prop_assert!(active, "records lost from a sealed segment: {} of {}", offsets.len(), model.len());
                prop_assert_eq!(&offsets[..], &model[..offsets.len()]);
                let batch = positions.iter().rposition(|&p| p as usize <= damaged_at).expect("a batch");
                if matches!(damage, Damage::Flip { .. }) {
                    prop_assert_eq!(batch, positions.len() - 1, "a flip cut more than the last batch");
                }
                let base: u64 = file.file_stem().and_then(|n| n.to_str()).expect("stem").parse().expect("base");
                prop_assert_eq!(offsets.len() as u64, base + 2 * batch as u64);
            }
        }
    }
}
