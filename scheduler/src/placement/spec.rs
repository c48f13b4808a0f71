//! What placement is asked and answers: the cluster's configuration, a node's spec, a
//! stream's requirements, and where it is placed.

use std::collections::BTreeSet;

use ferry_proto::NodeId;
use serde::{Deserialize, Serialize};

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
