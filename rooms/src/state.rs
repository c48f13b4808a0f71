//! The room state CRDT.
//!
//! One `RoomState` holds every entry with the dot of the operation that wrote it:
//! - membership: an add-wins OR-Set of join entries per participant;
//! - per-participant LWW registers (mute, hand, layout, custom attributes) ordered by HLC;
//! - published tracks per participant: an OR-Set of track entries;
//! - reactions: a PN-counter, one `(up, down)` entry per origin replica;
//! - chat: an append-only sequence ordered by `(HLC, dot)`.
//!
//! Removals (leave, unpublish) are tombstones `target dot → removing dot` in the participant's
//! store; a leave also resets the registers it observed. The causal context records every dot
//! merged; an incoming entry whose dot the context covers but which is not held was collected
//! (or overwritten) here and is ignored, which is what keeps collected tombstones from
//! resurrecting anything. Merge is a pointwise join: commutative, associative, idempotent.

use std::collections::{BTreeMap, BTreeSet};

use ferry_proto::ids::{StreamId, TrackId};
use serde::{Deserialize, Serialize};

use crate::context::{CausalContext, Dot, VersionVector};
use crate::hlc::Hlc;
use crate::ids::{ParticipantId, ReplicaId, RoomId};
use crate::op::{Layout, Op, OpKind, Register, TrackKind, Value};

/// A join entry (one add of the membership OR-Set).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct JoinEntry {
    /// When it was stamped.
    pub stamp: Hlc,
    /// Display name.
    pub name: String,
    /// Metadata.
    pub metadata: String,
}

/// A published track entry.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct TrackEntry {
    /// When it was stamped.
    pub stamp: Hlc,
    /// Track id within the room.
    pub track: TrackId,
    /// WHIP stream.
    pub stream: StreamId,
    /// Audio or video.
    pub kind: TrackKind,
}

/// A last-writer-wins register value; the larger `(stamp, dot, value)` wins.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct Lww {
    /// The writer's HLC stamp.
    pub stamp: Hlc,
    /// The writing operation.
    pub dot: Dot,
    /// The value.
    pub value: Value,
}

/// The key of a chat message: its position in the total order.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct ChatId {
    /// The HLC stamp (includes the replica).
    pub stamp: Hlc,
    /// The operation.
    pub dot: Dot,
}

/// A chat message body.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct ChatEntry {
    /// Author.
    pub participant: ParticipantId,
    /// Text.
    pub text: String,
}

/// One origin replica's PN-counter totals; a later dot of the same replica supersedes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct CounterEntry {
    /// The operation that produced these totals.
    pub dot: Dot,
    /// Increments.
    pub up: u64,
    /// Decrements.
    pub down: u64,
}

/// Everything stored about one participant (also what anti-entropy ships as one subtree).
#[derive(Clone, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ParticipantStore {
    /// Join entries by dot.
    pub joins: BTreeMap<Dot, JoinEntry>,
    /// Track entries by dot.
    pub tracks: BTreeMap<Dot, TrackEntry>,
    /// LWW registers.
    pub registers: BTreeMap<Register, Lww>,
    /// Tombstones: removed entry's dot → the removing operation's dot.
    pub removed: BTreeMap<Dot, Dot>,
}

impl ParticipantStore {
    fn is_empty(&self) -> bool {
        self.joins.is_empty()
            && self.tracks.is_empty()
            && self.registers.is_empty()
            && self.removed.is_empty()
    }

    /// Whether at least one join entry is alive.
    pub fn present(&self) -> bool {
        self.joins.keys().any(|d| !self.removed.contains_key(d))
    }

    /// Dots of live joins, tracks and registers: what a leave observes.
    pub fn live_dots(&self) -> Vec<Dot> {
        let joins = self.joins.keys();
        let tracks = self.tracks.keys();
        let registers = self.registers.values().map(|l| &l.dot);
        joins
            .chain(tracks)
            .chain(registers)
            .filter(|d| !self.removed.contains_key(*d))
            .cloned()
            .collect()
    }

    /// Dots of the live entries of one track.
    pub fn live_track_dots(&self, track: &TrackId) -> Vec<Dot> {
        self.tracks
            .iter()
            .filter(|(d, t)| &t.track == track && !self.removed.contains_key(*d))
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// Live custom attribute count.
    pub fn attribute_count(&self) -> usize {
        self.registers
            .iter()
            .filter(|(r, l)| {
                matches!(r, Register::Attribute(_))
                    && !self.removed.contains_key(&l.dot)
                    && l.value != Value::Text(None)
            })
            .count()
    }

    /// The store without collected-or-removed material: what is observable.
    pub(crate) fn live(&self) -> ParticipantStore {
        let live = |d: &Dot| !self.removed.contains_key(d);
        ParticipantStore {
            joins: filter(&self.joins, |d, _| live(d)),
            tracks: filter(&self.tracks, |d, _| live(d)),
            registers: filter(&self.registers, |_, l| live(&l.dot)),
            removed: BTreeMap::new(),
        }
    }

    fn since(&self, base: &VersionVector) -> ParticipantStore {
        let new = |d: &Dot| !base.covers(d);
        ParticipantStore {
            joins: filter(&self.joins, |d, _| new(d)),
            tracks: filter(&self.tracks, |d, _| new(d)),
            registers: filter(&self.registers, |_, l| new(&l.dot)),
            removed: filter(&self.removed, |_, r| new(r)),
        }
    }

    fn merge(
        &mut self,
        other: &ParticipantStore,
        ctx: &CausalContext,
        seen: &mut Vec<Dot>,
    ) -> bool {
        let mut changed = join_map(&mut self.joins, &other.joins, |d, _| d.clone(), ctx, seen);
        changed |= join_map(&mut self.tracks, &other.tracks, |d, _| d.clone(), ctx, seen);
        changed |= join_map(
            &mut self.registers,
            &other.registers,
            |_, l| l.dot.clone(),
            ctx,
            seen,
        );
        changed |= join_map(
            &mut self.removed,
            &other.removed,
            |_, r| r.clone(),
            ctx,
            seen,
        );
        changed
    }

    fn max_stamp(&self) -> Option<&Hlc> {
        let joins = self.joins.values().map(|j| &j.stamp);
        let tracks = self.tracks.values().map(|t| &t.stamp);
        let registers = self.registers.values().map(|l| &l.stamp);
        joins.chain(tracks).chain(registers).max()
    }
}

fn filter<K: Ord + Clone, V: Clone>(
    map: &BTreeMap<K, V>,
    keep: impl Fn(&K, &V) -> bool,
) -> BTreeMap<K, V> {
    map.iter()
        .filter(|(k, v)| keep(k, v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Joins `theirs` into `mine`: a held entry keeps the larger value; an entry not held is taken
/// unless `ctx` already covers its dot (then it was collected or superseded here).
fn join_map<K: Ord + Clone, V: Ord + Clone>(
    mine: &mut BTreeMap<K, V>,
    theirs: &BTreeMap<K, V>,
    dot_of: impl Fn(&K, &V) -> Dot,
    ctx: &CausalContext,
    seen: &mut Vec<Dot>,
) -> bool {
    let mut changed = false;
    for (k, v) in theirs {
        let dot = dot_of(k, v);
        match mine.get_mut(k) {
            Some(m) => {
                if *v > *m {
                    *m = v.clone();
                    changed = true;
                }
            }
            None => {
                if !ctx.covers(&dot) {
                    mine.insert(k.clone(), v.clone());
                    changed = true;
                }
            }
        }
        seen.push(dot);
    }
    changed
}

/// A piece of room state: what a delta, an op or an anti-entropy subtree carries.
#[derive(Clone, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Fragment {
    /// Participant stores.
    pub participants: BTreeMap<ParticipantId, ParticipantStore>,
    /// Chat messages.
    pub chat: BTreeMap<ChatId, ChatEntry>,
    /// Reaction counter entries by origin replica.
    pub counters: BTreeMap<ReplicaId, CounterEntry>,
}

impl Fragment {
    /// Whether it carries no entry.
    pub fn is_empty(&self) -> bool {
        self.participants.is_empty() && self.chat.is_empty() && self.counters.is_empty()
    }

    /// Number of entries (joins, tracks, registers, tombstones, messages, counters).
    pub fn entries(&self) -> usize {
        let p: usize = self
            .participants
            .values()
            .map(|s| s.joins.len() + s.tracks.len() + s.registers.len() + s.removed.len())
            .sum();
        p + self.chat.len() + self.counters.len()
    }

    /// The largest HLC stamp carried (tombstones and counters carry none).
    pub fn max_stamp(&self) -> Option<&Hlc> {
        let p = self
            .participants
            .values()
            .filter_map(ParticipantStore::max_stamp);
        p.chain(self.chat.keys().map(|c| &c.stamp)).max()
    }
}

/// Entries a replica has not acknowledged yet, cut against its acknowledged version vector.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Delta {
    /// The room.
    pub room: RoomId,
    /// The version vector the receiver acknowledged (entries it covers are left out).
    pub base: VersionVector,
    /// The sender's version vector when it cut the delta.
    pub top: VersionVector,
    /// The entries.
    pub data: Fragment,
}

impl Delta {
    /// Whether the receiver would learn nothing from it.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty() && self.top.dominated_by(&self.base)
    }
}

/// A state-sync input the replica refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// It belongs to another room.
    #[error("message for room {got}, this replica holds {want}")]
    WrongRoom {
        /// The room of this state.
        want: RoomId,
        /// The room of the message.
        got: RoomId,
    },
    /// Its HLC stamp is too far in the future.
    #[error(transparent)]
    Clock(#[from] crate::hlc::HlcError),
}

/// What a garbage collection removed.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct GcStats {
    /// Tombstones collected (each with the entry it removed, where held).
    pub tombstones: usize,
    /// Participant stores that became empty and were dropped.
    pub participants: usize,
}

/// What merges changed since the last [`RoomState::take_touched`]: the part of the view a
/// server must look at again (a merge window costs what changed in it, not the room's size).
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Touched {
    /// Participants whose stores changed.
    pub participants: BTreeSet<ParticipantId>,
    /// Chat messages merged for the first time.
    pub chat: BTreeSet<ChatId>,
    /// Whether a reaction counter changed.
    pub reactions: bool,
}

impl Touched {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.participants.is_empty() && self.chat.is_empty() && !self.reactions
    }
}

/// Which participant each merged entry's dot wrote, by replica and sequence number, so that a
/// delta cut against a recent version vector looks at the participants written since rather
/// than at every participant of the room. Entries collected up to `floor` are no longer
/// indexed; a delta against a vector below the floor scans the whole state.
#[derive(Clone, Default, Debug)]
struct DotIndex {
    floor: VersionVector,
    by_replica: BTreeMap<ReplicaId, BTreeMap<u64, ParticipantId>>,
}

impl DotIndex {
    fn of(data: &Fragment) -> Self {
        let mut index = Self::default();
        for (p, s) in &data.participants {
            index.insert_store(p, s);
        }
        index
    }

    fn insert_store(&mut self, p: &ParticipantId, s: &ParticipantStore) {
        let dots = s.joins.keys().chain(s.tracks.keys());
        let dots = dots.chain(s.registers.values().map(|l| &l.dot));
        // A tombstone is new with its removing operation (what `since` cuts on).
        for d in dots.chain(s.removed.values()) {
            if d.seq > self.floor.get(&d.replica) {
                self.by_replica
                    .entry(d.replica.clone())
                    .or_default()
                    .insert(d.seq, p.clone());
            }
        }
    }

    /// Forgets the dots `stable` covers.
    fn prune(&mut self, stable: &VersionVector) {
        for (r, n) in stable.iter() {
            if let Some(seqs) = self.by_replica.get_mut(r) {
                *seqs = seqs.split_off(&(n + 1));
            }
        }
        self.floor.join(stable);
    }

    /// The participants written by dots `base` does not cover; `None` when `base` is below
    /// the floor (the index no longer knows everything it lacks).
    fn written_since(&self, base: &VersionVector) -> Option<BTreeSet<&ParticipantId>> {
        if !self.floor.dominated_by(base) {
            return None;
        }
        let mut out = BTreeSet::new();
        for (r, seqs) in &self.by_replica {
            out.extend(seqs.range(base.get(r) + 1..).map(|(_, p)| p));
        }
        Some(out)
    }
}

/// The state of one room at one replica.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "StoredState")]
pub struct RoomState {
    room: RoomId,
    ctx: CausalContext,
    data: Fragment,
    /// Changed since last taken; not part of the state (equality and encoding leave it out).
    #[serde(skip)]
    touched: Touched,
    /// Derived from `data` (rebuilt when decoded).
    #[serde(skip)]
    index: DotIndex,
}

/// What of a [`RoomState`] is encoded.
#[derive(Deserialize)]
struct StoredState {
    room: RoomId,
    ctx: CausalContext,
    data: Fragment,
}

impl From<StoredState> for RoomState {
    fn from(s: StoredState) -> Self {
        Self {
            index: DotIndex::of(&s.data),
            room: s.room,
            ctx: s.ctx,
            data: s.data,
            touched: Touched::default(),
        }
    }
}

impl PartialEq for RoomState {
    fn eq(&self, other: &Self) -> bool {
        self.room == other.room && self.ctx == other.ctx && self.data == other.data
    }
}

impl Eq for RoomState {}

impl RoomState {
    /// An empty room.
    pub fn new(room: RoomId) -> Self {
        Self {
            room,
            ctx: CausalContext::default(),
            data: Fragment::default(),
            touched: Touched::default(),
            index: DotIndex::default(),
        }
    }

    /// What merges changed since the last call (the server's merge window takes it).
    pub fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// The room.
    pub fn room(&self) -> &RoomId {
        &self.room
    }

    /// The dots merged so far.
    pub fn context(&self) -> &CausalContext {
        &self.ctx
    }

    /// The contiguous version vector (what a replica acknowledges).
    pub fn version(&self) -> &VersionVector {
        self.ctx.vv()
    }

    /// All entries, tombstones included.
    pub fn data(&self) -> &Fragment {
        &self.data
    }

    /// A participant's store.
    pub fn participant(&self, p: &ParticipantId) -> Option<&ParticipantStore> {
        self.data.participants.get(p)
    }

    /// Whether `p` is in the room.
    pub fn is_present(&self, p: &ParticipantId) -> bool {
        self.participant(p).is_some_and(ParticipantStore::present)
    }

    fn check_room(&self, room: &RoomId) -> Result<(), SyncError> {
        if room != &self.room {
            return Err(SyncError::WrongRoom {
                want: self.room.clone(),
                got: room.clone(),
            });
        }
        Ok(())
    }

    /// Applies one operation; returns whether anything changed. Applying it again changes
    /// nothing, and operations commute.
    pub fn apply(&mut self, op: &Op) -> Result<bool, SyncError> {
        self.check_room(&op.room)?;
        let frag = fragment_of(op);
        let changed = self.merge_fragment(&frag);
        self.ctx.insert(op.dot.clone());
        Ok(changed)
    }

    fn merge_fragment(&mut self, frag: &Fragment) -> bool {
        let mut seen = Vec::new();
        let mut changed = false;
        for (p, theirs) in &frag.participants {
            self.index.insert_store(p, theirs);
            let mine = self.data.participants.entry(p.clone()).or_default();
            let merged = mine.merge(theirs, &self.ctx, &mut seen);
            if mine.is_empty() {
                self.data.participants.remove(p);
            }
            if merged {
                self.touched.participants.insert(p.clone());
            }
            changed |= merged;
        }
        // Chat entries never change once held: the new ones are those not held before.
        let fresh: Vec<&ChatId> = frag
            .chat
            .keys()
            .filter(|k| !self.data.chat.contains_key(*k))
            .collect();
        changed |= join_map(
            &mut self.data.chat,
            &frag.chat,
            |c, _| c.dot.clone(),
            &self.ctx,
            &mut seen,
        );
        for k in fresh {
            if self.data.chat.contains_key(k) {
                self.touched.chat.insert(k.clone());
            }
        }
        let counters = join_map(
            &mut self.data.counters,
            &frag.counters,
            |_, c| c.dot.clone(),
            &self.ctx,
            &mut seen,
        );
        self.touched.reactions |= counters;
        changed |= counters;
        for d in seen {
            self.ctx.insert(d);
        }
        changed
    }

    /// Full-state join with another replica's state.
    pub fn merge(&mut self, other: &RoomState) -> Result<bool, SyncError> {
        self.check_room(&other.room)?;
        let changed = self.merge_fragment(&other.data);
        self.ctx.join(&other.ctx);
        Ok(changed)
    }

    /// Everything a replica that acknowledged `base` may lack.
    pub fn delta_since(&self, base: &VersionVector) -> Delta {
        let participants = match self.index.written_since(base) {
            Some(written) => written
                .into_iter()
                .filter_map(|p| Some((p.clone(), self.data.participants.get(p)?.since(base))))
                .filter(|(_, s)| !s.is_empty())
                .collect(),
            None => self
                .data
                .participants
                .iter()
                .map(|(p, s)| (p.clone(), s.since(base)))
                .filter(|(_, s)| !s.is_empty())
                .collect(),
        };
        Delta {
            room: self.room.clone(),
            base: base.clone(),
            top: self.ctx.vv().clone(),
            data: Fragment {
                participants,
                chat: filter(&self.data.chat, |c, _| !base.covers(&c.dot)),
                counters: filter(&self.data.counters, |_, c| !base.covers(&c.dot)),
            },
        }
    }

    /// Merges a delta from another replica; returns whether anything changed.
    pub fn merge_delta(&mut self, delta: &Delta) -> Result<bool, SyncError> {
        self.check_room(&delta.room)?;
        let changed = self.merge_fragment(&delta.data);
        for (r, top) in delta.top.iter() {
            self.ctx.insert_range(r, delta.base.get(r), top);
        }
        Ok(changed)
    }

    /// Merges entries without any range claim (an anti-entropy subtree).
    pub(crate) fn merge_entries(&mut self, frag: &Fragment) -> bool {
        self.merge_fragment(frag)
    }

    /// Drops every tombstone whose removing operation and removed entry are both covered by
    /// `stable` (every known replica has merged both), together with the entry it removed.
    pub fn collect_garbage(&mut self, stable: &VersionVector) -> GcStats {
        let mut stats = GcStats::default();
        self.index.prune(stable);
        let touched = &mut self.touched.participants;
        self.data.participants.retain(|p, s| {
            let ripe: Vec<Dot> = s
                .removed
                .iter()
                .filter(|(t, r)| stable.covers(t) && stable.covers(r))
                .map(|(t, _)| t.clone())
                .collect();
            for t in &ripe {
                s.removed.remove(t);
                s.joins.remove(t);
                s.tracks.remove(t);
                s.registers.retain(|_, l| &l.dot != t);
            }
            if !ripe.is_empty() {
                // Only removed entries go, so the view stays; looked at again all the same.
                touched.insert(p.clone());
            }
            stats.tombstones += ripe.len();
            let keep = !s.is_empty();
            if !keep {
                stats.participants += 1;
            }
            keep
        });
        stats
    }

    /// Number of tombstones held.
    pub fn tombstones(&self) -> usize {
        self.data
            .participants
            .values()
            .map(|s| s.removed.len())
            .sum()
    }

    /// The observable room.
    pub fn view(&self) -> RoomView {
        let participants = self
            .data
            .participants
            .iter()
            .filter_map(|(p, s)| Some((p.clone(), participant_view(s)?)))
            .collect();
        let chat = self
            .data
            .chat
            .iter()
            .map(|(id, m)| chat_message(id, m))
            .collect();
        RoomView {
            participants,
            chat,
            reactions: self.reactions(),
        }
    }

    /// One participant as clients see it (`None`: not in the room).
    pub fn participant_view(&self, p: &ParticipantId) -> Option<ParticipantView> {
        participant_view(self.data.participants.get(p)?)
    }

    /// One chat message as clients see it (`None`: not held).
    pub fn chat_message(&self, id: &ChatId) -> Option<ChatMessage> {
        let (id, m) = self.data.chat.get_key_value(id)?;
        Some(chat_message(id, m))
    }

    /// The reaction counter's value.
    pub fn reactions(&self) -> i64 {
        let up: u128 = self.data.counters.values().map(|c| u128::from(c.up)).sum();
        let down: u128 = self
            .data
            .counters
            .values()
            .map(|c| u128::from(c.down))
            .sum();
        // Each side is a sum of u64 totals, far below i128::MAX.
        let net = up.cast_signed() - down.cast_signed();
        i64::try_from(net).unwrap_or(if net < 0 { i64::MIN } else { i64::MAX })
    }
}

fn chat_message(id: &ChatId, m: &ChatEntry) -> ChatMessage {
    ChatMessage {
        stamp: id.stamp.clone(),
        participant: m.participant.clone(),
        text: m.text.clone(),
    }
}

fn participant_view(s: &ParticipantStore) -> Option<ParticipantView> {
    let live = s.live();
    let join = live.joins.values().max_by(|a, b| a.stamp.cmp(&b.stamp))?;
    let flag = |r: &Register| {
        matches!(
            live.registers.get(r).map(|l| &l.value),
            Some(Value::Flag(true))
        )
    };
    let layout = match live.registers.get(&Register::Layout).map(|l| &l.value) {
        Some(Value::Layout(l)) => Some(*l),
        _ => None,
    };
    let attributes = live
        .registers
        .iter()
        .filter_map(|(r, l)| match (r, &l.value) {
            (Register::Attribute(k), Value::Text(Some(v))) => Some((k.clone(), v.clone())),
            _ => None,
        })
        .collect();
    let mut tracks = BTreeMap::new();
    for t in live.tracks.values() {
        let slot = tracks.entry(t.track.clone()).or_insert_with(|| t.clone());
        if t.stamp > slot.stamp {
            *slot = t.clone();
        }
    }
    Some(ParticipantView {
        name: join.name.clone(),
        metadata: join.metadata.clone(),
        audio_muted: flag(&Register::AudioMuted),
        video_muted: flag(&Register::VideoMuted),
        hand_raised: flag(&Register::HandRaised),
        layout,
        attributes,
        tracks: tracks
            .into_iter()
            .map(|(id, t)| {
                (
                    id,
                    TrackView {
                        stream: t.stream,
                        kind: t.kind,
                    },
                )
            })
            .collect(),
    })
}

/// The entries an operation writes.
fn fragment_of(op: &Op) -> Fragment {
    let mut frag = Fragment::default();
    let dot = &op.dot;
    let mut store = ParticipantStore::default();
    match &op.kind {
        OpKind::Join { name, metadata, .. } => {
            store.joins.insert(
                dot.clone(),
                JoinEntry {
                    stamp: op.stamp.clone(),
                    name: name.clone(),
                    metadata: metadata.clone(),
                },
            );
        }
        OpKind::Leave { removed, .. } | OpKind::Unpublish { removed, .. } => {
            for t in removed {
                store.removed.insert(t.clone(), dot.clone());
            }
        }
        OpKind::Set {
            register, value, ..
        } => {
            store.registers.insert(
                register.clone(),
                Lww {
                    stamp: op.stamp.clone(),
                    dot: dot.clone(),
                    value: value.clone(),
                },
            );
        }
        OpKind::Publish {
            track,
            stream,
            kind,
            ..
        } => {
            store.tracks.insert(
                dot.clone(),
                TrackEntry {
                    stamp: op.stamp.clone(),
                    track: track.clone(),
                    stream: stream.clone(),
                    kind: *kind,
                },
            );
        }
        OpKind::React { up, down, .. } => {
            frag.counters.insert(
                dot.replica.clone(),
                CounterEntry {
                    dot: dot.clone(),
                    up: *up,
                    down: *down,
                },
            );
        }
        OpKind::Chat { participant, text } => {
            frag.chat.insert(
                ChatId {
                    stamp: op.stamp.clone(),
                    dot: dot.clone(),
                },
                ChatEntry {
                    participant: participant.clone(),
                    text: text.clone(),
                },
            );
        }
    }
    if !store.is_empty() {
        frag.participants
            .insert(op.kind.participant().clone(), store);
    }
    frag
}

/// What clients see of a room.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RoomView {
    /// Participants present.
    pub participants: BTreeMap<ParticipantId, ParticipantView>,
    /// Chat in total order.
    pub chat: Vec<ChatMessage>,
    /// Reaction counter value.
    pub reactions: i64,
}

/// One participant as clients see it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ParticipantView {
    /// Display name (of the latest join).
    pub name: String,
    /// Metadata (of the latest join).
    pub metadata: String,
    /// Microphone muted.
    pub audio_muted: bool,
    /// Camera off.
    pub video_muted: bool,
    /// Hand raised.
    pub hand_raised: bool,
    /// Preferred layout, if set.
    pub layout: Option<Layout>,
    /// Custom attributes.
    pub attributes: BTreeMap<String, String>,
    /// Published tracks.
    pub tracks: BTreeMap<TrackId, TrackView>,
}

/// One published track as clients see it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TrackView {
    /// WHIP stream.
    pub stream: StreamId,
    /// Audio or video.
    pub kind: TrackKind,
}

/// One chat message as clients see it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ChatMessage {
    /// Its stamp (the order key).
    pub stamp: Hlc,
    /// Author.
    pub participant: ParticipantId,
    /// Text.
    pub text: String,
}
