//! Test fixture: a minimal server made of the real pieces (`negotiate_*`, [`IceLite`],
//! [`DtlsTransport`], [`SrtpContext`], [`PacketCache`]) and a world that runs peers and
//! fixtures over a [`SimNet`] in virtual time. Not the node core: just enough server to talk to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_sfu::cert;
use ferry_sfu::codec::Codec;
use ferry_sfu::dtls::{self, DtlsEvent, DtlsRole, DtlsTransport};
use ferry_sfu::ice::{IceCredentials, IceEvent, IceLite};
use ferry_sfu::media::line::MediaLine;
use ferry_sfu::nack::PacketCache;
use ferry_sfu::node::negotiate::{self, AnswerParams, Negotiated};
use ferry_sfu::rtcp::{self, RtcpIter, RtcpPacket};
use ferry_sfu::rtp::{self, RtpHeader, RtpPacketMut};
use ferry_sfu::sdp::{IceRestartAnswer, MediaDescription, MediaKind, SdpFrag};
use ferry_sfu::seq::SeqUnwrapper;
use ferry_sfu::srtp::{SrtpContext, SrtpProfile};
use ferry_sfu::stun::{self, StunMessage};
use ferry_sim::net::{LinkConfig, SimNet, VirtualClock};

use ferry_sfu::peer::{Peer, PeerConfig, PeerRole};

/// A decrypted RTP packet the fixture received.
#[derive(Debug, Clone)]
pub struct Got {
    pub at: Instant,
    pub header: RtpHeader,
    pub data: Vec<u8>,
}

impl Got {
    pub fn payload(&self) -> &[u8] {
        self.header.payload(&self.data)
    }
}

/// How a view fixture maps the publisher's stream onto the viewer's.
#[derive(Debug, Clone)]
struct Route {
    src_ssrc: u32,
    dst_ssrc: u32,
    dst_pt: u8,
    dst_rtx: Option<(u8, u32)>,
    seq: SeqUnwrapper,
    cache: PacketCache,
    video: bool,
    started: bool,
}

/// One server-side session.
#[derive(Debug)]
pub struct Server {
    pub addr: SocketAddr,
    pub neg: Negotiated,
    pub ice: IceLite,
    dtls: DtlsTransport,
    pub srtp_tx: Option<SrtpContext>,
    pub srtp_rx: Option<SrtpContext>,
    pub events: Vec<IceEvent>,
    pub rtp: Vec<Got>,
    pub rtcp: Vec<(Instant, Vec<u8>)>,
    out: VecDeque<(SocketAddr, Vec<u8>)>,
    routes: Vec<Route>,
    rtx_seq: u16,
    /// View fixture: media sequence numbers not sent the first time (lost on the wire).
    pub drop_once: HashSet<u16>,
    /// View fixture: media sequence numbers never sent nor cached (lost beyond repair).
    pub drop_always: HashSet<u16>,
    /// Incoming SRTP packets (ssrc, seq) dropped once before decryption (lost on the wire).
    pub drop_incoming: HashSet<(u32, u16)>,
    /// View fixture: forward nothing before this many packets have been offered.
    pub skip_first: usize,
    /// View fixture: start video at a keyframe, asking upstream for one (an IDR-aware SFU).
    pub wait_keyframe: bool,
    offered: usize,
    /// PLIs from the viewer, to be relayed upstream by the world.
    pub upstream_plis: usize,
    asked_keyframe: bool,
    restart_seed: u64,
}

fn server_ice(seed: u64) -> IceCredentials {
    IceCredentials {
        ufrag: format!("srv{seed:x}"),
        pwd: format!("serverpassword{seed:016x}"),
    }
}

impl Server {
    fn new(
        neg: Negotiated,
        addr: SocketAddr,
        ice: IceCredentials,
        cert: Arc<dimpl::DtlsCertificate>,
        seed: u64,
        now: Instant,
    ) -> Self {
        let dtls = DtlsTransport::new(
            neg.dtls_role,
            cert,
            neg.remote_fingerprint.clone(),
            dtls::engine_config(Some(seed)),
            now,
        );
        Server {
            addr,
            ice: IceLite::new(ice, neg.remote_ice.clone()),
            neg,
            dtls,
            srtp_tx: None,
            srtp_rx: None,
            events: Vec::new(),
            rtp: Vec::new(),
            rtcp: Vec::new(),
            out: VecDeque::new(),
            routes: Vec::new(),
            rtx_seq: 1000,
            drop_once: HashSet::new(),
            drop_always: HashSet::new(),
            drop_incoming: HashSet::new(),
            skip_first: 0,
            wait_keyframe: true,
            offered: 0,
            upstream_plis: 0,
            asked_keyframe: false,
            restart_seed: seed + 1,
        }
    }

    fn cert(seed: u64) -> Arc<dimpl::DtlsCertificate> {
        let mut secret = [0x5a; 32];
        secret[..8].copy_from_slice(&seed.to_be_bytes());
        Arc::new(cert::generate(secret).unwrap())
    }

    /// A WHIP session for `offer`.
    pub fn publish(offer: &str, addr: SocketAddr, seed: u64, now: Instant) -> Self {
        let ice = server_ice(seed);
        let cert = Self::cert(seed);
        let fp = cert::fingerprint(&cert.certificate);
        let p = AnswerParams {
            local_ice: &ice,
            fingerprint: &fp,
            candidates: &[addr],
            origin_id: seed,
            stream: "cam",
        };
        let neg = negotiate::negotiate_publish(offer, &p).unwrap();
        Self::new(neg, addr, ice, cert, seed, now)
    }

    /// A WHEP session for `offer`, playing `source`'s media lines.
    pub fn view(offer: &str, source: &Server, addr: SocketAddr, seed: u64, now: Instant) -> Self {
        let ice = server_ice(seed);
        let cert = Self::cert(seed);
        let fp = cert::fingerprint(&cert.certificate);
        let p = AnswerParams {
            local_ice: &ice,
            fingerprint: &fp,
            candidates: &[addr],
            origin_id: seed,
            stream: "cam",
        };
        let mut next = 0x5000_0000u32;
        let mut next_ssrc = || {
            next += 1;
            next
        };
        let sources: &[MediaLine] = &source.neg.media;
        let neg = negotiate::negotiate_view(offer, sources, &p, &mut next_ssrc).unwrap();
        let mut s = Self::new(neg, addr, ice, cert, seed, now);
        for line in s.neg.media.iter().filter(|l| l.accepted) {
            let src = &sources[line.source.unwrap()];
            s.routes.push(Route {
                src_ssrc: src.remote_ssrcs[0].0,
                dst_ssrc: line.local_ssrc,
                dst_pt: line.pt,
                dst_rtx: line.rtx_pt.zip(line.local_rtx_ssrc),
                seq: SeqUnwrapper::new(),
                cache: PacketCache::new(1024),
                video: line.video,
                started: false,
            });
        }
        s
    }

    pub fn answer(&self) -> &str {
        &self.neg.answer
    }

    pub fn connected(&self) -> bool {
        self.srtp_tx.is_some()
    }

    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        match data.first().copied() {
            Some(0..=3) => {
                let Ok(msg) = StunMessage::parse(data) else {
                    return;
                };
                let mut buf = [0u8; stun::MAX_MESSAGE_LEN];
                match self.ice.handle_binding_request(now, from, &msg, &mut buf) {
                    Ok((n, event)) => {
                        self.out.push_back((from, buf[..n].to_vec()));
                        if let Some(e) = event {
                            self.events.push(e);
                            if matches!(e, IceEvent::Connected(_))
                                && self.neg.dtls_role == DtlsRole::Client
                            {
                                self.dtls.start(now);
                                self.drive_dtls();
                            }
                        }
                    }
                    Err(e) => {
                        if let Some(n) = e.response {
                            self.out.push_back((from, buf[..n].to_vec()));
                        }
                    }
                }
            }
            Some(20..=63) => {
                self.dtls.handle_packet(now, data);
                self.drive_dtls();
            }
            Some(128..=191) => {
                let Some(rx) = self.srtp_rx.as_mut() else {
                    return;
                };
                if !rtp::is_rtcp(data) && data.len() >= 12 {
                    let seq = u16::from_be_bytes([data[2], data[3]]);
                    let ssrc = u32::from_be_bytes([data[8], data[9], data[10], data[11]]);
                    if self.drop_incoming.remove(&(ssrc, seq)) {
                        return;
                    }
                }
                if rtp::is_rtcp(data) {
                    if let Ok(n) = rx.unprotect_rtcp(data) {
                        let plain = data[..n].to_vec();
                        self.on_rtcp(&plain);
                        self.rtcp.push((now, plain));
                    }
                } else if let Ok(n) = rx.unprotect_rtp(data) {
                    let data = data[..n].to_vec();
                    let header = RtpHeader::parse(&data).unwrap();
                    self.rtp.push(Got {
                        at: now,
                        header,
                        data,
                    });
                }
            }
            _ => {}
        }
    }

    fn drive_dtls(&mut self) {
        while let Some(r) = self.dtls.poll_transmit() {
            if let Some(to) = self.ice.selected() {
                self.out.push_back((to, r));
            }
        }
        while let Some(e) = self.dtls.poll_event() {
            if let DtlsEvent::Connected(k) = e {
                let profile = SrtpProfile::from_dtls_id(k.profile).unwrap();
                self.srtp_tx =
                    Some(SrtpContext::new(profile, &k.local_key, &k.local_salt).unwrap());
                self.srtp_rx =
                    Some(SrtpContext::new(profile, &k.remote_key, &k.remote_salt).unwrap());
            }
        }
    }

    /// View fixture: answers NACKs from its cache, counts PLIs for the world to relay.
    fn on_rtcp(&mut self, data: &[u8]) {
        let mut resend = Vec::new();
        for p in RtcpIter::new(data).flatten() {
            match p {
                RtcpPacket::Nack(n) => {
                    for seq in n.lost() {
                        resend.push((n.media_ssrc, seq));
                    }
                }
                RtcpPacket::Pli { .. } => self.upstream_plis += 1,
                _ => {}
            }
        }
        for (ssrc, seq) in resend {
            let Some(r) = self.routes.iter_mut().find(|r| r.dst_ssrc == ssrc) else {
                continue;
            };
            let ext = r.seq.peek(u64::from(seq));
            let Some(pkt) = r.cache.get(ext) else {
                continue;
            };
            let mut buf = pkt.to_vec();
            if let Some((pt, rtx_ssrc)) = r.dst_rtx {
                let len = buf.len();
                buf.resize(len + 2, 0);
                let n = rtp::rtx_wrap(&mut buf, len, pt, rtx_ssrc, self.rtx_seq).unwrap();
                buf.truncate(n);
                self.rtx_seq = self.rtx_seq.wrapping_add(1);
            }
            self.send_rtp(buf);
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.dtls.poll_timeout().is_some_and(|t| t <= now) {
            self.dtls.handle_timeout(now);
            self.drive_dtls();
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.dtls.poll_timeout()
    }

    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.out.pop_front()
    }

    /// Encrypts and sends a plaintext RTP packet to the selected address.
    pub fn send_rtp(&mut self, mut pkt: Vec<u8>) {
        let (Some(tx), Some(to)) = (self.srtp_tx.as_mut(), self.ice.selected()) else {
            return;
        };
        let len = pkt.len();
        pkt.resize(len + tx.profile().rtp_overhead(), 0);
        let Ok(n) = tx.protect_rtp(&mut pkt, len) else {
            return;
        };
        pkt.truncate(n);
        self.out.push_back((to, pkt));
    }

    /// Encrypts and sends a plaintext RTCP compound.
    pub fn send_rtcp(&mut self, mut pkt: Vec<u8>) {
        let (Some(tx), Some(to)) = (self.srtp_tx.as_mut(), self.ice.selected()) else {
            return;
        };
        let len = pkt.len();
        pkt.resize(len + tx.profile().rtcp_overhead(), 0);
        let Ok(n) = tx.protect_rtcp(&mut pkt, len) else {
            return;
        };
        pkt.truncate(n);
        self.out.push_back((to, pkt));
    }

    /// Sends an RR + `write` compound from SSRC 1.
    pub fn feedback(&mut self, write: impl FnOnce(&mut [u8]) -> usize) {
        let mut buf = vec![0u8; 1200];
        let n = rtcp::write_receiver_report(&mut buf, 1, &[]).unwrap();
        let m = write(&mut buf[n..]);
        buf.truncate(n + m);
        self.send_rtcp(buf);
    }

    /// View fixture: forwards a plaintext packet from the publish fixture to the viewer.
    pub fn forward(&mut self, src: &[u8]) {
        let h = RtpHeader::parse(src).unwrap();
        let connected = self.srtp_tx.is_some();
        let Some(r) = self.routes.iter_mut().find(|r| r.src_ssrc == h.ssrc) else {
            return;
        };
        self.offered += 1;
        if self.offered <= self.skip_first || !connected {
            return;
        }
        if !r.started {
            let key = Codec::Vp8.is_keyframe_start(h.payload(src))
                || Codec::H264.is_keyframe_start(h.payload(src));
            if r.video && self.wait_keyframe && !key {
                if self.upstream_plis == 0 && !self.asked_keyframe {
                    self.asked_keyframe = true;
                    self.upstream_plis += 1;
                }
                return;
            }
            r.started = true;
        }
        let mut pkt = src.to_vec();
        let mut m = RtpPacketMut::new(&mut pkt).unwrap();
        m.set_ssrc(r.dst_ssrc);
        m.set_payload_type(r.dst_pt);
        let ext = r.seq.unwrap(u64::from(h.sequence));
        if self.drop_always.contains(&h.sequence) {
            return;
        }
        r.cache.insert(ext, &pkt);
        if r.dst_rtx.is_some() && self.drop_once.remove(&h.sequence) {
            return;
        }
        self.send_rtp(pkt);
    }

    /// Answers an ICE-restart PATCH body: new credentials for both sides.
    pub fn restart(&mut self, frag: &str) -> String {
        let offer = SdpFrag::parse(frag).unwrap();
        let m = offer.media_views().next().unwrap();
        let remote = IceCredentials {
            ufrag: m.ice_ufrag().unwrap().into(),
            pwd: m.ice_pwd().unwrap().into(),
        };
        let local = server_ice(self.restart_seed);
        self.restart_seed += 1;
        self.ice.restart(local.clone(), remote);
        IceRestartAnswer {
            ice_lite: true,
            ice_options: vec!["trickle".into()],
            ufrag: local.ufrag,
            pwd: local.pwd,
            bundle: None,
            media: Some((
                MediaDescription::new(MediaKind::Audio, 9, "UDP/TLS/RTP/SAVPF", ["111"]),
                "0".into(),
            )),
            candidates: Vec::new(),
            end_of_candidates: true,
        }
        .into_frag()
        .to_string()
    }
}

pub const T: Duration = Duration::from_millis(10);

pub fn addr(host: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, host], port))
}

/// Peers and server fixtures over one simulated network, in virtual time.
#[derive(Debug)]
pub struct World {
    pub clock: VirtualClock,
    pub net: SimNet,
    pub peers: Vec<Peer>,
    pub servers: Vec<Server>,
    /// (publish fixture, view fixture): relay media down and PLIs up each step.
    pub relay: Option<(usize, usize)>,
    relayed: usize,
}

impl World {
    pub fn new(seed: u64) -> Self {
        World {
            clock: VirtualClock::new(Instant::now()),
            net: SimNet::new(seed, LinkConfig::delay(T)),
            peers: Vec::new(),
            servers: Vec::new(),
            relay: None,
            relayed: 0,
        }
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    pub fn config(&self, role: PeerRole, seed: u64, port: u16) -> PeerConfig {
        PeerConfig::new(role, seed, addr(1, port), self.now())
    }

    /// Adds a peer and a fixture answering its offer (as a publisher, or as a viewer of
    /// `servers[source]`); returns their indices.
    pub fn connect(&mut self, config: PeerConfig, source: Option<usize>) -> (usize, usize) {
        let now = self.now();
        let seed = config.seed;
        let mut secret = [0x11; 32];
        secret[..8].copy_from_slice(&seed.to_be_bytes());
        let mut peer = Peer::new(config, Arc::new(cert::generate(secret).unwrap()), now);
        let offer = peer.create_offer();
        let server_addr = addr(2, 5000 + self.servers.len() as u16);
        let server = match source {
            None => Server::publish(&offer, server_addr, seed + 100, now),
            Some(s) => Server::view(&offer, &self.servers[s], server_addr, seed + 100, now),
        };
        peer.apply_answer(now, server.answer()).unwrap();
        self.peers.push(peer);
        self.servers.push(server);
        (self.peers.len() - 1, self.servers.len() - 1)
    }

    fn flush(&mut self) {
        let now = self.now();
        for p in &mut self.peers {
            let from = p.config().local_addr;
            while let Some((to, d)) = p.poll_transmit() {
                self.net.send(now, from, to, d);
            }
        }
        for s in &mut self.servers {
            while let Some((to, d)) = s.poll_transmit() {
                self.net.send(now, s.addr, to, d);
            }
        }
    }

    fn relay(&mut self) {
        let Some((src, dst)) = self.relay else {
            return;
        };
        let fresh: Vec<Vec<u8>> = self.servers[src].rtp[self.relayed..]
            .iter()
            .map(|g| g.data.clone())
            .collect();
        self.relayed = self.servers[src].rtp.len();
        for pkt in fresh {
            self.servers[dst].forward(&pkt);
        }
        let plis = std::mem::take(&mut self.servers[dst].upstream_plis);
        if plis > 0 {
            let ssrc = self.servers[src]
                .neg
                .media
                .iter()
                .find(|m| m.video)
                .unwrap()
                .remote_ssrcs[0]
                .0;
            self.servers[src].feedback(|b| rtcp::write_pli(b, 1, ssrc).unwrap());
        }
    }

    /// Runs every event up to and including `until`.
    pub fn run_until(&mut self, until: Instant) {
        loop {
            self.relay();
            self.flush();
            let next = self
                .peers
                .iter()
                .map(Peer::poll_timeout)
                .chain(self.servers.iter().map(Server::poll_timeout))
                .chain([self.net.next_delivery()])
                .flatten()
                .min();
            let Some(next) = next.filter(|t| *t <= until) else {
                break;
            };
            self.clock.advance_to(next);
            let now = self.now();
            while let Some(mut d) = self.net.poll_delivery(now) {
                if let Some(p) = self
                    .peers
                    .iter_mut()
                    .find(|p| p.config().local_addr == d.to)
                {
                    p.handle_datagram(now, d.from, &mut d.data);
                } else if let Some(s) = self.servers.iter_mut().find(|s| s.addr == d.to) {
                    s.handle_datagram(now, d.from, &mut d.data);
                }
            }
            for p in &mut self.peers {
                if p.poll_timeout().is_some_and(|t| t <= now) {
                    p.handle_timeout(now);
                }
            }
            for s in &mut self.servers {
                s.handle_timeout(now);
            }
        }
        self.clock.advance_to(until);
    }

    pub fn run_for(&mut self, d: Duration) {
        let until = self.now() + d;
        self.run_until(until);
    }
}
