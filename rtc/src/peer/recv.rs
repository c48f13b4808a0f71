//! Viewer side: RTX unwrapping, per-SSRC loss repair (NACK), keyframe requests, receiver reports,
//! transport-wide congestion control feedback, the measurements in [`RecvStreamStats`], and
//! (external media) frame assembly into [`ReceivedFrame`]s.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::codec::Codec;
use crate::media::{AssemblerConfig, FrameAssembler};
use crate::nack::{Arrival, NackConfig, NackGenerator};
use crate::rtcp::{self, ReportBlock, SenderReportData};
use crate::rtp::{self, RtpHeader};
use crate::seq::TsUnwrapper;
use crate::time::WallClock;
use crate::twcc::{DEFAULT_MAX_PACKET_LEN, TwccRecorder};

use super::Plain;
use super::payload::{is_frame_start, read_stamp};
use super::stats::RecvStreamStats;

/// Receiver report interval.
pub const RR_INTERVAL: Duration = Duration::from_secs(1);
/// While waiting for a keyframe, PLIs are repeated this often.
pub const PLI_INTERVAL: Duration = Duration::from_millis(500);
/// Recent (ext seq → ext ts) pairs kept for the timestamp-order check.
const ORDER_WINDOW: usize = 2048;
/// Frames tracked for completeness at once.
const FRAME_WINDOW: usize = 256;
/// Streams tracked at most; packets on further SSRCs are ignored, so a sender inventing SSRCs
/// cannot grow memory.
pub const MAX_STREAMS: usize = 64;
/// SSRCs listed in `ssrcs_seen` at most.
const MAX_SEEN: usize = 256;
/// Rebuilt frames waiting for [`super::Peer::poll_frame`] at most; beyond, new frames are dropped
/// (and video waits for a keyframe), so an application that stops polling cannot grow memory.
pub const MAX_QUEUED_FRAMES: usize = 512;
/// How long frame assembly waits for a missing packet on a stream without NACK (audio): only
/// reordering can bring it.
pub const NO_NACK_MAX_WAIT: Duration = Duration::from_millis(100);

/// A complete frame a viewer received ([`super::MediaSource::External`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedFrame {
    /// Media SSRC of its stream.
    pub ssrc: u32,
    /// Whether it is video.
    pub video: bool,
    /// Its codec.
    pub codec: Codec,
    /// Extended RTP timestamp (monotonic per stream).
    pub ts: u64,
    /// A keyframe (every Opus packet is one).
    pub keyframe: bool,
    /// VP8: the raw frame. H.264: the access unit in Annex B form, 4-byte start codes. Opus: the
    /// packet.
    pub data: Vec<u8>,
    /// When it could be handed out: its last packet arrived and every frame before it was out
    /// (by then, or given up). Non-decreasing per stream.
    pub received_at: Instant,
}

/// What the answer declared for one line.
#[derive(Debug, Clone)]
pub(super) struct LineInfo {
    pub codec: Codec,
    pub pt: u8,
    pub rtx_pt: Option<u8>,
    pub nack: bool,
    pub pli: bool,
    /// (media, rtx) SSRCs the server announced.
    pub ssrcs: Vec<(u32, Option<u32>)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct FrameAcc {
    start: Option<u64>,
    end: Option<u64>,
    count: u64,
    done: bool,
}

#[derive(Debug)]
struct RecvStream {
    stats: RecvStreamStats,
    line: Option<usize>,
    nack: NackGenerator,
    ts: TsUnwrapper,
    order: BTreeMap<u64, u64>,
    frames: BTreeMap<u64, FrameAcc>,
    /// Frame numbers below this were evicted from `frames`.
    frame_floor: u64,
    waiting_key: bool,
    /// The packet with the lowest sequence number received: (ext seq, ext ts, starts a key).
    lowest: Option<(u64, u64, bool)>,
    /// Extended timestamp of the keyframe start with the lowest sequence number received.
    first_key_ts: Option<(u64, u64)>,
    last_pli: Option<Instant>,
    expected_prior: u64,
    received_prior: u64,
    /// Interarrival jitter × 16 (RFC 3550 A.8).
    jitter_q4: u64,
    last_transit: Option<i64>,
    last_sr_at: Option<Instant>,
    last_arrival: Option<Instant>,
    /// Highest extended sequence number of a packet stamped with a simulcast layer.
    newest_layered: u64,
    /// External media: rebuilds the stream's frames.
    assembler: Option<FrameAssembler>,
}

impl RecvStream {
    fn new(
        ssrc: u32,
        rtx: Option<u32>,
        codec: Option<Codec>,
        line: Option<usize>,
        info: Option<&LineInfo>,
        external: bool,
    ) -> Self {
        let assembler = codec.filter(|_| external).map(|c| {
            let mut config = AssemblerConfig::default();
            if info.is_some_and(|l| !l.nack) {
                config.max_wait = NO_NACK_MAX_WAIT;
            }
            FrameAssembler::new(c, config)
        });
        RecvStream {
            stats: RecvStreamStats::new(ssrc, rtx, codec),
            line,
            nack: NackGenerator::new(NackConfig::default()),
            ts: TsUnwrapper::new(),
            order: BTreeMap::new(),
            frames: BTreeMap::new(),
            frame_floor: 0,
            waiting_key: false,
            lowest: None,
            first_key_ts: None,
            last_pli: None,
            expected_prior: 0,
            received_prior: 0,
            jitter_q4: 0,
            last_transit: None,
            last_sr_at: None,
            last_arrival: None,
            newest_layered: 0,
            assembler,
        }
    }

    /// Whether frame assembly lost a frame it needed.
    fn assembler_wants_key(&self) -> bool {
        self.assembler
            .as_ref()
            .is_some_and(FrameAssembler::wants_keyframe)
    }

    /// Moves the assembler's complete frames to `queue`, as of `now`.
    fn collect_frames(&mut self, now: Instant, queue: &mut VecDeque<ReceivedFrame>) {
        let Some(a) = self.assembler.as_mut() else {
            return;
        };
        let codec = a.codec();
        while let Some(f) = a.poll_frame() {
            if queue.len() >= MAX_QUEUED_FRAMES {
                self.stats.frames_overflowed += 1;
                a.require_keyframe();
                continue;
            }
            queue.push_back(ReceivedFrame {
                ssrc: self.stats.ssrc,
                video: codec.is_video(),
                codec,
                ts: f.ts,
                keyframe: f.keyframe,
                data: f.data,
                received_at: now,
            });
        }
    }

    fn clock_rate(&self) -> u32 {
        self.stats.codec.map_or(90_000, Codec::clock_rate)
    }

    /// Counts `ext_ts` against its neighbours in sequence order.
    fn check_order(&mut self, ext: u64, ext_ts: u64) {
        let before = self.order.range(..ext).next_back().map(|(_, t)| *t);
        let after = self.order.range(ext + 1..).next().map(|(_, t)| *t);
        if before.is_some_and(|t| t > ext_ts) || after.is_some_and(|t| t < ext_ts) {
            self.stats.ts_regressions += 1;
        }
        self.order.insert(ext, ext_ts);
        while self.order.len() > ORDER_WINDOW {
            self.order.pop_first();
        }
    }

    fn track_frame(&mut self, frame: u64, ext: u64, start: bool, marker: bool) {
        if frame < self.frame_floor {
            return;
        }
        let acc = self.frames.entry(frame).or_default();
        if acc.count == 0 {
            self.stats.frames_seen += 1;
        }
        acc.count += 1;
        if start {
            acc.start = Some(ext);
        }
        if marker {
            acc.end = Some(ext);
        }
        if let (false, Some(s), Some(e)) = (acc.done, acc.start, acc.end)
            && e >= s
            && acc.count > e - s
        {
            acc.done = true;
            self.stats.frames_completed += 1;
        }
        while self.frames.len() > FRAME_WINDOW {
            if let Some((f, _)) = self.frames.pop_first() {
                self.frame_floor = f.saturating_add(1);
            }
        }
    }

    fn update_jitter(&mut self, now: Instant, epoch: Instant, ext_ts: u64) {
        let rate = u128::from(self.clock_rate());
        let arrival =
            (now.saturating_duration_since(epoch).as_nanos() * rate / 1_000_000_000) as i64;
        let transit = arrival.wrapping_sub(ext_ts as i64);
        if let Some(last) = self.last_transit {
            let d = transit.wrapping_sub(last).unsigned_abs();
            self.jitter_q4 = (self.jitter_q4 + d).saturating_sub((self.jitter_q4 + 8) >> 4);
        }
        self.last_transit = Some(transit);
    }

    fn report_block(&mut self, now: Instant) -> Option<ReportBlock> {
        let first = self.stats.received.first()?;
        let last = self.stats.received.last()?;
        let expected = last - first + 1;
        let received = self.stats.packets;
        let expected_int = expected.saturating_sub(self.expected_prior);
        let received_int = received.saturating_sub(self.received_prior);
        self.expected_prior = expected;
        self.received_prior = received;
        let lost_int = expected_int.saturating_sub(received_int);
        let fraction_lost = (lost_int << 8)
            .checked_div(expected_int)
            .map_or(0, |f| f.min(255) as u8);
        let (last_sr, delay_since_last_sr) = match (self.stats.last_sr, self.last_sr_at) {
            (Some(sr), Some(at)) => (
                rtcp::ntp_short(sr.ntp),
                rtcp::dlsr_from_duration(now.saturating_duration_since(at)),
            ),
            _ => (0, 0),
        };
        Some(ReportBlock {
            ssrc: self.stats.ssrc,
            fraction_lost,
            cumulative_lost: i32::try_from(expected as i64 - received as i64).unwrap_or(i32::MAX),
            // Our extended numbers start one cycle in (see `seq::Unwrapper`).
            ext_highest_seq: last.saturating_sub(1 << 16) as u32,
            jitter: (self.jitter_q4 >> 4) as u32,
            last_sr,
            delay_since_last_sr,
        })
    }
}

/// Everything a viewer receives.
#[derive(Debug)]
pub(super) struct Receiver {
    rtcp_ssrc: u32,
    cname: String,
    wall: WallClock,
    latency_epoch: Instant,
    /// How long the datagram being handled waited in the socket before `now` (zero when not
    /// known): latency is measured to its arrival.
    pub arrival_lag: Duration,
    lines: Vec<LineInfo>,
    streams: Vec<RecvStream>,
    pub ssrcs_seen: Vec<u32>,
    next_rr: Option<Instant>,
    scratch: Vec<u16>,
    /// External media: rebuild frames.
    external: bool,
    /// Rebuilt frames for the application.
    pub frames: VecDeque<ReceivedFrame>,
    /// Transport-wide CC, when the answer negotiated its sequence number: the extension id and
    /// the arrivals not yet reported.
    twcc: Option<(u8, TwccRecorder)>,
    /// SSRC of the last RTP packet that arrived: the media SSRC of our feedback, as libwebrtc.
    twcc_media_ssrc: u32,
    pub twcc_sent: u64,
    pub nack_packets_sent: u64,
    pub nacks_sent: u64,
    pub plis_sent: u64,
    pub rrs_sent: u64,
}

impl Receiver {
    /// Forgets the largest arrival gap seen so far (a measurement window starts).
    pub fn reset_arrival_gaps(&mut self) {
        for s in &mut self.streams {
            s.stats.max_arrival_gap = std::time::Duration::ZERO;
        }
    }

    pub fn new(
        rtcp_ssrc: u32,
        cname: String,
        wall: WallClock,
        latency_epoch: Instant,
        external: bool,
    ) -> Self {
        Receiver {
            rtcp_ssrc,
            cname,
            wall,
            latency_epoch,
            arrival_lag: Duration::ZERO,
            lines: Vec::new(),
            streams: Vec::new(),
            ssrcs_seen: Vec::new(),
            next_rr: None,
            scratch: Vec::new(),
            external,
            frames: VecDeque::new(),
            twcc: None,
            twcc_media_ssrc: 0,
            twcc_sent: 0,
            nack_packets_sent: 0,
            nacks_sent: 0,
            plis_sent: 0,
            rrs_sent: 0,
        }
    }

    /// Declares the lines of the answer; their SSRCs get streams at once.
    pub fn set_lines(&mut self, lines: Vec<LineInfo>) {
        for (i, l) in lines.iter().enumerate() {
            for &(ssrc, rtx) in &l.ssrcs {
                if !self.streams.iter().any(|s| s.stats.ssrc == ssrc) {
                    self.streams.push(RecvStream::new(
                        ssrc,
                        rtx,
                        Some(l.codec),
                        Some(i),
                        Some(l),
                        self.external,
                    ));
                }
            }
        }
        self.lines = lines;
    }

    /// Sends transport-wide CC feedback for packets carrying the sequence number extension
    /// `id`; `None` stops.
    pub fn set_twcc(&mut self, id: Option<u8>) {
        if id != self.twcc.as_ref().map(|t| t.0) {
            self.twcc = id.map(|id| (id, TwccRecorder::default()));
        }
    }

    pub fn start(&mut self, now: Instant) {
        if self.next_rr.is_none() {
            self.next_rr = Some(now + RR_INTERVAL);
        }
    }

    /// The media (ssrc, pt) an RTX packet repairs, by declared SSRC or by RTX payload type.
    fn rtx_target(&self, h: &RtpHeader) -> Option<(u32, u8)> {
        if let Some(s) = self
            .streams
            .iter()
            .find(|s| s.stats.rtx_ssrc == Some(h.ssrc))
        {
            let pt = s.line.and_then(|i| self.lines.get(i)).map(|l| l.pt)?;
            return Some((s.stats.ssrc, pt));
        }
        let (i, line) = self
            .lines
            .iter()
            .enumerate()
            .find(|(_, l)| l.rtx_pt == Some(h.payload_type))?;
        let media = self
            .streams
            .iter()
            .filter(|s| s.line == Some(i) && s.stats.rtx_ssrc.is_none())
            .map(|s| s.stats.ssrc)
            .next()?;
        Some((media, line.pt))
    }

    fn stream_index(&mut self, h: &RtpHeader) -> Option<usize> {
        if let Some(i) = self.streams.iter().position(|s| s.stats.ssrc == h.ssrc) {
            return Some(i);
        }
        if self.streams.len() >= MAX_STREAMS {
            return None;
        }
        let line = self.lines.iter().position(|l| l.pt == h.payload_type);
        let info = line.and_then(|i| self.lines.get(i));
        let codec = info.map(|l| l.codec);
        self.streams.push(RecvStream::new(
            h.ssrc,
            None,
            codec,
            line,
            info,
            self.external,
        ));
        Some(self.streams.len() - 1)
    }

    /// Handles one decrypted RTP packet (rewritten in place when it is RTX). Returns false if it
    /// is not valid RTP.
    pub fn on_rtp(&mut self, now: Instant, buf: &mut [u8], out: &mut Vec<Plain>) -> bool {
        let Ok(mut h) = RtpHeader::parse(buf) else {
            return false;
        };
        if self.ssrcs_seen.len() < MAX_SEEN && !self.ssrcs_seen.contains(&h.ssrc) {
            self.ssrcs_seen.push(h.ssrc);
        }
        // Every packet on the transport counts, RTX and padding-only probes included, at when it
        // reached the socket.
        if let Some((id, recorder)) = self.twcc.as_mut()
            && let Some(&[hi, lo]) = h.find_extension(buf, *id)
        {
            let arrived = now.checked_sub(self.arrival_lag).unwrap_or(now);
            recorder.on_packet(arrived, u16::from_be_bytes([hi, lo]));
            self.twcc_media_ssrc = h.ssrc;
        }
        let mut len = buf.len();
        let mut was_rtx = false;
        if let Some((media, pt)) = self.rtx_target(&h) {
            let rtx_ssrc = h.ssrc;
            let Ok(n) = rtp::rtx_unwrap(buf, len, pt, media) else {
                // Padding-only RTX (a bandwidth probe) carries nothing to repair.
                return true;
            };
            let Ok(inner) = RtpHeader::parse(&buf[..n]) else {
                return false;
            };
            len = n;
            h = inner;
            was_rtx = true;
            if let Some(s) = self.streams.iter_mut().find(|s| s.stats.ssrc == media) {
                s.stats.rtx_ssrc.get_or_insert(rtx_ssrc);
            }
        }
        let Some(i) = self.stream_index(&h) else {
            return false;
        };
        let pkt = &buf[..len];
        self.on_media(now, i, &h, pkt, was_rtx);
        self.feedback(now, i, out);
        true
    }

    fn on_media(&mut self, now: Instant, i: usize, h: &RtpHeader, pkt: &[u8], was_rtx: bool) {
        let wall = self.wall;
        let epoch = self.latency_epoch;
        let arrived = now.checked_sub(self.arrival_lag).unwrap_or(now);
        let s = &mut self.streams[i];
        if was_rtx {
            s.stats.rtx_packets += 1;
        }
        let (ext, arrival) = s.nack.on_packet(now, h.sequence);
        if !s.stats.received.insert(ext) {
            s.stats.duplicates += 1;
            return;
        }
        let payload = h.payload(pkt);
        s.stats.packets += 1;
        if let Some(last) = s.last_arrival {
            let gap = now.saturating_duration_since(last);
            s.stats.max_arrival_gap = s.stats.max_arrival_gap.max(gap);
        }
        s.last_arrival = Some(now);
        s.stats.bytes += payload.len() as u64;
        match arrival {
            Arrival::Recovered => s.stats.recovered += 1,
            Arrival::Reset => s.waiting_key = true,
            Arrival::New | Arrival::Duplicate => {}
        }
        let codec = s.stats.codec;
        let video = codec.is_some_and(Codec::is_video);
        let keyframe = codec.is_some_and(|c| c.is_keyframe_start(payload));
        let frame_start = codec.is_some_and(|c| is_frame_start(c, payload));
        if s.stats.first_packet_keyframe.is_none() && video && !keyframe {
            s.waiting_key = true;
        }
        // The first packet sent may be lost for good (nothing before the first packet received
        // is NACKed): what counts is that the lowest sequence number received belongs to a
        // keyframe — starts one, or carries the timestamp of the first keyframe start.
        let ext_ts_now = s.ts.peek(u64::from(h.timestamp));
        if s.lowest.is_none_or(|(l, _, _)| ext < l) {
            s.lowest = Some((ext, ext_ts_now, keyframe));
        }
        if keyframe && s.first_key_ts.is_none_or(|(l, _)| ext < l) {
            s.first_key_ts = Some((ext, ext_ts_now));
        }
        if let Some((_, ts, key)) = s.lowest {
            let of_first_key = s.first_key_ts.is_some_and(|(_, k)| k == ts);
            s.stats.first_packet_keyframe = Some(!video || key || of_first_key);
        }
        let frame_tid = (frame_start && codec == Some(Codec::Vp8)).then(|| {
            crate::codec::vp8_descriptor(payload)
                .and_then(|d| d.temporal)
                .map_or(0, |(t, _)| t & 3)
        });
        if let Some(tid) = frame_tid {
            s.stats.temporal_frames[usize::from(tid)] += 1;
        }
        if video && keyframe {
            // An H.264 keyframe starts twice (STAP-A, then the IDR's first FU-A): count frames.
            if frame_start {
                s.stats.keyframes += 1;
            }
            s.waiting_key = false;
        }
        let ext_ts = s.ts.unwrap(u64::from(h.timestamp));
        s.check_order(ext, ext_ts);
        if arrival == Arrival::New {
            s.update_jitter(now, epoch, ext_ts);
        }
        if let Some(a) = s.assembler.as_mut() {
            // The application's media carries no stamps to measure.
            a.push(ext, ext_ts, h.marker, payload, now);
            s.collect_frames(now, &mut self.frames);
            return;
        }
        let Some(codec) = codec else {
            s.stats.unstamped += 1;
            return;
        };
        let Some(stamp) = read_stamp(codec, payload) else {
            s.stats.unstamped += 1;
            return;
        };
        let Some(capture) = epoch.checked_add(Duration::from_micros(stamp.send_us)) else {
            s.stats.unstamped += 1;
            return;
        };
        if let Some(layer) = stamp.layer {
            s.stats
                .count_layer(layer, payload.len(), ext, &mut s.newest_layered);
            if let Some(tid) = frame_tid {
                s.stats.count_layer_frame(layer, tid);
            }
        }
        let latency = arrived.saturating_duration_since(capture).as_micros();
        s.stats
            .latency
            .record(u64::try_from(latency).unwrap_or(u64::MAX));
        if video {
            s.track_frame(stamp.frame, ext, frame_start, h.marker);
        }
        if let Some(sr) = s.stats.last_sr {
            let rate = i128::from(codec.clock_rate());
            let dntp = wall.ntp(capture).wrapping_sub(sr.ntp) as i64;
            // Round to the nearest tick: the NTP fraction is 2^-32 s.
            let ticks = (i128::from(dntp) * rate + (1 << 31)) >> 32;
            let predicted = sr.rtp_ts.wrapping_add(ticks as u32);
            let dev = u64::from((h.timestamp.wrapping_sub(predicted) as i32).unsigned_abs());
            let max = s.stats.sr_max_deviation_ticks.get_or_insert(0);
            *max = (*max).max(dev);
        }
    }

    /// NACKs and PLIs due for stream `i` now.
    fn feedback(&mut self, now: Instant, i: usize, out: &mut Vec<Plain>) {
        let (nack_on, pli_on) = self.streams[i]
            .line
            .and_then(|l| self.lines.get(l))
            .map_or((true, true), |l| (l.nack, l.pli));
        let s = &mut self.streams[i];
        self.scratch.clear();
        let gave_up = s.nack.poll_nacks(now, &mut self.scratch);
        s.stats.nack_gave_up += gave_up as u64;
        let video = s.stats.is_video();
        if gave_up > 0 && video {
            s.waiting_key = true;
        }
        let media = s.stats.ssrc;
        if nack_on && !self.scratch.is_empty() {
            let mut buf = vec![0u8; 1200];
            if let Ok(n) = rtcp::write_receiver_report(&mut buf, self.rtcp_ssrc, &[]) {
                // A NACK longer than the buffer is cut to what fits; the rest is asked next time.
                self.scratch.truncate(250);
                if let Ok(m) = rtcp::write_nack(&mut buf[n..], self.rtcp_ssrc, media, &self.scratch)
                {
                    buf.truncate(n + m);
                    out.push(Plain::Rtcp(buf));
                    self.nack_packets_sent += 1;
                    self.nacks_sent += self.scratch.len() as u64;
                    self.rrs_sent += 1;
                }
            }
        }
        let s = &mut self.streams[i];
        let pli_due = (s.waiting_key || s.assembler_wants_key())
            && video
            && s.last_pli
                .is_none_or(|t| now.saturating_duration_since(t) >= PLI_INTERVAL);
        if pli_on && pli_due {
            s.last_pli = Some(now);
            let mut buf = vec![0u8; 64];
            if let Ok(n) = rtcp::write_receiver_report(&mut buf, self.rtcp_ssrc, &[])
                && let Ok(m) = rtcp::write_pli(&mut buf[n..], self.rtcp_ssrc, media)
            {
                buf.truncate(n + m);
                out.push(Plain::Rtcp(buf));
                self.plis_sent += 1;
                self.rrs_sent += 1;
            }
        }
    }

    pub fn on_sender_report(&mut self, now: Instant, sr: SenderReportData) {
        if let Some(s) = self.streams.iter_mut().find(|s| s.stats.ssrc == sr.ssrc) {
            s.stats.sender_reports += 1;
            s.stats.last_sr = Some(sr);
            s.last_sr_at = Some(now);
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let streams = self.streams.iter().flat_map(|s| {
            let waiting = s.waiting_key || s.assembler_wants_key();
            let pli = (waiting && s.stats.is_video())
                .then(|| s.last_pli.map(|t| t + PLI_INTERVAL))
                .flatten();
            let assembly = s.assembler.as_ref().and_then(FrameAssembler::poll_timeout);
            [s.nack.poll_timeout(), pli, assembly]
        });
        let twcc = self.twcc.as_ref().and_then(|(_, r)| r.poll_timeout());
        streams.chain([self.next_rr, twcc]).flatten().min()
    }

    pub fn on_timeout(&mut self, now: Instant, out: &mut Vec<Plain>) {
        for i in 0..self.streams.len() {
            let s = &mut self.streams[i];
            if let Some(a) = s.assembler.as_mut() {
                a.handle_timeout(now);
                s.collect_frames(now, &mut self.frames);
            }
            self.feedback(now, i, out);
        }
        if let Some(due) = self.next_rr.filter(|due| *due <= now) {
            self.next_rr = Some((due + RR_INTERVAL).max(now));
            self.receiver_report(now, out);
        }
        self.twcc_feedback(now, out);
    }

    /// The transport-wide CC feedback due now, each packet after an empty receiver report like
    /// our NACKs and PLIs.
    fn twcc_feedback(&mut self, now: Instant, out: &mut Vec<Plain>) {
        let Some((_, recorder)) = self.twcc.as_mut() else {
            return;
        };
        while recorder.poll_timeout().is_some_and(|due| due <= now) {
            let mut buf = vec![0u8; 8 + DEFAULT_MAX_PACKET_LEN];
            let Ok(n) = rtcp::write_receiver_report(&mut buf, self.rtcp_ssrc, &[]) else {
                return;
            };
            let Some(m) =
                recorder.poll_feedback(now, self.rtcp_ssrc, self.twcc_media_ssrc, &mut buf[n..])
            else {
                return;
            };
            buf.truncate(n + m);
            out.push(Plain::Rtcp(buf));
            self.twcc_sent += 1;
        }
    }

    fn receiver_report(&mut self, now: Instant, out: &mut Vec<Plain>) {
        let blocks: Vec<ReportBlock> = self
            .streams
            .iter_mut()
            .filter_map(|s| s.report_block(now))
            .take(31)
            .collect();
        if blocks.is_empty() {
            return;
        }
        let mut buf = vec![0u8; 8 + 24 * blocks.len() + 64 + self.cname.len()];
        let Ok(n) = rtcp::write_receiver_report(&mut buf, self.rtcp_ssrc, &blocks) else {
            return;
        };
        let Ok(m) = rtcp::write_sdes_cname(&mut buf[n..], self.rtcp_ssrc, &self.cname) else {
            return;
        };
        buf.truncate(n + m);
        out.push(Plain::Rtcp(buf));
        self.rrs_sent += 1;
    }

    /// RTCP BYE for our reporting SSRC.
    pub fn bye(&self, out: &mut Vec<Plain>) {
        let mut buf = vec![0u8; 64];
        if let Ok(n) = rtcp::write_receiver_report(&mut buf, self.rtcp_ssrc, &[])
            && let Ok(m) = rtcp::write_bye(&mut buf[n..], &[self.rtcp_ssrc])
        {
            buf.truncate(n + m);
            out.push(Plain::Rtcp(buf));
        }
    }

    pub fn has_streams(&self) -> bool {
        !self.lines.is_empty() || !self.streams.is_empty()
    }

    pub fn streams(&self) -> Vec<RecvStreamStats> {
        self.streams
            .iter()
            .filter(|s| s.stats.packets > 0 || s.stats.duplicates > 0)
            .map(|s| {
                let mut st = s.stats.clone();
                if let Some(a) = &s.assembler {
                    st.assembled = a.stats();
                }
                st
            })
            .collect()
    }

    /// A PLI for every video stream now, unthrottled; whether one went out.
    pub fn request_keyframe(&mut self, now: Instant, out: &mut Vec<Plain>) -> bool {
        let mut sent = false;
        for s in &mut self.streams {
            let pli_on = s.line.and_then(|l| self.lines.get(l)).is_none_or(|l| l.pli);
            if !s.stats.is_video() || !pli_on {
                continue;
            }
            let mut buf = vec![0u8; 64];
            if let Ok(n) = rtcp::write_receiver_report(&mut buf, self.rtcp_ssrc, &[])
                && let Ok(m) = rtcp::write_pli(&mut buf[n..], self.rtcp_ssrc, s.stats.ssrc)
            {
                buf.truncate(n + m);
                out.push(Plain::Rtcp(buf));
                s.last_pli = Some(now);
                self.plis_sent += 1;
                self.rrs_sent += 1;
                sent = true;
            }
        }
        sent
    }
}
