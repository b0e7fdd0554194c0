//! Kafka's own `kafka-dump-log.sh` (`org.apache.kafka.tools.DumpLogSegments`, from the jars the
//! Kafka test kit fetches) reads riffle's segments and offset indexes: the batches are Kafka's
//! v2 batches byte for byte (every codec, CRCs valid), and every index entry names the last
//! offset of the batch at its position, as Kafka's index does. Both are checked against what
//! was appended (the model), not against riffle's own reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use riffle_kafka_testkit::run_offline_tool;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicConfig, TopicPartition};

const TOOL: &str = "org.apache.kafka.tools.DumpLogSegments";

/// One appended record: key, value (`None`: a tombstone) and header keys.
type Modelled = (String, Option<String>, Vec<String>);

fn options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_index_interval_bytes(256)
        .with_compaction_check_interval(None)
}

/// Appends 80 batches of 1–5 records, cycling through the five codecs, into 4 KiB segments
/// with an index entry every 256 bytes; the model by offset and each batch's codec by base
/// offset.
fn write_log(
    dir: &Path,
    config: &TopicConfig,
) -> (BTreeMap<u64, Modelled>, BTreeMap<u64, Compression>) {
    let log = Log::open(dir, options()).expect("open");
    log.create_topic_with("dumped", 1, config).expect("create");
    let tp = TopicPartition::new("dumped", 0);
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut model = BTreeMap::new();
    let mut codec_of = BTreeMap::new();
    let mut n = 0u64;
    for b in 0..80u64 {
        let codec = codecs[(b % 5) as usize];
        let mut batch = BatchBuilder::new(codec);
        let mut records = Vec::new();
        for _ in 0..(b % 5) + 1 {
            let key = format!("key-{}", n % 13);
            let value = (n % 7 != 3).then(|| format!("value {n} of batch {b}"));
            let headers: Vec<String> = (0..n % 3).map(|h| format!("h{h}")).collect();
            let pairs: Vec<(&[u8], Option<&[u8]>)> = headers
                .iter()
                .map(|h| (h.as_bytes(), Some(&b"x"[..])))
                .collect();
            batch.push_with_headers(
                1_700_000_000_000 + n as i64,
                Some(key.as_bytes()),
                value.as_deref().map(str::as_bytes),
                pairs.iter().copied(),
            );
            records.push((key, value, headers));
            n += 1;
        }
        let base = log.append(&tp, &mut batch).expect("append");
        codec_of.insert(base, codec);
        for (i, r) in records.into_iter().enumerate() {
            model.insert(base + i as u64, r);
        }
    }
    log.sync().expect("sync");
    (model, codec_of)
}

fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let part = dir.join("topics/dumped/0");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&part)
        .expect("partition directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    out.sort();
    out
}

/// `name: value` from a line of the tool's output (values without spaces).
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let at = line
        .find(&format!("{name}: "))
        .unwrap_or_else(|| panic!("no {name} in {line:?}"));
    let rest = &line[at + name.len() + 2..];
    rest.split(' ').next().unwrap_or_default()
}

fn number(line: &str, name: &str) -> i64 {
    field(line, name)
        .parse()
        .unwrap_or_else(|e| panic!("{name} in {line:?}: {e}"))
}

/// Batch positions of one segment: position → (base offset, last offset).
type Positions = BTreeMap<i64, (u64, u64)>;

/// Runs Kafka's dump tool on each segment: every record it reads (by offset) and each segment's
/// batch positions. Each batch line must be valid, magic 2, epoch 0, no producer, and pass
/// `check_batch(line, base offset, last offset)`.
fn dump(
    segments: &[PathBuf],
    mut check_batch: impl FnMut(&str, u64, u64),
) -> (BTreeMap<u64, Modelled>, BTreeMap<PathBuf, Positions>) {
    let mut seen: BTreeMap<u64, Modelled> = BTreeMap::new();
    // Per segment: batch position → (base offset, last offset).
    let mut batches_at: BTreeMap<PathBuf, BTreeMap<i64, (u64, u64)>> = BTreeMap::new();
    for segment in segments {
        let path = segment.to_str().expect("utf-8 path");
        let out = run_offline_tool(
            TOOL,
            &["--files", path, "--print-data-log", "--deep-iteration"],
        )
        .expect("kafka-dump-log runs");
        let mut positions = BTreeMap::new();
        let mut batches = 0;
        for line in out.lines() {
            if line.starts_with("baseOffset: ") {
                batches += 1;
                let base = number(line, "baseOffset") as u64;
                let last = number(line, "lastOffset") as u64;
                assert_eq!(field(line, "isvalid"), "true", "{line}");
                assert_eq!(field(line, "magic"), "2", "{line}");
                check_batch(line, base, last);
                assert_eq!(number(line, "partitionLeaderEpoch"), 0, "{line}");
                assert_eq!(number(line, "producerId"), -1, "{line}");
                positions.insert(number(line, "position"), (base, last));
            } else if let Some(record) = line.strip_prefix("| offset: ") {
                let offset: u64 = record
                    .split(' ')
                    .next()
                    .and_then(|o| o.parse().ok())
                    .expect("offset");
                // A tombstone's line has no payload field.
                let (key_and_rest, payload) = line.split_once(" payload: ").unwrap_or((line, ""));
                let key = key_and_rest
                    .split_once(" key: ")
                    .map(|(_, k)| k.to_owned())
                    .expect("a key field");
                let value = (number(line, "valueSize") >= 0).then(|| payload.to_owned());
                assert_eq!(value.is_none(), !line.contains(" payload: "), "{line}");
                let header_list = line
                    .split_once("headerKeys: [")
                    .and_then(|(_, rest)| rest.split_once(']'))
                    .map(|(keys, _)| keys)
                    .expect("headerKeys");
                let headers: Vec<String> = header_list
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned)
                    .collect();
                assert!(
                    seen.insert(offset, (key, value, headers)).is_none(),
                    "offset {offset} twice"
                );
            }
        }
        assert!(batches > 0, "no batch in the dump of {path}:\n{out}");
        batches_at.insert(segment.clone(), positions);
    }
    (seen, batches_at)
}

/// Every index entry is the last offset of the batch at its position (the tool says so: no
/// "Mismatches"), and the tool's sanity check passes, sealed segments included. Returns how many
/// entries the indexes hold.
fn check_indexes(dir: &Path, batches_at: &BTreeMap<PathBuf, Positions>) -> usize {
    let mut entries = 0;
    for index in files(dir, "index") {
        let path = index.to_str().expect("utf-8 path");
        let out = run_offline_tool(TOOL, &["--files", path]).expect("index dump");
        assert!(!out.contains("Mismatches"), "{out}");
        let positions = &batches_at[&index.with_extension("log")];
        for line in out.lines().filter(|l| l.starts_with("offset: ")) {
            let offset = number(line, "offset") as u64;
            let position = number(line, "position");
            let (_, last) = positions
                .get(&position)
                .unwrap_or_else(|| panic!("no batch at {position}: {line}"));
            assert_eq!(offset, *last, "{path}: {line}");
            entries += 1;
        }
        let sanity = run_offline_tool(TOOL, &["--files", path, "--index-sanity-check"])
            .expect("sanity check");
        assert!(sanity.contains("passed sanity check"), "{sanity}");
    }
    entries
}

#[test]
fn kafka_s_dump_tool_reads_riffle_s_segments_and_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, codec_of) = write_log(dir.path(), &TopicConfig::default());
    let segments = files(dir.path(), "log");
    assert!(
        segments.len() >= 3,
        "rolled into several segments: {segments:?}"
    );

    let (seen, batches_at) = dump(&segments, |line, base, last| {
        assert_eq!(number(line, "count") as u64, last - base + 1, "{line}");
        let codec = codec_of.get(&base).expect("a batch riffle appended");
        let name = match codec {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            _ => "zstd",
        };
        assert_eq!(field(line, "compresscodec"), name, "{line}");
    });
    assert_eq!(seen, model, "what Kafka's tool read is what was appended");

    let entries = check_indexes(dir.path(), &batches_at);
    assert!(entries >= 10, "the indexes hold entries: {entries}");
}

/// After compaction (two passes: the second merges segments, and with the clock past the
/// delete horizon removes the tombstones the first kept): Kafka's tool reads the cleaned
/// segments too — batches with gaps between their records, batches joined, empty batches,
/// batches with a delete horizon — every batch valid, holding at most the offsets it covers, and
/// exactly the records riffle reads, each as appended at its offset.
#[test]
fn kafka_s_dump_tool_reads_compacted_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = TopicConfig::from_pairs([
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0"),
        ("delete.retention.ms", "1000"),
    ])
    .expect("config");
    let (appended, _) = write_log(dir.path(), &config);
    let log = Log::open(dir.path(), options()).expect("open");
    let tp = TopicPartition::new("dumped", 0);
    let first = log.compact(1_000).expect("first pass");
    assert!(first.records_removed > 0, "{first:?}");
    // More records, so the second pass has dirty segments; its clock is past the horizon.
    let mut batch = BatchBuilder::new(Compression::Zstd);
    for n in 0..40u64 {
        batch.push(
            1,
            Some(format!("key-{}", n % 13).as_bytes()),
            Some(b"later"),
        );
        if n % 8 == 7 {
            log.append(&tp, &mut batch).expect("append");
        }
    }
    let second = log.compact(1_000_000).expect("second pass");
    assert!(
        second.segments_cleaned > second.segments_written,
        "{second:?}"
    );
    log.sync().expect("sync");
    // What riffle reads, each record checked against what was appended at its offset.
    let mut riffle_reads: BTreeMap<u64, Modelled> = BTreeMap::new();
    let mut next = 0;
    loop {
        let batches = log.fetch(&tp, next, 1 << 20).expect("fetch");
        if batches.is_empty() {
            break;
        }
        for b in &batches {
            for r in b.records() {
                let r = r.expect("record");
                if r.offset() < next {
                    continue;
                }
                let key = String::from_utf8(r.key().expect("key").to_vec()).expect("utf-8");
                let value = r
                    .value()
                    .map(|v| String::from_utf8(v.to_vec()).expect("utf-8"));
                let headers: Vec<String> = r
                    .headers()
                    .map(|h| String::from_utf8(h.key.to_vec()).expect("utf-8"))
                    .collect();
                if let Some(original) = appended.get(&r.offset()) {
                    assert_eq!(&(key.clone(), value.clone(), headers.clone()), original);
                }
                riffle_reads.insert(r.offset(), (key, value, headers));
            }
            next = b.last_offset() + 1;
        }
    }
    assert!(
        riffle_reads.len() < appended.len() / 2,
        "{} records left",
        riffle_reads.len()
    );
    let segments = files(dir.path(), "log");
    let (mut gapped, mut empty) = (0, 0);
    let (seen, batches_at) = dump(&segments, |line, base, last| {
        let count = number(line, "count") as u64;
        assert!(count <= last - base + 1, "{line}");
        gapped += usize::from(count < last - base + 1);
        empty += usize::from(count == 0);
    });
    assert_eq!(
        seen, riffle_reads,
        "what Kafka's tool read is what riffle reads"
    );
    assert!(gapped > 0, "no batch with gaps");
    check_indexes(dir.path(), &batches_at);
    println!(
        "{gapped} batches with gaps, {empty} empty, {} records",
        seen.len()
    );
}
