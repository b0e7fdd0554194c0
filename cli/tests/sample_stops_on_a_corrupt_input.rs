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
