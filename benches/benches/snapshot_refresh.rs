//! Criterion bench of the offset-sum snapshot refresh (KAFKA-21171's
//! `TaskOffsetSumSnapshotBenchmark.refreshSnapshot`), incremental beside full rebuild.
//!
//! A subset of `cargo run --release -p riffle-bench -- snapshot`'s grid, kept short so
//! `cargo bench -p riffle-bench` finishes in a couple of minutes; the `riffle-bench` binary runs
//! the whole grid (up to 100,000 tasks) and writes JSON and a plot. Both use the same fixture ([`SnapshotFixture`]). Only the refresh is timed:
//! the offsets that `changed` tasks advance between two refreshes are moved outside the timed
//! region (`iter_custom`).
//!
//! Criterion reports time only, so before each group this bench prints the bytes and allocations
//! per refresh counted by task-manager's counting allocator (installed below), like JMH's
//! `-prof gc`.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use riffle_bench::{FixtureState, SnapshotFixture, alloc};
use riffle_task_manager::SnapshotStrategy;
use riffle_task_manager::alloc_counter::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const STATES: [FixtureState; 2] = [FixtureState::Running, FixtureState::Restoring];
const STRATEGIES: [SnapshotStrategy; 2] =
    [SnapshotStrategy::Incremental, SnapshotStrategy::FullRebuild];

fn fixture(tasks: usize, state: FixtureState, strategy: SnapshotStrategy) -> SnapshotFixture {
    match SnapshotFixture::build(tasks, state, strategy) {
        Ok(f) => f,
        Err(e) => panic!("building the {tasks}-task {state} fixture: {e}"),
    }
}

/// Prints B/op and allocations/op of `changed`-task refreshes (criterion has no allocation
/// profiler).
fn print_allocations(f: &mut SnapshotFixture, changed: usize) {
    if !alloc::counting() {
        return;
    }
    let m = f.measure(
        changed,
        Duration::ZERO,
        Duration::from_millis(50),
        10,
        &mut |_| {},
    );
    eprintln!(
        "allocations: {} tasks {} changed {} {}: {:.0} B/op, {:.1} allocs/op",
        f.tasks(),
        f.state(),
        changed,
        f.strategy(),
        m.bytes_per_op,
        m.allocs_per_op
    );
}

fn bench_group(c: &mut Criterion, name: &str, changed: usize, sizes: &[usize]) {
    let mut group = c.benchmark_group(name);
    for &tasks in sizes {
        for state in STATES {
            for strategy in STRATEGIES {
                let mut f = fixture(tasks, state, strategy);
                print_allocations(&mut f, changed);
                let id = BenchmarkId::new(format!("{strategy}/{state}"), tasks);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| f.timed_refreshes(changed, iters));
                });
                assert!(
                    f.matches_full_rebuild(),
                    "the snapshot differs from a full rebuild"
                );
            }
        }
    }
    group.finish();
}

fn unchanged(c: &mut Criterion) {
    bench_group(c, "snapshot_refresh/unchanged", 0, &[0, 1_000, 5_000]);
}

fn one_changed(c: &mut Criterion) {
    bench_group(c, "snapshot_refresh/1_changed", 1, &[1_000, 5_000]);
}

fn hundred_changed(c: &mut Criterion) {
    bench_group(c, "snapshot_refresh/100_changed", 100, &[1_000]);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = unchanged, one_changed, hundred_changed
}
criterion_main!(benches);
