//! Controller state as plain data, so a restarted scheduler keeps its weights instead of ramping
//! every node up from 0 again.
//!
//! `Instant`s do not survive a process, so times are stored relative to the snapshot (`*_in_ms`,
//! `*_age_ms`) and the snapshot carries the wall clock it was taken at. On restore:
//! - reclaim deadlines count the scheduler's downtime (the cloud takes the machine at the same
//!   wall-clock moment whether the scheduler was up or not);
//! - heartbeat ages do not: the downtime says nothing about the nodes, and counting it would
//!   make every node stale (weight 0) after any restart longer than the heartbeat timeout.
//!
//! Pending events are not part of a snapshot: drain [`WeightController::poll_event`] first.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use serde::{Deserialize, Serialize};

use super::capability::NodeConfig;
use super::controller::{ControllerConfig, Node, NodeState, Ramp, WeightController};
use super::heartbeat::Heartbeat;
use super::score::ConfigError;
use super::weight::Weight;

/// The snapshot format version this code writes and reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// A [`WeightController`]'s state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerSnapshot {
    /// [`SNAPSHOT_VERSION`].
    pub version: u32,
    /// Wall clock (Unix ms) when the snapshot was taken.
    pub taken_at_unix_ms: u64,
    /// Time from the snapshot to the next tick.
    pub next_tick_in_ms: u64,
    /// Every node, in node order.
    pub nodes: Vec<NodeSnapshot>,
    /// Time left of the cold start under way, if any.
    #[serde(default)]
    pub cold_start_left_ms: Option<u64>,
}

/// A ramp-in under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RampSnapshot {
    /// The weight it began from.
    pub from: Weight,
    /// How long ago it began (`None`: it begins at the node's next heartbeat or tick).
    #[serde(default)]
    pub elapsed_ms: Option<u64>,
}

/// One node's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// The node.
    pub node: NodeId,
    /// Its weight.
    pub weight: Weight,
    /// Its membership state.
    #[serde(default)]
    pub state: NodeState,
    /// Canary status and capability overrides.
    #[serde(default)]
    pub config: NodeConfig,
    /// The last heartbeat.
    #[serde(default)]
    pub heartbeat: Option<Heartbeat>,
    /// How old the last heartbeat was.
    #[serde(default)]
    pub heartbeat_age_ms: Option<u64>,
    /// Heartbeats had stopped.
    #[serde(default)]
    pub stale: bool,
    /// Time left before a spot reclaim.
    #[serde(default)]
    pub reclaim_in_ms: Option<u64>,
    /// Its ramp-in, if under way.
    #[serde(default)]
    pub ramp: Option<RampSnapshot>,
}

/// Why a snapshot cannot be restored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The configuration given with it is invalid.
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    /// Written by a format this code does not read.
    #[error("snapshot version {0} is not supported (this code reads {SNAPSHOT_VERSION})")]
    UnsupportedVersion(u32),
    /// The same node twice.
    #[error("node {0} appears twice")]
    DuplicateNode(NodeId),
    /// A duration too large to add to the clock.
    #[error("node {node}: {field} is out of range")]
    OutOfRange {
        /// The node.
        node: NodeId,
        /// The field.
        field: &'static str,
    },
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl WeightController {
    /// The state at `now`; `now_unix_ms` is the wall clock at the same moment.
    pub fn snapshot(&self, now: Instant, now_unix_ms: u64) -> ControllerSnapshot {
        ControllerSnapshot {
            version: SNAPSHOT_VERSION,
            taken_at_unix_ms: now_unix_ms,
            next_tick_in_ms: ms(self.next_tick.saturating_duration_since(now)),
            nodes: self
                .nodes
                .iter()
                .map(|(id, n)| NodeSnapshot {
                    node: id.clone(),
                    weight: n.weight,
                    state: n.state,
                    config: n.config,
                    heartbeat: n.heartbeat.clone(),
                    heartbeat_age_ms: n.last_seen.map(|t| ms(now.saturating_duration_since(t))),
                    stale: n.stale,
                    reclaim_in_ms: n.reclaim.map(|d| ms(d.saturating_duration_since(now))),
                    ramp: n.ramp.map(|r| RampSnapshot {
                        from: r.from,
                        elapsed_ms: r.since.map(|t| ms(now.saturating_duration_since(t))),
                    }),
                })
                .collect(),
            cold_start_left_ms: self
                .cold_until
                .filter(|end| *end > now)
                .map(|end| ms(end - now)),
        }
    }

    /// A controller in the state of `snapshot`, at `now` (wall clock `now_unix_ms`).
    pub fn restore(
        config: ControllerConfig,
        now: Instant,
        now_unix_ms: u64,
        snapshot: &ControllerSnapshot,
    ) -> Result<Self, RestoreError> {
        if snapshot.version != SNAPSHOT_VERSION {
            return Err(RestoreError::UnsupportedVersion(snapshot.version));
        }
        let mut ctl = WeightController::new(config, now)?;
        let downtime = now_unix_ms.saturating_sub(snapshot.taken_at_unix_ms);
        // The tick grid restarts at `now` if the snapshot's next tick is long past.
        ctl.next_tick = now
            + Duration::from_millis(snapshot.next_tick_in_ms.saturating_sub(downtime))
                .min(Duration::from_millis(config.tick_ms));
        let mut nodes = BTreeMap::new();
        for s in &snapshot.nodes {
            let out_of_range = |field| RestoreError::OutOfRange {
                node: s.node.clone(),
                field,
            };
            let reclaim = s
                .reclaim_in_ms
                .map(|left| {
                    now.checked_add(Duration::from_millis(left.saturating_sub(downtime)))
                        .ok_or_else(|| out_of_range("reclaim_in_ms"))
                })
                .transpose()?;
            // A clock too young to go back that far (just booted): count the heartbeat as fresh.
            let last_seen = s
                .heartbeat_age_ms
                .map(|age| now.checked_sub(Duration::from_millis(age)).unwrap_or(now));
            // Like heartbeat ages, a ramp does not count the downtime: no placement went
            // anywhere meanwhile.
            let ramp = s.ramp.map(|r| Ramp {
                from: r.from,
                since: r
                    .elapsed_ms
                    .map(|e| now.checked_sub(Duration::from_millis(e)).unwrap_or(now)),
            });
            let mut n = Node {
                weight: s.weight,
                state: s.state,
                config: s.config,
                heartbeat: s.heartbeat.clone(),
                last_seen,
                stale: s.stale,
                reclaim,
                ramp,
                ..Node::new()
            };
            n.refresh(&config.score);
            if nodes.insert(s.node.clone(), n).is_some() {
                return Err(RestoreError::DuplicateNode(s.node.clone()));
            }
        }
        ctl.nodes = nodes;
        ctl.events = VecDeque::new();
        // A cold start is a wall-clock moment (nodes starting together): the downtime counts.
        ctl.cold_until = snapshot
            .cold_start_left_ms
            .map(|left| left.saturating_sub(downtime))
            .filter(|left| *left > 0)
            .and_then(|left| now.checked_add(Duration::from_millis(left)));
        Ok(ctl)
    }
}
