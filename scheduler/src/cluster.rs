//! The scheduler's view of the cluster (pure: takes `now`, does no IO):
//! node registry with heartbeats and liveness, the sessions table, the
//! migrations table, the versioned routing table, placement and drains.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ferry_proto::api::{
    CutoverMode, DrainStatus, Heartbeat, MigrationRequest, MigrationState, MigrationView,
    NodeState, NodeView, PlacementKind, PlacementRequest, PlacementResponse, RouteEntry, RouteNode,
    RoutingTable, SessionKind, SessionView, StreamView, TicketUse, TurnDrain,
};
use ferry_proto::{MigrationId, NodeId, RecordingId, SessionId, StreamId, TranscodeId};
use serde::{Deserialize, Serialize};

use crate::drain::{Drain, DrainBudget};

mod follow;
mod recordings;
mod transcodes;
use crate::placement::{self, NodeSpec, Requirements};
use crate::scoring::{self, WeightController};
pub use follow::STATUS_SILENCE;
pub use recordings::{RESUME_WITHIN, RecordingOrder, RecordingTask, TaskState};
pub use transcodes::{TranscodeOrder, TranscodeTask};

/// Why an order the scheduler gave a node (resume a recording, move a transcode) failed: the
/// node's own words, kept as the task's `error` until an order succeeds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OrderFailed(pub String);

/// Bandwidth assumed for a node that does not report its capacity.
const DEFAULT_BANDWIDTH_BPS: u64 = 10_000_000_000;

/// Why an API operation failed; each maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// Unknown node, session or migration (404).
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be carried out as asked (400).
    #[error("{0}")]
    BadRequest(String),
    /// It conflicts with the current state (409).
    #[error("{0}")]
    Conflict(String),
    /// No node can take it (503).
    #[error("{0}")]
    Unavailable(String),
}

/// Heartbeats of its node after which a placed viewer that no report showed never came (the
/// nodes beat every second: its client gave up, or chose another node).
const PLACED_VIEW_BEATS: u8 = 3;

/// Settings of the cluster core.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Expected heartbeat interval.
    pub heartbeat_interval: Duration,
    /// A node missing this many heartbeats in a row is down.
    pub missed_heartbeats: u32,
    /// Placement settings.
    pub placement: placement::PlacementConfig,
    /// Scoring and weight smoothing.
    pub scoring: scoring::ControllerConfig,
    /// Drain budget.
    pub drain: DrainBudget,
    /// Who declares a silent node down.
    #[serde(default)]
    pub liveness: Liveness,
    /// Hot streams: once a stream's origin (its publisher's node) serves this many of its
    /// viewers, further viewers go to other nodes by bounded-load consistent hashing keyed by
    /// the stream (fed by the cascade relay from the origin). 0: no per-stream share — the
    /// origin takes viewers until it is full (its reported session capacity), then they
    /// spill the same way.
    #[serde(default)]
    pub hot_stream_viewers: u64,
}

/// Who declares a node down when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// The core: after `missed_heartbeats` heartbeat intervals without one.
    #[default]
    Heartbeats,
    /// The store's node leases (etcd): the driver calls [`Cluster::lease_expired`].
    Leases,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(1),
            missed_heartbeats: 3,
            placement: placement::PlacementConfig::default(),
            scoring: scoring::ControllerConfig::default(),
            drain: DrainBudget::default(),
            liveness: Liveness::Heartbeats,
            hot_stream_viewers: 0,
        }
    }
}

/// One registered node.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeRecord {
    state: NodeState,
    heartbeat: Heartbeat,
    #[serde(skip)]
    last_seen: Option<Instant>,
    weight_override: Option<f64>,
    drain: Option<Drain>,
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start this (planned) migration.
    StartMigration(MigrationView),
    /// Ask the source node how this migration goes (answer with
    /// [`Cluster::migration_status`]).
    AskMigration {
        /// The migration.
        id: MigrationId,
        /// Its source node's HTTP base URL.
        source_http: String,
    },
    /// A migration the cluster followed ended (committed, rolled back or failed).
    MigrationEnded(MigrationView),
    /// Move a recording to another node, or resume it there from storage.
    Recording(RecordingOrder),
    /// Move a transcode to another node, or start it again there.
    Transcode(TranscodeOrder),
}

/// What survives a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Persisted {
    nodes: BTreeMap<NodeId, NodeRecord>,
    sessions: BTreeMap<SessionId, SessionView>,
    migrations: BTreeMap<MigrationId, MigrationView>,
    epochs: BTreeMap<SessionId, u64>,
    routing_version: u64,
    layout: placement::Layout,
    weights: scoring::ControllerSnapshot,
    next_migration: u64,
    /// Ticket generations used: session → (highest generation, until when, Unix s).
    #[serde(default)]
    tickets: BTreeMap<SessionId, (u32, u64)>,
    /// TURN relays' drains, by relay id.
    #[serde(default)]
    turn_drains: BTreeMap<String, TurnDrain>,
    /// TURN relays added (their spec) or removed (`None`) through the API, by relay id.
    #[serde(default)]
    turn_registry: BTreeMap<String, Option<String>>,
    /// Recordings the scheduler keeps going.
    #[serde(default)]
    recordings: BTreeMap<RecordingId, RecordingTask>,
    /// Transcodes the scheduler placed.
    #[serde(default)]
    transcodes: BTreeMap<TranscodeId, TranscodeTask>,
}

/// The cluster core.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    nodes: BTreeMap<NodeId, NodeRecord>,
    sessions: BTreeMap<SessionId, SessionView>,
    migrations: BTreeMap<MigrationId, MigrationView>,
    epochs: BTreeMap<SessionId, u64>,
    routing_version: u64,
    placement: placement::Cluster,
    weights: WeightController,
    next_migration: u64,
    /// Ticket generations used: session → (highest generation, until when, Unix s).
    tickets: BTreeMap<SessionId, (u32, u64)>,
    /// TURN relays' drains, by relay id (stored, so every replica sees them).
    turn_drains: BTreeMap<String, TurnDrain>,
    /// TURN relays added (their spec) or removed (`None`) through the API, by relay id.
    turn_registry: BTreeMap<String, Option<String>>,
    /// Recordings the scheduler keeps going.
    recordings: BTreeMap<RecordingId, RecordingTask>,
    /// Transcodes the scheduler placed.
    transcodes: BTreeMap<TranscodeId, TranscodeTask>,
    /// Viewers placed on a node that its heartbeats have not shown yet, per stream: counted
    /// with the reported ones, so that a burst of viewers inside one heartbeat spills too. Each
    /// is the number of the node's heartbeats since it was placed, oldest first
    /// ([`PLACED_VIEW_BEATS`]).
    placed_views: BTreeMap<(StreamId, NodeId), Vec<u8>>,
    /// Publishers placed on a node whose heartbeats have not shown their session yet, per
    /// stream, with the node's heartbeats since (dropped after [`PLACED_VIEW_BEATS`]): a
    /// viewer that comes before the node's next report goes where its publisher was sent, not
    /// where the stream's key hashes by then (the loads moved), which had no publisher.
    placed_publishers: BTreeMap<StreamId, (NodeId, u8)>,
    /// Migrations ordered and not ended, followed ([`follow`]; not stored).
    follows: BTreeMap<MigrationId, follow::Follow>,
    /// Followed migrations that ended since the last tick.
    ended_migrations: Vec<MigrationView>,
    metrics: ClusterMetrics,
}

/// Counters of the scheduler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetrics {
    /// Heartbeats accepted.
    pub heartbeats: u64,
    /// Placements answered.
    pub placements: u64,
    /// Placements refused (no eligible node).
    pub placements_failed: u64,
    /// Nodes declared down.
    pub nodes_down: u64,
    /// Migrations created.
    pub migrations_created: u64,
    /// Drains started.
    pub drains_started: u64,
    /// Ticket uses recorded.
    pub tickets_consumed: u64,
    /// Ticket uses refused as replays.
    pub tickets_replayed: u64,
    /// Nodes a client reported unreachable that did not answer the scheduler either.
    pub nodes_reported_down: u64,
}

fn spec(id: &NodeId, hb: &Heartbeat, weight: f64) -> NodeSpec {
    NodeSpec {
        id: id.clone(),
        zone: hb.zone.clone(),
        host: if hb.host.is_empty() {
            id.to_string()
        } else {
            hb.host.clone()
        },
        region: hb.region.clone(),
        weight,
        capabilities: hb.capabilities.iter().cloned().collect::<BTreeSet<_>>(),
    }
}

/// The scoring view of a heartbeat.
fn scoring_heartbeat(id: &NodeId, hb: &Heartbeat, moving: u32) -> scoring::Heartbeat {
    let encoders = hb
        .capabilities
        .iter()
        .filter_map(|c| match c.trim_end_matches("_encode") {
            "h264" => Some(scoring::Codec::H264),
            "hevc" | "h265" => Some(scoring::Codec::Hevc),
            "vp8" => Some(scoring::Codec::Vp8),
            "vp9" => Some(scoring::Codec::Vp9),
            "av1" => Some(scoring::Codec::Av1),
            _ => None,
        })
        .collect();
    scoring::Heartbeat {
        node: id.clone(),
        cpu: hb.cpu,
        memory: hb.memory,
        bandwidth_used_bps: hb.bandwidth_bps,
        bandwidth_capacity_bps: if hb.bandwidth_capacity_bps == 0 {
            DEFAULT_BANDWIDTH_BPS
        } else {
            hb.bandwidth_capacity_bps
        },
        packet_loss: hb.loss,
        sessions: u32::try_from(hb.sessions.len()).unwrap_or(u32::MAX),
        session_capacity: u32::try_from(hb.session_capacity).unwrap_or(u32::MAX),
        sessions_to_move: moving,
        gpu: hb.gpu.map(|g| scoring::GpuFigures {
            vram_free_bytes: g.vram_free_bytes,
            vram_total_bytes: g.vram_total_bytes,
            nvenc_sessions_free: g.nvenc_sessions_free,
            nvenc_sessions_max: g.nvenc_sessions_max,
        }),
        encoders,
    }
}

/// Why a cluster could not be made or rebuilt from what was saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterSetupError {
    /// The placement configuration.
    #[error("placement: {0}")]
    Placement(#[from] crate::placement::ConfigError),
    /// The saved layout does not fit the configuration.
    #[error("placement layout: {0}")]
    Layout(#[from] crate::placement::LayoutError),
    /// The scoring configuration.
    #[error("scoring: {0}")]
    Scoring(#[from] crate::scoring::ConfigError),
    /// The saved weights.
    #[error("scoring weights: {0}")]
    Weights(#[from] crate::scoring::RestoreError),
}

impl Cluster {
    /// An empty cluster.
    pub fn new(config: ClusterConfig, now: Instant) -> Result<Self, ClusterSetupError> {
        Ok(Self {
            placement: placement::Cluster::new(config.placement.clone())?,
            weights: WeightController::new(config.scoring, now)?,
            config,
            nodes: BTreeMap::new(),
            sessions: BTreeMap::new(),
            migrations: BTreeMap::new(),
            epochs: BTreeMap::new(),
            routing_version: 1,
            next_migration: 1,
            tickets: BTreeMap::new(),
            turn_drains: BTreeMap::new(),
            turn_registry: BTreeMap::new(),
            recordings: BTreeMap::new(),
            transcodes: BTreeMap::new(),
            placed_views: BTreeMap::new(),
            placed_publishers: BTreeMap::new(),
            follows: BTreeMap::new(),
            ended_migrations: Vec::new(),
            metrics: ClusterMetrics::default(),
        })
    }

    /// Rebuilds the cluster from what a previous run saved (`unix_ms`: the
    /// wall clock now). Nodes count as seen `now`, so they get a full
    /// heartbeat timeout to report again.
    pub fn restore(
        config: ClusterConfig,
        p: Persisted,
        now: Instant,
        unix_ms: u64,
    ) -> Result<Self, ClusterSetupError> {
        let mut c = Self::new(config.clone(), now)?;
        c.placement = placement::Cluster::restore(config.placement.clone(), p.layout)?;
        c.weights = WeightController::restore(config.scoring, now, unix_ms, &p.weights)?;
        c.nodes = p.nodes;
        for n in c.nodes.values_mut() {
            n.last_seen = Some(now);
        }
        c.sessions = p.sessions;
        c.migrations = p.migrations;
        c.epochs = p.epochs;
        c.routing_version = p.routing_version;
        c.next_migration = p.next_migration;
        c.tickets = p.tickets;
        c.turn_drains = p.turn_drains;
        c.turn_registry = p.turn_registry;
        c.recordings = p.recordings;
        c.transcodes = p.transcodes;
        Ok(c)
    }

    /// What to save (`unix_ms`: the wall clock now).
    pub fn persisted(&self, now: Instant, unix_ms: u64) -> Persisted {
        Persisted {
            nodes: self.nodes.clone(),
            sessions: self.sessions.clone(),
            migrations: self.migrations.clone(),
            epochs: self.epochs.clone(),
            routing_version: self.routing_version,
            layout: self.placement.snapshot(),
            weights: self.weights.snapshot(now, unix_ms),
            next_migration: self.next_migration,
            tickets: self.tickets.clone(),
            turn_drains: self.turn_drains.clone(),
            turn_registry: self.turn_registry.clone(),
            recordings: self.recordings.clone(),
            transcodes: self.transcodes.clone(),
        }
    }

    /// TURN relays' drains (running and ended), by relay id.
    pub fn turn_drains(&self) -> &BTreeMap<String, TurnDrain> {
        &self.turn_drains
    }

    /// Starts draining TURN relay `id` at `unix_ms` until `deadline_s` at the latest; a drain
    /// already running is kept (its deadline too).
    pub fn start_turn_drain(&mut self, id: &str, unix_ms: u64, deadline_s: u64) -> TurnDrain {
        let d = self
            .turn_drains
            .entry(id.to_owned())
            .and_modify(|d| {
                if d.done_unix_ms.is_some() {
                    // Drained before and back in service since? A new drain.
                    *d = TurnDrain {
                        since_unix_ms: unix_ms,
                        deadline_unix_ms: unix_ms + deadline_s * 1000,
                        done_unix_ms: None,
                        done_reason: None,
                    };
                }
            })
            .or_insert_with(|| TurnDrain {
                since_unix_ms: unix_ms,
                deadline_unix_ms: unix_ms + deadline_s * 1000,
                done_unix_ms: None,
                done_reason: None,
            });
        d.clone()
    }

    /// Ends TURN relay `id`'s drain (the relay takes users again); what it was.
    pub fn cancel_turn_drain(&mut self, id: &str) -> Option<TurnDrain> {
        self.turn_drains.remove(id)
    }

    /// Marks TURN relay `id`'s running drain finished at `unix_ms` for `reason`; whether it ran.
    pub fn finish_turn_drain(&mut self, id: &str, unix_ms: u64, reason: &str) -> bool {
        match self.turn_drains.get_mut(id) {
            Some(d) if d.done_unix_ms.is_none() => {
                d.done_unix_ms = Some(unix_ms);
                d.done_reason = Some(reason.to_owned());
                true
            }
            _ => false,
        }
    }

    /// TURN relays added (`Some(spec)`) or removed (`None`) through the API, by relay id.
    pub fn turn_registry(&self) -> &BTreeMap<String, Option<String>> {
        &self.turn_registry
    }

    /// Records TURN relay `id` added with `spec` (`None`: removed, with its drain).
    pub fn set_turn_relay(&mut self, id: &str, spec: Option<String>) {
        if spec.is_none() {
            self.turn_drains.remove(id);
        }
        self.turn_registry.insert(id.to_owned(), spec);
    }

    /// Counters.
    pub fn metrics(&self) -> &ClusterMetrics {
        &self.metrics
    }

    /// The routing-table version.
    pub fn routing_version(&self) -> u64 {
        self.routing_version
    }

    fn bump(&mut self) {
        self.routing_version += 1;
    }

    /// A node's state, if the node is known.
    pub fn node_state(&self, id: &NodeId) -> Option<NodeState> {
        self.nodes.get(id).map(|n| n.state)
    }

    fn record(&self, id: &NodeId) -> Result<&NodeRecord, ClusterError> {
        self.nodes
            .get(id)
            .ok_or_else(|| ClusterError::NotFound(format!("no node {id}")))
    }

    /// A node's heartbeat: registers it on first contact, refreshes its
    /// figures and replaces its part of the sessions table.
    pub fn heartbeat(
        &mut self,
        now: Instant,
        id: &NodeId,
        hb: Heartbeat,
    ) -> Result<(), ClusterError> {
        if hb.http.is_empty() {
            return Err(ClusterError::BadRequest(
                "heartbeat needs `http`, the node's WHIP/WHEP base URL".into(),
            ));
        }
        if !(0.0..=1.0).contains(&hb.cpu)
            || !(0.0..=1.0).contains(&hb.memory)
            || !(0.0..=1.0).contains(&hb.loss)
        {
            return Err(ClusterError::BadRequest(
                "cpu, memory and loss are fractions in [0, 1]".into(),
            ));
        }
        self.metrics.heartbeats += 1;
        let mut changed = false;
        let record = self.nodes.entry(id.clone()).or_insert_with(|| {
            changed = true;
            NodeRecord {
                state: NodeState::Active,
                heartbeat: Heartbeat::default(),
                last_seen: None,
                weight_override: None,
                drain: None,
            }
        });
        let revived = record.state == NodeState::Down;
        if revived {
            record.state = NodeState::Active;
            changed = true;
        }
        if record.heartbeat.http != hb.http
            || record.heartbeat.media != hb.media
            || record.heartbeat.cluster != hb.cluster
            || record.heartbeat.migration != hb.migration
            || record.heartbeat.zone != hb.zone
        {
            changed = true;
        }
        record.last_seen = Some(now);
        // Viewers placed here that this report shows as new viewer sessions came. The others
        // may still be on their way (between their placement and their WHEP request when the
        // node made the report: three viewers opened at once put two on a hot stream's origin
        // whose share was one) and stay counted for a few heartbeats.
        let mut came: BTreeMap<&StreamId, usize> = BTreeMap::new();
        for s in &hb.sessions {
            if s.kind == SessionKind::View && !self.sessions.contains_key(&s.id) {
                *came.entry(&s.stream).or_default() += 1;
            }
        }
        self.placed_views.retain(|(stream, node), beats| {
            if node != id {
                return true;
            }
            let n = came.get(stream).copied().unwrap_or(0).min(beats.len());
            beats.drain(..n);
            for b in beats.iter_mut() {
                *b = b.saturating_add(1);
            }
            beats.retain(|b| *b < PLACED_VIEW_BEATS);
            !beats.is_empty()
        });
        self.placed_publishers.retain(|stream, (node, beats)| {
            if node != id {
                return true;
            }
            let reported = hb
                .sessions
                .iter()
                .any(|s| s.kind == SessionKind::Publish && s.stream == *stream);
            *beats = beats.saturating_add(1);
            !reported && *beats < PLACED_VIEW_BEATS
        });
        // Its sessions: the node is the authority on what it holds.
        let reported: BTreeSet<&SessionId> = hb.sessions.iter().map(|s| &s.id).collect();
        let before = self.sessions.len();
        self.sessions
            .retain(|sid, s| s.node != *id || reported.contains(sid));
        changed |= before != self.sessions.len();
        for s in &hb.sessions {
            let view = SessionView {
                id: s.id.clone(),
                stream: s.stream.clone(),
                kind: s.kind,
                node: id.clone(),
                state: s.state.clone(),
            };
            match self.sessions.get(&s.id) {
                Some(old) if *old == view => {}
                Some(old) if old.node != *id => {
                    // Ownership moved (a migration committed): new epoch.
                    *self.epochs.entry(s.id.clone()).or_insert(0) += 1;
                    self.sessions.insert(s.id.clone(), view);
                    changed = true;
                }
                _ => {
                    self.epochs.entry(s.id.clone()).or_insert(1);
                    self.sessions.insert(s.id.clone(), view);
                    changed = true;
                }
            }
        }
        let state = record.state;
        let pinned = record.weight_override;
        record.heartbeat = hb;
        let hb = record.heartbeat.clone();
        if revived {
            self.weights.set_node_state(id, scoring::NodeState::Active);
        }
        let moving = self.moving(id);
        self.weights.set_node_config(
            id,
            scoring::NodeConfig {
                canary: hb.canary,
                ..Default::default()
            },
        );
        self.weights
            .handle_heartbeat(now, scoring_heartbeat(id, &hb, moving));
        let weight = self.effective_weight(id, state, pinned);
        self.upsert(id, &hb, weight);
        self.note_recording_reports(id, &hb.recordings);
        if changed {
            self.bump();
        }
        Ok(())
    }

    /// Puts a node into the placement table with `weight`, clamped to the
    /// scale (a node reporting too many capabilities keeps its old entry).
    fn upsert(&mut self, id: &NodeId, hb: &Heartbeat, weight: f64) {
        let w = weight.clamp(0.0, self.config.placement.weight_scale);
        if let Err(e) = self.placement.upsert(spec(id, hb, w)) {
            tracing::warn!(node = %id, error = %e, "placement refused the node's update");
        }
    }

    /// Migrations in or out of a node that have not ended.
    fn moving(&self, id: &NodeId) -> u32 {
        let n = self
            .migrations
            .values()
            .filter(|m| matches!(m.state, MigrationState::Planned | MigrationState::Running))
            .filter(|m| m.source == *id || m.target.as_ref() == Some(id))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn effective_weight(&self, id: &NodeId, state: NodeState, pinned: Option<f64>) -> f64 {
        match state {
            NodeState::Active => {
                pinned.unwrap_or_else(|| self.weights.weight_value(id).unwrap_or(0.0))
            }
            _ => 0.0,
        }
    }

    /// What follows a node's death: its sessions are gone with it, it takes no placements.
    fn node_gone(&mut self, id: &NodeId) {
        self.metrics.nodes_down += 1;
        self.sessions.retain(|_, s| s.node != *id);
        self.weights.set_node_state(id, scoring::NodeState::Down);
        self.placement.remove(id);
    }

    /// A client could not reach node `id` and neither could the scheduler (the driver probed
    /// it): it is down now, without waiting for its heartbeats to lapse. A node that is alive
    /// after all comes back with its next heartbeat.
    pub fn node_unreachable(&mut self, id: &NodeId) -> bool {
        let down = self.declare_down(id);
        if down {
            self.metrics.nodes_reported_down += 1;
        }
        down
    }

    /// Node `id`'s lease in the store ended (it sent no heartbeat for the lease's length):
    /// it is down and its sessions are re-placed by their clients. Whether it was up.
    pub fn lease_expired(&mut self, id: &NodeId) -> bool {
        self.declare_down(id)
    }

    /// Node `id` is down now (unless it is unknown or was already). Whether it was up.
    fn declare_down(&mut self, id: &NodeId) -> bool {
        match self.nodes.get_mut(id) {
            Some(n) if n.state != NodeState::Down => n.state = NodeState::Down,
            _ => return false,
        }
        self.node_gone(id);
        self.bump();
        true
    }

    /// The nodes not down.
    pub fn nodes_up(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.state != NodeState::Down)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A node's HTTP base URL and whether it counts as up.
    pub fn node_http(&self, id: &NodeId) -> Option<(String, bool)> {
        self.nodes
            .get(id)
            .map(|n| (n.heartbeat.http.clone(), n.state != NodeState::Down))
    }

    /// Records the use of a session ticket (`unix_s`: the wall clock now): the first use of a
    /// generation succeeds, any later use of it (or of an older one) is a replay.
    pub fn consume_ticket(&mut self, unix_s: u64, use_: &TicketUse) -> Result<(), ClusterError> {
        self.tickets.retain(|_, (_, exp)| *exp >= unix_s);
        if use_.expires < unix_s {
            // Expired tickets never resume anything (nodes check that first): nothing to keep.
            return Ok(());
        }
        if let Some(&(g, _)) = self.tickets.get(&use_.session)
            && use_.generation <= g
        {
            self.metrics.tickets_replayed += 1;
            return Err(ClusterError::Conflict(format!(
                "ticket generation {} of session {} was used already",
                use_.generation, use_.session
            )));
        }
        self.tickets
            .insert(use_.session.clone(), (use_.generation, use_.expires));
        self.metrics.tickets_consumed += 1;
        Ok(())
    }

    /// Liveness, weights and drains. Returns what the driver must start.
    pub fn tick(&mut self, now: Instant) -> Vec<Action> {
        let timeout = self.config.heartbeat_interval * self.config.missed_heartbeats;
        let mut changed = false;
        let mut down = Vec::new();
        let counted = self.config.liveness == Liveness::Heartbeats;
        for (id, n) in &mut self.nodes {
            let stale = counted
                && n.last_seen
                    .is_none_or(|t| now.saturating_duration_since(t) > timeout);
            if stale && n.state != NodeState::Down {
                n.state = NodeState::Down;
                down.push(id.clone());
            }
        }
        for id in &down {
            self.node_gone(id);
            changed = true;
        }
        self.weights.handle_timeout(now);
        while let Some(ev) = self.weights.poll_event() {
            if let scoring::Event::DrainRequested { node, .. } = ev {
                let _ = self.drain(now, &node);
            }
        }
        let ids: Vec<NodeId> = self.nodes.keys().cloned().collect();
        for id in &ids {
            let (state, pinned, hb) = {
                let n = &self.nodes[id];
                (n.state, n.weight_override, n.heartbeat.clone())
            };
            if state == NodeState::Down {
                self.placement.remove(id);
                continue;
            }
            let w = self.effective_weight(id, state, pinned);
            self.upsert(id, &hb, w);
        }
        // A layout grown one join at a time has several generations, which
        // makes lookups slower; compacting rehashes, so do it only while no
        // session exists whose placement could move.
        if self.sessions.is_empty()
            && self
                .placement
                .zone_stats()
                .iter()
                .any(|(_, _, gens)| *gens > 1)
        {
            self.placement.compact();
            changed = true;
        }
        let mut actions = self.drive_drains(now);
        actions.extend(self.drive_recordings(now));
        actions.extend(self.restart_transcodes());
        actions.extend(self.drive_follows(now));
        if changed {
            self.bump();
        }
        actions
    }

    fn node_sessions(&self, id: &NodeId) -> Vec<SessionId> {
        self.sessions
            .values()
            .filter(|s| s.node == *id)
            .map(|s| s.id.clone())
            .collect()
    }

    fn drive_drains(&mut self, now: Instant) -> Vec<Action> {
        let budget = self.config.drain;
        let mut actions = Vec::new();
        let draining: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.state == NodeState::Draining)
            .map(|(id, _)| id.clone())
            .collect();
        for id in draining {
            let current = self.node_sessions(&id);
            let Some(mut drain) = self.nodes.get_mut(&id).and_then(|n| n.drain.take()) else {
                continue;
            };
            drain.refresh(&current, &budget);
            for session in drain.next(now, &budget) {
                let target = self.migration_target(&session, &id);
                let m = self.new_migration(session.clone(), id.clone(), target, CutoverMode::Edge);
                drain.started(session, m.id.clone());
                actions.push(Action::StartMigration(m));
            }
            // Its recordings and transcodes move too before it is drained (transcodes once
            // its sessions — theirs among them — have left).
            let sessions_gone = current.is_empty() && drain.running().next().is_none();
            if sessions_gone {
                actions.extend(self.move_transcodes_off(&id));
            }
            let empty = sessions_gone && !self.records_on(&id) && !self.transcodes_on(&id);
            if let Some(n) = self.nodes.get_mut(&id) {
                n.drain = Some(drain);
                if empty {
                    n.state = NodeState::Drained;
                    self.routing_version += 1;
                }
            }
        }
        actions
    }

    /// When [`Cluster::tick`] must run next at the latest.
    pub fn poll_timeout(&self, now: Instant) -> Instant {
        let budget = self.config.drain;
        let drains = self
            .nodes
            .values()
            .filter_map(|n| n.drain.as_ref().and_then(|d| d.poll_timeout(&budget)))
            .min();
        let tick = now + self.config.heartbeat_interval;
        [drains, self.follows_timeout(now)]
            .into_iter()
            .flatten()
            .fold(tick, Instant::min)
    }

    fn view(&self, id: &NodeId, n: &NodeRecord, now: Instant) -> NodeView {
        let hb = &n.heartbeat;
        NodeView {
            id: id.clone(),
            state: n.state,
            weight: self.placement.node(id).map_or(0.0, |n| n.weight),
            weight_override: n.weight_override,
            zone: hb.zone.clone(),
            host: hb.host.clone(),
            region: hb.region.clone(),
            capabilities: hb.capabilities.clone(),
            http: hb.http.clone(),
            media: hb.media.clone(),
            cluster: hb.cluster.clone(),
            migration: hb.migration.clone(),
            cpu: hb.cpu,
            memory: hb.memory,
            bandwidth_bps: hb.bandwidth_bps,
            loss: hb.loss,
            sessions: self.sessions.values().filter(|s| s.node == *id).count() as u64,
            session_capacity: hb.session_capacity,
            workers: hb.workers,
            gpu: hb.gpu,
            last_heartbeat_ms: n.last_seen.map_or(u64::MAX, |t| {
                now.saturating_duration_since(t).as_millis() as u64
            }),
        }
    }

    /// `GET /v1/nodes`.
    pub fn nodes(&self, now: Instant) -> Vec<NodeView> {
        self.nodes
            .iter()
            .map(|(id, n)| self.view(id, n, now))
            .collect()
    }

    /// `GET /v1/nodes/{id}`.
    pub fn node(&self, now: Instant, id: &NodeId) -> Result<NodeView, ClusterError> {
        Ok(self.view(id, self.record(id)?, now))
    }

    /// `GET /v1/sessions`.
    pub fn sessions(&self) -> Vec<SessionView> {
        self.sessions.values().cloned().collect()
    }

    /// Sessions per node, for bounded loads.
    fn loads(&self) -> BTreeMap<NodeId, u64> {
        let mut loads = BTreeMap::new();
        for s in self.sessions.values() {
            *loads.entry(s.node.clone()).or_insert(0) += 1;
        }
        loads
    }

    /// `POST /v1/placements`. A viewer of a live stream goes where its
    /// publisher is (no relay between nodes yet); everything else is
    /// placed by weighted consistent hashing with bounded loads.
    pub fn place(&mut self, req: &PlacementRequest) -> Result<PlacementResponse, ClusterError> {
        if req.key.is_empty() || req.key.len() > 256 {
            return Err(ClusterError::BadRequest("key must be 1–256 bytes".into()));
        }
        let up = |c: &Self, n: &NodeId| c.nodes.get(n).is_some_and(|n| n.state != NodeState::Down);
        if req.kind == PlacementKind::View
            && let Ok(stream) = StreamId::new(req.key.clone())
            && let Some(origin) = self
                .sessions
                .values()
                .find(|s| s.stream == stream && s.kind == SessionKind::Publish)
                .map(|s| s.node.clone())
                .or_else(|| self.placed_publishers.get(&stream).map(|(n, _)| n.clone()))
                .filter(|n| up(self, n))
        {
            let node = self.hot_spill(&stream, &origin).unwrap_or(origin);
            self.placed_views
                .entry((stream, node.clone()))
                .or_default()
                .push(0);
            self.metrics.placements += 1;
            return Ok(self.response(node, Vec::new()));
        }
        let loads = self.loads();
        let total: u64 = loads.values().sum::<u64>() + 1;
        let avoid_hosts = match &req.requirements.room {
            Some(room) => self.room_hosts(room),
            None => Vec::new(),
        };
        let reqs = Requirements {
            capabilities: req.requirements.capabilities.clone(),
            region: req.requirements.region.clone(),
            avoid_hosts,
        };
        let load = |id: &NodeId| loads.get(id).copied().unwrap_or(0);
        match self
            .placement
            .place(req.key.as_bytes(), &reqs, &load, total)
        {
            Ok(p) => {
                self.metrics.placements += 1;
                if req.kind == PlacementKind::Publish
                    && let Ok(stream) = StreamId::new(req.key.clone())
                {
                    self.placed_publishers.insert(stream, (p.node.clone(), 0));
                }
                Ok(self.response(p.node, p.backups))
            }
            Err(e) => {
                self.metrics.placements_failed += 1;
                Err(ClusterError::Unavailable(e.to_string()))
            }
        }
    }

    /// Viewers of `stream` per node (as the nodes reported them).
    fn viewers_by_node(&self, stream: &StreamId) -> BTreeMap<NodeId, u64> {
        let mut by_node = BTreeMap::new();
        for s in self.sessions.values() {
            if s.stream == *stream && s.kind == SessionKind::View {
                *by_node.entry(s.node.clone()).or_insert(0) += 1;
            }
        }
        by_node
    }

    /// `stream`'s nodes in placement order (bounded-load consistent hashing keyed by the
    /// stream: its node, then its backups), so that a stream's sessions gather on few nodes.
    fn stream_nodes(&self, stream: &StreamId) -> Vec<NodeId> {
        let loads = self.loads();
        let total: u64 = loads.values().sum::<u64>() + 1;
        let load = |id: &NodeId| loads.get(id).copied().unwrap_or(0);
        match self.placement.place(
            stream.as_str().as_bytes(),
            &Requirements::default(),
            &load,
            total,
        ) {
            Ok(p) => std::iter::once(p.node).chain(p.backups).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Where a new viewer of hot `stream` goes instead of its `origin`: the stream's node by
    /// bounded-load consistent hashing (keyed by the stream, so its spilled viewers gather on
    /// few nodes and few relay links), not the origin; `None` while the origin serves fewer
    /// than [`ClusterConfig::hot_stream_viewers`] of them (or none is set) and has room.
    fn hot_spill(&self, stream: &StreamId, origin: &NodeId) -> Option<NodeId> {
        let limit = self.config.hot_stream_viewers;
        let reported = self
            .viewers_by_node(stream)
            .get(origin)
            .copied()
            .unwrap_or(0);
        let placed = self
            .placed_views
            .get(&(stream.clone(), origin.clone()))
            .map_or(0, |b| b.len() as u64);
        let share_used = limit > 0 && reported + placed >= limit;
        if !share_used && !self.full(origin) {
            return None;
        }
        self.stream_nodes(stream).into_iter().find(|n| n != origin)
    }

    /// Whether `node` holds as many sessions as its reported capacity (counting the viewers
    /// placed there since its last heartbeat); a node that reports none is never full.
    fn full(&self, node: &NodeId) -> bool {
        let Some(capacity) = self
            .nodes
            .get(node)
            .map(|n| n.heartbeat.session_capacity)
            .filter(|&c| c > 0)
        else {
            return false;
        };
        let sessions = self.sessions.values().filter(|s| s.node == *node).count() as u64;
        let placed: u64 = self
            .placed_views
            .iter()
            .filter(|((_, n), _)| n == node)
            .map(|(_, b)| b.len() as u64)
            .sum();
        sessions + placed >= capacity
    }

    /// `GET /v1/streams`: each stream with a publisher or viewers — its origin, viewers per
    /// node, and whether it is hot (its viewers spilled beyond the origin).
    pub fn streams(&self) -> Vec<StreamView> {
        let mut names: BTreeSet<StreamId> = BTreeSet::new();
        for s in self.sessions.values() {
            names.insert(s.stream.clone());
        }
        names
            .into_iter()
            .map(|stream| {
                let origin = self
                    .sessions
                    .values()
                    .find(|s| s.stream == stream && s.kind == SessionKind::Publish)
                    .map(|s| s.node.clone());
                let by_node = self.viewers_by_node(&stream);
                let viewers = by_node.values().sum();
                let spilled = by_node
                    .keys()
                    .any(|n| origin.as_ref().is_some_and(|o| o != n));
                let limit = self.config.hot_stream_viewers;
                let on_origin = origin
                    .as_ref()
                    .and_then(|o| by_node.get(o))
                    .copied()
                    .unwrap_or(0);
                let relayed_from = self.relayed_from(&stream);
                StreamView {
                    relayed_from,
                    stream: stream.to_string(),
                    origin: origin.map(|o| o.to_string()),
                    viewers,
                    viewers_by_node: by_node
                        .into_iter()
                        .map(|(n, c)| (n.to_string(), c))
                        .collect(),
                    hot: spilled || (limit > 0 && on_origin >= limit),
                }
            })
            .collect()
    }

    /// The relay tree of `stream` from the nodes' heartbeats: node → the node it gets the
    /// stream from (a source address no node reports stays as the address).
    fn relayed_from(&self, stream: &StreamId) -> BTreeMap<String, String> {
        let by_cluster: BTreeMap<&str, &NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.heartbeat.cluster.is_empty())
            .map(|(id, n)| (n.heartbeat.cluster.as_str(), id))
            .collect();
        self.nodes
            .iter()
            .filter(|(_, n)| n.state != NodeState::Down)
            .flat_map(|(id, n)| {
                n.heartbeat
                    .relays
                    .iter()
                    .filter(|r| r.stream == stream.as_str())
                    .map(|r| {
                        let from = by_cluster
                            .get(r.from.as_str())
                            .map_or_else(|| r.from.clone(), |n| n.to_string());
                        (id.to_string(), from)
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn room_hosts(&self, room: &str) -> Vec<String> {
        // Sessions of a room's transcodes are named `{room}.{n}` by convention.
        let prefix = format!("{room}.");
        self.sessions
            .values()
            .filter(|s| s.stream.as_str().starts_with(&prefix))
            .filter_map(|s| self.nodes.get(&s.node))
            .map(|n| n.heartbeat.host.clone())
            .collect()
    }

    fn response(&self, node: NodeId, backups: Vec<NodeId>) -> PlacementResponse {
        PlacementResponse {
            http: self
                .nodes
                .get(&node)
                .map(|n| n.heartbeat.http.clone())
                .unwrap_or_default(),
            node,
            backups,
            routing_version: self.routing_version,
        }
    }

    /// `PUT /v1/nodes/{id}/weight`.
    pub fn set_weight(&mut self, id: &NodeId, weight: Option<f64>) -> Result<(), ClusterError> {
        if let Some(w) = weight
            && !(0.0..=self.config.placement.weight_scale).contains(&w)
        {
            return Err(ClusterError::BadRequest(format!(
                "weight must be in [0, {}]",
                self.config.placement.weight_scale
            )));
        }
        let n = self
            .nodes
            .get_mut(id)
            .ok_or_else(|| ClusterError::NotFound(format!("no node {id}")))?;
        n.weight_override = weight;
        let (state, hb) = (n.state, n.heartbeat.clone());
        let w = self.effective_weight(id, state, weight);
        self.upsert(id, &hb, w);
        self.bump();
        Ok(())
    }

    /// `POST /v1/nodes/{id}/reclaim-notice`: weight decays to 0 by the
    /// deadline and a drain starts.
    pub fn reclaim_notice(
        &mut self,
        now: Instant,
        id: &NodeId,
        deadline: Duration,
    ) -> Result<(), ClusterError> {
        self.record(id)?;
        self.weights
            .handle_spot_reclaim(now, id, now + deadline)
            .map_err(|e| ClusterError::NotFound(e.to_string()))?;
        self.drain(now, id).map(|_| ())
    }

    /// `POST /v1/nodes/{id}/drain`.
    pub fn drain(&mut self, _now: Instant, id: &NodeId) -> Result<DrainStatus, ClusterError> {
        let sessions = self.node_sessions(id);
        let n = self
            .nodes
            .get_mut(id)
            .ok_or_else(|| ClusterError::NotFound(format!("no node {id}")))?;
        match n.state {
            NodeState::Down => {
                return Err(ClusterError::Conflict(format!("node {id} is down")));
            }
            NodeState::Active => {
                n.state = NodeState::Draining;
                n.drain = Some(Drain::new(id.clone(), sessions.iter().cloned()));
                self.metrics.drains_started += 1;
                let hb = n.heartbeat.clone();
                self.weights
                    .set_node_state(id, scoring::NodeState::Draining);
                self.upsert(id, &hb, 0.0);
                self.bump();
            }
            NodeState::Draining | NodeState::Drained => {}
        }
        self.drain_status(id)
    }

    /// `DELETE /v1/nodes/{id}/drain`: cancels a drain. A draining or drained node is active
    /// again: it takes placements once more, its weight ramping up from where it is (0) as a
    /// node joining the cluster does. The drain starts no more migrations; those already
    /// running end as they will. An active node is left as it is. The answer is the cancelled
    /// drain's last progress, with the node's new state.
    pub fn undrain(&mut self, _now: Instant, id: &NodeId) -> Result<DrainStatus, ClusterError> {
        let mut status = self.drain_status(id)?;
        let n = self
            .nodes
            .get_mut(id)
            .ok_or_else(|| ClusterError::NotFound(format!("no node {id}")))?;
        match n.state {
            NodeState::Down => {
                return Err(ClusterError::Conflict(format!(
                    "node {id} is down: nothing to undrain until it reports again"
                )));
            }
            NodeState::Active => return Ok(status),
            NodeState::Draining | NodeState::Drained => {
                n.state = NodeState::Active;
                n.drain = None;
                let (hb, pinned) = (n.heartbeat.clone(), n.weight_override);
                self.weights.set_node_state(id, scoring::NodeState::Active);
                let w = self.effective_weight(id, NodeState::Active, pinned);
                self.upsert(id, &hb, w);
                self.bump();
            }
        }
        status.state = NodeState::Active;
        Ok(status)
    }

    /// How unevenly sessions are spread for the nodes' weights: the largest ratio of an active
    /// node's sessions to its weighted share of the active nodes' sessions (1 = every node
    /// carries its share: a node of weight 1 beside one of 2/3 with 60 and 40 sessions reads 1,
    /// not the 1.2 of an unweighted average). Nodes of weight 0 take no placements and are left
    /// out. 0 when no weighted node is active or none holds a session (nothing to compare).
    pub fn placement_skew(&self) -> f64 {
        let loads = self.loads();
        let scale = self.config.placement.weight_scale;
        let active: Vec<(f64, f64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.state == NodeState::Active)
            .map(|(id, n)| {
                let w = self
                    .effective_weight(id, NodeState::Active, n.weight_override)
                    .clamp(0.0, scale);
                (loads.get(id).copied().unwrap_or(0) as f64, w)
            })
            .filter(|&(_, w)| w > 0.0)
            .collect();
        let total: f64 = active.iter().map(|(l, _)| l).sum();
        let weight: f64 = active.iter().map(|(_, w)| w).sum();
        if total <= 0.0 || weight <= 0.0 {
            return 0.0;
        }
        active
            .iter()
            .map(|&(l, w)| l / (total * w / weight))
            .fold(0.0, f64::max)
    }

    /// `GET /v1/nodes/{id}/drain`: the node's drain, if it has one (draining, or drained and
    /// not undrained since).
    pub fn drain_of(&self, id: &NodeId) -> Result<Option<DrainStatus>, ClusterError> {
        let n = self.record(id)?;
        n.drain.is_some().then(|| self.drain_status(id)).transpose()
    }

    /// A node's drain progress (zeros and its state when it has no drain).
    pub fn drain_status(&self, id: &NodeId) -> Result<DrainStatus, ClusterError> {
        let n = self.record(id)?;
        let left = self.sessions.values().filter(|s| s.node == *id).count() as u64;
        match &n.drain {
            Some(d) => Ok(d.status(n.state, left)),
            None => Ok(DrainStatus {
                node: id.clone(),
                state: n.state,
                sessions_left: left,
                migrations_started: 0,
                migrations_committed: 0,
                migrations_failed: 0,
            }),
        }
    }

    fn new_migration(
        &mut self,
        session: SessionId,
        source: NodeId,
        target: Option<NodeId>,
        mode: CutoverMode,
    ) -> MigrationView {
        // `m` followed by digits is always a valid id.
        let id = MigrationId::new(format!("m{:08}", self.next_migration))
            .unwrap_or_else(|e| unreachable!("{e}"));
        self.next_migration += 1;
        self.metrics.migrations_created += 1;
        let m = MigrationView {
            id: id.clone(),
            session,
            source,
            target,
            mode,
            state: MigrationState::Planned,
            phases_ms: BTreeMap::new(),
            blackout_ms: None,
            bytes: 0,
            error: None,
        };
        self.migrations.insert(id, m.clone());
        m
    }

    /// `POST /v1/migrations`: plans a migration; the target defaults to the
    /// placement of the session's stream among the other active nodes.
    pub fn create_migration(
        &mut self,
        req: &MigrationRequest,
    ) -> Result<MigrationView, ClusterError> {
        let s = self
            .sessions
            .get(&req.session)
            .cloned()
            .ok_or_else(|| ClusterError::NotFound(format!("no session {}", req.session)))?;
        if let Some(t) = &req.target {
            let n = self.record(t)?;
            if n.state != NodeState::Active {
                return Err(ClusterError::Conflict(format!("target {t} is not active")));
            }
            if *t == s.node {
                return Err(ClusterError::Conflict(format!("session is already on {t}")));
            }
        }
        if self.migrations.values().any(|m| {
            m.session == s.id
                && matches!(m.state, MigrationState::Planned | MigrationState::Running)
        }) {
            return Err(ClusterError::Conflict(format!(
                "session {} is already migrating",
                s.id
            )));
        }
        let target = match &req.target {
            Some(t) => t.clone(),
            None => self.migration_target(&s.id, &s.node).ok_or_else(|| {
                ClusterError::Unavailable(format!(
                    "no active node other than {} can take session {}",
                    s.node, s.id
                ))
            })?,
        };
        Ok(self.new_migration(s.id, s.node, Some(target), req.mode))
    }

    /// Where a session leaving `source` goes: the placement of its stream
    /// among the other active nodes (so a stream's sessions leave together),
    /// else, while every other node still ramps up from weight 0, the least
    /// loaded active node. `None` when no other node is active.
    fn migration_target(&self, session: &SessionId, source: &NodeId) -> Option<NodeId> {
        let active = |id: &NodeId| {
            id != source
                && self
                    .nodes
                    .get(id)
                    .is_some_and(|n| n.state == NodeState::Active)
        };
        let loads = self.loads();
        let load = |id: &NodeId| loads.get(id).copied().unwrap_or(0);
        let placed = self.sessions.get(session).and_then(|s| {
            self.stream_nodes(&s.stream)
                .into_iter()
                .find(|id| active(id))
        });
        placed.or_else(|| {
            self.nodes
                .keys()
                .filter(|id| active(id))
                .min_by_key(|id| load(id))
                .cloned()
        })
    }

    /// Records what the migrator says about a migration.
    pub fn update_migration(&mut self, view: MigrationView) {
        let done = matches!(
            view.state,
            MigrationState::Committed | MigrationState::RolledBack | MigrationState::Failed
        );
        let committed = view.state == MigrationState::Committed;
        let budget = self.config.drain;
        if done {
            for n in self.nodes.values_mut() {
                if let Some(d) = n.drain.as_mut() {
                    d.finished(&view.id, committed, &budget);
                }
            }
        }
        self.migrations.insert(view.id.clone(), view);
    }

    /// `GET /v1/migrations/{id}`.
    pub fn migration(&self, id: &MigrationId) -> Result<MigrationView, ClusterError> {
        self.migrations
            .get(id)
            .cloned()
            .ok_or_else(|| ClusterError::NotFound(format!("no migration {id}")))
    }

    /// Migrations not yet ended (a new leader follows them on).
    pub fn migrations_in_flight(&self) -> Vec<MigrationView> {
        self.migrations
            .values()
            .filter(|m| matches!(m.state, MigrationState::Planned | MigrationState::Running))
            .cloned()
            .collect()
    }

    /// `GET /v1/migrations`.
    pub fn migrations(&self) -> Vec<MigrationView> {
        self.migrations.values().cloned().collect()
    }

    /// `GET /v1/routing`.
    pub fn routing(&self) -> RoutingTable {
        RoutingTable {
            version: self.routing_version,
            nodes: self
                .nodes
                .iter()
                .map(|(id, n)| RouteNode {
                    id: id.clone(),
                    state: n.state,
                    weight: self.placement.node(id).map_or(0.0, |n| n.weight),
                    zone: n.heartbeat.zone.clone(),
                    http: n.heartbeat.http.clone(),
                    media: n.heartbeat.media.clone(),
                    cluster: n.heartbeat.cluster.clone(),
                    migration: n.heartbeat.migration.clone(),
                })
                .collect(),
            sessions: self
                .sessions
                .values()
                .map(|s| RouteEntry {
                    session: s.id.clone(),
                    stream: s.stream.clone(),
                    node: s.node.clone(),
                    epoch: self.epochs.get(&s.id).copied().unwrap_or(1),
                    kind: s.kind,
                })
                .collect(),
        }
    }

    /// Where a WHIP (`publish`) or WHEP (`view`) POST for `stream` goes:
    /// the node's base URL.
    pub fn redirect(
        &mut self,
        stream: &StreamId,
        kind: SessionKind,
    ) -> Result<String, ClusterError> {
        self.redirect_resuming(stream, kind, None)
    }

    /// Where a WHIP/WHEP request goes when it resumes `session` (a ticket names it): the node
    /// that holds the session, if it is up; else where a new session would be placed.
    pub fn redirect_resuming(
        &mut self,
        stream: &StreamId,
        kind: SessionKind,
        session: Option<&SessionId>,
    ) -> Result<String, ClusterError> {
        if let Some(n) = session
            .and_then(|id| self.sessions.get(id))
            .filter(|s| s.stream == *stream && s.kind == kind)
            .and_then(|s| self.nodes.get(&s.node))
            .filter(|n| n.state == NodeState::Active)
        {
            self.metrics.placements += 1;
            return Ok(n.heartbeat.http.clone());
        }
        let req = PlacementRequest {
            key: stream.to_string(),
            kind: match kind {
                SessionKind::Publish => PlacementKind::Publish,
                SessionKind::View => PlacementKind::View,
            },
            requirements: Default::default(),
        };
        Ok(self.place(&req)?.http)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(c: &mut Cluster, now: Instant, id: &NodeId) {
        let hb = Heartbeat {
            http: format!("http://{id}.test"),
            media: "127.0.0.1:1".into(),
            ..Heartbeat::default()
        };
        c.heartbeat(now, id, hb).unwrap();
    }

    #[test]
    fn with_store_leases_only_an_expired_lease_makes_a_node_down() {
        let t0 = Instant::now();
        let config = ClusterConfig {
            liveness: Liveness::Leases,
            ..ClusterConfig::default()
        };
        let mut c = Cluster::new(config, t0).unwrap();
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        beat(&mut c, t0, &a);
        beat(&mut c, t0, &b);
        // Silent far past the missed heartbeats: the lease, not the count, decides.
        let _ = c.tick(t0 + Duration::from_secs(60));
        assert_eq!(c.node_state(&a), Some(NodeState::Active));
        assert_eq!(c.nodes_up(), vec![a.clone(), b.clone()]);

        let v = c.routing_version();
        assert!(c.lease_expired(&a));
        assert_eq!(c.node_state(&a), Some(NodeState::Down));
        assert!(c.routing_version() > v, "the table changed");
        assert_eq!(c.metrics().nodes_down, 1);
        assert!(!c.lease_expired(&a), "down once");
        assert!(!c.lease_expired(&NodeId::new("unknown").unwrap()));
        assert_eq!(c.nodes_up(), vec![b.clone()]);

        // Its next heartbeat (a new lease) brings it back.
        beat(&mut c, t0 + Duration::from_secs(61), &a);
        assert_eq!(c.node_state(&a), Some(NodeState::Active));
    }

    pub(super) fn beat_with(
        c: &mut Cluster,
        now: Instant,
        id: &NodeId,
        sessions: &[(&str, SessionKind)],
    ) {
        c.heartbeat(now, id, heartbeat_with(id, sessions)).unwrap();
    }

    /// A heartbeat of node `id` with `sessions` of the stream `live`.
    fn heartbeat_with(id: &NodeId, sessions: &[(&str, SessionKind)]) -> Heartbeat {
        Heartbeat {
            http: format!("http://{id}.test"),
            media: "127.0.0.1:1".into(),
            sessions: sessions
                .iter()
                .map(|(s, kind)| ferry_proto::api::SessionReport {
                    id: SessionId::new(*s).unwrap(),
                    stream: StreamId::new("live").unwrap(),
                    kind: *kind,
                    state: "connected".into(),
                })
                .collect(),
            ..Heartbeat::default()
        }
    }

    #[test]
    fn placement_skew_is_load_over_each_nodes_weighted_share() {
        let t0 = Instant::now();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        assert_eq!(c.placement_skew(), 0.0, "no node");
        let ids: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        let sessions: Vec<(&str, SessionKind)> = ids
            .iter()
            .map(|s| (s.as_str(), SessionKind::View))
            .collect();
        beat_with(&mut c, t0, &a, &sessions[..60]);
        beat_with(&mut c, t0, &b, &sessions[60..]);
        // Weights 1 and 2/3: 60 and 40 sessions are each node's share.
        c.set_weight(&a, Some(1.0)).unwrap();
        c.set_weight(&b, Some(2.0 / 3.0)).unwrap();
        assert!(
            (c.placement_skew() - 1.0).abs() < 1e-9,
            "{}",
            c.placement_skew()
        );
        // Equal weights: a carries 60 of a share of 50.
        c.set_weight(&b, Some(1.0)).unwrap();
        assert!(
            (c.placement_skew() - 1.2).abs() < 1e-9,
            "{}",
            c.placement_skew()
        );
        // b at 1/3: its 40 sessions are 1.6 times its share of 25.
        c.set_weight(&b, Some(1.0 / 3.0)).unwrap();
        assert!(
            (c.placement_skew() - 1.6).abs() < 1e-9,
            "{}",
            c.placement_skew()
        );
        // b at weight 0 takes no placements: left out, a holds all of its own share.
        c.set_weight(&b, Some(0.0)).unwrap();
        assert!(
            (c.placement_skew() - 1.0).abs() < 1e-9,
            "{}",
            c.placement_skew()
        );
    }

    #[test]
    fn the_relay_tree_of_a_stream_comes_from_the_heartbeats() {
        let t0 = Instant::now();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let node = |n: &str| NodeId::new(n).unwrap();
        let addr = |n: &str| format!("10.0.0.{}:5000", n.as_bytes()[0]);
        // a publishes; b gets it from a, c from b (one level down), d from an unknown address.
        for (id, sessions, from) in [
            ("a", vec![("pub", SessionKind::Publish)], None),
            ("b", vec![("v1", SessionKind::View)], Some(addr("a"))),
            ("c", vec![("v2", SessionKind::View)], Some(addr("b"))),
            (
                "d",
                vec![("v3", SessionKind::View)],
                Some("192.0.2.1:9".to_owned()),
            ),
        ] {
            let hb = Heartbeat {
                cluster: addr(id),
                relays: from
                    .into_iter()
                    .map(|from| ferry_proto::api::RelayReport {
                        stream: "live".into(),
                        from,
                    })
                    .collect(),
                ..heartbeat_with(&node(id), &sessions)
            };
            c.heartbeat(t0, &node(id), hb).unwrap();
        }
        let s = c.streams();
        let tree: Vec<(&str, &str)> = s[0]
            .relayed_from
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(tree, vec![("b", "a"), ("c", "b"), ("d", "192.0.2.1:9")]);
    }

    /// A viewer that comes between its publisher's placement and the first heartbeat showing
    /// the publisher goes where the publisher was sent, although the loads moved the stream's
    /// key elsewhere meanwhile; once the node's heartbeats show it (or for three without it)
    /// the hint goes.
    #[test]
    fn a_viewer_before_the_publishers_first_report_goes_where_the_publisher_was_sent() {
        let t0 = Instant::now();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        beat(&mut c, t0, &a);
        beat(&mut c, t0, &b);
        for id in [&a, &b] {
            c.set_weight(id, Some(1.0)).unwrap();
        }
        let place = |c: &mut Cluster, key: &str, kind| {
            c.place(&PlacementRequest {
                key: key.into(),
                kind,
                requirements: Default::default(),
            })
            .unwrap()
            .node
        };
        let placed: Vec<(String, NodeId)> = (0..40)
            .map(|i| {
                let key = format!("s{i}");
                let node = place(&mut c, &key, PlacementKind::Publish);
                (key, node)
            })
            .collect();
        assert!(placed.iter().any(|(_, n)| *n == a), "{placed:?}");
        // Node a reports 200 viewers of another stream: by load, every key now goes to b.
        let names: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
        let views: Vec<(&str, SessionKind)> = names
            .iter()
            .map(|n| (n.as_str(), SessionKind::View))
            .collect();
        beat_with(&mut c, t0, &a, &views);
        assert_eq!(place(&mut c, "never-published", PlacementKind::View), b);
        for (key, node) in &placed {
            assert_eq!(place(&mut c, key, PlacementKind::View), *node, "{key}");
        }
        // Two more reports of a without its publishers: the hints for a go after the third.
        beat_with(&mut c, t0, &a, &views);
        assert!(c.placed_publishers.values().any(|(n, _)| *n == a));
        beat_with(&mut c, t0, &a, &views);
        assert!(c.placed_publishers.values().all(|(n, _)| *n == b));
        // b reports one of its publishers: that hint goes, the others stay.
        let on_b: Vec<&String> = placed
            .iter()
            .filter(|(_, n)| *n == b)
            .map(|(k, _)| k)
            .collect();
        let hb = Heartbeat {
            sessions: vec![ferry_proto::api::SessionReport {
                id: SessionId::new("pub-b").unwrap(),
                stream: StreamId::new(on_b[0].as_str()).unwrap(),
                kind: SessionKind::Publish,
                state: "connected".into(),
            }],
            ..heartbeat_with(&b, &[])
        };
        c.heartbeat(t0, &b, hb).unwrap();
        assert!(
            !c.placed_publishers
                .contains_key(&StreamId::new(on_b[0].as_str()).unwrap())
        );
        assert_eq!(c.placed_publishers.len(), on_b.len() - 1);
    }

    fn view_of(c: &mut Cluster) -> NodeId {
        c.place(&PlacementRequest {
            key: "live".into(),
            kind: PlacementKind::View,
            requirements: Default::default(),
        })
        .unwrap()
        .node
    }

    #[test]
    fn viewers_of_a_hot_stream_spill_from_its_origin_to_one_other_node() {
        let t0 = Instant::now();
        let ids: Vec<NodeId> = ["a", "b", "c"]
            .iter()
            .map(|n| NodeId::new(*n).unwrap())
            .collect();
        let run = |limit: u64, viewers_on_a: usize| {
            let mut c = Cluster::new(
                ClusterConfig {
                    hot_stream_viewers: limit,
                    ..ClusterConfig::default()
                },
                t0,
            )
            .unwrap();
            let mut on_a = vec![("pub", SessionKind::Publish)];
            let names: Vec<String> = (0..viewers_on_a).map(|i| format!("v{i}")).collect();
            on_a.extend(names.iter().map(|n| (n.as_str(), SessionKind::View)));
            beat_with(&mut c, t0, &ids[0], &on_a);
            beat_with(&mut c, t0, &ids[1], &[]);
            beat_with(&mut c, t0, &ids[2], &[]);
            // Past their ramp-in: pinned weights.
            for id in &ids {
                c.set_weight(id, Some(1.0)).unwrap();
            }
            c
        };
        // Off: every viewer on the origin, however many.
        let mut c = run(0, 50);
        assert_eq!(view_of(&mut c), ids[0]);
        assert!(c.streams().iter().all(|s| !s.hot));
        // Below the limit: the origin.
        let mut c = run(3, 2);
        assert_eq!(view_of(&mut c), ids[0]);
        // At it: another node, the same one for every further viewer (one relay link).
        let mut c = run(3, 3);
        let spill = view_of(&mut c);
        assert_ne!(spill, ids[0]);
        for _ in 0..5 {
            assert_eq!(view_of(&mut c), spill);
        }
        let s = c.streams();
        assert_eq!(s.len(), 1);
        assert!(s[0].hot);
        assert_eq!(s[0].origin.as_deref(), Some("a"));
        assert_eq!(s[0].viewers, 3);
        // A burst inside one heartbeat: the viewers placed on the origin since its last
        // heartbeat count, so the fourth of four at once spills at a limit of 3.
        let mut c = run(3, 0);
        let burst: Vec<NodeId> = (0..4).map(|_| view_of(&mut c)).collect();
        assert_eq!(
            &burst[..3],
            &[ids[0].clone(), ids[0].clone(), ids[0].clone()]
        );
        assert_ne!(burst[3], ids[0]);
        // The origin's heartbeat reports two of the three placed there: the third may still be
        // on its way (placed, its WHEP request not yet made), so it still counts…
        let two = [
            ("pub", SessionKind::Publish),
            ("v0", SessionKind::View),
            ("v1", SessionKind::View),
        ];
        beat_with(&mut c, t0, &ids[0], &two);
        assert_ne!(view_of(&mut c), ids[0]);
        // … until the origin's third heartbeat since has not shown it either: it never came.
        beat_with(&mut c, t0, &ids[0], &two);
        assert_ne!(view_of(&mut c), ids[0]);
        beat_with(&mut c, t0, &ids[0], &two);
        assert_eq!(view_of(&mut c), ids[0]);
        assert_ne!(view_of(&mut c), ids[0]);

        // Viewers opened at once, the origin's share 1 (tests/hot_stream.rs in Chromium): the
        // first is placed on the origin, whose next heartbeat comes before its WHEP request; the
        // second still spills. Once a report shows the first, it counts as reported.
        let mut c = run(1, 0);
        assert_eq!(view_of(&mut c), ids[0]);
        beat_with(&mut c, t0, &ids[0], &[("pub", SessionKind::Publish)]);
        let spill = view_of(&mut c);
        assert_ne!(spill, ids[0]);
        beat_with(
            &mut c,
            t0,
            &ids[0],
            &[("pub", SessionKind::Publish), ("v0", SessionKind::View)],
        );
        assert_eq!(view_of(&mut c), spill);
        assert_eq!(
            c.placed_views
                .get(&(StreamId::new("live").unwrap(), ids[0].clone())),
            None
        );
    }

    #[test]
    fn without_a_share_viewers_spill_once_the_origin_is_full() {
        let t0 = Instant::now();
        let ids: Vec<NodeId> = ["a", "b", "c"]
            .iter()
            .map(|n| NodeId::new(*n).unwrap())
            .collect();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let names: Vec<String> = (0..7).map(|i| format!("v{i}")).collect();
        let mut on_a = vec![("pub", SessionKind::Publish)];
        on_a.extend(names.iter().map(|n| (n.as_str(), SessionKind::View)));
        // The origin holds 8 sessions of the 10 it reports it can take.
        let hb = Heartbeat {
            http: "http://a.test".into(),
            media: "127.0.0.1:1".into(),
            session_capacity: 10,
            sessions: on_a
                .iter()
                .map(|(s, kind)| ferry_proto::api::SessionReport {
                    id: SessionId::new(*s).unwrap(),
                    stream: StreamId::new("live").unwrap(),
                    kind: *kind,
                    state: "connected".into(),
                })
                .collect(),
            ..Heartbeat::default()
        };
        c.heartbeat(t0, &ids[0], hb).unwrap();
        beat_with(&mut c, t0, &ids[1], &[]);
        beat_with(&mut c, t0, &ids[2], &[]);
        for id in &ids {
            c.set_weight(id, Some(1.0)).unwrap();
        }
        assert!(c.streams().iter().all(|s| !s.hot));
        // Two more fit (a burst: counted before any heartbeat reports them).
        assert_eq!(view_of(&mut c), ids[0]);
        assert_eq!(view_of(&mut c), ids[0]);
        // Then the stream plays on another node, every further viewer on the same one.
        let spill = view_of(&mut c);
        assert_ne!(spill, ids[0]);
        for _ in 0..5 {
            assert_eq!(view_of(&mut c), spill);
        }
        // Once its node reports them, the stream is hot.
        let names: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
        let spilled: Vec<(&str, SessionKind)> = names
            .iter()
            .map(|n| (n.as_str(), SessionKind::View))
            .collect();
        beat_with(&mut c, t0, &spill, &spilled);
        let s = c.streams();
        assert!(s[0].hot, "{s:?}");
    }

    #[test]
    fn recordings_are_listed_with_their_nodes_while_those_are_up() {
        let t0 = Instant::now();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let a = NodeId::new("a").unwrap();
        let rec = ferry_proto::api::RecordingReport {
            id: "rec-1".into(),
            stream: "live".into(),
            target: "s3://bucket/rec-1".into(),
            state: "recording".into(),
            segments: 3,
            bytes: 1000,
            ..Default::default()
        };
        let hb = Heartbeat {
            http: "http://a.test".into(),
            media: "127.0.0.1:1".into(),
            recordings: vec![rec.clone()],
            ..Heartbeat::default()
        };
        c.heartbeat(t0, &a, hb).unwrap();
        assert_eq!(
            c.recording_views(),
            vec![ferry_proto::api::RecordingReport {
                node: "a".into(),
                ..rec
            }]
        );
        // A node declared down: its recordings are not listed as running.
        let _ = c.tick(t0 + Duration::from_secs(10));
        assert_eq!(c.node_state(&a), Some(NodeState::Down));
        assert!(c.recording_views().is_empty());
    }

    #[test]
    fn by_default_missed_heartbeats_make_a_node_down() {
        let t0 = Instant::now();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let a = NodeId::new("a").unwrap();
        beat(&mut c, t0, &a);
        let _ = c.tick(t0 + Duration::from_secs(2));
        assert_eq!(c.node_state(&a), Some(NodeState::Active));
        let _ = c.tick(t0 + Duration::from_secs(4));
        assert_eq!(c.node_state(&a), Some(NodeState::Down));
    }
}
