//! Every persistent store of an instance lives in one fjall database, `<app dir>/stores/`. When
//! fjall cannot open it (a damaged journal, a damaged format marker, files deleted in part), the
//! application does not start, and its error names the file concerned and the way out: delete
//! the directory, and every store restores from its changelog; which is then checked, the counts
//! exact against a `HashMap` count of every input record. A keyspace whose directory was deleted
//! (fjall opens the database without it) is never taken for an empty store while its positions
//! say otherwise: the stores it held restore from their changelogs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::run_persistent_count as run;
use riffle::log::{Log, LogOptions};
use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};

struct Fixture {
    dir: tempfile::TempDir,
    state: PathBuf,
    log: Log,
    all: Vec<(String, String)>,
}

impl Fixture {
    /// A count over 3000 records, run and closed.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
        let mut f = Fixture {
            dir,
            state,
            log,
            all: Vec::new(),
        };
        f.produce(3000);
        assert_eq!(run(&f.log, &f.state), (3000, 0));
        f
    }

    fn produce(&mut self, n: usize) {
        let records: Vec<(String, String)> = (0..n)
            .map(|i| (format!("k{}", i % 41), String::new()))
            .collect();
        common::produce(&self.log, "in", 2, &records);
        self.all.extend(records);
    }

    fn stores(&self) -> PathBuf {
        self.state.join("durable").join("stores")
    }

    /// The error the application fails to start with.
    fn start_error(&self) -> String {
        let mut config = StreamsConfig::new("durable");
        config.state_dir = self.state.clone();
        let app = StreamsApp::new(
            common::persistent_count_topology(),
            config,
            EmbeddedBackend::new(self.log.clone()).shared(),
        );
        match app {
            Ok(mut app) => match app.start() {
                Ok(()) => {
                    let _ = app.close();
                    panic!("the application started")
                }
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        }
    }

    /// Checks `error` names `file` and the way out, takes the way out (deletes the stores), and
    /// checks the count restores exactly.
    fn assert_way_out(&mut self, error: &str, file: &Path) {
        let stores = self.stores();
        assert!(
            error.contains(&file.display().to_string()),
            "names {}: {error}",
            file.display()
        );
        assert!(
            error.contains(&format!("delete {}", stores.display()))
                && error.contains("restores from its changelog"),
            "says the way out: {error}"
        );
        std::fs::remove_dir_all(&stores).unwrap();
        self.produce(200);
        let (processed, restored) = run(&self.log, &self.state);
        assert_eq!(processed, 200);
        assert!(restored > 0, "restored from the changelogs");
        self.assert_exact("after taking the way out");
    }

    fn assert_exact(&self, when: &str) {
        let model = common::count_model(self.all.iter().map(|(k, _)| k.as_str()));
        assert_eq!(common::latest_longs(&self.log, "out"), model, "{when}");
    }

    /// The keyspace directories under `stores/keyspaces`, by number.
    fn keyspace(&self, n: u32) -> PathBuf {
        self.stores().join("keyspaces").join(n.to_string())
    }
}

/// Flips a byte `at` in `file`.
fn flip(file: &Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x5A]).unwrap();
}

#[test]
fn a_journal_with_a_flipped_byte_is_named_with_the_way_out() {
    let mut f = Fixture::new();
    let mut journals: Vec<PathBuf> = std::fs::read_dir(f.stores())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .collect();
    journals.sort();
    let journal = journals.last().unwrap().clone();
    // A byte of a value (a changelog position names its changelog), not of an entry's header
    // (whose lengths fjall checks with debug assertions before the checksum).
    let held = std::fs::read(&journal).unwrap();
    let topic = b"changelog";
    let at = held
        .windows(topic.len())
        .position(|w| w == topic)
        .expect("a position in the journal");
    flip(&journal, at as u64);
    let error = f.start_error();
    assert!(error.contains("journal"), "{error}");
    f.assert_way_out(&error, &journal);
}

/// A table file of fjall's deleted: `Storage(Unrecoverable)`, named by its keyspaces' directory.
#[test]
fn a_deleted_table_file_is_named_with_the_way_out() {
    let mut f = Fixture::new();
    let keyspaces = f.stores().join("keyspaces");
    let table = std::fs::read_dir(&keyspaces)
        .unwrap()
        .map(|e| e.unwrap().path().join("tables"))
        .filter(|tables| tables.is_dir())
        .flat_map(|tables| {
            std::fs::read_dir(tables)
                .unwrap()
                .map(|e| e.unwrap().path())
        })
        .next()
        .expect("a table file");
    std::fs::remove_file(&table).unwrap();
    let error = f.start_error();
    assert!(error.contains("damaged or incomplete"), "{error}");
    f.assert_way_out(&error, &keyspaces);
}

#[test]
fn a_damaged_format_marker_is_named_with_the_way_out() {
    let mut f = Fixture::new();
    let marker = f.stores().join("version");
    std::fs::write(&marker, b"garbage!").unwrap();
    let error = f.start_error();
    f.assert_way_out(&error, &marker);
}

#[test]
fn a_deleted_format_marker_is_named_with_the_way_out() {
    let mut f = Fixture::new();
    let marker = f.stores().join("version");
    std::fs::remove_file(&marker).unwrap();
    let error = f.start_error();
    f.assert_way_out(&error, &marker);
}

#[test]
fn a_keyspace_directory_of_another_name_is_named_with_the_way_out() {
    let mut f = Fixture::new();
    let stray = f.stores().join("keyspaces").join("copy of 1");
    std::fs::create_dir(&stray).unwrap();
    let error = f.start_error();
    f.assert_way_out(&error, &stray);
}

/// Each keyspace directory deleted in turn (0: fjall's own, 1: the key-value stores' entries,
/// 2: the registry of store ids and positions): the stores restore what it held, and count
/// exactly. (Before, deleting `keyspaces/1` left the positions over no data: the stores
/// started empty from where the positions said, and counted from there.)
#[test]
fn a_deleted_keyspace_directory_is_restored_from_the_changelogs_not_taken_for_empty() {
    for n in [0, 1, 2] {
        let mut f = Fixture::new();
        let keyspace = f.keyspace(n);
        assert!(keyspace.is_dir(), "{}", keyspace.display());
        std::fs::remove_dir_all(&keyspace).unwrap();
        f.produce(100);
        let (processed, restored) = run(&f.log, &f.state);
        assert_eq!(processed, 100);
        assert!(restored > 0, "keyspace {n}: restored from the changelogs");
        f.assert_exact(&format!("after deleting keyspace {n}"));
        // And the next restart is clean.
        f.produce(10);
        assert_eq!(run(&f.log, &f.state), (10, 0), "keyspace {n}");
        f.assert_exact(&format!("the run after deleting keyspace {n}"));
        drop(f.dir);
    }
}

mod windowed {
    //! A persistent windowed count, for the keyspaces of a window store.

    use std::collections::{BTreeMap, HashMap};
    use std::path::Path;
    use std::time::Duration;

    use riffle::log::{BatchBuilder, Compression, Log, TopicPartition};
    use riffle::{
        Consumed, EmbeddedBackend, Materialized, Produced, Serdes, StreamsApp, StreamsBuilder,
        StreamsConfig, TimeWindows, Windowed, dsl::StoreType,
    };

    pub(super) const SIZE: i64 = 100;

    /// Runs the count over what `in` holds until idle: records restored.
    pub(super) fn run(log: &Log, state: &Path) -> u64 {
        let builder = StreamsBuilder::new();
        let serde = Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE as u64));
        builder
            .stream("in", Consumed::with(Serdes::string(), Serdes::string()))
            .group_by_key()
            .windowed_by(TimeWindows::of_size_and_grace(
                Duration::from_millis(SIZE as u64),
                Duration::from_secs(30 * 60),
            ))
            .count_with(Materialized::named("windows").with_store_type(StoreType::Persistent))
            .to_stream()
            .to("out", Produced::with(serde, Serdes::i64()));
        let mut config = StreamsConfig::new("windows");
        config.state_dir = state.to_owned();
        config.num_stream_threads = 1;
        let app = StreamsApp::new(
            builder.build().unwrap(),
            config,
            EmbeddedBackend::new(log.clone()).shared(),
        )
        .unwrap();
        common_run(app)
    }

    fn common_run(mut app: StreamsApp) -> u64 {
        app.start().unwrap();
        while !app.is_idle() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let restored = app.records_restored();
        app.close().unwrap();
        restored
    }

    /// `n` records over 5 keys from time `from`, 37.5 s apart: over 25 minutes, so over two
    /// segments of 15 (half the 30-minute retention), none expired.
    pub(super) fn append(log: &Log, from: i64, n: i64, all: &mut Vec<(String, i64)>) {
        if log.partitions("in").is_none() {
            log.create_topic("in", 1).unwrap();
        }
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..n {
            let (key, ts) = (format!("k{}", i % 5), from + i * 37_501);
            b.push(ts, Some(key.as_bytes()), Some(b"v"));
            all.push((key, ts));
        }
        log.append(&TopicPartition::new("in", 0), &mut b).unwrap();
    }

    /// The latest count per (key, window start) in `out`, and the model's.
    pub(super) fn counts(log: &Log, all: &[(String, i64)]) -> [BTreeMap<(String, i64), i64>; 2] {
        let serde = Serdes::time_windowed(Serdes::string(), Duration::from_millis(SIZE as u64));
        let mut got = BTreeMap::new();
        for batch in log
            .fetch(&TopicPartition::new("out", 0), 0, usize::MAX)
            .unwrap()
        {
            for r in batch.records() {
                let r = r.unwrap();
                let k: Windowed<String> = serde.deserialize(r.key().map(|b| &b[..])).unwrap();
                let v = i64::from_be_bytes(r.value().unwrap()[..].try_into().unwrap());
                got.insert((k.key, k.window.start), v);
            }
        }
        let mut want: HashMap<(String, i64), i64> = HashMap::new();
        for (k, ts) in all {
            *want
                .entry((k.clone(), ts - ts.rem_euclid(SIZE)))
                .or_default() += 1;
        }
        [got, want.into_iter().collect()]
    }
}

/// Each keyspace directory of a window store deleted in turn (its meta keys, or one of its
/// segments), records then written into the windows counted before: the store restores what
/// it lost, and every window's count is exact. (Before, a deleted segment left the position
/// over missing data: its windows counted from zero again.)
#[test]
fn a_window_stores_deleted_keyspace_directory_is_restored_from_its_changelog() {
    let probe = tempfile::tempdir().unwrap();
    let log = Log::in_memory();
    let mut all = Vec::new();
    windowed::append(&log, 0, 40, &mut all);
    windowed::run(&log, probe.path());
    let keyspaces = probe.path().join("windows/stores/keyspaces");
    let numbers: Vec<u32> = std::fs::read_dir(&keyspaces)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .filter(|&n| n > 2)
        .collect();
    assert!(
        numbers.len() >= 3,
        "the meta keys and segments: {numbers:?}"
    );
    for n in numbers {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::in_memory();
        let mut all = Vec::new();
        windowed::append(&log, 0, 40, &mut all);
        windowed::run(&log, dir.path());
        let keyspace = dir
            .path()
            .join("windows/stores/keyspaces")
            .join(n.to_string());
        std::fs::remove_dir_all(&keyspace).unwrap();
        // Into the same windows again: each count goes on from what the store holds.
        windowed::append(&log, 0, 40, &mut all);
        let restored = windowed::run(&log, dir.path());
        assert!(restored > 0, "keyspace {n}: restored from the changelog");
        let [got, want] = windowed::counts(&log, &all);
        assert_eq!(got, want, "after deleting keyspace {n}");
    }
}
