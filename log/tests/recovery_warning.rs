//! Truncating a torn tail is not silent: a `warn!` names the file, the byte position and the
//! offset where the valid data ends.

mod common;

use std::sync::{Arc, Mutex};

use common::copy_dir;
use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Collects the rendered fields of every warning.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Render(String);

impl Visit for Render {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut render = Render(String::new());
        event.record(&mut render);
        self.0.lock().expect("warnings").push(render.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn truncating_a_torn_tail_warns_with_file_position_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = TopicPartition::new("events", 0);
    let segment = dir.path().join("topics/events/0/00000000000000000000.log");
    let valid_len = {
        let log = Log::open(dir.path(), LogOptions::default()).expect("open");
        log.create_topic("events", 1).expect("create");
        let mut b = BatchBuilder::new(Compression::None);
        b.push(1, Some(b"k"), Some(b"v"));
        b.push(2, None, None);
        log.append(&tp, &mut b).expect("append");
        let len = std::fs::metadata(&segment).expect("meta").len();
        b.push(3, Some(b"k"), Some(b"torn"));
        log.append(&tp, &mut b).expect("append");
        len
    };
    let full = std::fs::metadata(&segment).expect("meta").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open");
    file.set_len(full - 3).expect("tear");
    drop(file);

    let warnings = Warnings::default();
    let log = tracing::subscriber::with_default(warnings.clone(), || {
        Log::open(dir.path(), LogOptions::default()).expect("reopen")
    });
    assert_eq!(log.end_offset(&tp).expect("end"), 2);
    let warnings = warnings.0.lock().expect("warnings").clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(w.contains(&segment.display().to_string()), "{w}");
    assert!(w.contains(&format!("position={valid_len}")), "{w}");
    assert!(w.contains("offset=2"), "{w}");
}

#[test]
fn a_torn_transaction_record_is_ignored_with_a_warning_naming_the_journal_and_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (live, before) = (dir.path().join("live"), dir.path().join("before"));
    let journal = |root: &std::path::Path| root.join("txn/journal");
    let out = TopicPartition::new("out", 0);
    let input = TopicPartition::new("in", 0);
    let commit = |log: &Log, value: &[u8], offset| {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(1, None, Some(value));
        log.commit_transaction(
            "g",
            &mut [(out.clone(), &mut b)],
            &[(input.clone(), offset)],
        )
        .expect("transaction");
    };
    let log = Log::open(&live, LogOptions::default()).expect("open");
    log.create_topic("out", 1).expect("create");
    log.create_topic("in", 1).expect("create");
    commit(&log, b"first", 1);
    // The state just before the second transaction's record was written...
    copy_dir(&live, &before);
    let committed_len = std::fs::metadata(journal(&before)).expect("meta").len();
    commit(&log, b"second", 2);
    let record = std::fs::read(journal(&live)).expect("read");
    drop(log);
    // ... with half of that record written: a crash during the journal write.
    let torn = &record[committed_len as usize..][..(record.len() - committed_len as usize) / 2];
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(journal(&before))
        .expect("open");
    std::io::Write::write_all(&mut file, torn).expect("tear");
    drop(file);

    let warnings = Warnings::default();
    let log = tracing::subscriber::with_default(warnings.clone(), || {
        Log::open(&before, LogOptions::default()).expect("reopen")
    });
    assert_eq!(log.end_offset(&out).expect("end"), 1);
    assert_eq!(log.committed_offset("g", &input).expect("offset"), Some(1));
    let warnings = warnings.0.lock().expect("warnings").clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(w.contains(&journal(&before).display().to_string()), "{w}");
    assert!(w.contains(&format!("position={committed_len}")), "{w}");
    // The log goes on from there.
    commit(&log, b"again", 3);
    assert_eq!(log.end_offset(&out).expect("end"), 2);
}
