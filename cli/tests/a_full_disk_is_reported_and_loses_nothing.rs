//! A full disk (ENOSPC, on a small tmpfs the test mounts) is an error that says what happened,
//! never a silent loss: `riffle produce` exits non-zero naming the file and saying how many
//! records it wrote, and `riffle consume` then reads exactly that many; the exactly-once sample
//! stops with the write that failed (no "a process died", no panic), and once there is room
//! again a second run finishes with exact counts.
//!
//! Mounting a tmpfs needs CAP_SYS_ADMIN (CI runs as root); without it each test says so on
//! stderr and checks nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Fixture, assert_exact, riffle_with_stdin};

/// A tmpfs of a given size, mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "cannot mount a tmpfs (needs CAP_SYS_ADMIN), this test checks nothing: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// KiB in use.
    fn used_kib(&self) -> u64 {
        let out = Command::new("df")
            .args(["-k", "--output=used"])
            .arg(self.path())
            .output()
            .expect("run df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df's used KiB")
    }

    /// Resizes it (larger: makes room).
    fn grow(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn produce_on_a_full_disk_says_how_many_records_it_wrote_and_exactly_those_are_there() {
    let Some(disk) = Tmpfs::mount("1m") else {
        return;
    };
    let log: PathBuf = disk.path().join("log");
    let d = log.to_str().expect("utf-8");
    let lines: String = (0..60_000)
        .map(|i| format!("key-{i}\tvalue-{i:020}\n"))
        .collect();
    let out = riffle_with_stdin(
        &[
            "produce",
            "--log-dir",
            d,
            "--topic",
            "events",
            "--partitions",
            "2",
        ],
        lines.as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "produce filled the disk and exited 0:\n{stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // "… failed; N records were written to events before them"
    let written: u64 = stderr
        .split(" records were written to events")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("produce does not say how many records it wrote:\n{stderr}"));
    assert!(written > 0 && written < 60_000, "{written}");
    eprintln!("produce on a full disk said:\n{stderr}");
    disk.grow("64m");
    let consumed = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "consume",
            "--log-dir",
            d,
            "--topic",
            "events",
            "--from-beginning",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run consume");
    assert!(
        consumed.status.success(),
        "{}",
        String::from_utf8_lossy(&consumed.stderr)
    );
    let got = String::from_utf8_lossy(&consumed.stdout).lines().count() as u64;
    assert_eq!(got, written, "produce said {written}; the log holds {got}");
}

/// The sample stops saying what happened when the disk of its log and state directory (or,
/// with `only_state`, of its state directory alone) is full, and with room again a second run
/// finishes with exact counts.
fn full_disk_then_room(store: &str, guarantee: &str, only_state: bool) {
    let Some(disk) = Tmpfs::mount("64m") else {
        return;
    };
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let log_dir = if only_state {
        elsewhere.path()
    } else {
        disk.path()
    }
    .join("log");
    let fixture = Fixture::with_dirs(log_dir, disk.path().join("state"));
    // Distinct keys: every record makes an output record and a changelog record (and, under
    // exactly-once, their copies in the transaction journal): far more than the room left.
    let keys: Vec<String> = (0..12_000).map(|i| format!("key-{i}")).collect();
    let model = fixture.append_keys(&keys);
    let used = disk.used_kib();
    disk.grow(&format!("{}k", used + 256));
    // Far more store data than 256 KiB: a key per record, and values that fill it.
    let args = ["--threads", "1", "--commit-interval-ms", "50"].map(String::from);
    let out = fixture
        .sample(store, guarantee, &args)
        .output()
        .expect("run the sample");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{store}, {guarantee}, only the state on the full disk: {only_state}");
    assert!(
        !out.status.success(),
        "{what}: the sample filled the disk and exited 0:\n{stderr}"
    );
    assert!(
        stderr.contains("No space left on device") || stderr.contains("a full disk"),
        "{what}: {stderr}"
    );
    eprintln!("{what}: the sample on a full disk said:\n{stderr}");
    for never in ["panicked", "a process died"] {
        assert!(!stderr.contains(never), "{what}: {never:?}:\n{stderr}");
    }
    disk.grow("64m");
    common::run_to_end(&what, fixture.sample(store, guarantee, &args));
    assert_exact(&model, &fixture.output_counts(), &what);
}

#[test]
fn the_exactly_once_sample_on_a_full_disk_stops_saying_so_and_recounts_exactly_with_room() {
    full_disk_then_room("memory", "exactly_once", false);
}

#[test]
fn the_persistent_store_on_a_full_disk_stops_saying_so_and_recounts_exactly_with_room() {
    full_disk_then_room("persistent", "at_least_once", false);
    full_disk_then_room("persistent", "exactly_once", false);
    full_disk_then_room("persistent", "at_least_once", true);
}
