use std::time::Duration;

use super::*;
use crate::options::LogOptions;
use riffle_record::{BatchBuilder, Compression, TopicPartition};

fn log() -> (tempfile::TempDir, Log) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open");
    (dir, log)
}

const LONG: Duration = Duration::from_secs(60);

#[test]
fn members_see_each_other_and_share_one_record() {
    let (_dir, log) = log();
    let group = log.group("app").expect("group");
    let mut a = group.join("a", LONG).expect("join a");
    let mut b = group.join("b", LONG).expect("join b");
    a.step(|s| {
        assert_eq!(s.members.keys().collect::<Vec<_>>(), ["a", "b"]);
        s.set_data(b"from a".to_vec());
        Ok::<_, Error>(())
    })
    .expect("step a");
    let seen = b
        .step(|s| Ok::<_, Error>((s.generation, s.data().to_vec())))
        .expect("step b");
    assert_eq!(seen, (1, b"from a".to_vec()));
    // Another handle on the same directory (another process, as far as the locks go).
    let other = Log::open(log.dir().expect("dir"), LogOptions::default()).expect("reopen");
    let view = other
        .describe_group("app")
        .expect("describe")
        .expect("exists");
    assert_eq!(view.data, b"from a");
    assert!(
        view.members
            .values()
            .all(|(record, alive)| *alive && record.is_some())
    );
    assert_eq!(other.member_groups().expect("groups"), ["app"]);
}

#[test]
fn a_member_whose_handle_is_gone_is_declared_exited_and_fenced() {
    let (_dir, log) = log();
    let group = log.group("app").expect("group");
    let mut a = group.join("a", LONG).expect("join a");
    // Another log handle joins and its file handle is dropped without leaving: as a process
    // killed with -9, its lock is released.
    let other = Log::open(log.dir().expect("dir"), LogOptions::default()).expect("reopen");
    let b = other
        .group("app")
        .expect("group")
        .join("b", LONG)
        .expect("join b");
    let b_path = b.path.clone();
    drop(b);
    let departed = a
        .step(|s| Ok::<_, Error>(s.departed.clone()))
        .expect("step");
    assert_eq!(
        departed,
        [Departed {
            member: "b".into(),
            reason: Departure::Exited
        }]
    );
    assert!(!b_path.exists());
}

#[test]
fn a_silent_member_is_declared_gone_and_cannot_commit() {
    let (_dir, log) = log();
    let tp = TopicPartition::new("t", 0);
    log.create_topic("t", 1).expect("topic");
    let group = log.group("app").expect("group");
    let mut a = group.join("a", LONG).expect("join a");
    let mut zombie = group.join("z", Duration::from_millis(50)).expect("join z");
    log.commit_offsets_as("app", &zombie, &[(tp.clone(), 1)])
        .expect("a live member commits");
    std::thread::sleep(Duration::from_millis(120));
    let departed = a
        .step(|s| Ok::<_, Error>(s.departed.clone()))
        .expect("step");
    assert!(matches!(
        departed.as_slice(),
        [Departed { member, reason: Departure::SessionExpired { .. } }] if member == "z"
    ));
    let err = log
        .commit_offsets_as("app", &zombie, &[(tp.clone(), 2)])
        .expect_err("fenced");
    assert!(
        matches!(err, Error::Fenced { ref member, .. } if member == "z"),
        "{err}"
    );
    let mut batch = BatchBuilder::new(Compression::None);
    batch.push(0, None, Some(b"v"));
    let err = log
        .commit_transaction_as(
            "app",
            &zombie,
            &mut [(tp.clone(), &mut batch)],
            &[(tp.clone(), 3)],
        )
        .expect_err("fenced");
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    assert_eq!(
        log.end_offset(&tp).expect("end"),
        0,
        "the zombie's transaction wrote nothing"
    );
    assert_eq!(log.committed_offset("app", &tp).expect("offset"), Some(1));
    assert!(matches!(
        zombie.step(|_| Ok::<_, Error>(())),
        Err(Error::Fenced { .. })
    ));
    // A member that leaves is gone at once.
    a.leave(|s| {
        s.set_data(Vec::new());
        Ok::<_, Error>(())
    })
    .expect("leave");
    let view = log
        .describe_group("app")
        .expect("describe")
        .expect("exists");
    assert!(view.members.is_empty());
}

#[test]
fn a_damaged_record_is_an_error_while_others_live_and_restarts_alone() {
    let (dir, log) = log();
    let group = log.group("app").expect("group");
    let mut a = group.join("a", LONG).expect("join a");
    a.step(|s| {
        s.set_data(b"x".to_vec());
        Ok::<_, Error>(())
    })
    .expect("step");
    let state = dir.path().join(MEMBERS_DIR).join("app").join(STATE_FILE);
    let mut bytes = std::fs::read(&state).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&state, &bytes).expect("write");
    let other = Log::open(dir.path(), LogOptions::default()).expect("reopen");
    let mut b = other
        .group("app")
        .expect("group")
        .join("b", LONG)
        .expect("join");
    let err = b.step(|_| Ok::<_, Error>(())).expect_err("damaged");
    assert!(
        matches!(err, Error::Corrupt { ref path, .. } if path == &state),
        "{err}"
    );
    drop(a);
    let data = b
        .step(|s| Ok::<_, Error>(s.data().to_vec()))
        .expect("alone: afresh");
    assert!(data.is_empty());
}

#[test]
fn records_round_trip_and_damage_is_named() {
    let r = MemberRecord {
        heartbeat_ms: 1_700_000_000_000,
        session_timeout_ms: 10_000,
        pid: 42,
    };
    assert_eq!(MemberRecord::decode(&r.encode()), Some(r));
    let mut bad = r.encode();
    bad[3] ^= 1;
    assert_eq!(MemberRecord::decode(&bad), None);
    let state = encode_state(7, b"data");
    assert_eq!(decode_state(&state), Ok((7, b"data".to_vec())));
    for cut in 0..state.len() {
        assert!(decode_state(&state[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn members_waiting_for_a_stalled_lock_holder_stay_alive() {
    let (_dir, log) = log();
    let group = log.group("app").expect("group");
    let mut a = group.join("a", Duration::from_millis(300)).expect("join a");
    let idle = group
        .join("idle", Duration::from_millis(300))
        .expect("join idle");
    let other = Log::open(log.dir().expect("dir"), LogOptions::default()).expect("reopen");
    let mut b = other
        .group("app")
        .expect("group")
        .join("b", LONG)
        .expect("join b");
    // A holder stopped inside a step: the group lock held for longer than the sessions.
    let lock_path = log
        .dir()
        .expect("dir")
        .join(MEMBERS_DIR)
        .join("app")
        .join(LOCK_FILE);
    let holder = std::fs::File::open(&lock_path).expect("open the lock");
    holder.lock().expect("lock");
    let waiter = std::thread::spawn(move || {
        let departed = a
            .step(|s| Ok::<_, Error>(s.departed.clone()))
            .expect("step");
        (a, departed)
    });
    std::thread::sleep(Duration::from_millis(900));
    holder.unlock().expect("unlock");
    let (_a, departed) = waiter.join().expect("waiter");
    // Once the holder continues, neither the member that waited nor its idle sibling is gone.
    assert!(departed.is_empty(), "{departed:?}");
    let departed = b
        .step(|s| Ok::<_, Error>(s.departed.clone()))
        .expect("step");
    assert!(departed.is_empty(), "{departed:?}");
    drop(idle);
}
