//! A torn or corrupt tail of the active segment is cut on open: earlier batches stay intact and
//! appends continue at the right offset.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{append, copy_dir, read_all, simple};
use riffle_log::{Compression, Log, LogOptions, TopicPartition};

fn segment(dir: &Path) -> PathBuf {
    dir.join("topics/events/0/00000000000000000000.log")
}

/// Three batches (offsets 0–2, 3–5, 6–8), the first two fsynced (the recovery point is 6) and
/// the last one not (what a crash may tear); returns the log file's length before and after
/// the last batch.
fn three_batches(dir: &Path) -> (u64, u64) {
    three_batches_synced(dir, false)
}

/// [`three_batches`], the last batch fsynced too if `all_synced` (the recovery point is 9).
fn three_batches_synced(dir: &Path, all_synced: bool) -> (u64, u64) {
    let log = Log::open(dir, LogOptions::default()).expect("open");
    log.create_topic("events", 1).expect("create");
    let tp = TopicPartition::new("events", 0);
    append(&log, &tp, Compression::None, &simple(3, 0));
    append(&log, &tp, Compression::Lz4, &simple(3, 10));
    log.sync().expect("sync");
    let before = std::fs::metadata(segment(dir)).expect("meta").len();
    append(&log, &tp, Compression::Zstd, &simple(3, 20));
    if all_synced {
        log.sync().expect("sync");
    }
    (before, std::fs::metadata(segment(dir)).expect("meta").len())
}

fn reopen_and_check(dir: &Path, end: u64, file_len: u64) {
    let log = Log::open(dir, LogOptions::default()).expect("reopen");
    let tp = TopicPartition::new("events", 0);
    assert_eq!(log.end_offset(&tp).expect("end"), end);
    assert_eq!(
        std::fs::metadata(segment(dir)).expect("meta").len(),
        file_len
    );
    let records = read_all(&log, &tp, 0, 1 << 20);
    assert_eq!(
        records.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..end).collect::<Vec<_>>()
    );
    assert_eq!(records.first().map(|r| &r.1), simple(1, 0).first());
    // Appends continue right after the last intact batch, and survive another reopen.
    assert_eq!(append(&log, &tp, Compression::None, &simple(2, 99)), end);
    log.sync().expect("sync");
    drop(log);
    let log = Log::open(dir, LogOptions::default()).expect("reopen again");
    assert_eq!(log.end_offset(&tp).expect("end"), end + 2);
    assert_eq!(read_all(&log, &tp, end, 7).len(), 2);
}

#[test]
fn garbage_appended_after_the_last_batch_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, full) = three_batches(dir.path());
    let mut f = OpenOptions::new()
        .append(true)
        .open(segment(dir.path()))
        .expect("open");
    f.write_all(&[0xab; 100]).expect("write garbage");
    drop(f);
    reopen_and_check(dir.path(), 9, full);
}

#[test]
fn zeroes_appended_after_the_last_batch_are_cut() {
    // What a crash after a file-size update but before the data write typically leaves.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, full) = three_batches(dir.path());
    let f = OpenOptions::new()
        .write(true)
        .open(segment(dir.path()))
        .expect("open");
    f.set_len(full + 4096).expect("extend");
    drop(f);
    reopen_and_check(dir.path(), 9, full);
}

#[test]
fn a_last_batch_torn_in_the_middle_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (before, full) = three_batches(dir.path());
    for cut in [before + 1, before + 30, (before + full) / 2, full - 1] {
        let copy = tempfile::tempdir().expect("tempdir");
        copy_dir(dir.path(), copy.path());
        let f = OpenOptions::new()
            .write(true)
            .open(segment(copy.path()))
            .expect("open");
        f.set_len(cut).expect("truncate");
        drop(f);
        reopen_and_check(copy.path(), 6, before);
    }
}

#[test]
fn a_flipped_byte_in_the_last_batch_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (before, full) = three_batches(dir.path());
    // The length (byte 8), the leader epoch (12, always 0 here), the magic (16), the CRC
    // (17), the attributes and on (21.., under the CRC).
    for at in [
        before + 9,
        before + 12,
        before + 16,
        before + 18,
        before + 40,
        full - 1,
    ] {
        let copy = tempfile::tempdir().expect("tempdir");
        copy_dir(dir.path(), copy.path());
        let path = segment(copy.path());
        let mut bytes = std::fs::read(&path).expect("read");
        if let Some(b) = bytes.get_mut(at as usize) {
            *b ^= 0x10;
        }
        std::fs::write(&path, bytes).expect("write");
        reopen_and_check(copy.path(), 6, before);
    }
}

/// A last batch that was fsynced (the recovery point is past it) and then damaged — a flipped
/// byte, or the file cut short — is no torn write: every open, read-only ones included, fails
/// naming the file, the byte, the offsets and the recovery point, and nothing is cut; `riffle
/// log repair` cuts it and reports the records of the damaged batch by its header.
#[test]
fn a_damaged_last_batch_that_was_fsynced_is_an_error_not_a_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (before, full) = three_batches_synced(dir.path(), true);
    for damage in ["flip", "cut"] {
        let copy = tempfile::tempdir().expect("tempdir");
        copy_dir(dir.path(), copy.path());
        let path = segment(copy.path());
        let mut bytes = std::fs::read(&path).expect("read");
        if damage == "flip" {
            bytes[full as usize - 10] ^= 0x10;
        } else {
            bytes.truncate(full as usize - 10);
        }
        std::fs::write(&path, &bytes).expect("write");
        for options in [
            LogOptions::default(),
            LogOptions::default().with_read_only(true),
        ] {
            let err = Log::open(copy.path(), options).expect_err("fsynced data was damaged");
            let text = err.to_string();
            for words in [
                "00000000000000000000.log".to_owned(),
                format!("byte {before}"),
                "end at offset 6".to_owned(),
                "below offset 9 was fsynced".to_owned(),
                "not a torn write".to_owned(),
                "riffle log repair".to_owned(),
            ] {
                assert!(text.contains(&words), "{damage}: {text:?} lacks {words:?}");
            }
            assert_eq!(std::fs::read(&path).expect("read"), bytes, "nothing is cut");
        }
        // The explicit way out reports the batch it cuts, and the recovery point it lowers.
        let dry = riffle_log::repair(
            copy.path(),
            &riffle_log::RepairOptions::new().with_dry_run(true),
        )
        .expect("dry run");
        let cut = dry
            .cuts
            .iter()
            .find(|c| c.file == path)
            .expect("the segment is cut");
        assert_eq!(cut.offsets, Some((6, Some(9))), "{cut}");
        assert_eq!(cut.damaged_records, Some(3), "{cut}");
        assert!(
            dry.cuts.iter().any(|c| matches!(
                c.action,
                riffle_log::CutAction::MoveRecoveryPoint { from: 9, to: 6 }
            )),
            "{:?}",
            dry.cuts
        );
        riffle_log::repair(copy.path(), &riffle_log::RepairOptions::new()).expect("repair");
        let log = Log::open(copy.path(), LogOptions::default()).expect("repaired");
        let tp = TopicPartition::new("events", 0);
        assert_eq!(read_all(&log, &tp, 0, 1 << 20).len(), 6);
    }
}

/// A partition cut exactly at a batch boundary below its recovery point lost fsynced batches:
/// an error, where it used to look like appends that were never made durable.
#[test]
fn an_active_segment_cut_at_a_batch_boundary_below_the_recovery_point_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (before, _) = three_batches_synced(dir.path(), true);
    let f = OpenOptions::new()
        .write(true)
        .open(segment(dir.path()))
        .expect("open");
    f.set_len(before).expect("cut");
    drop(f);
    let err = Log::open(dir.path(), LogOptions::default()).expect_err("fsynced batch gone");
    let text = err.to_string();
    assert!(
        text.contains("the segment ends there") && text.contains("offsets 6..9"),
        "{text}"
    );
}

/// An active segment emptied (cut to 0 bytes) below the recovery point lost fsynced batches too.
/// Its end offset is its own base, so the file named by the end offset is the segment itself,
/// not a segment another process rolled since: an error, read-only or not. Found by the fuzz
/// target `recovery_point`.
#[test]
fn an_active_segment_emptied_below_the_recovery_point_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches_synced(dir.path(), true);
    std::fs::write(segment(dir.path()), b"").expect("empty");
    for read_only in [true, false] {
        let options = LogOptions::default().with_read_only(read_only);
        let err = Log::open(dir.path(), options).expect_err("fsynced batches gone");
        let text = err.to_string();
        assert!(
            text.contains("the segment ends there") && text.contains("offsets 0..9"),
            "{text}"
        );
    }
}

/// Kafka's CRC does not cover the base offset: a flipped bit there leaves a whole,
/// checksum-valid batch at the wrong offset. That is no torn write (a write cut short never
/// checks out), so it is corruption, named, and nothing is cut.
#[test]
fn a_flipped_bit_in_the_last_batch_s_base_offset_is_an_error_not_a_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (before, full) = three_batches(dir.path());
    for at in [before, before + 7] {
        let copy = tempfile::tempdir().expect("tempdir");
        copy_dir(dir.path(), copy.path());
        let path = segment(copy.path());
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[at as usize] ^= 0x10;
        std::fs::write(&path, bytes).expect("write");
        let err = Log::open(copy.path(), LogOptions::default()).expect_err("corrupt");
        let text = err.to_string();
        assert!(
            text.contains(&format!("at byte {before}")) && text.contains("offset 6 expected"),
            "{text}"
        );
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), full);
    }
}

#[test]
fn a_corrupt_index_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches(dir.path());
    let index = segment(dir.path()).with_extension("index");
    std::fs::write(&index, [0xff; 13]).expect("write");
    let log = Log::open(dir.path(), LogOptions::default()).expect("reopen");
    let tp = TopicPartition::new("events", 0);
    assert_eq!(read_all(&log, &tp, 4, 1).len(), 5);
    assert_eq!(std::fs::metadata(&index).expect("meta").len() % 8, 0);
}

#[test]
fn damage_inside_a_sealed_segment_is_an_error_naming_the_file_at_fetch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = TopicPartition::new("events", 0);
    {
        let options = LogOptions::default().with_segment_bytes(300);
        let log = Log::open(dir.path(), options).expect("open");
        log.create_topic("events", 1).expect("create");
        for i in 0..10 {
            append(&log, &tp, Compression::None, &simple(2, i));
        }
    }
    let first = segment(dir.path());
    let mut bytes = std::fs::read(&first).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&first, bytes).expect("write");
    let log = Log::open(dir.path(), LogOptions::default().with_segment_bytes(300)).expect("reopen");
    assert_eq!(
        log.end_offset(&tp).expect("end"),
        20,
        "sealed segments are not truncated"
    );
    let err = log.fetch(&tp, 0, 1 << 20).expect_err("corrupt");
    assert!(
        err.to_string().contains("00000000000000000000.log"),
        "{err}"
    );
    // Data after the damaged batch is still readable.
    let later = log.fetch(&tp, 19, 1 << 20).expect("fetch after the damage");
    assert_eq!(later.last().map(|b| b.last_offset()), Some(19));
}
