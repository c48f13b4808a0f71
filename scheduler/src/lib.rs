//! Placement and orchestration for a Ferry cluster (DESIGN §5).
//!
//! Weighted jump consistent hashing with bounded loads, GPU-aware scoring,
//! drain orchestration and the operator API arrive with the scheduler issue.
//! Until then `ferry dev` runs a single node and places every stream on it.

pub mod placement;
