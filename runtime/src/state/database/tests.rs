//! The shared database against a model: several tasks' stores in one database, written,
//! written back, read, wiped, deleted by task, closed and crashed (dropped unsynced), each
//! compared with a `BTreeMap` per store after every step: what reads see, and apart from it
//! what fjall holds (the writes a store has written back).

use std::collections::BTreeMap;

use proptest::prelude::*;
use riffle_state_dir::{TaskId, TopicPartition};

use super::*;
use crate::state::{BytesStore, PersistentKeyValueStore, StorePosition};

/// The stores: (task, name). Two tasks' stores sit next to each other in the shared keyspace.
const STORES: [(u32, u32, &str); 4] = [(0, 0, "a"), (0, 0, "b"), (0, 1, "a"), (1, 0, "a")];

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
enum Op {
    Write {
        store: usize,
        writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        positioned: bool,
    },
    Flush(usize),
    Persist(usize),
    Wipe(usize),
    DeleteTask(usize),
    Range(usize, Vec<u8>, Vec<u8>),
    Close,
    Crash,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Short keys over few bytes, 0x00 and 0xFF among them: the edges of a store's prefix.
    prop::collection::vec(prop_oneof![Just(0u8), Just(0xFF), 1u8..4], 0..3)
}

fn op() -> impl Strategy<Value = Op> {
    let store = 0..STORES.len();
    prop_oneof![
        8 => (
            store.clone(),
            prop::collection::vec((key(), prop::option::weighted(0.8, key())), 1..6),
            any::<bool>()
        )
            .prop_map(|(store, writes, positioned)| Op::Write {
                store,
                writes,
                positioned
            }),
        2 => store.clone().prop_map(Op::Flush),
        2 => store.clone().prop_map(Op::Persist),
        1 => store.clone().prop_map(Op::Wipe),
        1 => store.clone().prop_map(Op::DeleteTask),
        2 => (store, key(), key()).prop_map(|(s, a, b)| Op::Range(s, a, b)),
        1 => Just(Op::Close),
        1 => Just(Op::Crash),
    ]
}

fn task_of(store: usize) -> TaskId {
    TaskId::new(STORES[store].0, STORES[store].1)
}

fn position(store: usize, offset: u64) -> StorePosition {
    StorePosition {
        changelog: TopicPartition::new(format!("app-{}-changelog", STORES[store].2), 0),
        offset,
    }
}

fn open_all(db: &Arc<StoreDatabase>) -> Vec<PersistentKeyValueStore> {
    STORES
        .iter()
        .map(|&(s, p, name)| {
            PersistentKeyValueStore::open(db, TaskId::new(s, p), "kv", name).expect("open")
        })
        .collect()
}

fn contents(store: &PersistentKeyValueStore) -> Map {
    let mut map = Map::new();
    store
        .for_each(&mut |k, v| {
            map.insert(k.to_vec(), v.to_vec());
        })
        .expect("scan");
    map
}

/// A store's model: what reads see (`now`); what fjall holds, the writes written back
/// (`disk`); and what it may hold after a crash, one of the `disk` states since the last
/// sync.
#[derive(Clone, Debug, Default)]
struct Model {
    now: Map,
    disk: (Map, Option<u64>),
    since_sync: Vec<(Map, Option<u64>)>,
}

impl Model {
    fn synced(&mut self) {
        self.since_sync = vec![self.disk.clone()];
    }
    /// The store wrote everything back (`position`: the last one written).
    fn written_back(&mut self, position: Option<u64>) {
        self.disk = (self.now.clone(), position);
        self.since_sync.push(self.disk.clone());
    }
    /// The store was dropped: what it had not written back is gone.
    fn dropped(&mut self) {
        self.now = self.disk.0.clone();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `limit`: the write-back tables' bound (0: each batch is written back at once; large:
    /// only when asked; between: when the stores together pass it).
    #[test]
    fn the_shared_database_keeps_each_store_like_its_model(
        ops in prop::collection::vec(op(), 1..40),
        limit in prop_oneof![Just(0u64), Just(u64::MAX / 2), 100u64..2_000],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let budget = MemoryBudget::split(0, 0);
        let open_db = || {
            let db = StoreDatabase::open(dir.path(), budget).expect("open");
            db.set_pending_limit(limit);
            db
        };
        let mut db = open_db();
        let mut stores = open_all(&db);
        let mut models: Vec<Model> = vec![Model::default(); STORES.len()];
        models.iter_mut().for_each(Model::synced);
        // The last position given to each store since it last wrote back.
        let mut given: Vec<Option<u64>> = vec![None; STORES.len()];
        let mut offset = 0u64;
        for op in ops {
            match op {
                Op::Write { store, writes, positioned } => {
                    let mut batch = writes.iter().map(|(k, v)| (&k[..], v.as_deref()));
                    if positioned {
                        offset += 1;
                        stores[store].write_batch_at(&mut batch, &position(store, offset)).expect("write");
                        given[store] = Some(offset);
                    } else {
                        stores[store].write_batch(&mut batch).expect("write");
                    }
                    let model = &mut models[store];
                    for (k, v) in writes {
                        match v {
                            Some(v) => model.now.insert(k, v),
                            None => model.now.remove(&k),
                        };
                    }
                    if !stores[store].has_unpersisted() {
                        // Written back: the tables passed their bound.
                        let at = given[store].take().or(model.disk.1);
                        model.written_back(at);
                    }
                }
                Op::Persist(store) => {
                    stores[store].persist().expect("persist");
                    let model = &mut models[store];
                    let at = given[store].take().or(model.disk.1);
                    model.written_back(at);
                }
                Op::Flush(store) => {
                    stores[store].flush().expect("flush");
                    // One journal: every store's written-back writes are durable now.
                    models.iter_mut().for_each(Model::synced);
                }
                Op::Wipe(store) => {
                    stores[store].wipe().expect("wipe");
                    given[store] = None;
                    let model = &mut models[store];
                    // The position goes durably first; the data after it.
                    model.disk.1 = None;
                    model.synced();
                    model.now.clear();
                    model.written_back(None);
                }
                Op::DeleteTask(store) => {
                    let task = task_of(store);
                    drop(stores);
                    db.delete_task(task).expect("delete task");
                    prop_assert!(!db.tasks().contains(&task));
                    for (i, model) in models.iter_mut().enumerate() {
                        if task_of(i) == task {
                            *model = Model::default();
                        } else {
                            model.dropped();
                        }
                    }
                    models.iter_mut().for_each(Model::synced);
                    given.iter_mut().for_each(|g| *g = None);
                    stores = open_all(&db);
                }
                Op::Range(store, a, b) => {
                    let (from, to) = if a <= b { (a, b) } else { (b, a) };
                    let mut got = Vec::new();
                    stores[store].range(&from, &to, &mut |k, v| got.push((k.to_vec(), v.to_vec()))).expect("range");
                    let want: Vec<_> = models[store].now.range(from..to).map(|(k, v)| (k.clone(), v.clone())).collect();
                    prop_assert_eq!(got, want);
                    // A range read writes the store's table back first.
                    let model = &mut models[store];
                    let at = given[store].take().or(model.disk.1);
                    model.written_back(at);
                }
                Op::Close => {
                    // As a task closing cleanly: written back, then synced.
                    for store in &mut stores {
                        store.persist().expect("persist");
                        store.flush().expect("flush");
                    }
                    for (i, model) in models.iter_mut().enumerate() {
                        let at = given[i].take().or(model.disk.1);
                        model.written_back(at);
                    }
                    drop(stores);
                    drop(db);
                    db = open_db();
                    stores = open_all(&db);
                    models.iter_mut().for_each(Model::synced);
                }
                Op::Crash => {
                    drop(stores);
                    drop(db);
                    db = open_db();
                    stores = open_all(&db);
                    given.iter_mut().for_each(|g| *g = None);
                    for (i, model) in models.iter_mut().enumerate() {
                        let found = (contents(&stores[i]), stores[i].position().expect("position").map(|p| p.offset));
                        prop_assert!(
                            model.since_sync.contains(&found),
                            "store {:?} after a crash holds {:?}, none of {:?}", STORES[i], found, model.since_sync
                        );
                        model.now = found.0.clone();
                        model.disk = found;
                        model.synced();
                    }
                }
            }
            let mut out = Vec::new();
            for (i, store) in stores.iter().enumerate() {
                // Reads see every write, written back or not.
                for k in all_keys() {
                    let found = store.get_into(&k, &mut out).expect("get");
                    prop_assert_eq!(found.then(|| out.clone()), models[i].now.get(&k).cloned(), "store {:?} key {:?}", STORES[i], k);
                }
                // The recorded position is the one written back with the data.
                let recorded = store.position().expect("position");
                prop_assert_eq!(recorded.as_ref().map(|p| p.offset), models[i].disk.1);
                if let Some(p) = recorded {
                    prop_assert_eq!(p, position(i, models[i].disk.1.unwrap_or(0)));
                }
                if given[i].is_some() || models[i].now != models[i].disk.0 {
                    prop_assert!(store.has_unpersisted(), "store {:?} holds writes to write back", STORES[i]);
                }
            }
            let held: u64 = stores.iter().map(|s| s.pending_charge()).sum();
            prop_assert_eq!(db.pending_bytes(), held, "the database's count of write-back bytes");
        }
        // Everything, as a scan sees it after the last step.
        for (i, store) in stores.iter().enumerate() {
            prop_assert_eq!(&contents(store), &models[i].now, "store {:?}", STORES[i]);
        }
    }
}

/// Every key `key()` makes.
fn all_keys() -> Vec<Vec<u8>> {
    let bytes = [0u8, 1, 2, 3, 0xFF];
    let mut keys = vec![Vec::new()];
    for &a in &bytes {
        keys.push(vec![a]);
        for &b in &bytes {
            keys.push(vec![a, b]);
        }
    }
    keys
}

/// What fjall leaves when the process is killed while it creates the database: the lock,
/// an empty `keyspaces/` and a preallocated `0.jnl`, but no `version` marker.
fn unfinished_creation(dir: &Path) {
    std::fs::write(dir.join("lock"), b"").expect("lock");
    std::fs::create_dir(dir.join("keyspaces")).expect("keyspaces");
    let journal = std::fs::File::create(dir.join("0.jnl")).expect("journal");
    journal.set_len(64 << 20).expect("preallocate");
}

#[test]
fn a_database_killed_while_being_created_is_created_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    unfinished_creation(dir.path());
    let budget = MemoryBudget::split(0, 0);
    let db = StoreDatabase::open(dir.path(), budget).expect("open over the leftovers");
    let mut stores = open_all(&db);
    let mut batch = [(&b"k"[..], Some(&b"v"[..]))].into_iter();
    stores[0].write_batch(&mut batch).expect("write");
    stores[0].persist().expect("write back");
    stores[0].flush().expect("flush");
    drop(stores);
    drop(db);
    let db = StoreDatabase::open(dir.path(), budget).expect("reopen");
    let stores = open_all(&db);
    let mut out = Vec::new();
    assert!(stores[0].get_into(b"k", &mut out).expect("get"));
    assert_eq!(out, b"v");
}

#[test]
fn a_directory_without_a_version_marker_that_holds_data_is_refused_not_wiped() {
    let dir = tempfile::tempdir().expect("tempdir");
    unfinished_creation(dir.path());
    let keyspace = dir.path().join("keyspaces").join("1");
    std::fs::create_dir(&keyspace).expect("keyspace dir");
    let error = StoreDatabase::open(dir.path(), MemoryBudget::split(0, 0))
        .expect_err("a keyspace without a version marker");
    let message = error.to_string();
    assert!(message.contains("no fjall version marker"), "{message}");
    assert!(message.contains("keyspaces"), "{message}");
    assert!(keyspace.exists() && dir.path().join("0.jnl").exists());
}
