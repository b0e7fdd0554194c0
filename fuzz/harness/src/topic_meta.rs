//! Target `topic_meta`: a topic's metadata files (`topics/<t>/partitions`, `topics/<t>/config`,
//! FORMAT.md *Directory layout*), the check of them against the topic's partition directories
//! that every open runs, and the metadata part of `riffle log repair`.
//!
//! Input: one mode byte, then the rest.
//! - Mode 0, a directory from bytes: a byte whose bits 0–5 say which partition directories
//!   `0`–`5` exist, a byte whose bits say which of them hold an (empty) first segment, a flags
//!   byte (bit 0: a `partitions` file, bit 1: a `config` file, bit 2: a directory `01`, bit 3:
//!   a file `notes`), a length byte, that many bytes of `partitions` (as far as there are), and
//!   the rest as `config`.
//! - Mode 1, a topic the log created (1–6 partitions, a config from a table of valid values, a
//!   record in partition 0), then damaged: files removed or replaced, the count line changed,
//!   the config line dropped, partition directories removed, emptied or added.
//!
//! Checked: no panic. The `partitions` parser: a file that parses renders to one that parses to
//! the same, and renders the same again; one that does not is `Error::Corrupt`. Opening the log
//! (read-only and writable, which agree): succeeds exactly as the format says — no topic when
//! there is no `partitions` file and no entry named by digits; else the count the file says,
//! with directories exactly `0..count`, and the config it recorded — and must succeed when the
//! directory is whole (a count matching the directories, each with a segment, a `config` file
//! as the record says); a failure is `Error::Corrupt` naming a file of the topic. Repair: a dry
//! run changes nothing and says what the repair then does; it changes only `partitions` and
//! `config`, never a file it says it cannot restore; an intact topic needs nothing; when it
//! leaves nothing unrestorable, the log opens, or fails only on a partition (the partition
//! repair's part); a second repair finds nothing more to restore.

use std::collections::BTreeSet;

use arbitrary::{Arbitrary, Unstructured};
use riffle_log::fuzzing::{MemDir, parse_topic_partitions, render_topic_partitions};
use riffle_log::{
    BatchBuilder, Compression, Error, LogOptions, TOPIC_CONFIG_KEYS, TopicConfig, TopicPartition,
};

const TOPIC_DIR: &str = "topics/t";

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = MemDir::new();
    if mode % 2 == 0 {
        from_bytes(&dir, rest);
    } else if !made_by_the_log(&dir, rest) {
        return;
    }
    check(&dir);
}

fn segment(p: u32) -> String {
    format!("{TOPIC_DIR}/{p}/00000000000000000000.log")
}

fn from_bytes(dir: &MemDir, rest: &[u8]) {
    let byte = |i: usize| rest.get(i).copied().unwrap_or(0);
    let (dirs, segments, flags, len) = (byte(0), byte(1), byte(2), usize::from(byte(3)));
    let body = rest.get(4..).unwrap_or_default();
    let (partitions, config) = body.split_at(len.min(body.len()));
    dir.create_dir(TOPIC_DIR);
    for p in 0..6u32 {
        if dirs & (1 << p) != 0 {
            dir.create_dir(&format!("{TOPIC_DIR}/{p}"));
            if segments & (1 << p) != 0 {
                dir.write(&segment(p), b"");
            }
        }
    }
    if flags & 1 != 0 {
        dir.write(&format!("{TOPIC_DIR}/partitions"), partitions);
    }
    if flags & 2 != 0 {
        dir.write(&format!("{TOPIC_DIR}/config"), config);
    }
    if flags & 4 != 0 {
        dir.create_dir(&format!("{TOPIC_DIR}/01"));
    }
    if flags & 8 != 0 {
        dir.write(&format!("{TOPIC_DIR}/notes"), b"x");
    }
}

/// Valid values of each key of [`TOPIC_CONFIG_KEYS`], in that order.
const VALUES: [&[&str]; 6] = [
    &["delete", "compact", "compact,delete"],
    &["-1", "0", "1000", "604800000"],
    &["-1", "1048576"],
    &["0", "1", "86400000"],
    &["1024", "2147483647"],
    &["0", "0.25", "0.5", "1"],
];

#[derive(Arbitrary, Debug)]
enum Damage {
    RemovePartitions,
    RemoveConfig,
    WritePartitions(Vec<u8>),
    WriteConfig(Vec<u8>),
    /// The count line replaced, the rest of the file kept.
    CountLine(u32),
    /// The file cut to its first line (the count alone).
    DropConfigLine,
    AppendPartitions(Vec<u8>),
    RemoveDir(u8),
    /// Every file of the partition directory removed.
    EmptyDir(u8),
    /// A partition directory added, with a segment or not.
    AddDir(u8, bool),
}

#[derive(Arbitrary, Debug)]
struct Made {
    count: u8,
    config: Vec<(u8, u8)>,
    damage: Vec<Damage>,
}

/// Creates the topic through the log and damages it; false if the input does not describe one.
fn made_by_the_log(dir: &MemDir, rest: &[u8]) -> bool {
    let Ok(made) = Made::arbitrary(&mut Unstructured::new(rest)) else {
        return false;
    };
    let pairs: Vec<(&str, &str)> = made
        .config
        .iter()
        .map(|&(k, v)| {
            let k = usize::from(k) % TOPIC_CONFIG_KEYS.len();
            let values = VALUES[k];
            (TOPIC_CONFIG_KEYS[k], values[usize::from(v) % values.len()])
        })
        .collect();
    let config = TopicConfig::from_pairs(pairs).expect("valid values");
    let count = u32::from(made.count % 6) + 1;
    {
        let log = dir.open(LogOptions::default()).expect("open an empty log");
        log.create_topic_with("t", count, &config).expect("create");
        let mut b = BatchBuilder::new(Compression::None);
        b.push(0, Some(b"k"), Some(b"v"));
        log.append(&TopicPartition::new("t", 0), &mut b)
            .expect("append");
    }
    let meta = format!("{TOPIC_DIR}/partitions");
    for damage in made.damage.into_iter().take(4) {
        match damage {
            Damage::RemovePartitions => dir.remove(&meta),
            Damage::RemoveConfig => dir.remove(&format!("{TOPIC_DIR}/config")),
            Damage::WritePartitions(bytes) => dir.write(&meta, &bytes),
            Damage::WriteConfig(bytes) => dir.write(&format!("{TOPIC_DIR}/config"), &bytes),
            Damage::CountLine(n) => {
                let old = dir.read(&meta).unwrap_or_default();
                let tail = old
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(&[][..], |i| &old[i..]);
                let mut new = n.to_string().into_bytes();
                new.extend_from_slice(tail);
                dir.write(&meta, &new);
            }
            Damage::DropConfigLine => {
                let old = dir.read(&meta).unwrap_or_default();
                let end = old
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(old.len(), |i| i + 1);
                dir.write(&meta, &old[..end]);
            }
            Damage::AppendPartitions(bytes) => {
                let mut old = dir.read(&meta).unwrap_or_default();
                old.extend_from_slice(&bytes);
                dir.write(&meta, &old);
            }
            Damage::RemoveDir(p) => dir.remove_dir(&format!("{TOPIC_DIR}/{}", p % 8)),
            Damage::EmptyDir(p) => {
                let pdir = format!("{TOPIC_DIR}/{}", p % 8);
                for name in dir.list(&pdir) {
                    dir.remove(&format!("{pdir}/{name}"));
                }
            }
            Damage::AddDir(p, with_segment) => {
                let p = u32::from(p % 8);
                dir.create_dir(&format!("{TOPIC_DIR}/{p}"));
                if with_segment {
                    dir.write(&segment(p), b"");
                }
            }
        }
    }
    true
}

/// A `config` file as the log writes it for `config`: one `key=value` line per override.
fn config_file(config: &TopicConfig) -> Vec<u8> {
    config
        .overrides()
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Whether `file` is a `config` file as the log writes it (read here independently: lines of
/// `key=value`), which a count-alone `partitions` file takes as it is.
fn canonical_config(file: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(file) else {
        return false;
    };
    let pairs: Option<Vec<(&str, &str)>> = text.lines().map(|l| l.split_once('=')).collect();
    match pairs.map(TopicConfig::from_pairs) {
        Some(Ok(config)) => config_file(&config) == file,
        _ => false,
    }
}

/// What an open found: the topic's count and config, no topic, or the file a corruption names.
type Outcome = Result<Option<(u32, TopicConfig)>, std::path::PathBuf>;

fn open(dir: &MemDir, read_only: bool) -> Outcome {
    match dir.open(LogOptions::default().with_read_only(read_only)) {
        Ok(log) => Ok(log.partitions("t").map(|count| {
            let config = log.topic_config("t").expect("config").expect("the topic");
            (count, config)
        })),
        Err(Error::Corrupt { path, .. }) => Err(path),
        Err(e) => panic!("an open fails only with Error::Corrupt, not {e:?}"),
    }
}

fn check(dir: &MemDir) {
    let meta_rel = format!("{TOPIC_DIR}/partitions");
    let config_rel = format!("{TOPIC_DIR}/config");
    let topic_path = dir.root().join(TOPIC_DIR);
    let (meta_path, config_path) = (dir.root().join(&meta_rel), dir.root().join(&config_rel));
    let partitions = dir.read(&meta_rel);
    let config = dir.read(&config_rel);
    let entries = dir.list(TOPIC_DIR);
    let digits = entries
        .iter()
        .any(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let dirs: BTreeSet<u32> = entries
        .iter()
        .filter_map(|n| n.parse::<u32>().ok().filter(|p| p.to_string() == *n))
        .collect();
    let with_segment = |p: &u32| dir.read(&segment(*p)).is_some();

    // The parser: a parsed file renders to one that parses the same, and renders the same.
    let parsed = partitions.as_deref().map(parse_topic_partitions);
    match &parsed {
        Some(Ok((count, record))) => {
            let text = render_topic_partitions(*count, record.as_ref());
            let again = parse_topic_partitions(&text).expect("a rendered file parses");
            assert_eq!(
                &again,
                &(*count, record.clone()),
                "parse -> render -> parse"
            );
            assert_eq!(render_topic_partitions(again.0, again.1.as_ref()), text);
        }
        Some(Err(e)) => assert!(matches!(e, Error::Corrupt { .. }), "{e:?}"),
        None => {}
    }

    let outcome = open(dir, true);
    assert_eq!(
        open(dir, false),
        outcome,
        "read-only and writable opens agree"
    );
    let whole = match &parsed {
        None => !digits,
        Some(Ok((count, record))) => {
            dirs.len() as u64 == u64::from(*count)
                && dirs.iter().all(|&p| p < *count && with_segment(&p))
                && match (record, &config) {
                    (None, None) => true,
                    (Some(r), None) => r.overrides().is_empty(),
                    (Some(r), Some(file)) => *file == config_file(r),
                    (None, Some(file)) => canonical_config(file),
                }
        }
        Some(Err(_)) => false,
    };
    match &outcome {
        Ok(None) => assert!(parsed.is_none() && !digits, "no topic only without any"),
        Ok(Some((count, found))) => {
            let Some(Ok((c, record))) = &parsed else {
                panic!("a topic without a valid partitions file: {parsed:?}");
            };
            assert_eq!(count, c);
            assert!(dirs.iter().copied().eq(0..*count), "{dirs:?} for {count}");
            assert!(dirs.iter().all(with_segment));
            if let Some(record) = record {
                assert_eq!(found, record, "the config is what partitions recorded");
            }
        }
        Err(path) => {
            assert!(!whole, "a whole topic failed to open ({})", path.display());
            assert!(path.starts_with(&topic_path), "{}", path.display());
        }
    }

    // Repair: a dry run changes nothing and says what the repair does.
    let before = dir.snapshot();
    let dry = dir
        .repair_topic_metadata("t", true)
        .expect("no I/O error in memory");
    assert_eq!(dir.snapshot(), before, "a dry run changed files");
    let done = dir
        .repair_topic_metadata("t", false)
        .expect("no I/O error in memory");
    assert_eq!(dry, done, "the dry run says what the repair does");
    let Some((restored, left)) = done else {
        assert_eq!(
            outcome,
            Ok(None),
            "repair finds no topic exactly when the open does"
        );
        return;
    };
    let after = dir.snapshot();
    let meta_files = [meta_rel.as_str(), config_rel.as_str()];
    let others = |s: &[(String, Vec<u8>)]| -> Vec<(String, Vec<u8>)> {
        s.iter()
            .filter(|(p, _)| !meta_files.contains(&p.as_str()))
            .cloned()
            .collect()
    };
    assert_eq!(others(&after), others(&before), "repair changed data files");
    for file in restored
        .iter()
        .map(|r| &r.file)
        .chain(left.iter().map(|l| &l.file))
    {
        assert!(
            file == &meta_path || file == &config_path,
            "{}",
            file.display()
        );
    }
    for l in &left {
        let rel = if l.file == meta_path {
            &meta_rel
        } else {
            &config_rel
        };
        let was = before.iter().find(|(p, _)| p == rel).map(|(_, b)| b);
        let is = after.iter().find(|(p, _)| p == rel).map(|(_, b)| b);
        assert_eq!(was, is, "repair changed a file it cannot restore");
    }
    if matches!(outcome, Ok(Some(_))) {
        assert!(
            restored.is_empty() && left.is_empty(),
            "an intact topic needs nothing"
        );
    }
    if left.is_empty() {
        // What the partition repair then does: a partition without a segment (its directory
        // missing below the last one, or empty) gets an empty first segment. Then it opens.
        let text = dir.read(&meta_rel).expect("a repaired partitions file");
        let (count, _) = parse_topic_partitions(&text).expect("a repaired file parses");
        assert!(count <= 8, "a count no directory shows: {count}");
        for p in 0..count {
            if !with_segment(&p) {
                dir.write(&segment(p), b"");
            }
        }
        let Ok(Some((opened, _))) = open(dir, true) else {
            panic!("the repaired topic does not open: {:?}", open(dir, true));
        };
        assert_eq!(opened, count);
    }
    let again = dir
        .repair_topic_metadata("t", false)
        .expect("no I/O error in memory")
        .expect("still a topic");
    assert!(
        again.0.is_empty(),
        "a second repair restores more: {:?}",
        again.0
    );
    assert_eq!(again.1.len(), left.len(), "{:?} then {:?}", left, again.1);
}
