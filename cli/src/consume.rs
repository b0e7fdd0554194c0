//! `riffle consume`: a topic's records as `key<TAB>value`; with `--print-headers`, as
//! `h1:v1,h2:v2<TAB>key<TAB>value`, the layout of Kafka's console consumer with
//! `print.key=true print.headers=true`.

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
    /// Print only the latest value of each key, sorted by key, once the end is reached.
    #[arg(long)]
    latest_per_key: bool,
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

/// A key's latest record, for --latest-per-key: its value and (with --print-headers) its
/// rendered headers field with the tab after it.
struct Latest {
    value: Option<Vec<u8>>,
    headers: Vec<u8>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
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
    let mut headers = Vec::new();
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
                    headers.clear();
                    if args.print_headers {
                        render_headers(&record, &mut headers);
                        headers.push(b'\t');
                    }
                    if args.latest_per_key {
                        latest.insert(
                            key,
                            Latest {
                                value: value.map(<[u8]>::to_vec),
                                headers: headers.clone(),
                            },
                        );
                    } else {
                        out.write_all(&headers)?;
                        writeln!(
                            out,
                            "{}\t{}",
                            String::from_utf8_lossy(&key),
                            render(args.value_serde, value)
                        )?;
                    }
                }
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
    for (key, Latest { value, headers }) in &latest {
        out.write_all(headers)?;
        writeln!(
            out,
            "{}\t{}",
            String::from_utf8_lossy(key),
            render(args.value_serde, value.as_deref())
        )?;
    }
    out.flush()?;
    Ok(())
}
