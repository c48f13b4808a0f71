//! The weight controller: per node, moves the placement weight towards the score-derived target
//! one smoothed step per tick, and applies the ramp, canary, spot-reclaim and drain rules.
//!
//! A pure core: it never reads the clock; every input carries `now`. Drive it with
//! [`WeightController::handle_timeout`] at [`WeightController::poll_timeout`] and drain
//! [`WeightController::poll_event`] after every input.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use serde::{Deserialize, Serialize};

use super::capability::{CapabilitySet, NodeConfig};
use super::heartbeat::Heartbeat;
use super::score::{ConfigError, Score, ScoreConfig, score, target_weight};
use super::weight::{Smoothing, Weight};

/// Longest tick and heartbeat timeout accepted: an hour. Beyond that the controller is not
/// controlling anything, and the bound keeps `Instant` arithmetic far from overflow.
const MAX_PERIOD_MS: u64 = 3_600_000;
/// Longest ramp-in accepted: a day (seed 004 §5.1 asks for 10–30 minutes).
const MAX_RAMP_MS: u64 = 86_400_000;

/// Controller settings. Deserialisable from the scheduler's config file; missing fields default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControllerConfig {
    /// Score coefficients.
    pub score: ScoreConfig,
    /// Per-tick step bounds.
    pub smoothing: Smoothing,
    /// Tick period, ms (1 000).
    pub tick_ms: u64,
    /// The fixed weight of a canary node (0.05 W).
    pub canary_weight: Weight,
    /// A node whose last heartbeat is this old is stale: weight 0 at once (5 000 ms).
    pub heartbeat_timeout_ms: u64,
    /// W: what [`Weight::FULL`] means to the placement hash (1.0).
    pub max_weight: f64,
    /// Cold start: while no node has any weight, a reporting node starts at its target instead
    /// of ramping (true).
    pub cold_start_at_target: bool,
    /// How long a cold start lasts: nodes that report within this of the heartbeat that found
    /// no node with weight started together with it, and start at their target too (10 000).
    pub cold_start_grace_ms: u64,
    /// Ramp-in of a node joining a running cluster (first heartbeat after the cold start, back
    /// from stale, or active again after a drain or being down): its weight rises at most W per
    /// `ramp_ms`, linearly from the weight it had when it joined, besides the smoothing bound.
    /// 600 000 (10 min, seed 004 §5.1); 0 leaves the smoothing alone (0 → W in 35 ticks).
    pub ramp_ms: u64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            score: ScoreConfig::default(),
            smoothing: Smoothing::default(),
            tick_ms: 1_000,
            canary_weight: Weight::from_units(500),
            heartbeat_timeout_ms: 5_000,
            max_weight: 1.0,
            cold_start_at_target: true,
            cold_start_grace_ms: 10_000,
            ramp_ms: 600_000,
        }
    }
}

impl ControllerConfig {
    /// Checks every setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.score.validate()?;
        let bad = |name, problem| Err(ConfigError::Controller { name, problem });
        if !(1..=1000).contains(&self.smoothing.max_step_permille) {
            return bad("smoothing.max_step_permille", "must be in 1..=1000");
        }
        if self.smoothing.min_step.is_zero() {
            return bad(
                "smoothing.min_step",
                "must be at least 1 unit, or a node never leaves weight 0",
            );
        }
        if !(1..=MAX_PERIOD_MS).contains(&self.tick_ms) {
            return bad("tick_ms", "must be in 1..=3600000");
        }
        if !(1..=MAX_PERIOD_MS).contains(&self.heartbeat_timeout_ms) {
            return bad("heartbeat_timeout_ms", "must be in 1..=3600000");
        }
        if !(self.max_weight.is_finite() && self.max_weight > 0.0) {
            return bad("max_weight", "must be finite and > 0");
        }
        if self.cold_start_grace_ms > MAX_PERIOD_MS {
            return bad("cold_start_grace_ms", "must be in 0..=3600000");
        }
        if self.ramp_ms > MAX_RAMP_MS {
            return bad("ramp_ms", "must be in 0..=86400000");
        }
        Ok(())
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

    fn heartbeat_timeout(&self) -> Duration {
        Duration::from_millis(self.heartbeat_timeout_ms)
    }

    fn cold_start_grace(&self) -> Duration {
        Duration::from_millis(self.cold_start_grace_ms)
    }
}

/// A node's membership state, as the cluster view decides it (the controller never changes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Takes new sessions.
    #[default]
    Active,
    /// Takes no new sessions; its sessions are being moved away.
    Draining,
    /// Gone.
    Down,
}

/// Why the controller asks for a node to be drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DrainReason {
    /// The cloud will reclaim the (spot) machine at `deadline`.
    SpotReclaim {
        /// When the machine goes away.
        deadline: Instant,
    },
}

/// What the controller tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A node's weight changed; the placement table needs the new value.
    WeightChanged {
        /// The node.
        node: NodeId,
        /// The weight before.
        from: Weight,
        /// The weight now.
        to: Weight,
    },
    /// Drain this node (move its sessions away). Emitted once per reclaim notice.
    DrainRequested {
        /// The node.
        node: NodeId,
        /// Why.
        reason: DrainReason,
    },
    /// The node's heartbeats stopped; its weight went to 0. Whether it is down is the cluster
    /// view's decision.
    NodeStale {
        /// The node.
        node: NodeId,
    },
}

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// The node is not known to the controller (no heartbeat, state or config yet).
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
}

/// Everything the controller knows about one node, as a value (for `/v1/nodes`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// The current weight.
    pub weight: Weight,
    /// Where the weight is heading.
    pub target: Weight,
    /// Membership state.
    pub state: NodeState,
    /// Canary status and capability overrides.
    pub config: NodeConfig,
    /// Heartbeats stopped.
    pub stale: bool,
    /// Deadline of a spot-reclaim notice.
    pub reclaim_deadline: Option<Instant>,
    /// The score of the last heartbeat.
    pub score: Option<Score>,
    /// Capabilities for placement filters.
    pub capabilities: CapabilitySet,
    /// Its ramp-in is under way (it joined a running cluster and is held below W).
    pub ramping: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
    pub(super) weight: Weight,
    pub(super) state: NodeState,
    pub(super) config: NodeConfig,
    pub(super) heartbeat: Option<Heartbeat>,
    pub(super) last_seen: Option<Instant>,
    pub(super) stale: bool,
    pub(super) reclaim: Option<Instant>,
    /// Derived from `heartbeat` and `config`; recomputed whenever either changes.
    pub(super) score: Option<Score>,
    pub(super) capabilities: CapabilitySet,
    /// Ramp-in under way (a node that joined a running cluster).
    pub(super) ramp: Option<Ramp>,
}

/// A node's ramp-in: its weight stays at or below `from + W · elapsed / ramp_ms` until that
/// reaches W.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ramp {
    /// When it began; `None` until the node's next heartbeat or tick (a state change carries
    /// no time).
    pub(super) since: Option<Instant>,
    /// The weight it began from.
    pub(super) from: Weight,
}

impl Ramp {
    /// The highest weight allowed at `now`.
    fn cap(&self, ramp_ms: u64, now: Instant) -> Weight {
        let Some(since) = self.since else {
            return self.from;
        };
        if ramp_ms == 0 {
            return Weight::FULL;
        }
        let elapsed = now.saturating_duration_since(since).as_millis();
        let rise = u128::from(super::weight::WEIGHT_UNITS) * elapsed / u128::from(ramp_ms);
        let units = u128::from(self.from.units()) + rise;
        Weight::from_units(u32::try_from(units).unwrap_or(u32::MAX))
    }
}

impl Node {
    pub(super) fn new() -> Self {
        Self {
            weight: Weight::ZERO,
            state: NodeState::Active,
            config: NodeConfig::default(),
            heartbeat: None,
            last_seen: None,
            stale: false,
            reclaim: None,
            score: None,
            capabilities: CapabilitySet::EMPTY,
            ramp: None,
        }
    }

    pub(super) fn refresh(&mut self, config: &ScoreConfig) {
        self.score = self.heartbeat.as_ref().map(|hb| score(hb, config));
        self.capabilities = self.config.capabilities(self.heartbeat.as_ref());
    }
}

/// Where a node's weight is going and how.
enum Goal {
    /// Straight to 0 (draining, down, stale): placing more there is wrong now, not in 30 s.
    Zero,
    /// Down to 0 by the deadline, faster than the 10 % rule if needed.
    Reclaim(Instant),
    /// To this weight, one smoothed step per tick.
    Smooth(Weight),
}

fn goal(config: &ControllerConfig, n: &Node) -> Goal {
    if n.state != NodeState::Active || n.stale {
        Goal::Zero
    } else if let Some(deadline) = n.reclaim {
        Goal::Reclaim(deadline)
    } else if n.config.canary {
        Goal::Smooth(config.canary_weight)
    } else {
        Goal::Smooth(
            n.score
                .as_ref()
                .map_or(Weight::ZERO, |s| target_weight(s, &config.score)),
        )
    }
}

/// The weight after one tick of a reclaim decay: at least the normal step, and at least a
/// linear share of what is left over the ticks before the deadline, so it is 0 at the last tick
/// at or before the deadline.
fn reclaim_step(config: &ControllerConfig, w: Weight, now: Instant, deadline: Instant) -> Weight {
    if now >= deadline {
        return Weight::ZERO;
    }
    // Ticks still to come at or before the deadline, after this one.
    let later = (deadline - now).as_nanos() / config.tick().as_nanos();
    let linear = u128::from(w.units()).div_ceil(later + 1);
    let step = u128::from(config.smoothing.max_step(w)).max(linear);
    // step >= linear >= 1 unit when w > 0; the result is in 0..w, so the cast is lossless.
    Weight::from_units(u128::from(w.units()).saturating_sub(step) as u32)
}

/// Per-node placement weights for the whole cluster.
#[derive(Debug, Clone)]
pub struct WeightController {
    pub(super) config: ControllerConfig,
    pub(super) nodes: BTreeMap<NodeId, Node>,
    pub(super) next_tick: Instant,
    pub(super) events: VecDeque<Event>,
    /// End of the cold start under way, if one began (see [`WeightController::handle_heartbeat`]).
    pub(super) cold_until: Option<Instant>,
}

impl WeightController {
    /// A controller with no nodes; the first tick is one period after `now`.
    pub fn new(config: ControllerConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            nodes: BTreeMap::new(),
            next_tick: now + config.tick(),
            events: VecDeque::new(),
            cold_until: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// A node's heartbeat. An unknown node is added with weight 0 and ramps up from there; a
    /// stale node that reports again ramps up from 0 too (see [`ControllerConfig::ramp_ms`]).
    ///
    /// Cold start: nodes that start together start at their target at once. A cold start
    /// begins with a heartbeat that finds no node of the cluster with any weight (a scheduler
    /// that just started without saved weights, or a cluster that was entirely down) and lasts
    /// [`ControllerConfig::cold_start_grace_ms`]; while it lasts, every active node still at
    /// weight 0 goes to its target at its heartbeat. Ramping protects the nodes already carrying
    /// load from a herd moving onto a newcomer; with no such nodes it would only refuse
    /// placements, or pile them onto whichever node reported first, for the length of the ramp.
    pub fn handle_heartbeat(&mut self, now: Instant, hb: Heartbeat) {
        let cold = self.cold_start(now);
        let ramp_ms = self.config.ramp_ms;
        let id = hb.node.clone();
        let n = self.nodes.entry(id.clone()).or_insert_with(Node::new);
        let joining = n.heartbeat.is_none() || n.stale;
        n.heartbeat = Some(hb);
        n.last_seen = Some(now);
        n.stale = false;
        n.refresh(&self.config.score);
        if cold
            && n.weight == Weight::ZERO
            && let Goal::Smooth(target) = goal(&self.config, n)
        {
            n.ramp = None;
            set_weight(&mut self.events, &id, n, target);
        } else if joining && ramp_ms > 0 {
            n.ramp = Some(Ramp {
                since: Some(now),
                from: n.weight,
            });
        } else if let Some(r) = n.ramp.as_mut()
            && r.since.is_none()
        {
            r.since = Some(now);
        }
    }

    /// Whether a heartbeat at `now` is part of a cold start; begins one when no node has
    /// weight.
    fn cold_start(&mut self, now: Instant) -> bool {
        if !self.config.cold_start_at_target {
            return false;
        }
        if self.cold_until.is_some_and(|end| now < end) {
            return true;
        }
        if self.nodes.values().all(|n| n.weight.is_zero()) {
            self.cold_until = Some(now + self.config.cold_start_grace());
            return true;
        }
        false
    }

    /// Whether a cold start is under way at `now` (nodes reporting now start at their target).
    pub fn is_cold_start(&self, now: Instant) -> bool {
        self.config.cold_start_at_target
            && (self.cold_until.is_some_and(|end| now < end)
                || self.nodes.values().all(|n| n.weight.is_zero()))
    }

    /// A spot-reclaim notice: the machine goes away at `deadline`. The weight decays to 0 by
    /// then and one [`Event::DrainRequested`] goes out (none for a node that is down). A second
    /// notice for the same node can only bring the deadline forward and emits nothing.
    pub fn handle_spot_reclaim(
        &mut self,
        now: Instant,
        node: &NodeId,
        deadline: Instant,
    ) -> Result<(), ControllerError> {
        let n = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| ControllerError::UnknownNode(node.clone()))?;
        match n.reclaim {
            Some(earlier) => n.reclaim = Some(earlier.min(deadline)),
            None => {
                n.reclaim = Some(deadline);
                if n.state != NodeState::Down {
                    self.events.push_back(Event::DrainRequested {
                        node: node.clone(),
                        reason: DrainReason::SpotReclaim { deadline },
                    });
                }
            }
        }
        if now >= deadline {
            set_weight(&mut self.events, node, n, Weight::ZERO);
        }
        Ok(())
    }

    /// Sets a node's membership state (adding the node if unknown). Draining and down nodes go
    /// to weight 0 at once; a node that becomes active again ramps up from its current weight
    /// (0 after a drain or being down), its ramp timed from its next heartbeat or tick.
    pub fn set_node_state(&mut self, node: &NodeId, state: NodeState) {
        let ramp_ms = self.config.ramp_ms;
        let n = self.nodes.entry(node.clone()).or_insert_with(Node::new);
        let was = n.state;
        n.state = state;
        if state != NodeState::Active {
            set_weight(&mut self.events, node, n, Weight::ZERO);
        } else if was != NodeState::Active && ramp_ms > 0 {
            n.ramp = Some(Ramp {
                since: None,
                from: n.weight,
            });
        }
    }

    /// Sets a node's canary status and capability overrides (adding the node if unknown).
    pub fn set_node_config(&mut self, node: &NodeId, config: NodeConfig) {
        let n = self.nodes.entry(node.clone()).or_insert_with(Node::new);
        n.config = config;
        n.refresh(&self.config.score);
    }

    /// Forgets a node. Emits a last [`Event::WeightChanged`] to 0 if it had weight.
    pub fn remove_node(&mut self, node: &NodeId) -> bool {
        match self.nodes.remove(node) {
            Some(mut n) => {
                set_weight(&mut self.events, node, &mut n, Weight::ZERO);
                true
            }
            None => false,
        }
    }

    /// Runs whatever is due at `now`: reclaim deadlines that have passed (weight 0 at once), and
    /// the tick when it is due. Ticks stay on their grid; missed ones are skipped, not replayed.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (id, n) in &mut self.nodes {
            if n.reclaim.is_some_and(|d| now >= d) {
                set_weight(&mut self.events, id, n, Weight::ZERO);
            }
        }
        if now < self.next_tick {
            return;
        }
        self.tick(now);
        let period = self.config.tick();
        self.next_tick += period;
        if self.next_tick <= now {
            self.next_tick = now + period;
        }
    }

    fn tick(&mut self, now: Instant) {
        let timeout = self.config.heartbeat_timeout();
        for (id, n) in &mut self.nodes {
            let silent = n
                .last_seen
                .is_some_and(|t| now.saturating_duration_since(t) >= timeout);
            if silent && !n.stale {
                n.stale = true;
                self.events.push_back(Event::NodeStale { node: id.clone() });
            }
            if let Some(r) = n.ramp.as_mut()
                && r.since.is_none()
            {
                r.since = Some(now);
            }
            let next = match goal(&self.config, n) {
                Goal::Zero => Weight::ZERO,
                Goal::Reclaim(deadline) => reclaim_step(&self.config, n.weight, now, deadline),
                Goal::Smooth(target) => {
                    let step = self.config.smoothing.step(n.weight, target);
                    match n.ramp.map(|r| r.cap(self.config.ramp_ms, now)) {
                        // The ramp only holds a rise back; it never pulls a weight down.
                        Some(cap) if step > n.weight => step.min(cap.max(n.weight)),
                        _ => step,
                    }
                }
            };
            if n.ramp
                .is_some_and(|r| r.cap(self.config.ramp_ms, now) == Weight::FULL)
            {
                n.ramp = None;
            }
            set_weight(&mut self.events, id, n, next);
        }
    }

    /// When [`WeightController::handle_timeout`] must run next: the next tick, or an earlier
    /// reclaim deadline of a node that still has weight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadlines = self
            .nodes
            .values()
            .filter(|n| !n.weight.is_zero())
            .filter_map(|n| n.reclaim);
        Some(deadlines.fold(self.next_tick, Instant::min))
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A node's current weight.
    pub fn weight(&self, node: &NodeId) -> Option<Weight> {
        self.nodes.get(node).map(|n| n.weight)
    }

    /// A node's current weight on the placement scale, `[0, max_weight]`.
    pub fn weight_value(&self, node: &NodeId) -> Option<f64> {
        self.weight(node)
            .map(|w| w.fraction() * self.config.max_weight)
    }

    /// Every node and its weight, in node order.
    pub fn weights(&self) -> impl Iterator<Item = (&NodeId, Weight)> {
        self.nodes.iter().map(|(id, n)| (id, n.weight))
    }

    /// The nodes a placement that needs `required` may use: weight above 0 and every required
    /// capability. In node order.
    pub fn eligible(&self, required: CapabilitySet) -> impl Iterator<Item = (&NodeId, Weight)> {
        self.nodes
            .iter()
            .filter(move |(_, n)| !n.weight.is_zero() && n.capabilities.contains_all(required))
            .map(|(id, n)| (id, n.weight))
    }

    /// A node's capabilities.
    pub fn capabilities(&self, node: &NodeId) -> Option<CapabilitySet> {
        self.nodes.get(node).map(|n| n.capabilities)
    }

    /// Everything about one node.
    pub fn node(&self, node: &NodeId) -> Option<NodeView> {
        self.nodes.get(node).map(|n| NodeView {
            weight: n.weight,
            target: match goal(&self.config, n) {
                Goal::Zero | Goal::Reclaim(_) => Weight::ZERO,
                Goal::Smooth(w) => w,
            },
            state: n.state,
            config: n.config,
            stale: n.stale,
            reclaim_deadline: n.reclaim,
            score: n.score,
            capabilities: n.capabilities,
            ramping: n.ramp.is_some(),
        })
    }
}

fn set_weight(events: &mut VecDeque<Event>, id: &NodeId, n: &mut Node, to: Weight) {
    if n.weight != to {
        events.push_back(Event::WeightChanged {
            node: id.clone(),
            from: n.weight,
            to,
        });
        n.weight = to;
    }
}

#[cfg(test)]
mod tests;
