//! Placement and orchestration for a Ferry cluster (DESIGN §5).
//!
//! - [`placement`]: weighted consistent hashing with bounded loads, zones,
//!   filters and anti-affinity (pure).
//! - [`scoring`]: node figures → score → smoothed placement weight (pure).
//! - [`cluster`]: node registry, sessions, migrations, routing table, drains
//!   (pure: `now` in, decisions out).
//! - [`store`]: persistence seam; [`service`]: the process around the core;
//!   [`api`]: the HTTP API with its OpenAPI document; [`node_client`]: the
//!   nodes' migration endpoints behind the [`drain::Migrations`] seam; [`task_client`]:
//!   their recording endpoints (the recordings the scheduler keeps going).

pub mod api;
pub mod cluster;
pub mod drain;
#[cfg(feature = "etcd")]
pub mod ha;
pub mod leadership;
pub mod node_client;
pub mod placement;
pub mod room_snapshots;
pub mod scoring;
pub mod service;
pub mod store;
pub mod task_client;
pub mod ticket;
mod trace;
pub mod turn;
pub mod turn_probe;
