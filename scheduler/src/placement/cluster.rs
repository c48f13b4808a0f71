//! The cluster: zones, their nodes, and the two levels of slot tables.

use std::collections::{BTreeMap, BTreeSet};

use ferry_proto::NodeId;

use super::error::{ChangeError, ConfigError};
use super::hash::{Key, str_hash};
use super::spec::{NodeSpec, PlacementConfig};
use super::table::{Slot, SlotRef, Table, threshold};

/// Seed of the zone-level table.
pub(crate) const ZONE_TABLE_SEED: u64 = 0x7A6F_6E65_732E_6665; // "zones.fe"
/// Salt of a zone's node-level table (its seed is the zone name's hash).
const NODE_TABLE_SALT: u64 = 0x6E6F_6465_732E_6665; // "nodes.fe"

pub(crate) fn node_table_seed(zone: &str) -> u64 {
    str_hash(zone) ^ NODE_TABLE_SALT
}

/// A node inside its zone.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) spec: NodeSpec,
    /// Interned capabilities, one bit each.
    pub(crate) caps: u64,
    pub(crate) slot: SlotRef,
}

/// A zone: its weight, its nodes and their slot table.
#[derive(Clone, Debug)]
pub(crate) struct Zone {
    pub(crate) name: String,
    /// Explicit weight; `None` means the zone weight scale.
    pub(crate) weight: Option<f64>,
    pub(crate) table: Table,
    /// Owners of `table`'s slots; `None` once a node left (index reused).
    pub(crate) members: Vec<Option<Member>>,
    pub(crate) free_members: Vec<u32>,
    /// Slots vacated by nodes that left, so a node that comes back gets its
    /// old slot (and its old keys) back.
    pub(crate) vacated: BTreeMap<NodeId, SlotRef>,
    /// Σ member weights, summed in slot order (deterministic).
    pub(crate) live_weight: f64,
    /// This zone's slot in the zone table.
    pub(crate) zone_slot: SlotRef,
}

impl Zone {
    pub(crate) fn weight_or(&self, scale: f64) -> f64 {
        self.weight.unwrap_or(scale)
    }

    pub(crate) fn member(&self, owner: u32) -> Option<&Member> {
        self.members.get(owner as usize).and_then(Option::as_ref)
    }

    /// Members in slot order.
    pub(crate) fn members_in_slot_order(&self) -> impl Iterator<Item = &Member> {
        self.table
            .gens()
            .iter()
            .flat_map(|g| g.slots.iter())
            .filter_map(|s| self.member(s.owner))
    }
}

/// The placement state of a cluster: zones, nodes, weights, slot tables.
///
/// Every method is deterministic; the state is exactly what
/// [`Cluster::snapshot`] returns.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub(crate) cfg: PlacementConfig,
    pub(crate) zones: Vec<Zone>,
    pub(crate) zone_by_name: BTreeMap<String, u32>,
    pub(crate) zone_table: Table,
    /// Node id → (zone index, member index).
    pub(crate) nodes: BTreeMap<NodeId, (u32, u32)>,
    /// Interned capability names; bit `i` of [`Member::caps`].
    pub(crate) capabilities: Vec<String>,
    /// The one zone with live weight, when there is exactly one (lookups
    /// then skip the zone level: the zone table could only answer it).
    single_zone: Option<u32>,
}

pub(crate) fn validate(cfg: &PlacementConfig) -> Result<(), ConfigError> {
    let bad = |field, rule, value| Err(ConfigError::Invalid { field, rule, value });
    if !(cfg.epsilon.is_finite() && cfg.epsilon >= 0.0) {
        return bad("epsilon", "finite and >= 0", cfg.epsilon);
    }
    if !(cfg.weight_scale.is_finite() && cfg.weight_scale > 0.0) {
        return bad("weight_scale", "finite and > 0", cfg.weight_scale);
    }
    if !(cfg.zone_weight_scale.is_finite() && cfg.zone_weight_scale > 0.0) {
        return bad("zone_weight_scale", "finite and > 0", cfg.zone_weight_scale);
    }
    if !(cfg.growth.is_finite() && cfg.growth > 0.0 && cfg.growth <= 64.0) {
        return bad("growth", "in (0, 64]", cfg.growth);
    }
    if !(cfg.spare.is_finite() && (0.0..=64.0).contains(&cfg.spare)) {
        return bad("spare", "in [0, 64]", cfg.spare);
    }
    Ok(())
}

pub(crate) fn check_weight(weight: f64, scale: f64) -> Result<(), ChangeError> {
    if (0.0..=scale).contains(&weight) {
        Ok(())
    } else {
        Err(ChangeError::Weight { weight, scale })
    }
}

impl Cluster {
    /// An empty cluster.
    pub fn new(cfg: PlacementConfig) -> Result<Cluster, ConfigError> {
        validate(&cfg)?;
        Ok(Cluster::empty(cfg))
    }

    pub(crate) fn empty(cfg: PlacementConfig) -> Cluster {
        Cluster {
            cfg,
            zones: Vec::new(),
            zone_by_name: BTreeMap::new(),
            zone_table: Table::new(ZONE_TABLE_SEED),
            nodes: BTreeMap::new(),
            capabilities: Vec::new(),
            single_zone: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PlacementConfig {
        &self.cfg
    }

    /// Joins a node or updates it (weight, host, region, capabilities).
    ///
    /// A join takes the node's old slot if it left earlier and the slot is
    /// still free, else any free slot, else a slot of a new generation; at
    /// its weight it then draws only keys to itself. An update changes only
    /// this node's slot: keys move only to it (weight up) or from it (down).
    /// A new zone means leave + join. On error nothing changed.
    pub fn upsert(&mut self, spec: NodeSpec) -> Result<(), ChangeError> {
        check_weight(spec.weight, self.cfg.weight_scale)?;
        let caps = self.intern(&spec)?;
        if let Some(&(zi, mi)) = self.nodes.get(&spec.id) {
            if self.zones[zi as usize].name == spec.zone {
                let zone = &mut self.zones[zi as usize];
                let thr = threshold(spec.weight, self.cfg.weight_scale);
                if let Some(m) = zone.members.get_mut(mi as usize).and_then(Option::as_mut) {
                    zone.table.set_thr(m.slot, thr);
                    m.spec = spec;
                    m.caps = caps;
                }
                self.refresh_zone(zi);
                return Ok(());
            }
            self.remove(&spec.id);
        }
        self.join(spec, caps);
        Ok(())
    }

    fn intern(&mut self, spec: &NodeSpec) -> Result<u64, ChangeError> {
        let new = spec
            .capabilities
            .iter()
            .filter(|c| !self.capabilities.contains(c))
            .count();
        if self.capabilities.len() + new > 64 {
            return Err(ChangeError::TooManyCapabilities);
        }
        let mut mask = 0u64;
        for c in &spec.capabilities {
            let bit = match self.capabilities.iter().position(|k| k == c) {
                Some(i) => i,
                None => {
                    self.capabilities.push(c.clone());
                    self.capabilities.len() - 1
                }
            };
            mask |= 1 << bit;
        }
        Ok(mask)
    }

    fn join(&mut self, spec: NodeSpec, caps: u64) {
        let zi = self.zone_or_create(&spec.zone);
        let growth = self.cfg.growth;
        let thr = threshold(spec.weight, self.cfg.weight_scale);
        let zone = &mut self.zones[zi as usize];
        let mi = match zone.free_members.pop() {
            Some(mi) => mi,
            None => {
                zone.members.push(None);
                (zone.members.len() - 1) as u32
            }
        };
        // Its own tombstone, else a never-used slot, else another node's
        // tombstone (that node then cannot get its keys back on return).
        let prefer = zone.vacated.remove(&spec.id).or_else(|| {
            let remembered: BTreeSet<SlotRef> = zone.vacated.values().copied().collect();
            zone.table.free_slots().find(|r| !remembered.contains(r))
        });
        let slot = zone.table.insert(mi, prefer, growth);
        zone.vacated.retain(|_, r| *r != slot);
        zone.table.set_thr(slot, thr);
        self.nodes.insert(spec.id.clone(), (zi, mi));
        zone.members[mi as usize] = Some(Member { spec, caps, slot });
        self.refresh_zone(zi);
    }

    fn zone_or_create(&mut self, name: &str) -> u32 {
        if let Some(&zi) = self.zone_by_name.get(name) {
            return zi;
        }
        let zi = self.zones.len() as u32;
        let zone_slot = self.zone_table.insert(zi, None, self.cfg.growth);
        self.zones.push(Zone {
            name: name.to_owned(),
            weight: None,
            table: Table::new(node_table_seed(name)),
            members: Vec::new(),
            free_members: Vec::new(),
            vacated: BTreeMap::new(),
            live_weight: 0.0,
            zone_slot,
        });
        self.zone_by_name.insert(name.to_owned(), zi);
        zi
    }

    /// Recomputes a zone's live weight and its zone-table threshold: a zone
    /// without live nodes has weight 0 at the zone level, so its keys go to
    /// the other zones (and come back when it does).
    pub(crate) fn refresh_zone(&mut self, zi: u32) {
        let zone_scale = self.cfg.zone_weight_scale;
        let Some(zone) = self.zones.get_mut(zi as usize) else {
            return;
        };
        zone.live_weight = zone.members_in_slot_order().map(|m| m.spec.weight).sum();
        let thr = if zone.table.is_live() {
            threshold(zone.weight_or(zone_scale), zone_scale)
        } else {
            0
        };
        let slot = zone.zone_slot;
        if self.zone_table.slot(slot).is_some_and(|s| s.thr != thr) {
            self.zone_table.set_thr(slot, thr);
        }
        let mut live = self
            .zones
            .iter()
            .enumerate()
            .filter(|(_, z)| self.zone_table.slot(z.zone_slot).is_some_and(|s| s.thr > 0));
        self.single_zone = match (live.next(), live.next()) {
            (Some((i, _)), None) => Some(i as u32),
            _ => None,
        };
    }

    /// Removes a node: its slot becomes a tombstone (weight 0), so only its
    /// own keys move. False if it was not there.
    pub fn remove(&mut self, id: &NodeId) -> bool {
        let Some((zi, mi)) = self.nodes.remove(id) else {
            return false;
        };
        let zone = &mut self.zones[zi as usize];
        if let Some(m) = zone.members.get_mut(mi as usize).and_then(Option::take) {
            zone.table.vacate(m.slot);
            zone.vacated.insert(m.spec.id, m.slot);
            zone.free_members.push(mi);
        }
        self.refresh_zone(zi);
        true
    }

    /// Sets a zone's weight (in `[0, zone_weight_scale]`), creating the zone
    /// if needed. Moves keys only between this zone and the others.
    pub fn set_zone_weight(&mut self, zone: &str, weight: f64) -> Result<(), ChangeError> {
        check_weight(weight, self.cfg.zone_weight_scale)?;
        let zi = self.zone_or_create(zone);
        self.zones[zi as usize].weight = Some(weight);
        self.refresh_zone(zi);
        Ok(())
    }

    /// The node a key belongs to, ignoring loads and filters.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<&NodeId> {
        self.lookup_key(Key::new(key))
    }

    /// [`Cluster::lookup`] for an already hashed key.
    #[inline]
    pub fn lookup_key(&self, key: Key) -> Option<&NodeId> {
        let zi = match self.single_zone {
            Some(zi) => zi,
            None => self.zone_table.first(key.0)?,
        };
        let zone = self.zones.get(zi as usize)?;
        zone.member(zone.table.first(key.0)?).map(|m| &m.spec.id)
    }

    /// A node's spec.
    pub fn node(&self, id: &NodeId) -> Option<&NodeSpec> {
        let &(zi, mi) = self.nodes.get(id)?;
        self.zones[zi as usize].member(mi).map(|m| &m.spec)
    }

    /// Every node, by id.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeSpec> {
        self.nodes
            .values()
            .filter_map(|&(zi, mi)| self.zones[zi as usize].member(mi).map(|m| &m.spec))
    }

    /// Number of nodes (zero-weight ones included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no node is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A zone's weight as used (explicit, else the zone scale).
    pub fn zone_weight(&self, zone: &str) -> Option<f64> {
        let &zi = self.zone_by_name.get(zone)?;
        Some(self.zones[zi as usize].weight_or(self.cfg.zone_weight_scale))
    }

    /// The fraction of keys a node gets from [`Cluster::lookup`]:
    /// `zone_w / Σ zone_w (zones with live nodes) × w / Σ w (its zone)`.
    pub fn share(&self, id: &NodeId) -> f64 {
        let Some(&(zi, mi)) = self.nodes.get(id) else {
            return 0.0;
        };
        let zone = &self.zones[zi as usize];
        let Some(m) = zone.member(mi) else {
            return 0.0;
        };
        let scale = self.cfg.zone_weight_scale;
        let total: f64 = self
            .zones
            .iter()
            .filter(|z| z.live_weight > 0.0)
            .map(|z| z.weight_or(scale))
            .sum();
        if zone.live_weight <= 0.0 || total <= 0.0 {
            return 0.0;
        }
        zone.weight_or(scale) / total * m.spec.weight / zone.live_weight
    }

    /// Slots (free ones included) and generations, per zone, for operators
    /// deciding when to [`compact`](Cluster::compact): a lookup costs about
    /// `slots · W / Σ w` attempts plus a little per extra generation.
    pub fn zone_stats(&self) -> Vec<(String, usize, usize)> {
        self.zones
            .iter()
            .map(|z| (z.name.clone(), z.table.capacity(), z.table.gens().len()))
            .collect()
    }

    /// Rebuilds every table that has several generations, or more free
    /// slots than `ceil(spare × members)`, into one generation: its members
    /// sorted by id (zones by name; empty zones without an explicit weight
    /// are dropped), then `ceil(spare × members)` free slots, under a fresh
    /// generation id.
    ///
    /// This restores the fastest lookups, and it is a rehash: in a rebuilt
    /// zone almost every key moves (`1 − Σ share²` of them). A compact table
    /// is left alone, so compacting twice moves nothing the second time. Run
    /// it like a planned rebalance, under the migration budget.
    pub fn compact(&mut self) {
        let scale = self.cfg.weight_scale;
        let spare = self.cfg.spare;
        for zone in &mut self.zones {
            let mut live: Vec<u32> = (0..zone.members.len() as u32)
                .filter(|&mi| zone.member(mi).is_some())
                .collect();
            if zone.table.is_compact(spare_slots(spare, live.len())) {
                continue;
            }
            live.sort_by(|&a, &b| {
                let id = |i: u32| zone.member(i).map(|m| &m.spec.id);
                id(a).cmp(&id(b))
            });
            let mut slots = Vec::with_capacity(live.len() + spare_slots(spare, live.len()));
            for (i, &mi) in live.iter().enumerate() {
                if let Some(m) = zone.members[mi as usize].as_mut() {
                    m.slot = SlotRef {
                        gen_index: 0,
                        slot: i as u32,
                    };
                    slots.push(Slot {
                        thr: threshold(m.spec.weight, scale),
                        owner: mi,
                    });
                }
            }
            slots.resize(live.len() + spare_slots(spare, live.len()), Slot::FREE);
            zone.table = Table::packed(zone.table.seed(), zone.table.next_id(), slots);
            zone.vacated.clear();
        }
        let keep: Vec<bool> = self
            .zones
            .iter()
            .map(|z| z.members.iter().any(Option::is_some) || z.weight.is_some())
            .collect();
        let kept = keep.iter().filter(|&&k| k).count();
        if kept == keep.len() && self.zone_table.is_compact(spare_slots(spare, kept)) {
            return;
        }
        let old = std::mem::take(&mut self.zones);
        let mut zones: Vec<Zone> = old
            .into_iter()
            .zip(keep)
            .filter_map(|(z, k)| k.then_some(z))
            .collect();
        zones.sort_by(|a, b| a.name.cmp(&b.name));
        let mut slots: Vec<Slot> = (0..zones.len() as u32)
            .map(|zi| Slot { thr: 0, owner: zi })
            .collect();
        slots.resize(zones.len() + spare_slots(spare, zones.len()), Slot::FREE);
        self.zone_table = Table::packed(ZONE_TABLE_SEED, self.zone_table.next_id(), slots);
        self.zone_by_name.clear();
        self.nodes.clear();
        for (zi, zone) in zones.iter_mut().enumerate() {
            zone.zone_slot = SlotRef {
                gen_index: 0,
                slot: zi as u32,
            };
            self.zone_by_name.insert(zone.name.clone(), zi as u32);
            for (mi, m) in zone.members.iter().enumerate() {
                if let Some(m) = m {
                    self.nodes.insert(m.spec.id.clone(), (zi as u32, mi as u32));
                }
            }
        }
        self.zones = zones;
        for zi in 0..self.zones.len() as u32 {
            self.refresh_zone(zi);
        }
    }
}

/// Free slots compaction leaves for `members` members.
fn spare_slots(spare: f64, members: usize) -> usize {
    (spare * members as f64).ceil() as usize
}
