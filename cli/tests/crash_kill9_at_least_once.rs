//! `kill -9` the groupByKey-count sample at random points and restart it until
//! a run drains the input and exits normally. Every restart must succeed, and under
//! at-least-once the final counts (the output topic, latest per key) are never lower than a
//! plain count of the input — with the in-memory store (restored from the changelog on every
//! start) and with the persistent store (checkpointed). Under exactly-once they are equal.
//!
//! `RIFFLE_CRASH_KILLS` sets the kill points per scenario (default 15: 60 in CI over the two
//! at-least-once scenarios and the exactly-once one, which runs both stores);
//! `RIFFLE_CRASH_SEED` replays a failing seed (each scenario prints its seed).

mod common;

use std::time::Instant;

use common::{Fixture, assert_at_least, assert_exact, kill_and_restart, kills, rng, seed};

/// CI's kill points per scenario and store.
const CI_KILLS: usize = 15;

fn at_least_once_survives_kill_9(store: &str) {
    let scenario = format!("kill -9 at_least_once --store {store}");
    let seed = seed(&scenario);
    let mut rng = rng(seed);
    let fixture = Fixture::new();
    let start = Instant::now();
    let (model, report) = kill_and_restart(
        &fixture,
        store,
        "at_least_once",
        kills(CI_KILLS),
        &mut rng,
        seed,
    );
    let got = fixture.output_counts();
    assert_at_least(&model, &got, seed);
    let over: i64 = model.iter().map(|(k, n)| got[k] - n).sum();
    println!(
        "{scenario}: {report:?}; {} keys, {over} records counted more than once, {:.1} s",
        model.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn kill_9_at_random_points_never_loses_a_count_with_the_in_memory_store() {
    at_least_once_survives_kill_9("memory");
}

#[test]
fn kill_9_at_random_points_never_loses_a_count_with_the_persistent_store() {
    at_least_once_survives_kill_9("persistent");
}

#[test]
fn kill_9_at_random_points_under_exactly_once_gives_the_exact_counts() {
    for store in ["memory", "persistent"] {
        let scenario = format!("kill -9 exactly_once --store {store}");
        let seed = seed(&scenario);
        let mut rng = rng(seed);
        let fixture = Fixture::new();
        let (model, report) = kill_and_restart(
            &fixture,
            store,
            "exactly_once",
            kills(CI_KILLS),
            &mut rng,
            seed,
        );
        assert_exact(
            &model,
            &fixture.output_counts(),
            &format!("{scenario}, seed {seed}"),
        );
        println!("{scenario}: {report:?}");
    }
}
