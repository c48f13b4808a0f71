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
mod error;
mod hash;
mod layout;
mod maglev;
mod place;
mod ring;
pub mod scale;
mod spec;
mod table;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

pub use cluster::Cluster;
pub use error::{ChangeError, ConfigError, LayoutError, Unplaceable};
pub use hash::Key;
pub use layout::{GenerationLayout, Layout, SlotLayout, ZoneLayout};
pub use maglev::Maglev;
pub use ring::Ring;
pub use spec::{NodeSpec, Placement, PlacementConfig, Requirements};
