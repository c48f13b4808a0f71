//! Dots, version vectors and the causal context of a replica.
//!
//! Every operation gets a dot `(replica, seq)`: the origin replica numbers its own operations
//! 1, 2, 3, … A version vector `{replica → n}` stands for the dots `(replica, 1..=n)`. The
//! causal context is a version vector plus the dots seen out of order (the "cloud"); it says
//! which operations a replica has merged, which is what delta sync, acknowledgements and
//! tombstone collection reason about.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::ReplicaId;

/// One operation's identity: the `seq`-th operation stamped by `replica` (seq starts at 1).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct Dot {
    /// The replica that stamped the operation.
    pub replica: ReplicaId,
    /// Its per-replica sequence number, from 1.
    pub seq: u64,
}

/// `{replica → n}`: all dots `(replica, 1..=n)`.
#[derive(Clone, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct VersionVector(BTreeMap<ReplicaId, u64>);

impl VersionVector {
    /// The empty vector (covers nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many of `replica`'s dots are covered.
    pub fn get(&self, replica: &ReplicaId) -> u64 {
        self.0.get(replica).copied().unwrap_or(0)
    }

    /// Whether `dot` is covered.
    pub fn covers(&self, dot: &Dot) -> bool {
        dot.seq <= self.get(&dot.replica)
    }

    /// Raises `replica`'s entry to at least `seq`.
    pub fn raise(&mut self, replica: &ReplicaId, seq: u64) {
        if seq > self.get(replica) {
            self.0.insert(replica.clone(), seq);
        }
    }

    /// Pointwise maximum.
    pub fn join(&mut self, other: &VersionVector) {
        for (r, n) in &other.0 {
            self.raise(r, *n);
        }
    }

    /// Pointwise minimum (a missing entry counts as 0).
    pub fn meet(&self, other: &VersionVector) -> VersionVector {
        let mut out = VersionVector::new();
        for (r, n) in &self.0 {
            let m = (*n).min(other.get(r));
            if m > 0 {
                out.0.insert(r.clone(), m);
            }
        }
        out
    }

    /// Whether every dot of `self` is covered by `other`.
    pub fn dominated_by(&self, other: &VersionVector) -> bool {
        self.0.iter().all(|(r, n)| *n <= other.get(r))
    }

    /// The entries, in replica order.
    pub fn iter(&self) -> impl Iterator<Item = (&ReplicaId, u64)> {
        self.0.iter().map(|(r, n)| (r, *n))
    }

    /// Sum of all entries: the number of operations covered.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

impl FromIterator<(ReplicaId, u64)> for VersionVector {
    fn from_iter<I: IntoIterator<Item = (ReplicaId, u64)>>(iter: I) -> Self {
        let mut vv = VersionVector::new();
        for (r, n) in iter {
            vv.raise(&r, n);
        }
        vv
    }
}

/// The dots a replica has merged: a version vector plus out-of-order dots, kept compact (no
/// cloud dot is covered by, or adjacent to, the vector), so equal sets have equal values.
#[derive(Clone, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CausalContext {
    vv: VersionVector,
    cloud: BTreeSet<Dot>,
}

impl CausalContext {
    /// The contiguous part.
    pub fn vv(&self) -> &VersionVector {
        &self.vv
    }

    /// How many dots are held out of order.
    pub fn cloud_len(&self) -> usize {
        self.cloud.len()
    }

    /// Whether `dot` has been merged.
    pub fn covers(&self, dot: &Dot) -> bool {
        self.vv.covers(dot) || self.cloud.contains(dot)
    }

    /// Records one merged dot.
    pub fn insert(&mut self, dot: Dot) {
        if self.vv.covers(&dot) {
            return;
        }
        if dot.seq == self.vv.get(&dot.replica) + 1 {
            self.vv.raise(&dot.replica, dot.seq);
            self.absorb(&dot.replica);
        } else {
            self.cloud.insert(dot);
        }
    }

    /// Records the whole range `(base, top]` of `replica` as merged. The caller guarantees it
    /// merged every still-existing entry of that range.
    pub fn insert_range(&mut self, replica: &ReplicaId, base: u64, top: u64) {
        if self.vv.get(replica) >= base && top > self.vv.get(replica) {
            self.vv.raise(replica, top);
            self.absorb(replica);
        }
    }

    /// Union with another context.
    pub fn join(&mut self, other: &CausalContext) {
        let replicas: Vec<ReplicaId> = other.vv.iter().map(|(r, _)| r.clone()).collect();
        self.vv.join(&other.vv);
        for r in &replicas {
            self.absorb(r);
        }
        for d in &other.cloud {
            self.insert(d.clone());
        }
    }

    /// Moves cloud dots of `replica` that became contiguous into the vector.
    fn absorb(&mut self, replica: &ReplicaId) {
        let start = Dot {
            replica: replica.clone(),
            seq: 0,
        };
        let mut next = self.vv.get(replica);
        let mut drop = Vec::new();
        for d in self.cloud.range(start..) {
            if &d.replica != replica {
                break;
            }
            if d.seq <= next {
                drop.push(d.clone());
            } else if d.seq == next + 1 {
                next = d.seq;
                drop.push(d.clone());
            } else {
                break;
            }
        }
        for d in drop {
            self.cloud.remove(&d);
        }
        self.vv.raise(replica, next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(r: &str, seq: u64) -> Dot {
        Dot {
            replica: ReplicaId::new(r).unwrap(),
            seq,
        }
    }

    #[test]
    fn out_of_order_dots_compact_into_the_vector() {
        let mut c = CausalContext::default();
        c.insert(dot("a", 3));
        c.insert(dot("a", 2));
        assert_eq!(c.vv().get(&dot("a", 0).replica), 0);
        assert_eq!(c.cloud_len(), 2);
        c.insert(dot("a", 1));
        assert_eq!(c.vv().get(&dot("a", 0).replica), 3);
        assert_eq!(c.cloud_len(), 0);
        assert!(c.covers(&dot("a", 2)) && !c.covers(&dot("a", 4)));
    }

    #[test]
    fn ranges_extend_only_from_a_covered_base() {
        let a = dot("a", 0).replica;
        let mut c = CausalContext::default();
        c.insert_range(&a, 2, 5);
        assert_eq!(c.vv().get(&a), 0, "base 2 not covered: nothing claimed");
        c.insert(dot("a", 7));
        c.insert_range(&a, 0, 6);
        assert_eq!((c.vv().get(&a), c.cloud_len()), (7, 0));
    }

    #[test]
    fn join_is_the_union_of_dot_sets() {
        let mut x = CausalContext::default();
        x.insert(dot("a", 1));
        x.insert(dot("b", 3));
        let mut y = CausalContext::default();
        y.insert(dot("a", 2));
        y.insert(dot("b", 1));
        y.insert(dot("b", 2));
        let mut xy = x.clone();
        xy.join(&y);
        let mut yx = y.clone();
        yx.join(&x);
        assert_eq!(xy, yx);
        assert_eq!(xy.vv().get(&dot("b", 0).replica), 3);
        assert_eq!(xy.cloud_len(), 0);
    }
}
