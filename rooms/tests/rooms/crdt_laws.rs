//! Property tests of the CRDT laws on states built by replicas from random operations and
//! random partial syncs (no garbage collection: laws hold on the exact representation).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::common;

use common::*;
use ferry_room::state::ParticipantStore;
use ferry_room::{Op, RoomState, VersionVector};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Command { at: usize, choice: u8, who: u8 },
    Sync { from: usize, to: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..3, any::<u8>(), any::<u8>()).prop_map(|(at, choice, who)| Step::Command { at, choice, who }),
        1 => (0usize..3, 0usize..3).prop_map(|(from, to)| Step::Sync { from, to }),
    ]
}

/// Runs the steps on 3 replicas; returns their states and every op stamped.
fn build(steps: &[Step]) -> (Vec<RoomState>, Vec<Op>) {
    let mut rs = replicas(3);
    let mut ops = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let now = 1_000 + i as u64;
        match s {
            Step::Command { at, choice, who } => {
                if let Ok(out) =
                    rs[*at].handle_command(now, key(&format!("k{i}")), command(*choice, *who))
                {
                    ops.extend(out.op);
                }
            }
            Step::Sync { from, to } => {
                if from != to {
                    let to_id = rs[*to].id().clone();
                    let delta = rs[*from].delta_for(&to_id);
                    rs[*to].handle_delta(now, &delta).unwrap();
                }
            }
        }
    }
    (rs.iter().map(|r| r.state().clone()).collect(), ops)
}

/// What a replica that merged `base` lacks of one participant, cut by hand from all entries.
fn store_since(s: &ParticipantStore, base: &VersionVector) -> ParticipantStore {
    fn keep<K: Ord + Clone, V: Clone>(
        m: &BTreeMap<K, V>,
        dot: impl Fn(&K, &V) -> ferry_room::Dot,
        base: &VersionVector,
    ) -> BTreeMap<K, V> {
        m.iter()
            .filter(|(k, v)| !base.covers(&dot(k, v)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
    ParticipantStore {
        joins: keep(&s.joins, |d, _| d.clone(), base),
        tracks: keep(&s.tracks, |d, _| d.clone(), base),
        registers: keep(&s.registers, |_, l| l.dot.clone(), base),
        removed: keep(&s.removed, |_, r| r.clone(), base),
    }
}

/// A delta's participants must be exactly those with an entry `base` does not cover.
fn check_delta(s: &RoomState, base: &VersionVector) -> Result<(), TestCaseError> {
    let want: Vec<_> = s
        .data()
        .participants
        .iter()
        .map(|(p, st)| (p.clone(), store_since(st, base)))
        .filter(|(_, st)| *st != ParticipantStore::default())
        .collect();
    let got: Vec<_> = s.delta_since(base).data.participants.into_iter().collect();
    prop_assert_eq!(got, want);
    Ok(())
}

fn merged(a: &RoomState, b: &RoomState) -> RoomState {
    let mut x = a.clone();
    x.merge(b).unwrap();
    x
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn merge_is_commutative(steps in proptest::collection::vec(step(), 0..60)) {
        let (s, _) = build(&steps);
        prop_assert_eq!(merged(&s[0], &s[1]), merged(&s[1], &s[0]));
        prop_assert_eq!(merged(&s[1], &s[2]).digest(), merged(&s[2], &s[1]).digest());
    }

    #[test]
    fn merge_is_associative(steps in proptest::collection::vec(step(), 0..60)) {
        let (s, _) = build(&steps);
        let left = merged(&merged(&s[0], &s[1]), &s[2]);
        let right = merged(&s[0], &merged(&s[1], &s[2]));
        prop_assert_eq!(left, right);
    }

    #[test]
    fn merge_is_idempotent(steps in proptest::collection::vec(step(), 0..60)) {
        let (s, _) = build(&steps);
        prop_assert_eq!(merged(&s[0], &s[0]), s[0].clone());
        let ab = merged(&s[0], &s[1]);
        prop_assert_eq!(merged(&ab, &s[1]), ab.clone());
        let mut again = ab.clone();
        prop_assert!(!again.merge(&s[0]).unwrap(), "re-merging reported a change");
    }

    /// Ops applied in any order, with duplicates, give the same state as the replicas that
    /// made them, merged.
    #[test]
    fn ops_commute_and_apply_idempotently(
        steps in proptest::collection::vec(step(), 0..60),
        seed in any::<u64>(),
    ) {
        let (s, ops) = build(&steps);
        let all = merged(&merged(&s[0], &s[1]), &s[2]);
        let mut shuffled: Vec<&Op> = ops.iter().chain(ops.iter().step_by(3)).collect();
        // Deterministic shuffle from the seed (Fisher-Yates on a xorshift stream).
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut fresh = RoomState::new(room());
        for op in shuffled {
            fresh.apply(op).unwrap();
        }
        prop_assert_eq!(fresh.digest(), all.digest());
        prop_assert_eq!(fresh.view(), all.view());
    }

    /// A delta cut against the receiver's version vector brings it to the full merge.
    #[test]
    fn delta_since_version_equals_full_merge(steps in proptest::collection::vec(step(), 0..60)) {
        let (s, _) = build(&steps);
        let mut b = s[1].clone();
        b.merge_delta(&s[0].delta_since(b.version())).unwrap();
        let full = merged(&s[1], &s[0]);
        prop_assert_eq!(b.digest(), full.digest());
        prop_assert_eq!(b.version(), full.version());
    }

    /// One digest/diff/subtree exchange makes two states equal.
    #[test]
    fn one_subtree_exchange_converges_two_states(steps in proptest::collection::vec(step(), 0..60)) {
        let (s, _) = build(&steps);
        let (mut a, mut b) = (s[0].clone(), s[2].clone());
        let keys = a.diff(&b.digest());
        for k in &keys {
            let from_b = b.subtree(k);
            let from_a = a.subtree(k);
            a.merge_subtree(&from_b).unwrap();
            b.merge_subtree(&from_a).unwrap();
        }
        prop_assert_eq!(a.digest(), b.digest());
        prop_assert_eq!(a.view(), merged(&s[0], &s[2]).view());
    }

    /// A delta holds every participant written since the base and nothing else, whether it is
    /// cut from the index of recent writes or (for a base below what was collected) from a
    /// scan: bases of every replica, the empty one, after a collection and after decoding.
    #[test]
    fn delta_holds_exactly_what_the_base_lacks(steps in proptest::collection::vec(step(), 0..60)) {
        let (s, _) = build(&steps);
        let all = merged(&merged(&s[0], &s[1]), &s[2]);
        let bases: Vec<VersionVector> = s
            .iter()
            .map(|x| x.version().clone())
            .chain([VersionVector::new(), s[0].version().meet(s[1].version())])
            .collect();
        for st in s.iter().chain([&all]) {
            for b in &bases {
                check_delta(st, b)?;
            }
        }
        // Collected up to what replicas 0 and 1 both merged: bases below it are scanned.
        let mut gc = all.clone();
        gc.collect_garbage(&bases[4]);
        let decoded: RoomState = ferry_room::decode(&ferry_room::encode(&gc).unwrap()).unwrap();
        prop_assert_eq!(&decoded, &gc);
        for st in [&gc, &decoded] {
            for b in &bases {
                check_delta(st, b)?;
            }
        }
    }
}
