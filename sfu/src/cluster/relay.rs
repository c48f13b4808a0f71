//! Cascade relay between nodes (DESIGN §2): a stream published on node A
//! is relayed to node B while B has viewers of it. Inside the cluster a relayed
//! RTP packet travels encrypted and authenticated on the nodes' media sockets
//! (AES-128-GCM keyed from the cluster key, with replay protection:
//! [`relay_seal`](super::relay_seal)); control messages are authenticated the same way.
//!
//! Relay media carries the origin's extended sequence number and timestamp,
//! so every node numbers a stream's packets the same way: a munger moved
//! between nodes (viewer migration) or a source that moves (publisher
//! migration) continues without a seam.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferry_proto::StreamId;
use ferry_proto::state::MediaLineState;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::relay_seal::{ENVELOPE, RelayOpener, RelaySealer, SEAL_TAG, SealError, SealKeys};
use crate::media::line::MediaLine;
use crate::media::munger::SourcePacket;
use crate::nack::{Arrival, NackConfig, NackGenerator, PacketCache};

/// First byte of relay media datagrams (unassigned in RFC 7983).
pub const MEDIA: u8 = 0xF0;
/// First byte of relay control datagrams.
pub const CONTROL: u8 = 0xF1;
/// 2: sealed by [`RelaySealer`] (1 was an HMAC tag over plain RTP).
const VERSION: u8 = 2;
/// Bytes of the truncated HMAC tag of tickets and tunnel datagrams.
pub const TAG_LEN: usize = 16;
/// Media header: kind, version, flags, track, relay id, ext seq, ext ts, VP8 pic, VP8 tl0.
const MEDIA_HEADER: usize = 1 + 1 + 1 + 1 + 4 + 8 + 8 + 2 + 1;
/// A subscription lapses without a refresh for this long.
pub const SUBSCRIPTION_TTL: Duration = Duration::from_secs(5);
/// Subscribers refresh (and re-ask for the offer) this often.
pub const REFRESH: Duration = Duration::from_secs(1);

const FLAG_KEYFRAME: u8 = 1;
const FLAG_VP8: u8 = 2;
const FLAG_TL0: u8 = 4;

/// Why a relay datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// Too short or wrong version.
    #[error("malformed relay datagram")]
    Malformed,
    /// The authentication tag does not match the cluster key.
    #[error("relay datagram failed authentication")]
    BadTag,
    /// A sealed datagram seen before (or older than the receiver's window): a replay.
    #[error("relay datagram replayed")]
    Replayed,
    /// Relaying is not configured on this node.
    #[error("relay disabled")]
    Disabled,
}

impl From<SealError> for RelayError {
    fn from(e: SealError) -> Self {
        match e {
            SealError::Malformed => Self::Malformed,
            SealError::BadTag => Self::BadTag,
            SealError::Replayed => Self::Replayed,
        }
    }
}

/// The cluster key: it seals relay traffic ([`SealKeys`]) and authenticates tickets and the
/// edge tunnel.
#[derive(Clone)]
pub struct ClusterKey(Hmac<Sha256>, SealKeys);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// A key from 32 secret bytes.
    pub fn new(secret: &[u8; 32]) -> Self {
        // HMAC takes keys of any length, so this cannot fail.
        Self(
            <Hmac<Sha256> as KeyInit>::new_from_slice(secret).unwrap_or_else(|_| unreachable!()),
            SealKeys::new(secret),
        )
    }

    /// The keys that seal relay datagrams.
    pub fn seal_keys(&self) -> SealKeys {
        self.1.clone()
    }

    fn tag(&self, data: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = self.0.clone();
        mac.update(data);
        let full = mac.finalize().into_bytes();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full[..TAG_LEN]);
        t
    }

    /// Appends the tag to `buf`.
    pub fn seal(&self, buf: &mut Vec<u8>) {
        let t = self.tag(buf);
        buf.extend_from_slice(&t);
    }

    /// Checks and strips the tag; returns the authenticated part.
    pub fn open<'a>(&self, data: &'a [u8]) -> Result<&'a [u8], RelayError> {
        if data.len() < TAG_LEN + 2 {
            return Err(RelayError::Malformed);
        }
        let (body, tag) = data.split_at(data.len() - TAG_LEN);
        let want = self.tag(body);
        if bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], tag)) {
            Ok(body)
        } else {
            Err(RelayError::BadTag)
        }
    }
}

/// One relayed media packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaHeader {
    /// The origin's id for the relayed stream.
    pub relay_id: u32,
    /// Index of the publisher's m-line.
    pub track: u8,
    /// The packet as the origin's munger input sees it.
    pub src: SourcePacket,
}

/// Writes a relay media datagram (clear header, envelope, encrypted RTP packet, tag) into
/// `out`.
pub fn write_media(seal: &mut RelaySealer, h: &MediaHeader, rtp: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut flags = 0;
    if h.src.keyframe_start {
        flags |= FLAG_KEYFRAME;
    }
    let (pic, tl0) = match h.src.vp8 {
        Some((pic, tl0)) => {
            flags |= FLAG_VP8;
            if tl0.is_some() {
                flags |= FLAG_TL0;
            }
            (pic, tl0.unwrap_or(0))
        }
        None => (0, 0),
    };
    out.extend_from_slice(&[MEDIA, VERSION, flags, h.track]);
    out.extend_from_slice(&h.relay_id.to_be_bytes());
    out.extend_from_slice(&h.src.ext_seq.to_be_bytes());
    out.extend_from_slice(&h.src.ext_ts.to_be_bytes());
    out.extend_from_slice(&pic.to_be_bytes());
    out.push(tl0);
    out.extend_from_slice(rtp);
    seal.seal(out, MEDIA_HEADER, true);
}

/// Reads a sealed relay media datagram, decrypting it in place: the header and the RTP
/// packet. `clock_rate` of the returned source is filled by the caller from the track.
pub fn read_media<'a>(
    open: &mut RelayOpener,
    data: &'a mut [u8],
) -> Result<(MediaHeader, &'a [u8]), RelayError> {
    if data.len() < MEDIA_HEADER + ENVELOPE + 12 + SEAL_TAG
        || data[0] != MEDIA
        || data[1] != VERSION
    {
        return Err(RelayError::Malformed);
    }
    let mut head = [0u8; MEDIA_HEADER];
    head.copy_from_slice(&data[..MEDIA_HEADER]);
    let rtp = open
        .open(data, MEDIA_HEADER, true)
        .map_err(RelayError::from)?;
    let flags = head[2];
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[i..i + 8]);
        u64::from_be_bytes(b)
    };
    let relay_id = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let ext_seq = u64_at(8);
    let ext_ts = u64_at(16);
    let pic = u16::from_be_bytes([head[24], head[25]]);
    let tl0 = head[26];
    let ssrc = u32::from_be_bytes([rtp[8], rtp[9], rtp[10], rtp[11]]);
    Ok((
        MediaHeader {
            relay_id,
            track: head[3],
            src: SourcePacket {
                ssrc,
                ext_seq,
                ext_ts,
                keyframe_start: flags & FLAG_KEYFRAME != 0,
                clock_rate: 0,
                vp8: (flags & FLAG_VP8 != 0)
                    .then_some((pic, (flags & FLAG_TL0 != 0).then_some(tl0))),
                dd_frame: None,
            },
        },
        rtp,
    ))
}

/// Relay control messages (prost, behind [`CONTROL`] and a version byte).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Control {
    /// The message.
    #[prost(oneof = "control::Body", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub body: Option<control::Body>,
}

/// Relay control bodies.
pub mod control {
    /// One control message.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Body {
        /// Subscriber → origin: relay `stream` to me (refreshed every second).
        #[prost(message, tag = "1")]
        Subscribe(super::Subscribe),
        /// Origin → subscriber: the stream's id and tracks.
        #[prost(message, tag = "2")]
        Offer(super::Offer),
        /// Subscriber → origin: stop.
        #[prost(message, tag = "3")]
        Unsubscribe(super::Subscribe),
        /// Subscriber → origin: packets lost on the relay link.
        #[prost(message, tag = "4")]
        Nack(super::RelayNack),
        /// Subscriber → origin: a viewer needs a keyframe.
        #[prost(message, tag = "5")]
        KeyframeRequest(super::RelayTrack),
        /// Origin → subscriber: the NTP↔RTP mapping of a track.
        #[prost(message, tag = "6")]
        SenderReport(super::RelaySr),
        /// Origin → subscriber: subscribe elsewhere (the origin serves its fan-out already, or
        /// a relaying node stops relaying).
        #[prost(message, tag = "7")]
        Redirect(super::Redirect),
    }
}

/// `Subscribe` / `Unsubscribe`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Subscribe {
    /// Stream name.
    #[prost(string, tag = "1")]
    pub stream: String,
    /// The subscriber's source one level down went silent: the origin relays to it directly
    /// even past its fan-out (no second redirect to a parent that may be dead).
    #[prost(bool, tag = "2")]
    pub direct: bool,
    /// The subscriber's load where the stream would be relayed on from (its sessions and relay
    /// links): an origin past its fan-out sends newcomers to the least loaded direct subscriber.
    #[prost(uint32, tag = "3")]
    pub load: u32,
}

impl Subscribe {
    /// A plain subscription to (or `Unsubscribe` from) `stream`: not direct, no load said.
    pub fn of(stream: &ferry_proto::StreamId) -> Self {
        Self {
            stream: stream.to_string(),
            ..Default::default()
        }
    }
}

/// `Offer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Offer {
    /// Stream name.
    #[prost(string, tag = "1")]
    pub stream: String,
    /// The id media datagrams carry.
    #[prost(uint32, tag = "2")]
    pub relay_id: u32,
    /// The publisher's negotiated m-lines.
    #[prost(message, repeated, tag = "3")]
    pub media: Vec<MediaLineState>,
    /// False: the origin no longer has this stream.
    #[prost(bool, tag = "4")]
    pub live: bool,
    /// Not live here because the publisher moved: the new origin's cluster
    /// address (subscribers follow it).
    #[prost(string, tag = "5")]
    pub moved_to: String,
    /// Live here because the publisher moved here from this origin (a
    /// subscriber of that origin switches to the sender).
    #[prost(string, tag = "6")]
    pub previous_origin: String,
}

/// `Redirect`: the relay tree's second level (DESIGN §2). An origin that relays a stream to
/// `--relay-fanout` nodes already sends a new subscriber on to one of them, which relays what it
/// receives on; a relaying node whose own use of the stream ends sends its subscribers back to
/// its origin.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Redirect {
    /// Stream name.
    #[prost(string, tag = "1")]
    pub stream: String,
    /// Cluster address to subscribe at instead; empty: the stream's origin in the directory.
    #[prost(string, tag = "2")]
    pub via: String,
}

/// `Nack`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelayNack {
    /// Relay id.
    #[prost(uint32, tag = "1")]
    pub relay_id: u32,
    /// Track index.
    #[prost(uint32, tag = "2")]
    pub track: u32,
    /// Media SSRC.
    #[prost(uint32, tag = "3")]
    pub ssrc: u32,
    /// Extended sequence numbers.
    #[prost(uint64, repeated, tag = "4")]
    pub ext_seqs: Vec<u64>,
}

/// A track of a relayed stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelayTrack {
    /// Relay id.
    #[prost(uint32, tag = "1")]
    pub relay_id: u32,
    /// Track index.
    #[prost(uint32, tag = "2")]
    pub track: u32,
    /// The stream (simulcast layer) whose keyframe is wanted; 0: every stream of the track.
    #[prost(uint32, tag = "3")]
    pub ssrc: u32,
}

/// `SenderReport`: the origin's projection at send time.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelaySr {
    /// Relay id.
    #[prost(uint32, tag = "1")]
    pub relay_id: u32,
    /// Track index.
    #[prost(uint32, tag = "2")]
    pub track: u32,
    /// NTP time.
    #[prost(uint64, tag = "3")]
    pub ntp: u64,
    /// Extended RTP timestamp at that NTP time.
    #[prost(uint64, tag = "4")]
    pub ext_ts: u64,
    /// The stream (simulcast layer) it maps: each has a timestamp base of its own. 0: the
    /// track's top layer (what an origin of an older version sends).
    #[prost(uint32, tag = "5")]
    pub ssrc: u32,
}

/// Encodes a control message (kind byte, version, envelope, protobuf in clear, tag).
pub fn write_control(seal: &mut RelaySealer, c: &Control) -> Vec<u8> {
    let mut out = vec![CONTROL, VERSION];
    prost::Message::encode(c, &mut out).unwrap_or_default();
    seal.seal(&mut out, 2, false);
    out
}

/// Decodes an authenticated control message.
pub fn read_control(open: &mut RelayOpener, data: &mut [u8]) -> Result<Control, RelayError> {
    if data.len() < 2 || data[0] != CONTROL || data[1] != VERSION {
        return Err(RelayError::Malformed);
    }
    let body = open.open(data, 2, false).map_err(RelayError::from)?;
    <Control as prost::Message>::decode(body).map_err(|_| RelayError::Malformed)
}

/// The relay id of a relay media datagram, from its header alone (not authenticated: for
/// routing to the shard that checks it).
pub fn peek_media_relay_id(data: &[u8]) -> Option<u32> {
    match data {
        [MEDIA, VERSION, _, _, a, b, c, d, ..]
            if data.len() >= MEDIA_HEADER + ENVELOPE + 12 + SEAL_TAG =>
        {
            Some(u32::from_be_bytes([*a, *b, *c, *d]))
        }
        _ => None,
    }
}

/// The relay id a relay control datagram is about (a subscription names the stream), without
/// checking its tag (for routing to the shard that checks it).
pub fn peek_control_relay_id(data: &[u8]) -> Option<u32> {
    if data.len() < 2 + ENVELOPE + SEAL_TAG || data[0] != CONTROL || data[1] != VERSION {
        return None;
    }
    let c = <Control as prost::Message>::decode(&data[2 + ENVELOPE..data.len() - SEAL_TAG]).ok()?;
    Some(match c.body? {
        control::Body::Subscribe(s) | control::Body::Unsubscribe(s) => {
            relay_id(&StreamId::new(s.stream).ok()?)
        }
        control::Body::Redirect(r) => relay_id(&StreamId::new(r.stream).ok()?),
        control::Body::Offer(o) => o.relay_id,
        control::Body::Nack(n) => n.relay_id,
        control::Body::KeyframeRequest(t) => t.relay_id,
        control::Body::SenderReport(s) => s.relay_id,
    })
}

/// A node relaying one of its streams to another node.
#[derive(Debug, Clone)]
pub struct RelayOut {
    /// The subscriber's media address.
    pub addr: SocketAddr,
    /// Last subscription refresh.
    pub refreshed: Instant,
    /// Subscribers this node sent on to it ([`Redirect`]).
    pub redirected: u32,
    /// Its load as its last subscription said ([`Subscribe::load`]).
    pub load: u32,
    /// Subscribers sent on to it since it said its load (not counted in it yet).
    pub pending: u32,
}

impl RelayOut {
    /// A subscriber at `addr` that said its `load` at `now`.
    pub fn new(addr: SocketAddr, now: Instant, load: u32) -> Self {
        Self {
            addr,
            refreshed: now,
            redirected: 0,
            load,
            pending: 0,
        }
    }

    /// Its load with the subscribers sent to it since it last said.
    pub fn effective_load(&self) -> u32 {
        self.load.saturating_add(self.pending)
    }
}

/// The receiving end of a relayed stream: stands in for the publisher.
#[derive(Debug)]
pub struct RelayIn {
    /// Where the stream comes from.
    pub origin: SocketAddr,
    /// The origin's id for it (known once offered).
    pub relay_id: Option<u32>,
    /// The publisher's m-lines (known once offered).
    pub media: Vec<MediaLine>,
    /// Per (track, SSRC): the cache, loss tracking, and the offset from the
    /// generator's numbering to the origin's extended sequence numbers.
    caches: BTreeMap<(u8, u32), (PacketCache, NackGenerator, u64)>,
    /// Per (track, SSRC): the highest extended timestamp received (to extend a cached packet's).
    highest_ts: BTreeMap<(u8, u32), u64>,
    /// Per (track, SSRC; 0 for the track's top layer): the origin's last NTP↔RTP mapping.
    sr: BTreeMap<(u8, u32), (u64, u64, Instant)>,
    /// Next subscription refresh.
    pub next_refresh: Instant,
    /// Per (track, SSRC; 0 for every stream): the last keyframe request sent upstream.
    last_keyframe_request: BTreeMap<(u8, u32), Instant>,
    cache_size: usize,
    /// When it was asked for: a relay no viewer has used yet is kept
    /// [`RELAY_IDLE`] after that (the viewer that asked for it is set up
    /// once the offer arrived).
    pub created: Instant,
    /// Whether a local viewer has used it; once the last one leaves it is
    /// torn down.
    pub used: bool,
    /// When media last came from its source (or the source changed): a source one level down
    /// from the origin silent for [`PARENT_SILENCE`] is left for the origin.
    pub last_heard: Instant,
    /// Subscribed at the origin directly after a silent parent (its subscriptions say so).
    pub direct: bool,
    /// Its source is a node one level down that the origin redirected it to (not the origin):
    /// the source it leaves for the origin when silent.
    pub below: bool,
}

/// How long a relayed stream's source one level down from its origin may stay silent before
/// the relay subscribes at the origin directly ([`Subscribe::direct`]), not waiting for the
/// directory to declare that node down (seconds): a live stream carries audio every 20 ms and
/// video every 33 ms.
pub const PARENT_SILENCE: Duration = Duration::from_millis(500);

/// How long a relayed-in stream nobody has watched yet is kept.
pub const RELAY_IDLE: Duration = Duration::from_secs(5);

/// How long (from the first relay tick after the move) a node whose relayed-in stream's
/// publisher moved to it still takes what the old origin relayed before the move: packets in
/// flight, or read late by a busy node, that the publisher will not send again.
pub const RELAY_DRAIN: Duration = Duration::from_secs(1);

impl RelayIn {
    /// A subscription to `origin`, not yet offered.
    pub fn new(origin: SocketAddr, now: Instant, cache_size: usize) -> Self {
        Self {
            origin,
            relay_id: None,
            media: Vec::new(),
            caches: BTreeMap::new(),
            highest_ts: BTreeMap::new(),
            sr: BTreeMap::new(),
            next_refresh: now,
            last_keyframe_request: BTreeMap::new(),
            cache_size,
            created: now,
            used: false,
            last_heard: now,
            direct: false,
            below: false,
        }
    }

    /// Seeds the cache of `(track, ssrc)` with a publisher's cache (the
    /// publisher moved to the origin this relay now comes from).
    pub fn seed(&mut self, track: u8, ssrc: u32, cache: PacketCache) {
        let (c, _, _) = self.caches.entry((track, ssrc)).or_insert_with(|| {
            (
                PacketCache::new(1),
                NackGenerator::new(NackConfig::default()),
                0,
            )
        });
        *c = cache;
    }

    /// A viewer migrating in last got `(track, ssrc)` up to the origin's extended sequence
    /// `last_ext_seq` on the node it left: this relay takes that as the last packet it saw, so
    /// what its first packets leave out — sent while the relay was being set up — is NACKed at
    /// its source (whose cache still has it) instead of being a hole the viewer cannot repair.
    /// Nothing changes for a track the relay has already received.
    pub fn expect(&mut self, now: Instant, track: u8, ssrc: u32, last_ext_seq: u64) {
        let size = self.cache_size;
        let (_, nack, delta) = self.caches.entry((track, ssrc)).or_insert_with(|| {
            (
                PacketCache::new(size),
                NackGenerator::new(NackConfig::default()),
                0,
            )
        });
        if nack.highest().is_some() {
            return;
        }
        let gen_ext = nack.resume_after(now, last_ext_seq as u16);
        *delta = last_ext_seq.wrapping_sub(gen_ext);
    }

    /// Whether the offer arrived (viewers can be negotiated).
    pub fn ready(&self) -> bool {
        self.relay_id.is_some()
    }

    /// Records a relayed packet; false for a duplicate.
    pub fn receive(&mut self, now: Instant, track: u8, src: &SourcePacket, rtp: &[u8]) -> bool {
        self.last_heard = now;
        let size = self.cache_size;
        let (cache, nack, delta) = self.caches.entry((track, src.ssrc)).or_insert_with(|| {
            (
                PacketCache::new(size),
                NackGenerator::new(NackConfig::default()),
                0,
            )
        });
        if cache.get(src.ext_seq).is_some() {
            return false;
        }
        let first = nack.highest().is_none();
        let (gen_ext, arrival) = nack.on_packet(now, src.ext_seq as u16);
        if first {
            *delta = src.ext_seq.wrapping_sub(gen_ext);
        }
        cache.insert(src.ext_seq, rtp);
        let ts = self
            .highest_ts
            .entry((track, src.ssrc))
            .or_insert(src.ext_ts);
        *ts = (*ts).max(src.ext_ts);
        arrival != Arrival::Duplicate
    }

    /// A cached relayed packet.
    pub fn cached(&self, track: u8, ssrc: u32, ext_seq: u64) -> Option<&[u8]> {
        self.caches
            .get(&(track, ssrc))
            .and_then(|(c, _, _)| c.get(ext_seq))
    }

    /// A cached relayed packet and its extended timestamp (for relaying it on again).
    pub fn cached_with_ts(&self, track: u8, ssrc: u32, ext_seq: u64) -> Option<(&[u8], u64)> {
        let pkt = self.cached(track, ssrc, ext_seq)?;
        let ts = u32::from_be_bytes(pkt.get(4..8)?.try_into().ok()?);
        let highest = *self.highest_ts.get(&(track, ssrc))?;
        let ext = crate::seq::TsUnwrapper::from_highest(Some(highest)).peek(u64::from(ts));
        Some((pkt, ext))
    }

    /// Asks the new source for every packet still missing (NACKs spent on the old one, which
    /// may have died, do not count against it).
    pub fn rearm_nacks(&mut self, now: Instant) {
        for (_, nack, _) in self.caches.values_mut() {
            nack.rearm(now);
        }
    }

    /// Relay-link NACKs due now, as `(track, ssrc, ext seqs)`.
    pub fn poll_nacks(&mut self, now: Instant) -> Vec<(u8, u32, Vec<u64>)> {
        let mut out = Vec::new();
        for (&(track, ssrc), (_, nack, delta)) in &mut self.caches {
            let mut seqs = Vec::new();
            nack.poll_nacks(now, &mut seqs);
            if seqs.is_empty() {
                continue;
            }
            let Some(highest) = nack.highest() else {
                continue;
            };
            let ext: Vec<u64> = seqs
                .iter()
                .map(|s| {
                    crate::seq::SeqUnwrapper::from_highest(Some(highest))
                        .peek(u64::from(*s))
                        .wrapping_add(*delta)
                })
                .collect();
            out.push((track, ssrc, ext));
        }
        out
    }

    /// Earliest relay NACK deadline.
    pub fn nack_deadline(&self) -> Option<Instant> {
        self.caches
            .values()
            .filter_map(|(_, n, _)| n.poll_timeout())
            .min()
    }

    /// Records the origin's NTP↔RTP mapping of a track's stream `ssrc` (0: its top layer).
    pub fn sender_report(&mut self, now: Instant, track: u8, ssrc: u32, ntp: u64, ext_ts: u64) {
        if self.sr.len() >= 64 && !self.sr.contains_key(&(track, ssrc)) {
            // Bounded: an origin reports a handful of streams; forget the stalest.
            if let Some(k) = self.sr.iter().min_by_key(|(_, v)| v.2).map(|(k, _)| *k) {
                self.sr.remove(&k);
            }
        }
        self.sr.insert((track, ssrc), (ntp, ext_ts, now));
    }

    /// The (NTP, extended RTP timestamp) of a track's stream `ssrc` (`None`, or a stream the
    /// origin did not report: its top layer) projected to `now`.
    pub fn sr_projection(&self, now: Instant, track: u8, ssrc: Option<u32>) -> Option<(u64, u64)> {
        let (ntp, ts, at) = *ssrc
            .and_then(|s| self.sr.get(&(track, s)))
            .or_else(|| self.sr.get(&(track, 0)))?;
        let line = self.media.get(usize::from(track))?;
        let elapsed = now.saturating_duration_since(at);
        let ticks = elapsed.as_micros() as u64 * u64::from(line.codec.clock_rate()) / 1_000_000;
        Some((crate::time::ntp_add(ntp, elapsed), ts + ticks))
    }

    /// Whether a keyframe request for `track`'s stream `ssrc` (0: every stream) may go out now
    /// (≤ 1 per `throttle` and stream: each simulcast layer is an encoder of its own).
    pub fn keyframe_request_due(
        &mut self,
        now: Instant,
        track: u8,
        ssrc: u32,
        throttle: Duration,
    ) -> bool {
        match self.last_keyframe_request.get(&(track, ssrc)) {
            Some(t) if now < *t + throttle => false,
            _ => {
                if self.last_keyframe_request.len() >= 64 {
                    self.last_keyframe_request
                        .retain(|_, t| now.saturating_duration_since(*t) < throttle);
                }
                self.last_keyframe_request.insert((track, ssrc), now);
                true
            }
        }
    }

    /// Applies an offer.
    pub fn offered(&mut self, relay_id: u32, media: &[MediaLineState]) {
        self.relay_id = Some(relay_id);
        self.media = media
            .iter()
            .filter_map(|m| MediaLine::from_state(m).ok())
            .collect();
    }
}

/// A stable non-zero id for a stream's relay.
pub fn relay_id(stream: &StreamId) -> u32 {
    let h = crc32fast::hash(stream.as_str().as_bytes());
    h.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_and_control_round_trip_and_tags_are_checked() {
        let key = ClusterKey::new(&[7; 32]);
        let mut seal = RelaySealer::new(&key.seal_keys(), 1);
        let mut open = RelayOpener::new(key.seal_keys());
        let rtp = [0x80, 96, 0, 1, 0, 0, 0, 9, 0xca, 0xfe, 0xba, 0xbe, 1, 2, 3];
        let h = MediaHeader {
            relay_id: 42,
            track: 1,
            src: SourcePacket {
                ssrc: 0xcafe_babe,
                ext_seq: 70_001,
                ext_ts: 1 << 33,
                keyframe_start: true,
                clock_rate: 0,
                vp8: Some((300, Some(9))),
                dd_frame: None,
            },
        };
        let mut buf = Vec::new();
        write_media(&mut seal, &h, &rtp, &mut buf);
        assert_eq!(peek_media_relay_id(&buf), Some(42));
        // The RTP packet is not on the wire in clear.
        assert!(!buf.windows(4).any(|w| w == [0xca, 0xfe, 0xba, 0xbe]));
        let wire = buf.clone();
        let (back, body) = read_media(&mut open, &mut buf).unwrap();
        assert_eq!(back, h);
        assert_eq!(body, rtp);
        assert_eq!(
            read_media(&mut open, &mut wire.clone()),
            Err(RelayError::Replayed)
        );
        let mut other = RelayOpener::new(ClusterKey::new(&[8; 32]).seal_keys());
        write_media(&mut seal, &h, &rtp, &mut buf);
        assert_eq!(
            read_media(&mut other, &mut buf.clone()),
            Err(RelayError::BadTag)
        );
        buf[10] ^= 1;
        assert_eq!(read_media(&mut open, &mut buf), Err(RelayError::BadTag));
        assert_eq!(
            read_media(&mut open, &mut [MEDIA]),
            Err(RelayError::Malformed)
        );

        let c = Control {
            body: Some(control::Body::Subscribe(Subscribe {
                stream: "cam".into(),
                direct: true,
                load: 7,
            })),
        };
        let wire = write_control(&mut seal, &c);
        assert_eq!(read_control(&mut open, &mut wire.clone()), Ok(c));
        assert_eq!(
            read_control(&mut open, &mut wire.clone()),
            Err(RelayError::Replayed)
        );
        assert_eq!(
            read_control(&mut other, &mut wire.clone()),
            Err(RelayError::BadTag)
        );
        // A redirect is routed to the core of the stream it names.
        let r = Control {
            body: Some(control::Body::Redirect(Redirect {
                stream: "cam".into(),
                via: "10.0.0.2:5000".into(),
            })),
        };
        let wire = write_control(&mut seal, &r);
        assert_eq!(read_control(&mut open, &mut wire.clone()), Ok(r));
        let cam = StreamId::new("cam").unwrap();
        assert_eq!(peek_control_relay_id(&wire), Some(relay_id(&cam)));
    }

    /// A relayed video packet of SSRC 5 at extended sequence `seq`.
    fn pkt(seq: u64) -> SourcePacket {
        SourcePacket {
            ssrc: 5,
            ext_seq: seq,
            ext_ts: seq * 3000,
            keyframe_start: false,
            clock_rate: 90_000,
            vp8: None,
            dd_frame: None,
        }
    }

    #[test]
    fn relay_in_caches_and_nacks_by_extended_sequence() {
        let t0 = Instant::now();
        let mut r = RelayIn::new("127.0.0.1:1".parse().unwrap(), t0, 100);
        assert!(r.receive(t0, 1, &pkt(70_000), b"a"));
        assert!(r.receive(t0, 1, &pkt(70_003), b"d"));
        assert!(!r.receive(t0, 1, &pkt(70_003), b"d"), "duplicate");
        assert_eq!(r.cached(1, 5, 70_003), Some(&b"d"[..]));
        let nacks = r.poll_nacks(t0);
        assert_eq!(nacks, vec![(1, 5, vec![70_001, 70_002])]);
    }

    #[test]
    fn a_relay_for_a_migrated_viewer_asks_for_what_came_before_its_first_packet() {
        let t0 = Instant::now();
        let mut r = RelayIn::new("127.0.0.1:1".parse().unwrap(), t0, 100);
        // The viewer got up to 131,070 on the node it left (past a 16-bit wrap).
        r.expect(t0, 1, 5, 131_070);
        assert!(r.receive(t0, 1, &pkt(131_074), b"x"));
        assert_eq!(
            r.poll_nacks(t0),
            vec![(1, 5, vec![131_071, 131_072, 131_073])]
        );
        // A track already flowing is left as it is.
        r.expect(t0, 1, 5, 131_000);
        assert!(r.receive(t0, 1, &pkt(131_075), b"y"));
        assert!(r.poll_nacks(t0).is_empty());
    }
}
