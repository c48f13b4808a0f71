//! Test support: a fake [`SessionHost`] that records every call, and a
//! deterministic simulated network (virtual clock, seeded loss, duplication,
//! reordering) that runs several nodes' migrators in one thread.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferry_migrator::{Config, Message, MigrationEvent, MigrationPlan, Migrator, SessionHost};
use ferry_proto::api::CutoverMode;
use ferry_proto::state::media::{CachedPacket, IncomingStreamState, PacketCacheState};
use ferry_proto::state::{
    IncomingTrackState, SNAPSHOT_VERSION, SessionSnapshot, WalCachePacket, WalRecord, wal_record,
};
use ferry_proto::{MigrationId, NodeId, SessionId, StreamId};

pub fn node(s: &str) -> NodeId {
    NodeId::new(s).unwrap()
}

pub fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

pub fn mid(s: &str) -> MigrationId {
    MigrationId::new(s).unwrap()
}

/// One call the migrator made on a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Prewarm(String),
    Export(String),
    TakeWal(String),
    Freeze(String),
    Resume(String, u64),
    Release(String, String),
    CancelExport(String),
    Import(String),
    ApplyWal(String),
    InstallFinal(String),
    Activate(String, u64),
    Discard(String),
}

/// Where a fake session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Owns and sends at `epoch`.
    Active(u64),
    /// Frozen on the source.
    Frozen,
    /// Handed over.
    Released,
    /// Prewarmed / installed on the target, sending nothing.
    Inactive,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FakeSession {
    pub state: State,
    pub stream: String,
    pub publisher: bool,
    /// The "packet cache": moves as snapshot + WAL.
    pub cache: Vec<(u64, Vec<u8>)>,
    /// Next SRTP index this session would send with: moves in the final
    /// state.
    pub tx_index: u64,
    /// WAL capture.
    pub capturing: bool,
    pub wal: Vec<WalRecord>,
    pub wal_pos: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

/// An in-memory host: sessions in a map, every call recorded.
#[derive(Debug, Default)]
pub struct FakeHost {
    pub sessions: BTreeMap<SessionId, FakeSession>,
    pub calls: Vec<Call>,
    /// Makes `prewarm` fail.
    pub refuse: bool,
    /// Payload size of a cached packet.
    pub packet_bytes: usize,
}

impl FakeHost {
    pub fn new() -> Self {
        Self {
            packet_bytes: 1000,
            ..Self::default()
        }
    }

    /// A session owned here at `epoch` with `cached` packets already cached.
    pub fn add_session(&mut self, id: &str, epoch: u64, cached: u64) {
        let mut s = FakeSession {
            state: State::Active(epoch),
            stream: format!("stream-{id}"),
            publisher: true,
            cache: Vec::new(),
            tx_index: 1,
            capturing: false,
            wal: Vec::new(),
            wal_pos: 0,
        };
        for i in 0..cached {
            s.cache.push((i, vec![i as u8; self.packet_bytes]));
        }
        self.sessions.insert(sid(id), s);
    }

    /// Media flow: each active session caches one packet and sends one
    /// (with its next SRTP index, logged in `sent`).
    pub fn tick(&mut self, node: &NodeId, sent: &mut Vec<(String, NodeId, u64)>) {
        let bytes = self.packet_bytes;
        for (id, s) in &mut self.sessions {
            if !matches!(s.state, State::Active(_)) {
                continue;
            }
            let seq = s.cache.last().map_or(0, |(q, _)| q + 1);
            let data = vec![(seq % 251) as u8; bytes];
            s.cache.push((seq, data.clone()));
            if s.capturing {
                s.wal_pos += 1;
                s.wal.push(WalRecord {
                    position: s.wal_pos,
                    change: Some(wal_record::Change::CachePacket(WalCachePacket {
                        track: 0,
                        ssrc: 1,
                        ext_seq: seq,
                        data,
                    })),
                });
            }
            sent.push((id.as_str().to_owned(), node.clone(), s.tx_index));
            s.tx_index += 1;
        }
    }

    /// Calls with consecutive repeats of `TakeWal`/`ApplyWal` folded into one.
    pub fn folded_calls(&self) -> Vec<Call> {
        let mut out: Vec<Call> = Vec::new();
        for c in &self.calls {
            let repeat = matches!(c, Call::TakeWal(_) | Call::ApplyWal(_)) && out.last() == Some(c);
            if !repeat {
                out.push(c.clone());
            }
        }
        out
    }

    fn get(&mut self, session: &SessionId) -> Result<&mut FakeSession, HostError> {
        self.sessions
            .get_mut(session)
            .ok_or_else(|| HostError(format!("no session {session}")))
    }

    fn snapshot_of(id: &SessionId, s: &FakeSession, with_cache: bool) -> SessionSnapshot {
        let packets = if with_cache {
            s.cache
                .iter()
                .map(|(q, d)| CachedPacket {
                    ext_seq: *q,
                    data: d.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        SessionSnapshot {
            version: SNAPSHOT_VERSION,
            session_id: id.as_str().to_owned(),
            stream: s.stream.clone(),
            publisher: s.publisher,
            incoming: vec![IncomingTrackState {
                index: 0,
                streams: vec![IncomingStreamState {
                    ssrc: 1,
                    cache: Some(PacketCacheState {
                        capacity: 4096,
                        packets,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            // The fake's final state: where the SRTP index is.
            remb_bps: s.tx_index,
            ..Default::default()
        }
    }
}

impl SessionHost for FakeHost {
    type Error = HostError;

    fn prewarm(
        &mut self,
        _now: Instant,
        session: &SessionId,
        stream: &StreamId,
        publisher: bool,
    ) -> Result<(), HostError> {
        self.calls.push(Call::Prewarm(session.to_string()));
        if self.refuse || self.sessions.contains_key(session) {
            return Err(HostError("no room".into()));
        }
        self.sessions.insert(
            session.clone(),
            FakeSession {
                state: State::Inactive,
                stream: stream.to_string(),
                publisher,
                cache: Vec::new(),
                tx_index: 0,
                capturing: false,
                wal: Vec::new(),
                wal_pos: 0,
            },
        );
        Ok(())
    }

    fn export_snapshot(
        &mut self,
        _now: Instant,
        session: &SessionId,
    ) -> Result<SessionSnapshot, HostError> {
        self.calls.push(Call::Export(session.to_string()));
        let s = self.get(session)?;
        s.capturing = true;
        s.wal.clear();
        s.wal_pos = 0;
        let s = s.clone();
        Ok(Self::snapshot_of(session, &s, true))
    }

    fn take_wal(&mut self, session: &SessionId) -> Result<Vec<WalRecord>, HostError> {
        self.calls.push(Call::TakeWal(session.to_string()));
        Ok(std::mem::take(&mut self.get(session)?.wal))
    }

    fn freeze(
        &mut self,
        _now: Instant,
        session: &SessionId,
    ) -> Result<(SessionSnapshot, Vec<WalRecord>), HostError> {
        self.calls.push(Call::Freeze(session.to_string()));
        let s = self.get(session)?;
        s.state = State::Frozen;
        s.capturing = false;
        let last = std::mem::take(&mut s.wal);
        let s = s.clone();
        Ok((Self::snapshot_of(session, &s, false), last))
    }

    fn resume(&mut self, _now: Instant, session: &SessionId, epoch: u64) -> Result<(), HostError> {
        self.calls.push(Call::Resume(session.to_string(), epoch));
        let s = self.get(session)?;
        s.state = State::Active(epoch);
        Ok(())
    }

    fn release(
        &mut self,
        _now: Instant,
        session: &SessionId,
        target: &NodeId,
    ) -> Result<(), HostError> {
        self.calls
            .push(Call::Release(session.to_string(), target.to_string()));
        self.get(session)?.state = State::Released;
        Ok(())
    }

    fn cancel_export(&mut self, _now: Instant, session: &SessionId) {
        self.calls.push(Call::CancelExport(session.to_string()));
        if let Ok(s) = self.get(session) {
            s.capturing = false;
            s.wal.clear();
        }
    }

    fn import_snapshot(
        &mut self,
        _now: Instant,
        snapshot: SessionSnapshot,
    ) -> Result<(), HostError> {
        self.calls.push(Call::Import(snapshot.session_id.clone()));
        let id = sid(&snapshot.session_id);
        let s = self.get(&id)?;
        s.cache = snapshot
            .incoming
            .first()
            .and_then(|t| t.streams.first())
            .and_then(|st| st.cache.as_ref())
            .map(|c| {
                c.packets
                    .iter()
                    .map(|p| (p.ext_seq, p.data.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(())
    }

    fn apply_wal(
        &mut self,
        _now: Instant,
        session: &SessionId,
        records: &[WalRecord],
    ) -> Result<(), HostError> {
        self.calls.push(Call::ApplyWal(session.to_string()));
        let s = self.get(session)?;
        for r in records {
            if r.position <= s.wal_pos {
                continue;
            }
            assert_eq!(r.position, s.wal_pos + 1, "apply_wal got a gap");
            s.wal_pos = r.position;
            if let Some(wal_record::Change::CachePacket(p)) = &r.change {
                s.cache.push((p.ext_seq, p.data.clone()));
            }
        }
        Ok(())
    }

    fn install_final(
        &mut self,
        _now: Instant,
        final_state: SessionSnapshot,
    ) -> Result<(), HostError> {
        self.calls
            .push(Call::InstallFinal(final_state.session_id.clone()));
        let s = self.get(&sid(&final_state.session_id))?;
        s.tx_index = final_state.remb_bps;
        Ok(())
    }

    fn activate(
        &mut self,
        _now: Instant,
        session: &SessionId,
        epoch: u64,
    ) -> Result<(), HostError> {
        self.calls.push(Call::Activate(session.to_string(), epoch));
        self.get(session)?.state = State::Active(epoch);
        Ok(())
    }

    fn discard(&mut self, _now: Instant, session: &SessionId) {
        self.calls.push(Call::Discard(session.to_string()));
        self.sessions.remove(session);
    }
}

/// A small deterministic PRNG (SplitMix64): seeds make failures replayable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

pub struct SimNode {
    pub id: NodeId,
    pub migrator: Migrator,
    pub host: FakeHost,
    /// A paused node processes nothing (its messages wait, timers do not
    /// fire); a crashed one loses everything addressed to it.
    pub paused: bool,
    pub crashed: bool,
    pub events: Vec<MigrationEvent>,
}

/// What the network does with one message.
pub enum Verdict {
    Deliver(Message),
    Drop,
}

struct InFlight {
    at: Instant,
    seq: u64,
    from: NodeId,
    to: NodeId,
    msg: Message,
}

pub type Hook = Box<dyn FnMut(&NodeId, &NodeId, Message) -> Verdict>;

/// Several nodes on a simulated network with a virtual clock.
pub struct Sim {
    pub now: Instant,
    pub nodes: Vec<SimNode>,
    queue: Vec<InFlight>,
    seq: u64,
    pub rng: Rng,
    pub latency: Duration,
    pub jitter: Duration,
    pub loss: f64,
    pub dup: f64,
    /// Sees (and may change or drop) every message as it is sent.
    pub hook: Option<Hook>,
    /// Every message delivered, in order, for replays.
    pub delivered: Vec<(NodeId, NodeId, Message)>,
    /// (session, node, SRTP index) of every packet sent.
    pub sent: Vec<(String, NodeId, u64)>,
    pub media_interval: Duration,
    next_media: Instant,
    checked: usize,
    seen: std::collections::HashSet<(String, u64)>,
}

impl Sim {
    pub fn new(seed: u64) -> Self {
        let now = Instant::now();
        Self {
            now,
            nodes: Vec::new(),
            queue: Vec::new(),
            seq: 0,
            rng: Rng::new(seed),
            latency: Duration::from_micros(500),
            jitter: Duration::ZERO,
            loss: 0.0,
            dup: 0.0,
            hook: None,
            delivered: Vec::new(),
            sent: Vec::new(),
            media_interval: Duration::from_millis(1),
            next_media: now,
            checked: 0,
            seen: std::collections::HashSet::new(),
        }
    }

    pub fn add_node(&mut self, name: &str, cfg: Config) -> usize {
        self.nodes.push(SimNode {
            id: node(name),
            migrator: Migrator::new(node(name), cfg),
            host: FakeHost::new(),
            paused: false,
            crashed: false,
            events: Vec::new(),
        });
        self.nodes.len() - 1
    }

    pub fn idx(&self, id: &NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| &n.id == id)
    }

    pub fn plan(
        &self,
        id: &str,
        session: &str,
        from: usize,
        to: usize,
        epoch: u64,
    ) -> MigrationPlan {
        let s = &self.nodes[from].host.sessions[&sid(session)];
        MigrationPlan {
            id: mid(id),
            session: sid(session),
            stream: StreamId::new(s.stream.clone()).unwrap(),
            publisher: s.publisher,
            target: self.nodes[to].id.clone(),
            epoch,
            mode: CutoverMode::Edge,
            trace_parent: String::new(),
        }
    }

    pub fn start(&mut self, at: usize, plan: MigrationPlan) {
        let now = self.now;
        let n = &mut self.nodes[at];
        n.migrator.start(now, &mut n.host, plan).unwrap();
        self.collect();
    }

    /// Moves every node's output into the network and event logs.
    pub fn collect(&mut self) {
        for i in 0..self.nodes.len() {
            while let Some(e) = self.nodes[i].migrator.poll_event() {
                self.nodes[i].events.push(e);
            }
            while let Some((to, msg)) = self.nodes[i].migrator.poll_transmit() {
                let from = self.nodes[i].id.clone();
                self.send(from, to, msg);
            }
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: Message) {
        let msg = match self.hook.as_mut() {
            Some(h) => match h(&from, &to, msg) {
                Verdict::Deliver(m) => m,
                Verdict::Drop => return,
            },
            None => msg,
        };
        if self.rng.chance(self.loss) {
            return;
        }
        let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let jitter = if self.jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_nanos(self.rng.next_u64() % self.jitter.as_nanos() as u64)
            };
            self.seq += 1;
            self.queue.push(InFlight {
                at: self.now + self.latency + jitter,
                seq: self.seq,
                from: from.clone(),
                to: to.clone(),
                msg: msg.clone(),
            });
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        self.nodes
            .iter()
            .filter(|n| !n.paused && !n.crashed)
            .filter_map(|n| n.migrator.poll_timeout())
            .min()
    }

    /// Advances to the next thing that happens and does it. Returns false
    /// when nothing is left but media.
    pub fn step(&mut self) -> bool {
        let msg_at = self
            .queue
            .iter()
            .filter(|m| self.idx(&m.to).is_some_and(|i| !self.nodes[i].paused))
            .map(|m| (m.at, m.seq))
            .min();
        let timer = self.next_timer();
        let mut next = self.next_media;
        if let Some((t, _)) = msg_at {
            next = next.min(t);
        }
        if let Some(t) = timer {
            next = next.min(t);
        }
        self.now = self.now.max(next);
        let now = self.now;
        if next == self.next_media {
            self.next_media += self.media_interval;
            for n in &mut self.nodes {
                if !n.crashed {
                    n.host.tick(&n.id, &mut self.sent);
                }
            }
        }
        if let Some((t, seq)) = msg_at.filter(|(t, _)| *t <= now) {
            let _ = t;
            if let Some(pos) = self.queue.iter().position(|m| m.seq == seq) {
                let m = self.queue.remove(pos);
                if let Some(i) = self.idx(&m.to) {
                    let n = &mut self.nodes[i];
                    if !n.crashed {
                        self.delivered
                            .push((m.from.clone(), m.to.clone(), m.msg.clone()));
                        n.migrator.handle_message(now, &mut n.host, &m.from, m.msg);
                    }
                }
            }
        }
        for n in &mut self.nodes {
            if n.paused || n.crashed {
                continue;
            }
            if n.migrator.poll_timeout().is_some_and(|t| t <= now) {
                n.migrator.handle_timeout(now, &mut n.host);
            }
        }
        self.collect();
        self.check_invariants();
        msg_at.is_some() || timer.is_some()
    }

    /// Runs until `done` holds or `limit` of virtual time passes.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + limit;
        while self.now < end {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }

    /// Runs until no migration is running on any live node.
    pub fn run_to_quiet(&mut self, limit: Duration) -> bool {
        self.run_until(limit, |s| {
            s.nodes
                .iter()
                .filter(|n| !n.crashed)
                .all(|n| n.migrator.running() == 0)
        })
    }

    /// One owner per session at any time, and no SRTP index sent twice.
    pub fn check_invariants(&mut self) {
        let mut owners: BTreeMap<&SessionId, Vec<&NodeId>> = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| !n.crashed) {
            for (id, s) in &n.host.sessions {
                if matches!(s.state, State::Active(_)) {
                    owners.entry(id).or_default().push(&n.id);
                }
            }
        }
        for (id, nodes) in owners {
            assert!(nodes.len() <= 1, "session {id} has two owners: {nodes:?}");
        }
        for (s, n, idx) in &self.sent[self.checked..] {
            assert!(
                self.seen.insert((s.clone(), *idx)),
                "SRTP index {idx} of {s} reused (by {n})"
            );
        }
        self.checked = self.sent.len();
    }

    pub fn finished(&self, i: usize) -> Vec<&ferry_migrator::MigrationReport> {
        self.nodes[i]
            .events
            .iter()
            .filter_map(|e| match e {
                MigrationEvent::Finished(r) => Some(&**r),
                _ => None,
            })
            .collect()
    }

    /// Delivers `msg` from `from` to node `to` right now, bypassing the network.
    pub fn inject(&mut self, from: &NodeId, to: usize, msg: Message) {
        let now = self.now;
        let n = &mut self.nodes[to];
        n.migrator.handle_message(now, &mut n.host, from, msg);
        self.collect();
    }
}
