//! A node's room server (feature `server`): the room WebSocket of the participants it hosts, a
//! [`Replica`] per room it hosts, and replication with the other nodes hosting the room. The
//! decisions stay in the pure core (`Replica`, `frames::advance`); this is the driver: sockets,
//! timers, HTTP between nodes. Protocol: docs/rooms.md, "Signalling".

mod call;
mod frames;
mod http;
mod outgoing;
mod replication;
mod snapshots;

pub use call::CallError;
pub use frames::{ClientFrame, FrameError, Subscription, advance, diff, state_for, state_json};
pub use http::routes;
pub use outgoing::{Format, OutFrame, Welcome, WelcomeState};
pub use snapshots::SnapshotTarget;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use serde_json::{Value as Json, json};
use tokio::sync::{Notify, mpsc};

use crate::codec::Message;
use crate::digest::Hash;
use crate::ids::{IdempotencyKey, ParticipantId, RoomId};
use crate::op::Command;
use crate::replica::{Replica, ReplicaConfig};
use crate::state::RoomView;
use ferry_proto::auth::Verifier;
use ferry_proto::ids::NodeId;

/// An `events` frame and how many events it carries.
type Frame = (Arc<OutFrame>, u64);

/// Frames a slow connection may have queued before it is closed.
const CLIENT_QUEUE: usize = 4096;
/// A node asked whether it hosts a room that has not answered is asked again this often, ms.
const ASK_AGAIN_MS: u64 = 1_000;
/// An unchanged sync-tree summary or watermark is sent again every this many delta intervals
/// (a lost one is replaced within a second at the default 250 ms).
const SYNC_RESEND: u64 = 4;
/// How often the server looks at its rooms (merge windows, deltas, timers).
const TICK: Duration = Duration::from_millis(5);

/// The other nodes: id → HTTP base URL (the cluster directory), read on every use.
pub type Peers = Arc<dyn Fn() -> Vec<(NodeId, String)> + Send + Sync>;

/// How a node's room server behaves.
#[derive(Clone)]
pub struct RoomServerConfig {
    /// This node (the replica id).
    pub node: NodeId,
    /// Merge window for events to clients, ms (0: every change at once).
    pub window_ms: u64,
    /// A connection gone without `leave` keeps its participant this long, ms.
    pub grace_ms: u64,
    /// Deltas to peers that lack something, this often, ms.
    pub delta_interval_ms: u64,
    /// Anti-entropy with every peer (and asking the nodes not known to host the room), ms.
    pub anti_entropy_ms: u64,
    /// A room with no connection here is dropped after this long, ms.
    pub idle_ms: u64,
    /// The cluster token nodes send each other (`Authorization: Bearer`); `None`: open.
    pub cluster_token: Option<String>,
    /// Access tokens of clients (grant `join`); `None`: open.
    pub tokens: Option<Arc<Verifier>>,
    /// `https`/`wss` when the node serves TLS.
    pub tls: bool,
    /// A room with more operations per second than this (client commands and ops from other
    /// nodes) is hot: it moves to a task of its own, so that the other rooms of the node keep
    /// their latency. 0: never.
    pub hot_ops_per_s: u64,
    /// An isolated room whose rate stayed under half of `hot_ops_per_s` this long goes back to
    /// the shared task, ms.
    pub hot_cool_ms: u64,
    /// Where the rooms' snapshots are kept for a full-cluster restart (the scheduler); `None`:
    /// nowhere (a room lives as long as one of its replicas).
    pub snapshots: Option<SnapshotTarget>,
    /// Replicas each node passes an op to in the op's push tree ([`crate::fanout`]): the node
    /// that stamped it sends it to this many, each of them on to as many, and so on. Also the
    /// children per node of the room's sync tree (deltas, the collection watermark).
    pub fanout: usize,
}

impl std::fmt::Debug for RoomServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomServerConfig")
            .field("node", &self.node)
            .field("window_ms", &self.window_ms)
            .field("grace_ms", &self.grace_ms)
            .finish_non_exhaustive()
    }
}

impl RoomServerConfig {
    /// Defaults: 50 ms window, 10 s grace, deltas every 250 ms, anti-entropy every 30 s, ops
    /// pushed down trees of fan-out 64.
    pub fn new(node: NodeId) -> Self {
        RoomServerConfig {
            node,
            window_ms: crate::merge_window::DEFAULT_WINDOW_MS,
            grace_ms: 10_000,
            delta_interval_ms: 250,
            anti_entropy_ms: 30_000,
            idle_ms: 60_000,
            cluster_token: None,
            tokens: None,
            tls: false,
            hot_ops_per_s: 300,
            hot_cool_ms: 10_000,
            snapshots: None,
            fanout: crate::fanout::DEFAULT_FANOUT,
        }
    }
}

/// One connected client.
struct Client {
    participant: ParticipantId,
    tx: mpsc::Sender<Arc<OutFrame>>,
    subscription: Subscription,
}

/// Whether a room's stored snapshots were merged into its replica.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Restore {
    /// To fetch (again) at this time, ms.
    Pending(u64),
    /// A fetch is under way.
    Fetching,
    /// Merged (or the node keeps no snapshots).
    Done,
}

/// One hosted room.
struct Room {
    replica: Replica,
    clients: HashMap<u64, Client>,
    /// What clients were last told (welcome and events are cut against it).
    told: RoomView,
    /// Welcome states of `told` per subscription (a join storm serializes each once).
    welcomes: Vec<(Subscription, Arc<WelcomeState>)>,
    dirty_since: Option<u64>,
    /// Nodes asked whether they host the room that have not answered.
    asking: BTreeSet<NodeId>,
    /// Every node asked at least once (collection may start once all answered).
    asked_all: bool,
    /// Clients were told the state after every node asked had answered (welcomes may go).
    caught_up: bool,
    last_delta: u64,
    /// Sync-tree rounds so far, and what the last one sent up and down (an unchanged summary
    /// or watermark goes again only every `SYNC_RESEND` rounds, in case it was lost).
    sync_rounds: u64,
    sent_summary: Option<crate::replica::Summary>,
    sent_watermark: Option<crate::context::VersionVector>,
    last_ae: u64,
    /// When the nodes in `asking` were last asked.
    last_ask: u64,
    /// Participants whose connection went without `leave`: until when they are kept.
    graces: HashMap<ParticipantId, u64>,
    idle_since: Option<u64>,
    /// Operations since `rate_since` (the rate is measured each second).
    ops: u64,
    rate_since: u64,
    ops_per_s: f64,
    /// Isolated, its rate under half the threshold since then (it goes back after
    /// [`RoomServerConfig::hot_cool_ms`]).
    cool_since: Option<u64>,
    restore: Restore,
    /// Snapshots merged into the replica on opening.
    restored: usize,
    /// The digest root of the state last stored, when, and whether a store is under way.
    stored_root: Option<Hash>,
    stored_at: u64,
    storing: bool,
    /// Participants hosted here without a connection (the node restarted) got their grace.
    orphans_checked: bool,
}

impl Room {
    fn new(node: &NodeId, room: RoomId, now: u64, snapshots: bool) -> Self {
        let mut replica = Replica::new(ReplicaConfig::new(node.clone(), room, Vec::new()));
        replica.set_collecting(false);
        Room {
            told: replica.state().view(),
            welcomes: Vec::new(),
            replica,
            clients: HashMap::new(),
            dirty_since: None,
            asking: BTreeSet::new(),
            asked_all: false,
            caught_up: false,
            last_delta: now,
            sync_rounds: 0,
            sent_summary: None,
            sent_watermark: None,
            last_ae: 0,
            last_ask: 0,
            graces: HashMap::new(),
            idle_since: None,
            ops: 0,
            rate_since: now,
            ops_per_s: 0.0,
            cool_since: None,
            restore: if snapshots {
                Restore::Pending(now)
            } else {
                Restore::Done
            },
            restored: 0,
            stored_root: None,
            stored_at: now,
            storing: false,
            orphans_checked: false,
        }
    }

    fn touch(&mut self, now: u64) {
        self.dirty_since.get_or_insert(now);
    }

    /// The node that stamped the participant's latest join (it hosts the participant).
    fn host_of(&self, p: &ParticipantId) -> Option<&NodeId> {
        let s = self.replica.state().participant(p)?;
        s.joins
            .iter()
            .filter(|(dot, _)| !s.removed.contains_key(*dot))
            .max_by(|a, b| a.1.stamp.cmp(&b.1.stamp))
            .map(|(dot, _)| &dot.replica)
    }

    /// Whether this node removes `p` when its grace ends: it hosts `p`, or `p`'s host does not
    /// host the room (it is down, or came back without opening the room: nobody else would).
    fn removes(&self, node: &NodeId, p: &ParticipantId) -> bool {
        self.host_of(p)
            .is_some_and(|h| h == node || !self.replica.peers().any(|x| x == h))
    }
}

/// Counters for `/metrics`.
#[derive(Default)]
struct Counters {
    commands: AtomicU64,
    duplicates: AtomicU64,
    refused: AtomicU64,
    frames: AtomicU64,
    events: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    send_errors: AtomicU64,
    graces: AtomicU64,
    isolations: AtomicU64,
    snapshots_stored: AtomicU64,
    snapshot_bytes: AtomicU64,
    snapshots_restored: AtomicU64,
    snapshot_errors: AtomicU64,
    orphan_graces: AtomicU64,
    relayed: AtomicU64,
    deisolations: AtomicU64,
}

/// Rooms one task polls. The shared shard holds every room but the hot ones; each hot room is
/// isolated in a shard (and task) of its own.
struct Shard {
    rooms: Mutex<HashMap<RoomId, Room>>,
    wake: Notify,
}

impl Shard {
    fn new() -> Arc<Shard> {
        Arc::new(Shard {
            rooms: Mutex::default(),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RoomId, Room>> {
        self.rooms.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A node's rooms.
pub struct RoomServer {
    config: RoomServerConfig,
    peers: Peers,
    shared: Arc<Shard>,
    /// Hot rooms, each in a shard of its own. Lock order: a shard, then this.
    isolated: RwLock<HashMap<RoomId, Arc<Shard>>>,
    next_client: AtomicU64,
    outbox: replication::Outbox,
    snapshots: Option<snapshots::SnapshotClient>,
    counters: Counters,
}

/// Snapshot calls a poll decided on, made once the shard's lock is released.
#[derive(Default)]
struct SnapshotJobs {
    fetch: Vec<RoomId>,
    store: Vec<(RoomId, Vec<u8>, Hash)>,
    delete: Vec<RoomId>,
}

impl std::fmt::Debug for RoomServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomServer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Wall clock, ms since the epoch (the HLC's physical part).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl RoomServer {
    /// A server; [`RoomServer::start`] runs its timers and replication.
    pub fn new(config: RoomServerConfig, peers: Peers) -> Arc<Self> {
        Arc::new(RoomServer {
            outbox: replication::Outbox::new(config.cluster_token.clone()),
            snapshots: config.snapshots.as_ref().map(|t| {
                snapshots::SnapshotClient::new(
                    t,
                    config.node.clone(),
                    config.cluster_token.as_deref(),
                )
            }),
            config,
            peers,
            shared: Shard::new(),
            isolated: RwLock::default(),
            next_client: AtomicU64::new(1),
            counters: Counters::default(),
        })
    }

    /// Runs the timers (merge windows, deltas, anti-entropy, graces) and the senders.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        self.spawn_shard(self.shared.clone())
    }

    /// The task of one shard; an isolated shard's ends with its room.
    fn spawn_shard(self: &Arc<Self>, shard: Arc<Shard>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = shard.wake.notified() => {}
                }
                let (alive, jobs) = me.poll(&shard, now_ms());
                me.flush_outbox();
                me.run_snapshot_jobs(jobs);
                if !alive {
                    return;
                }
            }
        })
    }

    fn isolated(&self) -> std::sync::RwLockReadGuard<'_, HashMap<RoomId, Arc<Shard>>> {
        self.isolated.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The shard `room` lives in.
    fn shard(&self, room: &RoomId) -> Arc<Shard> {
        self.isolated()
            .get(room)
            .cloned()
            .unwrap_or_else(|| self.shared.clone())
    }

    /// Runs `f` on `room` (created when `create` and missing) under its shard's lock, then
    /// wakes the shard. `None`: the room is not hosted here.
    fn with_room<R>(
        &self,
        room: &RoomId,
        create: bool,
        f: impl FnOnce(&mut Room) -> R,
    ) -> Option<R> {
        loop {
            let shard = self.shard(room);
            let mut rooms = shard.lock();
            if !rooms.contains_key(room) {
                if !Arc::ptr_eq(&shard, &self.shard(room)) {
                    // Isolated meanwhile: look again.
                    continue;
                }
                if !create {
                    return None;
                }
                tracing::info!(room = %room, "hosting room");
                rooms.insert(
                    room.clone(),
                    Room::new(
                        &self.config.node,
                        room.clone(),
                        now_ms(),
                        self.snapshots.is_some(),
                    ),
                );
            }
            let out = rooms.get_mut(room).map(f);
            drop(rooms);
            shard.wake.notify_one();
            return out;
        }
    }

    /// Every shard: the shared one first.
    fn shards(&self) -> Vec<Arc<Shard>> {
        let mut all = vec![self.shared.clone()];
        all.extend(self.isolated().values().cloned());
        all
    }

    /// This node.
    pub fn node(&self) -> &NodeId {
        &self.config.node
    }

    /// Hosts `room` (creating its replica, which asks the other nodes for the room); whether
    /// the replica caught up: every node asked answered and clients were told everything, so
    /// a welcome now does not show a participant missing that a peer knows (a client moving
    /// here would see false `left` events).
    fn open(&self, room: &RoomId) -> bool {
        self.with_room(room, true, |r| {
            r.idle_since = None;
            r.restore == Restore::Done
                && (r.caught_up || (r.asked_all && r.asking.is_empty() && r.dirty_since.is_none()))
        })
        .unwrap_or(false)
    }

    /// A client connected (wanting `subscription`): its queue, the welcome frame.
    fn connect(
        &self,
        room: &RoomId,
        participant: &ParticipantId,
        subscription: Subscription,
    ) -> (u64, mpsc::Receiver<Arc<OutFrame>>, Welcome) {
        let id = self.next_client.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let state = self.with_room(room, true, |r| {
            r.graces.remove(participant);
            r.idle_since = None;
            let state = match r.welcomes.iter().find(|(s, _)| *s == subscription) {
                Some((_, state)) => state.clone(),
                None => {
                    let state = Arc::new(WelcomeState::new(
                        state_for(&r.told, &subscription).to_string(),
                    ));
                    r.welcomes.push((subscription.clone(), state.clone()));
                    state
                }
            };
            r.clients.insert(
                id,
                Client {
                    participant: participant.clone(),
                    tx,
                    subscription,
                },
            );
            state
        });
        let state = state.unwrap_or_else(|| Arc::new(WelcomeState::new("{}".into())));
        // The state is shared by every welcome of this window, in each format.
        let welcome = Welcome {
            room: room.as_str().to_owned(),
            participant: participant.as_str().to_owned(),
            node: self.config.node.as_str().to_owned(),
            window_ms: self.config.window_ms,
            state,
        };
        (id, rx, welcome)
    }

    /// A client went; `left`: it said `leave` (no grace).
    fn disconnect(&self, room: &RoomId, id: u64, left: bool) {
        let now = now_ms();
        self.with_room(room, false, |r| {
            let Some(c) = r.clients.remove(&id) else {
                return;
            };
            let still = r.clients.values().any(|o| o.participant == c.participant);
            if !left && !still {
                r.graces.insert(c.participant, now + self.config.grace_ms);
            }
            if r.clients.is_empty() {
                r.idle_since = Some(now);
            }
        });
    }

    /// One text frame from client `id`: the reply frame (receipt, error, subscribed).
    fn frame(&self, room: &RoomId, id: u64, text: &str) -> (String, bool) {
        let parsed: Result<ClientFrame, _> = serde_json::from_str(text);
        let frame = match parsed {
            Ok(f) => f,
            Err(e) => return self.not_a_frame(e),
        };
        self.counters.frames.fetch_add(1, Ordering::Relaxed);
        let key = frame_key(&frame);
        self.with_room(room, false, |r| self.frame_in(r, id, frame, key.clone()))
            .unwrap_or_else(|| {
                (
                    error_frame(key.as_deref(), &FrameError::bad("room is gone")),
                    false,
                )
            })
    }

    /// A client frame that is not one (bad JSON, a binary frame that does not decode): the
    /// `error` reply.
    fn not_a_frame(&self, why: impl std::fmt::Display) -> (String, bool) {
        self.counters.frames.fetch_add(1, Ordering::Relaxed);
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        let err = FrameError::bad(format!("not a frame: {why}"));
        (error_frame(None, &err), false)
    }

    fn frame_in(
        &self,
        r: &mut Room,
        id: u64,
        frame: ClientFrame,
        key: Option<String>,
    ) -> (String, bool) {
        let Some(client) = r.clients.get_mut(&id) else {
            return (
                error_frame(key.as_deref(), &FrameError::bad("not connected")),
                false,
            );
        };
        if let ClientFrame::Subscribe {
            key,
            events,
            participants,
        } = frame
        {
            return match Subscription::new(events, participants) {
                Ok(s) => {
                    client.subscription = s;
                    (json!({"type": "subscribed", "key": key}).to_string(), false)
                }
                Err(e) => (error_frame(key.as_deref(), &e), false),
            };
        }
        let participant = client.participant.clone();
        let cmd = match frames::command(&participant, frame) {
            Ok(Some(c)) => c,
            Ok(None) => return (String::new(), false),
            Err(e) => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return (error_frame(key.as_deref(), &e), false);
            }
        };
        let leave = matches!(cmd.1, Command::Leave { .. });
        match self.apply(r, cmd.0, cmd.1) {
            Ok(reply) => (reply, leave),
            Err(e) => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                (error_frame(key.as_deref(), &e), false)
            }
        }
    }

    /// Runs a command on the room's replica, broadcasts the op; the receipt frame.
    fn apply(&self, r: &mut Room, key: IdempotencyKey, cmd: Command) -> Result<String, FrameError> {
        let now = now_ms();
        let out = r.replica.handle_command(now, key.clone(), cmd)?;
        self.counters.commands.fetch_add(1, Ordering::Relaxed);
        let duplicate = out.op.is_none();
        if let Some(op) = out.op {
            for peer in r
                .replica
                .fanout_children(&self.config.node, self.config.fanout)
            {
                self.outbox
                    .push(&peer, r.replica.state().room(), Message::Op(op.clone()));
            }
            r.touch(now);
            r.ops += 1;
        } else {
            self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        Ok(json!({
            "type": "receipt",
            "key": key.as_str(),
            "duplicate": duplicate,
            "stamp": frames::stamp(&out.receipt.stamp),
        })
        .to_string())
    }

    /// The timers of a shard's rooms; the shared shard hands hot rooms a shard of their own.
    /// `false`: an isolated shard whose room went (its task ends).
    fn poll(self: &Arc<Self>, shard: &Arc<Shard>, now: u64) -> (bool, SnapshotJobs) {
        let directory = (self.peers)();
        let shared = Arc::ptr_eq(shard, &self.shared);
        let mut rooms = shard.lock();
        let mut gone = Vec::new();
        let mut hot = Vec::new();
        let mut cooled = Vec::new();
        let mut jobs = SnapshotJobs::default();
        for (id, r) in rooms.iter_mut() {
            self.poll_room(now, id, r, &directory);
            self.poll_snapshot(now, id, r, &mut jobs);
            if r.clients.is_empty()
                && r.graces.is_empty()
                && r.idle_since
                    .is_some_and(|t| now.saturating_sub(t) >= self.config.idle_ms)
            {
                gone.push(id.clone());
            } else if shared
                && self.config.hot_ops_per_s > 0
                && r.ops_per_s >= self.config.hot_ops_per_s as f64
            {
                hot.push(id.clone());
            } else if !shared {
                if r.ops_per_s < self.config.hot_ops_per_s as f64 / 2.0 {
                    let since = *r.cool_since.get_or_insert(now);
                    if now.saturating_sub(since) >= self.config.hot_cool_ms {
                        cooled.push(id.clone());
                    }
                } else {
                    r.cool_since = None;
                }
            }
        }
        for id in gone {
            tracing::info!(room = %id, "no longer hosting room (idle)");
            // Its snapshot goes with it, unless it never merged the stored ones.
            if rooms
                .remove(&id)
                .is_some_and(|r| r.restore == Restore::Done)
            {
                jobs.delete.push(id);
            }
        }
        // Cooled down: back to the shared task. The room is in the shared shard before the
        // isolated map forgets this one, so a lookup finds it in one or the other.
        for id in cooled {
            let Some(mut r) = rooms.remove(&id) else {
                continue;
            };
            tracing::info!(room = %id, ops_per_s = r.ops_per_s, "hot room cooled: back on the shared task");
            self.counters.deisolations.fetch_add(1, Ordering::Relaxed);
            r.cool_since = None;
            self.shared.lock().insert(id.clone(), r);
            self.isolated
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            self.shared.wake.notify_one();
        }
        for id in hot {
            let Some(r) = rooms.remove(&id) else { continue };
            tracing::warn!(room = %id, ops_per_s = r.ops_per_s, "hot room: isolated on a task of its own");
            self.counters.isolations.fetch_add(1, Ordering::Relaxed);
            let own = Shard::new();
            own.lock().insert(id.clone(), r);
            self.isolated
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, own.clone());
            self.spawn_shard(own);
        }
        if !shared && rooms.is_empty() {
            let mut isolated = self.isolated.write().unwrap_or_else(|e| e.into_inner());
            isolated.retain(|_, s| !Arc::ptr_eq(s, shard));
            return (false, jobs);
        }
        (true, jobs)
    }

    /// A room's snapshot timers: fetch the stored snapshots of a room just opened; store its
    /// state every interval when it changed (only once the stored ones are merged, so an
    /// empty replica never replaces what its node stored before it restarted).
    fn poll_snapshot(&self, now: u64, id: &RoomId, r: &mut Room, jobs: &mut SnapshotJobs) {
        let Some(target) = &self.config.snapshots else {
            return;
        };
        match r.restore {
            Restore::Pending(at) if at <= now => {
                r.restore = Restore::Fetching;
                jobs.fetch.push(id.clone());
            }
            Restore::Done
                if !r.storing && now.saturating_sub(r.stored_at) >= target.interval_ms =>
            {
                r.stored_at = now;
                let root = r.replica.state().digest().root;
                if r.stored_root != Some(root) {
                    match crate::codec::encode(r.replica.state()) {
                        Ok(bytes) => {
                            r.storing = true;
                            jobs.store.push((id.clone(), bytes, root));
                        }
                        Err(e) => tracing::warn!(room = %id, error = %e, "room snapshot"),
                    }
                }
            }
            _ => {}
        }
    }

    /// Makes the snapshot calls `jobs` holds, each in a task of its own.
    fn run_snapshot_jobs(self: &Arc<Self>, jobs: SnapshotJobs) {
        if self.snapshots.is_none() {
            return;
        }
        for room in jobs.fetch {
            let me = self.clone();
            tokio::spawn(async move {
                let Some(client) = &me.snapshots else { return };
                let got = client.fetch(&room).await;
                me.restored(&room, got);
            });
        }
        for (room, bytes, root) in jobs.store {
            let me = self.clone();
            tokio::spawn(async move {
                let Some(client) = &me.snapshots else { return };
                let n = bytes.len() as u64;
                let stored = client.put(&room, bytes).await;
                if let Err(e) = &stored {
                    me.counters.snapshot_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(room = %room, error = %e, "storing the room's snapshot failed");
                } else {
                    me.counters.snapshots_stored.fetch_add(1, Ordering::Relaxed);
                    me.counters.snapshot_bytes.fetch_add(n, Ordering::Relaxed);
                }
                me.with_room(&room, false, |r| {
                    r.storing = false;
                    if stored.is_ok() {
                        r.stored_root = Some(root);
                    }
                });
            });
        }
        for room in jobs.delete {
            let me = self.clone();
            tokio::spawn(async move {
                let Some(client) = &me.snapshots else { return };
                if let Err(e) = client.delete(&room).await {
                    me.counters.snapshot_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(room = %room, error = %e, "removing the room's snapshot failed");
                }
            });
        }
    }

    /// The stored snapshots of `room` came (or could not be fetched: tried again in a second).
    fn restored(
        &self,
        room: &RoomId,
        got: Result<Vec<crate::snapshot::StoredSnapshot>, CallError>,
    ) {
        let now = now_ms();
        self.with_room(room, false, |r| match got {
            Ok(snapshots) => {
                for s in &snapshots {
                    match r.replica.merge_snapshot(now, &s.state) {
                        Ok(changed) => {
                            r.restored += 1;
                            if changed {
                                r.touch(now);
                            }
                        }
                        Err(e) => {
                            self.counters.snapshot_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(room = %room, node = %s.node, error = %e, "room snapshot refused");
                        }
                    }
                }
                self.counters
                    .snapshots_restored
                    .fetch_add(snapshots.len() as u64, Ordering::Relaxed);
                if !snapshots.is_empty() {
                    tracing::info!(room = %room, snapshots = snapshots.len(), "room restored from its snapshots");
                }
                r.restore = Restore::Done;
            }
            Err(e) => {
                self.counters.snapshot_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(room = %room, error = %e, "fetching the room's snapshots failed (retrying)");
                r.restore = Restore::Pending(now + 1_000);
            }
        });
    }

    fn poll_room(&self, now: u64, id: &RoomId, r: &mut Room, directory: &[(NodeId, String)]) {
        if now.saturating_sub(r.rate_since) >= 1_000 {
            r.ops_per_s = r.ops as f64 * 1_000.0 / now.saturating_sub(r.rate_since) as f64;
            r.ops = 0;
            r.rate_since = now;
        }
        // Graces that ran out: the node that stamped the latest join removes the participant.
        let due: Vec<ParticipantId> = r
            .graces
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(p, _)| p.clone())
            .collect();
        for p in due {
            r.graces.remove(&p);
            if r.removes(&self.config.node, &p) {
                self.counters.graces.fetch_add(1, Ordering::Relaxed);
                // Unique per leave: two graces ending in the same millisecond must not share a key
                // (the second would be refused as a reused key and its participant stay).
                let n = self.next_client.fetch_add(1, Ordering::Relaxed);
                let key = IdempotencyKey::new(format!("grace-{now}-{n}"));
                if let Ok(key) = key {
                    tracing::info!(room = %id, participant = %p.in_logs(), "connection gone: leaves");
                    let _ = self.apply(r, key, Command::Leave { participant: p });
                }
            }
        }
        // Ask the nodes not known to host the room (on creation and every anti-entropy round).
        if r.last_ae == 0 || now.saturating_sub(r.last_ae) >= self.config.anti_entropy_ms {
            r.last_ae = now;
            let known: BTreeSet<NodeId> = r.replica.peers().cloned().collect();
            if r.asked_all && r.asking.is_empty() {
                r.replica.set_collecting(true);
            }
            let ae = r.replica.start_anti_entropy();
            for (node, _) in directory {
                if *node == self.config.node {
                    continue;
                }
                if !known.contains(node) {
                    r.asking.insert(node.clone());
                }
                self.outbox.push(node, id, Message::AeRequest(ae.clone()));
            }
            r.asked_all = true;
            r.last_ask = now;
        } else if !r.asking.is_empty() && now.saturating_sub(r.last_ask) >= ASK_AGAIN_MS {
            // A node asked that has not answered (unreachable, or it came back at another
            // address): ask again, so the catch-up does not wait for the next round.
            r.last_ask = now;
            let ae = r.replica.start_anti_entropy();
            for node in r.asking.clone() {
                self.outbox.push(&node, id, Message::AeRequest(ae.clone()));
            }
        }
        if now.saturating_sub(r.last_delta) >= self.config.delta_interval_ms {
            r.last_delta = now;
            self.sync_round(id, r);
        }
        if let Some(since) = r.dirty_since
            && now.saturating_sub(since) >= self.config.window_ms
        {
            r.dirty_since = None;
            let touched = r.replica.take_touched();
            let events = advance(&mut r.told, r.replica.state(), &touched);
            r.welcomes.clear();
            r.caught_up |= r.asked_all && r.asking.is_empty();
            if !events.is_empty() {
                self.deliver(r, &events);
            }
        }
        // Once the replica caught up (stored snapshots and every node asked): participants
        // this node hosts, or whose host does not host the room, that have no connection
        // here (the node or the cluster restarted) get the grace a lost connection gets, so
        // they leave unless they come back.
        if !r.orphans_checked
            && r.restore == Restore::Done
            && r.asked_all
            && r.asking.is_empty()
            && r.dirty_since.is_none()
        {
            r.orphans_checked = true;
            let orphans: Vec<ParticipantId> = r
                .told
                .participants
                .keys()
                .filter(|p| {
                    r.removes(&self.config.node, p)
                        && !r.graces.contains_key(*p)
                        && !r.clients.values().any(|c| &c.participant == *p)
                })
                .cloned()
                .collect();
            for p in orphans {
                tracing::info!(room = %id, participant = %p.in_logs(), "hosted here without a connection: grace");
                self.counters.orphan_graces.fetch_add(1, Ordering::Relaxed);
                r.graces.insert(p, now + self.config.grace_ms);
            }
        }
    }

    /// Deltas to the neighbours in the room's sync tree that lack something, the summary up
    /// to the parent and the watermark down to the children (each when it changed, or again
    /// every `SYNC_RESEND` rounds).
    fn sync_round(&self, id: &RoomId, r: &mut Room) {
        let round = r.replica.sync_round(self.config.fanout);
        for p in round.parent.iter().map(|(p, _)| p).chain(&round.children) {
            if r.replica.peer_behind(p) {
                self.outbox
                    .push(p, id, Message::Delta(r.replica.delta_for(p)));
            }
        }
        r.sync_rounds += 1;
        let resend = r.sync_rounds.is_multiple_of(SYNC_RESEND);
        if let Some((parent, summary)) = round.parent
            && (resend || r.sent_summary.as_ref() != Some(&summary))
        {
            self.outbox
                .push(&parent, id, Message::Summary(summary.clone()));
            r.sent_summary = Some(summary);
        }
        let w = round.watermark;
        if !round.children.is_empty() && (resend || r.sent_watermark.as_ref() != Some(&w.watermark))
        {
            for c in &round.children {
                self.outbox.push(c, id, Message::Watermark(w.clone()));
            }
            r.sent_watermark = Some(w.watermark);
        }
    }

    /// One `events` frame per client, filtered by its subscription; a client whose queue is
    /// full is dropped (it reconnects and gets the state in its welcome).
    fn deliver(&self, r: &mut Room, events: &[Json]) {
        let mut slow = Vec::new();
        // One frame per distinct subscription (most clients share one), serialized once.
        let mut frames: Vec<(&Subscription, Option<Frame>)> = Vec::new();
        for (id, c) in &r.clients {
            let frame = match frames.iter().find(|(s, _)| **s == c.subscription) {
                Some((_, f)) => f.clone(),
                None => {
                    let mine: Vec<&Json> =
                        events.iter().filter(|e| c.subscription.wants(e)).collect();
                    let f = (!mine.is_empty()).then(|| {
                        let text = json!({"type": "events", "events": mine}).to_string();
                        (Arc::new(OutFrame::new(text)), mine.len() as u64)
                    });
                    frames.push((&c.subscription, f.clone()));
                    f
                }
            };
            let Some((frame, n)) = frame else { continue };
            self.counters.events.fetch_add(n, Ordering::Relaxed);
            if c.tx.try_send(frame).is_err() {
                slow.push(*id);
            }
        }
        for id in slow {
            tracing::warn!(client = id, "room client too slow: closing its connection");
            r.clients.remove(&id);
        }
    }

    /// Messages from `from` for `room`; the replies. `None`: this node does not host the room.
    fn receive(
        &self,
        from: &NodeId,
        room: &RoomId,
        messages: Vec<Message>,
    ) -> Option<Vec<Message>> {
        let now = now_ms();
        self.with_room(room, false, |r| {
            self.receive_in(now, r, from, room, messages)
        })
    }

    fn receive_in(
        &self,
        now: u64,
        r: &mut Room,
        from: &NodeId,
        room: &RoomId,
        messages: Vec<Message>,
    ) -> Vec<Message> {
        r.asking.remove(from);
        if r.replica.add_peer(from.clone()) {
            tracing::info!(room = %room, peer = %from, "room replica found");
            self.outbox
                .push(from, room, Message::Delta(r.replica.delta_for(from)));
        }
        let mut replies = Vec::new();
        for m in messages {
            self.counters.received.fetch_add(1, Ordering::Relaxed);
            let changed = match m {
                Message::Op(op) => match r.replica.handle_pushed_op(now, &op, self.config.fanout) {
                    Ok((changed, pass_on)) => {
                        self.counters
                            .relayed
                            .fetch_add(pass_on.len() as u64, Ordering::Relaxed);
                        for peer in pass_on {
                            self.outbox.push(&peer, room, Message::Op(op.clone()));
                        }
                        changed
                    }
                    Err(_) => false,
                },
                Message::Delta(d) => match r.replica.handle_delta(now, &d) {
                    Ok(ack) => {
                        replies.push(Message::Ack(ack));
                        !d.is_empty()
                    }
                    Err(e) => {
                        tracing::debug!(room = %room, error = %e, "delta refused");
                        false
                    }
                },
                Message::Ack(a) => {
                    r.replica.handle_ack(&a);
                    false
                }
                Message::AeRequest(q) => {
                    if let Ok(reply) = r.replica.handle_ae_request(&q) {
                        replies.push(Message::AeReply(reply));
                    }
                    false
                }
                Message::AeReply(reply) => match r.replica.handle_ae_reply(now, &reply) {
                    Ok(fin) => {
                        replies.push(Message::AeFinish(fin));
                        true
                    }
                    Err(_) => false,
                },
                Message::AeFinish(fin) => r.replica.handle_ae_finish(now, &fin).is_ok(),
                Message::Subtrees(_) => false,
                Message::Summary(summary) => {
                    r.replica.handle_summary(&summary);
                    false
                }
                Message::Watermark(w) => {
                    let _ = r.replica.handle_watermark(&w);
                    false
                }
            };
            if changed {
                r.touch(now);
                r.ops += 1;
            }
        }
        if r.asked_all && r.asking.is_empty() {
            r.replica.set_collecting(true);
        }
        replies
    }

    /// `peer` does not host `room`: stop waiting for it.
    fn not_hosted(&self, peer: &NodeId, room: &RoomId) {
        self.with_room(room, false, |r| {
            r.asking.remove(peer);
            if r.replica.remove_peer(peer) {
                tracing::info!(room = %room, peer = %peer, "peer no longer hosts room");
            }
            if r.asked_all && r.asking.is_empty() {
                r.replica.set_collecting(true);
            }
        });
    }

    fn flush_outbox(self: &Arc<Self>) {
        let directory = (self.peers)();
        for (peer, batch) in self.outbox.take_ready() {
            let Some(url) = directory
                .iter()
                .find(|(n, _)| *n == peer)
                .map(|(_, u)| u.clone())
            else {
                self.outbox.done(&peer);
                continue;
            };
            let me = self.clone();
            let sent = batch.iter().map(|(_, m)| m.len() as u64).sum::<u64>();
            self.counters.sent.fetch_add(sent, Ordering::Relaxed);
            tokio::spawn(async move {
                let from = me.config.node.clone();
                let answer = me.outbox.send(&url, from, batch).await;
                match answer {
                    Ok(reply) => {
                        for room in &reply.gone {
                            me.not_hosted(&peer, room);
                        }
                        for (room, messages) in reply.rooms {
                            if let Some(back) = me.receive(&peer, &room, messages) {
                                for m in back {
                                    me.outbox.push(&peer, &room, m);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        me.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(peer = %peer, error = %e, "room replication failed");
                    }
                }
                me.outbox.done(&peer);
                // What queued meanwhile goes with the next poll of the shared shard.
                me.shared.wake.notify_one();
            });
        }
    }

    /// `GET /v1/rooms`: the rooms hosted here.
    pub fn list(&self) -> Json {
        let mut out: Vec<Json> = Vec::new();
        for shard in self.shards() {
            let isolated = !Arc::ptr_eq(&shard, &self.shared);
            out.extend(shard.lock().iter().map(|(id, r)| {
                json!({
                    "room": id.as_str(),
                    "participants": r.told.participants.len(),
                    "connections": r.clients.len(),
                    "peers": r.replica.peers().map(NodeId::as_str).collect::<Vec<_>>(),
                    "digest": hex(&r.replica.state().digest().root),
                    "ops_per_s": r.ops_per_s,
                    "isolated": isolated,
                })
            }));
        }
        out.sort_by(|a, b| a["room"].as_str().cmp(&b["room"].as_str()));
        Json::Array(out)
    }

    /// `GET /v1/rooms/{room}`: one room as this node sees it.
    pub fn show(&self, room: &RoomId) -> Option<Json> {
        let isolated = self.isolated().contains_key(room);
        self.with_room(room, false, |r| {
            json!({
                "room": room.as_str(),
                "node": self.config.node.as_str(),
                "peers": r.replica.peers().map(NodeId::as_str).collect::<Vec<_>>(),
                "connections": r.clients.len(),
                "digest": hex(&r.replica.state().digest().root),
                "collecting": r.asked_all && r.asking.is_empty(),
                "ops_per_s": r.ops_per_s,
                "isolated": isolated,
                "fanout": {
                    "children": self.config.fanout,
                    "depth": crate::fanout::depth(r.replica.peers().count() + 1, self.config.fanout),
                },
                "sync": sync_json(&r.replica, self.config.fanout),
                "snapshots": {
                    "restored": r.restore == Restore::Done,
                    "merged": r.restored,
                    "stored": r.stored_root.is_some(),
                },
                "state": state_json(&r.replica.state().view()),
            })
        })
    }

    /// Prometheus text for the node's `/metrics`.
    pub fn prometheus(&self) -> String {
        let (mut rooms, mut connections, mut participants) = (0, 0, 0);
        let shards = self.shards();
        for shard in &shards {
            let all = shard.lock();
            rooms += all.len();
            connections += all.values().map(|r| r.clients.len()).sum::<usize>();
            participants += all
                .values()
                .map(|r| r.told.participants.len())
                .sum::<usize>();
        }
        let isolated = shards.len() - 1;
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        #[rustfmt::skip]
        let figures: [(&str, &str, &str, u64); 21] = [
            ("ferry_room_rooms", "gauge", "Rooms this node hosts a replica of.", rooms as u64),
            ("ferry_room_connections", "gauge", "Room WebSockets open on this node.", connections as u64),
            ("ferry_room_participants", "gauge", "Participants of the rooms hosted here (as last told to clients).", participants as u64),
            ("ferry_room_commands_total", "counter", "Client commands applied (retries included).", get(&c.commands)),
            ("ferry_room_duplicates_total", "counter", "Commands that were retries of an idempotency key (nothing changed).", get(&c.duplicates)),
            ("ferry_room_refused_total", "counter", "Client frames refused with an error frame.", get(&c.refused)),
            ("ferry_room_frames_total", "counter", "Client frames received.", get(&c.frames)),
            ("ferry_room_events_total", "counter", "Events delivered to clients (after merge windows and subscriptions).", get(&c.events)),
            ("ferry_room_replication_sent_total", "counter", "Replica messages sent to other nodes.", get(&c.sent)),
            ("ferry_room_replication_received_total", "counter", "Replica messages received from other nodes.", get(&c.received)),
            ("ferry_room_ops_relayed_total", "counter", "Ops from other nodes passed on down their push trees (rooms over more nodes than the fan-out).", get(&c.relayed)),
            ("ferry_room_replication_errors_total", "counter", "Failed replication requests.", get(&c.send_errors)),
            ("ferry_room_grace_leaves_total", "counter", "Participants removed after their connection went without leave.", get(&c.graces)),
            ("ferry_room_isolated_rooms", "gauge", "Hot rooms running on a task of their own.", isolated as u64),
            ("ferry_room_isolations_total", "counter", "Rooms isolated for their operation rate.", get(&c.isolations)),
            ("ferry_room_deisolations_total", "counter", "Isolated rooms back on the shared task after their rate stayed under half the threshold.", get(&c.deisolations)),
            ("ferry_room_snapshots_stored_total", "counter", "Room states stored with the scheduler (for a full-cluster restart).", get(&c.snapshots_stored)),
            ("ferry_room_snapshot_bytes_total", "counter", "Bytes of the room states stored.", get(&c.snapshot_bytes)),
            ("ferry_room_snapshots_restored_total", "counter", "Stored room snapshots merged into rooms opened here.", get(&c.snapshots_restored)),
            ("ferry_room_snapshot_errors_total", "counter", "Failed snapshot stores, fetches and removals.", get(&c.snapshot_errors)),
            ("ferry_room_orphan_graces_total", "counter", "Participants hosted here found without a connection when a room opened (a restart), given a grace.", get(&c.orphan_graces)),
        ];
        let mut s = String::new();
        for (name, kind, help, v) in figures {
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
            ));
        }
        s
    }
}

/// A room's place in its sync tree, what it learned up it and what it collects against
/// (`GET /v1/rooms/{room}`: `sync`).
fn sync_json(replica: &Replica, fanout: usize) -> Json {
    let (parent, children) = replica.sync_neighbours(fanout);
    json!({
        "parent": parent.as_ref().map(NodeId::as_str),
        "children": children.iter().map(NodeId::as_str).collect::<Vec<_>>(),
        "tombstones": replica.state().tombstones(),
        "stable_ops": replica.stable().total(),
        "merged_ops": replica.state().version().total(),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn frame_key(f: &ClientFrame) -> Option<String> {
    match f {
        ClientFrame::Join { key, .. }
        | ClientFrame::Leave { key }
        | ClientFrame::Set { key, .. }
        | ClientFrame::Publish { key, .. }
        | ClientFrame::Unpublish { key, .. }
        | ClientFrame::React { key, .. }
        | ClientFrame::Chat { key, .. } => Some(key.clone()),
        ClientFrame::Subscribe { key, .. } => key.clone(),
    }
}

fn error_frame(key: Option<&str>, e: &FrameError) -> String {
    json!({"type": "error", "key": key, "code": e.code, "message": e.message}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next_event(rx: &mut mpsc::Receiver<Arc<OutFrame>>, what: &str) -> Json {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let f = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .ok()
                .flatten();
            let f = f.unwrap_or_else(|| panic!("no events frame with {what}"));
            if f.text().contains(what) {
                return serde_json::from_str(f.text()).unwrap_or_default();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hot_room_gets_a_task_of_its_own_and_keeps_working() {
        let mut config = RoomServerConfig::new(NodeId::new("node-a").unwrap());
        config.hot_ops_per_s = 50;
        config.hot_cool_ms = 300;
        config.window_ms = 10;
        let s = RoomServer::new(config, Arc::new(Vec::new));
        s.start();
        let (hot, calm) = (RoomId::new("hot").unwrap(), RoomId::new("calm").unwrap());
        let p = ParticipantId::new("p").unwrap();
        let (h, mut hrx, _) = s.connect(&hot, &p, Subscription::default());
        let (c, mut crx, _) = s.connect(&calm, &p, Subscription::default());
        for (room, id) in [(&hot, h), (&calm, c)] {
            let (reply, _) = s.frame(room, id, r#"{"type":"join","key":"j","name":"P"}"#);
            assert!(reply.contains("receipt"), "{reply}");
        }
        // 100 operations per second for 1.5 s.
        for n in 0..150 {
            let f = format!(
                r#"{{"type":"set","key":"m{n}","register":"audio_muted","value":{}}}"#,
                n % 2 == 0
            );
            let (reply, _) = s.frame(&hot, h, &f);
            assert!(reply.contains("receipt"), "{reply}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let list = s.list();
        let of = |name: &str| {
            list.as_array()
                .and_then(|a| a.iter().find(|r| r["room"] == name).cloned())
                .unwrap_or_default()
        };
        assert_eq!(of("hot")["isolated"], true, "{list}");
        assert_eq!(of("calm")["isolated"], false, "{list}");
        assert!(s.prometheus().contains("ferry_room_isolated_rooms 1"));
        // Both rooms still work: commands answered, events delivered.
        let (reply, _) = s.frame(&hot, h, r#"{"type":"chat","key":"c1","text":"still hot"}"#);
        assert!(reply.contains("receipt"), "{reply}");
        next_event(&mut hrx, "still hot").await;
        let (reply, _) = s.frame(&calm, c, r#"{"type":"chat","key":"c2","text":"calm"}"#);
        assert!(reply.contains("receipt"), "{reply}");
        next_event(&mut crx, "\"calm\"").await;
        // A connection to the hot room now lands in its shard.
        let q = ParticipantId::new("q").unwrap();
        let (_, _, welcome) = s.connect(&hot, &q, Subscription::default());
        let welcome = welcome.text();
        assert!(welcome.contains("\"p\""), "{welcome}");
        // Quiet again: once its rate stayed under half the threshold for 300 ms (the rate is
        // measured each second), the room goes back to the shared task, and keeps working.
        let t = std::time::Instant::now();
        let hot_isolated = || {
            s.list()
                .as_array()
                .and_then(|a| a.iter().find(|r| r["room"] == "hot").cloned())
                .is_some_and(|r| r["isolated"] == true)
        };
        while hot_isolated() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "still isolated: {}",
                s.list()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "hot room back on the shared task {:?} after its burst",
            t.elapsed()
        );
        assert!(s.prometheus().contains("ferry_room_isolated_rooms 0"));
        assert!(s.prometheus().contains("ferry_room_deisolations_total 1"));
        let (reply, _) = s.frame(&hot, h, r#"{"type":"chat","key":"c3","text":"cool again"}"#);
        assert!(reply.contains("receipt"), "{reply}");
        next_event(&mut hrx, "cool again").await;
    }
}
