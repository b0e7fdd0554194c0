//! `riffle consume`: a topic's records as `key<TAB>value`; with `--print-headers`, as
//! `h1:v1,h2:v2<TAB>key<TAB>value`, the layout of Kafka's console consumer with
//! `print.key=true print.headers=true`; with `--print-timestamps`, the record's timestamp
//! first (`timestamp_ms<TAB>...`, where Kafka's console consumer prints it with
//! `print.timestamp=true`). Keys are UTF-8 text, or with `--key-serde` windowed keys as Kafka
//! Streams' `TimeWindowedSerializer` / `SessionWindowedSerializer` write them, printed as
//! `key@start/end`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use riffle_log::{Log, LogOptions, Record, TopicPartition};

use crate::produce::NO_HEADERS;

/// How values are printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum ValueSerde {
    /// UTF-8 text (invalid bytes replaced).
    String,
    /// 8-byte big-endian i64, printed in decimal (Kafka's LongDeserializer).
    Long,
    /// Hexadecimal.
    Bytes,
    /// JSON, printed compactly.
    Json,
}

/// How keys are printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeySerde {
    /// UTF-8 text (invalid bytes replaced).
    String,
    /// A time-windowed string key (Kafka Streams' `TimeWindowedSerializer`): the key's bytes,
    /// then the window start as an 8-byte big-endian i64; printed `key@start/end` with end =
    /// start + --window-size.
    WindowedString,
    /// A session-windowed string key (Kafka Streams' `SessionWindowedSerializer`): the key's
    /// bytes, then the session end and start as 8-byte big-endian i64s; printed
    /// `key@start/end`.
    SessionWindowedString,
}

/// How keys are decoded: a [`KeySerde`] with what it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyFormat {
    String,
    /// Time windows of this many milliseconds.
    Windowed {
        size_ms: i64,
    },
    SessionWindowed,
}

impl KeyFormat {
    fn new(serde: KeySerde, window_size: Option<i64>) -> anyhow::Result<KeyFormat> {
        match (serde, window_size) {
            (KeySerde::WindowedString, Some(size_ms)) => Ok(KeyFormat::Windowed { size_ms }),
            (KeySerde::WindowedString, None) => anyhow::bail!(
                "--key-serde windowed-string needs --window-size (the key holds only the window \
                 start; its end is start + size, as Kafka's TimeWindowedDeserializer needs \
                 window.size.ms)"
            ),
            (_, Some(_)) => anyhow::bail!(
                "--window-size is only for --key-serde windowed-string (a session-windowed key \
                 holds its end; a string key has no window)"
            ),
            (KeySerde::String, None) => Ok(KeyFormat::String),
            (KeySerde::SessionWindowedString, None) => Ok(KeyFormat::SessionWindowed),
        }
    }
}

/// A key split as its format says: the inner key's bytes and its window (start, end), if any;
/// `Err` with the bytes the format needs at least, for a key too short for its suffix.
type KeyParts<'a> = Result<(&'a [u8], Option<(i64, i64)>), usize>;

fn split_key(format: KeyFormat, key: &[u8]) -> KeyParts<'_> {
    let long = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8 bytes"));
    match format {
        KeyFormat::String => Ok((key, None)),
        KeyFormat::Windowed { size_ms } => {
            let at = key.len().checked_sub(8).ok_or(8usize)?;
            let start = long(&key[at..]);
            // Kafka's TimeWindowedDeserializer caps an end past i64::MAX at i64::MAX.
            Ok((&key[..at], Some((start, start.saturating_add(size_ms)))))
        }
        KeyFormat::SessionWindowed => {
            let at = key.len().checked_sub(16).ok_or(16usize)?;
            let (end, start) = (long(&key[at..at + 8]), long(&key[at + 8..]));
            Ok((&key[..at], Some((start, end))))
        }
    }
}

/// The key as printed: the inner key as UTF-8 text (invalid bytes replaced), then
/// `@start/end` for a windowed one; a key too short for its window as
/// `<not a windowed key: N bytes>` (the way a value that is not a long is printed).
fn render_key(format: KeyFormat, key: &[u8]) -> String {
    match split_key(format, key) {
        Ok((inner, None)) => String::from_utf8_lossy(inner).into_owned(),
        Ok((inner, Some((start, end)))) => {
            format!("{}@{start}/{end}", String::from_utf8_lossy(inner))
        }
        Err(_) => {
            let what = match format {
                KeyFormat::SessionWindowed => "session-windowed",
                _ => "windowed",
            };
            format!("<not a {what} key: {} bytes>", key.len())
        }
    }
}

/// Arguments of `riffle consume`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The embedded log's directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// The topic to read.
    #[arg(long)]
    topic: String,
    /// Read from the start, print everything up to the current end and exit (unless --follow).
    #[arg(long)]
    from_beginning: bool,
    /// Keep printing records as any process appends them, until Ctrl-C (the default without
    /// --from-beginning).
    #[arg(long)]
    follow: bool,
    /// Print only the latest value of each key, sorted by key, once the end is reached
    /// (windowed keys by key, then window start and end; keys too short for their window
    /// last).
    #[arg(long)]
    latest_per_key: bool,
    /// How keys are decoded: `string`; `windowed-string` (Kafka Streams' time-windowed key:
    /// the key, then the window start, 8 bytes big-endian; needs --window-size) or
    /// `session-windowed-string` (the key, then the session end and start, 8 bytes big-endian
    /// each), both printed `key@start/end` in milliseconds. A key too short for its window
    /// prints as `<not a windowed key: N bytes>` (`<not a session-windowed key: N bytes>`).
    #[arg(long, value_enum, default_value = "string")]
    key_serde: KeySerde,
    /// The window size of --key-serde windowed-string, like `500ms`, `60s`, `5m`, `1h` or `1d`:
    /// a window ends at its start plus this.
    #[arg(long, value_parser = riffle_cli::duration::parse_duration_ms)]
    window_size: Option<i64>,
    /// How values are decoded.
    #[arg(long, value_enum, default_value = "string")]
    value_serde: ValueSerde,
    /// Print each record's headers first: `h1:v1,h2:v2<TAB>key<TAB>value`, as Kafka's console
    /// consumer does with `print.key=true print.headers=true` (in order, `,` between headers,
    /// each `key:value` with the value's bytes as they are, a null header value as `null`),
    /// `NO_HEADERS` for a record without headers; key and value as without the flag. `produce --headers` reads these lines back. With --latest-per-key, the
    /// headers of each key's latest record.
    #[arg(long)]
    print_headers: bool,
    /// Print each record's timestamp (milliseconds since the epoch) first, before its headers:
    /// `timestamp_ms<TAB>key<TAB>value`, with --print-headers
    /// `timestamp_ms<TAB>headers<TAB>key<TAB>value` (the field order of Kafka's console
    /// consumer, which prints `CreateTime:timestamp_ms`), which `produce --timestamps` reads
    /// back. With --latest-per-key, the timestamp of each key's latest record.
    #[arg(long)]
    print_timestamps: bool,
}

/// Appends `record`'s headers field to `out`, as Kafka's `DefaultMessageFormatter` prints it:
/// `key:value` joined by `,` (a null value is `null`, its `null.literal`), or `NO_HEADERS`.
fn render_headers(record: &Record, out: &mut Vec<u8>) {
    if record.header_count() == 0 {
        out.extend_from_slice(NO_HEADERS.as_bytes());
        return;
    }
    for (i, header) in record.headers().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Kafka's header keys are strings: invalid UTF-8 is replaced, as Java's decoder does.
        out.extend_from_slice(String::from_utf8_lossy(&header.key).as_bytes());
        out.push(b':');
        out.extend_from_slice(header.value.as_deref().unwrap_or(b"null"));
    }
}

fn render(serde: ValueSerde, value: Option<&[u8]>) -> String {
    let Some(bytes) = value else {
        return "null".into();
    };
    match serde {
        ValueSerde::String => String::from_utf8_lossy(bytes).into_owned(),
        ValueSerde::Long => match <[u8; 8]>::try_from(bytes) {
            Ok(b) => i64::from_be_bytes(b).to_string(),
            Err(_) => format!("<not a long: {} bytes>", bytes.len()),
        },
        ValueSerde::Bytes => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        ValueSerde::Json => match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v) => v.to_string(),
            Err(e) => format!("<invalid json: {e}>"),
        },
    }
}

/// A key's latest record, for --latest-per-key: its value and what is printed before its key
/// (with --print-timestamps its timestamp, with --print-headers its headers field, each with
/// the tab after it).
struct Latest {
    value: Option<Vec<u8>>,
    prefix: Vec<u8>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let key_format = KeyFormat::new(args.key_serde, args.window_size)?;
    let log = Log::open_read_only(&args.log_dir, LogOptions::default())
        .with_context(|| format!("opening the log at {}", args.log_dir.display()))?;
    let partitions = log.partitions(&args.topic).with_context(|| {
        format!(
            "topic {} does not exist in {}",
            args.topic,
            args.log_dir.display()
        )
    })?;
    let follow = args.follow || !args.from_beginning;
    // Ctrl-C ends a follow cleanly: what was read is printed (and the latest values, with
    // --latest-per-key), and the exit status is 0.
    let stop = Arc::new(AtomicBool::new(false));
    if follow {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
            .context("installing the Ctrl-C handler")?;
    }
    let mut positions = Vec::new();
    for p in 0..partitions {
        let tp = TopicPartition::new(args.topic.as_str(), p);
        let start = if args.from_beginning {
            log.start_offset(&tp)?
        } else {
            log.end_offset(&tp)?
        };
        positions.push((tp, start));
    }
    let mut latest: BTreeMap<Vec<u8>, Latest> = BTreeMap::new();
    let mut prefix = Vec::new();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // Partitions that may hold records past their position: all at first, then (following)
    // only those the log names as appended to, so a wake-up costs O(partitions appended to).
    let mut ready: BTreeSet<usize> = (0..positions.len()).collect();
    let mut seen = log.append_version();
    let mut changed = Vec::new();
    let mut drained = Vec::new();
    loop {
        let mut got = false;
        drained.clear();
        for &i in &ready {
            let (tp, position) = &mut positions[i];
            let batches = log.fetch(tp, *position, 1 << 20)?;
            if batches.is_empty() {
                drained.push(i);
            }
            let mut expected = *position;
            for (i, batch) in batches.into_iter().enumerate() {
                // The first batch holds the position; each next one starts where it ended.
                let (first, next) = (batch.base_offset(), batch.last_offset() + 1);
                if first > expected || next <= expected || (i > 0 && first != expected) {
                    anyhow::bail!(
                        "{tp}: the log returned a batch of offsets {first}..{next} where offset \
                         {expected} was expected"
                    );
                }
                expected = next;
                for record in batch.records() {
                    let record = record.with_context(|| {
                        format!("decoding {tp} near offset {}", batch.base_offset())
                    })?;
                    if record.offset() < *position {
                        continue;
                    }
                    got = true;
                    *position = record.offset() + 1;
                    let key = record.key().map(|k| k.to_vec()).unwrap_or_default();
                    let value = record.value().map(|v| &v[..]);
                    prefix.clear();
                    if args.print_timestamps {
                        write!(prefix, "{}\t", record.timestamp())?;
                    }
                    if args.print_headers {
                        render_headers(&record, &mut prefix);
                        prefix.push(b'\t');
                    }
                    if args.latest_per_key {
                        latest.insert(
                            key,
                            Latest {
                                value: value.map(<[u8]>::to_vec),
                                prefix: prefix.clone(),
                            },
                        );
                    } else {
                        out.write_all(&prefix)?;
                        writeln!(
                            out,
                            "{}\t{}",
                            render_key(key_format, &key),
                            render(args.value_serde, value)
                        )?;
                    }
                }
                // A compacted batch's offsets after its last record hold nothing.
                *position = (*position).max(next);
            }
        }
        for i in &drained {
            ready.remove(i);
        }
        if got && !stop.load(Ordering::Relaxed) {
            continue;
        }
        if !follow || stop.load(Ordering::Relaxed) {
            break;
        }
        out.flush()?;
        if ready.is_empty() {
            log.wait_for_append(seen, Duration::from_millis(200));
        }
        changed.clear();
        match log.appended_since(seen, &mut changed) {
            Some(now) => {
                let ours = changed.iter().filter(|tp| *tp.topic == *args.topic);
                let known = positions.len();
                ready.extend(ours.map(|tp| tp.partition as usize).filter(|&i| i < known));
                seen = now;
            }
            // The log cannot say which: look at every partition.
            None => {
                seen = log.append_version();
                ready.extend(0..positions.len());
            }
        }
    }
    // In key order as decoded (the map's byte order is that for string keys), keys too short
    // for their window last (all one `Err`); stable, so keys that decode alike stay in byte
    // order.
    let mut latest: Vec<_> = latest.iter().collect();
    latest.sort_by(|(a, _), (b, _)| split_key(key_format, a).cmp(&split_key(key_format, b)));
    for (key, Latest { value, prefix }) in latest {
        out.write_all(prefix)?;
        writeln!(
            out,
            "{}\t{}",
            render_key(key_format, key),
            render(args.value_serde, value.as_deref())
        )?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{KeyFormat, render_key, split_key};

    fn windowed(key: &[u8], start: i64) -> Vec<u8> {
        [key, &start.to_be_bytes()].concat()
    }

    fn session(key: &[u8], start: i64, end: i64) -> Vec<u8> {
        [key, &end.to_be_bytes(), &start.to_be_bytes()].concat()
    }

    #[test]
    fn windowed_keys_print_as_key_at_start_slash_end() {
        let minute = KeyFormat::Windowed { size_ms: 60_000 };
        assert_eq!(
            render_key(minute, &windowed(b"alice", 120_000)),
            "alice@120000/180000"
        );
        assert_eq!(render_key(minute, &windowed(b"", 0)), "@0/60000");
        // A tab or `@` in the key is printed as is; invalid UTF-8 is replaced.
        assert_eq!(render_key(minute, &windowed(b"a@b", 5)), "a@b@5/60005");
        assert_eq!(
            render_key(minute, &windowed(b"\xffx", 0)),
            "\u{fffd}x@0/60000"
        );
        // An end past i64::MAX is i64::MAX, as in Kafka.
        assert_eq!(
            render_key(minute, &windowed(b"k", i64::MAX - 1)),
            format!("k@{}/{}", i64::MAX - 1, i64::MAX)
        );
        assert_eq!(
            render_key(KeyFormat::SessionWindowed, &session(b"bob", 1_000, 4_500)),
            "bob@1000/4500"
        );
        assert_eq!(
            render_key(KeyFormat::SessionWindowed, &session(b"", -5, -1)),
            "@-5/-1"
        );
    }

    #[test]
    fn a_key_too_short_for_its_window_is_said_so() {
        let minute = KeyFormat::Windowed { size_ms: 60_000 };
        for len in 0..8 {
            assert_eq!(
                render_key(minute, &vec![0; len]),
                format!("<not a windowed key: {len} bytes>")
            );
            assert_eq!(split_key(minute, &vec![0; len]), Err(8));
        }
        for len in [0, 8, 15] {
            assert_eq!(
                render_key(KeyFormat::SessionWindowed, &vec![0; len]),
                format!("<not a session-windowed key: {len} bytes>")
            );
        }
        // Exactly the suffix: an empty inner key.
        assert_eq!(render_key(minute, &[0; 8]), "@0/60000");
        assert_eq!(render_key(KeyFormat::SessionWindowed, &[0; 16]), "@0/0");
        // A string key is the key, whatever its length.
        assert_eq!(render_key(KeyFormat::String, b"ab"), "ab");
    }
}
