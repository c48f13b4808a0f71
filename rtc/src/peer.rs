//! A sans-IO WebRTC endpoint standing in for a browser publisher (WHIP) or viewer (WHEP), built
//! from the crate's own ICE, DTLS, SRTP, RTP and RTCP pieces. Simulations and the load generator
//! drive it; it never reads the clock, opens a socket or draws unseeded randomness.
//!
//! Drive loop (the same as the node's):
//!
//! ```no_run
//! # use std::{sync::Arc, time::Instant};
//! # use ferry_rtc::{cert, peer::{Peer, PeerConfig, PeerRole}, codec::Codec};
//! # fn post_whip(_: &str) -> String { unimplemented!() }
//! # fn recv() -> (std::net::SocketAddr, Vec<u8>) { unimplemented!() }
//! # fn send(_: std::net::SocketAddr, _: Vec<u8>) {}
//! let now = Instant::now();
//! let role = PeerRole::Publisher { video: Codec::Vp8, audio: true };
//! let config = PeerConfig::new(role, 7, "127.0.0.1:40000".parse().unwrap(), now);
//! let mut peer = Peer::new(config, Arc::new(cert::generate([7; 32]).unwrap()), now);
//! let answer = post_whip(&peer.create_offer());
//! peer.apply_answer(now, &answer).unwrap();
//! loop {
//!     while let Some((to, datagram)) = peer.poll_transmit() { send(to, datagram); }
//!     // ...sleep until `peer.poll_timeout()` or a datagram arrives, then:
//!     let (from, mut data) = recv();
//!     peer.handle_datagram(Instant::now(), from, &mut data);
//!     peer.handle_timeout(Instant::now());
//! }
//! ```
//!
//! With [`MediaSource::Synthetic`] (the default), media payloads carry a [`Stamp`] (capture time
//! and frame number) after the codec header, so a viewer measures latency, frame completeness and
//! the sender-report mapping from what arrives. Publisher and viewer should share `wall` and
//! `latency_epoch` for those to mean anything.
//!
//! With [`PeerConfig::simulcast`], a synthetic publisher offers its video as Chrome offers
//! `sendEncodings` (`a=rid:<rid> send` per layer, `a=simulcast:send`, the rid and repaired-rid
//! extensions, no SSRCs) and sends one stream per layer the answer takes: its own SSRC, RTX
//! SSRC, sequence numbers, bitrate and keyframes (a PLI or FIR for a layer's SSRC gives a
//! keyframe on that layer only), every packet naming its rid. Its stamps carry the layer index,
//! so a viewer counts what it received of each layer ([`RecvStreamStats::layer_packets`]).
//!
//! With [`MediaSource::External`], the application brings the media: a publisher sends encoded
//! frames with [`Peer::send_frame`] (and watches [`Peer::take_keyframe_request`]); a viewer
//! takes complete frames, in order and decodable, from [`Peer::poll_frame`] (built by
//! [`crate::media::FrameAssembler`] after NACK repair).

mod config;
mod offer;
mod payload;
mod recv;
mod send;
mod simulcast;
mod source;
mod stats;
#[cfg(test)]
mod tests_accept;
#[cfg(test)]
mod tests_simulcast;
#[cfg(test)]
mod tests_twcc;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::DtlsCertificate;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cert;
use crate::codec::Codec;
use crate::dtls::{self, DtlsEvent, DtlsRole, DtlsTransport};
use crate::ice::{IceClient, IceClientEvent, IceCredentials, Nomination};
use crate::media::PacketizeError;
use crate::rtcp::{RtcpIter, RtcpPacket};
use crate::rtp::{self, RtpHeader};
use crate::srtp::{SrtpContext, SrtpProfile};
use crate::stun::{self, StunMessage};

pub use config::{
    MAX_SIMULCAST_LAYERS, MediaSource, PeerConfig, PeerRole, SimulcastConfig, SimulcastLayer,
};
pub use payload::{STAMP_LEN, Stamp, is_frame_start, read_stamp};
pub use recv::{MAX_QUEUED_FRAMES, NO_NACK_MAX_WAIT, PLI_INTERVAL, RR_INTERVAL, ReceivedFrame};
pub use send::{FORCED_KEYFRAME_GAP, MAX_RTP_PACKET, SR_INTERVAL};
pub use source::{RtpSource, SOURCE_AUDIO_PT, SOURCE_VIDEO_PT, SourcePacket};
pub use stats::{LatencyStats, PeerStats, RecvStreamStats, SendStreamStats, SeqRanges};

use offer::{Answer, OfferLine, OfferPlan};
use recv::{LineInfo, Receiver};
use send::{Extensions, SendConfig, SendStream, Sender, StreamBases};
use simulcast::layer_streams;

/// Why an answer or restart answer was not applied, or a frame not sent.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The answer is not usable (unparseable, no credentials, fingerprint or candidate, ...).
    #[error("bad answer: {0}")]
    BadAnswer(String),
    /// The server's offer is not usable (unparseable, no credentials, fingerprint, candidate or
    /// codec of ours, ...), or we are not a viewer.
    #[error("bad offer: {0}")]
    BadOffer(String),
    /// An answer was already applied.
    #[error("an answer was already applied")]
    AlreadyAnswered,
    /// A restart answer arrived without a restart in progress.
    #[error("no ICE restart in progress")]
    NotRestarting,
    /// Media cannot be sent before SRTP is keyed, nor after a close.
    #[error("not connected")]
    NotConnected,
    /// [`Peer::send_frame`] on a peer configured for [`MediaSource::Synthetic`].
    #[error("the peer sends synthetic media")]
    NotExternal,
    /// No negotiated track of that kind to send on.
    #[error("no {} track to send on", if *.video { "video" } else { "audio" })]
    NoTrack {
        /// The frame was video.
        video: bool,
    },
    /// The frame could not be packetized.
    #[error("cannot packetize the frame: {0}")]
    Packetize(#[from] PacketizeError),
}

/// A plaintext RTP or RTCP packet on its way to SRTP.
#[derive(Debug)]
enum Plain {
    Rtp(Vec<u8>),
    Rtcp(Vec<u8>),
}

/// The endpoint. See the module docs for the drive loop.
pub struct Peer {
    config: PeerConfig,
    cert: Arc<DtlsCertificate>,
    rng: ChaCha8Rng,
    tie_breaker: u64,
    local_ice: IceCredentials,
    pending_ice: Option<IceCredentials>,
    remote_ice: Option<IceCredentials>,
    plan: OfferPlan,
    answer: Option<Answer>,
    remote: Option<SocketAddr>,
    known_remotes: Vec<SocketAddr>,
    ice: Option<IceClient>,
    /// The server offered ([`Peer::accept_offer`]): it controls ICE.
    ice_controlled: bool,
    /// How our checks nominate when we control ([`Peer::set_nomination`]).
    nomination: Nomination,
    /// A fresh [`IceClient`] sends at once; it has no deadline until polled.
    ice_kick: bool,
    dtls: Option<DtlsTransport>,
    srtp_tx: Option<SrtpContext>,
    srtp_rx: Option<SrtpContext>,
    /// (RTCP?, SSRC, index) → digest of what was encrypted under it.
    srtp_ledger: std::collections::HashMap<(bool, u32, u64), u32>,
    sender: Sender,
    receiver: Receiver,
    bases: Vec<StreamBases>,
    /// Simulcast: each layer's bases and first VP8 picture id, lowest first.
    layer_bases: Vec<(StreamBases, u16)>,
    plain: Vec<Plain>,
    out: VecDeque<(SocketAddr, Vec<u8>)>,
    last_now: Instant,
    closed: bool,
    stats: PeerStats,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("role", &self.config.role)
            .field("local_addr", &self.config.local_addr)
            .field("remote", &self.remote)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

const ICE_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn random_string(rng: &mut ChaCha8Rng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(ICE_CHARS[(rng.next_u32() % 62) as usize]))
        .collect()
}

fn random_credentials(rng: &mut ChaCha8Rng) -> IceCredentials {
    IceCredentials {
        ufrag: random_string(rng, 8),
        pwd: random_string(rng, 24),
    }
}

/// A non-zero SSRC not in `taken`.
fn random_ssrc(rng: &mut ChaCha8Rng, taken: &mut Vec<u32>) -> u32 {
    loop {
        let s = rng.next_u32();
        if s != 0 && !taken.contains(&s) {
            taken.push(s);
            return s;
        }
    }
}

impl Peer {
    /// A peer that has offered nothing yet. Every random choice is made here, from `config.seed`.
    pub fn new(config: PeerConfig, cert: Arc<DtlsCertificate>, now: Instant) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let local_ice = random_credentials(&mut rng);
        let tie_breaker = rng.next_u64();
        let cname = random_string(&mut rng, 16);
        let stream = format!("ferry-peer-{:08x}", rng.next_u32());
        let mut taken = Vec::new();
        let mut bases = Vec::new();
        let mut layer_bases = Vec::new();
        let mut lines = Vec::new();
        // Simulcast is synthetic media's: the application's frames are one stream.
        let simulcast = config
            .simulcast
            .filter(|s| config.media == MediaSource::Synthetic && !s.layers().is_empty());
        let mut base = |rng: &mut ChaCha8Rng, rtx_pt: Option<u8>| StreamBases {
            ssrc: random_ssrc(rng, &mut taken),
            seq: rng.next_u32() as u16,
            ts: rng.next_u32(),
            rtx: rtx_pt.map(|pt| (pt, random_ssrc(rng, &mut taken), rng.next_u32() as u16)),
        };
        match config.role {
            PeerRole::Publisher { video, audio } => {
                if audio {
                    let b = base(&mut rng, None);
                    bases.push(b);
                    lines.push(OfferLine {
                        mid: lines.len().to_string(),
                        video: false,
                        send: true,
                        codecs: vec![(Codec::Opus, offer::PT_OPUS, None)],
                        ssrc: Some((b.ssrc, None)),
                        rids: Vec::new(),
                    });
                }
                let pts = match video {
                    Codec::Vp8 => Some((offer::PT_VP8, offer::PT_VP8_RTX)),
                    Codec::H264 => Some((offer::PT_H264, offer::PT_H264_RTX)),
                    // The test peer publishes VP8 or H.264 only.
                    Codec::Opus | Codec::Vp9 | Codec::Av1 => None,
                };
                if let (Some((pt, rtx)), Some(sim)) = (pts, simulcast) {
                    // One stream per layer, none declared (no a=ssrc), as Chrome.
                    let rtx = config.rtx.then_some(rtx);
                    for _ in sim.layers() {
                        let b = base(&mut rng, rtx);
                        layer_bases.push(b);
                    }
                    lines.push(OfferLine {
                        mid: lines.len().to_string(),
                        video: true,
                        send: true,
                        codecs: vec![(video, pt, rtx)],
                        ssrc: None,
                        rids: sim.layers().iter().map(|l| l.rid.to_owned()).collect(),
                    });
                } else if let Some((pt, rtx)) = pts {
                    let rtx = config.rtx.then_some(rtx);
                    let b = base(&mut rng, rtx);
                    bases.push(b);
                    lines.push(OfferLine {
                        mid: lines.len().to_string(),
                        video: true,
                        send: true,
                        codecs: vec![(video, pt, rtx)],
                        ssrc: Some((b.ssrc, b.rtx.map(|r| r.1))),
                        rids: Vec::new(),
                    });
                }
            }
            PeerRole::Viewer => {
                let rtx = |pt| config.rtx.then_some(pt);
                lines.push(OfferLine {
                    mid: "0".into(),
                    video: false,
                    send: false,
                    codecs: vec![(Codec::Opus, offer::PT_OPUS, None)],
                    ssrc: None,
                    rids: Vec::new(),
                });
                lines.push(OfferLine {
                    mid: "1".into(),
                    video: true,
                    send: false,
                    codecs: vec![
                        (Codec::Vp8, offer::PT_VP8, rtx(offer::PT_VP8_RTX)),
                        (Codec::H264, offer::PT_H264, rtx(offer::PT_H264_RTX)),
                    ],
                    ssrc: None,
                    rids: Vec::new(),
                });
            }
        }
        let rtcp_ssrc = random_ssrc(&mut rng, &mut taken);
        let picture_id = rng.next_u32() as u16;
        let session_id = rng.next_u64() >> 1;
        // Drawn last, so a single stream's draws stay what they always were.
        let layer_bases = layer_bases
            .into_iter()
            .map(|b| (b, rng.next_u32() as u16 & 0x7fff))
            .collect();
        let send_cfg = SendConfig {
            fps: config.video_fps,
            bitrate_bps: config.video_bitrate_bps,
            keyframe_interval: config.keyframe_interval,
            wall: config.wall,
            latency_epoch: config.latency_epoch,
            external: config.media == MediaSource::External,
        };
        Peer {
            sender: Sender::new(send_cfg, cname.clone(), picture_id),
            receiver: Receiver::new(
                rtcp_ssrc,
                cname.clone(),
                config.wall,
                config.latency_epoch,
                config.media == MediaSource::External,
            ),
            plan: OfferPlan {
                session_id,
                stream,
                cname,
                lines,
                transport_cc: config.transport_cc,
            },
            config,
            cert,
            rng,
            tie_breaker,
            local_ice,
            pending_ice: None,
            remote_ice: None,
            answer: None,
            remote: None,
            known_remotes: Vec::new(),
            ice: None,
            ice_controlled: false,
            nomination: Nomination::Aggressive,
            ice_kick: false,
            dtls: None,
            srtp_tx: None,
            srtp_rx: None,
            srtp_ledger: std::collections::HashMap::new(),
            bases,
            layer_bases,
            plain: Vec::new(),
            out: VecDeque::new(),
            last_now: now,
            closed: false,
            stats: PeerStats::default(),
        }
    }

    /// Our config.
    pub fn config(&self) -> &PeerConfig {
        &self.config
    }

    /// The ICE agent checking the current path (`None` before an answer).
    pub fn ice(&self) -> Option<&IceClient> {
        self.ice.as_ref()
    }

    /// Our RTCP CNAME.
    pub fn cname(&self) -> &str {
        &self.plan.cname
    }

    /// Our current ICE credentials.
    pub fn local_ice(&self) -> &IceCredentials {
        &self.local_ice
    }

    /// SHA-256 fingerprint of our certificate.
    pub fn fingerprint(&self) -> [u8; 32] {
        cert::fingerprint(&self.cert.certificate)
    }

    /// The SDP offer (the same every call).
    pub fn create_offer(&mut self) -> String {
        let fp = cert::format_fingerprint(&self.fingerprint());
        self.plan.write(&self.local_ice, &fp)
    }

    /// Applies the server's answer and starts ICE towards its first host candidate.
    pub fn apply_answer(&mut self, now: Instant, answer: &str) -> Result<(), PeerError> {
        if self.answer.is_some() {
            return Err(PeerError::AlreadyAnswered);
        }
        let a = offer::read_answer(&self.plan, answer)?;
        self.start_remote(now, a);
        Ok(())
    }

    /// Answers a server's offer instead of offering, for servers that always offer (Janus's
    /// streaming plugin): viewers only. Each offered audio/video m-line is answered recvonly
    /// with the first of its payload types we support (Opus, VP8, H.264, with RTX when
    /// configured), or rejected. We take the DTLS client role (`a=setup:active`) unless the
    /// offer insists on it, leave the controlling ICE role to the server, answer its checks,
    /// check its first UDP candidate ourselves, and give our one host candidate,
    /// `config.local_addr`. Returns the answer SDP.
    pub fn accept_offer(&mut self, now: Instant, offer: &str) -> Result<String, PeerError> {
        if self.answer.is_some() {
            return Err(PeerError::AlreadyAnswered);
        }
        if self.config.role != PeerRole::Viewer {
            return Err(PeerError::BadOffer("only a viewer answers an offer".into()));
        }
        let mut plan = self.plan.clone();
        plan.lines = offer::lines_for_offer(offer, self.config.rtx)?;
        let mut a = offer::read_offer(&plan, offer)?;
        if !self.config.transport_cc {
            // A REMB-only answerer: it accepts no transport-wide CC, so it is sent no stamp.
            for line in &mut a.lines {
                line.ext_transport_cc = None;
                line.twcc = false;
            }
        }
        self.plan = plan;
        let fp = cert::format_fingerprint(&self.fingerprint());
        let sdp = self
            .plan
            .write_answer(offer, &a, &self.local_ice, &fp, self.config.local_addr);
        self.ice_controlled = true;
        self.start_remote(now, a);
        Ok(sdp)
    }

    /// Starts ICE (and DTLS when we are its server) towards what the remote description said.
    fn start_remote(&mut self, now: Instant, a: Answer) {
        self.last_now = now;
        let remote = a.candidates[0];
        self.remote = Some(remote);
        self.known_remotes = a.candidates.clone();
        self.remote_ice = Some(a.ice.clone());
        self.new_ice_client();
        if a.dtls_role == DtlsRole::Server {
            self.dtls = Some(self.new_dtls(DtlsRole::Server, &a.fingerprint, now));
        }
        self.configure_media(&a);
        self.answer = Some(a);
        self.handle_timeout(now);
    }

    fn configure_media(&mut self, a: &Answer) {
        let mut infos = Vec::new();
        // One transport-wide sequence number per BUNDLE transport: the first receiving line's
        // id (RFC 8843 §9.2 has every bundled line use the same one).
        let mut twcc_ext = None;
        for (ours, line) in self.plan.lines.iter().zip(&a.lines) {
            if !line.accepted {
                continue;
            }
            if ours.send && !ours.rids.is_empty() {
                let layers = layer_streams(self.config.simulcast, &self.layer_bases, ours, line);
                self.sender.layers.extend(layers);
            } else if ours.send {
                let Some(b) = self
                    .bases
                    .iter()
                    .find(|b| Some(b.ssrc) == ours.ssrc.map(|s| s.0))
                    .copied()
                else {
                    continue;
                };
                let b = b.negotiated(line.rtx_pt, line.nack);
                let ext = Extensions {
                    mid: line.ext_mid.map(|id| (id, line.mid.clone())),
                    abs_send_time: line.ext_abs_send_time,
                    audio_level: line.ext_audio_level,
                    ..Extensions::default()
                };
                let s = SendStream::new(line.codec, line.pt, b, ext);
                if line.video {
                    self.sender.video = Some(s);
                } else {
                    self.sender.audio = Some(s);
                }
            } else {
                twcc_ext = twcc_ext.or(line.ext_transport_cc);
                infos.push(LineInfo {
                    codec: line.codec,
                    pt: line.pt,
                    rtx_pt: line.rtx_pt,
                    nack: line.nack,
                    pli: line.pli || line.fir,
                    ssrcs: line.ssrcs.clone(),
                });
            }
        }
        if !infos.is_empty() {
            self.receiver.set_lines(infos);
        }
        self.receiver.set_twcc(twcc_ext);
    }

    fn new_dtls(&self, role: DtlsRole, fingerprint: &[u8], now: Instant) -> DtlsTransport {
        DtlsTransport::new(
            role,
            self.cert.clone(),
            fingerprint.to_vec(),
            dtls::engine_config(Some(self.config.seed)),
            now,
        )
    }

    /// (Re)creates the ICE agent with the current credentials; it checks at once.
    fn new_ice_client(&mut self) {
        let (Some(remote_ice), Some(remote)) = (self.remote_ice.clone(), self.remote) else {
            return;
        };
        let seed = self.rng.next_u64();
        let ice = IceClient::new(
            self.local_ice.clone(),
            remote_ice,
            remote,
            self.tie_breaker,
            seed,
        );
        self.ice = Some(if self.ice_controlled {
            ice.controlled()
        } else {
            ice.with_nomination(self.nomination)
        });
        self.ice_kick = true;
    }

    /// [`Peer::handle_datagram`] for a datagram that waited `waited` in the socket's receive
    /// buffer before `now` (the kernel's receive stamp, `udp::RecvBatch::waited`): its media
    /// latency is measured to when it arrived, not to when this peer got to read it, so a busy
    /// load generator does not add its own queue to what it measures.
    pub fn handle_datagram_waited(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &mut [u8],
        waited: std::time::Duration,
    ) {
        self.receiver.arrival_lag = waited;
        self.handle_datagram(now, from, data);
        self.receiver.arrival_lag = std::time::Duration::ZERO;
    }

    /// Feeds one datagram that arrived at `config.local_addr` from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        self.last_now = now;
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += data.len() as u64;
        if self.closed || !self.known_remotes.contains(&from) {
            self.stats.datagrams_dropped += 1;
            return;
        }
        // RFC 7983 demultiplexing by the first byte.
        match data.first().copied() {
            Some(0..=3) if stun::is_stun(data) => self.on_stun(now, from, data),
            Some(20..=63) => match self.dtls.as_mut() {
                Some(dtls) => {
                    dtls.handle_packet(now, data);
                    self.drive_dtls(now);
                }
                None => self.stats.datagrams_dropped += 1,
            },
            Some(128..=191) => self.on_srtp(now, data),
            _ => self.stats.datagrams_dropped += 1,
        }
        self.flush();
    }

    fn on_stun(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let (Ok(msg), Some(ice)) = (StunMessage::parse(data), self.ice.as_mut()) else {
            self.stats.datagrams_dropped += 1;
            return;
        };
        if msg.class() == stun::Class::Request {
            let mut buf = [0u8; stun::MAX_MESSAGE_LEN];
            match ice.handle_request(from, &msg, &mut buf) {
                Some(n) => self.out.push_back((from, buf[..n].to_vec())),
                None => self.stats.ice_errors += 1,
            }
            return;
        }
        match ice.handle_response(now, &msg) {
            Some(IceClientEvent::Connected { .. }) => self.on_ice_connected(now),
            Some(IceClientEvent::ErrorResponse { .. }) => self.stats.ice_errors += 1,
            None => {}
        }
    }

    fn on_ice_connected(&mut self, now: Instant) {
        let Some(a) = self.answer.as_ref() else {
            return;
        };
        if self.dtls.is_none() && a.dtls_role == DtlsRole::Client {
            let mut d = self.new_dtls(DtlsRole::Client, &a.fingerprint, now);
            d.start(now);
            self.dtls = Some(d);
            self.drive_dtls(now);
        }
    }

    /// Sends what DTLS produced and acts on its events.
    fn drive_dtls(&mut self, now: Instant) {
        let Some(dtls) = self.dtls.as_mut() else {
            return;
        };
        let mut records = Vec::new();
        while let Some(r) = dtls.poll_transmit() {
            records.push(r);
        }
        let mut events = Vec::new();
        while let Some(e) = dtls.poll_event() {
            events.push(e);
        }
        if let Some(to) = self.remote {
            self.out.extend(records.into_iter().map(|r| (to, r)));
        }
        for e in events {
            match e {
                DtlsEvent::Connected(keys) => self.on_keys(now, &keys),
                DtlsEvent::Failed(_) => self.stats.dtls_failed = true,
                DtlsEvent::Closed => self.closed = true,
            }
        }
    }

    fn on_keys(&mut self, now: Instant, keys: &dtls::SrtpKeys) {
        let Some(profile) = SrtpProfile::from_dtls_id(keys.profile) else {
            self.stats.dtls_failed = true;
            return;
        };
        let tx = SrtpContext::new(profile, &keys.local_key, &keys.local_salt);
        let rx = SrtpContext::new(profile, &keys.remote_key, &keys.remote_salt);
        let (Ok(tx), Ok(rx)) = (tx, rx) else {
            self.stats.dtls_failed = true;
            return;
        };
        self.srtp_tx = Some(tx);
        self.srtp_rx = Some(rx);
        self.sender.start(now);
        if self.receiver.has_streams() {
            self.receiver.start(now);
        }
        self.media_timeout(now);
    }

    /// Records which plaintext the sender encrypted under each (SSRC,
    /// index), replay check or not: two different ones are a reuse.
    fn audit_srtp(&mut self, data: &[u8]) {
        let Some(rx) = self.srtp_rx.as_ref() else {
            return;
        };
        let mut copy = data.to_vec();
        let entry = if rtp::is_rtcp(data) {
            rx.inspect_rtcp(&mut copy)
                .ok()
                .map(|(n, ssrc, i)| ((true, ssrc, u64::from(i)), crc32fast::hash(&copy[8..n])))
        } else {
            rx.inspect_rtp(&mut copy).ok().and_then(|(n, ssrc, i)| {
                let h = RtpHeader::parse(&copy[..n]).ok()?;
                Some(((false, ssrc, i), crc32fast::hash(h.payload(&copy[..n]))))
            })
        };
        if let Some((k, digest)) = entry
            && *self.srtp_ledger.entry(k).or_insert(digest) != digest
        {
            self.stats.srtp_index_reuse += 1;
        }
    }

    fn on_srtp(&mut self, now: Instant, data: &mut [u8]) {
        self.audit_srtp(data);
        let Some(rx) = self.srtp_rx.as_mut() else {
            self.stats.datagrams_dropped += 1;
            return;
        };
        if rtp::is_rtcp(data) {
            match rx.unprotect_rtcp(data) {
                Ok(n) => self.on_rtcp(now, &data[..n]),
                Err(_) => self.stats.srtp_errors += 1,
            }
            return;
        }
        match rx.unprotect_rtp(data) {
            Ok(n) => {
                if !self.receiver.on_rtp(now, &mut data[..n], &mut self.plain) {
                    self.stats.datagrams_dropped += 1;
                }
            }
            Err(_) => self.stats.srtp_errors += 1,
        }
    }

    fn on_rtcp(&mut self, now: Instant, data: &[u8]) {
        for packet in RtcpIter::new(data) {
            let Ok(packet) = packet else {
                break;
            };
            match packet {
                RtcpPacket::SenderReport(sr) => self.receiver.on_sender_report(now, sr.info),
                RtcpPacket::Nack(n) => self.sender.on_nack(n.media_ssrc, n.lost(), &mut self.plain),
                RtcpPacket::Pli { media_ssrc, .. } => self.sender.on_pli(media_ssrc),
                RtcpPacket::Fir(fir) => self.sender.on_fir(fir.entries()),
                RtcpPacket::Remb(remb) => self.sender.remb_bps = Some(remb.bitrate_bps),
                _ => {}
            }
        }
    }

    /// Drives timers: ICE checks, DTLS retransmissions, media, reports, NACK retries.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = now;
        if self.closed {
            return;
        }
        if let (Some(ice), Some(to)) = (self.ice.as_mut(), self.remote) {
            let mut buf = [0u8; stun::MAX_MESSAGE_LEN];
            if let Some((n, _)) = ice.poll_transmit(now, &mut buf) {
                self.out.push_back((to, buf[..n].to_vec()));
            }
            self.ice_kick = false;
        }
        if let Some(dtls) = self.dtls.as_mut()
            && dtls.poll_timeout().is_some_and(|t| t <= now)
        {
            dtls.handle_timeout(now);
            self.drive_dtls(now);
        }
        self.media_timeout(now);
        self.flush();
    }

    fn media_timeout(&mut self, now: Instant) {
        if self.srtp_tx.is_some() && !self.closed {
            self.sender.on_timeout(now, &mut self.plain);
            self.receiver.on_timeout(now, &mut self.plain);
        }
    }

    /// Encrypts what the media parts produced and queues it.
    fn flush(&mut self) {
        let (Some(tx), Some(to)) = (self.srtp_tx.as_mut(), self.remote) else {
            self.plain.clear();
            return;
        };
        for p in self.plain.drain(..) {
            let (mut buf, rtcp) = match p {
                Plain::Rtp(b) => (b, false),
                Plain::Rtcp(b) => (b, true),
            };
            let len = buf.len();
            let overhead = if rtcp {
                tx.profile().rtcp_overhead()
            } else {
                tx.profile().rtp_overhead()
            };
            buf.resize(len + overhead, 0);
            let r = if rtcp {
                tx.protect_rtcp(&mut buf, len)
            } else {
                tx.protect_rtp(&mut buf, len)
            };
            match r {
                Ok(n) => {
                    buf.truncate(n);
                    self.out.push_back((to, buf));
                }
                Err(_) => self.stats.srtp_errors += 1,
            }
        }
    }

    /// The next datagram to send, from `config.local_addr`.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        let d = self.out.pop_front()?;
        self.stats.datagrams_sent += 1;
        Some(d)
    }

    /// When [`Peer::handle_timeout`] has work; `None` when idle (closed or not yet answered).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            return None;
        }
        let kick = self.ice_kick.then_some(self.last_now);
        let ice = self.ice.as_ref().and_then(IceClient::poll_timeout);
        let dtls = self.dtls.as_ref().and_then(DtlsTransport::poll_timeout);
        let media = self
            .srtp_tx
            .as_ref()
            .map(|_| [self.sender.poll_timeout(), self.receiver.poll_timeout()]);
        [kick, ice, dtls]
            .into_iter()
            .chain(media.into_iter().flatten())
            .flatten()
            .min()
    }

    /// ICE and DTLS done, SRTP keyed, and not closed.
    pub fn is_connected(&self) -> bool {
        self.srtp_tx.is_some() && !self.closed
    }

    /// The server address media goes to.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// Starts a new window for `max_arrival_gap` (benchmarks measure a
    /// migration's blackout in it).
    pub fn reset_arrival_gaps(&mut self) {
        self.receiver.reset_arrival_gaps();
    }

    /// Everything counted so far.
    pub fn stats(&self) -> PeerStats {
        let mut s = self.stats.clone();
        s.connected = self.is_connected();
        s.sent = self.sender.streams();
        s.received = self.receiver.streams();
        s.ssrcs_seen = self.receiver.ssrcs_seen.clone();
        s.nack_packets_sent = self.receiver.nack_packets_sent;
        s.nacks_sent = self.receiver.nacks_sent;
        s.plis_sent = self.receiver.plis_sent;
        s.receiver_reports_sent = self.receiver.rrs_sent;
        s.twcc_feedback_sent = self.receiver.twcc_sent;
        s.nacks_received = self.sender.nacks_received;
        s.nack_misses = self.sender.nack_misses;
        s.plis_received = self.sender.plis_received;
        s.firs_received = self.sender.firs_received;
        s.retransmissions_sent = s.sent.iter().map(|x| x.retransmissions).sum();
        s.keyframes_sent = s.sent.iter().map(|x| x.keyframes).sum();
        s.forced_keyframes = self.sender.forced_keyframes;
        s.remb_bps = self.sender.remb_bps;
        s.sender_reports_sent = self.sender.srs_sent;
        s
    }

    /// How our ICE checks nominate from the next agent on (a new address, an ICE restart):
    /// aggressively (the default) or, as browsers do, regularly: media may then use a new path
    /// before the check that nominates it.
    pub fn set_nomination(&mut self, nomination: Nomination) {
        self.nomination = nomination;
    }

    /// Moves us to another local address (NAT rebinding, network change): the next datagrams
    /// come from `addr`, and a fresh check goes out at once so the server's ICE-lite agent
    /// switches its path.
    pub fn set_local_addr(&mut self, addr: SocketAddr) {
        self.config.local_addr = addr;
        self.new_ice_client();
    }

    /// Starts an ICE restart: new credentials, returned as the
    /// `application/trickle-ice-sdpfrag` body of a WHIP/WHEP PATCH. The current agent keeps
    /// running until [`Peer::apply_restart_answer`]. DTLS and SRTP continue unchanged.
    pub fn ice_restart(&mut self) -> String {
        let creds = random_credentials(&mut self.rng);
        let frag = offer::restart_frag(&self.plan, &creds);
        self.pending_ice = Some(creds);
        frag
    }

    /// Applies the server's restart answer (its new credentials, and its address if the frag
    /// carries a candidate: a migration to another node).
    pub fn apply_restart_answer(&mut self, frag: &str) -> Result<(), PeerError> {
        if self.pending_ice.is_none() {
            return Err(PeerError::NotRestarting);
        }
        let (remote_ice, candidates) = offer::read_restart_answer(frag)?;
        if let Some(local) = self.pending_ice.take() {
            self.local_ice = local;
        }
        self.remote_ice = Some(remote_ice);
        if let Some(&first) = candidates.first() {
            self.remote = Some(first);
            for c in candidates {
                if !self.known_remotes.contains(&c) {
                    self.known_remotes.push(c);
                }
            }
        }
        self.new_ice_client();
        Ok(())
    }

    /// Sends one encoded frame of the application's media ([`MediaSource::External`]): a raw
    /// VP8 frame or an H.264 Annex B access unit when `video`, else an Opus packet. It is
    /// packetized at once (VP8 with the peer's picture ID counter), kept for NACK repair, and
    /// queued SRTP-protected for [`Peer::poll_transmit`]. Its RTP timestamp is the previous
    /// frame's plus that frame's `duration` in the codec's clock; a stream's first frame takes
    /// the timestamp of `now`, so sender reports map NTP to RTP exactly while frames come in
    /// real time. `keyframe` is counted, and a keyframe answers any outstanding request.
    pub fn send_frame(
        &mut self,
        now: Instant,
        video: bool,
        data: &[u8],
        duration: Duration,
        keyframe: bool,
    ) -> Result<(), PeerError> {
        if self.config.media != MediaSource::External {
            return Err(PeerError::NotExternal);
        }
        if !self.is_connected() {
            return Err(PeerError::NotConnected);
        }
        self.last_now = now;
        let r = self
            .sender
            .send_frame(now, video, data, duration, keyframe, &mut self.plain);
        self.flush();
        r
    }

    /// Whether the server asked for a video keyframe (PLI or FIR) since the last call; an
    /// [`MediaSource::External`] publisher should then encode or send one soon.
    pub fn take_keyframe_request(&mut self) -> bool {
        std::mem::take(&mut self.sender.keyframe_request)
    }

    /// The next frame a viewer rebuilt ([`MediaSource::External`]), in order per stream. Video
    /// only resumes at a keyframe after a loss it could not repair.
    pub fn poll_frame(&mut self) -> Option<ReceivedFrame> {
        self.receiver.frames.pop_front()
    }

    /// Sends a PLI for every video stream now, whatever the throttle (after switching streams,
    /// say). Returns whether one went out.
    pub fn request_keyframe(&mut self, now: Instant) -> bool {
        if !self.is_connected() {
            return false;
        }
        self.last_now = now;
        let sent = self.receiver.request_keyframe(now, &mut self.plain);
        self.flush();
        sent
    }

    /// Stops producing synthetic media but stays connected: sender reports and NACK
    /// answers go on, so a test can let repairs finish before it checks.
    pub fn pause_media(&mut self) {
        self.sender.paused = true;
    }

    /// Stops sending: queues an RTCP BYE and a DTLS close_notify, then goes quiet. Datagrams
    /// already queued can still be polled.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        if self.srtp_tx.is_some() {
            self.sender.bye(&mut self.plain);
            if self.plain.is_empty() {
                self.receiver.bye(&mut self.plain);
            }
            self.flush();
        }
        if let Some(dtls) = self.dtls.as_mut() {
            dtls.close();
            let records: Vec<Vec<u8>> = std::iter::from_fn(|| dtls.poll_transmit()).collect();
            if let Some(to) = self.remote {
                self.out.extend(records.into_iter().map(|r| (to, r)));
            }
        }
        self.closed = true;
    }
}
