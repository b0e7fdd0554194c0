//! An application stops with the log's `Error::Corrupt` — naming the file, the byte position
//! and the offsets — when its input is damaged with intact data after the damage; it neither
//! truncates the input nor counts around the hole. Under both processing guarantees.

mod common;

use common::{Fixture, INPUT, rng};

fn damaged_input(fixture: &Fixture) -> std::path::PathBuf {
    let mut rng = rng(7);
    fixture.append_input(&mut rng, 6_000, 50);
    let segment = fixture.last_segment(INPUT, 0);
    let mut bytes = std::fs::read(&segment).expect("read");
    assert!(bytes.len() > 10_000, "several batches: {}", bytes.len());
    bytes[200] ^= 0x04; // inside the first batch; intact batches follow
    std::fs::write(&segment, &bytes).expect("write");
    segment
}

#[test]
fn the_sample_stops_with_the_corrupt_error_and_cuts_nothing() {
    let args = ["--threads", "2", "--commit-interval-ms", "20"].map(String::from);
    for guarantee in ["at_least_once", "exactly_once"] {
        let fixture = Fixture::new();
        let segment = damaged_input(&fixture);
        let before = std::fs::read(&segment).expect("read");
        let out = fixture
            .sample("memory", guarantee, &args)
            .output()
            .expect("run the sample");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{guarantee}: the sample ran over a corrupt input:\n{stderr}"
        );
        assert!(
            stderr.contains(&segment.display().to_string()),
            "{guarantee}: {stderr}"
        );
        assert!(stderr.contains("at byte 0"), "{guarantee}: {stderr}");
        assert!(
            stderr.contains("intact data follows"),
            "{guarantee}: {stderr}"
        );
        assert_eq!(
            std::fs::read(&segment).expect("read"),
            before,
            "{guarantee}: the input was cut"
        );
    }
}

/// Byte positions of the batches in a segment (Kafka's v2 batch: bytes 8..12 count what
/// follows them).
fn batch_positions(segment: &std::path::Path) -> Vec<u64> {
    let bytes = std::fs::read(segment).expect("read");
    let mut positions = Vec::new();
    let mut pos = 0usize;
    while pos + 12 <= bytes.len() {
        positions.push(pos as u64);
        let len = u32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().expect("4 bytes"));
        pos += len as usize + 12;
    }
    positions
}

/// The input's last batch, fsynced and committed past, is damaged (a flipped byte): the sample
/// stops naming the segment and its recovery point; it neither cuts the batch as a torn write
/// nor resets to the start of the partition and counts it again.
#[test]
fn a_damaged_input_batch_that_was_committed_past_stops_the_sample() {
    let args = ["--threads", "2", "--commit-interval-ms", "20"].map(String::from);
    for guarantee in ["at_least_once", "exactly_once"] {
        let fixture = Fixture::new();
        let mut rng = rng(11);
        fixture.append_input(&mut rng, 6_000, 50);
        common::run_to_end(guarantee, fixture.sample("memory", guarantee, &args));
        let segment = fixture.last_segment(INPUT, 0);
        let mut bytes = std::fs::read(&segment).expect("read");
        let at = bytes.len() - 100;
        bytes[at] ^= 0x04;
        std::fs::write(&segment, &bytes).expect("write");
        let out = fixture
            .sample("memory", guarantee, &args)
            .output()
            .expect("run the sample");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{guarantee}: ran on:\n{stderr}");
        for words in [
            segment.display().to_string(),
            "was fsynced (the recovery point".to_owned(),
            "not a torn write".to_owned(),
        ] {
            assert!(
                stderr.contains(&words),
                "{guarantee}: lacks {words:?}:\n{stderr}"
            );
        }
        assert!(!stderr.contains("auto_offset_reset moves it"), "{stderr}");
        assert_eq!(
            std::fs::read(&segment).expect("read"),
            bytes,
            "{guarantee}: cut"
        );
    }
}

/// A committed offset past the partition's end — here the partition lost its last batch at a
/// batch boundary and its recovery point with its lock file, so the log itself cannot tell —
/// stops the sample naming the group, the partition, the offset and the end: never an
/// `auto_offset_reset` that would count the partition again.
#[test]
fn a_committed_offset_past_the_end_stops_the_sample_naming_the_group() {
    let args = ["--threads", "2", "--commit-interval-ms", "20"].map(String::from);
    for guarantee in ["at_least_once", "exactly_once"] {
        let fixture = Fixture::new();
        let mut rng = rng(12);
        fixture.append_input(&mut rng, 6_000, 50);
        common::run_to_end(guarantee, fixture.sample("memory", guarantee, &args));
        let segment = fixture.last_segment(INPUT, 0);
        let positions = batch_positions(&segment);
        let last = *positions.last().expect("batches");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .expect("open")
            .set_len(last)
            .expect("cut");
        std::fs::remove_file(segment.with_file_name("lock")).expect("rm lock");
        let out = fixture
            .sample("memory", guarantee, &args)
            .output()
            .expect("run the sample");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{guarantee}: ran on:\n{stderr}");
        for words in [
            format!("group \"{}\"", common::APP),
            format!("{INPUT}-0 is offset"),
            "past the partition's end".to_owned(),
            "auto_offset_reset does not apply".to_owned(),
        ] {
            assert!(
                stderr.contains(&words),
                "{guarantee}: lacks {words:?}:\n{stderr}"
            );
        }
    }
}
