//! One peer connection on the node: its transport (ICE-lite, DTLS, SRTP)
//! and its tracks, as a publisher (receiving) or a viewer (sending).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::DtlsCertificate;
use ferry_proto::state::{SNAPSHOT_VERSION, SessionSnapshot};
use ferry_proto::{SessionId, StreamId};

use crate::dtls::{DtlsPhase, DtlsTransport, SrtpKeys};
use crate::ice::{IceCredentials, IceLite};
use crate::media::egress::OutgoingTrack;
use crate::media::ingest::IncomingTrack;
use crate::media::line::{MediaLine, RestoreError};
use crate::nack::NackConfig;
use crate::node::metrics::NodeMetrics;
use crate::node::signal::{SessionInfo, SessionKind};
use crate::rtcp::{self, ReportBlock};
use crate::srtp::{SrtpContext, SrtpProfile};

/// How long a session may take to connect (ICE + DTLS) before it is dropped.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// RTCP report interval.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Buffers kept for reuse.
const POOL_MAX: usize = 1024;
/// Capacity of a packet buffer: an MTU plus SRTP and RTX overhead.
pub const BUF_CAPACITY: usize = 1600;

/// A datagram to send.
#[derive(Debug)]
pub struct Transmit {
    /// Destination.
    pub to: SocketAddr,
    /// Bytes (a pooled buffer: hand it back with `Node::recycle`).
    pub data: Vec<u8>,
    /// Send through this edge (or forwarding node) at this ownership epoch,
    /// in a tunnel datagram (the node wraps it before handing it out).
    pub via: Option<Via>,
}

/// The path to a client through an edge or a forwarding node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Via {
    /// The edge's (or forwarding node's) cluster address.
    pub addr: SocketAddr,
    /// The sender's ownership epoch of the session.
    pub epoch: u64,
}

/// Something that happened to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// ICE and DTLS are up; media flows.
    Connected(SessionId),
    /// The session ended.
    Closed(SessionId, CloseReason),
    /// Dynacast: which of a publisher's simulcast encodings some consumer can use now, as
    /// `(mid, rid, active)`; an SDK publisher stops encoding the inactive ones.
    Layers(SessionId, Vec<(String, String, bool)>),
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// DELETE on its resource.
    Deleted,
    /// Its stream's publisher went away.
    PublisherGone,
    /// ICE consent expired.
    ConsentExpired,
    /// It never connected.
    ConnectTimeout,
    /// DTLS failed.
    DtlsFailed,
    /// The peer closed DTLS.
    PeerClosed,
    /// Its client reconnected with a ticket: a new transport took over.
    Replaced,
}

impl CloseReason {
    /// The reason as the `end` event names it.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Deleted => "deleted",
            CloseReason::PublisherGone => "publisher-gone",
            CloseReason::ConsentExpired => "consent-expired",
            CloseReason::ConnectTimeout => "connect-timeout",
            CloseReason::DtlsFailed => "dtls-failed",
            CloseReason::PeerClosed => "peer-closed",
            CloseReason::Replaced => "replaced",
        }
    }
}

/// The node's outbound side: queued datagrams, the buffer pool, counters
/// and events. Sessions write into it; the driver drains it.
#[derive(Debug, Default)]
pub struct Outbox {
    pool: Vec<Vec<u8>>,
    /// Datagrams waiting for the driver.
    pub queue: VecDeque<Transmit>,
    /// Events waiting for the driver.
    pub events: VecDeque<Event>,
    /// Node counters.
    pub metrics: NodeMetrics,
}

impl Outbox {
    /// An empty buffer with room for one packet.
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUF_CAPACITY));
        b.clear();
        b
    }

    /// Returns a buffer to the pool.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX && buf.capacity() >= BUF_CAPACITY {
            self.pool.push(buf);
        }
    }

    /// Queues a datagram.
    pub fn send(&mut self, to: SocketAddr, data: Vec<u8>) {
        self.send_via(to, None, data);
    }

    /// Queues a datagram for a client, through `via` when it is set.
    pub fn send_via(&mut self, to: SocketAddr, via: Option<Via>, data: Vec<u8>) {
        self.metrics.tx_datagrams += 1;
        self.metrics.tx_bytes += data.len() as u64;
        self.queue.push_back(Transmit { to, data, via });
    }
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for ICE.
    New,
    /// ICE up, DTLS handshaking.
    Connecting,
    /// SRTP keyed.
    Connected,
}

/// The tracks of a session.
#[derive(Debug)]
pub enum Role {
    /// Receives media.
    Publisher(Vec<IncomingTrack>),
    /// Sends media.
    Viewer(Vec<OutgoingTrack>),
}

/// One peer connection.
#[derive(Debug)]
pub struct Session {
    /// Its id.
    pub id: SessionId,
    /// Its stream.
    pub stream: StreamId,
    /// ICE-lite agent.
    pub ice: IceLite,
    /// DTLS association.
    pub dtls: DtlsTransport,
    /// Encrypts what we send.
    pub srtp_tx: Option<SrtpContext>,
    /// Decrypts what we receive.
    pub srtp_rx: Option<SrtpContext>,
    /// Negotiated m-lines.
    pub media: Vec<MediaLine>,
    /// Tracks.
    pub role: Role,
    /// Entity tag of the ICE state.
    pub etag: String,
    /// SSRC we send RTCP from.
    pub rtcp_ssrc: u32,
    /// Lifecycle.
    pub phase: Phase,
    /// When it was created.
    pub created: Instant,
    /// Next RTCP report.
    pub next_report: Instant,
    last_report: Instant,
    remb_bps: u64,
    /// The SDP answer we gave.
    pub answer: String,
    /// Sends media and reports (false while frozen or imported, before activation).
    pub active: bool,
    /// Ownership epoch (raised by every migration cutover).
    pub epoch: u64,
    /// The edge or forwarding node the client is reached through (`None`: directly).
    pub via: Option<SocketAddr>,
    /// WAL capture while the session is being migrated away.
    pub wal: Option<WalLog>,
    /// Highest WAL position applied while being migrated here.
    pub wal_applied: u64,
    /// Ticket generation (raised by each resumption with a ticket).
    pub ticket_generation: u32,
    /// Viewer: video is not forwarded (its client is in degraded mode).
    pub video_paused: bool,
    /// Viewer: its link's estimate and what it was allocated ([`crate::media::adapt`]).
    pub adapt: crate::media::adapt::viewer::ViewerAdapt,
    /// Publisher: the transport-wide sequence number extension's id and the arrivals that its
    /// transport-wide CC feedback reports (its send-side bandwidth estimate runs on them).
    pub twcc_rx: Option<(u8, crate::twcc::TwccRecorder)>,
}

/// WAL records captured for a migration.
#[derive(Debug, Default)]
pub struct WalLog {
    /// Position of the next record.
    pub next: u64,
    /// Records not yet taken.
    pub records: Vec<ferry_proto::state::WalRecord>,
    /// Bytes of the records not yet taken.
    pub bytes: usize,
    /// Records were lost because the capture was full.
    pub overflowed: bool,
}

/// Records a WAL may hold before the capture gives up (the migration then
/// fails instead of exhausting memory).
pub const WAL_MAX_RECORDS: usize = 20_000;

impl WalLog {
    /// A capture whose first record gets position 1.
    pub fn new() -> Self {
        Self {
            next: 1,
            ..Self::default()
        }
    }

    /// Records a packet added to a publisher track's cache. Returns false
    /// once the capture is full.
    pub fn cache_packet(&mut self, track: usize, ssrc: u32, ext_seq: u64, data: &[u8]) -> bool {
        use ferry_proto::state::{WalCachePacket, WalRecord, wal_record::Change};
        if self.records.len() >= WAL_MAX_RECORDS {
            self.overflowed = true;
            return false;
        }
        self.bytes += data.len();
        self.records.push(WalRecord {
            position: self.next,
            change: Some(Change::CachePacket(WalCachePacket {
                track: track as u32,
                ssrc,
                ext_seq,
                data: data.to_vec(),
            })),
        });
        self.next += 1;
        true
    }
}

/// Settings sessions need from the node.
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// NACK pacing.
    pub nack: NackConfig,
    /// NACK cache size per stream.
    pub cache: usize,
    /// Least time between keyframe requests of a stream upstream.
    pub pli_throttle: crate::media::ingest::KeyframeThrottle,
    /// REMB bounds.
    pub remb_min_bps: u64,
    /// REMB upper bound.
    pub remb_max_bps: u64,
}

impl Session {
    /// A new session from a negotiation.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: SessionId,
        stream: StreamId,
        ice: IceLite,
        dtls: DtlsTransport,
        media: Vec<MediaLine>,
        role: Role,
        rtcp_ssrc: u32,
        answer: String,
        now: Instant,
        cfg: &SessionConfig,
    ) -> Self {
        let etag = etag_for(ice.local());
        let adapt = viewer_adapt(&media, &role);
        let twcc_rx = twcc_recorder(&media, &role);
        Self {
            id,
            stream,
            ice,
            dtls,
            srtp_tx: None,
            srtp_rx: None,
            media,
            role,
            etag,
            rtcp_ssrc,
            phase: Phase::New,
            created: now,
            next_report: now + REPORT_INTERVAL,
            last_report: now,
            remb_bps: cfg.remb_max_bps,
            answer,
            active: true,
            epoch: 1,
            via: None,
            wal: None,
            wal_applied: 0,
            ticket_generation: 0,
            video_paused: false,
            twcc_rx,
            adapt,
        }
    }

    /// Viewer: what its link carries, if it says (`None`: no limit known).
    pub fn estimate_bps(&self) -> Option<u64> {
        self.adapt.estimate_bps()
    }

    /// Viewer: notes what the allocator gave it with `estimate_bps`.
    pub fn note_allocation(
        &mut self,
        estimate_bps: u64,
        a: &crate::media::adapt::allocator::Allocation,
    ) {
        self.adapt.note_allocation(estimate_bps, a);
    }

    /// Publish or view.
    pub fn kind(&self) -> SessionKind {
        match self.role {
            Role::Publisher(_) => SessionKind::Publish,
            Role::Viewer(_) => SessionKind::View,
        }
    }

    /// The tunnel path to the client, if it is reached through an edge or a
    /// forwarding node.
    pub fn path(&self) -> Option<Via> {
        self.via.map(|addr| Via {
            addr,
            epoch: self.epoch,
        })
    }

    /// Where we send: the nominated address, else the last that passed a check.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.ice.selected().or(self.ice.candidate())
    }

    /// Listing entry.
    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            stream: self.stream.clone(),
            kind: self.kind(),
            state: match self.phase {
                Phase::New => "new",
                Phase::Connecting => "connecting",
                Phase::Connected => "connected",
            },
        }
    }

    /// Installs SRTP from the DTLS-exported keys.
    pub fn install_srtp(&mut self, keys: &SrtpKeys) -> bool {
        let Some(profile) = SrtpProfile::from_dtls_id(keys.profile) else {
            return false;
        };
        match (
            SrtpContext::new(profile, &keys.local_key, &keys.local_salt),
            SrtpContext::new(profile, &keys.remote_key, &keys.remote_salt),
        ) {
            (Ok(tx), Ok(rx)) => {
                self.srtp_tx = Some(tx);
                self.srtp_rx = Some(rx);
                self.phase = Phase::Connected;
                true
            }
            _ => false,
        }
    }

    /// Moves DTLS output (records, events) along. Returns a close reason
    /// if DTLS failed or the peer closed it.
    pub fn flush_dtls(&mut self, out: &mut Outbox) -> Option<CloseReason> {
        let to = self.remote_addr().filter(|_| self.active);
        let via = self.path();
        while let Some(rec) = self.dtls.poll_transmit() {
            if let Some(to) = to {
                out.send_via(to, via, rec);
            }
        }
        let mut reason = None;
        while let Some(ev) = self.dtls.poll_event() {
            match ev {
                crate::dtls::DtlsEvent::Connected(keys) => {
                    if self.install_srtp(&keys) {
                        out.metrics.sessions_connected += 1;
                        out.events.push_back(Event::Connected(self.id.clone()));
                    } else {
                        reason = Some(CloseReason::DtlsFailed);
                    }
                }
                crate::dtls::DtlsEvent::Failed(_) => {
                    out.metrics.dtls_failures += 1;
                    reason = Some(CloseReason::DtlsFailed);
                }
                crate::dtls::DtlsEvent::Closed => reason = Some(CloseReason::PeerClosed),
            }
        }
        reason
    }

    /// Encrypts `buf[..len]` as SRTP and queues it.
    pub fn send_rtp(&mut self, now: Instant, out: &mut Outbox, buf: Vec<u8>, len: usize) -> bool {
        self.send_rtp_probe(now, out, buf, len, None)
    }

    /// [`Session::send_rtp`] for a packet of probe cluster `probe` (padding a viewer's
    /// bandwidth estimator asked for).
    pub fn send_rtp_probe(
        &mut self,
        now: Instant,
        out: &mut Outbox,
        mut buf: Vec<u8>,
        len: usize,
        probe: Option<u32>,
    ) -> bool {
        let via = self.path();
        let (true, Some(to), Some(tx)) = (self.active, self.remote_addr(), self.srtp_tx.as_mut())
        else {
            out.recycle(buf);
            return false;
        };
        let mut len = len;
        if let Some(id) = self.adapt.twcc_ext {
            // Every packet to a viewer that negotiated transport-wide CC carries its sequence
            // number (media, retransmissions, probes): its feedback is what the estimate
            // comes from.
            buf.truncate(len);
            if let Ok(at) = crate::rtp::ensure_extension(&mut buf, id, 2) {
                let size = buf.len() + tx.profile().rtp_overhead();
                let seq = self.adapt.stamp(now, size, probe);
                buf[at..at + 2].copy_from_slice(&seq.to_be_bytes());
            }
            len = buf.len();
        }
        buf.resize(len + tx.profile().rtp_overhead(), 0);
        match tx.protect_rtp(&mut buf, len) {
            Ok(n) => {
                buf.truncate(n);
                out.send_via(to, via, buf);
                true
            }
            Err(_) => {
                out.recycle(buf);
                false
            }
        }
    }

    /// Builds an RTCP compound with `build` (which returns its length, 0 to
    /// send nothing), encrypts it as SRTCP and queues it.
    pub fn send_rtcp(&mut self, out: &mut Outbox, build: impl FnOnce(&mut [u8]) -> usize) {
        let via = self.path();
        let (true, Some(to), Some(tx)) = (self.active, self.remote_addr(), self.srtp_tx.as_mut())
        else {
            return;
        };
        let mut buf = out.buffer();
        buf.resize(1400, 0);
        let n = build(&mut buf[..1200]);
        if n == 0 {
            out.recycle(buf);
            return;
        }
        match tx.protect_rtcp(&mut buf, n) {
            Ok(m) => {
                buf.truncate(m);
                out.send_via(to, via, buf);
            }
            Err(_) => out.recycle(buf),
        }
    }

    /// Sends pending keyframe requests (PLI, or FIR where only that was
    /// negotiated) that the throttle allows.
    pub fn send_keyframe_requests(&mut self, now: Instant, cfg: &SessionConfig, out: &mut Outbox) {
        let Role::Publisher(tracks) = &mut self.role else {
            return;
        };
        let mut due = Vec::new();
        for t in tracks.iter_mut() {
            t.take_keyframe_requests(now, cfg.pli_throttle, &mut due);
        }
        let sender = self.rtcp_ssrc;
        for (ssrc, fir, seq) in due {
            out.metrics.plis_sent += 1;
            self.send_rtcp(out, |b| {
                let n = rtcp::write_receiver_report(b, sender, &[]).unwrap_or(0);
                let m = if fir {
                    rtcp::write_fir(&mut b[n..], sender, &[(ssrc, seq)])
                } else {
                    rtcp::write_pli(&mut b[n..], sender, ssrc)
                };
                m.map_or(0, |m| n + m)
            });
        }
    }

    /// Timer work of a publisher: NACKs, keyframe requests, reports.
    pub fn publisher_timeout(&mut self, now: Instant, cfg: &SessionConfig, out: &mut Outbox) {
        let sender = self.rtcp_ssrc;
        let mut lists = Vec::new();
        if let Role::Publisher(tracks) = &mut self.role {
            let mut gave_up = 0;
            for t in tracks.iter_mut() {
                gave_up += t.poll_nacks(now, &mut lists);
            }
            out.metrics.nack_gave_up += gave_up as u64;
        }
        for (ssrc, seqs) in lists {
            out.metrics.nacks_sent += seqs.len() as u64;
            for chunk in seqs.chunks(64) {
                self.send_rtcp(out, |b| {
                    let n = rtcp::write_receiver_report(b, sender, &[]).unwrap_or(0);
                    rtcp::write_nack(&mut b[n..], sender, ssrc, chunk).map_or(0, |m| n + m)
                });
            }
        }
        self.send_keyframe_requests(now, cfg, out);
        self.send_twcc_feedback(now, out);
        if now >= self.next_report {
            self.publisher_report(now, cfg, out);
        }
    }

    /// Publisher: the transport-wide CC feedback that is due (every 50 ms while media comes).
    fn send_twcc_feedback(&mut self, now: Instant, out: &mut Outbox) {
        let sender = self.rtcp_ssrc;
        let media_ssrc = match &self.role {
            Role::Publisher(tracks) => tracks
                .iter()
                .find_map(|t| t.streams.first().map(|s| s.ssrc))
                .unwrap_or(0),
            Role::Viewer(_) => return,
        };
        let mut packets: Vec<Vec<u8>> = Vec::new();
        if let Some((_, rec)) = self.twcc_rx.as_mut() {
            let mut buf = [0u8; 1200];
            while let Some(n) = rec.poll_feedback(now, sender, media_ssrc, &mut buf) {
                packets.push(buf[..n].to_vec());
            }
        }
        for p in packets {
            out.metrics.twcc_feedback_sent += 1;
            self.send_rtcp(out, |b| {
                b[..p.len()].copy_from_slice(&p);
                p.len()
            });
        }
    }

    fn publisher_report(&mut self, now: Instant, cfg: &SessionConfig, out: &mut Outbox) {
        let interval = now.saturating_duration_since(self.last_report);
        self.last_report = now;
        self.next_report = now + REPORT_INTERVAL;
        let Role::Publisher(tracks) = &mut self.role else {
            return;
        };
        let mut blocks: Vec<ReportBlock> = Vec::new();
        let mut video_bps = 0;
        let mut worst_loss = 0u8;
        let mut remb_ssrcs = Vec::new();
        let mut remb = false;
        for t in tracks.iter_mut() {
            let first = blocks.len();
            t.report(now, interval, &mut blocks);
            if t.line.video {
                video_bps += t.bitrate_bps();
                worst_loss = blocks[first..]
                    .iter()
                    .map(|b| b.fraction_lost)
                    .fold(worst_loss, u8::max);
                remb_ssrcs.extend(t.streams.iter().map(|s| s.ssrc));
            }
            remb |= t.line.remb;
        }
        let loss = f64::from(worst_loss) / 256.0;
        self.remb_bps = if loss > 0.10 {
            ((video_bps as f64 * (1.0 - loss / 2.0)) as u64).max(cfg.remb_min_bps)
        } else if loss < 0.02 {
            (self.remb_bps + self.remb_bps / 12)
                .max(video_bps * 3 / 2)
                .min(cfg.remb_max_bps)
        } else {
            self.remb_bps
        };
        let sender = self.rtcp_ssrc;
        let remb_bps = self.remb_bps;
        blocks.truncate(31);
        self.send_rtcp(out, |b| {
            let Ok(n) = rtcp::write_receiver_report(b, sender, &blocks) else {
                return 0;
            };
            if remb && !remb_ssrcs.is_empty() {
                n + rtcp::write_remb(&mut b[n..], sender, remb_bps, &remb_ssrcs).unwrap_or(0)
            } else {
                n
            }
        });
    }

    /// Timer work of a viewer: sender reports. `projection(i)` gives the
    /// source (NTP, extended RTP timestamp) for the viewer's track `i`.
    pub fn viewer_report(
        &mut self,
        now: Instant,
        ntp_now: u64,
        projections: &[Option<(u64, u64)>],
        out: &mut Outbox,
    ) {
        self.last_report = now;
        self.next_report = now + REPORT_INTERVAL;
        let Role::Viewer(tracks) = &self.role else {
            return;
        };
        let cname = format!("ferry-{}", self.stream);
        let mut buf = [0u8; 1200];
        let mut n = 0;
        for (i, t) in tracks.iter().enumerate() {
            let p = projections.get(i).copied().flatten();
            n += t.write_report(&mut buf[n..], ntp_now, p, &cname);
            if n > 1000 {
                break;
            }
        }
        if n > 0 {
            self.send_rtcp(out, |b| {
                b[..n].copy_from_slice(&buf[..n]);
                n
            });
        }
    }

    /// Sends RTCP BYE for the SSRCs we send and close_notify.
    pub fn say_goodbye(&mut self, out: &mut Outbox) {
        if self.phase == Phase::Connected {
            let ssrcs: Vec<u32> = match &self.role {
                Role::Viewer(tracks) => tracks.iter().map(|t| t.line.local_ssrc).collect(),
                Role::Publisher(_) => vec![self.rtcp_ssrc],
            };
            let sender = self.rtcp_ssrc;
            self.send_rtcp(out, |b| {
                let n = rtcp::write_receiver_report(b, sender, &[]).unwrap_or(0);
                rtcp::write_bye(&mut b[n..], &ssrcs).map_or(0, |m| n + m)
            });
        }
        self.dtls.close();
        let _ = self.flush_dtls(out);
    }

    /// When this session next needs `handle_timeout`.
    pub fn poll_timeout(&self, cfg: &SessionConfig) -> Option<Instant> {
        if !self.active {
            return None;
        }
        let mut t = self.dtls.poll_timeout();
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |y| y.min(x)));
            }
        };
        match self.phase {
            Phase::New | Phase::Connecting => min(Some(self.created + CONNECT_TIMEOUT)),
            Phase::Connected => {
                min(Some(self.next_report));
                min(self.ice.poll_timeout());
                min(self.adapt.poll_timeout());
                min(self.twcc_rx.as_ref().and_then(|(_, r)| r.poll_timeout()));
                if let Role::Publisher(tracks) = &self.role {
                    for tr in tracks {
                        min(tr.nack_deadline());
                        min(tr.keyframe_deadline(cfg.pli_throttle));
                    }
                }
            }
        }
        t
    }

    /// Exports the whole session.
    pub fn snapshot(&self, now: Instant) -> SessionSnapshot {
        let (incoming, outgoing) = match &self.role {
            Role::Publisher(t) => (t.iter().map(|t| t.snapshot(now)).collect(), Vec::new()),
            Role::Viewer(t) => (Vec::new(), t.iter().map(|t| t.snapshot(now)).collect()),
        };
        SessionSnapshot {
            version: SNAPSHOT_VERSION,
            session_id: self.id.to_string(),
            stream: self.stream.to_string(),
            publisher: matches!(self.role, Role::Publisher(_)),
            ice: Some(self.ice.snapshot(now)),
            dtls: Some(self.dtls.snapshot()),
            srtp_tx: self.srtp_tx.as_ref().map(SrtpContext::snapshot),
            srtp_rx: self.srtp_rx.as_ref().map(SrtpContext::snapshot),
            media: self.media.iter().map(MediaLine::to_state).collect(),
            incoming,
            outgoing,
            rtcp_ssrc: self.rtcp_ssrc,
            answer_sdp: self.answer.clone(),
            age_ms: crate::time::age_ms(now, self.created),
            remb_bps: self.remb_bps,
            epoch: self.epoch,
            via: self.via.map(|v| v.to_string()).unwrap_or_default(),
            origin: String::new(),
            relay_to: Vec::new(),
            ticket_generation: self.ticket_generation,
            video_paused: self.video_paused,
            adapt: matches!(self.role, Role::Viewer(_)).then(|| self.adapt.snapshot(now)),
        }
    }

    /// Rebuilds a session from a snapshot taken anywhere.
    pub fn restore(
        s: &SessionSnapshot,
        cfg: &SessionConfig,
        dtls_config: Arc<crate::dtls::DtlsConfig>,
        now: Instant,
    ) -> Result<Self, RestoreError> {
        if s.version > SNAPSHOT_VERSION {
            return Err(RestoreError::NewerVersion {
                got: s.version,
                ours: SNAPSHOT_VERSION,
            });
        }
        let id = SessionId::new(s.session_id.clone())?;
        let stream = StreamId::new(s.stream.clone())?;
        let ice = IceLite::restore(s.ice.as_ref().ok_or(RestoreError::Missing("ICE"))?, now);
        let dtls_state = s.dtls.as_ref().ok_or(RestoreError::Missing("DTLS"))?;
        let dtls = DtlsTransport::restore(dtls_state, dtls_config, now);
        let media = s
            .media
            .iter()
            .map(MediaLine::from_state)
            .collect::<Result<Vec<_>, _>>()?;
        let line = |i: usize| media.get(i).cloned().ok_or(RestoreError::NoSuchLine(i));
        let role = if s.publisher {
            let mut tracks = Vec::new();
            for t in &s.incoming {
                let l = line(t.index as usize)?;
                tracks.push(IncomingTrack::restore(t, l, cfg.nack, cfg.cache, now));
            }
            Role::Publisher(tracks)
        } else {
            let mut tracks = Vec::new();
            for t in &s.outgoing {
                let l = line(t.index as usize)?;
                tracks.push(OutgoingTrack::restore(t, l, now));
            }
            Role::Viewer(tracks)
        };
        let srtp = |c: &Option<ferry_proto::state::srtp::SrtpContextState>| {
            c.as_ref().map(SrtpContext::restore).transpose()
        };
        let srtp_tx = srtp(&s.srtp_tx)?;
        let srtp_rx = srtp(&s.srtp_rx)?;
        let phase =
            if srtp_tx.is_some() && srtp_rx.is_some() && dtls.phase() == DtlsPhase::Connected {
                Phase::Connected
            } else if ice.selected().is_some() {
                Phase::Connecting
            } else {
                Phase::New
            };
        let etag = etag_for(ice.local());
        let adapt = match (&s.adapt, viewer_adapt(&media, &role)) {
            (Some(a), fresh) => crate::media::adapt::viewer::ViewerAdapt::restore(
                a,
                fresh.twcc_ext,
                fresh.estimate_bps().is_some(),
                now,
            ),
            (None, fresh) => fresh,
        };
        let twcc_rx = twcc_recorder(&media, &role);
        Ok(Self {
            id,
            stream,
            ice,
            dtls,
            srtp_tx,
            srtp_rx,
            media,
            role,
            etag,
            rtcp_ssrc: s.rtcp_ssrc,
            phase,
            created: crate::time::from_age_ms(now, s.age_ms),
            next_report: now + REPORT_INTERVAL,
            last_report: now,
            remb_bps: if s.remb_bps == 0 {
                cfg.remb_max_bps
            } else {
                s.remb_bps
            },
            answer: s.answer_sdp.clone(),
            active: true,
            epoch: s.epoch.max(1),
            via: if s.via.is_empty() {
                None
            } else {
                Some(
                    s.via
                        .parse()
                        .map_err(|_| RestoreError::BadVia(s.via.clone()))?,
                )
            },
            wal: None,
            wal_applied: 0,
            ticket_generation: s.ticket_generation,
            video_paused: s.video_paused,
            twcc_rx,
            adapt,
        })
    }
}

/// A publisher's transport-wide CC receive side, if it negotiated it.
fn twcc_recorder(media: &[MediaLine], role: &Role) -> Option<(u8, crate::twcc::TwccRecorder)> {
    if !matches!(role, Role::Publisher(_)) {
        return None;
    }
    let id = media
        .iter()
        .filter(|m| m.accepted && m.twcc)
        .find_map(|m| m.ext_id(ferry_rtc::sdp::extmap::EXT_TRANSPORT_CC))?;
    Some((id, crate::twcc::TwccRecorder::default()))
}

/// A viewer's adaptation from what it negotiated: transport-wide CC (the sequence number
/// extension's id: one per BUNDLE transport, the first line's that has it), else REMB.
fn viewer_adapt(media: &[MediaLine], role: &Role) -> crate::media::adapt::viewer::ViewerAdapt {
    if !matches!(role, Role::Viewer(_)) {
        return crate::media::adapt::viewer::ViewerAdapt::new(None, false);
    }
    let twcc = media
        .iter()
        .filter(|m| m.accepted && m.twcc)
        .find_map(|m| m.ext_id(ferry_rtc::sdp::extmap::EXT_TRANSPORT_CC));
    let remb = media.iter().any(|m| m.accepted && m.remb);
    crate::media::adapt::viewer::ViewerAdapt::new(twcc, remb)
}

/// The entity tag of a session's ICE state: changes exactly on ICE restart.
pub fn etag_for(local: &IceCredentials) -> String {
    format!("\"{}\"", local.ufrag)
}

/// A certificate shared by the node's sessions.
pub type SharedCert = Arc<DtlsCertificate>;
