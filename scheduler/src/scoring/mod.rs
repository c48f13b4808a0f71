//! GPU-aware scoring and the per-node weight controller (DESIGN §5, `docs/scoring.md`).
//!
//! - [`score`] turns a node's [`Heartbeat`] into a score with the DESIGN §5 formula and
//!   [`target_weight`] maps it onto the fixed weight scale the placement hash uses.
//! - [`WeightController`] moves each node's [`Weight`] towards that target by at most 10 % per
//!   tick, starts nodes that start together at their target and ramps later ones up from 0
//!   (linearly over `ramp_ms`), pins canaries, decays spot-reclaimed nodes to 0 by their
//!   deadline and zeroes draining, down and silent nodes.
//! - [`GpuProvider`] supplies the GPU figures a node reports: [`ConfigGpu`], [`FakeGpu`], and
//!   `NvmlGpu` with the `nvml` feature.
//!
//! # Drive loop
//!
//! The controller is a pure core: no clock, no IO, no randomness. A driver feeds it heartbeats
//! and notices, calls [`WeightController::handle_timeout`] when
//! [`WeightController::poll_timeout`] says, and hands every [`Event`] on.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ferry_proto::NodeId;
//! use ferry_scheduler::scoring::{ControllerConfig, Event, Heartbeat, Weight, WeightController};
//!
//! let start = Instant::now(); // a driver reads the clock; the core never does
//! let mut ctl = WeightController::new(ControllerConfig::default(), start)?;
//! let node = NodeId::new("node-a")?;
//! let hb = Heartbeat {
//!     node: node.clone(), cpu: 0.0, memory: 0.0,
//!     bandwidth_used_bps: 0, bandwidth_capacity_bps: 1_000_000_000, packet_loss: 0.0,
//!     sessions: 0, session_capacity: 100, sessions_to_move: 0, gpu: None, encoders: vec![],
//! };
//! for s in 1..=40 {
//!     let now = start + Duration::from_secs(s);
//!     ctl.handle_heartbeat(now, hb.clone());
//!     assert!(ctl.poll_timeout() <= Some(now));
//!     ctl.handle_timeout(now);
//!     while let Some(event) = ctl.poll_event() {
//!         if let Event::WeightChanged { node, to, .. } = event {
//!             // update the placement table with `to`
//!             let _ = (node, to);
//!         }
//!     }
//! }
//! // An idle node without a GPU scores w3 / (w1 + w2 + w3) = 2/3 of W.
//! assert_eq!(ctl.weight(&node), Some(Weight::from_units(6_667)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod capability;
mod controller;
mod gpu;
mod heartbeat;
#[cfg(feature = "nvml")]
mod nvml;
mod score;
mod snapshot;
mod weight;

pub use capability::{Capability, CapabilitySet, NodeConfig};
pub use controller::{
    ControllerConfig, ControllerError, DrainReason, Event, NodeState, NodeView, WeightController,
};
pub use gpu::{ConfigGpu, DeviceFigures, FakeGpu, GpuError, GpuProvider, aggregate};
pub use heartbeat::{Codec, GpuFigures, Heartbeat};
#[cfg(feature = "nvml")]
pub use nvml::{NvmlConfig, NvmlGpu};
pub use score::{ConfigError, Score, ScoreConfig, Terms, score, target_weight, terms};
pub use snapshot::{
    ControllerSnapshot, NodeSnapshot, RampSnapshot, RestoreError, SNAPSHOT_VERSION,
};
pub use weight::{Smoothing, WEIGHT_UNITS, Weight, WeightOutOfRange};
