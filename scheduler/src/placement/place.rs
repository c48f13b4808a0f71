//! Placement of a new session: hard filters, soft anti-affinity, bounded
//! loads, over the same per-key order as [`Cluster::lookup`].

use ferry_proto::NodeId;

use super::cluster::{Cluster, Member};
use super::error::Unplaceable;
use super::hash::Key;
use super::spec::{Placement, Requirements};

/// The nodes a request may use, and their weighted shares among themselves.
struct Pool<'r> {
    caps: u64,
    region: Option<&'r str>,
    /// Per zone: Σ weight of its eligible nodes.
    eligible: Vec<f64>,
    /// Per zone: its share of the pool (0 when it has no eligible node).
    zone_share: Vec<f64>,
}

impl Pool<'_> {
    fn admits(&self, m: &Member) -> bool {
        m.spec.weight > 0.0
            && m.caps & self.caps == self.caps
            && self.region.is_none_or(|r| r == m.spec.region)
    }

    fn filtered(&self) -> bool {
        self.caps != 0 || self.region.is_some()
    }
}

impl Cluster {
    fn pool<'r>(&self, req: &'r Requirements) -> Result<Pool<'r>, Unplaceable> {
        let mut caps = 0u64;
        for c in &req.capabilities {
            match self.capabilities.iter().position(|k| k == c) {
                Some(bit) => caps |= 1 << bit,
                None => return Err(Unplaceable::NoEligibleNode),
            }
        }
        let mut pool = Pool {
            caps,
            region: req.region.as_deref(),
            eligible: Vec::with_capacity(self.zones.len()),
            zone_share: Vec::with_capacity(self.zones.len()),
        };
        let scale = self.cfg.zone_weight_scale;
        for zone in &self.zones {
            let e = if pool.filtered() {
                zone.members_in_slot_order()
                    .filter(|m| pool.admits(m))
                    .map(|m| m.spec.weight)
                    .sum()
            } else {
                zone.live_weight
            };
            pool.eligible.push(e);
            pool.zone_share
                .push(if e > 0.0 { zone.weight_or(scale) } else { 0.0 });
        }
        let total: f64 = pool.zone_share.iter().sum();
        if total <= 0.0 {
            return Err(Unplaceable::NoEligibleNode);
        }
        for s in &mut pool.zone_share {
            *s /= total;
        }
        Ok(pool)
    }

    /// The load bound of a member for this pool.
    fn bound(&self, pool: &Pool<'_>, zi: usize, m: &Member, total_after: u64) -> u64 {
        let share = pool.zone_share[zi] * m.spec.weight / pool.eligible[zi];
        let x = (1.0 + self.cfg.epsilon) * share * total_after.max(1) as f64;
        // Rounded down by a hair so that float error can never lift the
        // bound past ceil of the exact value.
        (x * (1.0 - 1e-12)).ceil() as u64
    }

    /// The load bound [`Cluster::place`] enforces on a node for a request:
    /// `ceil((1+ε) · share · total_after)`, where `share` is the node's share
    /// among the nodes that pass the request's hard filters (zone share ×
    /// share in its zone). `None` if the node is not eligible.
    pub fn load_bound(&self, id: &NodeId, req: &Requirements, total_after: u64) -> Option<u64> {
        let pool = self.pool(req).ok()?;
        let &(zi, mi) = self.nodes.get(id)?;
        let m = self.zones[zi as usize].member(mi)?;
        (pool.admits(m) && pool.zone_share[zi as usize] > 0.0)
            .then(|| self.bound(&pool, zi as usize, m, total_after))
    }

    /// Where a new session for `key` goes, given the current loads.
    ///
    /// Walks the key's preference order — zones in their order, and in each
    /// zone its nodes in their order (see `docs/placement.md`) — and takes
    /// the first node that passes the hard filters, is on none of
    /// `avoid_hosts` and has `load + 1 ≤ ceil((1+ε) · share · total_after)`.
    /// `load` is a node's current session count and `total_after` the
    /// pool's count including this session. Backups are the next distinct
    /// nodes of the walk, preferring hosts not used yet. Soft anti-affinity
    /// is relaxed (second walk) only when the first walk finds too few.
    ///
    /// With no filter, no load at its bound and no host to avoid, the
    /// result is [`Cluster::lookup`]'s node. Deterministic per key.
    pub fn place(
        &self,
        key: &[u8],
        req: &Requirements,
        load: &dyn Fn(&NodeId) -> u64,
        total_after: u64,
    ) -> Result<Placement, Unplaceable> {
        self.place_key(Key::new(key), req, load, total_after)
    }

    /// [`Cluster::place`] for an already hashed key.
    pub fn place_key(
        &self,
        key: Key,
        req: &Requirements,
        load: &dyn Fn(&NodeId) -> u64,
        total_after: u64,
    ) -> Result<Placement, Unplaceable> {
        let pool = self.pool(req)?;
        let want = 1 + self.cfg.backups;
        let mut chosen: Vec<&Member> = Vec::with_capacity(want);
        let spread = !req.avoid_hosts.is_empty() || want > 1;
        for strict in [true, false] {
            if strict && !spread {
                continue;
            }
            self.walk(key, &pool, |zi, m| {
                if chosen.iter().any(|c| c.spec.id == m.spec.id) {
                    return false;
                }
                if strict {
                    let host = m.spec.host.as_str();
                    if req.avoid_hosts.iter().any(|h| h == host)
                        || chosen.iter().any(|c| c.spec.host == host)
                    {
                        return false;
                    }
                }
                if load(&m.spec.id) >= self.bound(&pool, zi, m, total_after) {
                    return false;
                }
                chosen.push(m);
                chosen.len() == want
            });
            if chosen.len() == want {
                break;
            }
        }
        let mut ids = chosen.into_iter().map(|m| m.spec.id.clone());
        let node = ids.next().ok_or(Unplaceable::Full)?;
        Ok(Placement {
            node,
            backups: ids.collect(),
        })
    }

    /// Calls `visit` on the key's eligible candidates in preference order
    /// until it returns true.
    fn walk<'a>(
        &'a self,
        key: Key,
        pool: &Pool<'_>,
        mut visit: impl FnMut(usize, &'a Member) -> bool,
    ) {
        let budget = self.cfg.max_probes.max(1);
        let zones: Box<dyn Iterator<Item = u32>> = if self.zones.len() == 1 {
            Box::new(std::iter::once(0))
        } else {
            Box::new(self.zone_table.candidates(key.0, budget))
        };
        for zi in zones {
            let zi = zi as usize;
            let (Some(zone), Some(&share)) = (self.zones.get(zi), pool.zone_share.get(zi)) else {
                continue;
            };
            if share <= 0.0 {
                continue;
            }
            for mi in zone.table.candidates(key.0, budget) {
                if let Some(m) = zone.member(mi)
                    && pool.admits(m)
                    && visit(zi, m)
                {
                    return;
                }
            }
        }
    }
}
