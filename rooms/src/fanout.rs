//! The push tree an operation takes between the replicas of a room (seed 000 §3.3: a room
//! spread over many nodes must not make the node where an op was stamped send it to every
//! other one).
//!
//! Each op travels down a tree rooted at the replica that stamped it (its dot's replica): the
//! room's replicas in id order, rotated so the origin comes first, form a complete `k`-ary tree
//! (position `p`'s children are `p·k+1 ..= p·k+k`). The origin sends to at most `k` replicas,
//! every replica that receives an op for the first time passes it to its own children in that
//! tree, and every replica is reached once, after at most `⌈log_k(n(k−1)+1)⌉ − 1` hops: with
//! the default fan-out of 64, one hop up to 65 replicas, two up to 4,161, three up to 266,305.
//!
//! Pure: replicas that see the room's membership differently (one not yet found, one gone)
//! build different trees, so an op may miss a replica or reach one twice; the delta sync and
//! anti-entropy repair the first and the op's dot makes the second a no-op.

use crate::ids::ReplicaId;

/// Children per replica unless configured otherwise.
pub const DEFAULT_FANOUT: usize = 64;

/// The replicas `me` passes an op stamped by `origin` to: its children in the tree rooted at
/// `origin` over `members` (the room's replicas as `me` knows them, `me` included; order and
/// repeats do not matter). Empty when `me` or `origin` is not among them (the delta sync
/// carries the op instead) or `fanout` is 0.
pub fn children<'a>(
    members: impl IntoIterator<Item = &'a ReplicaId>,
    origin: &ReplicaId,
    me: &ReplicaId,
    fanout: usize,
) -> Vec<&'a ReplicaId> {
    let mut ring: Vec<&ReplicaId> = members.into_iter().collect();
    ring.sort();
    ring.dedup();
    let n = ring.len();
    let (Ok(o), Ok(m)) = (ring.binary_search(&origin), ring.binary_search(&me)) else {
        return Vec::new();
    };
    if fanout == 0 {
        return Vec::new();
    }
    let position = (m + n - o) % n;
    let first = position.saturating_mul(fanout).saturating_add(1);
    (first..first.saturating_add(fanout).min(n))
        .map(|p| ring[(o + p) % n])
        .collect()
}

/// `me`'s parent and children in the room's sync tree: the replicas in id order as a complete
/// `fanout`-ary tree rooted at the lowest id. Deltas travel its edges (a replica repairs only
/// its neighbours, which repair theirs), and the collection watermark converges up it and comes
/// back down ([`crate::Replica::sync_round`]). `(None, [])` when `me` is not among `members`;
/// a `fanout` of 0 counts as 1 (a chain).
pub fn sync_neighbours<'a>(
    members: impl IntoIterator<Item = &'a ReplicaId>,
    me: &ReplicaId,
    fanout: usize,
) -> (Option<&'a ReplicaId>, Vec<&'a ReplicaId>) {
    let mut ring: Vec<&ReplicaId> = members.into_iter().collect();
    ring.sort();
    ring.dedup();
    let Ok(m) = ring.binary_search(&me) else {
        return (None, Vec::new());
    };
    let k = fanout.max(1);
    let parent = m.checked_sub(1).map(|p| ring[p / k]);
    let first = m.saturating_mul(k).saturating_add(1);
    let children = (first..first.saturating_add(k).min(ring.len()))
        .map(|c| ring[c])
        .collect();
    (parent, children)
}

/// How many hops the farthest of `n` replicas is from the origin with `fanout` children each.
pub fn depth(n: usize, fanout: usize) -> usize {
    if fanout == 0 {
        return 0;
    }
    let (mut depth, mut reached, mut level) = (0usize, 1usize, 1usize);
    while reached < n {
        level = level.saturating_mul(fanout);
        reached = reached.saturating_add(level);
        depth += 1;
    }
    depth
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn ids(n: usize) -> Vec<ReplicaId> {
        (0..n)
            .map(|i| ReplicaId::new(format!("node-{i:03}")).unwrap())
            .collect()
    }

    /// Hops from the origin to each replica, following `children` from every replica reached.
    fn walk(
        members: &[ReplicaId],
        origin: &ReplicaId,
        fanout: usize,
    ) -> BTreeMap<ReplicaId, usize> {
        let mut hops = BTreeMap::from([(origin.clone(), 0)]);
        let mut frontier = vec![origin.clone()];
        while let Some(at) = frontier.pop() {
            let h = hops[&at];
            for c in children(members, origin, &at, fanout) {
                assert!(hops.insert(c.clone(), h + 1).is_none(), "{c} reached twice");
                frontier.push(c.clone());
            }
        }
        hops
    }

    #[test]
    fn three_nodes_with_the_default_fanout_is_one_hop() {
        let m = ids(3);
        assert_eq!(
            children(&m, &m[1], &m[1], DEFAULT_FANOUT),
            vec![&m[2], &m[0]]
        );
        assert!(children(&m, &m[1], &m[2], DEFAULT_FANOUT).is_empty());
    }

    #[test]
    fn the_tree_is_rooted_at_the_origin_in_id_order() {
        // 7 replicas, fan-out 2, origin node-003: positions 0..7 are nodes 3,4,5,6,0,1,2.
        let m = ids(7);
        let c = |me: usize| children(&m, &m[3], &m[me], 2);
        assert_eq!(c(3), vec![&m[4], &m[5]]);
        assert_eq!(c(4), vec![&m[6], &m[0]]);
        assert_eq!(c(5), vec![&m[1], &m[2]]);
        assert!(c(6).is_empty() && c(0).is_empty());
    }

    #[test]
    fn an_unknown_origin_or_self_passes_nothing_on() {
        let m = ids(4);
        let stranger = ReplicaId::new("node-x").unwrap();
        assert!(children(&m, &stranger, &m[0], 2).is_empty());
        assert!(children(&m, &m[0], &stranger, 2).is_empty());
        assert!(children(&m, &m[0], &m[0], 0).is_empty());
    }

    #[test]
    fn depths_of_the_default_fanout() {
        assert_eq!(depth(1, 64), 0);
        assert_eq!(depth(65, 64), 1);
        assert_eq!(depth(66, 64), 2);
        assert_eq!(depth(4_161, 64), 2);
        assert_eq!(depth(4_162, 64), 3);
        assert_eq!(depth(266_305, 64), 3);
    }

    proptest! {
        /// Every replica is reached exactly once, no replica sends to more than `fanout`, and
        /// the farthest is `depth(n, fanout)` hops away — whatever the origin and the order
        /// the members are listed in.
        #[test]
        fn every_replica_once_within_the_depth(
            n in 1usize..300,
            fanout in 1usize..70,
            origin in any::<prop::sample::Index>(),
            seed in any::<u64>(),
        ) {
            let mut m = ids(n);
            // Any listing order (and a repeat) builds the same tree.
            let k = (seed as usize) % n;
            m.rotate_left(k);
            m.push(m[0].clone());
            let origin = m[origin.index(n)].clone();
            let hops = walk(&m, &origin, fanout);
            prop_assert_eq!(hops.len(), n);
            prop_assert_eq!(hops.values().copied().max().unwrap_or(0), depth(n, fanout));
            for me in &m {
                prop_assert!(children(&m, &origin, me, fanout).len() <= fanout);
            }
        }
    }

    /// The sync tree is one tree: every replica but the root has the parent that lists it as a
    /// child, no replica has more than `fanout` children, and its depth is `depth(n, fanout)`.
    #[test]
    fn the_sync_tree_is_one_tree_rooted_at_the_lowest_id() {
        for n in [1usize, 2, 3, 5, 40, 70] {
            for fanout in [0usize, 1, 2, 3, 64] {
                let members = ids(n);
                let mut depth_of = BTreeMap::new();
                for (i, me) in members.iter().enumerate() {
                    let (parent, children) = sync_neighbours(&members, me, fanout);
                    assert!(children.len() <= fanout.max(1));
                    assert_eq!(parent.is_none(), i == 0, "n {n} fanout {fanout}: {me}");
                    if let Some(p) = parent {
                        let (_, siblings) = sync_neighbours(&members, p, fanout);
                        assert!(siblings.contains(&me));
                        let d = depth_of[p] + 1;
                        depth_of.insert(me, d);
                    } else {
                        depth_of.insert(me, 0usize);
                    }
                }
                let deepest = depth_of.values().copied().max().unwrap_or(0);
                assert_eq!(deepest, depth(n, fanout.max(1)), "n {n} fanout {fanout}");
            }
        }
        let stranger = ReplicaId::new("zz").unwrap();
        assert_eq!(sync_neighbours(&ids(3), &stranger, 2), (None, Vec::new()));
    }
}
