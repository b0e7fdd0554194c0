//! The state updater restores active tasks and hands them back, follows standbys, and reports
//! positions to `LiveOffsets` — driven directly (pure core) and on its own thread.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use riffle_state_dir::{TaskId, TopicPartition};
use riffle_task_manager::{
    BoxError, ChangelogReader, ChangelogRecord, Error, LiveOffsets, RestoreTarget, StateUpdater,
    StateUpdaterConfig, StateUpdaterThread, TaskKind, UpdaterEvent, UpdaterTask,
};

/// Changelogs as in-memory vectors, shared so a test can append while the updater runs.
#[derive(Clone, Default)]
struct MemoryChangelogs(Arc<Mutex<HashMap<TopicPartition, Vec<ChangelogRecord>>>>);

impl MemoryChangelogs {
    fn append(&self, partition: &TopicPartition, n: u64) {
        let mut logs = self.0.lock().expect("lock");
        let log = logs.entry(partition.clone()).or_default();
        for _ in 0..n {
            let offset = log.len() as u64;
            log.push(ChangelogRecord {
                offset,
                key: Some(offset.to_be_bytes().to_vec()),
                value: Some(b"v".to_vec()),
                timestamp: 0,
            });
        }
    }
}

impl ChangelogReader for MemoryChangelogs {
    fn end_offset(&mut self, partition: &TopicPartition) -> Result<u64, BoxError> {
        let logs = self.0.lock().map_err(|_| "poisoned")?;
        Ok(logs.get(partition).map_or(0, |l| l.len() as u64))
    }

    fn read(
        &mut self,
        partition: &TopicPartition,
        from: u64,
        max: usize,
        out: &mut Vec<ChangelogRecord>,
    ) -> Result<(), BoxError> {
        if &*partition.topic == "broken" {
            return Err("broker unreachable".into());
        }
        let logs = self.0.lock().map_err(|_| "poisoned")?;
        let log = logs.get(partition).map_or(&[][..], Vec::as_slice);
        out.extend(log.iter().skip(from as usize).take(max).cloned());
        Ok(())
    }
}

/// A store that counts what it was given.
#[derive(Clone, Default)]
struct CountingStore(Arc<Mutex<BTreeMap<TopicPartition, usize>>>);

impl RestoreTarget for CountingStore {
    fn apply(&mut self, p: &TopicPartition, records: &[ChangelogRecord]) -> Result<(), BoxError> {
        *self
            .0
            .lock()
            .map_err(|_| "poisoned")?
            .entry(p.clone())
            .or_default() += records.len();
        Ok(())
    }
}

fn cl(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn task(
    id: TaskId,
    kind: TaskKind,
    parts: &[(TopicPartition, u64)],
    store: &CountingStore,
) -> UpdaterTask {
    UpdaterTask {
        id,
        kind,
        positions: parts.iter().cloned().collect(),
        limits: BTreeMap::new(),
        target: Box::new(store.clone()),
    }
}

#[test]
fn an_active_task_restores_a_limited_partition_only_up_to_its_limit() {
    // A table's source topic serves as its changelog: restored up to the committed offset
    // (12), not to its end (30); a standby follows it to the end.
    let logs = MemoryChangelogs::default();
    let source = cl("customers", 0);
    logs.append(&source, 30);
    let live = LiveOffsets::new();
    let store = CountingStore::default();
    let id = TaskId::new(0, 0);
    let mut updater = StateUpdater::new(5);
    let mut active = task(id, TaskKind::Active, &[(source.clone(), 0)], &store);
    active.limits.insert(source.clone(), 12);
    updater.add(active, &live);
    let mut reader = logs.clone();
    let mut handed_back = None;
    for _ in 0..10 {
        let (events, _) = updater.tick(&mut reader, &live);
        if let Some(UpdaterEvent::Restored(t)) = events.into_iter().next() {
            handed_back = Some(t);
            break;
        }
    }
    let back = handed_back.expect("restored up to the limit and handed back");
    assert_eq!(back.positions.get(&source), Some(&12));
    assert_eq!(store.0.lock().expect("lock").get(&source), Some(&12));

    let standby_store = CountingStore::default();
    let standby_id = TaskId::new(0, 1);
    let mut standby = task(
        standby_id,
        TaskKind::Standby,
        &[(source.clone(), 0)],
        &standby_store,
    );
    standby.limits.insert(source.clone(), 12);
    updater.add(standby, &live);
    for _ in 0..10 {
        updater.tick(&mut reader, &live);
    }
    assert_eq!(live.get(standby_id, &source), Some(30));
}

#[test]
fn active_task_is_restored_in_batches_then_handed_back() {
    let logs = MemoryChangelogs::default();
    let (a, b) = (cl("app-a-changelog", 0), cl("app-b-changelog", 0));
    logs.append(&a, 25);
    logs.append(&b, 3);
    let live = LiveOffsets::new();
    let store = CountingStore::default();
    let id = TaskId::new(0, 0);
    let mut updater = StateUpdater::new(10);
    // Resume `a` from its checkpointed offset 5.
    updater.add(
        task(
            id,
            TaskKind::Active,
            &[(a.clone(), 5), (b.clone(), 0)],
            &store,
        ),
        &live,
    );
    assert_eq!(
        live.sum(id),
        Some(5),
        "starting positions are reported at once"
    );

    let mut reader = logs.clone();
    let (events, _) = updater.tick(&mut reader, &live);
    assert!(events.is_empty());
    assert_eq!((live.get(id, &a), live.get(id, &b)), (Some(15), Some(3)));
    // The second batch reaches `a`'s end: the task goes back to the stream thread.
    let (events, _) = updater.tick(&mut reader, &live);
    assert_eq!(live.sum(id), Some(28));
    match events.as_slice() {
        [UpdaterEvent::Restored(t)] => {
            assert_eq!(t.id, id);
            assert_eq!(t.positions.get(&a), Some(&25));
        }
        other => panic!("expected the task back, got {other:?}"),
    }
    assert!(updater.is_empty(), "a restored task leaves the updater");
    assert_eq!(store.0.lock().expect("lock").get(&a), Some(&20));
}

#[test]
fn standby_follows_its_changelog_and_is_never_handed_back() {
    let logs = MemoryChangelogs::default();
    let c = cl("app-s-changelog", 1);
    logs.append(&c, 4);
    let live = LiveOffsets::new();
    let store = CountingStore::default();
    let id = TaskId::new(2, 1);
    let mut updater = StateUpdater::new(100);
    updater.add(
        task(id, TaskKind::Standby, &[(c.clone(), 0)], &store),
        &live,
    );
    let mut reader = logs.clone();
    for _ in 0..3 {
        assert!(updater.tick(&mut reader, &live).0.is_empty());
    }
    assert_eq!(live.sum(id), Some(4));
    let v = live.version();
    updater.tick(&mut reader, &live);
    assert_eq!(
        live.version(),
        v,
        "caught up: no progress, no version change"
    );
    logs.append(&c, 6);
    updater.tick(&mut reader, &live);
    assert_eq!(live.sum(id), Some(10));
    assert!(updater.remove(id).is_some());
    assert!(updater.is_empty());
}

#[test]
fn a_failing_changelog_hands_the_task_back_with_the_error() {
    let live = LiveOffsets::new();
    let store = CountingStore::default();
    let id = TaskId::new(0, 9);
    let mut logs = MemoryChangelogs::default();
    logs.append(&cl("broken", 0), 1);
    let mut updater = StateUpdater::new(10);
    updater.add(
        task(id, TaskKind::Active, &[(cl("broken", 0), 0)], &store),
        &live,
    );
    match updater.tick(&mut logs, &live).0.as_slice() {
        [
            UpdaterEvent::Failed {
                task,
                error: e @ Error::Changelog { .. },
            },
        ] => {
            assert_eq!(task.id, id);
            assert!(e.to_string().contains("task 0_9"), "{e}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn updater_thread_restores_reports_and_hands_back() -> Result<(), Error> {
    let logs = MemoryChangelogs::default();
    let (a, s) = (cl("app-a-changelog", 0), cl("app-s-changelog", 0));
    logs.append(&a, 50);
    logs.append(&s, 5);
    let live = Arc::new(LiveOffsets::new());
    let config = StateUpdaterConfig {
        batch_size: 7,
        idle_wait: Duration::from_millis(1),
        ..StateUpdaterConfig::default()
    };
    let updater = StateUpdaterThread::spawn(config, Box::new(logs.clone()), Arc::clone(&live))?;
    let store = CountingStore::default();
    let (active, standby) = (TaskId::new(0, 0), TaskId::new(1, 0));
    updater.add(task(active, TaskKind::Active, &[(a.clone(), 0)], &store))?;
    updater.add(task(standby, TaskKind::Standby, &[(s.clone(), 0)], &store))?;

    let mut events = Vec::new();
    let restored = wait_for("restoration", || {
        updater.drain_events(&mut events).ok()?;
        events.pop()
    });
    assert!(matches!(restored, UpdaterEvent::Restored(ref t) if t.id == active));
    assert_eq!(live.sum(active), Some(50));

    wait_for("standby to catch up", || {
        (live.sum(standby) == Some(5)).then_some(())
    });
    logs.append(&s, 10);
    wait_for("standby to follow", || {
        (live.sum(standby) == Some(15)).then_some(())
    });

    let back = updater.remove(standby)?.expect("standby still held");
    assert_eq!(back.positions.get(&s), Some(&15));
    assert!(updater.remove(standby)?.is_none());
    updater.shutdown()
}

#[test]
fn updater_thread_is_named() -> Result<(), Error> {
    struct NameCheck(Arc<Mutex<Option<String>>>);
    impl ChangelogReader for NameCheck {
        fn end_offset(&mut self, _: &TopicPartition) -> Result<u64, BoxError> {
            *self.0.lock().map_err(|_| "poisoned")? =
                std::thread::current().name().map(str::to_owned);
            Ok(0)
        }
        fn read(
            &mut self,
            _: &TopicPartition,
            _: u64,
            _: usize,
            _: &mut Vec<ChangelogRecord>,
        ) -> Result<(), BoxError> {
            Ok(())
        }
    }
    let name = Arc::new(Mutex::new(None));
    let live = Arc::new(LiveOffsets::new());
    let updater = StateUpdaterThread::spawn(
        StateUpdaterConfig::default(),
        Box::new(NameCheck(Arc::clone(&name))),
        live,
    )?;
    updater.add(task(
        TaskId::new(0, 0),
        TaskKind::Standby,
        &[(cl("c", 0), 0)],
        &CountingStore::default(),
    ))?;
    let seen = wait_for("a read", || name.lock().ok()?.clone());
    assert_eq!(seen, "riffle-state-updater");
    drop(updater); // joins
    Ok(())
}

#[test]
fn snapshot_follows_the_updater_thread_and_always_equals_the_full_rebuild() -> Result<(), Error> {
    use riffle_task_manager::{
        OffsetSumSnapshot, SnapshotStrategy, TaskRegistry, TaskState, full_rebuild,
    };
    let root = tempfile::tempdir().expect("tempdir");
    let dir = riffle_state_dir::StateDirectory::open(root.path(), "app")?;
    let logs = MemoryChangelogs::default();
    let (a, s) = (cl("app-a-changelog", 0), cl("app-s-changelog", 0));
    logs.append(&a, 2_000);
    logs.append(&s, 300);
    let live = Arc::new(LiveOffsets::new());
    let config = StateUpdaterConfig {
        batch_size: 10,
        idle_wait: Duration::from_millis(1),
        ..StateUpdaterConfig::default()
    };
    let updater = StateUpdaterThread::spawn(config, Box::new(logs.clone()), Arc::clone(&live))?;
    let (active, standby) = (TaskId::new(0, 0), TaskId::new(1, 0));
    let mut registry = TaskRegistry::new();
    registry.add(active, TaskKind::Active, vec![a.clone()])?;
    registry.add(standby, TaskKind::Standby, vec![s.clone()])?;
    for t in [active, standby] {
        registry.transition(t, TaskState::Restoring)?;
    }
    let store = CountingStore::default();
    updater.add(task(active, TaskKind::Active, &[(a.clone(), 0)], &store))?;
    updater.add(task(standby, TaskKind::Standby, &[(s.clone(), 0)], &store))?;

    // The stream thread's loop: hand restored tasks over, refresh, check.
    let mut snapshot = OffsetSumSnapshot::new(SnapshotStrategy::Incremental);
    snapshot.retain_inputs(true); // checked against the inputs it read, while the updater writes
    let mut events = Vec::new();
    let mut versions_seen = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while registry.get(active).map(|t| t.state) != Some(TaskState::Running) {
        assert!(Instant::now() < deadline, "restoration did not finish");
        updater.drain_events(&mut events)?;
        for e in events.drain(..) {
            if let UpdaterEvent::Restored(t) = e {
                registry.transition(t.id, TaskState::Running)?;
            }
        }
        if snapshot.refresh(&registry, &dir, &live) {
            versions_seen += 1;
        }
        let (local, live_view) = snapshot.inputs().expect("refreshed");
        assert_eq!(
            snapshot.map(),
            &full_rebuild(&registry, &local.sums, &live_view.sums)
        );
    }
    wait_for("standby to catch up", || {
        (live.sum(standby) == Some(300)).then_some(())
    });
    snapshot.refresh(&registry, &dir, &live);
    let (_, published) = snapshot.published();
    // The restored active task is RUNNING, hence omitted; the standby reports its position.
    assert_eq!(published.get(&active), None);
    assert_eq!(published.get(&standby), Some(&300));
    assert!(versions_seen > 1, "progress was published along the way");
    updater.shutdown()
}
