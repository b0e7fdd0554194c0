//! The snapshot-refresh fixture of KAFKA-21171, and how one refresh is measured.
//!
//! Like KAFKA-21171's JMH fixture: one stream thread owns every task; each task has one changelog
//! partition; the state directory's local offset map holds every task (seeded as opening the
//! directory does from checkpoints, without writing the files); RUNNING tasks are active and
//! omitted from the final snapshot; RESTORING tasks are held by a state updater that is never
//! ticked (the thread is not started), so only their seeded positions are live.
//!
//! Between two refreshes, `changed` tasks advance, as each state does in a running application:
//! a RESTORING task's changelog position moves (the updater's progress, [`LiveOffsets`]); a
//! RUNNING task commits (its position and its checkpoint's sum in the local offset map move, as
//! `ThreadSnapshot::committed` does). That work is never inside the timed region.

use std::collections::BTreeMap;
use std::fmt;
use std::hint::black_box;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use riffle_state_dir::{Durability, StateDirectory, StateDirectoryConfig, TaskId, TopicPartition};
use riffle_task_manager::{
    BoxError, ChangelogRecord, DEFAULT_RESTORE_BATCH, LiveOffsets, OffsetSumSnapshot,
    RestoreTarget, SnapshotStrategy, StateUpdater, TaskKind, TaskRegistry, TaskState, UpdaterTask,
    full_rebuild,
};

use crate::alloc::thread_totals;

/// The state every task of a fixture is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FixtureState {
    /// Active and RUNNING: omitted from the final snapshot.
    Running,
    /// Active and RESTORING, held by the (unstarted) state updater: reports its live sum.
    Restoring,
}

impl fmt::Display for FixtureState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Running => "running",
            Self::Restoring => "restoring",
        })
    }
}

impl FromStr for FixtureState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "running" => Ok(Self::Running),
            "restoring" => Ok(Self::Restoring),
            other => Err(format!(
                "unknown task state {other:?}: expected running or restoring"
            )),
        }
    }
}

/// Where the never-started updater would put restored records.
struct Discard;

impl RestoreTarget for Discard {
    fn apply(&mut self, _: &TopicPartition, _: &[ChangelogRecord]) -> Result<(), BoxError> {
        Ok(())
    }
}

/// The largest fixture [`SnapshotFixture::build`] accepts (task partitions are `u32`, and each
/// task costs a few hundred bytes).
pub const MAX_TASKS: usize = 10_000_000;

/// One stream thread's snapshot inputs with `tasks` tasks, and its [`OffsetSumSnapshot`].
pub struct SnapshotFixture {
    state: FixtureState,
    tasks: Vec<TaskId>,
    changelogs: Vec<TopicPartition>,
    offsets: Vec<u64>,
    /// The next task to advance: changes walk round the task set.
    next: usize,
    registry: TaskRegistry,
    live: Arc<LiveOffsets>,
    /// Holds the RESTORING tasks; never ticked.
    updater: StateUpdater,
    snapshot: OffsetSumSnapshot,
    state_dir: Arc<StateDirectory>,
    // Last: the directory is removed after the `StateDirectory` (and its lock) is dropped.
    _root: tempfile::TempDir,
}

impl fmt::Debug for SnapshotFixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotFixture")
            .field("tasks", &self.tasks.len())
            .field("state", &self.state)
            .field("strategy", &self.snapshot.strategy())
            .finish_non_exhaustive()
    }
}

/// What [`SnapshotFixture::measure`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Refreshes timed.
    pub ops: u64,
    /// Mean wall time of one refresh, in nanoseconds (timer reads included; see
    /// [`timer_overhead`]).
    pub ns_per_op: f64,
    /// Mean bytes allocated by one refresh (0 unless the counting allocator is installed).
    pub bytes_per_op: f64,
    /// Mean allocations made by one refresh (0 unless the counting allocator is installed).
    pub allocs_per_op: f64,
}

impl SnapshotFixture {
    /// Builds the fixture with `tasks` tasks in `state`, and does the first (full) refresh.
    pub fn build(
        tasks: usize,
        state: FixtureState,
        strategy: SnapshotStrategy,
    ) -> Result<Self, BoxError> {
        if tasks > MAX_TASKS {
            return Err(format!("{tasks} tasks: at most {MAX_TASKS} are supported").into());
        }
        let root = tempfile::Builder::new()
            .prefix("riffle-snapshot-bench-")
            .tempdir()?;
        let config = StateDirectoryConfig {
            durability: Durability::Buffered,
            ..StateDirectoryConfig::default()
        };
        let state_dir = StateDirectory::open_with(root.path(), "snapshot-bench", config)?;
        let mut fixture = Self {
            state,
            tasks: Vec::with_capacity(tasks),
            changelogs: Vec::with_capacity(tasks),
            offsets: Vec::with_capacity(tasks),
            next: 0,
            registry: TaskRegistry::new(),
            live: Arc::new(LiveOffsets::new()),
            updater: StateUpdater::new(DEFAULT_RESTORE_BATCH),
            snapshot: OffsetSumSnapshot::new(strategy),
            state_dir,
            _root: root,
        };
        for partition in 0..tasks {
            let partition = u32::try_from(partition)?;
            fixture.tasks.push(TaskId::new(0, partition));
            fixture.changelogs.push(TopicPartition::new(
                "snapshot-bench-store-changelog",
                partition,
            ));
            fixture.offsets.push(1_000 + u64::from(partition));
        }
        // The local offset map holds every task, as after opening a directory whose task
        // directories all have checkpoints (one lock, no files: KAFKA-21171's JMH fixture does no I/O).
        fixture.state_dir.local_offsets().update(|map| {
            for (task, offset) in fixture.tasks.iter().zip(&fixture.offsets) {
                map.set(*task, Some(*offset as i64));
            }
        });
        for i in 0..tasks {
            let (task, changelog, offset) = (
                fixture.tasks[i],
                fixture.changelogs[i].clone(),
                fixture.offsets[i],
            );
            let registry = &mut fixture.registry;
            registry.add(task, TaskKind::Active, vec![changelog.clone()])?;
            registry.transition(task, TaskState::Restoring)?;
            match state {
                FixtureState::Restoring => {
                    let positions = BTreeMap::from([(changelog, offset)]);
                    let held = UpdaterTask {
                        id: task,
                        kind: TaskKind::Active,
                        positions,
                        limits: Default::default(),
                        target: Box::new(Discard),
                    };
                    // Reports the starting position to the live offsets.
                    fixture.updater.add(held, &fixture.live);
                }
                FixtureState::Running => {
                    // Restored up to its checkpoint, then RUNNING.
                    fixture.live.set(task, &changelog, offset);
                    registry.transition(task, TaskState::Running)?;
                }
            }
        }
        fixture.refresh();
        Ok(fixture)
    }

    /// Number of tasks.
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The tasks' state.
    pub fn state(&self) -> FixtureState {
        self.state
    }

    /// The snapshot's strategy.
    pub fn strategy(&self) -> SnapshotStrategy {
        self.snapshot.strategy()
    }

    /// Tasks held by the (unstarted) state updater.
    pub fn held_by_updater(&self) -> usize {
        self.updater.len()
    }

    /// Advances the changelog offsets of the next `k` tasks (wrapping round the task set).
    pub fn advance(&mut self, k: usize) {
        if self.tasks.is_empty() {
            return;
        }
        for _ in 0..k {
            let i = self.next;
            self.next = (i + 1) % self.tasks.len();
            self.offsets[i] += 1;
            let (task, offset) = (self.tasks[i], self.offsets[i]);
            self.live.set(task, &self.changelogs[i], offset);
            if self.state == FixtureState::Running {
                // A commit of a RUNNING task rewrites its checkpoint.
                self.state_dir
                    .local_offsets()
                    .set(task, Some(offset as i64));
            }
        }
    }

    /// One refresh, as the stream thread does on every loop iteration.
    pub fn refresh(&mut self) -> bool {
        self.snapshot
            .refresh(&self.registry, &self.state_dir, &self.live)
    }

    /// `ops` refreshes, each after [`advance`](Self::advance)`(changed)`; returns the time spent
    /// in the refreshes (and timer reads) only, and the bytes and allocations they made.
    fn run(&mut self, changed: usize, ops: u64) -> (Duration, u64, u64) {
        if changed == 0 {
            // Nothing to do between refreshes: time them as one batch.
            let (b0, c0) = thread_totals();
            let start = Instant::now();
            for _ in 0..ops {
                black_box(self.refresh());
            }
            let spent = start.elapsed();
            let (b1, c1) = thread_totals();
            return (spent, b1 - b0, c1 - c0);
        }
        let (mut spent, mut bytes, mut allocs) = (Duration::ZERO, 0, 0);
        for _ in 0..ops {
            self.advance(changed);
            let (b0, c0) = thread_totals();
            let start = Instant::now();
            black_box(self.refresh());
            spent += start.elapsed();
            let (b1, c1) = thread_totals();
            bytes += b1 - b0;
            allocs += c1 - c0;
        }
        (spent, bytes, allocs)
    }

    /// Time spent in `ops` refreshes, each after `changed` tasks advanced (untimed): for
    /// criterion's `iter_custom`.
    pub fn timed_refreshes(&mut self, changed: usize, ops: u64) -> Duration {
        self.run(changed, ops).0
    }

    /// Warms up for `warmup`, then measures refreshes (each after `changed` tasks advanced) for
    /// at least `budget` of wall time and at least `min_ops` refreshes. `progress` is told the
    /// fraction of the budget used so far.
    pub fn measure(
        &mut self,
        changed: usize,
        warmup: Duration,
        budget: Duration,
        min_ops: u64,
        progress: &mut dyn FnMut(f64),
    ) -> Measurement {
        // Batches of about a millisecond, so the loop's own bookkeeping (and, with nothing
        // changed, the timer) stays negligible; finding the size is part of the warm-up.
        let mut batch = 1u64;
        loop {
            let t = Instant::now();
            self.run(changed, batch);
            if t.elapsed() >= Duration::from_millis(1) || batch >= 1 << 24 {
                break;
            }
            batch *= 2;
        }
        let started = Instant::now();
        while started.elapsed() < warmup {
            self.run(changed, batch);
        }
        let (mut ops, mut spent, mut bytes, mut allocs) = (0u64, Duration::ZERO, 0u64, 0u64);
        let started = Instant::now();
        while started.elapsed() < budget || ops < min_ops {
            let (s, b, a) = self.run(changed, batch);
            ops += batch;
            spent += s;
            bytes += b;
            allocs += a;
            progress((started.elapsed().as_secs_f64() / budget.as_secs_f64().max(1e-9)).min(1.0));
        }
        let per_op = |total: f64| total / ops.max(1) as f64;
        Measurement {
            ops,
            ns_per_op: per_op(spent.as_nanos() as f64),
            bytes_per_op: per_op(bytes as f64),
            allocs_per_op: per_op(allocs as f64),
        }
    }

    /// Whether the published snapshot equals a full rebuild of the current inputs, and has the
    /// size the fixture implies (empty when RUNNING, every task when RESTORING). Meaningful
    /// right after a refresh (as [`measure`](Self::measure) and
    /// [`timed_refreshes`](Self::timed_refreshes) leave it): nothing else writes the inputs.
    pub fn matches_full_rebuild(&self) -> bool {
        let local = self.state_dir.local_offsets().view().sums;
        let live = self.live.sums().view().sums;
        let expected_len = match self.state {
            FixtureState::Running => 0,
            FixtureState::Restoring => self.tasks.len(),
        };
        *self.snapshot.map() == full_rebuild(&self.registry, &local, &live)
            && self.snapshot.map().len() == expected_len
    }
}

/// The mean cost of one `Instant::now()` + `elapsed()` pair, in nanoseconds: the bias of a
/// refresh timed on its own (rows with changed tasks).
pub fn timer_overhead() -> f64 {
    const N: u32 = 200_000;
    let start = Instant::now();
    for _ in 0..N {
        black_box(black_box(Instant::now()).elapsed());
    }
    start.elapsed().as_nanos() as f64 / f64::from(N)
}
