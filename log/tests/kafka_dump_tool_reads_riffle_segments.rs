//! Kafka's own `kafka-dump-log.sh` (`org.apache.kafka.tools.DumpLogSegments`, from the jars the
//! Kafka test kit fetches) reads riffle's segments and offset indexes: the batches are Kafka's
//! v2 batches byte for byte (every codec, CRCs valid), and every index entry names the last
//! offset of the batch at its position, as Kafka's index does. Both are checked against what
//! was appended (the model), not against riffle's own reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use riffle_kafka_testkit::run_offline_tool;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

const TOOL: &str = "org.apache.kafka.tools.DumpLogSegments";

/// One appended record: key, value (`None`: a tombstone) and header keys.
type Modelled = (String, Option<String>, Vec<String>);

/// Appends 80 batches of 1–5 records, cycling through the five codecs, into 4 KiB segments
/// with an index entry every 256 bytes; the model by offset and each batch's codec by base
/// offset.
fn write_log(dir: &Path) -> (BTreeMap<u64, Modelled>, BTreeMap<u64, Compression>) {
    let options = LogOptions::default()
        .with_segment_bytes(4096)
        .with_index_interval_bytes(256);
    let log = Log::open(dir, options).expect("open");
    log.create_topic("dumped", 1).expect("create");
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

#[test]
fn kafka_s_dump_tool_reads_riffle_s_segments_and_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, codec_of) = write_log(dir.path());
    let segments = files(dir.path(), "log");
    assert!(
        segments.len() >= 3,
        "rolled into several segments: {segments:?}"
    );

    let mut seen: BTreeMap<u64, Modelled> = BTreeMap::new();
    // Per segment: batch position → (base offset, last offset).
    let mut batches_at: BTreeMap<PathBuf, BTreeMap<i64, (u64, u64)>> = BTreeMap::new();
    for segment in &segments {
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
    assert_eq!(seen, model, "what Kafka's tool read is what was appended");

    // Every index entry is the last offset of the batch at its position (the tool says so:
    // no "Mismatches"), and the tool's sanity check passes; sealed segments included.
    let mut entries = 0;
    for index in files(dir.path(), "index") {
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
    assert!(entries >= 10, "the indexes hold entries: {entries}");
}
