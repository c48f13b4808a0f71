//! The media path: a publisher's packet fanned out to its viewers, keyframe
//! requests upstream, and viewers' RTCP (NACK answered from the cache,
//! PLI/FIR passed to the publisher).

use std::time::Instant;

use ferry_proto::StreamId;

use super::Node;
use crate::codec::layers::Selection;
use crate::media::adapt::layers::{SUBSTITUTE_SILENCE, SourceLayer};
use crate::media::egress::Take;
use crate::media::ingest::{IncomingTrack, IngestDrop};
use crate::media::munger::{DropReason, SourcePacket};
use crate::node::session::{Phase, Role};
use crate::rtcp::{RtcpIter, RtcpPacket};
use crate::rtp::RtpHeader;

impl Node {
    pub(super) fn handle_rtp(&mut self, now: Instant, key: usize, data: &mut [u8], len: usize) {
        let Ok(h) = RtpHeader::parse(&data[..len]) else {
            self.out.metrics.rtp_parse_errors += 1;
            return;
        };
        let epoch = self.epoch;
        let Some(s) = self.sessions[key].as_mut() else {
            return;
        };
        let Role::Publisher(tracks) = &mut s.role else {
            // Viewers send no media.
            self.out.metrics.rtp_unknown_stream += 1;
            return;
        };
        // Every packet counts for the publisher's own bandwidth estimate, probes included.
        if let Some((id, rec)) = s.twcc_rx.as_mut()
            && let Some(&[a, b]) = h.find_extension(&data[..len], *id)
        {
            rec.on_packet(now, u16::from_be_bytes([a, b]));
        }
        let mid_ok = |t: &IncomingTrack| {
            h.payload_type == t.line.pt || Some(h.payload_type) == t.line.rtx_pt
        };
        let Some(ti) = tracks
            .iter()
            .position(|t| {
                t.stream(h.ssrc).is_some() || t.streams.iter().any(|st| st.rtx_ssrc == Some(h.ssrc))
            })
            .or_else(|| tracks.iter().position(mid_ok))
        else {
            self.out.metrics.rtp_unknown_stream += 1;
            return;
        };
        let ing = match tracks[ti].ingest(now, epoch, data, len, h) {
            Ok(i) => i,
            Err(IngestDrop::UnknownStream) => {
                self.out.metrics.rtp_unknown_stream += 1;
                return;
            }
            Err(IngestDrop::Malformed) => {
                self.out.metrics.rtp_parse_errors += 1;
                return;
            }
            Err(IngestDrop::Duplicate) => return,
            Err(IngestDrop::Padding) => {
                self.out.metrics.padding_dropped += 1;
                return;
            }
        };
        self.out.metrics.rtp_received += 1;
        if let Some(w) = s.wal.as_mut() {
            w.cache_packet(ing.line, ing.src.ssrc, ing.src.ext_seq, &data[..ing.len]);
        }
        if self.replacing.contains_key(&key) {
            // A resumed publisher's new transport takes over at its first keyframe (its first
            // packet if it sends no video); until then the old one feeds the viewers.
            let video = tracks.iter().any(|t| t.line.video);
            if !(ing.src.keyframe_start && (tracks[ti].line.video || !video)) {
                if let Some(t) = tracks.iter_mut().find(|t| t.line.video) {
                    t.want_keyframe(None);
                }
                s.send_keyframe_requests(now, &self.scfg, &mut self.out);
                return;
            }
            self.take_over(key);
        }
        let Some(s) = self.sessions[key].as_mut() else {
            return;
        };
        let Role::Publisher(tracks) = &mut s.role else {
            return;
        };
        if tracks[ti].keyframe_wanted() {
            s.send_keyframe_requests(now, &self.scfg, &mut self.out);
        }
        let stream = s.stream.clone();
        let pkt = &data[..ing.len];
        let want_keyframe = self.fan_out(now, &stream, ing.line, pkt, &ing.src);
        self.relay_out(&stream, ing.line, &ing.src, pkt, None);
        if want_keyframe {
            self.request_keyframe(now, &stream, ing.line, Some(ing.src.ssrc));
        }
    }

    /// Forwards one source packet of `stream`'s track `line` to every connected local viewer
    /// that plays its layer. Returns whether a viewer waits for a keyframe of the packet's
    /// stream (`src.ssrc`).
    pub(super) fn fan_out(
        &mut self,
        now: Instant,
        stream: &StreamId,
        line: usize,
        pkt: &[u8],
        src: &SourcePacket,
    ) -> bool {
        // What the source offers: every layer is fanned out here, each viewer takes its own.
        // Simulcast is what the publisher negotiated (rids), not how many SSRCs came: a
        // publisher that restarts its encoder sends a new SSRC that replaces the old one.
        let sessions = &self.sessions;
        let (simulcast, recorded, layer_info, dd_ext, unknown_layers) =
            match self.streams.get_mut(stream) {
                Some(entry) => {
                    let source = match entry.publisher.and_then(|k| sessions.get(k)?.as_ref()) {
                        Some(p) => p.media.get(line),
                        None => entry.relay_in.as_ref().and_then(|r| r.media.get(line)),
                    };
                    let rids = source.map_or(0, |l| l.rids.len());
                    let codec = source.map(|l| l.codec);
                    let dd_ext = source
                        .and_then(|l| l.ext_id(ferry_rtc::sdp::extmap::EXT_DEPENDENCY_DESCRIPTOR));
                    // Which layers of a scalable stream the packet is of (once for every viewer).
                    let read = codec
                        .map(|c| entry.layer_info(now, src.keyframe_start, line, c, dd_ext, pkt));
                    let unknown_layers = matches!(read, Some(Err(_)));
                    let info = read.and_then(Result::ok).flatten();
                    // A keyframe says the picture size (what viewers' caps are checked against).
                    if src.keyframe_start
                        && let Some(c) = codec.filter(|c| c.is_video())
                    {
                        entry.note_sizes(line, c, src.ssrc, pkt);
                    }
                    let layers = entry.layers_mut(line);
                    layers.on_media(
                        now,
                        src.ssrc,
                        pkt.len(),
                        Some(src.ext_ts as u32),
                        src.keyframe_start,
                    );
                    if let Some(i) = &info {
                        layers.on_layer(src.ssrc, i.spatial, i.temporal, pkt.len());
                    }
                    layers.simulcast = rids > 1;
                    // Recordings (and transcoders) take the top layer.
                    (
                        layers.simulcast,
                        !layers.simulcast || layers.top(now) == Some(src.ssrc),
                        info,
                        dd_ext,
                        unknown_layers,
                    )
                }
                None => (false, true, None, None, false),
            };
        // The descriptor's frame number, which each viewer's munger renumbers: read with the
        // layers where they came from the descriptor, else from its mandatory fields.
        let with_dd;
        let frame = match layer_info.as_ref().and_then(|i| i.dd) {
            Some(d) => Some(d.frame_number),
            None => dd_ext.and_then(|id| dd_frame(pkt, id)),
        };
        let src = match frame {
            Some(f) => {
                with_dd = SourcePacket {
                    dd_frame: Some(f),
                    ..*src
                };
                &with_dd
            }
            None => src,
        };
        if recorded {
            self.record(now, stream, line, pkt);
        }
        let mut want_keyframe = false;
        let mut took_over = Vec::new();
        let Some(entry) = self.streams.get_mut(stream) else {
            return false;
        };
        // Video keyframes (every audio packet "starts a keyframe").
        if src.keyframe_start && src.clock_rate == 90_000 {
            entry.gop += 1;
            if self.overload.ratio() > 0.0 {
                choose_served(
                    &self.overload,
                    &mut self.sessions,
                    &entry.viewers,
                    line,
                    entry.gop,
                );
            }
        }
        let gop = entry.gop;
        let layers = entry.layers.get(line);
        // Whether this is a video packet, and whether an overloaded node skipped a viewer.
        let (mut video, mut shed_any) = (false, false);
        for &vk in &entry.viewers {
            let Some(v) = self.sessions[vk].as_mut() else {
                continue;
            };
            if v.phase != Phase::Connected || !v.active {
                continue;
            }
            let Role::Viewer(vtracks) = &mut v.role else {
                continue;
            };
            // A resumed viewer's new transport takes over at its first video packet (its first
            // packet if it plays no video).
            let takes_video = !v.video_paused && vtracks.iter().any(|t| t.line.video);
            let Some(t) = vtracks.iter_mut().find(|t| t.source() == Some(line)) else {
                continue;
            };
            if v.video_paused && t.line.video {
                continue;
            }
            if simulcast {
                // The viewer's own layer: the one it plays, or the one it switches to at that
                // layer's next keyframe.
                let playing = t
                    .playing()
                    .filter(|c| layers.and_then(|l| l.get(*c)).is_some_and(|l| live(now, l)));
                match t.takes(src, playing) {
                    // The layer a switch waited for starts with this keyframe: its own temporal
                    // layer from this packet on.
                    Take::Forward if playing != Some(src.ssrc) => t.layer_came(),
                    Take::Forward => {}
                    Take::Skip => continue,
                    Take::SkipWantKeyframe => {
                        want_keyframe = true;
                        continue;
                    }
                }
            }
            // A scalable stream: only the layers the viewer gets; what it does not get leaves
            // no gap in its sequence (a number reserved for a packet that turns out to be of
            // such a layer is filled with padding).
            let mut marker = None;
            // A descriptor this node cannot read yet: its layers are unknown, and the viewer
            // gets every layer of it until a keyframe brings the structure. Only a viewer that
            // gets less than every layer asks for that keyframe: a request the stream does not
            // need would hold back (throttle) the one of a viewer about to connect.
            if unknown_layers && t.selects_layers() {
                want_keyframe = true;
            }
            if let Some(info) = &layer_info {
                let selection = t.select_layer(src.ssrc, info);
                if t.svc_needs_keyframe() {
                    want_keyframe = true;
                }
                match selection {
                    Selection::Forward { marker: m } => marker = Some(m),
                    Selection::Drop => {
                        let mut buf = self.out.buffer();
                        match t.skip(src, &mut buf) {
                            Some(n) => {
                                v.send_rtp(now, &mut self.out, buf, n);
                            }
                            None => self.out.recycle(buf),
                        }
                        continue;
                    }
                }
            }
            if t.line.video {
                video = true;
                // Overload: whole frames only — a viewer leaves at a frame's first packet and
                // comes back at a keyframe (its munger re-bases, so it sees no gap to NACK).
                // Who is served is decided at keyframes, for the whole GOP ([`choose_served`]);
                // in between, more viewers leave only while the delay is far above target.
                let out = self.overload.ratio() > 0.0 && t.served_gop != gop;
                let leaves = if src.keyframe_start {
                    out
                } else {
                    self.overload.urgent() && self.overload.sheds(vk, gop)
                };
                if t.shed && (out || !src.keyframe_start) {
                    // A shed viewer comes back at a keyframe only (no request of its own: the
                    // rotation below asks for them).
                    self.out.metrics.dropped_overload += 1;
                    shed_any = true;
                    continue;
                }
                if t.shed {
                    t.shed = false;
                } else if leaves && t.last_src_ts != Some(src.ext_ts) {
                    t.shed = true;
                    t.restart_at_keyframe();
                    self.out.metrics.overload_sheds += 1;
                    self.out.metrics.dropped_overload += 1;
                    shed_any = true;
                    continue;
                }
            }
            let take_over = t.line.video || !takes_video;
            let mut buf = self.out.buffer();
            let src_ts = src.ext_ts;
            let switching = simulcast && t.playing() != Some(src.ssrc);
            match t.forward_marked(now, pkt, src, marker, &mut buf) {
                Ok(n) => {
                    t.last_src_ts = Some(src_ts);
                    if switching {
                        self.out.metrics.layer_switches += 1;
                    }
                    if v.send_rtp(now, &mut self.out, buf, n) {
                        self.out.metrics.rtp_forwarded += 1;
                        if take_over && self.replacing.contains_key(&vk) {
                            took_over.push(vk);
                        }
                    }
                }
                Err(reason) => {
                    self.out.recycle(buf);
                    if reason == DropReason::WaitingKeyframe {
                        self.out.metrics.dropped_waiting_keyframe += 1;
                        want_keyframe = true;
                    }
                }
            }
        }
        // While viewers are shed, a keyframe every `rotate_every` rotates the shed set.
        if video && let Some(entry) = self.streams.get_mut(stream) {
            if !shed_any {
                entry.next_rotation = None;
            } else {
                let every = self.overload.config().rotate_every;
                match entry.next_rotation {
                    None => entry.next_rotation = Some(now + every),
                    Some(t) if now >= t => {
                        entry.next_rotation = Some(now + every);
                        self.out.metrics.overload_keyframe_requests += 1;
                        want_keyframe = true;
                    }
                    Some(_) => {}
                }
            }
        }
        // A resumed viewer's new transport got its first packet: the old one can go.
        for vk in took_over {
            self.take_over(vk);
        }
        want_keyframe
    }

    /// Session `key` (a resumed session's new transport) carries media now: it replaces the
    /// old transport, which is closed.
    pub(super) fn take_over(&mut self, key: usize) {
        let Some(old) = self.replacing.remove(&key) else {
            return;
        };
        self.attach(key);
        self.close(old, crate::node::session::CloseReason::Replaced);
        self.note_deadline(key);
    }

    /// Asks the source of `stream`'s track `line` for a keyframe of its layer `ssrc` (`None`:
    /// of every layer): its publisher here, or the node it is relayed from.
    pub(super) fn request_keyframe(
        &mut self,
        now: Instant,
        stream: &StreamId,
        line: usize,
        ssrc: Option<u32>,
    ) {
        self.ask_keyframe(now, stream, line, ssrc, false);
    }

    /// As [`Node::request_keyframe`], for a viewer that lost part of a frame: throttled by
    /// [`KeyframeThrottle::repair`](crate::media::ingest::KeyframeThrottle::repair).
    pub(super) fn request_repair_keyframe(
        &mut self,
        now: Instant,
        stream: &StreamId,
        line: usize,
        ssrc: Option<u32>,
    ) {
        self.ask_keyframe(now, stream, line, ssrc, true);
    }

    fn ask_keyframe(
        &mut self,
        now: Instant,
        stream: &StreamId,
        line: usize,
        ssrc: Option<u32>,
        repair: bool,
    ) {
        let Some(pk) = self.streams.get(stream).and_then(|e| e.publisher) else {
            self.request_relay_keyframe(now, stream, line, ssrc, repair);
            return;
        };
        let Some(p) = self.sessions[pk].as_mut() else {
            return;
        };
        if let Role::Publisher(tracks) = &mut p.role
            && let Some(t) = tracks.iter_mut().find(|t| t.index == line)
        {
            if repair {
                t.want_repair_keyframe(ssrc);
            } else {
                t.want_keyframe(ssrc);
            }
        }
        p.send_keyframe_requests(now, &self.scfg, &mut self.out);
        self.note_deadline(pk);
    }

    pub(super) fn handle_rtcp(&mut self, now: Instant, key: usize, data: &[u8]) {
        // The report's arrival in compact NTP, for the round-trip time of a viewer's report.
        let arrival = ferry_rtc::rtcp::ntp_short(self.config.wall.ntp(now));
        let Some(s) = self.sessions[key].as_mut() else {
            return;
        };
        let stream = s.stream.clone();
        let mut nacks: Vec<(usize, u16)> = Vec::new();
        let mut keyframes: Vec<(usize, Option<u32>)> = Vec::new();
        let mut reports = Vec::new();
        for p in RtcpIter::new(data) {
            let p = match p {
                Ok(p) => p,
                Err(_) => {
                    self.out.metrics.rtcp_parse_errors += 1;
                    break;
                }
            };
            match (&mut s.role, p) {
                (Role::Publisher(tracks), RtcpPacket::SenderReport(sr)) => {
                    reports.push(sr.info);
                    for t in tracks.iter_mut() {
                        if t.handle_sender_report(now, sr.info.ssrc, sr.info.ntp, sr.info.rtp_ts) {
                            break;
                        }
                    }
                }
                (Role::Viewer(tracks), RtcpPacket::Nack(n)) => {
                    if let Some(ti) = tracks
                        .iter()
                        .position(|t| t.line.local_ssrc == n.media_ssrc)
                    {
                        for seq in n.lost() {
                            nacks.push((ti, seq));
                        }
                    }
                }
                (Role::Viewer(_), RtcpPacket::TransportCc { fci, .. }) => {
                    match s.adapt.handle_twcc(now, fci) {
                        Ok(()) => self.out.metrics.twcc_feedback_received += 1,
                        Err(_) => self.out.metrics.rtcp_parse_errors += 1,
                    }
                }
                (Role::Viewer(_), RtcpPacket::Remb(r)) => s.adapt.handle_remb(now, r.bitrate_bps),
                (Role::Viewer(tracks), RtcpPacket::ReceiverReport(rr)) => {
                    // The loss on the path to the viewer: the worst of our streams.
                    let lost = rr
                        .blocks
                        .iter()
                        .filter(|b| tracks.iter().any(|t| t.line.local_ssrc == b.ssrc))
                        .map(|b| b.fraction_lost)
                        .max();
                    if let Some(lost) = lost {
                        s.adapt.handle_loss_report(now, lost);
                    }
                    // Its round trip: the blocks on our streams that echo one of our reports.
                    let rtt = rr
                        .blocks
                        .iter()
                        .filter(|b| tracks.iter().any(|t| t.line.local_ssrc == b.ssrc))
                        .filter_map(|b| {
                            ferry_rtc::rtcp::rtt(arrival, b.last_sr, b.delay_since_last_sr)
                        })
                        .min();
                    if let Some(rtt) = rtt {
                        s.adapt.handle_rtt(now, rtt);
                    }
                }
                (Role::Viewer(tracks), RtcpPacket::Pli { media_ssrc, .. }) => {
                    if let Some(t) = tracks.iter().find(|t| t.line.local_ssrc == media_ssrc) {
                        keyframes.extend(t.source().map(|l| (l, t.keyframe_layer())));
                    }
                }
                (Role::Viewer(tracks), RtcpPacket::Fir(f)) => {
                    for (ssrc, _) in f.entries() {
                        if let Some(t) = tracks.iter().find(|t| t.line.local_ssrc == ssrc) {
                            keyframes.extend(t.source().map(|l| (l, t.keyframe_layer())));
                        }
                    }
                }
                _ => {}
            }
        }
        for sr in &reports {
            self.record_sender_report(&stream, sr);
        }
        self.out.metrics.keyframe_requests_received += keyframes.len() as u64;
        for (line, ssrc) in keyframes {
            self.request_repair_keyframe(now, &stream, line, ssrc);
        }
        if !nacks.is_empty() {
            self.retransmit(now, key, &stream, &nacks);
        }
        if self.sessions[key]
            .as_ref()
            .is_some_and(|s| s.adapt.needs_allocation())
        {
            self.allocate(now, key);
        }
    }

    /// A source packet of `stream` from the local publisher's or the relay's cache.
    fn cached_source(
        &self,
        stream: &StreamId,
        line: usize,
        ssrc: u32,
        ext_seq: u64,
    ) -> Option<&[u8]> {
        let entry = self.streams.get(stream)?;
        if let Some(pk) = entry.publisher {
            return match self.sessions[pk].as_ref().map(|p| &p.role) {
                Some(Role::Publisher(pt)) => pt
                    .iter()
                    .find(|t| t.index == line)
                    .and_then(|t| t.stream(ssrc))
                    .and_then(|st| st.cached(ext_seq)),
                _ => None,
            };
        }
        entry.relay_in.as_ref()?.cached(line as u8, ssrc, ext_seq)
    }

    /// A cached source packet with what the munger needs to know of it;
    /// `near_ts` is an extended timestamp close to the packet's.
    pub(super) fn cached_source_packet(
        &self,
        stream: &StreamId,
        line: usize,
        ssrc: u32,
        ext_seq: u64,
        near_ts: u64,
    ) -> Option<(Vec<u8>, SourcePacket)> {
        let pkt = self.cached_source(stream, line, ssrc, ext_seq)?;
        let entry = self.streams.get(stream)?;
        let media = match entry.publisher.and_then(|k| self.sessions[k].as_ref()) {
            Some(p) => p.media.get(line)?,
            None => entry.relay_in.as_ref()?.media.get(line)?,
        };
        let h = RtpHeader::parse(pkt).ok()?;
        let ext_ts =
            crate::seq::TsUnwrapper::from_highest(Some(near_ts)).peek(u64::from(h.timestamp));
        Some((
            pkt.to_vec(),
            source_packet(media, ssrc, ext_seq, ext_ts, pkt)?,
        ))
    }

    /// Answers a viewer's NACKs from the source's cache.
    fn retransmit(&mut self, now: Instant, vkey: usize, stream: &StreamId, nacks: &[(usize, u16)]) {
        self.out.metrics.nacks_received += nacks.len() as u64;
        for &(ti, seq) in nacks {
            // Look the packet up on the viewer side, copy it from the publisher's cache.
            let Some(Role::Viewer(vt)) = self.sessions[vkey].as_ref().map(|s| &s.role) else {
                return;
            };
            let Some(track) = vt.get(ti) else { continue };
            let (Some(r), Some(line)) = (track.lookup_nack(seq), track.source()) else {
                self.out.metrics.retransmissions_missed += 1;
                continue;
            };
            if r.hole {
                // A number that carried nothing (a layer it does not get): padding fills it.
                let Some(v) = self.sessions[vkey].as_mut() else {
                    return;
                };
                let Role::Viewer(vt) = &mut v.role else {
                    return;
                };
                let mut buf = self.out.buffer();
                let n = vt.get_mut(ti).map(|t| t.retransmit_hole(&r, &mut buf));
                match n {
                    Some(n) => {
                        v.send_rtp(now, &mut self.out, buf, n);
                    }
                    None => self.out.recycle(buf),
                }
                continue;
            }
            let mut src = self.out.buffer();
            let found = match self.cached_source(stream, line, r.src_ssrc, r.src_ext_seq) {
                Some(pkt) => {
                    src.extend_from_slice(pkt);
                    true
                }
                None => false,
            };
            if !found {
                self.out.recycle(src);
                self.out.metrics.retransmissions_missed += 1;
                continue;
            }
            let Some(v) = self.sessions[vkey].as_mut() else {
                return;
            };
            let Role::Viewer(vt) = &mut v.role else {
                return;
            };
            // Its size on the wire: the source packet, plus the RTX header's original number.
            let size = src.len() + 2;
            let budget = v.adapt.budget().map(|b| b.bps());
            if !v.adapt.resend.admit(now, size, budget) {
                self.out.recycle(src);
                self.out.metrics.retransmissions_over_budget += 1;
                continue;
            }
            let mut buf = self.out.buffer();
            let n = vt
                .get_mut(ti)
                .and_then(|t| t.retransmit(&r, &src, &mut buf));
            self.out.recycle(src);
            match n {
                Some(n) => {
                    if v.send_rtp(now, &mut self.out, buf, n) {
                        self.out.metrics.retransmissions_sent += 1;
                    }
                }
                None => {
                    self.out.recycle(buf);
                    self.out.metrics.retransmissions_missed += 1;
                }
            }
        }
    }
}

/// Whether the layer a viewer plays still sends: one silent for [`SUBSTITUTE_SILENCE`] is
/// given up for any layer's keyframe (the publisher stopped it, or restarted its encoder with a
/// new SSRC), ahead of the allocator's next round.
fn live(now: Instant, l: &SourceLayer) -> bool {
    now.saturating_duration_since(l.last_seen) < SUBSTITUTE_SILENCE
}

/// An overloaded node at a keyframe of track `line`: marks the viewers served for GOP `gop`,
/// (1 − shed ratio) of them, those that waited longest first (ties by a hash of the viewer
/// and the GOP), so that every viewer gets whole GOPs in turn. The count is rounded up or down
/// at random in proportion, so that a stream with one viewer is shed at the ratio too.
fn choose_served(
    overload: &super::overload::Overload,
    sessions: &mut [Option<crate::node::session::Session>],
    viewers: &[usize],
    line: usize,
    gop: u64,
) {
    let mut waiting: Vec<(u64, u64, usize)> = viewers
        .iter()
        .filter_map(|&vk| {
            let v = sessions[vk].as_ref()?;
            let Role::Viewer(tracks) = &v.role else {
                return None;
            };
            let t = tracks
                .iter()
                .find(|t| t.source() == Some(line) && t.line.video)?;
            Some((t.last_served_gop, super::overload::hash(vk as u64, gop), vk))
        })
        .collect();
    waiting.sort_unstable();
    let want = (1.0 - overload.ratio()) * waiting.len() as f64;
    let round_up =
        super::overload::unit(super::overload::hash(gop, line as u64)) < want - want.floor();
    let served = want.floor() as usize + usize::from(round_up);
    for &(_, _, vk) in waiting.iter().take(served) {
        if let Some(Role::Viewer(tracks)) = sessions[vk].as_mut().map(|v| &mut v.role)
            && let Some(t) = tracks.iter_mut().find(|t| t.source() == Some(line))
        {
            t.served_gop = gop;
            t.last_served_gop = gop;
        }
    }
}

/// What the munger needs to know of a cached packet of track `line`.
pub(super) fn source_packet(
    line: &crate::media::line::MediaLine,
    ssrc: u32,
    ext_seq: u64,
    ext_ts: u64,
    pkt: &[u8],
) -> Option<SourcePacket> {
    use crate::codec::{self, Codec};
    let h = RtpHeader::parse(pkt).ok()?;
    let payload = h.payload(pkt);
    let vp8 = (line.codec == Codec::Vp8)
        .then(|| codec::vp8_descriptor(payload))
        .flatten()
        .and_then(|d| {
            d.picture_id
                .filter(|(_, long)| *long)
                .map(|(pid, _)| (pid, d.tl0_pic_idx.map(|(t, _)| t)))
        });
    Some(SourcePacket {
        ssrc,
        ext_seq,
        ext_ts,
        keyframe_start: line.codec.is_keyframe_start(payload),
        clock_rate: line.codec.clock_rate(),
        vp8,
        dd_frame: line
            .ext_id(ferry_rtc::sdp::extmap::EXT_DEPENDENCY_DESCRIPTOR)
            .and_then(|id| dd_frame(pkt, id)),
    })
}

/// The dependency-descriptor frame number of an RTP packet whose descriptor has id `id`.
fn dd_frame(pkt: &[u8], id: u8) -> Option<u16> {
    let h = RtpHeader::parse(pkt).ok()?;
    let m = crate::codec::av1::DependencyDescriptor::parse_mandatory(h.find_extension(pkt, id)?)
        .ok()?;
    Some(m.frame_number)
}
