//! A weighted consistent-hash ring with virtual nodes: a comparison policy.
//!
//! Node `i` puts `round(w_i · vnodes_per_weight)` points on a 64-bit ring at
//! `mix64(xxh3(id) + j·φ)`, `j = 0, 1, …`; a key belongs to the first point
//! at or after its hash. Because a node's `j`-th point never moves, removing
//! a node or changing its weight moves only keys to or from it, like ours;
//! but shares are only as even as the points fall (relative spread about
//! `1/√points`), a lookup is a binary search over every point, and there is
//! no bounded-load or zone level.

use ferry_proto::NodeId;

use super::hash::{GOLDEN, Key, mix64, str_hash};

/// A weighted vnode ring.
#[derive(Clone, Debug)]
pub struct Ring {
    points: Vec<u64>,
    owners: Vec<u32>,
    nodes: Vec<NodeId>,
}

impl Ring {
    /// Builds the ring; weights are relative (any non-negative scale).
    pub fn new(nodes: &[(NodeId, f64)], vnodes_per_weight: f64) -> Ring {
        let mut all: Vec<(u64, u32)> = Vec::new();
        for (i, (id, w)) in nodes.iter().enumerate() {
            let count = (w.max(0.0) * vnodes_per_weight).round() as u64;
            let base = str_hash(id.as_str());
            for j in 0..count {
                all.push((
                    mix64(base.wrapping_add((j + 1).wrapping_mul(GOLDEN))),
                    i as u32,
                ));
            }
        }
        all.sort_unstable();
        Ring {
            points: all.iter().map(|p| p.0).collect(),
            owners: all.iter().map(|p| p.1).collect(),
            nodes: nodes.iter().map(|n| n.0.clone()).collect(),
        }
    }

    /// Number of points on the ring.
    pub fn points(&self) -> usize {
        self.points.len()
    }

    /// The node of a key.
    pub fn lookup(&self, key: &[u8]) -> Option<&NodeId> {
        self.lookup_key(Key::new(key))
    }

    /// [`Ring::lookup`] for an already hashed key.
    #[inline]
    pub fn lookup_key(&self, key: Key) -> Option<&NodeId> {
        if self.points.is_empty() {
            return None;
        }
        let i = self.points.partition_point(|&p| p < key.0);
        let owner = self.owners.get(i).or_else(|| self.owners.first())?;
        self.nodes.get(*owner as usize)
    }
}
