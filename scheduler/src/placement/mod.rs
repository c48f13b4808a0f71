//! Placement: which node serves a key (a stream, a room, a TURN allocation).
//!
//! A pure core: no IO, no clock, no unseeded randomness. The cluster view
//! feeds it node specs and weights ([`Cluster::upsert`], [`Cluster::remove`]),
//! and asks it where a key goes ([`Cluster::lookup`]) or where a *new*
//! session should go given the current loads ([`Cluster::place`]). Its whole
//! state is a [`Layout`] ([`Cluster::snapshot`] / [`Cluster::restore`]), so a
//! restarted scheduler places every key exactly as before.
//!
//! The policy is weighted rejection sampling over a stable slot table (see
//! [`table`](self) and `docs/placement.md` for the algorithm and proofs):
//!
//! - two levels, zone then node; zone weights are explicit, so nothing that
//!   happens inside one zone moves another zone's keys;
//! - shares are proportional to weights, exactly (in the random-hash model),
//!   after any sequence of joins, removals and weight changes;
//! - a join, a removal or a weight change of node `j` moves only keys to or
//!   from `j`; a removed node's slot is a tombstone that a later join reuses;
//! - [`Cluster::place`] adds hard filters (capabilities, region), soft
//!   anti-affinity (hosts) and bounded loads (no node above
//!   `ceil((1+ε) · share · total)`), walking a deterministic per-key order.
//!
//! ```
//! use ferry_proto::NodeId;
//! use ferry_scheduler::placement::{Cluster, NodeSpec, PlacementConfig, Requirements};
//!
//! let mut cluster = Cluster::new(PlacementConfig::default()).unwrap();
//! for (i, zone) in ["az-1", "az-1", "az-2"].iter().enumerate() {
//!     let id = NodeId::new(format!("node-{i}")).unwrap();
//!     cluster.upsert(NodeSpec::new(id, zone, 1.0)).unwrap();
//! }
//! let owner = cluster.lookup(b"room-42").cloned().unwrap();
//! let loads = |_: &NodeId| 0;
//! let placed = cluster.place(b"room-42", &Requirements::default(), &loads, 1).unwrap();
//! assert_eq!(placed.node, owner); // nothing is full: placement = lookup
//! assert_eq!(placed.backups.len(), 2);
//! ```
//!
//! [`Maglev`] and [`Ring`] are the comparison policies of the benchmarks.

mod cluster;
mod hash;
mod layout;
mod maglev;
mod place;
mod ring;
pub mod scale;
mod table;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use ferry_proto::NodeId;
use serde::{Deserialize, Serialize};

pub use cluster::Cluster;
pub use hash::Key;
pub use layout::{GenerationLayout, Layout, SlotLayout, ZoneLayout};
pub use maglev::Maglev;
pub use ring::Ring;

/// Tuning of a [`Cluster`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlacementConfig {
    /// Bounded-loads slack ε: no node above `ceil((1+ε) · share · total)`.
    pub epsilon: f64,
    /// The fixed node weight scale `W`; node weights live in `[0, W]`.
    ///
    /// Fixed rather than "the largest weight" because it is what makes a
    /// weight change move only the changed node's keys. A lookup takes
    /// `capacity · W / Σw` attempts on average, so pick `W` near the largest
    /// weight you expect.
    pub weight_scale: f64,
    /// The same for zone weights; zones without an explicit weight get this.
    pub zone_weight_scale: f64,
    /// Accepted attempts a placement reads per table before it falls back to
    /// a full weighted-rendezvous order (filters that exclude most nodes,
    /// full nodes).
    pub max_probes: usize,
    /// Backup candidates returned with each placement.
    pub backups: usize,
    /// When a join finds no free slot, the new generation has
    /// `max(1, ceil(growth × capacity))` slots (spare ones serve later joins).
    pub growth: f64,
    /// [`Cluster::compact`] leaves `ceil(spare × nodes)` free slots per zone,
    /// so that a cluster can grow that much without a new generation.
    pub spare: f64,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            epsilon: 0.25,
            weight_scale: 1.0,
            zone_weight_scale: 1.0,
            max_probes: 32,
            backups: 2,
            growth: 1.0,
            spare: 0.25,
        }
    }
}

/// A node as placement sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub id: NodeId,
    /// Availability zone or ISP line: the first placement level.
    pub zone: String,
    /// Failure domain for anti-affinity (a physical host, a rack).
    pub host: String,
    /// Data-residency region, matched exactly by [`Requirements::region`].
    #[serde(default)]
    pub region: String,
    /// In `[0, weight_scale]`; 0 takes no keys (draining, reclaimed).
    pub weight: f64,
    /// What the node can do (`gpu`, `av1_encode`, …).
    #[serde(default)]
    pub capabilities: BTreeSet<String>,
}

impl NodeSpec {
    /// A node with its id as host, no region and no capabilities.
    pub fn new(id: NodeId, zone: &str, weight: f64) -> NodeSpec {
        NodeSpec {
            host: id.as_str().to_owned(),
            id,
            zone: zone.to_owned(),
            region: String::new(),
            weight,
            capabilities: BTreeSet::new(),
        }
    }
}

/// What a placement needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    /// Hard: the node must have every one of these.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Hard: the node's region must equal this.
    #[serde(default)]
    pub region: Option<String>,
    /// Soft: prefer nodes on other hosts (e.g. the hosts of the room's other
    /// transcodes); used only when nothing else fits.
    #[serde(default)]
    pub avoid_hosts: Vec<String>,
}

/// Where a new session goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub node: NodeId,
    /// The next distinct candidates of the same walk (same filters, room
    /// left, other hosts preferred), for failover.
    pub backups: Vec<NodeId>,
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{field} must be {rule}, got {value}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
        value: f64,
    },
}

/// Why a cluster change was refused (nothing changed).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    #[error("weight {weight} is outside [0, {scale}]")]
    Weight { weight: f64, scale: f64 },
    #[error("more than 64 distinct capabilities")]
    TooManyCapabilities,
}

/// Why a stored layout cannot be restored.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    #[error("layout version {0} is not supported")]
    Version(u32),
    #[error("layout weight scales ({layout}, {zone_layout}) differ from the config's")]
    Scale { layout: f64, zone_layout: f64 },
    #[error("bad configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("bad node or zone: {0}")]
    Change(#[from] ChangeError),
    #[error("{0} appears twice")]
    Duplicate(String),
    #[error("slot names {0}, which is not a member of that zone (or zone list)")]
    Unknown(String),
    #[error("{0} has no slot")]
    Unplaced(String),
    #[error("a generation is empty or too large")]
    Generation,
}

/// Why no node could take a session (a 503 for the caller).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unplaceable {
    #[error("no node with weight meets the requirements")]
    NoEligibleNode,
    #[error("every eligible node is at its load bound")]
    Full,
}
