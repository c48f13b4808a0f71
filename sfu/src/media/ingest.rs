//! The receive side of a publisher's tracks: stream identification
//! (declared SSRCs, `mid`/`rid` header extensions, RTX), loss detection with
//! NACK generation, the retransmission cache, receive statistics, sender
//! report bookkeeping and simulcast layer choice.

use std::time::{Duration, Instant};

use ferry_proto::state::IncomingTrackState;
use ferry_proto::state::media::{IncomingStreamState, ReceiveStats, SenderReportInfo};

use crate::codec::{self, Codec};
use crate::media::line::MediaLine;
use crate::media::munger::SourcePacket;
use crate::nack::{Arrival, NackConfig, NackGenerator, PacketCache};
use crate::rtcp::{ReportBlock, dlsr_from_duration, ntp_short};
use crate::rtp::{self, RtpHeader};
use crate::seq::TsUnwrapper;
use crate::time::ntp_add;
use ferry_rtc::sdp::extmap::{EXT_RID, EXT_RRID};

/// Most SSRCs one track may carry (simulcast layers plus strays).
const MAX_STREAMS_PER_TRACK: usize = 8;

/// The least time between two keyframe requests of one stream upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyframeThrottle {
    /// When somebody waits for the keyframe (a switch, a new viewer, a recorder).
    pub switch: Duration,
    /// When only viewers that lost part of a frame ask (their PLIs and FIRs).
    pub repair: Duration,
}

/// One RTP stream (SSRC) of a published track.
#[derive(Debug)]
pub struct IncomingStream {
    /// Media SSRC.
    pub ssrc: u32,
    /// RTX SSRC repairing this stream.
    pub rtx_ssrc: Option<u32>,
    /// Simulcast rid.
    pub rid: String,
    nack: NackGenerator,
    ts: TsUnwrapper,
    cache: PacketCache,
    stats: ReceiveStats,
    last_sr: Option<(u64, u32, Instant)>,
    last_keyframe: Option<u64>,
    window_bytes: u64,
    /// Bitrate over the last report interval.
    pub bitrate_bps: u64,
    /// A keyframe of this stream has been asked for and not yet requested upstream.
    keyframe_wanted: bool,
    /// ... only by viewers that lost part of a frame (throttled longer, see
    /// [`KeyframeThrottle::repair`]).
    repair_only: bool,
    /// When a keyframe of this stream was last requested upstream.
    last_pli: Option<Instant>,
}

impl IncomingStream {
    fn new(ssrc: u32, rtx_ssrc: Option<u32>, rid: String, nack: NackConfig, cache: usize) -> Self {
        Self {
            ssrc,
            rtx_ssrc,
            rid,
            nack: NackGenerator::new(nack),
            ts: TsUnwrapper::new(),
            cache: PacketCache::new(cache),
            stats: ReceiveStats::default(),
            last_sr: None,
            last_keyframe: None,
            window_bytes: 0,
            bitrate_bps: 0,
            keyframe_wanted: false,
            repair_only: false,
            last_pli: None,
        }
    }

    fn throttle(&self, t: KeyframeThrottle) -> Duration {
        if self.repair_only { t.repair } else { t.switch }
    }

    /// A cached packet by extended sequence number.
    pub fn cached(&self, ext_seq: u64) -> Option<&[u8]> {
        self.cache.get(ext_seq)
    }

    /// The retransmission cache (migration moves it).
    pub fn cache_mut(&mut self) -> &mut PacketCache {
        &mut self.cache
    }

    /// Extends a 32-bit RTP timestamp of this stream.
    pub fn extend_ts(&self, ts: u32) -> u64 {
        self.ts.peek(u64::from(ts))
    }

    /// NACK generator (for counters).
    pub fn nack(&self) -> &NackGenerator {
        &self.nack
    }

    /// Packets received.
    pub fn packets(&self) -> u64 {
        self.stats.packets
    }

    fn update_jitter(&mut self, now: Instant, epoch: Instant, rtp_ts: u32, clock_rate: u32) {
        let arrival = (now.saturating_duration_since(epoch).as_micros() as u64
            * u64::from(clock_rate)
            / 1_000_000) as i64;
        let transit = arrival - i64::from(rtp_ts);
        if let Some(last) = self.stats.last_transit {
            let d = (transit - last).unsigned_abs() as i64;
            // RFC 3550 A.8 in Q4 fixed point: J += (|D| - J) / 16.
            let j = self.stats.jitter_q4 as i64;
            self.stats.jitter_q4 = (j + d - j / 16).max(0) as u64;
        }
        self.stats.last_transit = Some(transit);
    }

    /// The RFC 3550 report block for this stream at `now`.
    fn report_block(&mut self, now: Instant) -> Option<ReportBlock> {
        let highest = self.nack.highest()?;
        let base = *self.stats.base_seq.get_or_insert(highest);
        let expected = highest.saturating_sub(base) + 1;
        let received = self.stats.packets;
        let expected_interval = expected.saturating_sub(self.stats.expected_prior);
        let received_interval = received.saturating_sub(self.stats.received_prior);
        self.stats.expected_prior = expected;
        self.stats.received_prior = received;
        let lost_interval = expected_interval.saturating_sub(received_interval);
        let fraction_lost = (lost_interval << 8)
            .checked_div(expected_interval)
            .map_or(0, |f| f.min(255) as u8);
        let (last_sr, dlsr) = match self.last_sr {
            Some((ntp, _, at)) => (
                ntp_short(ntp),
                dlsr_from_duration(now.saturating_duration_since(at)),
            ),
            None => (0, 0),
        };
        Some(ReportBlock {
            ssrc: self.ssrc,
            fraction_lost,
            cumulative_lost: expected.saturating_sub(received).min(0x7f_ffff) as i32,
            ext_highest_seq: highest as u32,
            jitter: (self.stats.jitter_q4 >> 4) as u32,
            last_sr,
            delay_since_last_sr: dlsr,
        })
    }

    fn snapshot(&self, now: Instant) -> IncomingStreamState {
        IncomingStreamState {
            ssrc: self.ssrc,
            rtx_ssrc: self.rtx_ssrc,
            rid: self.rid.clone(),
            nack: Some(self.nack.snapshot(now)),
            cache: Some(self.cache.snapshot()),
            last_sr: self.last_sr.map(|(ntp, rtp_ts, at)| SenderReportInfo {
                ntp,
                rtp_ts,
                age_us: now.saturating_duration_since(at).as_micros() as u64,
            }),
            stats: Some(self.stats.clone()),
            highest_ext_ts: self.ts.highest(),
            last_keyframe_seq: self.last_keyframe,
            window_bytes: self.window_bytes,
            keyframe_wanted: self.keyframe_wanted,
            last_pli_age_ms: self.last_pli.map(|t| crate::time::age_ms(now, t)),
        }
    }

    fn restore(s: &IncomingStreamState, nack: NackConfig, cache: usize, now: Instant) -> Self {
        Self {
            ssrc: s.ssrc,
            rtx_ssrc: s.rtx_ssrc,
            rid: s.rid.clone(),
            nack: s.nack.as_ref().map_or_else(
                || NackGenerator::new(nack),
                |n| NackGenerator::restore(n, nack, now),
            ),
            ts: TsUnwrapper::from_highest(s.highest_ext_ts),
            cache: s.cache.as_ref().map_or_else(
                || PacketCache::new(cache),
                |c| PacketCache::restore(c, Some(cache)),
            ),
            stats: s.stats.clone().unwrap_or_default(),
            last_sr: s.last_sr.as_ref().map(|r| {
                let at = now
                    .checked_sub(Duration::from_micros(r.age_us))
                    .unwrap_or(now);
                (r.ntp, r.rtp_ts, at)
            }),
            last_keyframe: s.last_keyframe_seq,
            window_bytes: s.window_bytes,
            bitrate_bps: 0,
            keyframe_wanted: s.keyframe_wanted,
            // Not migrated: a pending request goes out as one somebody waits for.
            repair_only: false,
            last_pli: s.last_pli_age_ms.map(|a| crate::time::from_age_ms(now, a)),
        }
    }
}

/// What the receive path learnt from one packet, for the forwarder.
#[derive(Debug, Clone, Copy)]
pub struct Ingested {
    /// Media line index of the track.
    pub line: usize,
    /// The packet as the munger sees it.
    pub src: SourcePacket,
    /// Plaintext length of the (RTX-unwrapped) packet in the buffer.
    pub len: usize,
}

/// Why a publisher packet is not forwarded (normal outcomes, counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestDrop {
    /// Not parseable as RTP.
    Malformed,
    /// Matches no negotiated track.
    UnknownStream,
    /// Already received.
    Duplicate,
    /// An RTX packet that only carries padding (bandwidth probing).
    Padding,
}

/// One published track (one accepted m-line).
#[derive(Debug)]
pub struct IncomingTrack {
    /// Its negotiated parameters.
    pub line: MediaLine,
    /// Index of the m-line.
    pub index: usize,
    /// Streams by SSRC.
    pub streams: Vec<IncomingStream>,
    /// Index of the stream with the highest bitrate (its top simulcast layer; the only stream
    /// of a track without simulcast). Every stream is forwarded: each viewer picks its layer.
    pub selected: Option<usize>,
    fir_seq: u8,
    nack: NackConfig,
    cache: usize,
}

impl IncomingTrack {
    /// A track for an accepted m-line.
    pub fn new(index: usize, line: MediaLine, nack: NackConfig, cache: usize) -> Self {
        let mut t = Self {
            streams: Vec::new(),
            selected: None,
            fir_seq: 0,
            line,
            index,
            nack,
            cache,
        };
        for (ssrc, rtx) in t.line.remote_ssrcs.clone() {
            t.add_stream(ssrc, rtx, String::new());
        }
        t
    }

    fn add_stream(&mut self, ssrc: u32, rtx: Option<u32>, rid: String) -> Option<usize> {
        if self.streams.len() >= MAX_STREAMS_PER_TRACK {
            return None;
        }
        self.streams
            .push(IncomingStream::new(ssrc, rtx, rid, self.nack, self.cache));
        Some(self.streams.len() - 1)
    }

    /// Whether keyframe requests can be sent for this track.
    pub fn can_request_keyframe(&self) -> bool {
        self.line.video && (self.line.pli || self.line.fir)
    }

    /// The top layer (the only stream without simulcast).
    pub fn selected_stream(&self) -> Option<&IncomingStream> {
        self.selected.and_then(|i| self.streams.get(i))
    }

    /// A stream by media SSRC.
    pub fn stream(&self, ssrc: u32) -> Option<&IncomingStream> {
        self.streams.iter().find(|s| s.ssrc == ssrc)
    }

    /// Records a sender report for one of this track's streams.
    pub fn handle_sender_report(&mut self, now: Instant, ssrc: u32, ntp: u64, rtp_ts: u32) -> bool {
        match self.streams.iter_mut().find(|s| s.ssrc == ssrc) {
            Some(s) => {
                s.last_sr = Some((ntp, rtp_ts, now));
                true
            }
            None => false,
        }
    }

    /// The NTP time and source extended RTP timestamp of stream `ssrc` (`None`: the top
    /// layer) at `now`, projected from its last sender report. Each simulcast layer has a
    /// timestamp base of its own, so a viewer's report follows the layer it plays.
    pub fn sr_projection(&self, now: Instant, ssrc: Option<u32>) -> Option<(u64, u64)> {
        let s = match ssrc {
            Some(ssrc) => self.stream(ssrc)?,
            None => self.selected_stream()?,
        };
        let (ntp, rtp_ts, at) = s.last_sr?;
        let elapsed = now.saturating_duration_since(at);
        let ext = s.ts.peek(u64::from(rtp_ts));
        let ticks =
            elapsed.as_micros() as u64 * u64::from(self.line.codec.clock_rate()) / 1_000_000;
        Some((ntp_add(ntp, elapsed), ext + ticks))
    }

    /// Asks for a keyframe of the stream `ssrc` (`None`: of every stream of the track) that
    /// somebody waits for (a viewer switching to the layer, a new viewer, a recorder, a
    /// stream that restarted). The request goes upstream through
    /// [`IncomingTrack::take_keyframe_requests`], [`KeyframeThrottle::switch`] after the last.
    pub fn want_keyframe(&mut self, ssrc: Option<u32>) {
        for s in &mut self.streams {
            if ssrc.is_none_or(|x| x == s.ssrc) {
                s.keyframe_wanted = true;
                s.repair_only = false;
            }
        }
    }

    /// Asks for a keyframe of `ssrc` (`None`: of every stream) because a viewer lost part of a
    /// frame (its PLI or FIR): [`KeyframeThrottle::repair`] after the last request. Each
    /// keyframe goes to every viewer of the layer and costs several times a delta frame; a
    /// viewer on a lossy link would otherwise have its layer's publisher send them several
    /// times a second, into every other viewer's link.
    pub fn want_repair_keyframe(&mut self, ssrc: Option<u32>) {
        for s in &mut self.streams {
            if ssrc.is_none_or(|x| x == s.ssrc) && !s.keyframe_wanted {
                s.keyframe_wanted = true;
                s.repair_only = true;
            }
        }
    }

    /// Whether a keyframe request of any stream is pending.
    pub fn keyframe_wanted(&self) -> bool {
        self.streams.iter().any(|s| s.keyframe_wanted)
    }

    /// Takes the keyframe requests due: for each stream that wants a keyframe and whose last
    /// request is older than its throttle (per stream: each simulcast layer is its own
    /// encoder), appends `(media SSRC, use FIR, FIR sequence number)`.
    pub fn take_keyframe_requests(
        &mut self,
        now: Instant,
        throttle: KeyframeThrottle,
        out: &mut Vec<(u32, bool, u8)>,
    ) {
        if !self.can_request_keyframe() {
            return;
        }
        let use_fir = !self.line.pli;
        for s in &mut self.streams {
            if !s.keyframe_wanted || s.last_pli.is_some_and(|t| now < t + s.throttle(throttle)) {
                continue;
            }
            s.keyframe_wanted = false;
            s.repair_only = false;
            s.last_pli = Some(now);
            if use_fir {
                self.fir_seq = self.fir_seq.wrapping_add(1);
            }
            out.push((s.ssrc, use_fir, self.fir_seq));
        }
    }

    /// When a throttled keyframe request becomes possible. (A request that
    /// is not throttled is taken at once, so a pending one always has a
    /// previous request.)
    pub fn keyframe_deadline(&self, throttle: KeyframeThrottle) -> Option<Instant> {
        if !self.can_request_keyframe() {
            return None;
        }
        self.streams
            .iter()
            .filter(|s| s.keyframe_wanted)
            .filter_map(|s| s.last_pli.map(|t| t + s.throttle(throttle)))
            .min()
    }

    /// Finds (or learns) the stream of a packet: `(stream index, is_rtx)`.
    fn classify(&mut self, h: &RtpHeader, buf: &[u8]) -> Option<(usize, bool)> {
        if let Some(i) = self.streams.iter().position(|s| s.ssrc == h.ssrc) {
            return Some((i, false));
        }
        if let Some(i) = self.streams.iter().position(|s| s.rtx_ssrc == Some(h.ssrc)) {
            return Some((i, true));
        }
        let is_rtx = Some(h.payload_type) == self.line.rtx_pt;
        let ext_str = |uri: &str| {
            self.line
                .ext_id(uri)
                .and_then(|id| h.find_extension(buf, id))
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::to_owned)
        };
        if is_rtx {
            // Pair an RTX SSRC with its media stream: by repaired rid, else
            // the only stream without an RTX partner.
            let rrid = ext_str(EXT_RRID);
            let i = match rrid {
                Some(r) => self.streams.iter().position(|s| s.rid == r),
                None => {
                    let mut free = self
                        .streams
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.rtx_ssrc.is_none());
                    match (free.next(), free.next()) {
                        (Some((i, _)), None) => Some(i),
                        _ => None,
                    }
                }
            }?;
            self.streams[i].rtx_ssrc = Some(h.ssrc);
            return Some((i, true));
        }
        if h.payload_type != self.line.pt {
            return None;
        }
        let rid = ext_str(EXT_RID).unwrap_or_default();
        if !rid.is_empty() && !self.line.rids.contains(&rid) {
            return None;
        }
        // A new SSRC without a rid on a non-simulcast track replaces the
        // old one (the publisher restarted its encoder): keep at most one.
        if rid.is_empty()
            && self.line.rids.is_empty()
            && let Some(i) = self.streams.iter().position(|s| s.rid.is_empty())
            && self
                .line
                .remote_ssrcs
                .iter()
                .all(|(m, _)| *m != self.streams[i].ssrc)
        {
            self.streams[i] = IncomingStream::new(h.ssrc, None, rid, self.nack, self.cache);
            return Some((i, false));
        }
        self.add_stream(h.ssrc, None, rid).map(|i| (i, false))
    }

    /// Receives one decrypted RTP packet (`buf[..len]`). RTX packets are
    /// unwrapped in place. Returns what the forwarder needs.
    pub fn ingest(
        &mut self,
        now: Instant,
        epoch: Instant,
        buf: &mut [u8],
        len: usize,
        h: RtpHeader,
    ) -> Result<Ingested, IngestDrop> {
        let (si, is_rtx) = self
            .classify(&h, &buf[..len])
            .ok_or(IngestDrop::UnknownStream)?;
        let (len, h) = if is_rtx {
            if h.payload_range.is_empty() {
                return Err(IngestDrop::Padding);
            }
            let ssrc = self.streams[si].ssrc;
            let n =
                rtp::rtx_unwrap(buf, len, self.line.pt, ssrc).map_err(|_| IngestDrop::Malformed)?;
            let h = RtpHeader::parse(&buf[..n]).map_err(|_| IngestDrop::Malformed)?;
            (n, h)
        } else {
            (len, h)
        };
        let codec = self.line.codec;
        let clock_rate = codec.clock_rate();
        let s = &mut self.streams[si];
        let (ext_seq, arrival) = s.nack.on_packet(now, h.sequence);
        match arrival {
            Arrival::Duplicate => return Err(IngestDrop::Duplicate),
            Arrival::Reset => s.keyframe_wanted = true,
            Arrival::New | Arrival::Recovered => {}
        }
        let ext_ts = s.ts.unwrap(u64::from(h.timestamp));
        s.stats.packets += 1;
        let payload = h.payload(&buf[..len]);
        s.stats.bytes += payload.len() as u64;
        s.window_bytes += len as u64;
        if arrival == Arrival::New {
            s.update_jitter(now, epoch, h.timestamp, clock_rate);
        }
        let keyframe_start = codec.is_keyframe_start(payload);
        if keyframe_start && codec.is_video() {
            s.last_keyframe = Some(ext_seq);
        }
        let vp8 = match codec {
            Codec::Vp8 => codec::vp8_descriptor(payload).and_then(|d| {
                d.picture_id
                    .filter(|(_, long)| *long)
                    .map(|(pid, _)| (pid, d.tl0_pic_idx.map(|(t, _)| t)))
            }),
            _ => None,
        };
        s.cache.insert(ext_seq, &buf[..len]);
        let ssrc = s.ssrc;
        if self.selected.is_none() {
            self.selected = Some(si);
        }
        Ok(Ingested {
            line: self.index,
            src: SourcePacket {
                ssrc,
                ext_seq,
                ext_ts,
                keyframe_start,
                clock_rate,
                vp8,
                dd_frame: None,
            },
            len,
        })
    }

    /// Sequence numbers to NACK now, per stream: appends `(media ssrc, seqs)`.
    /// Returns how many packets were given up on.
    pub fn poll_nacks(&mut self, now: Instant, out: &mut Vec<(u32, Vec<u16>)>) -> usize {
        if !self.line.nack {
            return 0;
        }
        let mut gave_up = 0;
        for s in &mut self.streams {
            let mut seqs = Vec::new();
            let lost = s.nack.poll_nacks(now, &mut seqs);
            if lost > 0 {
                s.keyframe_wanted = true;
            }
            gave_up += lost;
            if !seqs.is_empty() {
                out.push((s.ssrc, seqs));
            }
        }
        gave_up
    }

    /// Earliest NACK deadline of the track's streams.
    pub fn nack_deadline(&self) -> Option<Instant> {
        if !self.line.nack {
            return None;
        }
        self.streams
            .iter()
            .filter_map(|s| s.nack.poll_timeout())
            .min()
    }

    /// Report blocks for the track's streams; also closes the bitrate
    /// window (`interval` long) and re-evaluates which layer is the top one.
    pub fn report(&mut self, now: Instant, interval: Duration, blocks: &mut Vec<ReportBlock>) {
        let secs = interval.as_secs_f64().max(0.001);
        for s in &mut self.streams {
            s.bitrate_bps = (s.window_bytes as f64 * 8.0 / secs) as u64;
            s.window_bytes = 0;
            if let Some(b) = s.report_block(now) {
                blocks.push(b);
            }
        }
        self.select_layer();
    }

    /// The top layer is the highest-bitrate one; it changes only on a clear winner (1.5×) or
    /// when the current one went silent.
    fn select_layer(&mut self) {
        let Some(best) = (0..self.streams.len()).max_by_key(|&i| self.streams[i].bitrate_bps)
        else {
            return;
        };
        let cur = self
            .selected
            .and_then(|i| self.streams.get(i))
            .map_or(0, |s| s.bitrate_bps);
        let best_rate = self.streams[best].bitrate_bps;
        if self.selected != Some(best) && best_rate > 0 && (cur == 0 || best_rate * 2 > cur * 3) {
            self.selected = Some(best);
        }
    }

    /// Total receive bitrate of the track.
    pub fn bitrate_bps(&self) -> u64 {
        self.streams.iter().map(|s| s.bitrate_bps).sum()
    }

    /// Exports the track.
    pub fn snapshot(&self, now: Instant) -> IncomingTrackState {
        IncomingTrackState {
            index: self.index as u32,
            streams: self.streams.iter().map(|s| s.snapshot(now)).collect(),
            selected: self.selected.map(|i| i as u32),
            last_pli_age_ms: self
                .streams
                .iter()
                .filter_map(|s| s.last_pli)
                .max()
                .map(|t| crate::time::age_ms(now, t)),
            fir_seq: u32::from(self.fir_seq),
            keyframe_wanted: self.keyframe_wanted(),
        }
    }

    /// Rebuilds a track.
    pub fn restore(
        s: &IncomingTrackState,
        line: MediaLine,
        nack: NackConfig,
        cache: usize,
        now: Instant,
    ) -> Self {
        let mut streams: Vec<IncomingStream> = s
            .streams
            .iter()
            .take(MAX_STREAMS_PER_TRACK)
            .map(|st| IncomingStream::restore(st, nack, cache, now))
            .collect();
        // A snapshot of version 1 kept one request and its time for the whole track.
        let track_pli = s.last_pli_age_ms.map(|a| crate::time::from_age_ms(now, a));
        for st in &mut streams {
            st.keyframe_wanted |= s.keyframe_wanted;
            st.last_pli = st.last_pli.or(track_pli);
        }
        Self {
            index: s.index as usize,
            selected: s
                .selected
                .map(|i| i as usize)
                .filter(|i| *i < streams.len()),
            streams,
            fir_seq: s.fir_seq as u8,
            line,
            nack,
            cache,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rids: &[&str]) -> MediaLine {
        MediaLine {
            mid: "1".into(),
            video: true,
            accepted: true,
            codec: Codec::Vp8,
            pt: 96,
            rtx_pt: Some(97),
            fmtp: String::new(),
            nack: true,
            pli: true,
            fir: true,
            remb: true,
            twcc: false,
            extmap: vec![(10, EXT_RID.into()), (11, EXT_RRID.into())],
            remote_ssrcs: vec![],
            rids: rids.iter().map(|r| (*r).to_string()).collect(),
            local_ssrc: 0,
            local_rtx_ssrc: None,
            source: None,
            rejected: None,
        }
    }

    /// A VP8 packet with a one-byte `rid` extension, `payload` bytes long.
    fn packet(ssrc: u32, seq: u16, rid: &str, payload: usize, key: bool) -> Vec<u8> {
        let mut p = vec![if rid.is_empty() { 0x80 } else { 0x90 }, 96];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&(u32::from(seq) * 3000).to_be_bytes());
        p.extend_from_slice(&ssrc.to_be_bytes());
        if rid.is_empty() {
            p.extend_from_slice(&[0x10, if key { 0x00 } else { 0x01 }]);
            p.resize(p.len() + payload, 0xAA);
            return p;
        }
        let mut ext = vec![(10 << 4) | (rid.len() as u8 - 1)];
        ext.extend_from_slice(rid.as_bytes());
        while ext.len() % 4 != 0 {
            ext.push(0);
        }
        p.extend_from_slice(&[0xBE, 0xDE]);
        p.extend_from_slice(&((ext.len() / 4) as u16).to_be_bytes());
        p.extend_from_slice(&ext);
        p.extend_from_slice(&[0x10, if key { 0x00 } else { 0x01 }]);
        p.resize(p.len() + payload, 0xAA);
        p
    }

    fn feed(t: &mut IncomingTrack, now: Instant, pkt: &[u8]) -> Result<Ingested, IngestDrop> {
        let mut buf = pkt.to_vec();
        let h = RtpHeader::parse(&buf).unwrap();
        let len = buf.len();
        t.ingest(now, now, &mut buf, len, h)
    }

    #[test]
    fn simulcast_layers_are_all_taken_and_the_top_is_the_highest_bitrate() {
        let t0 = Instant::now();
        let mut t = IncomingTrack::new(1, line(&["q", "h", "f"]), NackConfig::default(), 100);
        for seq in 0..30u16 {
            for (ssrc, rid, size) in [(1, "q", 100), (2, "h", 400), (3, "f", 1000)] {
                let i = feed(&mut t, t0, &packet(ssrc, seq, rid, size, seq == 0)).unwrap();
                assert_eq!((i.src.ssrc, i.src.keyframe_start), (ssrc, seq == 0));
            }
        }
        assert_eq!(
            t.streams.iter().map(|s| s.rid.as_str()).collect::<Vec<_>>(),
            ["q", "h", "f"]
        );
        // The first layer seen is the top one until reports show the rates.
        assert_eq!(t.selected_stream().map(|s| s.ssrc), Some(1));
        t.report(
            t0 + Duration::from_secs(1),
            Duration::from_secs(1),
            &mut Vec::new(),
        );
        assert_eq!(
            t.selected_stream().map(|s| s.rid.as_str()),
            Some("f"),
            "top layer"
        );
        assert!(
            !t.keyframe_wanted(),
            "viewers ask for their own layers' keyframes"
        );
        // An unknown rid is not a stream of this track.
        assert_eq!(
            feed(&mut t, t0, &packet(9, 1, "x", 10, true)).unwrap_err(),
            IngestDrop::UnknownStream
        );
    }

    #[test]
    fn keyframe_requests_are_per_layer_and_throttled_per_layer() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let throttle = KeyframeThrottle {
            switch: ms(300),
            repair: ms(1000),
        };
        let mut t = IncomingTrack::new(1, line(&["q", "f"]), NackConfig::default(), 100);
        feed(&mut t, t0, &packet(5, 1, "q", 100, true)).unwrap_or_else(|_| panic!());
        feed(&mut t, t0, &packet(6, 1, "f", 100, true)).unwrap_or_else(|_| panic!());
        let mut due = Vec::new();
        t.want_keyframe(Some(5));
        t.take_keyframe_requests(t0, throttle, &mut due);
        assert_eq!(due, [(5, false, 0)]);
        // Layer 5 is throttled, layer 6 is not.
        due.clear();
        t.want_keyframe(Some(5));
        t.want_keyframe(Some(6));
        t.take_keyframe_requests(t0 + ms(100), throttle, &mut due);
        assert_eq!(due, [(6, false, 0)], "throttled per layer");
        assert_eq!(t.keyframe_deadline(throttle), Some(t0 + ms(300)));
        due.clear();
        t.take_keyframe_requests(t0 + ms(300), throttle, &mut due);
        assert_eq!(due, [(5, false, 0)]);
        // `None` asks every layer.
        due.clear();
        t.want_keyframe(None);
        t.take_keyframe_requests(t0 + ms(700), throttle, &mut due);
        assert_eq!(due, [(5, false, 0), (6, false, 0)]);
        // A viewer's repair request waits a repair throttle after the last request...
        due.clear();
        t.want_repair_keyframe(Some(5));
        assert_eq!(t.keyframe_deadline(throttle), Some(t0 + ms(1700)));
        t.take_keyframe_requests(t0 + ms(1100), throttle, &mut due);
        assert!(due.is_empty(), "{due:?}");
        // ... unless somebody waits for that keyframe meanwhile.
        t.want_keyframe(Some(5));
        t.take_keyframe_requests(t0 + ms(1100), throttle, &mut due);
        assert_eq!(due, [(5, false, 0)]);
        due.clear();
        t.want_repair_keyframe(Some(5));
        t.take_keyframe_requests(t0 + ms(2100), throttle, &mut due);
        assert_eq!(due, [(5, false, 0)], "a second after the last");
        // FIR when only FIR was negotiated, with an incrementing sequence number.
        let mut l = line(&[]);
        l.pli = false;
        let mut f = IncomingTrack::new(1, l, NackConfig::default(), 100);
        feed(&mut f, t0, &packet(6, 1, "", 100, true)).unwrap_or_else(|_| panic!());
        f.want_keyframe(None);
        due.clear();
        f.take_keyframe_requests(t0, throttle, &mut due);
        assert_eq!(due, [(6, true, 1)]);
    }

    #[test]
    fn duplicates_are_dropped_and_snapshot_round_trips() {
        let t0 = Instant::now();
        let mut t = IncomingTrack::new(1, line(&[]), NackConfig::default(), 100);
        for seq in [1u16, 2, 4] {
            feed(&mut t, t0, &packet(7, seq, "", 50, seq == 1)).unwrap_or_else(|_| panic!());
        }
        assert_eq!(
            feed(&mut t, t0, &packet(7, 2, "", 50, false)).unwrap_err(),
            IngestDrop::Duplicate
        );
        let snap = t.snapshot(t0);
        let r = IncomingTrack::restore(&snap, line(&[]), NackConfig::default(), 100, t0);
        assert_eq!(r.snapshot(t0), snap);
        assert!(
            r.stream(7)
                .and_then(|s| s.cached(r.stream(7).unwrap().nack().highest().unwrap()))
                .is_some()
        );
        assert_eq!(
            r.stream(7).unwrap().nack().missing(),
            1,
            "seq 3 still missing after restore"
        );
    }
}
