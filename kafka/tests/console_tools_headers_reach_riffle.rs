//! Record headers written by Kafka's console producer (`parse.headers=true`) come back the same
//! from Kafka's console consumer (`print.headers=true`) — the test kit's console harness — and
//! riffle-kafka's fetch path decodes them into `Record::headers()`: in order, repeated keys,
//! empty and null values, records without headers, uncompressed and in gzip, snappy, lz4 and
//! zstd batches.

#![allow(clippy::unwrap_used)]

use riffle::backend::Backend;
use riffle::batch::{Compression, Header, TopicPartition};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_kafka_testkit::KafkaBroker;

/// The console producer's input: `headers<TAB>key<TAB>value`, `NULL` the null marker (a header
/// value of `NULL` is null, a headers field of `NULL` is no headers).
const LINES: [&str; 6] = [
    "trace:abc,span:1\tuser-1\tclick",
    "a:1,a:2,a:3\tuser-1\trepeated",
    "empty:,nil:NULL\tuser-3\tv",
    "NULL\tuser-4\tplain",
    "url:http://x:80/p,:no-key\tuser-2\tvalue\twith a tab",
    "only:one\tuser-1\tlast",
];

/// What the console consumer prints for them with `print.key=true print.headers=true`.
const PRINTED: [&str; 6] = [
    "trace:abc,span:1\tuser-1\tclick",
    "a:1,a:2,a:3\tuser-1\trepeated",
    "empty:,nil:null\tuser-3\tv",
    "NO_HEADERS\tuser-4\tplain",
    "url:http://x:80/p,:no-key\tuser-2\tvalue\twith a tab",
    "only:one\tuser-1\tlast",
];

const READER: [(&str, &str); 3] = [
    ("parse.key", "true"),
    ("parse.headers", "true"),
    ("null.marker", "NULL"),
];

const FORMATTER: [(&str, &str); 2] = [("print.key", "true"), ("print.headers", "true")];

fn header(key: &str, value: Option<&str>) -> Header {
    Header::new(
        key.as_bytes().to_vec(),
        value.map(|v| v.as_bytes().to_vec().into()),
    )
}

/// The headers riffle must see, record by record.
fn expected_headers() -> Vec<Vec<Header>> {
    vec![
        vec![header("trace", Some("abc")), header("span", Some("1"))],
        vec![
            header("a", Some("1")),
            header("a", Some("2")),
            header("a", Some("3")),
        ],
        vec![header("empty", Some("")), header("nil", None)],
        vec![],
        vec![
            header("url", Some("http://x:80/p")),
            header("", Some("no-key")),
        ],
        vec![header("only", Some("one"))],
    ]
}

/// One record as riffle-kafka decoded it.
#[derive(Debug)]
struct Fetched {
    key: String,
    value: String,
    headers: Vec<Header>,
}

/// Fetches all of `topic`'s partition 0 with riffle-kafka: its records, and the codec of every
/// batch.
fn fetch_all(
    backend: &KafkaBackend,
    topic: &str,
) -> riffle::Result<(Vec<Fetched>, Vec<Compression>)> {
    let tp = TopicPartition::new(topic, 0);
    let end = backend.end_offset(&tp)?;
    let (mut records, mut codecs) = (Vec::new(), Vec::new());
    let mut position = 0;
    while position < end {
        let batches = backend.fetch(&tp, position, 1 << 20)?;
        assert!(
            !batches.is_empty(),
            "{topic}: nothing at {position} of {end}"
        );
        for batch in batches {
            codecs.push(batch.meta().compression);
            for record in batch.records() {
                let record = record.unwrap();
                if record.offset() < position {
                    continue;
                }
                let text =
                    |b: Option<&bytes::Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                assert_eq!(record.header_count() as usize, record.headers().count());
                records.push(Fetched {
                    key: text(record.key()),
                    value: text(record.value()),
                    headers: record.headers().collect(),
                });
            }
            position = batch.last_offset() + 1;
        }
    }
    Ok((records, codecs))
}

#[test]
fn console_producer_headers_reach_the_console_consumer_and_riffle_with_each_codec() {
    let broker = KafkaBroker::start().unwrap();
    let backend = KafkaBackend::connect(KafkaConfig::new(broker.bootstrap())).unwrap();
    for (codec, compression) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let topic = format!("headers-{codec}");
        broker.create_topic(&topic, 1).unwrap();
        broker
            .console_produce_with(&topic, &LINES, &READER, &[("compression.type", codec)])
            .unwrap();

        // The harness: Kafka's own consumer prints what Kafka's own producer read.
        let printed = broker
            .console_consume(&topic, LINES.len(), &FORMATTER)
            .unwrap();
        assert_eq!(printed, PRINTED, "{codec}");

        // riffle-kafka decodes the same headers from the fetched batches.
        let (records, codecs) = fetch_all(&backend, &topic).unwrap();
        assert!(
            codecs.iter().all(|&c| c == compression),
            "{codec}: batches {codecs:?}"
        );
        let keys_values: Vec<(String, String)> = PRINTED
            .iter()
            .map(|line| {
                let (_, rest) = line.split_once('\t').unwrap();
                let (key, value) = rest.split_once('\t').unwrap();
                (key.to_owned(), value.to_owned())
            })
            .collect();
        let got: Vec<_> = records
            .iter()
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect();
        assert_eq!(got, keys_values, "{codec}");
        let headers: Vec<Vec<Header>> = records.into_iter().map(|r| r.headers).collect();
        assert_eq!(headers, expected_headers(), "{codec}");
    }
}
