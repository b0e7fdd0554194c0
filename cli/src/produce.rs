//! `riffle produce`: `key<TAB>value` lines into a topic, partitioned like Kafka's producer; with
//! `--headers`, `h1:v1,h2:v2<TAB>key<TAB>value` lines, as Kafka's console producer reads them with
//! `parse.key=true` and `parse.headers=true`; with `--timestamps`, each line starts with the
//! record's timestamp (`timestamp_ms<TAB>[headers<TAB>]key<TAB>value`, the order Kafka's console
//! consumer prints them in with `print.timestamp=true`).

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition, partition_for_key};

/// Arguments of `riffle produce` (its `--help` text, in `main.rs`, says it is not atomic).
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The embedded log's directory (created if missing).
    #[arg(long)]
    log_dir: PathBuf,
    /// The topic to append to.
    #[arg(long)]
    topic: String,
    /// Partitions of the topic: created with this many (1 if not given) if missing; an
    /// existing topic with another count is an error.
    #[arg(long)]
    partitions: Option<u32>,
    /// Compression of the written batches: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Each line starts with the record's headers: `h1:v1,h2:v2<TAB>key<TAB>value`, as Kafka's
    /// console producer reads it with `parse.key=true parse.headers=true` (headers separated by
    /// `,`, a header's key from its value by its first `:`; a key may repeat, a value may be
    /// empty). A headers field of exactly `NO_HEADERS` (what `consume --print-headers` prints
    /// for a record without headers) means none. A header without `:` is an error naming the
    /// line, like any malformed line.
    #[arg(long)]
    headers: bool,
    /// Each line starts with the record's timestamp in milliseconds since the epoch (a
    /// non-negative integer), which the record carries instead of the wall clock:
    /// `timestamp_ms<TAB>key<TAB>value`, with --headers `timestamp_ms<TAB>headers<TAB>key<TAB>value`
    /// (timestamp first, as Kafka's console consumer prints it; what `consume
    /// --print-timestamps` prints). A timestamp that is not such an integer is an error naming
    /// the line, like any malformed line.
    #[arg(long)]
    timestamps: bool,
    /// Values are given in hexadecimal (`ff fe 41` or `fffe41`; spaces are ignored), so any
    /// bytes can be written — a value the string serde cannot decode, to try an application's
    /// `deserialization_exception_handler`. A value that is not hex is an error naming the line.
    #[arg(long)]
    hex_values: bool,
    /// The input file; standard input when absent.
    file: Option<PathBuf>,
}

/// Lines are appended in batches of this many bytes per partition.
const BATCH_BYTES: usize = 256 << 10;

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let compression: Compression = args
        .compression
        .parse()
        .map_err(|_| anyhow::anyhow!("unknown compression {:?}", args.compression))?;
    let log = Log::open(&args.log_dir, LogOptions::default())
        .with_context(|| format!("opening the log at {}", args.log_dir.display()))?;
    let partitions = match (log.partitions(&args.topic), args.partitions) {
        (Some(existing), None) => existing,
        (_, requested) => {
            // Creates it, or fails naming both counts if it exists with another.
            let requested = requested.unwrap_or(1);
            log.create_topic(&args.topic, requested)?;
            requested
        }
    };
    let mut input: Box<dyn BufRead> = match &args.file {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let mut builders: Vec<BatchBuilder> = (0..partitions)
        .map(|_| BatchBuilder::new(compression))
        .collect();
    let topic: std::sync::Arc<str> = args.topic.as_str().into();
    let flush = |log: &Log, builders: &mut [BatchBuilder], p: usize| -> anyhow::Result<()> {
        if !builders[p].is_empty() {
            log.append(
                &TopicPartition::new(topic.clone(), p as u32),
                &mut builders[p],
            )?;
        }
        Ok(())
    };
    let flush_all = |log: &Log, builders: &mut [BatchBuilder]| -> anyhow::Result<()> {
        for p in 0..builders.len() {
            flush(log, builders, p)?;
        }
        log.sync()?;
        Ok(())
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let layout = Layout {
        timestamps: args.timestamps,
        headers: args.headers,
    };
    let mut written = 0u64;
    let mut raw = Vec::new();
    for number in 1.. {
        raw.clear();
        let read = input.read_until(b'\n', &mut raw);
        let problem = match read {
            Ok(0) => break,
            Ok(_) => {
                let line = raw.strip_suffix(b"\n").unwrap_or(&raw);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                match std::str::from_utf8(line).map_err(|e| format!("not UTF-8 ({e})")) {
                    Err(problem) => Some(problem),
                    Ok(line) => match parse_line(line, layout) {
                        Err(problem) => Some(problem),
                        Ok(Line {
                            timestamp,
                            headers,
                            key,
                            value,
                        }) => {
                            let p = partition_for_key(key.as_bytes(), partitions) as usize;
                            let decoded = if args.hex_values {
                                match parse_hex(value) {
                                    Ok(bytes) => Some(bytes),
                                    Err(problem) => {
                                        flush_all(&log, &mut builders)?;
                                        bail!(
                                            "line {number}: {problem}; the {written} records before it were written to {} \
                                             (and fsynced), nothing from line {number} on",
                                            args.topic
                                        );
                                    }
                                }
                            } else {
                                None
                            };
                            let value = decoded.as_deref().unwrap_or(value.as_bytes());
                            let (key, value) = (Some(key.as_bytes()), Some(value));
                            let timestamp = timestamp.unwrap_or(now);
                            match headers {
                                None => builders[p].push(timestamp, key, value),
                                Some(headers) => builders[p].push_with_headers(
                                    timestamp,
                                    key,
                                    value,
                                    header_pairs(headers),
                                ),
                            }
                            written += 1;
                            if builders[p].size_bytes() >= BATCH_BYTES {
                                flush(&log, &mut builders, p)?;
                            }
                            None
                        }
                    },
                }
            }
            Err(e) => Some(format!("cannot be read ({e})")),
        };
        if let Some(problem) = problem {
            // Everything before this line is appended whole and made durable; nothing of it
            // or after it is.
            flush_all(&log, &mut builders).with_context(|| {
                format!(
                    "line {number}: {problem}; writing the {written} records before it failed too"
                )
            })?;
            bail!(
                "line {number}: {problem}; the {written} records before it were written to {} \
                 (and fsynced), nothing from line {number} on",
                args.topic
            );
        }
    }
    flush_all(&log, &mut builders)?;
    eprintln!(
        "wrote {written} records to {} ({partitions} partitions)",
        args.topic
    );
    Ok(())
}

/// The bytes of a hexadecimal value (`ff fe 41`, `fffe41`; spaces ignored).
fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| *b != b' ').collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "the hex value {text:?} has an odd number of digits"
        ));
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("the hex value {text:?} is not hexadecimal"))
        })
        .collect()
}

/// The headers field of a line that says the record has none: what Kafka's console consumer
/// (and `riffle consume --print-headers`) prints for such a record.
pub(crate) const NO_HEADERS: &str = "NO_HEADERS";

/// Which fields a line has before its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// A timestamp field first (--timestamps).
    timestamps: bool,
    /// A headers field (after the timestamp, if any; --headers).
    headers: bool,
}

impl Layout {
    /// The layout as the error messages name it: `timestamp_ms<TAB>headers<TAB>key<TAB>value`.
    fn describe(self) -> String {
        let mut fields = Vec::new();
        if self.timestamps {
            fields.push("timestamp_ms");
        }
        if self.headers {
            fields.push("headers");
        }
        fields.extend(["key", "value"]);
        fields.join("<TAB>")
    }
}

/// One parsed input line.
#[derive(Debug, PartialEq, Eq)]
struct Line<'a> {
    /// The timestamp field, checked; `None` without --timestamps.
    timestamp: Option<i64>,
    /// The headers field, checked (every header has its `:`); `None` for no headers.
    headers: Option<&'a str>,
    key: &'a str,
    value: &'a str,
}

/// Splits a line into its fields as `layout` says: `key<TAB>value`, with a headers field
/// `h1:v1,h2:v2<TAB>key<TAB>value`, with a timestamp field before those
/// `timestamp_ms<TAB>...` (the value is the rest of the line, tabs and all). The error says
/// what is wrong, for the caller to prefix with the line number.
fn parse_line(line: &str, layout: Layout) -> Result<Line<'_>, String> {
    let before_value = 1 + usize::from(layout.headers) + usize::from(layout.timestamps);
    let fields: Vec<&str> = line.splitn(before_value + 1, '\t').collect();
    if fields.len() <= before_value {
        let tabs = match fields.len() - 1 {
            0 => "no tab".to_owned(),
            1 => "one tab".to_owned(),
            n => format!("{n} tabs"),
        };
        return Err(format!("expected `{}`, found {tabs}", layout.describe()));
    }
    let mut fields = fields.into_iter();
    let mut field = || fields.next().unwrap_or_default();
    let timestamp = layout.timestamps.then(&mut field);
    let headers = layout.headers.then(&mut field);
    let (key, value) = (field(), field());
    let timestamp = timestamp.map(parse_timestamp).transpose()?;
    let headers = match headers {
        None => None,
        Some(NO_HEADERS) => None,
        Some(field) => {
            for (i, header) in field.split(',').enumerate() {
                if !header.contains(':') {
                    return Err(format!(
                        "header {} ({header:?}) has no `:` between its key and value (expected \
                         `key:value`, or a headers field of {NO_HEADERS} for none)",
                        i + 1
                    ));
                }
            }
            Some(field)
        }
    };
    Ok(Line {
        timestamp,
        headers,
        key,
        value,
    })
}

/// A timestamp field: milliseconds since the epoch, a non-negative decimal integer (Kafka's
/// producer refuses negative timestamps).
fn parse_timestamp(field: &str) -> Result<i64, String> {
    let digits = field.strip_prefix('-').unwrap_or(field);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "timestamp {field:?} is not an integer (expected milliseconds since the epoch)"
        ));
    }
    if field.starts_with('-') {
        return Err(format!("timestamp {field} is negative"));
    }
    field
        .parse()
        .map_err(|_| format!("timestamp {field} is out of range (at most {})", i64::MAX))
}

/// The headers of a checked headers field, in order: key up to the first `:`, value after it.
fn header_pairs(field: &str) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + Clone {
    field.split(',').map(|header| {
        let (key, value) = header.split_once(':').unwrap_or((header, ""));
        (key.as_bytes(), Some(value.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::{Layout, Line, header_pairs, parse_hex, parse_line};

    #[test]
    fn hex_values_decode_with_or_without_spaces_and_refuse_the_rest() {
        assert_eq!(parse_hex("ff fe 41"), Ok(vec![0xff, 0xfe, 0x41]));
        assert_eq!(parse_hex("FFfe41"), Ok(vec![0xff, 0xfe, 0x41]));
        assert_eq!(parse_hex(""), Ok(vec![]));
        assert!(parse_hex("abc").is_err_and(|e| e.contains("odd")));
        assert!(parse_hex("zz").is_err_and(|e| e.contains("not hexadecimal")));
    }

    const HEADERS: Layout = Layout {
        timestamps: false,
        headers: true,
    };
    const PLAIN: Layout = Layout {
        timestamps: false,
        headers: false,
    };
    const TIMESTAMPS: Layout = Layout {
        timestamps: true,
        headers: false,
    };
    const BOTH: Layout = Layout {
        timestamps: true,
        headers: true,
    };

    fn headers(field: &str) -> Vec<(String, String)> {
        header_pairs(field)
            .map(|(k, v)| {
                let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap_or_default();
                (text(k), text(v.unwrap_or_default()))
            })
            .collect()
    }

    #[test]
    fn a_header_value_may_hold_colons_and_be_empty_and_a_key_may_repeat() {
        assert_eq!(
            headers("a:1,b:x:y,a:,:v"),
            [("a", "1"), ("b", "x:y"), ("a", ""), ("", "v")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn the_value_is_the_rest_of_the_line_and_no_headers_means_none() {
        assert_eq!(
            parse_line("NO_HEADERS\tk\tv\tw", HEADERS),
            Ok(Line {
                timestamp: None,
                headers: None,
                key: "k",
                value: "v\tw"
            })
        );
        assert_eq!(
            parse_line("h:1\tk\t", HEADERS),
            Ok(Line {
                timestamp: None,
                headers: Some("h:1"),
                key: "k",
                value: ""
            })
        );
        // Without --headers a headers-looking first field is the key.
        assert_eq!(
            parse_line("h:1\tk\tv", PLAIN),
            Ok(Line {
                timestamp: None,
                headers: None,
                key: "h:1",
                value: "k\tv"
            })
        );
    }

    #[test]
    fn a_header_without_a_colon_or_a_missing_field_is_refused() {
        for (line, says) in [
            ("a:1,b\tk\tv", "header 2 (\"b\") has no `:`"),
            ("\tk\tv", "header 1 (\"\") has no `:`"),
            ("a:1,\tk\tv", "header 2 (\"\") has no `:`"),
            ("a:1\tk", "found one tab"),
            ("a:1", "found no tab"),
        ] {
            let err = parse_line(line, HEADERS).expect_err(line);
            assert!(err.contains(says), "{line:?}: {err}");
        }
    }

    #[test]
    fn the_timestamp_comes_first_then_the_headers() {
        assert_eq!(
            parse_line("1700000000000\tk\tv\tw", TIMESTAMPS),
            Ok(Line {
                timestamp: Some(1_700_000_000_000),
                headers: None,
                key: "k",
                value: "v\tw"
            })
        );
        assert_eq!(
            parse_line("0\th:1\tk\tv", BOTH),
            Ok(Line {
                timestamp: Some(0),
                headers: Some("h:1"),
                key: "k",
                value: "v"
            })
        );
        assert_eq!(
            parse_line("9223372036854775807\tNO_HEADERS\tk\t", BOTH),
            Ok(Line {
                timestamp: Some(i64::MAX),
                headers: None,
                key: "k",
                value: ""
            })
        );
    }

    #[test]
    fn a_bad_timestamp_or_a_missing_field_is_refused() {
        for (line, layout, says) in [
            ("-1\tk\tv", TIMESTAMPS, "timestamp -1 is negative"),
            (
                "abc\tk\tv",
                TIMESTAMPS,
                "timestamp \"abc\" is not an integer",
            ),
            (
                "1.5\tk\tv",
                TIMESTAMPS,
                "timestamp \"1.5\" is not an integer",
            ),
            ("+5\tk\tv", TIMESTAMPS, "timestamp \"+5\" is not an integer"),
            ("\tk\tv", TIMESTAMPS, "timestamp \"\" is not an integer"),
            ("-\tk\tv", TIMESTAMPS, "timestamp \"-\" is not an integer"),
            (
                "9223372036854775808\tk\tv",
                TIMESTAMPS,
                "timestamp 9223372036854775808 is out of range",
            ),
            (
                "5\tk",
                TIMESTAMPS,
                "expected `timestamp_ms<TAB>key<TAB>value`, found one tab",
            ),
            (
                "5\th:1\tk",
                BOTH,
                "expected `timestamp_ms<TAB>headers<TAB>key<TAB>value`, found 2 tabs",
            ),
            (
                "5\tnocolon\tk\tv",
                BOTH,
                "header 1 (\"nocolon\") has no `:`",
            ),
            // Without --timestamps a number first is the key.
            ("k", PLAIN, "expected `key<TAB>value`, found no tab"),
        ] {
            let err = parse_line(line, layout).expect_err(line);
            assert!(err.contains(says), "{line:?}: {err}");
        }
        assert_eq!(
            parse_line("5\tk\tv", PLAIN).map(|l| (l.timestamp, l.key)),
            Ok((None, "5"))
        );
    }
}
