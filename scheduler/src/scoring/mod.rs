//! GPU-aware scoring (DESIGN §5, `docs/scoring.md`).
//!
//! - [`score`] turns a node's [`Heartbeat`] into a score with the DESIGN §5 formula and
//!   [`target_weight`] maps it onto the fixed weight scale the placement hash uses.
//! - [`CapabilitySet`] holds the hard flags placement filters need.

mod capability;
mod heartbeat;
mod score;
mod weight;

pub use capability::{Capability, CapabilitySet, NodeConfig};
pub use heartbeat::{Codec, GpuFigures, Heartbeat};
pub use score::{ConfigError, Score, ScoreConfig, Terms, score, target_weight, terms};
pub use weight::{Smoothing, WEIGHT_UNITS, Weight, WeightOutOfRange};
