//! One replica of a room: the HLC, the state, the idempotency store and what the peers
//! acknowledged. A pure core: every call takes the caller's `now_ms` and returns the messages
//! to send; the driver owns sockets and timers.
//!
//! Protocol between replicas:
//! - **ops**: a replica pushes each `Op` it stamps down the op's tree (fast path, may be lost);
//! - **deltas**: each round of the room's sync tree (`sync_round`), `delta_for(peer)` to each
//!   tree neighbour (everything it has not acknowledged); the peer merges it and answers an
//!   `Ack` with its version vector;
//! - **summaries and watermarks**: each round a replica sends its parent a `Summary` (the
//!   replicas of its subtree and the meet of their vectors); the root, once that covers every
//!   replica, takes the meet as its watermark, which goes down the tree as `Watermark`;
//! - **anti-entropy** (every 30 s and on reconnect): `AeRequest` (digest) → `AeReply` (differing
//!   keys + subtrees) → `AeFinish` (subtrees back). Every step carries the sender's collection
//!   watermark so both sides collect the same tombstones before comparing;
//! - **GC**: a tombstone goes once every known replica has merged both the removal and the
//!   removed entry (causal stability): known from every peer's acknowledgement or from the
//!   sync tree's watermark.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::context::{Dot, VersionVector};
use crate::digest::{Digest, Key, Subtree};
use crate::hlc::{DEFAULT_MAX_DRIFT_MS, HlcClock};
use crate::idempotency::{
    DEFAULT_CAPACITY, DEFAULT_RETENTION_MS, IdempotencyError, IdempotencyStore, Lookup, Receipt,
};
use crate::ids::{IdempotencyKey, ReplicaId, RoomId};
use crate::op::{Command, CommandError, Op, OpKind, Register, Value};
use crate::state::{Delta, Fragment, GcStats, RoomState, SyncError};

/// How a replica is set up.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ReplicaConfig {
    /// This replica.
    pub replica: ReplicaId,
    /// The room.
    pub room: RoomId,
    /// The other replicas of the room (all must acknowledge before a tombstone goes).
    pub peers: Vec<ReplicaId>,
    /// HLC drift bound for received stamps.
    pub max_drift_ms: u64,
    /// Idempotency key retention.
    pub idempotency_retention_ms: u64,
    /// Idempotency store capacity.
    pub idempotency_capacity: usize,
}

impl ReplicaConfig {
    /// Defaults: 500 ms drift bound, keys kept 30 s, 65,536 keys.
    pub fn new(replica: ReplicaId, room: RoomId, peers: Vec<ReplicaId>) -> Self {
        Self {
            replica,
            room,
            peers,
            max_drift_ms: DEFAULT_MAX_DRIFT_MS,
            idempotency_retention_ms: DEFAULT_RETENTION_MS,
            idempotency_capacity: DEFAULT_CAPACITY,
        }
    }
}

/// A replica's version vector after merging: what it has.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Ack {
    /// The room.
    pub room: RoomId,
    /// The acknowledging replica.
    pub from: ReplicaId,
    /// Its version vector.
    pub version: VersionVector,
}

/// Anti-entropy step 1: my digest.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AeRequest {
    /// The room.
    pub room: RoomId,
    /// Sender.
    pub from: ReplicaId,
    /// Sender's digest.
    pub digest: Digest,
    /// Sender's collection watermark.
    pub watermark: VersionVector,
}

/// Anti-entropy step 2: the keys that differ and my subtrees for them.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AeReply {
    /// The room.
    pub room: RoomId,
    /// Sender.
    pub from: ReplicaId,
    /// Keys whose subtrees differ.
    pub keys: Vec<Key>,
    /// Sender's subtrees for them (empty ones left out).
    pub subtrees: Vec<Subtree>,
    /// Sender's collection watermark.
    pub watermark: VersionVector,
}

/// Anti-entropy step 3: my subtrees for the keys that differ.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AeFinish {
    /// The room.
    pub room: RoomId,
    /// Sender.
    pub from: ReplicaId,
    /// Sender's subtrees.
    pub subtrees: Vec<Subtree>,
    /// Sender's collection watermark.
    pub watermark: VersionVector,
}

/// Up the sync tree: what a replica knows of its subtree — the replicas it covers and the
/// meet of their version vectors (every dot at or below it is held by each of them).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// The room.
    pub room: RoomId,
    /// Sender (a child of the receiver).
    pub from: ReplicaId,
    /// The replicas of its subtree whose versions the meet includes, in id order.
    pub covers: Vec<ReplicaId>,
    /// The meet of their version vectors.
    pub meet: VersionVector,
}

/// Down the sync tree: the sender's collection watermark.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Watermark {
    /// The room.
    pub room: RoomId,
    /// Sender (the receiver's parent).
    pub from: ReplicaId,
    /// What every replica of the room has merged.
    pub watermark: VersionVector,
}

/// One round of the sync tree ([`Replica::sync_round`]): what to send to whom.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SyncRound {
    /// The parent and this replica's summary for it; `None` at the root.
    pub parent: Option<(ReplicaId, Summary)>,
    /// The children, each to get `watermark`.
    pub children: Vec<ReplicaId>,
    /// This replica's collection watermark.
    pub watermark: Watermark,
}

/// A command's result.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CommandOutcome {
    /// What the client gets back (the first result again on a retry).
    pub receipt: Receipt,
    /// The new operation to broadcast; `None` for a retry, which changed nothing.
    pub op: Option<Op>,
}

/// All of a replica's state, as plain data.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ReplicaSnapshot {
    /// The configuration.
    pub config: ReplicaConfig,
    /// The clock.
    pub clock: HlcClock,
    /// The room state.
    pub state: RoomState,
    /// What each peer acknowledged.
    pub acked: BTreeMap<ReplicaId, VersionVector>,
    /// Collection watermark learned from peers.
    pub learned: VersionVector,
    /// Remembered idempotency keys.
    pub idempotency: IdempotencyStore,
}

/// One replica of one room.
#[derive(Clone, Debug)]
pub struct Replica {
    config: ReplicaConfig,
    clock: HlcClock,
    state: RoomState,
    acked: BTreeMap<ReplicaId, VersionVector>,
    learned: VersionVector,
    idempotency: IdempotencyStore,
    /// Off while the replica may not know every replica of the room (see `set_collecting`).
    collecting: bool,
    /// The latest summary from each child in the sync tree.
    below: BTreeMap<ReplicaId, Summary>,
}

fn fingerprint(cmd: &Command) -> u64 {
    let bytes = postcard::to_allocvec(cmd).unwrap_or_default();
    let h = Sha256::digest(&bytes);
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[..8]);
    u64::from_le_bytes(b)
}

impl Replica {
    /// A replica with an empty room.
    pub fn new(config: ReplicaConfig) -> Self {
        let acked = config
            .peers
            .iter()
            .filter(|p| **p != config.replica)
            .map(|p| (p.clone(), VersionVector::new()))
            .collect();
        Self {
            clock: HlcClock::new(config.replica.clone(), config.max_drift_ms),
            state: RoomState::new(config.room.clone()),
            idempotency: IdempotencyStore::new(
                config.idempotency_retention_ms,
                config.idempotency_capacity,
            ),
            acked,
            learned: VersionVector::new(),
            config,
            collecting: true,
            below: BTreeMap::new(),
        }
    }

    /// The other replicas this one knows (every one must acknowledge before a tombstone goes).
    pub fn peers(&self) -> impl Iterator<Item = &ReplicaId> {
        self.acked.keys()
    }

    /// Adds a replica of the room found later (a node that started hosting it); `false` if it
    /// was known. Nothing is collected until it acknowledged what it removes.
    pub fn add_peer(&mut self, peer: ReplicaId) -> bool {
        if peer == self.config.replica || self.acked.contains_key(&peer) {
            return false;
        }
        self.config.peers.push(peer.clone());
        self.acked.insert(peer, VersionVector::new());
        true
    }

    /// Forgets a replica that no longer hosts the room (it holds no state to bring back).
    pub fn remove_peer(&mut self, peer: &ReplicaId) -> bool {
        self.config.peers.retain(|p| p != peer);
        self.below.remove(peer);
        self.acked.remove(peer).is_some()
    }

    /// The replicas this one passes an op stamped by `origin` on to: its children in the op's
    /// push tree over the replicas it knows, itself included ([`crate::fanout`]). The origin
    /// calls it with its own id for a fresh op; a replica that received an op it did not have
    /// calls it with the op's dot's replica.
    pub fn fanout_children(&self, origin: &ReplicaId, fanout: usize) -> Vec<ReplicaId> {
        let me = &self.config.replica;
        crate::fanout::children(
            self.acked.keys().chain(std::iter::once(me)),
            origin,
            me,
            fanout,
        )
        .into_iter()
        .cloned()
        .collect()
    }

    /// Merges an op that came from a peer down its push tree; whether the state changed, and
    /// the replicas to pass it on to: this one's children in the op's tree when the op was new
    /// here, none for a repeat (it was passed on when it came first).
    pub fn handle_pushed_op(
        &mut self,
        now_ms: u64,
        op: &Op,
        fanout: usize,
    ) -> Result<(bool, Vec<ReplicaId>), SyncError> {
        let fresh = !self.state.context().covers(&op.dot);
        let changed = self.handle_op(now_ms, op)?;
        let pass_on = if fresh {
            self.fanout_children(&op.dot.replica, fanout)
        } else {
            Vec::new()
        };
        Ok((changed, pass_on))
    }

    /// This replica's parent (`None` at the root) and children in the room's sync tree over
    /// the replicas it knows ([`crate::fanout::sync_neighbours`]): the peers it sends deltas.
    pub fn sync_neighbours(&self, fanout: usize) -> (Option<ReplicaId>, Vec<ReplicaId>) {
        let me = &self.config.replica;
        let (parent, children) = crate::fanout::sync_neighbours(
            self.acked.keys().chain(std::iter::once(me)),
            me,
            fanout,
        );
        (parent.cloned(), children.into_iter().cloned().collect())
    }

    /// One round of the sync tree (every delta interval): this replica's summary for its
    /// parent — itself and what its children's latest summaries cover, with the meet of their
    /// versions — and its watermark for its children. At the root, once the summary covers
    /// every replica it knows and it collects, the meet is causally stable: the root takes it
    /// as its watermark (and collects), and the watermark travels down the tree. A replica
    /// thus exchanges with at most `fanout` + 1 others per round, not with every other one.
    pub fn sync_round(&mut self, fanout: usize) -> SyncRound {
        let (parent, children) = self.sync_neighbours(fanout);
        let mut covers = vec![self.config.replica.clone()];
        let mut meet = self.state.version().clone();
        for c in &children {
            if let Some(s) = self.below.get(c) {
                covers.extend(s.covers.iter().cloned());
                meet = meet.meet(&s.meet);
            }
        }
        covers.sort();
        covers.dedup();
        let summary = Summary {
            room: self.config.room.clone(),
            from: self.config.replica.clone(),
            covers,
            meet,
        };
        if parent.is_none()
            && self.collecting
            && self
                .acked
                .keys()
                .all(|p| summary.covers.binary_search(p).is_ok())
        {
            self.learn(&summary.meet);
        }
        SyncRound {
            parent: parent.map(|p| (p, summary)),
            children,
            watermark: Watermark {
                room: self.config.room.clone(),
                from: self.config.replica.clone(),
                watermark: self.stable(),
            },
        }
    }

    /// A child's summary (kept until the next one; one from a replica that is not a known
    /// peer is ignored). `false` when ignored.
    pub fn handle_summary(&mut self, summary: &Summary) -> bool {
        if summary.room != self.config.room || !self.acked.contains_key(&summary.from) {
            return false;
        }
        self.below.insert(summary.from.clone(), summary.clone());
        true
    }

    /// The parent's watermark: learned, and collected against.
    pub fn handle_watermark(&mut self, w: &Watermark) -> Result<(), SyncError> {
        self.check_room(&w.room)?;
        self.learn(&w.watermark);
        Ok(())
    }

    /// Whether `peer` lacks something this replica has (a delta would carry something).
    pub fn peer_behind(&self, peer: &ReplicaId) -> bool {
        self.acked
            .get(peer)
            .is_some_and(|vv| !self.state.version().dominated_by(vv))
    }

    /// Turns tombstone collection on or off. A replica that may not know every replica of its
    /// room (just created, its peers not all asked yet) must not collect, nor tell others a
    /// watermark: its stable vector would leave out a replica that lacks a removal, and that
    /// replica would keep the removed entry for ever. Off, `stable()` is empty. On by default.
    pub fn set_collecting(&mut self, on: bool) {
        self.collecting = on;
    }

    /// This replica's id.
    pub fn id(&self) -> &ReplicaId {
        &self.config.replica
    }

    /// The room state.
    pub fn state(&self) -> &RoomState {
        &self.state
    }

    /// What merges changed in the state since the last call ([`RoomState::take_touched`]).
    pub fn take_touched(&mut self) -> crate::state::Touched {
        self.state.take_touched()
    }

    /// The idempotency store.
    pub fn idempotency(&self) -> &IdempotencyStore {
        &self.idempotency
    }

    /// Handles a client command: validate, dedupe by key, stamp, apply.
    pub fn handle_command(
        &mut self,
        now_ms: u64,
        key: IdempotencyKey,
        cmd: Command,
    ) -> Result<CommandOutcome, CommandError> {
        cmd.validate()?;
        let fp = fingerprint(&cmd);
        match self.idempotency.lookup(now_ms, &key, Some(fp)) {
            Lookup::Replay(receipt) => return Ok(CommandOutcome { receipt, op: None }),
            Lookup::Conflict => return Err(CommandError::KeyReused),
            Lookup::Fresh => {}
        }
        self.idempotency.check_room(now_ms).map_err(
            |IdempotencyError::Full { retry_after_ms }| CommandError::Overloaded { retry_after_ms },
        )?;
        let kind = self.resolve(cmd)?;
        let stamp = self.clock.now(now_ms);
        let dot = Dot {
            replica: self.config.replica.clone(),
            seq: self.state.version().get(&self.config.replica) + 1,
        };
        let op = Op {
            room: self.config.room.clone(),
            dot: dot.clone(),
            stamp: stamp.clone(),
            key: key.clone(),
            kind,
        };
        // Our own op for our own room: the room check cannot fail.
        let _ = self.state.apply(&op);
        let receipt = Receipt { dot, stamp };
        // `check_room` above made space.
        let _ = self
            .idempotency
            .remember(now_ms, key, Some(fp), receipt.clone());
        Ok(CommandOutcome {
            receipt,
            op: Some(op),
        })
    }

    /// Turns a command into an operation against the current state.
    fn resolve(&self, cmd: Command) -> Result<OpKind, CommandError> {
        let store = self.state.participant(cmd.participant());
        let present = store.is_some_and(|s| s.present());
        if !present && !matches!(cmd, Command::Join { .. }) {
            return Err(CommandError::NotInRoom);
        }
        Ok(match cmd {
            Command::Join {
                participant,
                name,
                metadata,
            } => OpKind::Join {
                participant,
                name,
                metadata,
            },
            Command::Leave { participant } => OpKind::Leave {
                removed: store.map(|s| s.live_dots()).unwrap_or_default(),
                participant,
            },
            Command::Set {
                participant,
                register,
                value,
            } => {
                if let (Register::Attribute(_), Value::Text(Some(_)), Some(s)) =
                    (&register, &value, store)
                {
                    let exists = s
                        .registers
                        .get(&register)
                        .is_some_and(|l| l.value != Value::Text(None));
                    if !exists && s.attribute_count() >= crate::op::MAX_ATTRIBUTES {
                        return Err(CommandError::TooManyAttributes);
                    }
                }
                OpKind::Set {
                    participant,
                    register,
                    value,
                }
            }
            Command::Publish {
                participant,
                track,
                stream,
                kind,
            } => OpKind::Publish {
                participant,
                track,
                stream,
                kind,
            },
            Command::Unpublish { participant, track } => {
                let removed = store.map(|s| s.live_track_dots(&track)).unwrap_or_default();
                if removed.is_empty() {
                    return Err(CommandError::UnknownTrack);
                }
                OpKind::Unpublish {
                    participant,
                    track,
                    removed,
                }
            }
            Command::React { participant, delta } => {
                let own = self.state.data().counters.get(&self.config.replica);
                let (up, down) = own.map_or((0, 0), |c| (c.up, c.down));
                let step = delta.unsigned_abs();
                let (up, down) = if delta > 0 {
                    (up.saturating_add(step), down)
                } else {
                    (up, down.saturating_add(step))
                };
                OpKind::React {
                    participant,
                    up,
                    down,
                }
            }
            Command::Chat { participant, text } => OpKind::Chat { participant, text },
        })
    }

    /// Applies an operation broadcast by another replica; returns whether it changed anything.
    pub fn handle_op(&mut self, now_ms: u64, op: &Op) -> Result<bool, SyncError> {
        self.check_room(&op.room)?;
        self.clock.update(&op.stamp, now_ms)?;
        let changed = self.state.apply(op)?;
        // Best effort: a retry that reaches this replica later is recognised too (and the key
        // reused for another command refused, where the op tells its command). A full store
        // only loses that convenience; the op itself is deduplicated by its dot.
        let receipt = Receipt {
            dot: op.dot.clone(),
            stamp: op.stamp.clone(),
        };
        let fingerprint = op.kind.command().map(|c| fingerprint(&c));
        let _ = self
            .idempotency
            .remember(now_ms, op.key.clone(), fingerprint, receipt);
        Ok(changed)
    }

    /// Everything `peer` has not acknowledged.
    pub fn delta_for(&self, peer: &ReplicaId) -> Delta {
        let base = self.acked.get(peer).cloned().unwrap_or_default();
        self.state.delta_since(&base)
    }

    /// Merges a delta and acknowledges it.
    pub fn handle_delta(&mut self, now_ms: u64, delta: &Delta) -> Result<Ack, SyncError> {
        self.check_room(&delta.room)?;
        self.observe_stamps(now_ms, &delta.data)?;
        self.state.merge_delta(delta)?;
        Ok(self.ack())
    }

    /// Merges a stored snapshot of the room (any replica's full state, e.g. after a
    /// full-cluster restart): a join, so order and repeats do not matter; the clock moves past
    /// its stamps, and this replica's next dot follows the ones the snapshot knows of it.
    pub fn merge_snapshot(&mut self, now_ms: u64, state: &RoomState) -> Result<bool, SyncError> {
        self.check_room(state.room())?;
        self.observe_stamps(now_ms, state.data())?;
        self.state.merge(state)
    }

    /// This replica's acknowledgement of what it has.
    pub fn ack(&self) -> Ack {
        Ack {
            room: self.config.room.clone(),
            from: self.config.replica.clone(),
            version: self.state.version().clone(),
        }
    }

    /// Records a peer's acknowledgement; acknowledgements from unknown replicas are ignored.
    pub fn handle_ack(&mut self, ack: &Ack) -> bool {
        if ack.room != self.config.room {
            return false;
        }
        match self.acked.get_mut(&ack.from) {
            Some(vv) => {
                vv.join(&ack.version);
                true
            }
            None => false,
        }
    }

    /// What every known replica has merged: the collection watermark.
    pub fn stable(&self) -> VersionVector {
        if !self.collecting {
            return VersionVector::new();
        }
        let mut stable = self.state.version().clone();
        for vv in self.acked.values() {
            stable = stable.meet(vv);
        }
        stable.join(&self.learned);
        stable
    }

    /// Collects every causally stable tombstone.
    pub fn collect_garbage(&mut self) -> GcStats {
        let stable = self.stable();
        self.state.collect_garbage(&stable)
    }

    /// Anti-entropy step 1.
    pub fn start_anti_entropy(&mut self) -> AeRequest {
        self.collect_garbage();
        AeRequest {
            room: self.config.room.clone(),
            from: self.config.replica.clone(),
            digest: self.state.digest(),
            watermark: self.stable(),
        }
    }

    /// Anti-entropy step 2.
    pub fn handle_ae_request(&mut self, req: &AeRequest) -> Result<AeReply, SyncError> {
        self.check_room(&req.room)?;
        self.learn(&req.watermark);
        let keys = self.state.diff(&req.digest);
        Ok(AeReply {
            room: self.config.room.clone(),
            from: self.config.replica.clone(),
            subtrees: self.subtrees(&keys),
            keys,
            watermark: self.stable(),
        })
    }

    /// Anti-entropy step 3.
    pub fn handle_ae_reply(&mut self, now_ms: u64, reply: &AeReply) -> Result<AeFinish, SyncError> {
        self.check_room(&reply.room)?;
        self.merge_subtrees(now_ms, &reply.subtrees)?;
        self.learn(&reply.watermark);
        Ok(AeFinish {
            room: self.config.room.clone(),
            from: self.config.replica.clone(),
            subtrees: self.subtrees(&reply.keys),
            watermark: self.stable(),
        })
    }

    /// Anti-entropy, last step.
    pub fn handle_ae_finish(&mut self, now_ms: u64, finish: &AeFinish) -> Result<(), SyncError> {
        self.check_room(&finish.room)?;
        self.merge_subtrees(now_ms, &finish.subtrees)?;
        self.learn(&finish.watermark);
        Ok(())
    }

    /// All state as plain data.
    pub fn snapshot(&self) -> ReplicaSnapshot {
        ReplicaSnapshot {
            config: self.config.clone(),
            clock: self.clock.clone(),
            state: self.state.clone(),
            acked: self.acked.clone(),
            learned: self.learned.clone(),
            idempotency: self.idempotency.clone(),
        }
    }

    /// A replica from a snapshot.
    pub fn restore(s: ReplicaSnapshot) -> Self {
        Self {
            config: s.config,
            clock: s.clock,
            state: s.state,
            acked: s.acked,
            learned: s.learned,
            idempotency: s.idempotency,
            collecting: true,
            below: BTreeMap::new(),
        }
    }

    fn subtrees(&self, keys: &[Key]) -> Vec<Subtree> {
        keys.iter()
            .map(|k| self.state.subtree(k))
            .filter(|s| !s.data.is_empty())
            .collect()
    }

    fn merge_subtrees(&mut self, now_ms: u64, subtrees: &[Subtree]) -> Result<(), SyncError> {
        for s in subtrees {
            self.check_room(&s.room)?;
            self.observe_stamps(now_ms, &s.data)?;
        }
        for s in subtrees {
            self.state.merge_subtree(s)?;
        }
        Ok(())
    }

    /// Takes a peer's watermark (stability is a fact about all replicas) and collects.
    fn learn(&mut self, watermark: &VersionVector) {
        self.learned.join(watermark);
        self.collect_garbage();
    }

    fn observe_stamps(&mut self, now_ms: u64, frag: &Fragment) -> Result<(), SyncError> {
        if let Some(max) = frag.max_stamp() {
            self.clock.update(max, now_ms)?;
        }
        Ok(())
    }

    fn check_room(&self, room: &RoomId) -> Result<(), SyncError> {
        if room != &self.config.room {
            return Err(SyncError::WrongRoom {
                want: self.config.room.clone(),
                got: room.clone(),
            });
        }
        Ok(())
    }
}
