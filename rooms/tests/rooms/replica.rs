//! Scenario tests of one or a few replicas: exact outcomes for given input sequences.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use ferry_room::op::MAX_ATTRIBUTES;
use ferry_room::state::SyncError;
use ferry_room::{
    Command, CommandError, Hlc, HlcError, Op, OpKind, Register, Replica, RoomState, Value,
    VersionVector,
};

fn sync(rs: &mut [Replica], from: usize, to: usize, now: u64) {
    let to_id = rs[to].id().clone();
    let delta = rs[from].delta_for(&to_id);
    let ack = rs[to].handle_delta(now, &delta).unwrap();
    rs[from].handle_ack(&ack);
}

#[test]
fn a_retried_command_returns_the_first_receipt_and_changes_nothing() {
    let mut rs = replicas(1);
    let first = rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    assert!(first.op.is_some());
    let state = rs[0].state().clone();
    for at in [1_001, 15_000, 30_999] {
        let retry = rs[0].handle_command(at, key("k1"), join("alice")).unwrap();
        assert_eq!(retry.receipt, first.receipt);
        assert_eq!(retry.op, None);
        assert_eq!(rs[0].state(), &state);
    }
    // The same key for another command is refused, also without effect.
    assert_eq!(
        rs[0].handle_command(2_000, key("k1"), join("bob")),
        Err(CommandError::KeyReused)
    );
    assert_eq!(rs[0].state(), &state);
    // After the retention the key is forgotten: the command applies again (a rejoin).
    let late = rs[0]
        .handle_command(31_000, key("k1"), join("alice"))
        .unwrap();
    assert_ne!(late.receipt, first.receipt);
}

#[test]
fn a_retry_at_another_replica_is_recognised_once_the_op_reached_it() {
    let mut rs = replicas(2);
    let out = rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    rs[1].handle_op(1_001, out.op.as_ref().unwrap()).unwrap();
    let retry = rs[1]
        .handle_command(1_500, key("k1"), join("alice"))
        .unwrap();
    assert_eq!((retry.receipt, retry.op), (out.receipt, None));
}

#[test]
fn a_key_reused_for_another_command_at_another_replica_is_refused() {
    let mut rs = replicas(2);
    let out = rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    rs[1].handle_op(1_001, out.op.as_ref().unwrap()).unwrap();
    assert_eq!(
        rs[1].handle_command(1_500, key("k1"), join("bob")),
        Err(ferry_room::CommandError::KeyReused)
    );
}

#[test]
fn applying_an_op_twice_changes_nothing() {
    let mut rs = replicas(2);
    let op = rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap()
        .op
        .unwrap();
    assert!(rs[1].handle_op(1_001, &op).unwrap());
    let once = rs[1].state().clone();
    assert!(!rs[1].handle_op(1_002, &op).unwrap());
    assert_eq!(rs[1].state(), &once);
}

#[test]
fn concurrent_join_wins_over_a_leave_that_did_not_see_it() {
    let mut rs = replicas(2);
    rs[0]
        .handle_command(1_000, key("a1"), join("alice"))
        .unwrap();
    sync(&mut rs, 0, 1, 1_001);
    // r0 sees alice leave; concurrently r1 sees her rejoin (e.g. after a reconnect).
    rs[0]
        .handle_command(2_000, key("a2"), leave("alice"))
        .unwrap();
    rs[1]
        .handle_command(2_000, key("a3"), join("alice"))
        .unwrap();
    sync(&mut rs, 0, 1, 2_001);
    sync(&mut rs, 1, 0, 2_001);
    for r in &rs {
        assert!(r.state().is_present(&pid("alice")));
    }
    assert_eq!(rs[0].state().digest(), rs[1].state().digest());
}

#[test]
fn lww_registers_take_the_latest_hlc_and_a_leave_resets_them() {
    let mut rs = replicas(2);
    rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    sync(&mut rs, 0, 1, 1_001);
    rs[1]
        .handle_command(1_100, key("k2"), mute("alice", true))
        .unwrap();
    rs[0]
        .handle_command(1_050, key("k3"), mute("alice", false))
        .unwrap();
    sync(&mut rs, 0, 1, 1_200);
    sync(&mut rs, 1, 0, 1_200);
    for r in &rs {
        assert!(
            r.state().view().participants[&pid("alice")].audio_muted,
            "1,100 beats 1,050"
        );
    }
    rs[0]
        .handle_command(1_300, key("k4"), leave("alice"))
        .unwrap();
    rs[0]
        .handle_command(1_400, key("k5"), join("alice"))
        .unwrap();
    assert!(
        !rs[0].state().view().participants[&pid("alice")].audio_muted,
        "reset by the leave"
    );
}

#[test]
fn tracks_and_unpublish() {
    let mut rs = replicas(1);
    rs[0].handle_command(1_000, key("k1"), join("bob")).unwrap();
    rs[0]
        .handle_command(1_001, key("k2"), publish("bob", "cam"))
        .unwrap();
    rs[0]
        .handle_command(1_002, key("k3"), publish("bob", "mic"))
        .unwrap();
    let cmd = Command::Unpublish {
        participant: pid("bob"),
        track: "cam".parse().unwrap(),
    };
    rs[0].handle_command(1_003, key("k4"), cmd.clone()).unwrap();
    let tracks: Vec<String> = rs[0].state().view().participants[&pid("bob")]
        .tracks
        .keys()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(tracks, ["mic"]);
    assert_eq!(
        rs[0].handle_command(1_004, key("k5"), cmd),
        Err(CommandError::UnknownTrack)
    );
}

#[test]
fn commands_for_absent_participants_and_oversized_fields_are_refused() {
    let mut rs = replicas(1);
    assert_eq!(
        rs[0].handle_command(1, key("k1"), mute("ghost", true)),
        Err(CommandError::NotInRoom)
    );
    let big = Command::Join {
        participant: pid("a"),
        name: "x".repeat(300),
        metadata: String::new(),
    };
    assert!(matches!(
        rs[0].handle_command(1, key("k2"), big),
        Err(CommandError::TooLarge { what: "name", .. })
    ));
    rs[0].handle_command(2, key("k3"), join("a")).unwrap();
    let wrong = Command::Set {
        participant: pid("a"),
        register: Register::AudioMuted,
        value: Value::Text(Some("yes".into())),
    };
    assert!(matches!(
        rs[0].handle_command(3, key("k4"), wrong),
        Err(CommandError::BadValue(_))
    ));
    for i in 0..MAX_ATTRIBUTES {
        let set = Command::Set {
            participant: pid("a"),
            register: Register::Attribute(format!("k{i}")),
            value: Value::Text(Some("v".into())),
        };
        rs[0]
            .handle_command(10 + i as u64, key(&format!("attr{i}")), set)
            .unwrap();
    }
    let one_more = Command::Set {
        participant: pid("a"),
        register: Register::Attribute("extra".into()),
        value: Value::Text(Some("v".into())),
    };
    assert_eq!(
        rs[0].handle_command(100, key("extra"), one_more),
        Err(CommandError::TooManyAttributes)
    );
    assert!(
        rs[0].idempotency().len() == MAX_ATTRIBUTES + 1,
        "refusals consume no key"
    );
}

#[test]
fn ops_from_too_far_in_the_future_are_refused_without_effect() {
    let mut rs = replicas(2);
    let mut op = rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap()
        .op
        .unwrap();
    op.stamp = Hlc {
        wall_ms: 1_000 + 501,
        ..op.stamp
    };
    let before = rs[1].state().clone();
    assert!(matches!(
        rs[1].handle_op(1_000, &op),
        Err(SyncError::Clock(HlcError::TooFarAhead {
            ahead_ms: 501,
            ..
        }))
    ));
    assert_eq!(rs[1].state(), &before);
    assert!(
        rs[1].handle_op(1_001, &op).is_ok(),
        "within the bound a moment later"
    );
}

/// The removal is stable (every replica merged it) but the removed join is not yet known to
/// one of them: collecting the tombstone then would let the join come back there.
#[test]
fn gc_keeps_a_tombstone_until_the_removed_entry_is_stable_too() {
    let mut rs = replicas(2);
    let join_op = rs[1]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap()
        .op
        .unwrap();
    rs[0].handle_op(1_001, &join_op).unwrap();
    let leave_op = rs[0]
        .handle_command(1_002, key("k2"), leave("alice"))
        .unwrap()
        .op
        .unwrap();
    // A third state got only the leave (the join datagram was lost on the way to it).
    let mut x = RoomState::new(room());
    x.apply(&leave_op).unwrap();
    let only_leave: VersionVector = [(leave_op.dot.replica.clone(), 1)].into_iter().collect();
    assert_eq!(x.collect_garbage(&only_leave).tombstones, 0);
    x.apply(&join_op).unwrap();
    assert!(!x.is_present(&pid("alice")));
    // Once both are covered by every replica, both go and a replay cannot resurrect.
    let both: VersionVector = [
        (leave_op.dot.replica.clone(), 1),
        (join_op.dot.replica.clone(), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(x.collect_garbage(&both).tombstones, 1);
    assert_eq!(x.tombstones(), 0);
    x.apply(&join_op).unwrap();
    assert!(!x.is_present(&pid("alice")));
    assert!(x.participant(&pid("alice")).is_none());
}

#[test]
fn gc_waits_for_every_replica_and_never_resurrects() {
    let mut rs = replicas(3);
    let join_op = rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap()
        .op
        .unwrap();
    rs[0]
        .handle_command(1_001, key("k2"), leave("alice"))
        .unwrap();
    sync(&mut rs, 0, 1, 1_002);
    assert_eq!(
        rs[0].collect_garbage().tombstones,
        0,
        "r2 has not acknowledged"
    );
    sync(&mut rs, 0, 2, 1_003);
    assert_eq!(rs[0].collect_garbage().tombstones, 1);
    assert_eq!(rs[0].state().tombstones(), 0);
    // The stale join arrives again, as op and inside an old-style delta: ignored.
    assert!(!rs[0].handle_op(1_004, &join_op).unwrap());
    let mut old = RoomState::new(room());
    old.apply(&join_op).unwrap();
    let stale = old.delta_since(&VersionVector::new());
    rs[0].handle_delta(1_005, &stale).unwrap();
    assert!(!rs[0].state().is_present(&pid("alice")));
    assert!(rs[0].state().participant(&pid("alice")).is_none());
}

/// Collection through the sync tree alone (no acknowledgement reaches the root): the root
/// collects once its children's summaries cover every replica, not before, and its watermark
/// makes the children collect.
#[test]
fn gc_through_the_sync_tree_waits_for_every_summary() {
    let mut rs = replicas(3);
    rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    rs[0]
        .handle_command(1_001, key("k2"), leave("alice"))
        .unwrap();
    // r0 is the root (lowest id), r1 and r2 its children.
    let round = rs[0].sync_round(64);
    assert_eq!(round.parent, None);
    assert_eq!(round.children, [rid("r1"), rid("r2")]);
    // Deltas merged, their acks lost.
    for to in [1, 2] {
        let delta = rs[0].delta_for(&rid(&format!("r{to}")));
        rs[to].handle_delta(1_002, &delta).unwrap();
    }
    let up = |r: &mut Replica| r.sync_round(64).parent.unwrap();
    let (parent, from_r1) = up(&mut rs[1]);
    assert_eq!(parent, rid("r0"));
    assert!(rs[0].handle_summary(&from_r1));
    rs[0].sync_round(64);
    assert_eq!(rs[0].state().tombstones(), 1, "r2 has not summarized");
    let (_, from_r2) = up(&mut rs[2]);
    assert!(rs[0].handle_summary(&from_r2));
    let round = rs[0].sync_round(64);
    assert_eq!(rs[0].state().tombstones(), 0);
    assert_eq!(rs[1].state().tombstones(), 1);
    for c in [1, 2] {
        rs[c].handle_watermark(&round.watermark).unwrap();
        assert_eq!(rs[c].state().tombstones(), 0);
        assert!(rs[c].state().participant(&pid("alice")).is_none());
    }
    // A summary from a replica that is not a peer, or for another room, is ignored.
    let mut stranger = from_r2.clone();
    stranger.from = rid("r9");
    assert!(!rs[0].handle_summary(&stranger));
}

#[test]
fn anti_entropy_round_converges_two_diverged_replicas() {
    let mut rs = replicas(2);
    rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    rs[1].handle_command(1_000, key("k2"), join("bob")).unwrap();
    rs[1]
        .handle_command(
            1_001,
            key("k3"),
            Command::Chat {
                participant: pid("bob"),
                text: "hi".into(),
            },
        )
        .unwrap();
    let req = rs[0].start_anti_entropy();
    let reply = rs[1].handle_ae_request(&req).unwrap();
    assert_eq!(reply.keys.len(), 3, "alice, bob, one chat bucket");
    let fin = rs[0].handle_ae_reply(1_010, &reply).unwrap();
    rs[1].handle_ae_finish(1_010, &fin).unwrap();
    assert_eq!(rs[0].state().digest(), rs[1].state().digest());
    assert_eq!(rs[0].state().view().participants.len(), 2);
}

#[test]
fn snapshot_restore_round_trips_through_the_codec() {
    let mut rs = replicas(2);
    rs[0]
        .handle_command(1_000, key("k1"), join("alice"))
        .unwrap();
    rs[0]
        .handle_command(1_001, key("k2"), mute("alice", true))
        .unwrap();
    sync(&mut rs, 0, 1, 1_002);
    let snap = rs[0].snapshot();
    let bytes = ferry_room::encode(&snap).unwrap();
    let back: ferry_room::replica::ReplicaSnapshot = ferry_room::decode(&bytes).unwrap();
    assert_eq!(back, snap);
    let mut restored = Replica::restore(back);
    assert_eq!(restored.snapshot(), snap);
    // The restored replica keeps numbering and deduplicating where it left off.
    let retry = restored
        .handle_command(1_500, key("k2"), mute("alice", true))
        .unwrap();
    assert_eq!(retry.op, None);
    let next = restored
        .handle_command(1_600, key("k3"), leave("alice"))
        .unwrap();
    assert_eq!(next.receipt.dot.seq, 3);
}

#[test]
fn reactions_count_up_and_down_across_replicas() {
    let mut rs = replicas(2);
    rs[0].handle_command(1, key("k1"), join("a")).unwrap();
    sync(&mut rs, 0, 1, 2);
    let react = |d| Command::React {
        participant: pid("a"),
        delta: d,
    };
    rs[0].handle_command(3, key("k2"), react(5)).unwrap();
    rs[1].handle_command(3, key("k3"), react(2)).unwrap();
    rs[1].handle_command(4, key("k4"), react(-3)).unwrap();
    sync(&mut rs, 0, 1, 5);
    sync(&mut rs, 1, 0, 5);
    assert_eq!(rs[0].state().view().reactions, 4);
    assert_eq!(rs[1].state().view().reactions, 4);
}

#[test]
fn ops_are_tagged_with_their_room() {
    let mut rs = replicas(1);
    let mut op: Op = rs[0]
        .handle_command(1, key("k1"), join("a"))
        .unwrap()
        .op
        .unwrap();
    op.room = "other".parse().unwrap();
    let mut other = replicas(1);
    assert!(matches!(
        other[0].handle_op(2, &op),
        Err(SyncError::WrongRoom { .. })
    ));
    assert!(matches!(op.kind, OpKind::Join { .. }));
}
