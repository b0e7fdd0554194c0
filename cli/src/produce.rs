//! `riffle produce`: `key<TAB>value` lines into a topic, partitioned like Kafka's producer; with
//! `--headers`, `h1:v1,h2:v2<TAB>key<TAB>value` lines, as Kafka's console producer reads them with
//! `parse.key=true` and `parse.headers=true`.

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
    /// Compression of the written batches: none, lz4 or zstd.
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
                    Ok(line) => match parse_line(line, args.headers) {
                        Err(problem) => Some(problem),
                        Ok(Line {
                            headers,
                            key,
                            value,
                        }) => {
                            let p = partition_for_key(key.as_bytes(), partitions) as usize;
                            let (key, value) = (Some(key.as_bytes()), Some(value.as_bytes()));
                            match headers {
                                None => builders[p].push(now, key, value),
                                Some(headers) => builders[p].push_with_headers(
                                    now,
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

/// The headers field of a line that says the record has none: what Kafka's console consumer
/// (and `riffle consume --print-headers`) prints for such a record.
pub(crate) const NO_HEADERS: &str = "NO_HEADERS";

/// One parsed input line.
#[derive(Debug, PartialEq, Eq)]
struct Line<'a> {
    /// The headers field, checked (every header has its `:`); `None` for no headers.
    headers: Option<&'a str>,
    key: &'a str,
    value: &'a str,
}

/// Splits a line into its fields: `key<TAB>value`, or with `headers`
/// `h1:v1,h2:v2<TAB>key<TAB>value` (the value is the rest of the line, tabs and all). The error
/// says what is wrong, for the caller to prefix with the line number.
fn parse_line(line: &str, headers: bool) -> Result<Line<'_>, String> {
    if !headers {
        let (key, value) = line
            .split_once('\t')
            .ok_or("expected `key<TAB>value`, found no tab")?;
        return Ok(Line {
            headers: None,
            key,
            value,
        });
    }
    const LAYOUT: &str = "expected `headers<TAB>key<TAB>value`";
    let (field, rest) = line
        .split_once('\t')
        .ok_or_else(|| format!("{LAYOUT}, found no tab"))?;
    let (key, value) = rest
        .split_once('\t')
        .ok_or_else(|| format!("{LAYOUT}, found one tab"))?;
    let headers = if field == NO_HEADERS {
        None
    } else {
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
    };
    Ok(Line {
        headers,
        key,
        value,
    })
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
    use super::{Line, header_pairs, parse_line};

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
            parse_line("NO_HEADERS\tk\tv\tw", true),
            Ok(Line {
                headers: None,
                key: "k",
                value: "v\tw"
            })
        );
        assert_eq!(
            parse_line("h:1\tk\t", true),
            Ok(Line {
                headers: Some("h:1"),
                key: "k",
                value: ""
            })
        );
        // Without --headers a headers-looking first field is the key.
        assert_eq!(
            parse_line("h:1\tk\tv", false),
            Ok(Line {
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
            let err = parse_line(line, true).expect_err(line);
            assert!(err.contains(says), "{line:?}: {err}");
        }
    }
}
