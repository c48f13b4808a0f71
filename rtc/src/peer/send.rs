//! Publisher side: synthetic audio/video on a fixed schedule or the application's encoded frames,
//! the send cache that answers NACKs, keyframes on PLI/FIR, and sender reports with an exact
//! NTP↔RTP mapping.

use std::time::{Duration, Instant};

use crate::codec::Codec;
use crate::media::{Payloads, packetize as media_packetize};
use crate::nack::PacketCache;
use crate::rtcp::{self, SenderReportData};
use crate::rtp::{self, ExtensionIdMap};
use crate::time::WallClock;

use super::payload::{FrameSpec, Stamp, packetize};
use super::stats::SendStreamStats;
use super::{PeerError, Plain};

/// Largest RTP packet we build (before SRTP and RTX overhead).
pub const MAX_RTP_PACKET: usize = 1100;
/// Audio packet duration.
pub const AUDIO_PTIME: Duration = Duration::from_millis(20);
/// Opus payload bytes per packet (40 kbit/s).
const AUDIO_BYTES: usize = 100;
/// Forced keyframes are at least this far apart; requests in between are served after it.
pub const FORCED_KEYFRAME_GAP: Duration = Duration::from_millis(100);
/// Sender report interval.
pub const SR_INTERVAL: Duration = Duration::from_secs(1);
/// Frames of delay after which the schedule skips ahead instead of catching up.
const MAX_CATCH_UP: u64 = 30;
const VIDEO_CACHE: usize = 1024;
const AUDIO_CACHE: usize = 128;

/// Header extension ids negotiated on a line (one-byte form only).
#[derive(Debug, Clone, Default)]
pub(super) struct Extensions {
    pub mid: Option<(u8, String)>,
    pub abs_send_time: Option<u8>,
    pub audio_level: Option<u8>,
    /// Simulcast: the rid extension's id and this stream's rid, written on every packet
    /// (Chrome stops after the first receiver report; sending it always is allowed and simpler).
    pub rid: Option<(u8, String)>,
    /// Simulcast: the repaired-rid extension's id, which replaces the rid on RTX packets.
    pub rrid: Option<u8>,
}

/// Keyframe state of one video stream: simulcast layers keep theirs apart, so a request for
/// one layer's SSRC gives a keyframe on that layer only.
#[derive(Debug, Clone, Copy, Default)]
struct KeyState {
    last_keyframe: Option<Instant>,
    last_forced: Option<Instant>,
    requested: bool,
    last_fir_seq: Option<u8>,
}

impl KeyState {
    /// Whether the frame captured `at` is a keyframe: the periodic one is due, or a request
    /// waits and the last forced one is far enough back. Counts forced ones in `forced`.
    fn next_is_key(&mut self, at: Instant, interval: Duration, forced: &mut u64) -> bool {
        let periodic = self
            .last_keyframe
            .is_none_or(|t| at.saturating_duration_since(t) >= interval);
        let force = self.requested
            && self
                .last_forced
                .is_none_or(|t| at.saturating_duration_since(t) >= FORCED_KEYFRAME_GAP);
        let keyframe = periodic || force;
        if keyframe {
            self.last_keyframe = Some(at);
            if self.requested {
                // Any keyframe serves an outstanding request.
                self.requested = false;
                self.last_forced = Some(at);
                if !periodic {
                    *forced += 1;
                }
            }
        }
        keyframe
    }
}

/// What makes a stream one simulcast layer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layer {
    /// Index in the config's layers, stamped into every payload.
    pub index: u8,
    pub bitrate_bps: u32,
    /// The layer's own VP8 picture id counter, as each of Chrome's encoders has.
    pub picture_id: u16,
    /// Its temporal layers (1: none).
    pub temporal_layers: u8,
    /// The index of its last base temporal layer frame (VP8 TL0PICIDX).
    pub tl0_pic_idx: u8,
}

/// One outgoing RTP stream.
#[derive(Debug)]
pub(super) struct SendStream {
    codec: Codec,
    pt: u8,
    rtx: Option<(u8, u32)>,
    ssrc: u32,
    next_seq: u16,
    /// Extended sequence number of the next packet (starts at 1 << 16 + the first seq).
    next_ext: u64,
    first_ext: u64,
    rtx_seq: u16,
    ts_base: u32,
    ext: Extensions,
    cache: PacketCache,
    stats: SendStreamStats,
    /// External media: where the next frame lies on the media clock (time since the start).
    media_at: Option<Duration>,
    /// External media: payloads of the frame being sent, reused.
    payloads: Payloads,
    /// Video: when keyframes go out.
    key: KeyState,
    /// Simulcast: the layer this stream sends.
    layer: Option<Layer>,
}

/// Random bases a stream starts from.
#[derive(Debug, Clone, Copy)]
pub(super) struct StreamBases {
    pub ssrc: u32,
    pub seq: u16,
    pub ts: u32,
    pub rtx: Option<(u8, u32, u16)>,
}

impl StreamBases {
    /// These bases with RTX as the answer negotiated it: its payload type `rtx_pt`, and only
    /// where NACK was (`None` drops the RTX stream).
    pub fn negotiated(self, rtx_pt: Option<u8>, nack: bool) -> Self {
        StreamBases {
            rtx: self
                .rtx
                .filter(|_| rtx_pt.is_some() && nack)
                .map(|(_, ssrc, seq)| (rtx_pt.unwrap_or_default(), ssrc, seq)),
            ..self
        }
    }
}

impl SendStream {
    pub fn new(codec: Codec, pt: u8, b: StreamBases, ext: Extensions) -> Self {
        let first_ext = (1 << 16) + u64::from(b.seq);
        SendStream {
            codec,
            pt,
            rtx: b.rtx.map(|(pt, ssrc, _)| (pt, ssrc)),
            ssrc: b.ssrc,
            next_seq: b.seq,
            next_ext: first_ext,
            first_ext,
            rtx_seq: b.rtx.map_or(0, |r| r.2),
            ts_base: b.ts,
            ext,
            cache: PacketCache::new(if codec.is_video() {
                VIDEO_CACHE
            } else {
                AUDIO_CACHE
            }),
            stats: SendStreamStats {
                ssrc: b.ssrc,
                rtx_ssrc: b.rtx.map(|r| r.1),
                codec,
                pt,
                packets: 0,
                bytes: 0,
                frames: 0,
                keyframes: 0,
                retransmissions: 0,
                first_seq: b.seq,
                rid: None,
            },
            media_at: None,
            payloads: Payloads::new(),
            key: KeyState::default(),
            layer: None,
        }
    }

    /// Makes this stream simulcast layer `layer`, named `rid`.
    pub fn with_layer(mut self, layer: Layer, rid: &str) -> Self {
        self.layer = Some(layer);
        self.stats.rid = Some(rid.to_owned());
        self
    }

    /// RTP timestamp of an instant `since` the media start.
    fn ts_at(&self, since: Duration) -> u32 {
        // Rounded, so a frame interval of 33 333 333 ns is exactly 3000 ticks.
        let ticks =
            (since.as_nanos() * u128::from(self.codec.clock_rate()) + 500_000_000) / 1_000_000_000;
        self.ts_base.wrapping_add(ticks as u32)
    }

    /// Writes the fixed header and the one-byte extension block.
    fn header(&self, marker: bool, ts: u32, abs_send_time: u32, out: &mut Vec<u8>) {
        let mut ext = Vec::with_capacity(16);
        if let Some((id, mid)) = &self.ext.mid
            && (1..=14).contains(id)
            && (1..=16).contains(&mid.len())
        {
            ext.push((id << 4) | (mid.len() as u8 - 1));
            ext.extend_from_slice(mid.as_bytes());
        }
        if let Some((id, rid)) = &self.ext.rid
            && (1..=14).contains(id)
            && (1..=16).contains(&rid.len())
        {
            ext.push((id << 4) | (rid.len() as u8 - 1));
            ext.extend_from_slice(rid.as_bytes());
        }
        if let Some(id) = self.ext.abs_send_time.filter(|id| (1..=14).contains(id)) {
            ext.push((id << 4) | 2);
            ext.extend_from_slice(&abs_send_time.to_be_bytes()[1..]);
        }
        if let Some(id) = self.ext.audio_level.filter(|id| (1..=14).contains(id)) {
            // Voice activity, -30 dBov.
            ext.extend_from_slice(&[id << 4, 0x80 | 30]);
        }
        while ext.len() % 4 != 0 {
            ext.push(0);
        }
        let x = if ext.is_empty() { 0 } else { 0x10 };
        out.push(0x80 | x);
        out.push(if marker { 0x80 } else { 0 } | self.pt);
        out.extend_from_slice(&self.next_seq.to_be_bytes());
        out.extend_from_slice(&ts.to_be_bytes());
        out.extend_from_slice(&self.ssrc.to_be_bytes());
        if !ext.is_empty() {
            out.extend_from_slice(&[0xBE, 0xDE]);
            out.extend_from_slice(&((ext.len() / 4) as u16).to_be_bytes());
            out.extend_from_slice(&ext);
        }
    }

    fn header_len(&self) -> usize {
        let mut v = Vec::new();
        self.header(false, 0, 0, &mut v);
        v.len()
    }

    /// Packetizes and queues one synthetic frame.
    fn send_frame(&mut self, f: &FrameSpec, ts: u32, abs: u32, out: &mut Vec<Plain>) {
        let max_payload = MAX_RTP_PACKET.saturating_sub(self.header_len());
        let payloads = packetize(self.codec, f, max_payload);
        let n = payloads.len();
        for (i, payload) in payloads.into_iter().enumerate() {
            self.send_packet(i + 1 == n, ts, abs, &payload, out);
        }
        self.stats.frames += 1;
        if f.keyframe {
            self.stats.keyframes += 1;
        }
    }

    /// Packetizes and queues one frame of the application's media, `since` the media start;
    /// its timestamp follows the previous frame's by that frame's duration.
    fn send_external(
        &mut self,
        since: Duration,
        data: &[u8],
        duration: Duration,
        picture_id: u16,
        abs: u32,
        out: &mut Vec<Plain>,
    ) -> Result<(), PeerError> {
        let max_payload = MAX_RTP_PACKET.saturating_sub(self.header_len());
        let mut payloads = std::mem::take(&mut self.payloads);
        let r = media_packetize(self.codec, data, picture_id, max_payload, &mut payloads);
        if r.is_ok() {
            let at = self.media_at.unwrap_or(since);
            let ts = self.ts_at(at);
            self.media_at = Some(at.saturating_add(duration));
            let n = payloads.len();
            for (i, payload) in payloads.iter().enumerate() {
                self.send_packet(i + 1 == n, ts, abs, payload, out);
            }
            self.stats.frames += 1;
        }
        self.payloads = payloads;
        r.map_err(PeerError::from)
    }

    /// Writes, caches and queues one RTP packet.
    fn send_packet(
        &mut self,
        marker: bool,
        ts: u32,
        abs: u32,
        payload: &[u8],
        out: &mut Vec<Plain>,
    ) {
        let mut pkt = Vec::with_capacity(MAX_RTP_PACKET + 32);
        self.header(marker, ts, abs, &mut pkt);
        pkt.extend_from_slice(payload);
        self.cache.insert(self.next_ext, &pkt);
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_ext += 1;
        self.stats.packets += 1;
        self.stats.bytes += payload.len() as u64;
        out.push(Plain::Rtp(pkt));
    }

    /// Answers a NACK for `seq`: RTX when negotiated, else the original packet again.
    fn retransmit(&mut self, seq: u16, out: &mut Vec<Plain>) -> bool {
        let Some(highest) = self.next_ext.checked_sub(1) else {
            return false;
        };
        let back = u64::from((highest as u16).wrapping_sub(seq));
        let Some(ext) = highest.checked_sub(back).filter(|e| *e >= self.first_ext) else {
            return false;
        };
        let Some(cached) = self.cache.get(ext) else {
            return false;
        };
        let mut pkt = Vec::with_capacity(cached.len() + 2 + 32);
        pkt.extend_from_slice(cached);
        if let Some((rtx_pt, rtx_ssrc)) = self.rtx {
            if let Some((rid, _)) = &self.ext.rid {
                // An RTX packet names the layer it repairs by repaired rid, not rid (RFC 8852
                // §3.2): the rid element is renumbered in place, or blanked to padding.
                let mut map: ExtensionIdMap = std::array::from_fn(|i| i as u8);
                map[usize::from(*rid)] = self
                    .ext
                    .rrid
                    .filter(|id| (1..=14).contains(id))
                    .unwrap_or(0);
                if rtp::remap_extension_ids(&mut pkt, &map).is_err() {
                    return false;
                }
            }
            let len = pkt.len();
            pkt.resize(len + 2, 0);
            match rtp::rtx_wrap(&mut pkt, len, rtx_pt, rtx_ssrc, self.rtx_seq) {
                Ok(n) => pkt.truncate(n),
                Err(_) => return false,
            }
            self.rtx_seq = self.rtx_seq.wrapping_add(1);
        }
        self.stats.retransmissions += 1;
        out.push(Plain::Rtp(pkt));
        true
    }

    fn sender_report(&self, ntp: u64, since: Duration) -> SenderReportData {
        SenderReportData {
            ssrc: self.ssrc,
            ntp,
            rtp_ts: self.ts_at(since),
            packet_count: self.stats.packets as u32,
            octet_count: self.stats.bytes as u32,
        }
    }
}

/// Media pacing and sizing.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendConfig {
    pub fps: u32,
    pub bitrate_bps: u32,
    pub keyframe_interval: Duration,
    pub wall: WallClock,
    pub latency_epoch: Instant,
    /// The application sends the media: no synthetic frames.
    pub external: bool,
}

/// Everything a publisher sends.
#[derive(Debug)]
pub(super) struct Sender {
    cfg: SendConfig,
    cname: String,
    pub video: Option<SendStream>,
    /// Simulcast: one stream per layer, lowest first, in place of `video`.
    pub layers: Vec<SendStream>,
    pub audio: Option<SendStream>,
    start: Option<Instant>,
    next_frame: u64,
    next_audio: u64,
    /// A keyframe request (PLI/FIR) the application has not taken yet.
    pub keyframe_request: bool,
    /// Media generation stopped; RTCP (SR, NACK answers) goes on.
    pub paused: bool,
    picture_id: u16,
    next_sr: Option<Instant>,
    pub plis_received: u64,
    pub firs_received: u64,
    pub nacks_received: u64,
    pub nack_misses: u64,
    pub forced_keyframes: u64,
    pub remb_bps: Option<u64>,
    pub srs_sent: u64,
}

impl Sender {
    pub fn new(cfg: SendConfig, cname: String, picture_id: u16) -> Self {
        Sender {
            cfg,
            cname,
            video: None,
            layers: Vec::new(),
            audio: None,
            start: None,
            next_frame: 0,
            next_audio: 0,
            keyframe_request: false,
            paused: false,
            picture_id: picture_id & 0x7fff,
            next_sr: None,
            plis_received: 0,
            firs_received: 0,
            nacks_received: 0,
            nack_misses: 0,
            forced_keyframes: 0,
            remb_bps: None,
            srs_sent: 0,
        }
    }

    /// Whether there is video to send, one stream or simulcast layers.
    fn has_video(&self) -> bool {
        self.video.is_some() || !self.layers.is_empty()
    }

    /// Every video stream: the single one, or the layers.
    fn video_streams(&self) -> impl Iterator<Item = &SendStream> {
        self.video.iter().chain(&self.layers)
    }

    /// Every stream, video first, as `PeerStats::sent` lists them.
    fn all_streams(&self) -> impl Iterator<Item = &SendStream> {
        self.video_streams().chain(&self.audio)
    }

    /// Media starts now (SRTP is keyed).
    pub fn start(&mut self, now: Instant) {
        if self.start.is_none() && (self.has_video() || self.audio.is_some()) {
            self.start = Some(now);
            self.next_sr = Some(now + SR_INTERVAL / 2);
        }
    }

    fn frame_offset(&self, n: u64) -> Duration {
        let fps = u64::from(self.cfg.fps.max(1));
        Duration::from_nanos(n.saturating_mul(1_000_000_000) / fps)
    }

    fn audio_offset(n: u64) -> Duration {
        AUDIO_PTIME * n as u32
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let start = self.start?;
        if self.paused || self.cfg.external {
            return self.next_sr;
        }
        let video = self
            .has_video()
            .then(|| start + self.frame_offset(self.next_frame));
        let audio = self
            .audio
            .as_ref()
            .map(|_| start + Self::audio_offset(self.next_audio));
        [video, audio, self.next_sr].into_iter().flatten().min()
    }

    pub fn on_timeout(&mut self, now: Instant, out: &mut Vec<Plain>) {
        let Some(start) = self.start else {
            return;
        };
        let generate = !self.paused && !self.cfg.external;
        if self.has_video() && generate {
            let behind =
                |s: &Self| now.saturating_duration_since(start + s.frame_offset(s.next_frame));
            let interval = self.frame_offset(1).max(Duration::from_micros(1));
            let late = (behind(self).as_nanos() / interval.as_nanos()) as u64;
            if late > MAX_CATCH_UP {
                self.next_frame += late;
            }
            while start + self.frame_offset(self.next_frame) <= now {
                self.video_frame(start, out);
            }
        }
        if self.audio.is_some() && generate {
            let late = (now
                .saturating_duration_since(start + Self::audio_offset(self.next_audio))
                .as_nanos()
                / AUDIO_PTIME.as_nanos()) as u64;
            if late > MAX_CATCH_UP {
                self.next_audio += late;
            }
            while start + Self::audio_offset(self.next_audio) <= now {
                self.audio_packet(start, out);
            }
        }
        if let Some(due) = self.next_sr.filter(|due| *due <= now) {
            self.sender_reports(now, start, out);
            self.next_sr = Some((due + SR_INTERVAL).max(now));
        }
    }

    fn stamp(&self, at: Instant, frame: u64) -> Stamp {
        stamp(&self.cfg, at, frame, None)
    }

    fn abs_send_time(&self, at: Instant) -> u32 {
        ((self.cfg.wall.ntp(at) >> 14) & 0xFF_FFFF) as u32
    }

    /// One captured frame, on the single video stream or on every layer.
    fn video_frame(&mut self, start: Instant, out: &mut Vec<Plain>) {
        let n = self.next_frame;
        self.next_frame += 1;
        let offset = self.frame_offset(n);
        let at = start + offset;
        let abs = self.abs_send_time(at);
        let cfg = self.cfg;
        if let Some(v) = self.video.as_mut() {
            let keyframe = v
                .key
                .next_is_key(at, cfg.keyframe_interval, &mut self.forced_keyframes);
            let (key_bytes, delta_bytes) = frame_sizes(&cfg, cfg.bitrate_bps);
            let spec = FrameSpec {
                keyframe,
                stamp: stamp(&cfg, at, n, None),
                picture_id: self.picture_id,
                bytes: if keyframe { key_bytes } else { delta_bytes },
                temporal: None,
            };
            self.picture_id = (self.picture_id + 1) & 0x7fff;
            let ts = v.ts_at(offset);
            v.send_frame(&spec, ts, abs, out);
        }
        for v in &mut self.layers {
            let Some(layer) = v.layer.as_mut() else {
                continue;
            };
            let keyframe = v
                .key
                .next_is_key(at, cfg.keyframe_interval, &mut self.forced_keyframes);
            let (key_bytes, delta_bytes) = frame_sizes(&cfg, layer.bitrate_bps);
            let temporal = temporal_frame(layer.temporal_layers, n, keyframe);
            if temporal.is_some_and(|t| t.tid == 0) {
                layer.tl0_pic_idx = layer.tl0_pic_idx.wrapping_add(1);
            }
            let spec = FrameSpec {
                keyframe,
                stamp: stamp(&cfg, at, n, Some(layer.index)),
                picture_id: layer.picture_id,
                bytes: if keyframe {
                    key_bytes
                } else {
                    temporal.map_or(delta_bytes, |t| (delta_bytes as f64 * t.size) as usize)
                },
                temporal: temporal.map(|t| (t.tid, t.sync, layer.tl0_pic_idx)),
            };
            layer.picture_id = (layer.picture_id + 1) & 0x7fff;
            let ts = v.ts_at(offset);
            v.send_frame(&spec, ts, abs, out);
        }
    }

    fn audio_packet(&mut self, start: Instant, out: &mut Vec<Plain>) {
        let n = self.next_audio;
        self.next_audio += 1;
        let offset = Self::audio_offset(n);
        let at = start + offset;
        let spec = FrameSpec {
            keyframe: false,
            stamp: self.stamp(at, n),
            picture_id: 0,
            bytes: AUDIO_BYTES,
            temporal: None,
        };
        let abs = self.abs_send_time(at);
        if let Some(a) = self.audio.as_mut() {
            let ts = a.ts_at(offset);
            a.send_frame(&spec, ts, abs, out);
        }
    }

    /// Sends one frame of the application's media on the video or audio stream.
    pub fn send_frame(
        &mut self,
        now: Instant,
        video: bool,
        data: &[u8],
        duration: Duration,
        keyframe: bool,
        out: &mut Vec<Plain>,
    ) -> Result<(), PeerError> {
        let abs = self.abs_send_time(now);
        let picture_id = self.picture_id;
        let stream = if video {
            self.video.as_mut()
        } else {
            self.audio.as_mut()
        };
        let stream = stream.ok_or(PeerError::NoTrack { video })?;
        let start = self.start.ok_or(PeerError::NotConnected)?;
        let since = now.saturating_duration_since(start);
        stream.send_external(since, data, duration, picture_id, abs, out)?;
        if keyframe {
            stream.stats.keyframes += 1;
        }
        if video {
            if stream.codec == Codec::Vp8 {
                self.picture_id = (self.picture_id + 1) & 0x7fff;
            }
            if keyframe {
                stream.key.last_keyframe = Some(now);
                // Any keyframe serves an outstanding request.
                if std::mem::take(&mut stream.key.requested) {
                    self.forced_keyframes += 1;
                }
                self.keyframe_request = false;
            }
        }
        Ok(())
    }

    fn sender_reports(&mut self, now: Instant, start: Instant, out: &mut Vec<Plain>) {
        let ntp = self.cfg.wall.ntp(now);
        let since = now.saturating_duration_since(start);
        let streams = self.video.iter().chain(&self.layers).chain(&self.audio);
        for s in streams {
            let mut buf = vec![0u8; 256];
            let sr = s.sender_report(ntp, since);
            let Ok(n) = rtcp::write_sender_report(&mut buf, &sr, &[]) else {
                continue;
            };
            let Ok(m) = rtcp::write_sdes_cname(&mut buf[n..], s.ssrc, &self.cname) else {
                continue;
            };
            buf.truncate(n + m);
            out.push(Plain::Rtcp(buf));
            self.srs_sent += 1;
        }
    }

    fn stream_mut(&mut self, ssrc: u32) -> Option<&mut SendStream> {
        self.video
            .iter_mut()
            .chain(&mut self.layers)
            .chain(&mut self.audio)
            .find(|s| s.ssrc == ssrc)
    }

    fn video_mut(&mut self, ssrc: u32) -> Option<&mut SendStream> {
        self.video
            .iter_mut()
            .chain(&mut self.layers)
            .find(|s| s.ssrc == ssrc)
    }

    pub fn on_nack(
        &mut self,
        media_ssrc: u32,
        lost: impl Iterator<Item = u16>,
        out: &mut Vec<Plain>,
    ) {
        let mut misses = 0;
        let mut asked = 0;
        if let Some(s) = self.stream_mut(media_ssrc) {
            for seq in lost {
                asked += 1;
                if !s.retransmit(seq, out) {
                    misses += 1;
                }
            }
        } else {
            asked = lost.count() as u64;
            misses = asked;
        }
        self.nacks_received += asked;
        self.nack_misses += misses;
    }

    pub fn on_pli(&mut self, media_ssrc: u32) {
        self.plis_received += 1;
        if let Some(v) = self.video_mut(media_ssrc) {
            v.key.requested = true;
            self.keyframe_request = true;
        }
    }

    pub fn on_fir(&mut self, entries: impl Iterator<Item = (u32, u8)>) {
        for (ssrc, seq) in entries {
            // A repeated command sequence number is a retransmission of the same request.
            let Some(v) = self
                .video_mut(ssrc)
                .filter(|v| v.key.last_fir_seq != Some(seq))
            else {
                continue;
            };
            v.key.last_fir_seq = Some(seq);
            v.key.requested = true;
            self.firs_received += 1;
            self.keyframe_request = true;
        }
    }

    /// RTCP BYE for every stream we send.
    pub fn bye(&self, out: &mut Vec<Plain>) {
        let ssrcs: Vec<u32> = self.all_streams().map(|s| s.ssrc).collect();
        let Some(&first) = ssrcs.first() else {
            return;
        };
        let mut buf = vec![0u8; 128];
        let Ok(n) = rtcp::write_receiver_report(&mut buf, first, &[]) else {
            return;
        };
        if let Ok(m) = rtcp::write_bye(&mut buf[n..], &ssrcs) {
            buf.truncate(n + m);
            out.push(Plain::Rtcp(buf));
        }
    }

    pub fn streams(&self) -> Vec<SendStreamStats> {
        self.all_streams().map(|s| s.stats.clone()).collect()
    }
}

/// The stamp of a frame (or audio packet) captured `at`.
fn stamp(cfg: &SendConfig, at: Instant, frame: u64, layer: Option<u8>) -> Stamp {
    let us = at.saturating_duration_since(cfg.latency_epoch).as_micros();
    Stamp {
        send_us: u64::try_from(us).unwrap_or(u64::MAX),
        frame,
        layer,
    }
}

/// One frame's place in a temporal layer pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TemporalFrame {
    tid: u8,
    /// It references the base layer only: a receiver may start taking its layer here.
    sync: bool,
    /// Its size over an average delta frame's.
    size: f64,
}

/// Frame `n`'s temporal layer in libwebrtc's VP8 patterns (two layers: 0 1; three: 0 2 1 2),
/// sized after its rate split (two: 60/40 %, three: 40/20/40 %); a keyframe is in the base
/// layer. `None` for a stream without temporal layers.
fn temporal_frame(layers: u8, n: u64, keyframe: bool) -> Option<TemporalFrame> {
    let (tid, sync, size) = match (layers, n % 4) {
        (0 | 1, _) => return None,
        (2, 0 | 2) => (0, false, 1.2),
        (2, _) => (1, true, 0.8),
        (_, 0) => (0, false, 1.6),
        (_, 1) => (2, true, 0.8),
        (_, 2) => (1, true, 0.8),
        (_, _) => (2, false, 0.8),
    };
    Some(if keyframe {
        TemporalFrame {
            tid: 0,
            sync: false,
            size: 1.0,
        }
    } else {
        TemporalFrame { tid, sync, size }
    })
}

/// Frame sizes (key, delta) that average to `bitrate_bps` over a keyframe interval, with
/// keyframes three times the size of delta frames.
fn frame_sizes(cfg: &SendConfig, bitrate_bps: u32) -> (usize, usize) {
    let fps = u64::from(cfg.fps.max(1));
    let avg = u64::from(bitrate_bps) / 8 / fps;
    let gop = (cfg.keyframe_interval.as_secs_f64() * fps as f64).round() as u64;
    if gop <= 1 {
        return (avg as usize, avg as usize);
    }
    let delta = avg * gop / (gop + 2);
    ((3 * delta) as usize, delta as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::config::SimulcastConfig;

    #[test]
    fn temporal_frame_sizes_split_the_rate_as_the_shares_say() {
        for n in 1..=3u8 {
            let shares = SimulcastConfig::chrome_720p()
                .with_temporal_layers(n)
                .temporal_shares();
            let mut per_layer = [0.0; 3];
            for f in 0..4 {
                match temporal_frame(n, f, false) {
                    Some(t) => per_layer[usize::from(t.tid)] += t.size / 4.0,
                    None => per_layer[0] += 0.25,
                }
            }
            let mut upto = 0.0;
            for (t, share) in shares.iter().enumerate() {
                upto += per_layer[t];
                assert!(
                    (upto - share).abs() < 1e-9,
                    "{n} layers, T{t}: {upto} vs {share}"
                );
            }
        }
        assert_eq!(
            temporal_frame(3, 1, true).map(|t| t.tid),
            Some(0),
            "a keyframe is T0"
        );
    }
}
