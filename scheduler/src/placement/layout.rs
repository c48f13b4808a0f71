//! The stored form of a [`Cluster`]: enough to rebuild identical placements.

use std::collections::{BTreeMap, BTreeSet};

use ferry_proto::NodeId;
use serde::{Deserialize, Serialize};

use super::cluster::{
    Cluster, Member, ZONE_TABLE_SEED, Zone, check_weight, node_table_seed, validate,
};
use super::error::LayoutError;
use super::spec::{NodeSpec, PlacementConfig};
use super::table::{Slot, SlotRef, Table, threshold};

/// The current [`Layout::version`].
pub const LAYOUT_VERSION: u32 = 1;

/// Largest generation a layout may hold.
const MAX_GENERATION: usize = 1 << 24;

/// A cluster's placement state as plain data (serde).
///
/// Placements depend on slot positions and generation ids, not on node
/// names, so this — not the node list — is what a scheduler persists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    pub version: u32,
    pub weight_scale: f64,
    pub zone_weight_scale: f64,
    /// The zone-level table; slots name zones.
    pub zone_generations: Vec<GenerationLayout>,
    pub next_zone_generation: u32,
    pub zones: Vec<ZoneLayout>,
}

/// One zone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZoneLayout {
    pub name: String,
    /// Explicit weight; absent means the zone weight scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The node-level table; slots name nodes of this zone.
    pub generations: Vec<GenerationLayout>,
    pub next_generation: u32,
    pub nodes: Vec<NodeSpec>,
}

/// One generation of slots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerationLayout {
    pub id: u32,
    pub slots: Vec<SlotLayout>,
}

/// One slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotLayout {
    /// Never used.
    Free,
    /// Owned by this node (or zone, in the zone table).
    Taken(String),
    /// A tombstone: free, last owned by this node, which gets it back if it
    /// rejoins before another node takes it.
    Vacated(String),
}

fn gens_layout(table: &Table, name: impl Fn(u32) -> Option<String>) -> Vec<GenerationLayout> {
    table
        .gens()
        .iter()
        .map(|g| GenerationLayout {
            id: g.id,
            slots: g
                .slots
                .iter()
                .map(|s| name(s.owner).map_or(SlotLayout::Free, SlotLayout::Taken))
                .collect(),
        })
        .collect()
}

impl Cluster {
    /// The whole placement state.
    pub fn snapshot(&self) -> Layout {
        Layout {
            version: LAYOUT_VERSION,
            weight_scale: self.cfg.weight_scale,
            zone_weight_scale: self.cfg.zone_weight_scale,
            zone_generations: gens_layout(&self.zone_table, |zi| {
                self.zones.get(zi as usize).map(|z| z.name.clone())
            }),
            next_zone_generation: self.zone_table.next_id(),
            zones: self.zones.iter().map(zone_layout).collect(),
        }
    }

    /// Rebuilds a cluster from [`Cluster::snapshot`]: every lookup and
    /// placement is identical. `cfg`'s weight scales must be the layout's
    /// (they decide the acceptance thresholds); the rest may differ.
    pub fn restore(cfg: PlacementConfig, layout: Layout) -> Result<Cluster, LayoutError> {
        if layout.version != LAYOUT_VERSION {
            return Err(LayoutError::Version(layout.version));
        }
        validate(&cfg)?;
        if layout.weight_scale != cfg.weight_scale
            || layout.zone_weight_scale != cfg.zone_weight_scale
        {
            return Err(LayoutError::Scale {
                layout: layout.weight_scale,
                zone_layout: layout.zone_weight_scale,
            });
        }
        let mut c = Cluster::empty(cfg);
        for z in layout.zones {
            c.restore_zone(z)?;
        }
        let names: BTreeMap<String, u32> = c.zone_by_name.clone();
        let mut placed = BTreeSet::new();
        let gens = restore_gens(layout.zone_generations, |gi, si, s| match s {
            SlotLayout::Free | SlotLayout::Vacated(_) => Ok(Slot::FREE),
            SlotLayout::Taken(name) => {
                let &zi = names.get(&name).ok_or(LayoutError::Unknown(name.clone()))?;
                if !placed.insert(zi) {
                    return Err(LayoutError::Duplicate(name));
                }
                c.zones[zi as usize].zone_slot = SlotRef {
                    gen_index: gi,
                    slot: si,
                };
                Ok(Slot { thr: 0, owner: zi })
            }
        })?;
        if let Some(z) = c
            .zones
            .iter()
            .enumerate()
            .find(|(i, _)| !placed.contains(&(*i as u32)))
        {
            return Err(LayoutError::Unplaced(z.1.name.clone()));
        }
        if gens.iter().any(|g| g.0 == layout.next_zone_generation) {
            return Err(LayoutError::Generation);
        }
        c.zone_table = Table::restore(ZONE_TABLE_SEED, gens, layout.next_zone_generation);
        for zi in 0..c.zones.len() as u32 {
            c.refresh_zone(zi);
        }
        Ok(c)
    }

    fn restore_zone(&mut self, z: ZoneLayout) -> Result<(), LayoutError> {
        if self.zone_by_name.contains_key(&z.name) {
            return Err(LayoutError::Duplicate(z.name));
        }
        if let Some(w) = z.weight {
            check_weight(w, self.cfg.zone_weight_scale)?;
        }
        let zi = self.zones.len() as u32;
        let mut by_id: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut members = Vec::with_capacity(z.nodes.len());
        for spec in z.nodes {
            check_weight(spec.weight, self.cfg.weight_scale)?;
            if spec.zone != z.name {
                return Err(LayoutError::Unknown(spec.id.to_string()));
            }
            if self.nodes.contains_key(&spec.id) || by_id.contains_key(&spec.id) {
                return Err(LayoutError::Duplicate(spec.id.to_string()));
            }
            let caps = self.intern_all(&spec)?;
            by_id.insert(spec.id.clone(), members.len() as u32);
            members.push((spec, caps, None::<SlotRef>));
        }
        let scale = self.cfg.weight_scale;
        let mut vacated = BTreeMap::new();
        let gens = restore_gens(z.generations, |gi, si, s| {
            let at = SlotRef {
                gen_index: gi,
                slot: si,
            };
            match s {
                SlotLayout::Free => Ok(Slot::FREE),
                SlotLayout::Vacated(id) => {
                    if let Ok(id) = NodeId::new(id) {
                        vacated.insert(id, at);
                    }
                    Ok(Slot::FREE)
                }
                SlotLayout::Taken(id) => {
                    let mi = NodeId::new(id.clone())
                        .ok()
                        .and_then(|n| by_id.get(&n).copied())
                        .ok_or(LayoutError::Unknown(id.clone()))?;
                    let m = &mut members[mi as usize];
                    if m.2.replace(at).is_some() {
                        return Err(LayoutError::Duplicate(id));
                    }
                    Ok(Slot {
                        thr: threshold(m.0.weight, scale),
                        owner: mi,
                    })
                }
            }
        })?;
        if gens.iter().any(|g| g.0 == z.next_generation) {
            return Err(LayoutError::Generation);
        }
        let mut zone = Zone {
            name: z.name.clone(),
            weight: z.weight,
            table: Table::restore(node_table_seed(&z.name), gens, z.next_generation),
            members: Vec::with_capacity(members.len()),
            free_members: Vec::new(),
            vacated,
            live_weight: 0.0,
            zone_slot: SlotRef {
                gen_index: 0,
                slot: 0,
            },
        };
        for (mi, (spec, caps, slot)) in members.into_iter().enumerate() {
            let slot = slot.ok_or(LayoutError::Unplaced(spec.id.to_string()))?;
            self.nodes.insert(spec.id.clone(), (zi, mi as u32));
            zone.members.push(Some(Member { spec, caps, slot }));
        }
        self.zone_by_name.insert(z.name, zi);
        self.zones.push(zone);
        Ok(())
    }

    fn intern_all(&mut self, spec: &NodeSpec) -> Result<u64, LayoutError> {
        let mut mask = 0u64;
        for c in &spec.capabilities {
            let bit = match self.capabilities.iter().position(|k| k == c) {
                Some(i) => i,
                None if self.capabilities.len() < 64 => {
                    self.capabilities.push(c.clone());
                    self.capabilities.len() - 1
                }
                None => return Err(super::error::ChangeError::TooManyCapabilities.into()),
            };
            mask |= 1 << bit;
        }
        Ok(mask)
    }
}

fn zone_layout(z: &Zone) -> ZoneLayout {
    let mut generations = gens_layout(&z.table, |mi| z.member(mi).map(|m| m.spec.id.to_string()));
    for (id, at) in &z.vacated {
        if let Some(s) = generations
            .get_mut(at.gen_index as usize)
            .and_then(|g| g.slots.get_mut(at.slot as usize))
            && *s == SlotLayout::Free
        {
            *s = SlotLayout::Vacated(id.to_string());
        }
    }
    ZoneLayout {
        name: z.name.clone(),
        weight: z.weight,
        generations,
        next_generation: z.table.next_id(),
        nodes: z.members_in_slot_order().map(|m| m.spec.clone()).collect(),
    }
}

type Gens = Vec<(u32, Vec<Slot>)>;

fn restore_gens(
    gens: Vec<GenerationLayout>,
    mut slot: impl FnMut(u32, u32, SlotLayout) -> Result<Slot, LayoutError>,
) -> Result<Gens, LayoutError> {
    let mut ids = BTreeSet::new();
    let mut out = Vec::with_capacity(gens.len());
    for (gi, g) in gens.into_iter().enumerate() {
        if g.slots.is_empty() || g.slots.len() > MAX_GENERATION || !ids.insert(g.id) {
            return Err(LayoutError::Generation);
        }
        let mut slots = Vec::with_capacity(g.slots.len());
        for (si, s) in g.slots.into_iter().enumerate() {
            slots.push(slot(gi as u32, si as u32, s)?);
        }
        out.push((g.id, slots));
    }
    Ok(out)
}
