//! The media node core: every session of one node, the demultiplexing of
//! its single UDP port, and forwarding from publishers to viewers.
//!
//! Drive it like any Ferry core:
//!
//! ```text
//! loop {
//!     node.handle_datagram(now, from, &mut buf[..n]);   // or handle_timeout(now), or a signalling call
//!     while let Some(t) = node.poll_transmit() { socket.send_to(&t.data, t.to); node.recycle(t.data); }
//!     sleep_until(node.poll_timeout());
//! }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::DtlsCertificate;
use ferry_proto::{NodeId, SessionId, StreamId};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::cluster::relay_seal::{RelayOpener, RelaySealer};
use crate::dtls::{self, DtlsRole};
use crate::ice::{IceCredentials, IceEvent};
use crate::media::ingest::KeyframeThrottle;
use crate::nack::NackConfig;
use crate::node::metrics::NodeMetrics;
use crate::node::session::{
    CloseReason, Event, Outbox, Phase, Role, Session, SessionConfig, Transmit,
};
use crate::node::signal::{SessionInfo, SignalError};
use crate::rtp;
use crate::srtp::SrtpError;
use crate::stun::{self, StunMessage};
use crate::time::WallClock;

mod adapting;
pub mod admission;
mod demux;
mod forward;
mod idempotency;
mod migration;
mod moves;
pub mod overload;
mod recording;
mod relay_wait;
mod relaying;
mod signalling;
mod ticket;
mod tunnelling;

pub mod metrics;
pub mod negotiate;
pub mod session;
pub mod signal;

pub use relay_wait::{Answer, RELAY_WAIT, Requested, SUBSCRIBE_RETRY};

pub use idempotency::{IDEMPOTENCY_TTL, MAX_KEY_LEN as MAX_IDEMPOTENCY_KEY_LEN};
pub use migration::MigrateError;
pub use moves::MoveNotice;
pub use recording::{
    AWAIT_LIMIT, RecordingCounters, RecordingError, RecordingInfo, RecordingOutput, RecordingPhase,
};
pub use signal::TicketError;
pub use ticket::{TICKET_TTL, sign_ticket};
pub use tunnelling::FORWARD_GRACE;
use tunnelling::{Forward, Held, Ingress};

/// Largest datagram the node accepts.
pub const MAX_DATAGRAM: usize = 1500;

/// How long a stream whose publisher was lost (not deleted) keeps its viewers and relays for
/// the publisher to come back with its ticket.
pub const PUBLISHER_GRACE: Duration = Duration::from_secs(15);

/// Settings of one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node.
    pub node_id: NodeId,
    /// Host candidates announced in answers (the media socket's addresses).
    pub candidates: Vec<SocketAddr>,
    /// Seed of all the core's randomness (ICE credentials, ids, SSRCs,
    /// initial sequence numbers). The driver draws it from the OS.
    pub seed: [u8; 32],
    /// Seed DTLS from `seed` too (simulations only: in production DTLS draws
    /// its own secrets).
    pub deterministic_dtls: bool,
    /// Wall clock mapping for NTP timestamps.
    pub wall: WallClock,
    /// Sessions the node accepts before answering 503.
    pub max_sessions: usize,
    /// NACK pacing towards publishers.
    pub nack: NackConfig,
    /// Packets cached per published stream for retransmission.
    pub nack_cache: usize,
    /// Least time between keyframe requests of a stream upstream.
    pub pli_throttle: KeyframeThrottle,
    /// REMB bounds towards publishers.
    pub remb_min_bps: u64,
    /// REMB upper bound.
    pub remb_max_bps: u64,
    /// Key authenticating relay and migration traffic between nodes (`None`:
    /// this node neither relays nor receives relays).
    pub cluster_key: Option<crate::cluster::relay::ClusterKey>,
    /// Where other nodes reach this one (relay, forwarding); default: the
    /// first candidate.
    pub cluster_addr: Option<SocketAddr>,
    /// The edge this node's clients reach it through (`None`: directly). The
    /// candidates are then the edge's public address.
    pub edge: Option<SocketAddr>,
    /// Shedding video viewers' frames when the node cannot keep up ([`overload`]).
    pub overload: overload::OverloadConfig,
    /// Nodes a published stream is relayed to directly; the next subscriber is sent on to one
    /// of them, which relays it on (a tree of depth 2). 0: no limit.
    pub relay_fanout: usize,
    /// Per-viewer adaptation ([`crate::media::adapt`]): each viewer gets the simulcast layers its link
    /// carries. Off, every viewer gets each track's top layer whatever its link (what the node
    /// did before; a benchmark's baseline).
    pub adaptive: bool,
}

/// Default [`NodeConfig::relay_fanout`]: 32 relay links out of the origin (32 × 4 Mbit/s of a
/// camera stream), 32 × 32 nodes two levels down.
pub const RELAY_FANOUT: usize = 32;

impl NodeConfig {
    /// Defaults for everything but identity, addresses, seed and clock.
    pub fn new(
        node_id: NodeId,
        candidates: Vec<SocketAddr>,
        seed: [u8; 32],
        wall: WallClock,
    ) -> Self {
        Self {
            node_id,
            candidates,
            seed,
            deterministic_dtls: false,
            wall,
            max_sessions: 2000,
            nack: NackConfig::default(),
            nack_cache: 1000,
            pli_throttle: KeyframeThrottle {
                switch: Duration::from_millis(300),
                repair: Duration::from_millis(1000),
            },
            remb_min_bps: 150_000,
            remb_max_bps: 3_000_000,
            cluster_key: None,
            cluster_addr: None,
            edge: None,
            overload: overload::OverloadConfig::default(),
            relay_fanout: RELAY_FANOUT,
            adaptive: true,
        }
    }
}

#[derive(Debug, Default)]
struct StreamEntry {
    /// The local publisher session.
    publisher: Option<usize>,
    /// Or the node it is relayed from.
    relay_in: Option<crate::cluster::relay::RelayIn>,
    /// The relay it came in on before its publisher moved here, and until when what the old
    /// origin relayed before the move is still taken (set at the first relay tick after it;
    /// [`crate::cluster::relay::RELAY_DRAIN`]).
    relay_draining: Option<(crate::cluster::relay::RelayIn, Option<Instant>)>,
    viewers: Vec<usize>,
    /// Nodes this stream is relayed to.
    relay_out: Vec<crate::cluster::relay::RelayOut>,
    /// Subscribers sent one level down lately: (subscriber, sent to, when).
    sent_down: Vec<(SocketAddr, SocketAddr, Instant)>,
    /// Its publisher went away without ending the stream (its client may reconnect with its
    /// ticket): viewers and relays wait until then.
    orphaned_until: Option<Instant>,
    /// Keyframes of its video seen so far: the GOP number that decides which viewers an
    /// overloaded node sheds ([`overload`]).
    gop: u64,
    /// While viewers are shed: when to ask for the next keyframe (the shed set rotates).
    next_rotation: Option<Instant>,
    /// What each track (by publisher m-line) offers: its layers and their rates.
    layers: Vec<crate::media::adapt::layers::SourceLayers>,
    /// Dynacast: the simulcast encodings of a local publisher and whether it was told to send
    /// them ([`Node::dynacast`]).
    encodings: Vec<crate::media::adapt::layers::Encoding>,
    /// Per RTP stream (m-line, SSRC): the dependency descriptor structure in force, and when
    /// the stream last carried a descriptor. Each simulcast encoding has its own structure
    /// and frame numbers.
    dd: BTreeMap<(usize, u32), DdStream>,
}

/// One RTP stream's dependency descriptors as this node reads them.
#[derive(Debug)]
struct DdStream {
    /// When it last carried one.
    seen: Instant,
    tracker: crate::codec::layers::Av1DdTracker,
    /// A keyframe came with no structure to read the descriptors by: its sender attaches none
    /// (against the spec), and asking it for keyframes would not bring one.
    keyframe_without_structure: bool,
}

/// The RTP streams of a stream whose dependency descriptors are tracked at once (each
/// simulcast encoding of each track is one).
const MAX_DD_STREAMS: usize = 16;

impl StreamEntry {
    /// The layers of track `line` (made on first use; a publisher has a few m-lines).
    fn layers_mut(&mut self, line: usize) -> &mut crate::media::adapt::layers::SourceLayers {
        if self.layers.len() <= line {
            self.layers.resize_with(
                line.min(63) + 1,
                crate::media::adapt::layers::SourceLayers::default,
            );
        }
        let last = self.layers.len() - 1;
        &mut self.layers[line.min(last)]
    }

    /// The layers of a scalable stream's packet `pkt` of track `line`: from the dependency
    /// descriptor (extension id `dd_ext`) where the packet carries one — AV1 always; VP8,
    /// whose payload descriptor Chromium leaves bare (no picture id, no temporal layer) once the
    /// descriptor is negotiated; H.264, whose payload says nothing of layers (an `L1T3` encoding's
    /// temporal layers are only there) — else VP9 from its payload descriptor and VP8 when its
    /// payload descriptor carries temporal layers; `None` for a stream without layers. `Err` when the
    /// packet carries a descriptor this node cannot read yet, for want of the structure (a
    /// relay that started between two keyframes): its layers are unknown until a keyframe —
    /// unless a keyframe (`keyframe`: the packet starts one) came without one already.
    fn layer_info(
        &mut self,
        now: Instant,
        keyframe: bool,
        line: usize,
        codec: crate::codec::Codec,
        dd_ext: Option<u8>,
        pkt: &[u8],
    ) -> Result<Option<crate::codec::layers::LayerInfo>, crate::codec::av1::DdError> {
        use crate::codec::{Codec, layers};
        let Ok(h) = crate::rtp::RtpHeader::parse(pkt) else {
            return Ok(None);
        };
        // AV1, VP8 and H.264 read their layers from the descriptor (one lookup per packet);
        // VP9's payload descriptor says all of it.
        let dd = match codec {
            Codec::Av1 | Codec::Vp8 | Codec::H264 => {
                dd_ext.and_then(|id| h.find_extension(pkt, id))
            }
            _ => None,
        };
        Ok(match (codec, dd) {
            (_, Some(ext)) => {
                let key = (line, h.ssrc);
                if self.dd.len() >= MAX_DD_STREAMS
                    && !self.dd.contains_key(&key)
                    && let Some(stale) = self.dd.iter().min_by_key(|(_, s)| s.seen).map(|(k, _)| *k)
                {
                    // A publisher that restarted its encoders many times: the longest silent
                    // stream goes.
                    self.dd.remove(&stale);
                }
                let s = self.dd.entry(key).or_insert_with(|| DdStream {
                    seen: now,
                    tracker: crate::codec::layers::Av1DdTracker::default(),
                    keyframe_without_structure: false,
                });
                s.seen = now;
                match s.tracker.read(ext, h.marker) {
                    Ok((_, info)) => Some(info),
                    Err(crate::codec::av1::DdError::NoStructure) => {
                        s.keyframe_without_structure |= keyframe;
                        if !s.keyframe_without_structure {
                            return Err(crate::codec::av1::DdError::NoStructure);
                        }
                        None
                    }
                    Err(_) => None,
                }
            }
            (Codec::Vp8, None) => {
                let payload = h.payload(pkt);
                crate::codec::vp8_descriptor(payload)
                    .and_then(|d| d.temporal)
                    .and_then(|_| layers::vp8_layer_info(payload, h.marker))
            }
            (Codec::Vp9, None) => layers::vp9_layer_info(h.payload(pkt), h.marker),
            (Codec::Av1 | Codec::Opus | Codec::H264, None) => None,
        })
    }

    /// Notes the picture sizes a keyframe of stream `ssrc` of track `line` says (VP8's frame
    /// header, H.264's SPS, VP9's scalability structure, AV1's dependency descriptor).
    fn note_sizes(&mut self, line: usize, codec: crate::codec::Codec, ssrc: u32, pkt: &[u8]) {
        use crate::codec::{Codec, dims};
        let Ok(h) = crate::rtp::RtpHeader::parse(pkt) else {
            return;
        };
        let payload = h.payload(pkt);
        let sizes = match codec {
            Codec::Vp8 => dims::vp8_size(payload).map(|s| (s, None)),
            Codec::H264 => dims::h264_size(payload).map(|s| (s, None)),
            Codec::Vp9 => dims::vp9_size(payload).and_then(|l| {
                let top = l.iter().last().map(|(_, s)| s)?;
                Some((top, Some(l)))
            }),
            Codec::Av1 => {
                let structure = self
                    .dd
                    .get(&(line, ssrc))
                    .and_then(|s| s.tracker.structure());
                let layers = structure.and_then(dims::dd_sizes);
                match (layers, dims::av1_size(payload)) {
                    (Some(l), top) => l
                        .iter()
                        .last()
                        .map(|(_, s)| s)
                        .or(top)
                        .map(|t| (t, Some(l))),
                    (None, Some(top)) => Some((top, None)),
                    (None, None) => None,
                }
            }
            Codec::Opus => None,
        };
        let Some((top, per_layer)) = sizes else {
            return;
        };
        let layers = self.layers_mut(line);
        layers.set_size(ssrc, top);
        if let Some(l) = per_layer {
            for (sid, size) in l.iter() {
                layers.set_spatial_size(ssrc, sid, size);
            }
        }
    }

    fn unused(&self) -> bool {
        self.publisher.is_none()
            && self.relay_in.is_none()
            && self.viewers.is_empty()
            && self.relay_out.is_empty()
            // Waiting for its lost publisher (for a recording, say).
            && self.orphaned_until.is_none()
    }
}

/// One media node.
#[derive(Debug)]
pub struct Node {
    config: NodeConfig,
    scfg: SessionConfig,
    cert: Arc<DtlsCertificate>,
    fingerprint: [u8; 32],
    rng: ChaCha20Rng,
    /// The DTLS engine configuration every session shares (building one
    /// costs ~7 ms: once per node, not once per session or migration).
    dtls_shared: Option<Arc<crate::dtls::DtlsConfig>>,
    sessions: Vec<Option<Session>>,
    free: Vec<usize>,
    by_id: HashMap<SessionId, usize>,
    /// The node's session limit, shared with its other cores; this core's slot in it.
    admission: Arc<admission::Admission>,
    core: usize,
    by_ufrag: demux::ByUfrag<usize>,
    by_addr: demux::ByAddr<usize>,
    streams: HashMap<StreamId, StreamEntry>,
    out: Outbox,
    next_timeout: Option<Instant>,
    epoch: Instant,
    relay_ids: HashMap<u32, StreamId>,
    next_relay_tick: Instant,
    /// Path of the datagram being processed.
    ingress: Ingress,
    /// Datagrams of inactive (frozen or imported) sessions, by session key.
    held: HashMap<usize, Vec<Held>>,
    /// Forwarding pointers of sessions that moved away, by ICE ufrag.
    forwards: demux::ByUfrag<Forward>,
    /// Client address → ufrag of a forwarding pointer.
    forward_addrs: demux::ByAddr<String>,
    /// Streams whose publisher moved away: the new origin, until when.
    moved_streams: HashMap<StreamId, (SocketAddr, Instant)>,
    /// Where the directory last said each stream elsewhere is published (a relaying node
    /// sends its subscribers there when it stops).
    origins: HashMap<StreamId, SocketAddr>,
    /// Other nodes' cluster addresses.
    peers: HashMap<NodeId, SocketAddr>,
    /// Peers' HTTP base URLs (where clients of sessions that moved go).
    peer_http: HashMap<NodeId, String>,
    /// Outgoing migrations, as their clients will be told.
    planned_moves: HashMap<SessionId, moves::Planned>,
    /// Sessions that left: their URL on the node they went to.
    moved: moves::MovedSessions,
    /// Imported sessions waiting for activation: what they take over.
    imports: HashMap<usize, migration::Takeover>,
    /// Next repeat of pending edge claims.
    next_claim: Instant,
    /// Ticket generations used here: session → (highest generation, until when, Unix s).
    used_tickets: HashMap<SessionId, (u32, u64)>,
    /// Answers by `Idempotency-Key`, for retried POSTs.
    idempotent: idempotency::Cache,
    /// The latest time the node was driven at (for what a call without `now` schedules).
    last_now: Instant,
    /// Sessions resumed with a ticket while their old transport still works: new key → old
    /// key. The old one carries on until the new one carries media (make before break).
    replacing: HashMap<usize, usize>,
    /// Queueing delay → share of video viewers shed.
    overload: overload::Overload,
    /// Recordings of streams live here.
    recordings: recording::Recordings,
    /// Viewers waiting for their stream's relay.
    waiting: relay_wait::Waiting,
    /// Seals the relay datagrams this core sends (with the cluster key).
    relay_sealer: Option<RelaySealer>,
    /// Checks the relay datagrams this core receives.
    relay_opener: Option<RelayOpener>,
}

/// The relay sender id of the core seeded with `seed` ([`RelaySealer`]): each core's seed is
/// its own, so is its id.
fn relay_sender_id(seed: &[u8; 32]) -> u64 {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(b"ferry relay sender\0");
    h.update(seed);
    let d = h.finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    u64::from_be_bytes(id)
}

fn random_token(rng: &mut ChaCha20Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..len)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

impl Node {
    /// A node with no sessions.
    pub fn new(config: NodeConfig, cert: Arc<DtlsCertificate>, now: Instant) -> Self {
        let scfg = SessionConfig {
            nack: config.nack,
            cache: config.nack_cache,
            pli_throttle: config.pli_throttle,
            remb_min_bps: config.remb_min_bps,
            remb_max_bps: config.remb_max_bps,
        };
        let relay_sealer = config
            .cluster_key
            .as_ref()
            .map(|k| RelaySealer::new(&k.seal_keys(), relay_sender_id(&config.seed)));
        let relay_opener = config
            .cluster_key
            .as_ref()
            .map(|k| RelayOpener::new(k.seal_keys()));
        Self {
            relay_sealer,
            relay_opener,
            admission: Arc::new(admission::Admission::new(config.max_sessions, 1)),
            core: 0,
            overload: overload::Overload::new(config.overload),
            rng: ChaCha20Rng::from_seed(config.seed),
            dtls_shared: (!config.deterministic_dtls).then(|| dtls::engine_config(None)),
            fingerprint: crate::cert::fingerprint(&cert.certificate),
            cert,
            config,
            scfg,
            sessions: Vec::new(),
            free: Vec::new(),
            by_id: HashMap::new(),
            by_ufrag: Default::default(),
            by_addr: Default::default(),
            streams: HashMap::new(),
            out: Outbox::default(),
            next_timeout: None,
            epoch: now,
            relay_ids: HashMap::new(),
            next_relay_tick: now + crate::cluster::relay::REFRESH,
            ingress: Ingress::Direct,
            held: HashMap::new(),
            forwards: Default::default(),
            forward_addrs: Default::default(),
            moved_streams: HashMap::new(),
            origins: HashMap::new(),
            peers: HashMap::new(),
            peer_http: HashMap::new(),
            planned_moves: HashMap::new(),
            moved: Default::default(),
            imports: HashMap::new(),
            next_claim: now,
            used_tickets: HashMap::new(),
            idempotent: idempotency::Cache::default(),
            last_now: now,
            replacing: HashMap::new(),
            recordings: recording::Recordings::default(),
            waiting: relay_wait::Waiting::default(),
        }
    }

    /// From now on, announces every client address and ICE ufrag this core starts or stops
    /// owning ([`Node::take_route_changes`]): the core is one shard of a node whose workers
    /// share a socket, and the driver's router sends each datagram to the shard that owns it.
    pub fn announce_routes(&mut self) {
        self.by_ufrag.announce();
        self.forwards.announce();
        self.by_addr.announce();
        self.forward_addrs.announce();
    }

    /// The ownership changes since the last call (none unless [`Node::announce_routes`]).
    pub fn take_route_changes(&mut self, out: &mut Vec<crate::cluster::shards::RouteChange>) {
        use crate::cluster::shards::RouteChange;
        self.by_ufrag.take_changes(out, RouteChange::Ufrag);
        self.forwards.take_changes(out, RouteChange::Ufrag);
        self.by_addr.take_changes(out, RouteChange::Addr);
        self.forward_addrs.take_changes(out, RouteChange::Addr);
    }

    /// Where other nodes reach this one.
    pub fn cluster_addr(&self) -> Option<SocketAddr> {
        self.config
            .cluster_addr
            .or_else(|| self.config.candidates.first().copied())
    }

    /// Puts the node behind an edge (`None`: clients reach it directly) and
    /// sets where other nodes reach it.
    pub fn set_edge(&mut self, edge: Option<SocketAddr>, cluster_addr: Option<SocketAddr>) {
        self.config.edge = edge;
        self.config.cluster_addr = cluster_addr;
    }

    /// Records another node's cluster address (migration targets, relays).
    pub fn set_peer(&mut self, node: NodeId, addr: SocketAddr) {
        self.peers.insert(node, addr);
    }

    /// Whether `node`'s cluster address is known.
    pub fn has_peer(&self, node: &NodeId) -> bool {
        self.peers.contains_key(node)
    }

    /// This node's id.
    pub fn id(&self) -> &NodeId {
        &self.config.node_id
    }

    /// Sets the host candidates announced from now on.
    pub fn set_candidates(&mut self, candidates: Vec<SocketAddr>) {
        self.config.candidates = candidates;
    }

    /// Counters.
    pub fn metrics(&self) -> &NodeMetrics {
        &self.out.metrics
    }

    /// Counters, for the driver's own.
    pub fn metrics_mut(&mut self) -> &mut NodeMetrics {
        &mut self.out.metrics
    }

    /// The datagram about to be handled at `now` waited `lag` in the socket's receive buffer
    /// (the kernel's stamp): the overload controller's input.
    pub fn note_ingress_lag(&mut self, now: Instant, lag: Duration) {
        self.overload.note(now, lag);
    }

    /// Retunes the overload controller (a zero target turns shedding off).
    pub fn set_overload_config(&mut self, cfg: overload::OverloadConfig) {
        self.config.overload = cfg;
        self.overload = overload::Overload::new(cfg);
    }

    /// The overload controller (its shed ratio and last measured delay).
    pub fn overload(&self) -> &overload::Overload {
        &self.overload
    }

    /// `/metrics` gauges of the overload controller.
    pub fn overload_prometheus(&self) -> String {
        overload::prometheus(self.overload.lag(), self.overload.ratio())
    }

    /// Next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        loop {
            let t = self.out.queue.pop_front()?;
            if t.via.is_none() {
                return Some(t);
            }
            if let Some(t) = self.wrap(t) {
                return Some(t);
            }
        }
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }

    /// Hands a sent buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.out.recycle(buf);
    }

    /// When to call [`Node::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timeout
    }

    /// Sessions on this node.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        // A session being replaced by its client's new transport is listed once, as the new.
        self.sessions
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.as_ref().filter(|s| self.by_id.get(&s.id) == Some(&k)))
            .map(Session::info)
            .collect()
    }

    /// Sessions here (a session being replaced by its client's new transport counts once).
    pub fn session_count(&self) -> usize {
        self.by_id.len()
    }

    /// Sessions this node takes (all its cores together).
    pub fn max_sessions(&self) -> usize {
        self.admission.max()
    }

    /// Makes this core core `core` of a node whose cores share `admission`'s session limit
    /// (`--workers N`); what it holds so far is counted there.
    pub fn share_admission(&mut self, admission: Arc<admission::Admission>, core: usize) {
        self.admission = admission;
        self.core = core;
        self.note_held();
    }

    /// Tells the node's other cores how many sessions this one holds now.
    fn note_held(&self) {
        self.admission.set(self.core, self.by_id.len());
    }

    /// A session by id (tests and diagnostics).
    pub fn session(&self, id: &SessionId) -> Option<&Session> {
        self.by_id.get(id).and_then(|&k| self.sessions[k].as_ref())
    }

    fn dtls_config(&mut self) -> Arc<crate::dtls::DtlsConfig> {
        match &self.dtls_shared {
            Some(shared) => shared.clone(),
            // Simulations: each session's handshake randomness from the seed.
            None => dtls::engine_config(Some(self.rng.random::<u64>())),
        }
    }

    fn note_deadline(&mut self, key: usize) {
        let t = self.sessions[key]
            .as_ref()
            .and_then(|s| s.poll_timeout(&self.scfg));
        if let Some(t) = t {
            self.next_timeout = Some(self.next_timeout.map_or(t, |n| n.min(t)));
        }
    }

    fn insert(&mut self, session: Session) -> usize {
        // A moved session is no longer forwarded from here.
        self.drop_forward(&session.ice.local().ufrag);
        let key = self.insert_detached(session);
        self.attach(key);
        key
    }

    /// Forgets the forwarding pointer of session `ufrag` (it runs here now).
    fn drop_forward(&mut self, ufrag: &str) {
        if let Some(f) = self.forwards.remove(&ufrag.to_owned()) {
            self.forward_addrs.retain(|_, u| *u != f.ufrag);
        }
    }

    /// Adds a session to the indexes but not to its stream: it neither
    /// receives forwarded media nor feeds viewers. A forwarding pointer for it stays (an
    /// imported session comes back, and until it is activated its source still reaches the
    /// client through the pointer).
    fn insert_detached(&mut self, session: Session) -> usize {
        let key = match self.free.pop() {
            Some(k) => k,
            None => {
                self.sessions.push(None);
                self.sessions.len() - 1
            }
        };
        self.by_id.insert(session.id.clone(), key);
        self.note_held();
        self.by_ufrag.insert(session.ice.local().ufrag.clone(), key);
        if let Some(addr) = session.ice.selected() {
            self.by_addr.insert(addr, key);
        }
        self.sessions[key] = Some(session);
        self.out.metrics.sessions_created += 1;
        self.note_deadline(key);
        key
    }

    /// Makes a session part of its stream: a publisher feeds it, a viewer
    /// is fed by it.
    fn attach(&mut self, key: usize) {
        let Some(session) = self.sessions[key].as_ref() else {
            return;
        };
        let stream = session.stream.clone();
        let publisher = matches!(session.role, Role::Publisher(_));
        let entry = self.streams.entry(stream.clone()).or_default();
        if publisher {
            entry.orphaned_until = None;
        }
        let mut unsubscribe = None;
        if publisher {
            entry.publisher = Some(key);
            // Published here now: stop relaying it in. What the old origin relayed before the
            // publisher moved may still come (in flight, or not read yet): it is taken a while.
            if let Some(r) = entry.relay_in.take() {
                unsubscribe = Some(r.origin);
                entry.relay_draining = Some((r, None));
            }
        } else if !entry.viewers.contains(&key) {
            entry.viewers.push(key);
        }
        self.moved_streams.remove(&stream);
        if let Some(origin) = unsubscribe {
            self.unsubscribe_relay(&stream, origin);
        }
        // A viewer that arrives (a new one, one that migrated in) maps the source's header
        // extensions; a publisher that arrives (moved, reconnected) may number them anew.
        self.map_source_extensions(&stream, (!publisher).then_some(key));
    }

    /// Points the header-extension maps of `stream`'s viewers (`only` that one) at its
    /// source's numbering (the publisher's here, or the relay's). Without it an extension the
    /// viewer negotiated goes out as padding: after a migration a viewer lost the dependency
    /// descriptor, and Chromium, which had framed the stream by it, decoded nothing until a
    /// keyframe.
    pub(super) fn map_source_extensions(&mut self, stream: &StreamId, only: Option<usize>) {
        let Some(sources) = self.source_lines(stream) else {
            return;
        };
        let viewers: Vec<usize> = match only {
            Some(k) => vec![k],
            None => self
                .streams
                .get(stream)
                .map(|e| e.viewers.clone())
                .unwrap_or_default(),
        };
        for k in viewers {
            if let Some(Role::Viewer(tracks)) = self.sessions[k].as_mut().map(|s| &mut s.role) {
                for t in tracks.iter_mut() {
                    if let Some(src) = t.source().and_then(|i| sources.get(i)) {
                        t.set_source_extmap(&src.extmap);
                    }
                }
            }
        }
    }

    fn new_local_ice(&mut self) -> IceCredentials {
        IceCredentials {
            ufrag: random_token(&mut self.rng, 8),
            pwd: random_token(&mut self.rng, 24),
        }
    }

    /// Whether the node (all its cores) takes one more session.
    fn check_capacity(&self) -> Result<(), SignalError> {
        if !self.admission.admits(self.core, self.by_id.len()) {
            return Err(SignalError::Full);
        }
        Ok(())
    }

    fn reject<T>(&mut self, e: SignalError) -> Result<T, SignalError> {
        self.out.metrics.signal_rejected += 1;
        Err(e)
    }

    fn close(&mut self, key: usize, reason: CloseReason) {
        let Some(mut session) = self.sessions[key].take() else {
            return;
        };
        session.say_goodbye(&mut self.out);
        self.held.remove(&key);
        self.imports.remove(&key);
        self.free.push(key);
        if self.by_id.get(&session.id) == Some(&key) {
            self.by_id.remove(&session.id);
            self.note_held();
        }
        self.replacing.retain(|new, old| *new != key && *old != key);
        self.by_ufrag.remove(&session.ice.local().ufrag);
        self.by_addr.retain(|_, k| *k != key);
        self.out.metrics.sessions_closed += 1;
        if reason == CloseReason::ConsentExpired {
            self.out.metrics.consent_expired += 1;
        }
        self.out
            .events
            .push_back(Event::Closed(session.id.clone(), reason));
        let mut orphans = Vec::new();
        let mut gone_downstream = Vec::new();
        let mut ended_stream = false;
        if let Some(entry) = self.streams.get_mut(&session.stream) {
            match session.role {
                // A publisher replaced by its own reconnection leaves its viewers to the new one.
                Role::Publisher(_) if entry.publisher == Some(key) => {
                    entry.publisher = None;
                    // A recording waits for the publisher as viewers do.
                    let recorded = self.recordings.records(&session.stream);
                    let watched =
                        !entry.viewers.is_empty() || !entry.relay_out.is_empty() || recorded;
                    if reason == CloseReason::Deleted || !watched {
                        orphans = std::mem::take(&mut entry.viewers);
                        gone_downstream = std::mem::take(&mut entry.relay_out);
                        ended_stream = true;
                    } else {
                        // Lost, not ended: its client may come back with its ticket (a new
                        // transport, here or elsewhere) within the grace period.
                        let until = self.last_now + PUBLISHER_GRACE;
                        entry.orphaned_until = Some(until);
                        self.next_timeout = Some(self.next_timeout.map_or(until, |n| n.min(until)));
                    }
                }
                Role::Publisher(_) => {}
                Role::Viewer(_) => entry.viewers.retain(|k| *k != key),
            }
            if entry.unused() {
                self.streams.remove(&session.stream);
            }
        }
        if ended_stream {
            let now = self.last_now;
            self.end_recordings_of(now, &session.stream);
        }
        for r in gone_downstream {
            self.send_offer(&session.stream, r.addr, false);
        }
        for v in orphans {
            self.close(v, CloseReason::PublisherGone);
        }
    }

    /// Feeds one received datagram (processed in place).
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        self.last_now = now;
        let m = &mut self.out.metrics;
        m.rx_datagrams += 1;
        m.rx_bytes += data.len() as u64;
        if data.len() > MAX_DATAGRAM {
            m.dropped_oversize += 1;
            return;
        }
        match data.first() {
            Some(&crate::cluster::relay::MEDIA) => self.handle_relay_media(now, from, data),
            Some(&crate::cluster::relay::CONTROL) => self.handle_relay_control(now, from, data),
            Some(&crate::cluster::tunnel::TUNNEL) => self.handle_tunnel(now, from, data),
            _ => {
                self.ingress = Ingress::Direct;
                self.handle_client(now, from, data);
            }
        }
    }

    /// A datagram from a client (directly, or out of a tunnel).
    fn handle_client(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        match data.first() {
            Some(0..=3) => self.handle_stun(now, from, data),
            Some(20..=63) => self.handle_dtls(now, from, data),
            Some(128..=191) => self.handle_srtp(now, from, data),
            _ => self.out.metrics.dropped_unknown_protocol += 1,
        }
    }

    fn handle_stun(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let Ok(msg) = StunMessage::parse(data) else {
            self.out.metrics.stun_errors += 1;
            return;
        };
        let local = msg.username().and_then(|u| u.split(':').next());
        let key = local.and_then(|local| self.by_ufrag.get(local)).copied();
        let Some(key) = key else {
            if let Some(f) = local.and_then(|l| self.forwards.get(l)) {
                let (to, epoch) = (f.target, f.epoch);
                self.forward(now, to, epoch, from, data);
                return;
            }
            self.out.metrics.stun_errors += 1;
            return;
        };
        if self.sessions[key].as_ref().is_some_and(|s| !s.active) {
            self.hold(key, from, data);
            return;
        }
        let ingress = self.ingress;
        let Some(session) = self.sessions[key].as_mut() else {
            return;
        };
        let mut buf = self.out.buffer();
        buf.resize(stun::MAX_MESSAGE_LEN, 0);
        let reply_via = ingress.reply_path(session);
        match session
            .ice
            .handle_binding_request(now, from, &msg, &mut buf)
        {
            Ok((n, event)) => {
                buf.truncate(n);
                self.out.send_via(from, reply_via, buf);
                if msg.use_candidate() || session.ice.selected() == Some(from) {
                    // A check on the media path: it tells which way the client is reached.
                    ingress.update_path(session);
                }
                if !self.by_addr.contains_key(&from) {
                    // A check before nomination: let the peer's DTLS reach us, and its media
                    // when a new path (an ICE restart's, a NAT rebinding's) carries it before the
                    // check that nominates it (browsers nominate regularly; SRTP stays
                    // authenticated, and replies keep the selected path until then).
                    self.by_addr.insert(from, key);
                }
                match event {
                    Some(IceEvent::Connected(addr)) => {
                        self.by_addr.insert(addr, key);
                        let session = self.sessions[key].as_mut();
                        if let Some(s) = session
                            && s.phase == Phase::New
                        {
                            s.phase = Phase::Connecting;
                            if s.dtls.role() == DtlsRole::Client {
                                s.dtls.start(now);
                            }
                            if let Some(r) = s.flush_dtls(&mut self.out) {
                                self.close(key, r);
                                return;
                            }
                        }
                    }
                    Some(IceEvent::PathSwitched { from: old, to }) => {
                        self.out.metrics.ice_path_switches += 1;
                        if self.by_addr.get(&old) == Some(&key) {
                            self.by_addr.remove(&old);
                        }
                        self.by_addr.insert(to, key);
                    }
                    None => {}
                }
                self.note_deadline(key);
            }
            Err(e) => {
                self.out.metrics.stun_errors += 1;
                match e.response {
                    Some(n) => {
                        buf.truncate(n);
                        self.out.send_via(from, reply_via, buf);
                    }
                    None => self.out.recycle(buf),
                }
            }
        }
    }

    fn handle_dtls(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let Some(key) = self.session_by_addr(now, from, data) else {
            return;
        };
        let Some(s) = self.sessions[key].as_mut() else {
            return;
        };
        s.dtls.handle_packet(now, data);
        if let Some(r) = s.flush_dtls(&mut self.out) {
            self.close(key, r);
            return;
        }
        self.note_deadline(key);
    }

    fn handle_srtp(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        let Some(key) = self.session_by_addr(now, from, data) else {
            return;
        };
        let Some(s) = self.sessions[key].as_mut() else {
            return;
        };
        let Some(rx) = s.srtp_rx.as_mut() else {
            self.out.metrics.dropped_before_dtls += 1;
            return;
        };
        let is_rtcp = rtp::is_rtcp(data);
        let r = if is_rtcp {
            rx.unprotect_rtcp(data)
        } else {
            rx.unprotect_rtp(data)
        };
        let len = match r {
            Ok(n) => n,
            Err(SrtpError::Replayed | SrtpError::TooOld) => {
                self.out.metrics.srtp_replays += 1;
                return;
            }
            Err(_) => {
                self.out.metrics.srtp_auth_failures += 1;
                return;
            }
        };
        if is_rtcp {
            s.ice.authenticated_traffic(now, from);
            self.handle_rtcp(now, key, &data[..len]);
        } else {
            self.handle_rtp(now, key, data, len);
        }
        self.note_deadline(key);
    }

    /// Drives every timer that is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = now;
        let mut next: Option<Instant> = None;
        for key in 0..self.sessions.len() {
            let Some(s) = self.sessions[key].as_ref() else {
                continue;
            };
            let due = s.poll_timeout(&self.scfg).is_some_and(|t| t <= now);
            if due {
                self.session_timeout(now, key);
            }
            if let Some(t) = self.sessions[key]
                .as_ref()
                .and_then(|s| s.poll_timeout(&self.scfg))
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        if let Some(t) = self.relay_tick(now) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = self.tunnel_tick(now) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = self.orphan_tick(now) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = self.recording_tick(now) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = self.answer_waiting(now) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = self.adapt_tick(now) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        self.next_timeout = next;
    }

    /// Ends the streams whose publisher did not come back within [`PUBLISHER_GRACE`].
    fn orphan_tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut ended = Vec::new();
        for (name, e) in &mut self.streams {
            match e.orphaned_until {
                Some(_) if e.publisher.is_some() => e.orphaned_until = None,
                Some(t) if t <= now => {
                    e.orphaned_until = None;
                    ended.push((
                        name.clone(),
                        std::mem::take(&mut e.viewers),
                        std::mem::take(&mut e.relay_out),
                    ));
                }
                Some(t) => next = Some(next.map_or(t, |n| n.min(t))),
                None => {}
            }
        }
        for (name, viewers, relays) in ended {
            self.end_recordings_of(now, &name);
            for r in relays {
                self.send_offer(&name, r.addr, false);
            }
            for v in viewers {
                self.close(v, CloseReason::PublisherGone);
            }
            if self.streams.get(&name).is_some_and(StreamEntry::unused) {
                self.streams.remove(&name);
            }
        }
        next
    }

    fn session_timeout(&mut self, now: Instant, key: usize) {
        let Some(s) = self.sessions[key].as_mut() else {
            return;
        };
        if !s.active {
            // Frozen or imported: its timers belong to whoever runs it.
            return;
        }
        s.dtls.handle_timeout(now);
        if let Some(r) = s.flush_dtls(&mut self.out) {
            self.close(key, r);
            return;
        }
        match s.phase {
            Phase::New | Phase::Connecting => {
                if now >= s.created + crate::node::session::CONNECT_TIMEOUT {
                    self.close(key, CloseReason::ConnectTimeout);
                }
                return;
            }
            Phase::Connected => {}
        }
        if s.ice.is_expired(now) {
            self.close(key, CloseReason::ConsentExpired);
            return;
        }
        match &s.role {
            Role::Publisher(_) => s.publisher_timeout(now, &self.scfg, &mut self.out),
            Role::Viewer(_) => {
                self.adapt_timeout(now, key);
                let Some(s) = self.sessions[key].as_ref() else {
                    return;
                };
                let Role::Viewer(tracks) = &s.role else {
                    return;
                };
                if now < s.next_report {
                    return;
                }
                let stream = s.stream.clone();
                // Each layer has its own timestamp base: the report follows the one it plays.
                let sources: Vec<Option<(usize, Option<u32>)>> = tracks
                    .iter()
                    .map(|t| t.source().map(|l| (l, t.playing())))
                    .collect();
                let projections: Vec<Option<(u64, u64)>> = {
                    let entry = self.streams.get(&stream);
                    let publisher = entry
                        .and_then(|e| e.publisher)
                        .and_then(|k| self.sessions[k].as_ref());
                    let relayed = entry.and_then(|e| e.relay_in.as_ref());
                    sources
                        .iter()
                        .map(|src| match (publisher.map(|p| &p.role), src) {
                            (Some(Role::Publisher(pt)), Some((line, ssrc))) => pt
                                .iter()
                                .find(|t| t.index == *line)
                                .and_then(|t| t.sr_projection(now, *ssrc)),
                            (_, Some((line, ssrc))) => {
                                relayed.and_then(|r| r.sr_projection(now, *line as u8, *ssrc))
                            }
                            _ => None,
                        })
                        .collect()
                };
                let ntp_now = self.config.wall.ntp(now);
                if let Some(s) = self.sessions[key].as_mut() {
                    s.viewer_report(now, ntp_now, &projections, &mut self.out);
                }
            }
        }
    }
}

#[cfg(test)]
mod dd_stream_tests {
    use super::*;
    use crate::codec::Codec;

    /// An AV1 packet of stream `ssrc` whose dependency descriptor (extension id 12) has the
    /// mandatory fields only: no structure attached.
    fn av1_packet(ssrc: u32) -> Vec<u8> {
        let mut p = vec![0x90, 45, 0, 1, 0, 0, 0, 1];
        p.extend_from_slice(&ssrc.to_be_bytes());
        p.extend_from_slice(&[0xBE, 0xDE, 0, 1]);
        // One-byte extension 12, 3 bytes: start and end of frame, template 0, frame 5.
        p.extend_from_slice(&[(12 << 4) | 2, 0xC0, 0x00, 0x05]);
        p.extend_from_slice(&[0x10, 0, 0]);
        p
    }

    /// A descriptor the node cannot read for want of the structure asks for a keyframe (which
    /// carries one) — until a keyframe came without one: such a sender is not asked again.
    #[test]
    fn an_unreadable_descriptor_asks_for_a_keyframe_until_one_came_without_a_structure() {
        let now = Instant::now();
        let mut e = StreamEntry::default();
        let pkt = av1_packet(7);
        let read = |e: &mut StreamEntry, keyframe: bool| {
            e.layer_info(now, keyframe, 0, Codec::Av1, Some(12), &pkt)
        };
        assert!(
            read(&mut e, false).is_err(),
            "layers unknown: a keyframe is wanted"
        );
        assert!(read(&mut e, false).is_err());
        assert!(
            matches!(read(&mut e, true), Ok(None)),
            "a keyframe without a structure"
        );
        assert!(matches!(read(&mut e, false), Ok(None)), "not asked again");
        // Another stream of the same track is asked for its own.
        let other = av1_packet(8);
        assert!(
            e.layer_info(now, false, 0, Codec::Av1, Some(12), &other)
                .is_err()
        );
    }
}
