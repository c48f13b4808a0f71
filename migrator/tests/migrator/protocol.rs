//! The migration protocol on a simulated network with fake hosts: call
//! order, rollback, commit point, idempotency, corruption, concurrency,
//! versions. Every run checks "one owner" and "no SRTP index reuse" after
//! each step (see `support::Sim::check_invariants`).

use crate::support;

use std::time::Duration;

use ferry_migrator::wire::Body;
use ferry_migrator::{Config, MigrationEvent, Outcome, Phase, Role};
use support::{Call, Sim, State, Verdict, sid};

const EPOCH: u64 = 3;

/// Node 0 ("a") owns session "s1" with a cache big enough for several
/// snapshot chunks; node 1 ("b") is the target.
fn two_nodes(seed: u64) -> Sim {
    let mut sim = Sim::new(seed);
    sim.add_node("a", Config::default());
    sim.add_node("b", Config::default());
    sim.nodes[0].host.add_session("s1", EPOCH, 250);
    sim
}

fn start_s1(sim: &mut Sim) {
    let plan = sim.plan("m1", "s1", 0, 1, EPOCH);
    sim.start(0, plan);
}

/// Every `Ready` the target ("b") sends is lost.
fn drop_readies_from_b(sim: &mut Sim) {
    sim.hook = Some(Box::new(|from, _, m| {
        if from.as_str() == "b" && matches!(m.body, Body::Ready(_)) {
            Verdict::Drop
        } else {
            Verdict::Deliver(m)
        }
    }));
}

fn s(x: &str) -> String {
    x.to_owned()
}

/// The source's and the target's copies of the session hold the same cache
/// and SRTP position.
fn assert_moved_intact(sim: &Sim) {
    let src = &sim.nodes[0].host.sessions[&sid("s1")];
    let dst = &sim.nodes[1].host.sessions[&sid("s1")];
    assert_eq!(src.state, State::Released);
    assert_eq!(dst.state, State::Active(EPOCH + 1));
    assert!(dst.cache.len() >= src.cache.len());
    assert_eq!(
        &dst.cache[..src.cache.len()],
        &src.cache[..],
        "snapshot + WAL = source state"
    );
}

#[test]
fn happy_path_follows_the_host_contract() {
    let mut sim = two_nodes(1);
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(5)));

    assert_eq!(
        sim.nodes[0].host.folded_calls(),
        vec![
            Call::Export(s("s1")),
            Call::TakeWal(s("s1")),
            Call::Freeze(s("s1")),
            Call::Release(s("s1"), s("b")),
        ]
    );
    assert_eq!(
        sim.nodes[1].host.folded_calls(),
        vec![
            Call::Prewarm(s("s1")),
            Call::Import(s("s1")),
            Call::ApplyWal(s("s1")),
            Call::InstallFinal(s("s1")),
            Call::Activate(s("s1"), EPOCH + 1),
        ]
    );
    assert_moved_intact(&sim);
    // Media kept flowing throughout: the source sent until it froze, the
    // target continued with the next SRTP index.
    let by = |n: &str| {
        sim.sent
            .iter()
            .filter(|(_, node, _)| node.as_str() == n)
            .count()
    };
    assert!(by("a") > 0 && by("b") > 0);

    let phases: Vec<Phase> = sim.nodes[0]
        .events
        .iter()
        .filter_map(|e| match e {
            MigrationEvent::Phase { phase, role, .. } => {
                assert_eq!(*role, Role::Source);
                Some(*phase)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        phases,
        vec![
            Phase::Prepare,
            Phase::Snapshot,
            Phase::Wal,
            Phase::Cutover,
            Phase::Commit
        ]
    );

    let src = sim.finished(0)[0].clone();
    let dst = sim.finished(1)[0].clone();
    assert_eq!(
        (src.outcome, dst.outcome),
        (Outcome::Committed, Outcome::Committed)
    );
    assert_eq!((src.epoch, dst.epoch), (EPOCH + 1, EPOCH + 1));
    assert_eq!((src.role, dst.role), (Role::Source, Role::Target));
    assert!(
        src.snapshot_bytes > 3 * 64 * 1024,
        "several chunks: {}",
        src.snapshot_bytes
    );
    assert_eq!(src.snapshot_bytes, dst.snapshot_bytes);
    assert_eq!(src.wal_records, dst.wal_records);
    assert_eq!(src.wal_bytes, dst.wal_bytes);
    assert!(src.wal_records > 0);
    let ph = &src.phases;
    assert!(ph.prepare.is_some() && ph.snapshot.is_some() && ph.wal.is_some());
    assert!(ph.cutover.is_some() && ph.commit.is_some());
    assert_eq!(
        src.phases.to_ms().keys().cloned().collect::<Vec<_>>(),
        vec!["commit", "cutover", "prepare", "snapshot", "wal"]
    );
    assert!(src.blackout.is_some());
    assert_eq!(src.blackout, dst.blackout);
    assert_eq!(
        sim.nodes[0].migrator.outcome(&support::mid("m1")),
        Some(Outcome::Committed)
    );
}

/// The target goes silent while the source is frozen waiting for `Ready`:
/// the source resumes at epoch + 1 after the cutover timeout. When the
/// target comes back it learns the migration was aborted and discards.
#[test]
fn target_silent_before_commit_rolls_back() {
    let mut sim = two_nodes(2);
    // The target installs the final state, but nothing it says after that
    // gets through (its Ready and every retransmission are lost).
    drop_readies_from_b(&mut sim);
    start_s1(&mut sim);
    assert!(
        sim.run_until(Duration::from_secs(5), |s| s.nodes[0].migrator.running()
            == 0)
    );
    assert!(
        sim.nodes[1]
            .host
            .calls
            .contains(&Call::InstallFinal(s("s1")))
    );
    // It stops answering altogether for a while.
    sim.nodes[1].paused = true;
    sim.run_until(Duration::from_secs(1), |_| false);
    let calls = &sim.nodes[0].host.calls;
    assert_eq!(calls.last(), Some(&Call::Resume(s("s1"), EPOCH + 1)));
    assert!(!calls.iter().any(|c| matches!(c, Call::Release(..))));
    assert_eq!(
        sim.nodes[0].host.sessions[&sid("s1")].state,
        State::Active(EPOCH + 1)
    );
    let r = sim.finished(0)[0].clone();
    assert_eq!((r.outcome, r.epoch), (Outcome::RolledBack, EPOCH + 1));

    // The target comes back; the network heals.
    sim.hook = None;
    sim.nodes[1].paused = false;
    assert!(sim.run_to_quiet(Duration::from_secs(30)));
    let tcalls = &sim.nodes[1].host.calls;
    assert_eq!(tcalls.last(), Some(&Call::Discard(s("s1"))));
    assert!(!tcalls.iter().any(|c| matches!(c, Call::Activate(..))));
    assert!(!sim.nodes[1].host.sessions.contains_key(&sid("s1")));
    assert_eq!(sim.finished(1)[0].outcome, Outcome::RolledBack);
    // The source still owns and sends.
    assert_eq!(
        sim.nodes[0].host.sessions[&sid("s1")].state,
        State::Active(EPOCH + 1)
    );
}

/// The frozen source waits four measured round trips for `Ready` (the
/// `Prepare` → `Prepared` exchange), at least `cutover_timeout_min` and at
/// most `cutover_timeout`: a dead target costs a LAN client ~150 ms of
/// media, not the 500 ms cap, while a far target still gets its time.
#[test]
fn the_cutover_wait_follows_the_measured_round_trip() {
    for (latency_ms, want_ms) in [(0.5, 150.0), (30.0, 240.0), (100.0, 500.0)] {
        let mut sim = two_nodes(21);
        sim.latency = Duration::from_secs_f64(latency_ms / 1e3);
        drop_readies_from_b(&mut sim);
        start_s1(&mut sim);
        let has = |sim: &Sim, f: &dyn Fn(&Call) -> bool| sim.nodes[0].host.calls.iter().any(f);
        assert!(
            sim.run_until(Duration::from_secs(10), |s| has(s, &|c| matches!(
                c,
                Call::Freeze(_)
            )))
        );
        let frozen = sim.now;
        assert!(
            sim.run_until(Duration::from_secs(10), |s| has(s, &|c| matches!(
                c,
                Call::Resume(..)
            )))
        );
        let waited = (sim.now - frozen).as_secs_f64() * 1e3;
        // The round trip is measured once and the timers tick in whole
        // simulated steps: allow a few milliseconds either way.
        assert!(
            (waited - want_ms).abs() < 5.0,
            "latency {latency_ms} ms: waited {waited:.1} ms for Ready, expected ~{want_ms} ms"
        );
        assert_eq!(sim.finished(0)[0].outcome, Outcome::RolledBack);
    }
}

/// A partition right after the `Cutover` that never heals: the source
/// resumes after its cutover timeout, and the target, hearing nothing more,
/// discards on its own commit timer (and never activates).
#[test]
fn partition_after_cutover_target_discards_on_its_own() {
    let mut sim = two_nodes(14);
    let cut = std::rc::Rc::new(std::cell::Cell::new(false));
    let c = cut.clone();
    sim.hook = Some(Box::new(move |_, _, m| {
        if c.get() {
            return Verdict::Drop;
        }
        if matches!(m.body, Body::Cutover(_)) {
            c.set(true);
        }
        Verdict::Deliver(m)
    }));
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(60)));
    assert_eq!(
        sim.nodes[0].host.calls.last(),
        Some(&Call::Resume(s("s1"), EPOCH + 1))
    );
    let t = sim.nodes[1].host.folded_calls();
    assert_eq!(
        &t[t.len() - 2..],
        &[Call::InstallFinal(s("s1")), Call::Discard(s("s1"))]
    );
    let r = sim.finished(1)[0].clone();
    assert_eq!(r.outcome, Outcome::RolledBack);
    assert!(r.reason.unwrap().contains("no Commit"));
}

/// Silence during the snapshot: the source never froze, so it only stops its
/// WAL capture and keeps its epoch.
#[test]
fn target_silent_during_snapshot_cancels_the_export() {
    let mut sim = two_nodes(3);
    start_s1(&mut sim);
    assert!(sim.run_until(Duration::from_secs(5), |s| {
        s.nodes[1].host.calls.contains(&Call::Prewarm("s1".into()))
    }));
    sim.nodes[1].paused = true;
    assert!(
        sim.run_until(Duration::from_secs(10), |s| s.nodes[0].migrator.running()
            == 0)
    );
    let calls = sim.nodes[0].host.folded_calls();
    assert_eq!(calls.last(), Some(&Call::CancelExport(s("s1"))));
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::Freeze(_) | Call::Resume(..)))
    );
    assert_eq!(
        sim.nodes[0].host.sessions[&sid("s1")].state,
        State::Active(EPOCH)
    );
    sim.nodes[1].paused = false;
    assert!(sim.run_to_quiet(Duration::from_secs(30)));
    assert_eq!(
        sim.nodes[1].host.calls.last(),
        Some(&Call::Discard(s("s1")))
    );
}

/// Commit is the point of no return: the source dies right after sending
/// it, and the target still activates.
#[test]
fn source_crash_after_commit_target_still_activates() {
    let mut sim = two_nodes(4);
    let commit_sent = std::rc::Rc::new(std::cell::Cell::new(false));
    let flag = commit_sent.clone();
    sim.hook = Some(Box::new(move |_, _, m| {
        if matches!(m.body, Body::Commit(_)) {
            flag.set(true);
        }
        Verdict::Deliver(m)
    }));
    start_s1(&mut sim);
    assert!(sim.run_until(Duration::from_secs(5), |_| commit_sent.get()));
    sim.nodes[0].crashed = true;
    assert!(sim.run_to_quiet(Duration::from_secs(30)));
    assert_eq!(
        sim.nodes[1].host.calls.last(),
        Some(&Call::Activate(s("s1"), EPOCH + 1))
    );
    assert_eq!(
        sim.nodes[1].host.sessions[&sid("s1")].state,
        State::Active(EPOCH + 1)
    );
    assert_eq!(sim.finished(1)[0].outcome, Outcome::Committed);
}

/// If every `Committed` is lost the source still treats the session as
/// gone (it released it), and says the commit is unconfirmed.
#[test]
fn lost_committed_leaves_the_commit_unconfirmed() {
    let mut sim = two_nodes(5);
    sim.hook = Some(Box::new(|_, _, m| match m.body {
        Body::Committed(_) => Verdict::Drop,
        _ => Verdict::Deliver(m),
    }));
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(30)));
    assert_eq!(sim.finished(0)[0].outcome, Outcome::Unconfirmed);
    assert_eq!(sim.finished(1)[0].outcome, Outcome::Committed);
    assert_moved_intact(&sim);
}

/// Duplicated and reordered messages, then a replay of every message after
/// the end: host calls, states and outcomes do not change.
#[test]
fn duplicates_and_replays_change_nothing() {
    let mut sim = two_nodes(6);
    sim.dup = 0.5;
    sim.jitter = Duration::from_millis(3);
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(10)));
    assert_eq!(sim.finished(0)[0].outcome, Outcome::Committed);
    assert_eq!(
        sim.nodes[1].host.folded_calls(),
        vec![
            Call::Prewarm(s("s1")),
            Call::Import(s("s1")),
            Call::ApplyWal(s("s1")),
            Call::InstallFinal(s("s1")),
            Call::Activate(s("s1"), EPOCH + 1),
        ]
    );
    assert_moved_intact(&sim);

    let calls: Vec<Vec<Call>> = sim.nodes.iter().map(|n| n.host.calls.clone()).collect();
    let states: Vec<_> = sim
        .nodes
        .iter()
        .map(|n| n.host.sessions[&sid("s1")].state.clone())
        .collect();
    let events: Vec<usize> = sim.nodes.iter().map(|n| n.events.len()).collect();
    sim.dup = 0.0;
    sim.jitter = Duration::ZERO;
    let log = sim.delivered.clone();
    for _ in 0..2 {
        for (from, to, msg) in log.clone() {
            let i = sim.idx(&to).unwrap();
            sim.inject(&from, i, msg);
        }
        sim.run_until(Duration::from_secs(1), |_| false);
    }
    assert_eq!(
        sim.nodes
            .iter()
            .map(|n| n.host.calls.clone())
            .collect::<Vec<_>>(),
        calls
    );
    assert_eq!(
        sim.nodes
            .iter()
            .map(|n| n.host.sessions[&sid("s1")].state.clone())
            .collect::<Vec<_>>(),
        states
    );
    assert_eq!(
        sim.nodes.iter().map(|n| n.events.len()).collect::<Vec<_>>(),
        events
    );
    assert_eq!(
        sim.nodes[0].migrator.running() + sim.nodes[1].migrator.running(),
        0
    );
    // Replies to replays are the final answers, nothing else.
    let replies: Vec<&'static str> = sim.delivered[log.len()..]
        .iter()
        .map(|(_, _, m)| m.body.name())
        .collect();
    assert!(!replies.is_empty());
    assert!(
        replies.iter().all(|r| *r == "commit" || *r == "committed"),
        "{replies:?}"
    );
}

/// A chunk corrupted on the way fails its CRC, is re-requested, and the
/// migration completes with the exact state.
#[test]
fn corrupt_chunk_is_rerequested() {
    let mut sim = two_nodes(7);
    let corrupted = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let c2 = corrupted.clone();
    sim.hook = Some(Box::new(move |_, _, mut m| {
        if let Body::SnapshotChunk(c) = &mut m.body
            && c.seq == 2
            && c2.get() == 0
        {
            c.bytes[10] ^= 0x40;
            c2.set(1);
        }
        Verdict::Deliver(m)
    }));
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(10)));
    assert_eq!(corrupted.get(), 1);
    let nacks: Vec<u32> = sim
        .delivered
        .iter()
        .filter_map(|(_, _, m)| match &m.body {
            Body::SnapshotNack(n) => Some(n.seq),
            _ => None,
        })
        .collect();
    assert_eq!(nacks, vec![2]);
    assert_eq!(sim.finished(0)[0].outcome, Outcome::Committed);
    assert_moved_intact(&sim);
}

/// Two sessions leave node a at once, to b and to c. c never answers: s1
/// commits regardless, and s2 rolls back later.
#[test]
fn concurrent_migrations_do_not_block_each_other() {
    let mut sim = two_nodes(8);
    sim.add_node("c", Config::default());
    sim.nodes[0].host.add_session("s2", 9, 50);
    sim.nodes[2].paused = true;
    let p2 = sim.plan("m2", "s2", 0, 2, 9);
    sim.start(0, p2);
    start_s1(&mut sim);
    assert_eq!(sim.nodes[0].migrator.running(), 2);
    assert!(sim.run_until(Duration::from_secs(10), |s| !s.finished(0).is_empty()));
    let first = sim.finished(0)[0].clone();
    assert_eq!(
        (first.id.as_str(), first.outcome),
        ("m1", Outcome::Committed)
    );
    assert!(sim.nodes[0].migrator.is_running(&support::mid("m2")));
    assert!(
        sim.run_until(Duration::from_secs(10), |s| s.nodes[0].migrator.running()
            == 0)
    );
    let second = sim.finished(0)[1].clone();
    assert_eq!(
        (second.id.as_str(), second.outcome),
        ("m2", Outcome::RolledBack)
    );
    assert_eq!(
        sim.nodes[0].host.sessions[&sid("s2")].state,
        State::Active(9)
    );
    assert_moved_intact(&sim);
}

/// Random loss, duplication and reordering over many seeds: every run ends
/// with exactly one owner, consistent outcomes on both sides, and no SRTP
/// index used twice (checked at every step).
#[test]
fn lossy_network_keeps_the_invariants() {
    let mut committed = 0;
    for seed in 0..24 {
        let mut sim = two_nodes(100 + seed);
        sim.loss = 0.1;
        sim.dup = 0.05;
        sim.jitter = Duration::from_millis(2);
        start_s1(&mut sim);
        assert!(sim.run_to_quiet(Duration::from_secs(60)), "seed {seed}");
        let src = sim.finished(0)[0].outcome;
        let dst = sim.finished(1).first().map(|r| r.outcome);
        let owners: Vec<&str> = sim
            .nodes
            .iter()
            .filter(|n| {
                n.host
                    .sessions
                    .get(&sid("s1"))
                    .is_some_and(|s| matches!(s.state, State::Active(_)))
            })
            .map(|n| n.id.as_str())
            .collect();
        match src {
            Outcome::Committed | Outcome::Unconfirmed => {
                committed += 1;
                assert_eq!(dst, Some(Outcome::Committed), "seed {seed}");
                assert_eq!(owners, vec!["b"], "seed {seed}");
                assert_moved_intact(&sim);
            }
            Outcome::RolledBack => {
                assert_ne!(dst, Some(Outcome::Committed), "seed {seed}");
                assert_eq!(owners, vec!["a"], "seed {seed}");
            }
            other => panic!("seed {seed}: {other:?}"),
        }
    }
    assert!(
        committed >= 20,
        "10 % loss should rarely defeat the retries: {committed}/24"
    );
}

#[test]
fn refused_prewarm_moves_nothing() {
    let mut sim = two_nodes(9);
    sim.nodes[1].host.refuse = true;
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(5)));
    assert!(sim.nodes[0].host.calls.is_empty());
    assert_eq!(sim.nodes[1].host.calls, vec![Call::Prewarm(s("s1"))]);
    assert_eq!(sim.finished(0)[0].outcome, Outcome::Refused);
    assert_eq!(sim.finished(1)[0].outcome, Outcome::Refused);
    assert!(
        sim.finished(0)[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("no room")
    );
}

/// "N+1 restores N": a target that reads snapshot version 2 takes a
/// version-1 source's session; a version-1 target refuses a version-2
/// source before anything moves.
#[test]
fn newer_target_reads_older_snapshots_and_not_the_reverse() {
    let mut sim = Sim::new(10);
    sim.add_node("a", Config::default());
    sim.add_node(
        "b",
        Config {
            snapshot_version: 2,
            ..Config::default()
        },
    );
    sim.nodes[0].host.add_session("s1", EPOCH, 100);
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(5)));
    assert_eq!(sim.finished(0)[0].outcome, Outcome::Committed);
    assert_moved_intact(&sim);

    let mut sim = Sim::new(11);
    sim.add_node(
        "a",
        Config {
            snapshot_version: 2,
            ..Config::default()
        },
    );
    sim.add_node("b", Config::default());
    sim.nodes[0].host.add_session("s1", EPOCH, 100);
    start_s1(&mut sim);
    assert!(sim.run_to_quiet(Duration::from_secs(5)));
    assert_eq!(sim.finished(0)[0].outcome, Outcome::Refused);
    assert!(sim.nodes[0].host.calls.is_empty() && sim.nodes[1].host.calls.is_empty());
}

#[test]
fn operator_abort_before_commit_resumes_nothing_twice() {
    let mut sim = two_nodes(12);
    start_s1(&mut sim);
    assert!(sim.run_until(Duration::from_secs(5), |s| {
        s.nodes[1].host.calls.contains(&Call::Import("s1".into()))
    }));
    let now = sim.now;
    let n = &mut sim.nodes[0];
    n.migrator
        .abort(now, &mut n.host, &support::mid("m1"), "operator")
        .unwrap();
    sim.collect();
    assert!(sim.run_to_quiet(Duration::from_secs(5)));
    assert_eq!(
        sim.nodes[0].host.calls.last(),
        Some(&Call::CancelExport(s("s1")))
    );
    assert_eq!(
        sim.nodes[1].host.calls.last(),
        Some(&Call::Discard(s("s1")))
    );
    assert_eq!(sim.finished(0)[0].outcome, Outcome::RolledBack);
    let now = sim.now;
    let n = &mut sim.nodes[0];
    assert!(
        n.migrator
            .abort(now, &mut n.host, &support::mid("m1"), "again")
            .is_err()
    );
}

#[test]
fn start_refuses_self_target_duplicates_and_busy_sessions() {
    let mut sim = two_nodes(13);
    let now = sim.now;
    let mut plan = sim.plan("m1", "s1", 0, 1, EPOCH);
    let n = &mut sim.nodes[0];
    let mut own = plan.clone();
    own.target = n.id.clone();
    assert!(n.migrator.start(now, &mut n.host, own).is_err());
    n.migrator.start(now, &mut n.host, plan.clone()).unwrap();
    assert!(
        n.migrator.start(now, &mut n.host, plan.clone()).is_err(),
        "same id"
    );
    plan.id = support::mid("m2");
    assert!(
        n.migrator.start(now, &mut n.host, plan).is_err(),
        "same session"
    );
}
