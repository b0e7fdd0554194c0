//! Segments roll at `segment_bytes`; fetch reads across segments and seeks with the index.

mod common;

use common::{append, read_all, records, simple};
use riffle_log::{Compression, Log, LogOptions, TopicPartition};

fn segment_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("topics/t/0"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

#[test]
fn segments_roll_and_fetch_reads_across_them_before_and_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions::default()
        .with_segment_bytes(1000)
        .with_index_interval_bytes(150);
    let tp = TopicPartition::new("t", 0);
    let mut expected = Vec::new();
    {
        let log = Log::open(dir.path(), options.clone()).expect("open");
        log.create_topic("t", 1).expect("create");
        for i in 0..60 {
            let codec = [Compression::None, Compression::Lz4, Compression::Zstd][i % 3];
            let recs = simple(1 + i % 4, i as i64 * 10);
            let base = append(&log, &tp, codec, &recs);
            expected.extend(
                recs.into_iter()
                    .enumerate()
                    .map(|(j, r)| (base + j as u64, r)),
            );
        }
        assert_eq!(read_all(&log, &tp, 0, 1), expected);
    }
    let files = segment_files(dir.path());
    assert!(files.len() > 3, "expected several segments, got {files:?}");
    assert_eq!(
        files.first().map(String::as_str),
        Some("00000000000000000000.log")
    );
    let mut index_entries = 0;
    for name in &files {
        let path = dir.path().join("topics/t/0").join(name);
        let len = std::fs::metadata(&path).expect("meta").len();
        assert!(len <= 1000, "{name} has {len} bytes");
        let index = std::fs::metadata(path.with_extension("index"))
            .expect("index")
            .len();
        assert_eq!(index % 8, 0);
        index_entries += index / 8;
    }
    assert!(
        index_entries >= files.len() as u64,
        "a sparse index entry every 150 bytes"
    );
    let log = Log::open(dir.path(), options).expect("reopen");
    let end = expected.len() as u64;
    assert_eq!(log.end_offset(&tp).expect("end"), end);
    // From every offset, with small and large budgets, the records are exactly the model's suffix.
    for from in 0..end {
        for max_bytes in [1, 200, 1 << 20] {
            let got = read_all(&log, &tp, from, max_bytes);
            assert_eq!(
                got.as_slice(),
                &expected[from as usize..],
                "from {from}, max {max_bytes}"
            );
        }
        // The first batch holds `from`: the index seek never starts after it.
        let first = log.fetch(&tp, from, 1).expect("fetch");
        let batch = first.first().expect("one batch at least");
        assert!(batch.base_offset() <= from && from <= batch.last_offset());
        assert_eq!(records(batch).len() as u32, batch.meta().record_count);
    }
    // A large budget crosses segment boundaries in one fetch.
    let all = log.fetch(&tp, 0, 1 << 20).expect("fetch");
    assert_eq!(
        all.iter()
            .map(|b| b.meta().record_count as usize)
            .sum::<usize>(),
        expected.len()
    );
}

#[test]
fn a_batch_larger_than_a_segment_gets_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default().with_segment_bytes(100)).expect("open");
    log.create_topic("t", 1).expect("create");
    let tp = TopicPartition::new("t", 0);
    let big = vec![(1, None, Some(vec![7u8; 500]))];
    assert_eq!(append(&log, &tp, Compression::None, &big), 0);
    assert_eq!(append(&log, &tp, Compression::None, &big), 1);
    assert_eq!(append(&log, &tp, Compression::None, &simple(1, 0)), 2);
    assert_eq!(segment_files(dir.path()).len(), 3);
    assert_eq!(read_all(&log, &tp, 0, 10).len(), 3);
}

/// A sealed segment's index ends with its seal, `(end - base, size)`, which has no checksum. A
/// seal damaged to say the segment ended later, while the segment's intact data runs exactly to
/// the next segment's base, is a damaged index (rebuilt), not lost records. Found by
/// tests/random_damage_is_identical_or_named.rs.
#[test]
fn a_damaged_seal_is_a_damaged_index_when_the_next_segment_continues() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions::default().with_segment_bytes(300);
    let tp = TopicPartition::new("t", 0);
    let expected = {
        let log = Log::open(dir.path(), options.clone()).expect("open");
        log.create_topic("t", 1).expect("create");
        for i in 0..12 {
            append(&log, &tp, Compression::None, &simple(2, i * 10));
        }
        log.sync().expect("sync");
        read_all(&log, &tp, 0, 1 << 20)
    };
    let first = dir
        .path()
        .join("topics/t/0")
        .join(&segment_files(dir.path())[0]);
    let index = first.with_extension("index");
    let mut bytes = std::fs::read(&index).expect("read");
    let seal_at = bytes.len() - 8;
    // The seal's relative end offset, raised.
    bytes[seal_at] ^= 0x01;
    std::fs::write(&index, &bytes).expect("write");
    for read_only in [true, false] {
        let log = Log::open(dir.path(), options.clone().with_read_only(read_only)).expect("open");
        assert_eq!(read_all(&log, &tp, 0, 1 << 20), expected);
    }
}
