//! `riffle produce`: `key<TAB>value` lines into a topic, partitioned like Kafka's producer; with
//! `--headers`, `h1:v1,h2:v2<TAB>key<TAB>value` lines, as Kafka's console producer reads them with
//! `parse.key=true` and `parse.headers=true`; with `--timestamps`, each line starts with the
//! record's timestamp (`timestamp_ms<TAB>[headers<TAB>]key<TAB>value`, the order Kafka's console
//! consumer prints them in with `print.timestamp=true`).

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::mpsc::{RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    /// Append a partition's records at most this many milliseconds after the first of them
    /// was read, even if its batch is not full (Kafka's producer `linger.ms`, default 5), so a
    /// slow input shows up as it is typed. A batch that fills (256 KiB) is appended at once.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// The input file; standard input when absent.
    file: Option<PathBuf>,
}

/// A partition's records are appended once they fill a batch of this many bytes, or
/// `--linger-ms` after the first of them was read, whichever comes first.
const BATCH_BYTES: usize = 256 << 10;

/// What the thread reading the input hands to the one writing the log.
enum Input {
    /// A line, without its end of line.
    Line(Vec<u8>),
    /// The input cannot be read any further.
    Failed(std::io::Error),
    /// The end of the input.
    End,
    /// SIGINT or SIGTERM: write what was read before it, then stop.
    Stop,
}

/// Lines the reader may be ahead of the writer by.
const READ_AHEAD: usize = 4_096;

/// The records read but not appended yet, per partition, and what was appended.
struct Pending {
    log: Log,
    topic: std::sync::Arc<str>,
    builders: Vec<BatchBuilder>,
    /// When each partition's oldest unappended record was read.
    since: Vec<Option<Instant>>,
    /// Records appended to the log so far.
    appended: u64,
}

impl Pending {
    /// Adds a record to partition `p`'s batch, appending the batch once it is full; when the
    /// record starts a batch, the time it is due by the linger.
    fn push(
        &mut self,
        p: usize,
        timestamp: i64,
        key: &str,
        value: &[u8],
        headers: Option<&str>,
        linger: Duration,
    ) -> anyhow::Result<Option<Instant>> {
        let builder = &mut self.builders[p];
        let (key, value) = (Some(key.as_bytes()), Some(value));
        match headers {
            None => builder.push(timestamp, key, value),
            Some(headers) => {
                builder.push_with_headers(timestamp, key, value, header_pairs(headers))
            }
        }
        if builder.size_bytes() >= BATCH_BYTES {
            self.append(p)?;
            return Ok(None);
        }
        if self.since[p].is_some() {
            return Ok(None);
        }
        let now = Instant::now();
        self.since[p] = Some(now);
        Ok(Some(now + linger))
    }

    /// Appends partition `p`'s records, if any.
    fn append(&mut self, p: usize) -> anyhow::Result<()> {
        let builder = &mut self.builders[p];
        if builder.is_empty() {
            return Ok(());
        }
        let records = builder.len() as u64;
        let tp = TopicPartition::new(self.topic.clone(), p as u32);
        self.log.append(&tp, builder).with_context(|| {
            format!(
                "appending {records} records to {tp} failed; {} records were written to {} before them",
                self.appended, self.topic
            )
        })?;
        self.appended += records;
        self.since[p] = None;
        Ok(())
    }

    /// Appends every partition's records and syncs the log.
    fn append_all(&mut self) -> anyhow::Result<()> {
        for p in 0..self.builders.len() {
            self.append(p)?;
        }
        self.log.sync().with_context(|| {
            format!(
                "syncing {} failed after {} records were appended to it: they may not survive a crash",
                self.topic, self.appended
            )
        })
    }

    /// Appends the partitions whose oldest record waited `linger`; when the next one is due.
    fn append_lingered(
        &mut self,
        linger: Duration,
        now: Instant,
    ) -> anyhow::Result<Option<Instant>> {
        let mut next: Option<Instant> = None;
        for p in 0..self.builders.len() {
            if let Some(since) = self.since[p] {
                let due = since + linger;
                if due <= now {
                    self.append(p)?;
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
        }
        Ok(next)
    }
}

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
    let input: Box<dyn BufRead + Send> = match &args.file {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
        None => Box::new(std::io::BufReader::new(std::io::stdin())),
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(READ_AHEAD);
    let stop = tx.clone();
    ctrlc::set_handler(move || {
        let _ = stop.send(Input::Stop);
    })
    .context("installing the SIGINT/SIGTERM handler")?;
    // The reader runs until the input ends; the process exits without waiting for it.
    std::thread::Builder::new()
        .name("produce-reader".into())
        .spawn(move || read_lines(input, &tx))
        .context("starting the input reader")?;
    let linger = Duration::from_millis(args.linger_ms);
    let mut pending = Pending {
        log,
        topic: args.topic.as_str().into(),
        builders: (0..partitions)
            .map(|_| BatchBuilder::new(compression))
            .collect(),
        since: vec![None; partitions as usize],
        appended: 0,
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
    let mut due: Option<Instant> = None;
    for number in 1.. {
        let event = loop {
            let received = match due {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            };
            match received {
                Ok(event) => break event,
                Err(RecvTimeoutError::Timeout) => {
                    due = pending.append_lingered(linger, Instant::now())?;
                }
                // The reader always ends with `End` or `Failed`.
                Err(RecvTimeoutError::Disconnected) => break Input::End,
            }
        };
        let problem = match event {
            Input::End => break,
            Input::Stop => {
                pending.append_all()?;
                bail!(
                    "stopped by a signal: the {written} records read before it were written to {} (and fsynced)",
                    args.topic
                );
            }
            Input::Failed(e) => Some(format!("cannot be read ({e})")),
            Input::Line(raw) => match decode_line(&raw, layout, args.hex_values) {
                Err(problem) => Some(problem),
                Ok((line, decoded)) => {
                    let value = decoded.as_deref().unwrap_or(line.value.as_bytes());
                    let p = partition_for_key(line.key.as_bytes(), partitions) as usize;
                    let timestamp = line.timestamp.unwrap_or(now);
                    if let Some(at) =
                        pending.push(p, timestamp, line.key, value, line.headers, linger)?
                    {
                        due = Some(due.map_or(at, |d| d.min(at)));
                    }
                    written += 1;
                    None
                }
            },
        };
        if let Some(problem) = problem {
            // Everything before this line is appended whole and made durable; nothing of it
            // or after it is.
            pending.append_all().with_context(|| {
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
    pending.append_all()?;
    eprintln!(
        "wrote {written} records to {} ({partitions} partitions)",
        args.topic
    );
    Ok(())
}

/// A line's fields, and its value's bytes when they are given in hex (`--hex-values`).
fn decode_line(
    raw: &[u8],
    layout: Layout,
    hex: bool,
) -> Result<(Line<'_>, Option<Vec<u8>>), String> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let text = std::str::from_utf8(raw).map_err(|e| format!("not UTF-8 ({e})"))?;
    let line = parse_line(text, layout)?;
    let decoded = if hex {
        Some(parse_hex(line.value)?)
    } else {
        None
    };
    Ok((line, decoded))
}

/// Reads `input` line by line into `tx` until it ends, fails, or the writer is gone.
fn read_lines(mut input: Box<dyn BufRead + Send>, tx: &SyncSender<Input>) {
    loop {
        let mut raw = Vec::new();
        let event = match input.read_until(b'\n', &mut raw) {
            Ok(0) => Input::End,
            Ok(_) => {
                if raw.last() == Some(&b'\n') {
                    raw.pop();
                }
                Input::Line(raw)
            }
            Err(e) => Input::Failed(e),
        };
        let last = !matches!(event, Input::Line(_));
        if tx.send(event).is_err() || last {
            return;
        }
    }
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
