//! The send side of a viewer's tracks: munging forwarded packets into the
//! viewer's continuous outgoing streams (sequence, timestamp, SSRC, payload
//! type, header-extension ids, VP8 picture ids, dependency-descriptor frame
//! numbers), and rebuilding earlier
//! packets from the publisher's cache when the viewer NACKs (RTX when
//! negotiated).

use std::time::{Duration, Instant};

use ferry_proto::state::media::{OutgoingStreamState, SvcSelectorState};

use crate::codec::layers::{LayerInfo, LayerSelector, LayerSelectorSnapshot, Selection, SvcMode};
use crate::codec::{self, Codec};
use crate::media::adapt::allocator::{MOVE_HOLD, TrackState};
use crate::media::line::MediaLine;
use crate::media::munger::{DropReason, Munged, Munger, Retransmit, SourcePacket};
use crate::rtcp::{SenderReportData, write_sdes_cname, write_sender_report};
use crate::rtp::{self, ExtensionIdMap, RtpHeader, RtpPacketMut};

/// One outgoing track of a viewer.
#[derive(Debug)]
pub struct OutgoingTrack {
    /// Index of the viewer's m-line.
    pub index: usize,
    /// Negotiated parameters (outgoing SSRCs, payload types, extensions).
    pub line: MediaLine,
    /// The munger.
    pub munger: Munger,
    ext_map: ExtensionIdMap,
    /// Our dependency-descriptor id, once the source's ids are mapped onto ours.
    dd_ext: Option<u8>,
    rtx_seq: u16,
    /// Packets sent (for SR).
    pub packets_sent: u64,
    /// Payload octets sent (for SR).
    pub octets_sent: u64,
    /// Packets retransmitted.
    pub retransmitted: u64,
    /// Skipping video until a keyframe because the node is overloaded.
    pub shed: bool,
    /// Extended timestamp of the last source packet forwarded (a new one starts a frame).
    pub last_src_ts: Option<u64>,
    /// The GOP of its source this viewer is served in while the node sheds.
    pub served_gop: u64,
    /// The last GOP it was served in (those that waited longest go first).
    pub last_served_gop: u64,
    /// Which layer of a simulcast source it plays ([`crate::media::adapt::allocator`]); for a
    /// scalable (SVC) source, `target` is the spatial layer's index.
    pub layer: TrackState,
    /// The layers it gets of a scalable source (VP9/AV1 SVC, VP8 temporal layers); made at the
    /// first layered packet.
    pub svc: Option<LayerSelector>,
    /// The highest temporal layer it takes (its frame-rate cap), if any.
    pub temporal_cap: Option<u8>,
    /// Its source is a scalable stream whose spatial layers the allocator chooses among:
    /// `layer.target` is a spatial layer's index (else an SSRC).
    pub scalable: bool,
    /// A simulcast switch that waits for the new layer's keyframe ([`OutgoingTrack::await_layer`]);
    /// `None` when none waits. Not in the snapshot: after a move the next allocation decides
    /// again.
    waiting: Option<WaitingSwitch>,
}

/// A simulcast switch that waits for the new layer's keyframe: what the track plays meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WaitingSwitch {
    /// The highest temporal layer of the old layer it still plays (`None`: all).
    old_temporal: Option<u8>,
}

/// What the munger adds to a packet's payload numbering.
#[derive(Debug, Clone, Copy)]
struct Deltas {
    vp8_pic: u16,
    vp8_tl0: u8,
    dd_frame: u16,
}

/// Whether a packet of a simulcast source is for a viewer's track ([`OutgoingTrack::takes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Its layer: forward it (the munger decides the rest).
    Forward,
    /// Another layer.
    Skip,
    /// The layer it switches to, but not at a keyframe: a keyframe of it is wanted.
    SkipWantKeyframe,
}

impl OutgoingTrack {
    /// A track whose outgoing stream starts at `initial_seq`/`initial_ts`.
    pub fn new(
        index: usize,
        line: MediaLine,
        initial_seq: u16,
        initial_ts: u32,
        rtx_seq: u16,
    ) -> Self {
        Self {
            munger: Munger::new(line.local_ssrc, initial_seq, initial_ts),
            index,
            line,
            ext_map: [0; 256],
            dd_ext: None,
            rtx_seq,
            packets_sent: 0,
            octets_sent: 0,
            retransmitted: 0,
            shed: false,
            last_src_ts: None,
            served_gop: 0,
            last_served_gop: 0,
            layer: TrackState::default(),
            svc: None,
            temporal_cap: None,
            scalable: false,
            waiting: None,
        }
    }

    /// The highest temporal layer it gets: the lower of its allocation's and its cap's. The
    /// allocation's is that of the layer it plays: while a simulcast switch waits for the new
    /// layer's keyframe, the old layer's ([`OutgoingTrack::await_layer`]).
    pub fn temporal_target(&self) -> u8 {
        let allotted = match self.waiting {
            Some(w) if !self.scalable && self.playing() != self.layer.target => w.old_temporal,
            _ => self.layer.temporal,
        };
        self.temporal_cap
            .unwrap_or(u8::MAX)
            .min(allotted.unwrap_or(u8::MAX))
    }

    /// The allocator switches it to another simulcast layer (`next`, going `up` or down). Until
    /// that layer's keyframe comes it plays the old one, at the temporal layer it had (before
    /// a step up), or at the base temporal layer alone (before a step down: the estimate fell
    /// below what it plays, and dropping temporal layers needs no keyframe). Without this the
    /// old layer took the new rung's temporal layer: a step down from `f1` to `h` sent every
    /// temporal layer of `f` meanwhile, a step up from `h` to `f1` dropped `h` to `h1`.
    pub fn await_layer(&mut self, next: TrackState, up: bool) {
        let playing = self.playing();
        self.waiting = match playing {
            Some(p) if Some(p) != next.target => {
                if !up {
                    Some(WaitingSwitch {
                        old_temporal: Some(0),
                    })
                } else if playing == self.layer.target {
                    Some(WaitingSwitch {
                        old_temporal: self.layer.temporal,
                    })
                } else {
                    // A switch already waits: it goes on playing what it plays.
                    self.waiting
                }
            }
            _ => None,
        };
        self.layer = next;
    }

    /// The layer a simulcast switch waited for comes (its keyframe is about to be forwarded):
    /// its own temporal layer from now on.
    pub fn layer_came(&mut self) {
        if self.waiting.take().is_some() {
            self.retarget_temporal();
        }
    }

    /// Whether it gets less than every layer of a scalable stream: a temporal layer below the
    /// top, or one spatial layer of several.
    pub fn selects_layers(&self) -> bool {
        self.temporal_target() != u8::MAX || self.scalable || self.spatial_ceiling() != u8::MAX
    }

    /// Hands the temporal layer it gets now ([`OutgoingTrack::temporal_target`]) to its layer
    /// selector, which reaches it at the points the stream allows.
    pub fn retarget_temporal(&mut self) {
        let temporal = self.temporal_target();
        if let Some(sp) = self.svc.as_ref().map(|s| s.target().0) {
            self.set_svc_target(sp, temporal);
        }
    }

    /// The layers of a scalable source the packet (of the source stream `ssrc`) belongs to
    /// decide its fate: forward (with the marker bit to write) or drop. The selector starts at
    /// the allocator's spatial target (the top until one is chosen) and the temporal cap.
    pub fn select_layer(&mut self, ssrc: u32, info: &LayerInfo) -> Selection {
        let spatial = match self.layer.target {
            Some(s) if self.scalable => s.min(255) as u8,
            _ => u8::MAX,
        };
        let (spatial, temporal) = (spatial.min(self.spatial_ceiling()), self.temporal_target());
        let codec = self.line.codec;
        let sel = self.svc.get_or_insert_with(|| {
            // K-SVC (L3T3_KEY, what browsers send) forwards one spatial layer between key
            // pictures; VP8 has no spatial layers.
            let mut s = LayerSelector::new(if codec == Codec::Vp8 {
                SvcMode::Full
            } else {
                SvcMode::KSvc
            });
            s.set_target(spatial, temporal);
            s
        });
        sel.select(ssrc, info)
    }

    /// Sets the scalable source's layers to reach (at the points the stream allows).
    pub fn set_svc_target(&mut self, spatial: u8, temporal: u8) {
        let ceiling = self.spatial_ceiling();
        if let Some(s) = self.svc.as_mut() {
            s.set_target(spatial.min(ceiling), temporal);
        }
    }

    /// The highest spatial layer of a scalable source this viewer can decode. An AV1 receiver
    /// that did not negotiate the dependency descriptor cannot put a picture's spatial layers
    /// back together (Chrome: "Failed to combine frames - invalid spatial index order"), and
    /// of those layers only the base one decodes alone: such a viewer gets the base layer.
    pub fn spatial_ceiling(&self) -> u8 {
        if self.line.codec == Codec::Av1
            && self
                .line
                .ext_id(ferry_rtc::sdp::extmap::EXT_DEPENDENCY_DESCRIPTOR)
                .is_none()
        {
            0
        } else {
            u8::MAX
        }
    }

    /// Whether the layers it is to reach of a scalable source wait for a keyframe.
    pub fn svc_needs_keyframe(&self) -> bool {
        self.svc.as_ref().is_some_and(LayerSelector::needs_keyframe)
    }

    /// A packet of its source it does not get (a layer above its own): the outgoing sequence
    /// goes on without it. Writes into `out` the padding packet that fills a number it leaves
    /// empty, if any (returns its length).
    pub fn skip(&mut self, src: &SourcePacket, out: &mut Vec<u8>) -> Option<usize> {
        let hole = self.munger.drop_packet(src)?;
        Some(self.write_hole(hole, out))
    }

    /// A padding-only packet on the media stream with outgoing number `seq` (a receiver takes
    /// it as that number, carrying nothing).
    fn write_hole(&mut self, seq: u64, out: &mut Vec<u8>) -> usize {
        let ts = self.munger.last_out_ts() as u32;
        rtp::write_padding_packet(out, self.line.pt, self.line.local_ssrc, seq as u16, ts, 1);
        out.len()
    }

    /// The source stream (layer) it plays now.
    pub fn playing(&self) -> Option<u32> {
        self.munger.source_ssrc()
    }

    /// The layer a keyframe request of the viewer is about: the one it plays, else the one it
    /// waits for (`None`: every layer).
    pub fn keyframe_layer(&self) -> Option<u32> {
        self.playing().or(self.layer.target)
    }

    /// Whether a packet of a simulcast source is for this track. `playing` is the layer it
    /// plays, if that one still sends. A track stays on its layer until the layer it is to
    /// switch to ([`TrackState::target`]) starts a keyframe, so it never gets a frame whose
    /// reference it lacks; a track with no layer (yet, or any more) takes the first keyframe
    /// of its target, or of any layer while it has none.
    pub fn takes(&self, src: &SourcePacket, playing: Option<u32>) -> Take {
        match (playing, self.layer.target) {
            (Some(p), _) if p == src.ssrc => Take::Forward,
            (_, Some(t)) if t == src.ssrc => {
                if src.keyframe_start || playing.is_none() {
                    Take::Forward
                } else {
                    Take::SkipWantKeyframe
                }
            }
            (None, None) => Take::Forward,
            _ => Take::Skip,
        }
    }

    /// Drops until the next keyframe of whatever source comes next (video turned back on).
    pub fn restart_at_keyframe(&mut self) {
        self.munger.switch_source();
    }

    /// The publisher m-line index this track plays.
    pub fn source(&self) -> Option<usize> {
        self.line.source
    }

    /// Maps the publisher's header-extension ids onto ours (by URI);
    /// extensions we did not negotiate become padding.
    pub fn set_source_extmap(&mut self, publisher: &[(u8, String)]) {
        self.ext_map = [0; 256];
        self.dd_ext = self
            .line
            .ext_id(ferry_rtc::sdp::extmap::EXT_DEPENDENCY_DESCRIPTOR);
        for (id, uri) in publisher {
            if let Some(ours) = self.line.ext_id(uri) {
                self.ext_map[usize::from(*id)] = ours;
            }
        }
    }

    fn rewrite(&self, buf: &mut [u8], ssrc: u32, seq: u16, ts: u32, d: Deltas) -> bool {
        let Ok(mut p) = RtpPacketMut::new(buf) else {
            return false;
        };
        p.set_sequence(seq);
        p.set_timestamp(ts);
        p.set_ssrc(ssrc);
        p.set_payload_type(self.line.pt);
        if p.remap_extension_ids(&self.ext_map).is_err() {
            // An id we cannot express in this header form: drop them all.
            let _ = p.remap_extension_ids(&[0; 256]);
        }
        if self.line.codec == Codec::Vp8 && (d.vp8_pic != 0 || d.vp8_tl0 != 0) {
            codec::vp8_rewrite(p.payload_mut(), d.vp8_pic, d.vp8_tl0);
        }
        // The descriptor's frame number: bytes 1-2 of its mandatory fields.
        if d.dd_frame != 0
            && let Some(b) = self
                .dd_ext
                .and_then(|id| p.extension_mut(id))
                .and_then(|e| e.get_mut(1..3))
        {
            let f = u16::from_be_bytes([b[0], b[1]]).wrapping_add(d.dd_frame);
            b.copy_from_slice(&f.to_be_bytes());
        }
        true
    }

    /// Munges a forwarded packet into `out` (replacing its contents).
    /// Returns the plaintext length, or why it is not sent.
    pub fn forward(
        &mut self,
        now: Instant,
        pkt: &[u8],
        src: &SourcePacket,
        out: &mut Vec<u8>,
    ) -> Result<usize, DropReason> {
        self.forward_marked(now, pkt, src, None, out)
    }

    /// [`OutgoingTrack::forward`], with the RTP marker set or cleared (`Some`): the last
    /// packet of the highest spatial layer a viewer gets of a picture ends it.
    pub fn forward_marked(
        &mut self,
        now: Instant,
        pkt: &[u8],
        src: &SourcePacket,
        marker: Option<bool>,
        out: &mut Vec<u8>,
    ) -> Result<usize, DropReason> {
        let (ssrc, ext_seq, ts, deltas) = match self.munger.process(now, src) {
            Munged::Forward {
                ssrc,
                ext_seq,
                ts,
                vp8_pic_delta,
                vp8_tl0_delta,
                dd_frame_delta,
            } => (
                ssrc,
                ext_seq,
                ts,
                Deltas {
                    vp8_pic: vp8_pic_delta,
                    vp8_tl0: vp8_tl0_delta,
                    dd_frame: dd_frame_delta,
                },
            ),
            Munged::Drop(reason) => return Err(reason),
        };
        out.clear();
        out.extend_from_slice(pkt);
        if !self.rewrite(out, ssrc, ext_seq as u16, ts, deltas) {
            return Err(DropReason::Late);
        }
        if let (Some(m), Ok(mut p)) = (marker, RtpPacketMut::new(out)) {
            p.set_marker(m);
        }
        self.packets_sent += 1;
        let payload = RtpHeader::parse(pkt).map_or(0, |h| h.payload_range.len());
        self.octets_sent += payload as u64;
        Ok(pkt.len())
    }

    /// Writes a padding-only packet of `padding` bytes on this track's RTX stream into `out`
    /// (a bandwidth probe: the receiver counts it and drops it); `None` without RTX, or before
    /// the track sent anything (its timestamp would mean nothing).
    pub fn write_probe(&mut self, out: &mut Vec<u8>, padding: u8) -> Option<usize> {
        let (Some(pt), Some(ssrc)) = (self.line.rtx_pt, self.line.local_rtx_ssrc) else {
            return None;
        };
        self.munger.last_out_seq()?;
        let ts = self.munger.last_out_ts() as u32;
        rtp::write_padding_packet(out, pt, ssrc, self.rtx_seq, ts, padding);
        self.rtx_seq = self.rtx_seq.wrapping_add(1);
        Some(out.len())
    }

    /// Which earlier packet an outgoing sequence number from a NACK was.
    pub fn lookup_nack(&self, seq: u16) -> Option<Retransmit> {
        self.munger.reverse(self.munger.extend_out_seq(seq))
    }

    /// A NACKed number that carried nothing (its packet was of a layer the viewer does not
    /// get): the padding packet that fills it, into `out`.
    pub fn retransmit_hole(&mut self, r: &Retransmit, out: &mut Vec<u8>) -> usize {
        self.write_hole(r.out_ext_seq, out)
    }

    /// Rebuilds a packet for retransmission into `out` from the cached
    /// source packet; wraps it in RTX when negotiated. Returns its length.
    pub fn retransmit(
        &mut self,
        r: &Retransmit,
        cached: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let h = RtpHeader::parse(cached).ok()?;
        out.clear();
        out.extend_from_slice(cached);
        let ts = u64::from(h.timestamp).wrapping_add(r.ts_delta) as u32;
        let deltas = Deltas {
            vp8_pic: r.vp8_pic_delta,
            vp8_tl0: r.vp8_tl0_delta,
            dd_frame: r.dd_frame_delta,
        };
        if !self.rewrite(out, r.out_ssrc, r.out_ext_seq as u16, ts, deltas) {
            return None;
        }
        let mut len = out.len();
        if let (Some(rtx_pt), Some(rtx_ssrc)) = (self.line.rtx_pt, self.line.local_rtx_ssrc) {
            out.resize(len + 2, 0);
            len = rtp::rtx_wrap(out, len, rtx_pt, rtx_ssrc, self.rtx_seq).ok()?;
            self.rtx_seq = self.rtx_seq.wrapping_add(1);
        }
        out.truncate(len);
        self.retransmitted += 1;
        Some(len)
    }

    /// Writes this track's SR (+ SDES CNAME) into `buf`; `mapping` is the
    /// (NTP, source extended RTP timestamp) of the source at `now`, or
    /// `None` to extrapolate from our own last packet.
    pub fn write_report(
        &self,
        buf: &mut [u8],
        ntp_now: u64,
        mapping: Option<(u64, u64)>,
        cname: &str,
    ) -> usize {
        if self.munger.last_out_seq().is_none() {
            return 0;
        }
        let (ntp, rtp_ts) = match mapping {
            Some((ntp, src_ts)) => (ntp, src_ts.wrapping_add(self.munger.ts_delta()) as u32),
            None => (ntp_now, self.munger.last_out_ts() as u32),
        };
        let sr = SenderReportData {
            ssrc: self.line.local_ssrc,
            ntp,
            rtp_ts,
            packet_count: self.packets_sent as u32,
            octet_count: self.octets_sent as u32,
        };
        let Ok(n) = write_sender_report(buf, &sr, &[]) else {
            return 0;
        };
        match write_sdes_cname(&mut buf[n..], self.line.local_ssrc, cname) {
            Ok(m) => n + m,
            Err(_) => n,
        }
    }

    /// The track arrived from another node: no climb and no probe for [`MOVE_HOLD`].
    pub fn hold_after_move(&mut self, now: Instant) {
        let until = now + MOVE_HOLD;
        self.layer.held_until = Some(self.layer.held_until.map_or(until, |t| t.max(until)));
    }

    /// Exports the track.
    pub fn snapshot(&self, now: Instant) -> OutgoingStreamState {
        OutgoingStreamState {
            munger: Some(self.munger.snapshot(now)),
            rtx_ssrc: self.line.local_rtx_ssrc,
            rtx_seq: u32::from(self.rtx_seq),
            packets_sent: self.packets_sent,
            octets_sent: self.octets_sent,
            retransmitted: self.retransmitted,
            index: self.index as u32,
            target_ssrc: self.layer.target,
            target_temporal: self.layer.temporal.map(u32::from),
            svc: self.svc.as_ref().map(|v| svc_to_state(&v.snapshot())),
            temporal_cap: self.temporal_cap.map(u32::from),
            held_for_ms: self
                .layer
                .held_until
                .map(|t| t.saturating_duration_since(now).as_millis() as u64),
            hold_ms: self.layer.hold.as_millis() as u64,
            up_ago_ms: self
                .layer
                .up_at
                .map(|t| now.saturating_duration_since(t).as_millis() as u64),
        }
    }

    /// Rebuilds a track.
    pub fn restore(s: &OutgoingStreamState, line: MediaLine, now: Instant) -> Self {
        let munger = match &s.munger {
            Some(m) => Munger::restore(m, now),
            None => Munger::new(line.local_ssrc, 0, 0),
        };
        Self {
            index: s.index as usize,
            line,
            munger,
            ext_map: [0; 256],
            dd_ext: None,
            rtx_seq: s.rtx_seq as u16,
            packets_sent: s.packets_sent,
            octets_sent: s.octets_sent,
            retransmitted: s.retransmitted,
            shed: false,
            last_src_ts: None,
            served_gop: 0,
            last_served_gop: 0,
            layer: TrackState {
                target: s.target_ssrc,
                temporal: s.target_temporal.map(|t| t.min(255) as u8),
                held_until: s.held_for_ms.map(|ms| now + Duration::from_millis(ms)),
                hold: Duration::from_millis(s.hold_ms),
                up_at: s
                    .up_ago_ms
                    .and_then(|ms| now.checked_sub(Duration::from_millis(ms))),
            },
            svc: s
                .svc
                .as_ref()
                .map(|v| LayerSelector::restore(svc_from_state(v))),
            temporal_cap: s.temporal_cap.map(|t| t.min(255) as u8),
            // The next allocation says.
            scalable: s.svc.as_ref().is_some_and(|v| v.ksvc),
            waiting: None,
        }
    }
}

/// A layer selector's state as the snapshot carries it.
fn svc_to_state(s: &LayerSelectorSnapshot) -> SvcSelectorState {
    SvcSelectorState {
        ksvc: s.mode == SvcMode::KSvc,
        target_spatial: u32::from(s.target.0),
        target_temporal: u32::from(s.target.1),
        current: s.current.map(|(sp, t)| (u32::from(sp) << 8) | u32::from(t)),
        max_spatial_seen: u32::from(s.max_spatial_seen),
        max_temporal_seen: u32::from(s.max_temporal_seen),
        last_picture: s.last_picture.map(u32::from),
        dd_structure: s.dd_structure,
        dd_target: s.dd_target.map(u32::from),
        dd_chains_intact: s.dd_chains_intact,
    }
}

fn svc_from_state(s: &SvcSelectorState) -> LayerSelectorSnapshot {
    let byte = |v: u32| v.min(255) as u8;
    LayerSelectorSnapshot {
        mode: if s.ksvc { SvcMode::KSvc } else { SvcMode::Full },
        target: (byte(s.target_spatial), byte(s.target_temporal)),
        current: s.current.map(|c| (byte((c >> 8) & 0xff), byte(c & 0xff))),
        max_spatial_seen: byte(s.max_spatial_seen),
        max_temporal_seen: byte(s.max_temporal_seen),
        last_picture: s.last_picture.map(|p| (p & 0xffff) as u16),
        dd_structure: s.dd_structure,
        dd_target: s.dd_target.map(byte),
        dd_chains_intact: s.dd_chains_intact,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn av1_line(extmap: Vec<(u8, String)>) -> MediaLine {
        MediaLine {
            mid: "1".into(),
            video: true,
            accepted: true,
            codec: Codec::Av1,
            pt: 45,
            rtx_pt: Some(46),
            fmtp: String::new(),
            nack: true,
            pli: true,
            fir: false,
            remb: false,
            twcc: true,
            extmap,
            remote_ssrcs: Vec::new(),
            rids: Vec::new(),
            local_ssrc: 1,
            local_rtx_ssrc: Some(2),
            source: Some(1),
            rejected: None,
        }
    }

    /// An AV1 viewer without the dependency descriptor cannot decode a picture's upper spatial
    /// layers: whatever the allocator asks, its selector aims at the base layer.
    #[test]
    fn an_av1_viewer_without_the_descriptor_is_held_to_the_base_spatial_layer() {
        let dd = (
            12,
            ferry_rtc::sdp::extmap::EXT_DEPENDENCY_DESCRIPTOR.to_owned(),
        );
        let with = OutgoingTrack::new(1, av1_line(vec![dd]), 0, 0, 0);
        assert_eq!(with.spatial_ceiling(), u8::MAX);
        let mut without = OutgoingTrack::new(1, av1_line(Vec::new()), 0, 0, 0);
        assert_eq!(without.spatial_ceiling(), 0);
        let info = LayerInfo {
            spatial: 0,
            keyframe: true,
            start_of_frame: true,
            end_of_frame: true,
            spatial_layers: Some(3),
            ..LayerInfo::default()
        };
        let _ = without.select_layer(1, &info);
        without.set_svc_target(2, u8::MAX);
        assert_eq!(without.svc.as_ref().map(|s| s.target().0), Some(0));
    }

    /// The temporal layer the allocator chose and the viewer's frame-rate cap: the lower
    /// wins, and the allocator's choice travels in the snapshot.
    #[test]
    fn the_temporal_target_is_the_lower_of_the_allocation_and_the_cap_and_moves() {
        let now = Instant::now();
        let mut t = OutgoingTrack::new(1, av1_line(Vec::new()), 0, 0, 0);
        assert_eq!(t.temporal_target(), u8::MAX);
        t.layer.target = Some(7);
        t.layer.temporal = Some(1);
        assert_eq!(t.temporal_target(), 1);
        t.temporal_cap = Some(0);
        assert_eq!(t.temporal_target(), 0);
        t.temporal_cap = Some(2);
        assert_eq!(t.temporal_target(), 1);
        let back = OutgoingTrack::restore(&t.snapshot(now), t.line.clone(), now);
        assert_eq!((back.layer.target, back.layer.temporal), (Some(7), Some(1)));
        assert_eq!(back.temporal_target(), 1);
    }

    /// While a simulcast switch waits for the new layer's keyframe the old layer keeps its own
    /// temporal layer (before a step up) or drops to the base one (before a step down), and the
    /// new layer's comes with its keyframe.
    #[test]
    fn a_switch_waiting_for_its_keyframe_plays_the_old_layer_at_its_own_temporal_layer() {
        let now = Instant::now();
        let line = MediaLine {
            codec: Codec::Vp8,
            ..av1_line(Vec::new())
        };
        let mut t = OutgoingTrack::new(1, line, 0, 0, 0);
        let key = |ssrc: u32, seq: u64| SourcePacket {
            ssrc,
            ext_seq: seq,
            ext_ts: seq * 3000,
            keyframe_start: true,
            clock_rate: 90_000,
            vp8: None,
            dd_frame: None,
        };
        let rung = |ssrc: u32, temporal: Option<u8>| TrackState {
            target: Some(ssrc),
            temporal,
            ..TrackState::default()
        };
        // Plays h (SSRC 20) at every temporal layer.
        t.layer = rung(20, None);
        let _ = t.munger.process(now, &key(20, 1));
        assert_eq!((t.playing(), t.temporal_target()), (Some(20), u8::MAX));
        // Up to f1 (SSRC 30, two temporal layers): h keeps all of its own until f's keyframe.
        t.await_layer(rung(30, Some(1)), true);
        assert_eq!(t.temporal_target(), u8::MAX);
        let _ = t.munger.process(now, &key(30, 2));
        t.layer_came();
        assert_eq!((t.playing(), t.temporal_target()), (Some(30), 1));
        // Down to h: f plays its base temporal layer alone meanwhile, not all of f.
        t.await_layer(rung(20, None), false);
        assert_eq!(t.temporal_target(), 0);
        // Back up to f1 before h's keyframe came: f plays as it was allotted, no switch waits.
        t.await_layer(rung(30, Some(1)), true);
        assert_eq!(t.temporal_target(), 1);
        let _ = t.munger.process(now, &key(30, 3));
        t.layer_came();
        assert_eq!(t.temporal_target(), 1);
        // The frame-rate cap still wins.
        t.await_layer(rung(20, None), true);
        t.temporal_cap = Some(0);
        assert_eq!(t.temporal_target(), 0);
    }

    /// Only a viewer that gets less than every layer needs the layers read: a frame-rate cap
    /// or allocation, one spatial layer of a scalable stream, or no descriptor to put spatial
    /// layers together.
    #[test]
    fn a_track_selects_layers_only_when_it_gets_less_than_all_of_them() {
        let dd = (
            12,
            ferry_rtc::sdp::extmap::EXT_DEPENDENCY_DESCRIPTOR.to_owned(),
        );
        let mut t = OutgoingTrack::new(1, av1_line(vec![dd]), 0, 0, 0);
        assert!(!t.selects_layers(), "every layer");
        t.temporal_cap = Some(1);
        assert!(t.selects_layers(), "a frame-rate cap");
        t.temporal_cap = None;
        t.layer.temporal = Some(0);
        assert!(t.selects_layers(), "a temporal layer allotted");
        t.layer.temporal = None;
        t.scalable = true;
        assert!(t.selects_layers(), "a spatial layer of several");
        let without = OutgoingTrack::new(1, av1_line(Vec::new()), 0, 0, 0);
        assert!(
            without.selects_layers(),
            "no descriptor: the base spatial layer"
        );
    }
}
