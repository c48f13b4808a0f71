//! A deterministic world for tests: nodes and test peers on a seeded
//! simulated network under a virtual clock, all in one thread. A failing
//! seed replays exactly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_proto::{NodeId, SessionId, StreamId};

use crate::net::{LinkConfig, SimNet, VirtualClock};
use ferry_sfu::cert::CertError;
use ferry_sfu::codec::Codec;
use ferry_sfu::node::session::Event;
use ferry_sfu::node::signal::{SessionKind, SignalError};
use ferry_sfu::node::{Node, NodeConfig};
use ferry_sfu::peer::{Peer, PeerConfig, PeerRole, SimulcastConfig};
use ferry_sfu::time::WallClock;

/// A node in the testbed.
#[derive(Debug)]
pub struct TestNode {
    /// Its media address.
    pub addr: SocketAddr,
    /// The core.
    pub node: Node,
    /// Events it emitted.
    pub events: Vec<Event>,
    /// A finite CPU, if set ([`Testbed::set_cpu`]).
    pub cpu: Option<Cpu>,
}

/// A node's CPU in the simulation: handling a datagram costs `per_datagram` plus
/// `per_transmit` for each datagram it sends; what arrives while the CPU is busy waits in a
/// receive queue (the socket's buffer), and the node is told how long each datagram waited.
#[derive(Debug)]
pub struct Cpu {
    /// Cost of handling one datagram.
    pub per_datagram: Duration,
    /// Cost of each datagram sent.
    pub per_transmit: Duration,
    busy_until: Instant,
    queue: std::collections::VecDeque<(Instant, crate::net::Delivery)>,
    /// (when handled, how long it waited) of every datagram handled.
    pub waited: Vec<(Instant, Duration)>,
}

/// An edge in the testbed.
#[derive(Debug)]
pub struct TestEdge {
    /// Its address (public and cluster side).
    pub addr: SocketAddr,
    /// The core.
    pub edge: ferry_sfu::cluster::edge::Edge,
}

/// Nodes, peers, network and clock.
#[derive(Debug)]
pub struct Testbed {
    /// Virtual time.
    pub clock: VirtualClock,
    /// The network.
    pub net: SimNet,
    /// Wall-clock mapping shared by everything (NTP in SR/RR).
    pub wall: WallClock,
    /// Nodes.
    pub nodes: Vec<TestNode>,
    /// Peers.
    pub peers: Vec<Peer>,
    /// Edges.
    pub edges: Vec<TestEdge>,
    /// Video bitrate of the publishers created from now on (default 1 Mbit/s).
    pub video_bitrate_bps: u32,
    /// Simulcast layers of the publishers created from now on, in place of one stream at
    /// `video_bitrate_bps` (default none).
    pub simulcast: Option<SimulcastConfig>,
    /// Nodes run as several cores behind one address ([`Testbed::add_sharded_node`]): the
    /// router that picks the core of each datagram.
    pub routers: std::collections::HashMap<SocketAddr, ferry_sfu::cluster::shards::Router>,
    seed: u64,
}

fn secret(seed: u64, salt: u8) -> [u8; 32] {
    let mut s = [salt | 1; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s[31] = 0x01;
    s
}

impl Testbed {
    /// An empty world; `link` applies to every path unless overridden.
    pub fn new(seed: u64, link: LinkConfig) -> Self {
        let t0 = Instant::now();
        Self {
            clock: VirtualClock::new(t0),
            net: SimNet::new(seed, link),
            wall: WallClock {
                base: t0,
                unix_at_base: Duration::from_secs(1_700_000_000),
            },
            nodes: Vec::new(),
            peers: Vec::new(),
            edges: Vec::new(),
            video_bitrate_bps: 1_000_000,
            simulcast: None,
            routers: Default::default(),
            seed,
        }
    }

    /// The cluster key every node and edge of the testbed shares.
    pub fn cluster_key(&self) -> ferry_sfu::cluster::relay::ClusterKey {
        ferry_sfu::cluster::relay::ClusterKey::new(&secret(self.seed, 0x60))
    }

    /// An edge at `addr`.
    pub fn add_edge(&mut self, addr: SocketAddr) {
        let edge = ferry_sfu::cluster::edge::Edge::new(self.cluster_key(), self.now());
        self.edges.push(TestEdge { addr, edge });
    }

    /// A node at `addr` whose clients reach it through the edge at `edge`
    /// (its candidates are the edge's address).
    pub fn add_node_behind_edge(
        &mut self,
        id: NodeId,
        addr: SocketAddr,
        edge: SocketAddr,
    ) -> Result<usize, CertError> {
        let i = self.add_node(id, addr)?;
        let n = &mut self.nodes[i].node;
        n.set_candidates(vec![edge]);
        n.set_edge(Some(edge), Some(addr));
        Ok(i)
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A fresh node core at `addr` (replacing any node there, as a restarted
    /// process would). Returns its index.
    pub fn add_node(&mut self, id: NodeId, addr: SocketAddr) -> Result<usize, CertError> {
        let n = self.nodes.len() as u64;
        let mut cfg = NodeConfig::new(
            id,
            vec![addr],
            secret(self.seed ^ ((n + 1) * 7919), 0x40),
            self.wall,
        );
        cfg.deterministic_dtls = true;
        cfg.cluster_key = Some(ferry_sfu::cluster::relay::ClusterKey::new(&secret(
            self.seed, 0x60,
        )));
        let cert = Arc::new(ferry_sfu::cert::generate(secret(
            self.seed.wrapping_add(n),
            0x20,
        ))?);
        let mut node = Node::new(cfg, cert, self.now());
        self.nodes.retain(|n| n.addr != addr);
        for other in &mut self.nodes {
            other.node.set_peer(node.id().clone(), addr);
            node.set_peer(other.node.id().clone(), other.addr);
        }
        self.nodes.push(TestNode {
            addr,
            node,
            events: Vec::new(),
            cpu: None,
        });
        Ok(self.nodes.len() - 1)
    }

    /// A node of `cores` cores at `addr` (as `--workers N` runs one): each a [`Node`] of
    /// its own (indexes returned, in core order) sharing the address; a datagram reaches the
    /// core the router names, else the one the kernel's 4-tuple hash would have picked.
    pub fn add_sharded_node(
        &mut self,
        id: NodeId,
        addr: SocketAddr,
        cores: usize,
    ) -> Result<Vec<usize>, CertError> {
        // Made at placeholder ports (each core its own seed), then moved to `addr`.
        let mut placeholders = Vec::new();
        for k in 0..cores {
            let at = SocketAddr::new(addr.ip(), 1 + k as u16);
            self.add_node(id.clone(), at)?;
            placeholders.push(at);
        }
        let (made, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.nodes)
            .into_iter()
            .partition(|n| placeholders.contains(&n.addr));
        self.nodes = rest;
        self.nodes.retain(|n| n.addr != addr);
        let first = self.nodes.len();
        // The cores share one session limit, as the driver's do.
        let admission = Arc::new(ferry_sfu::node::admission::Admission::new(
            made.first().map_or(0, |n| n.node.max_sessions()),
            cores,
        ));
        for (core, mut n) in made.into_iter().enumerate() {
            n.addr = addr;
            n.node.share_admission(admission.clone(), core);
            n.node.set_candidates(vec![addr]);
            n.node.announce_routes();
            for other in &mut self.nodes {
                if other.addr != addr {
                    other.node.set_peer(n.node.id().clone(), addr);
                }
            }
            self.nodes.push(n);
        }
        self.routers
            .insert(addr, ferry_sfu::cluster::shards::Router::new(cores));
        Ok((first..self.nodes.len()).collect())
    }

    /// The node at `addr` (all its cores together) takes at most `max` sessions from now on.
    pub fn limit_sessions(&mut self, addr: SocketAddr, max: usize) {
        let cores: Vec<_> = self.nodes.iter_mut().filter(|n| n.addr == addr).collect();
        let admission = Arc::new(ferry_sfu::node::admission::Admission::new(max, cores.len()));
        for (core, n) in cores.into_iter().enumerate() {
            n.node.share_admission(admission.clone(), core);
        }
    }

    /// The core of the node at `addr` that owns `stream` (the node itself when not sharded).
    pub fn core(&mut self, addr: SocketAddr, stream: &StreamId) -> &mut Node {
        let k = self.routers.get(&addr).map_or(0, |r| {
            ferry_sfu::cluster::shards::shard_of(stream, r.shards())
        });
        match self.nodes.iter_mut().filter(|n| n.addr == addr).nth(k) {
            Some(n) => &mut n.node,
            None => panic!("no node at {addr}"),
        }
    }

    /// The index in `nodes` of the node (core) at `to` that handles `data` from `from`.
    fn receiver(&self, from: SocketAddr, to: SocketAddr, data: &[u8]) -> Option<usize> {
        let first = self.nodes.iter().position(|n| n.addr == to)?;
        let Some(router) = self.routers.get(&to) else {
            return Some(first);
        };
        let n = router.shards();
        // The kernel spreads senders over the cores' sockets by 4-tuple; what no core owns
        // stays where it arrived.
        let arrived = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            from.hash(&mut h);
            (h.finish() % n as u64) as usize
        };
        Some(first + router.route(from, data).unwrap_or(arrived))
    }

    /// Applies what the cores at `addr` announced to their router.
    fn publish_routes(&mut self) {
        let mut changes = Vec::new();
        for (addr, router) in &mut self.routers {
            for (k, n) in self
                .nodes
                .iter_mut()
                .filter(|n| n.addr == *addr)
                .enumerate()
            {
                n.node.take_route_changes(&mut changes);
                for c in changes.drain(..) {
                    router.apply(k, c);
                }
            }
        }
    }

    /// Gives the node at `addr` a finite CPU ([`Cpu`]).
    pub fn set_cpu(&mut self, addr: SocketAddr, per_datagram: Duration, per_transmit: Duration) {
        let now = self.now();
        if let Some(n) = self.nodes.iter_mut().find(|n| n.addr == addr) {
            n.cpu = Some(Cpu {
                per_datagram,
                per_transmit,
                busy_until: now,
                queue: Default::default(),
                waited: Vec::new(),
            });
        }
    }

    /// The node at `addr`.
    pub fn node(&mut self, addr: SocketAddr) -> &mut Node {
        match self.nodes.iter_mut().position(|n| n.addr == addr) {
            Some(i) => &mut self.nodes[i].node,
            None => panic!("no node at {addr}"),
        }
    }

    fn new_peer(&mut self, role: PeerRole, addr: SocketAddr) -> Result<Peer, SignalError> {
        let seed = self
            .seed
            .wrapping_mul(31)
            .wrapping_add(self.peers.len() as u64 + 1);
        let mut cfg = PeerConfig::new(role, seed, addr, self.wall.base);
        cfg.wall = self.wall;
        cfg.latency_epoch = self.wall.base;
        cfg.video_bitrate_bps = self.video_bitrate_bps;
        if matches!(role, PeerRole::Publisher { .. }) {
            cfg.simulcast = self.simulcast;
        }
        let cert = ferry_sfu::cert::generate(secret(seed, 0x10))
            .map_err(|e| SignalError::Unsupported(e.to_string()))?;
        Ok(Peer::new(cfg, Arc::new(cert), self.now()))
    }

    /// A publisher peer at `addr` publishing `stream` (video `codec` plus
    /// audio) to the node at `node`. Returns the peer index and session.
    pub fn publish(
        &mut self,
        node: SocketAddr,
        stream: &str,
        codec: Codec,
        addr: SocketAddr,
    ) -> Result<(usize, SessionId), SignalError> {
        self.publish_with(node, stream, codec, addr, None)
    }

    /// [`Testbed::publish`], resuming the session a `ticket` names (as the SDK does after
    /// losing its node): a new peer, new SSRCs and keys, the session's identity.
    pub fn publish_with(
        &mut self,
        node: SocketAddr,
        stream: &str,
        codec: Codec,
        addr: SocketAddr,
        ticket: Option<&str>,
    ) -> Result<(usize, SessionId), SignalError> {
        let peer = self.new_peer(
            PeerRole::Publisher {
                video: codec,
                audio: true,
            },
            addr,
        )?;
        self.connect(node, stream, SessionKind::Publish, peer, ticket)
    }

    /// A viewer peer at `addr` playing `stream` from the node at `node`.
    pub fn view(
        &mut self,
        node: SocketAddr,
        stream: &str,
        addr: SocketAddr,
    ) -> Result<(usize, SessionId), SignalError> {
        self.view_with(node, stream, addr, None)
    }

    /// [`Testbed::view`], resuming the session a `ticket` names.
    pub fn view_with(
        &mut self,
        node: SocketAddr,
        stream: &str,
        addr: SocketAddr,
        ticket: Option<&str>,
    ) -> Result<(usize, SessionId), SignalError> {
        let peer = self.new_peer(PeerRole::Viewer, addr)?;
        self.connect(node, stream, SessionKind::View, peer, ticket)
    }

    fn connect(
        &mut self,
        node: SocketAddr,
        stream: &str,
        kind: SessionKind,
        mut peer: Peer,
        ticket: Option<&str>,
    ) -> Result<(usize, SessionId), SignalError> {
        let now = self.now();
        let stream = StreamId::new(stream).map_err(|e| SignalError::BadSdp(e.to_string()))?;
        let offer = peer.create_offer();
        let n = self.core(node, &stream);
        let claims = match ticket {
            Some(t) => Some(
                n.check_ticket(now, t, &stream, kind)
                    .map_err(SignalError::BadTicket)?,
            ),
            None => None,
        };
        let answer = match n.request_session(now, kind, &stream, &offer, None, claims.as_ref())? {
            ferry_sfu::node::Requested::Answer(a) => a,
            // A viewer of a stream published on another node: the world runs until the
            // node answers (its relay offered, or the wait over).
            ferry_sfu::node::Requested::Waiting(id) => {
                let mut answer = None;
                let step = Duration::from_millis(5);
                for _ in 0..(ferry_sfu::node::RELAY_WAIT.as_millis() / 5 + 100) {
                    self.run_for(step);
                    if let Some((got, ferry_sfu::node::Answer::Session(a))) =
                        self.core(node, &stream).poll_answer()
                        && got == id
                    {
                        answer = Some(a);
                        break;
                    }
                }
                answer.ok_or_else(|| SignalError::StreamNotFound(stream.clone()))??
            }
        };
        let now = self.now();
        peer.apply_answer(now, &answer.sdp)
            .map_err(|e| SignalError::BadSdp(e.to_string()))?;
        self.peers.push(peer);
        Ok((self.peers.len() - 1, answer.session))
    }

    fn flush(&mut self) {
        let now = self.now();
        for p in &mut self.peers {
            let from = p.config().local_addr;
            while let Some((to, data)) = p.poll_transmit() {
                self.net.send(now, from, to, data);
            }
        }
        for n in &mut self.nodes {
            while let Some(t) = n.node.poll_transmit() {
                self.net.send(now, n.addr, t.to, t.data);
            }
            while let Some(e) = n.node.poll_event() {
                n.events.push(e);
            }
        }
        for e in &mut self.edges {
            while let Some(t) = e.edge.poll_transmit() {
                self.net.send(now, e.addr, t.to, t.data);
            }
        }
        self.publish_routes();
    }

    /// Everything sent to `addr` from now on goes through `link` (the receiver's access link,
    /// one bottleneck for all its senders), except paths with their own override; call again
    /// to change it mid-run (a capacity step).
    pub fn set_link_to(&mut self, addr: SocketAddr, link: LinkConfig) {
        self.net.set_link_to(addr, link);
    }

    /// Removes the node at `addr` (a crashed process): what is sent to it is lost.
    pub fn crash_node(&mut self, addr: SocketAddr) {
        self.nodes.retain(|n| n.addr != addr);
    }

    /// Runs the world for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now() + d;
        loop {
            self.flush();
            let next = self
                .peers
                .iter()
                .filter_map(Peer::poll_timeout)
                .chain(self.nodes.iter().filter_map(|n| n.node.poll_timeout()))
                .chain(self.edges.iter().filter_map(|e| e.edge.poll_timeout()))
                .chain(self.net.next_delivery())
                .chain(self.nodes.iter().filter_map(|n| {
                    n.cpu
                        .as_ref()
                        .filter(|c| !c.queue.is_empty())
                        .map(|c| c.busy_until)
                }))
                .min();
            let Some(next) = next.filter(|t| *t <= until) else {
                break;
            };
            self.clock.advance_to(next);
            let now = self.now();
            while let Some(mut d) = self.net.poll_delivery(now) {
                if let Some(i) = self.receiver(d.from, d.to, &d.data) {
                    let n = &mut self.nodes[i];
                    if let Some(cpu) = n.cpu.as_mut() {
                        cpu.queue.push_back((now, d));
                        continue;
                    }
                    n.node.handle_datagram(now, d.from, &mut d.data);
                    while let Some(t) = n.node.poll_transmit() {
                        self.net.send(now, n.addr, t.to, t.data);
                    }
                    self.publish_routes();
                } else if let Some(e) = self.edges.iter_mut().find(|e| e.addr == d.to) {
                    e.edge.handle_datagram(now, d.from, &d.data);
                    while let Some(t) = e.edge.poll_transmit() {
                        self.net.send(now, e.addr, t.to, t.data);
                    }
                } else if let Some(p) = self
                    .peers
                    .iter_mut()
                    .find(|p| p.config().local_addr == d.to)
                {
                    p.handle_datagram(now, d.from, &mut d.data);
                }
            }
            // Nodes with a finite CPU handle what waited, one datagram per free CPU slot.
            for n in &mut self.nodes {
                let Some(cpu) = n.cpu.as_mut() else { continue };
                while cpu.busy_until <= now {
                    let Some((at, mut d)) = cpu.queue.pop_front() else {
                        break;
                    };
                    let waited = now.saturating_duration_since(at);
                    cpu.waited.push((now, waited));
                    n.node.note_ingress_lag(now, waited);
                    n.node.handle_datagram(now, d.from, &mut d.data);
                    let mut sent = 0u32;
                    while let Some(t) = n.node.poll_transmit() {
                        self.net.send(now, n.addr, t.to, t.data);
                        sent += 1;
                    }
                    cpu.busy_until = now + cpu.per_datagram + cpu.per_transmit * sent;
                }
            }
            for p in &mut self.peers {
                if p.poll_timeout().is_some_and(|t| t <= now) {
                    p.handle_timeout(now);
                }
            }
            for n in &mut self.nodes {
                if n.node.poll_timeout().is_some_and(|t| t <= now) {
                    n.node.handle_timeout(now);
                }
            }
            self.publish_routes();
            for e in &mut self.edges {
                if e.edge.poll_timeout().is_some_and(|t| t <= now) {
                    e.edge.handle_timeout(now);
                }
            }
        }
        self.clock.advance_to(until);
        self.flush();
    }
}
