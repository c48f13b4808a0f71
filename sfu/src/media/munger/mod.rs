//! The munger: per subscriber and track, maps the source's (SSRC, seq, ts)
//! onto one continuous outgoing stream on 64-bit extended counters.
//!
//! Any switch of source (publisher reconnect, migration, layer change) looks
//! to the receiver like one stream: the outgoing sequence continues at +1,
//! the timestamp advances by the wall time that elapsed, and VP8 picture ids
//! and dependency-descriptor frame numbers continue (a receiver that saw frame
//! numbers go back would take the new source's frames for old ones and drop them). After a switch (and at the start) the munger drops packets until
//! a keyframe starts, so the receiver never gets a delta frame whose
//! reference it lacks.

use std::time::{Duration, Instant};

use ferry_proto::state::media::{MungerState, SeqSegment};

mod layered;

use layered::{Carried, LayeredMap, MAX_RESTORED_EXT};

/// Segments of sequence mapping kept for answering NACKs.
const MAX_SEGMENTS: usize = 8;

/// What the munger needs to know of a source packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePacket {
    /// Source SSRC.
    pub ssrc: u32,
    /// Source extended sequence number.
    pub ext_seq: u64,
    /// Source extended timestamp.
    pub ext_ts: u64,
    /// First packet of a keyframe (always true for audio).
    pub keyframe_start: bool,
    /// RTP clock rate.
    pub clock_rate: u32,
    /// VP8 picture id and TL0PICIDX, if the packet carries them.
    pub vp8: Option<(u16, Option<u8>)>,
    /// Dependency-descriptor frame number, if the packet carries the descriptor.
    pub dd_frame: Option<u16>,
}

/// Why a packet is not forwarded. These are normal outcomes, not errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Waiting for a keyframe after a start or a switch.
    WaitingKeyframe,
    /// Older than the start of the current mapping segment.
    Late,
}

/// The munger's decision for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Munged {
    /// Forward with these outgoing values.
    Forward {
        /// Outgoing SSRC.
        ssrc: u32,
        /// Outgoing extended sequence number.
        ext_seq: u64,
        /// Outgoing timestamp.
        ts: u32,
        /// Add to the VP8 picture id (mod 2^15).
        vp8_pic_delta: u16,
        /// Add to the VP8 TL0PICIDX (mod 2^8).
        vp8_tl0_delta: u8,
        /// Add to the dependency-descriptor frame number (mod 2^16).
        dd_frame_delta: u16,
    },
    /// Do not forward.
    Drop(DropReason),
}

/// How to rebuild an earlier outgoing packet from the source cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retransmit {
    /// Source SSRC of the packet.
    pub src_ssrc: u32,
    /// Source extended sequence number.
    pub src_ext_seq: u64,
    /// Outgoing SSRC.
    pub out_ssrc: u32,
    /// Outgoing extended sequence number.
    pub out_ext_seq: u64,
    /// Timestamp delta in force for the packet.
    pub ts_delta: u64,
    /// VP8 picture-id delta in force for the packet.
    pub vp8_pic_delta: u16,
    /// VP8 TL0PICIDX delta in force for the packet.
    pub vp8_tl0_delta: u8,
    /// Dependency-descriptor frame-number delta in force for the packet.
    pub dd_frame_delta: u16,
    /// The outgoing number carried nothing (its source packet was dropped from the layers the
    /// viewer gets): answer with a padding packet of that number.
    pub hole: bool,
}

/// Maps one source track onto one subscriber's outgoing stream.
#[derive(Debug, Clone)]
pub struct Munger {
    out_ssrc: u32,
    started: bool,
    waiting_keyframe: bool,
    src_ssrc: Option<u32>,
    last_out_seq: u64,
    last_out_ts: u64,
    last_src_seq: u64,
    ts_delta: u64,
    last_forward: Option<Instant>,
    segments: Vec<SeqSegment>,
    vp8_pic_delta: u16,
    vp8_tl0_delta: u8,
    vp8_last: Option<(u16, Option<u8>)>,
    dd_frame_delta: u16,
    /// The newest outgoing dependency-descriptor frame number.
    dd_last: Option<u16>,
    /// Numbering while packets of the source are dropped (layers the viewer does not get);
    /// `None` while it gets every packet.
    layered: Option<Box<LayeredMap>>,
}

/// The outgoing number of source packet `src` in `seg`. Wrapping: a real stream's numbers are
/// far from the top of u64; a peer's snapshot may put them anywhere, and garbage in is garbage
/// out, never a panic.
fn segment_out(seg: &SeqSegment, src: u64) -> u64 {
    seg.out_start.wrapping_add(src.wrapping_sub(seg.src_start))
}

impl Munger {
    /// A munger that starts its outgoing stream at `initial_seq`/`initial_ts`
    /// (random in production, so streams are not predictable).
    pub fn new(out_ssrc: u32, initial_seq: u16, initial_ts: u32) -> Self {
        Self {
            out_ssrc,
            started: false,
            waiting_keyframe: true,
            src_ssrc: None,
            // The first outgoing packet is last + 1; start one cycle in so
            // the value never underflows.
            last_out_seq: (1 << 16) + u64::from(initial_seq) - 1,
            last_out_ts: (1 << 32) + u64::from(initial_ts),
            last_src_seq: 0,
            ts_delta: 0,
            last_forward: None,
            segments: Vec::new(),
            vp8_pic_delta: 0,
            vp8_tl0_delta: 0,
            vp8_last: None,
            dd_frame_delta: 0,
            dd_last: None,
            layered: None,
        }
    }

    /// The last source packet forwarded: `(ssrc, ext seq, ext ts)`; `None`
    /// before the first or while waiting for a keyframe.
    pub fn last_source(&self) -> Option<(u32, u64, u64)> {
        let ssrc = self
            .src_ssrc
            .filter(|_| self.started && !self.waiting_keyframe)?;
        Some((
            ssrc,
            self.last_src_seq,
            self.last_out_ts.wrapping_sub(self.ts_delta),
        ))
    }

    /// The source SSRC being forwarded; `None` before the first or while waiting for a
    /// keyframe.
    pub fn source_ssrc(&self) -> Option<u32> {
        self.src_ssrc
            .filter(|_| self.started && !self.waiting_keyframe)
    }

    /// Outgoing SSRC.
    pub fn out_ssrc(&self) -> u32 {
        self.out_ssrc
    }

    /// Whether the munger is dropping until a keyframe.
    pub fn waiting_keyframe(&self) -> bool {
        self.waiting_keyframe
    }

    /// The first outgoing extended sequence number it sent, while its mapping still holds it
    /// (the last [`MAX_SEGMENTS`] switches are kept).
    pub fn first_out_seq(&self) -> Option<u64> {
        let first = self.segments.first()?;
        (self.segments.len() < MAX_SEGMENTS && self.started).then_some(first.out_start)
    }

    /// Highest outgoing extended sequence number sent.
    pub fn last_out_seq(&self) -> Option<u64> {
        self.started.then_some(self.last_out_seq)
    }

    /// Highest outgoing extended timestamp sent.
    pub fn last_out_ts(&self) -> u64 {
        self.last_out_ts
    }

    /// Adds to an outgoing source timestamp: outgoing = source + delta (mod 2^32).
    pub fn ts_delta(&self) -> u64 {
        self.ts_delta
    }

    /// Forces a resynchronisation: the next packet forwarded is a keyframe
    /// from whatever source comes next.
    pub fn switch_source(&mut self) {
        self.waiting_keyframe = true;
        self.src_ssrc = None;
    }

    /// Decides the fate of one source packet.
    pub fn process(&mut self, now: Instant, p: &SourcePacket) -> Munged {
        // A packet of another source only takes over at a keyframe, so
        // stragglers of an old source cannot flip the stream back and forth.
        if self.waiting_keyframe || self.src_ssrc != Some(p.ssrc) {
            if !p.keyframe_start {
                return Munged::Drop(DropReason::WaitingKeyframe);
            }
            self.src_ssrc = Some(p.ssrc);
            self.start_segment(now, p);
        }
        let Some(seg) = self.segments.last() else {
            return Munged::Drop(DropReason::WaitingKeyframe);
        };
        if p.ext_seq < seg.src_start {
            return Munged::Drop(DropReason::Late);
        }
        let mut pic_delta = self.vp8_pic_delta;
        let ext_seq = match self.layered.as_mut() {
            Some(map) => match map.forward(p.ext_seq, p.vp8.map(|v| v.0)) {
                Some((out, delta)) => {
                    pic_delta = delta;
                    out
                }
                // Before the map took over: numbered by the segment, as it was then.
                None if p.ext_seq <= map.start_src => segment_out(seg, p.ext_seq),
                None => return Munged::Drop(DropReason::Late),
            },
            None => segment_out(seg, p.ext_seq),
        };
        if let Some(map) = self.layered.as_ref() {
            self.vp8_pic_delta = map.pic_delta();
        }
        let ts_ext = p.ext_ts.wrapping_add(self.ts_delta);
        if ext_seq > self.last_out_seq {
            self.last_out_seq = ext_seq;
            self.last_src_seq = p.ext_seq;
            self.last_out_ts = self.last_out_ts.max(ts_ext);
            self.last_forward = Some(now);
            if let Some((pic, tl0)) = p.vp8 {
                self.vp8_last = Some((
                    pic.wrapping_add(pic_delta) & 0x7fff,
                    tl0.map(|t| t.wrapping_add(self.vp8_tl0_delta)),
                ));
            }
            if let Some(f) = p.dd_frame {
                let out = f.wrapping_add(self.dd_frame_delta);
                // Frames of a picture share a number and later frames number higher
                // (mod 2^16); a straggler of an older frame does not move it back.
                if self.dd_last.is_none_or(|l| out.wrapping_sub(l) < 0x8000) {
                    self.dd_last = Some(out);
                }
            }
        }
        Munged::Forward {
            ssrc: self.out_ssrc,
            ext_seq,
            ts: ts_ext as u32,
            vp8_pic_delta: pic_delta,
            vp8_tl0_delta: self.vp8_tl0_delta,
            dd_frame_delta: self.dd_frame_delta,
        }
    }

    /// A packet of the source the viewer does not get (a layer above the one it plays). Its
    /// number is not used: the outgoing sequence goes on without a gap. Returns an outgoing
    /// number that stays empty because of it (one reserved while the packet was missing):
    /// send a padding packet with that number.
    pub fn drop_packet(&mut self, p: &SourcePacket) -> Option<u64> {
        if !self.started || self.waiting_keyframe || self.src_ssrc != Some(p.ssrc) {
            return None;
        }
        let (last_src, last_out, delta) =
            (self.last_src_seq, self.last_out_seq, self.vp8_pic_delta);
        let last_pic = self
            .vp8_last
            .map(|(out_pic, _)| out_pic.wrapping_sub(delta) & 0x7fff);
        if self.layered.is_none()
            && let Some(seg) = self.segments.last_mut()
        {
            seg.layered_from_out = Some(last_out + 1);
        }
        let map = self
            .layered
            .get_or_insert_with(|| Box::new(LayeredMap::new(last_src, last_out, delta, last_pic)));
        let hole = map.drop_packet(p.ext_seq, p.vp8.map(|v| v.0));
        self.last_src_seq = self.last_src_seq.max(map.highest());
        self.last_out_seq = self.last_out_seq.max(map.last_out());
        self.vp8_pic_delta = map.pic_delta();
        hole
    }

    fn start_segment(&mut self, now: Instant, p: &SourcePacket) {
        let out_start = self.last_out_seq + 1;
        let out_ts = if self.started {
            let elapsed = self
                .last_forward
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
            // Saturating: a peer's snapshot may date the last packet at any age.
            let ticks =
                (elapsed.as_micros() as u64).saturating_mul(u64::from(p.clock_rate)) / 1_000_000;
            // Timestamps are numbers mod 2^64 here (the deltas wrap).
            self.last_out_ts.wrapping_add(ticks.max(1))
        } else {
            self.last_out_ts
        };
        self.ts_delta = out_ts.wrapping_sub(p.ext_ts);
        if let Some((pic, tl0)) = p.vp8 {
            match self.vp8_last {
                Some((last_pic, last_tl0)) => {
                    self.vp8_pic_delta = last_pic.wrapping_add(1).wrapping_sub(pic) & 0x7fff;
                    self.vp8_tl0_delta = match (last_tl0, tl0) {
                        (Some(l), Some(t)) => l.wrapping_add(1).wrapping_sub(t),
                        _ => 0,
                    };
                }
                None => {
                    self.vp8_pic_delta = 0;
                    self.vp8_tl0_delta = 0;
                }
            }
        }
        // The new source's first frame follows the last one sent.
        if let Some(f) = p.dd_frame {
            self.dd_frame_delta = self
                .dd_last
                .map_or(0, |l| l.wrapping_add(1).wrapping_sub(f));
        }
        self.segments.push(SeqSegment {
            src_ssrc: p.ssrc,
            src_start: p.ext_seq,
            out_start,
            ts_delta: self.ts_delta,
            vp8_pic_delta: u32::from(self.vp8_pic_delta),
            vp8_tl0_delta: u32::from(self.vp8_tl0_delta),
            layered_from_out: None,
            dd_frame_delta: u32::from(self.dd_frame_delta),
        });
        if self.segments.len() > MAX_SEGMENTS {
            self.segments.remove(0);
        }
        // A new source numbers its packets afresh: the segment maps them until one is dropped.
        self.layered = None;
        self.started = true;
        self.waiting_keyframe = false;
        self.last_src_seq = p.ext_seq;
    }

    /// Extends a 16-bit outgoing sequence number from a NACK relative to the
    /// highest sent.
    pub fn extend_out_seq(&self, seq: u16) -> u64 {
        crate::seq::SeqUnwrapper::from_highest(Some(self.last_out_seq)).peek(u64::from(seq))
    }

    /// Maps an outgoing extended sequence number back to the source packet
    /// it carried, with the rewrite that was applied, for retransmission.
    pub fn reverse(&self, out_ext: u64) -> Option<Retransmit> {
        if !self.started || out_ext > self.last_out_seq {
            return None;
        }
        let i = self.segments.iter().rposition(|s| s.out_start <= out_ext)?;
        let s = &self.segments[i];
        let mut r = Retransmit {
            src_ssrc: s.src_ssrc,
            src_ext_seq: s.src_start.wrapping_add(out_ext.wrapping_sub(s.out_start)),
            out_ssrc: self.out_ssrc,
            out_ext_seq: out_ext,
            ts_delta: s.ts_delta,
            vp8_pic_delta: (s.vp8_pic_delta & 0x7fff) as u16,
            vp8_tl0_delta: s.vp8_tl0_delta as u8,
            dd_frame_delta: s.dd_frame_delta as u16,
            hole: false,
        };
        // Numbers handed out while packets were dropped are mapped by the window alone (the
        // segment's arithmetic no longer holds there); once the window is gone, not at all.
        if s.layered_from_out.is_some_and(|f| out_ext >= f) {
            let map = self
                .layered
                .as_ref()
                .filter(|_| i + 1 == self.segments.len())?;
            match map.reverse(out_ext)? {
                Carried::Packet { src, pic_delta } => {
                    r.src_ext_seq = src;
                    r.vp8_pic_delta = pic_delta;
                }
                Carried::Hole => r.hole = true,
            }
        }
        Some(r)
    }

    /// Exports the munger.
    pub fn snapshot(&self, now: Instant) -> MungerState {
        MungerState {
            out_ssrc: self.out_ssrc,
            started: self.started,
            waiting_keyframe: self.waiting_keyframe,
            src_ssrc: self.src_ssrc,
            last_out_seq: self.last_out_seq,
            last_out_ts: self.last_out_ts,
            ts_delta: self.ts_delta,
            last_forward_age_us: self
                .last_forward
                .map(|t| now.saturating_duration_since(t).as_micros() as u64),
            segments: self.segments.clone(),
            vp8_pic_delta: u32::from(self.vp8_pic_delta),
            vp8_tl0_delta: u32::from(self.vp8_tl0_delta),
            vp8_last_pic: self.vp8_last.map(|(p, _)| u32::from(p)),
            vp8_last_tl0: self.vp8_last.and_then(|(_, t)| t).map(u32::from),
            last_src_seq: self.last_src_seq,
            layered: self.layered.is_some(),
            dd_frame_delta: u32::from(self.dd_frame_delta),
            dd_last_frame: self.dd_last.map(u32::from),
            layered_map: self.layered.as_ref().map(|m| m.snapshot()),
        }
    }

    /// Rebuilds a munger at `now`.
    pub fn restore(s: &MungerState, now: Instant) -> Self {
        // Numbers no stream reaches (a peer's snapshot may carry anything): the munger starts
        // afresh where the 16-bit numbers left off, waiting for a keyframe, instead of
        // overflowing its arithmetic.
        let implausible = [s.last_out_seq, s.last_out_ts, s.last_src_seq]
            .into_iter()
            .chain(s.segments.iter().flat_map(|g| [g.src_start, g.out_start]))
            .chain(s.segments.iter().filter_map(|g| g.layered_from_out))
            .any(|v| v > MAX_RESTORED_EXT);
        if implausible {
            return Self::new(
                s.out_ssrc,
                (s.last_out_seq as u16).wrapping_add(1),
                s.last_out_ts as u32,
            );
        }
        let mut m = Self {
            out_ssrc: s.out_ssrc,
            started: s.started,
            waiting_keyframe: s.waiting_keyframe,
            src_ssrc: s.src_ssrc,
            last_out_seq: s.last_out_seq,
            last_out_ts: s.last_out_ts,
            last_src_seq: s.last_src_seq,
            ts_delta: s.ts_delta,
            last_forward: s
                .last_forward_age_us
                .map(|a| now.checked_sub(Duration::from_micros(a)).unwrap_or(now)),
            segments: s
                .segments
                .iter()
                .rev()
                .take(MAX_SEGMENTS)
                .rev()
                .cloned()
                .collect(),
            vp8_pic_delta: (s.vp8_pic_delta & 0x7fff) as u16,
            vp8_tl0_delta: s.vp8_tl0_delta as u8,
            vp8_last: s
                .vp8_last_pic
                .map(|p| ((p & 0x7fff) as u16, s.vp8_last_tl0.map(|t| t as u8))),
            dd_frame_delta: s.dd_frame_delta as u16,
            dd_last: s.dd_last_frame.map(|f| f as u16),
            layered: None,
        };
        // Packets were being dropped: with the window, the new node goes on numbering as the
        // old one did (and answers NACKs of what it numbered)…
        if s.layered
            && m.started
            && let Some(map) = s.layered_map.as_ref().and_then(LayeredMap::restore)
            && m.segments
                .last()
                .is_some_and(|seg| seg.layered_from_out.is_some())
        {
            m.layered = Some(Box::new(map));
            return m;
        }
        // …without it, the last segment's arithmetic no longer holds past the last packet
        // numbered, so what comes next starts a segment of its own there.
        if s.layered && m.started {
            let src_ssrc = m.src_ssrc.unwrap_or_default();
            m.segments.push(SeqSegment {
                src_ssrc,
                src_start: m.last_src_seq + 1,
                out_start: m.last_out_seq + 1,
                ts_delta: m.ts_delta,
                vp8_pic_delta: u32::from(m.vp8_pic_delta),
                vp8_tl0_delta: u32::from(m.vp8_tl0_delta),
                layered_from_out: None,
                dd_frame_delta: u32::from(m.dd_frame_delta),
            });
            if m.segments.len() > MAX_SEGMENTS {
                m.segments.remove(0);
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pkt(ssrc: u32, ext_seq: u64, ext_ts: u64, key: bool) -> SourcePacket {
        SourcePacket {
            ssrc,
            ext_seq,
            ext_ts,
            keyframe_start: key,
            clock_rate: 90_000,
            vp8: None,
            dd_frame: None,
        }
    }

    fn fwd(m: Munged) -> (u64, u32) {
        match m {
            Munged::Forward { ext_seq, ts, .. } => (ext_seq, ts),
            other => panic!("expected forward, got {other:?}"),
        }
    }

    #[test]
    fn drops_until_keyframe_then_continues_across_a_switch() {
        let t0 = Instant::now();
        let mut m = Munger::new(7, 1000, 5000);
        assert_eq!(
            m.process(t0, &pkt(1, 70_000, 1 << 32, false)),
            Munged::Drop(DropReason::WaitingKeyframe)
        );
        let (s0, ts0) = fwd(m.process(t0, &pkt(1, 70_001, (1 << 32) + 10, true)));
        assert_eq!(s0 as u16, 1000);
        assert_eq!(ts0, 5000);
        let (s1, ts1) = fwd(m.process(t0, &pkt(1, 70_002, (1 << 32) + 3010, false)));
        assert_eq!((s1, ts1), (s0 + 1, 8000));
        // A new source 100 ms later: drop its delta frames, resume at +1 on its keyframe.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(
            m.process(t1, &pkt(2, 500, 77, false)),
            Munged::Drop(DropReason::WaitingKeyframe)
        );
        let (s2, ts2) = fwd(m.process(t1, &pkt(2, 501, 99, true)));
        assert_eq!(s2, s1 + 1);
        assert_eq!(
            ts2,
            8000 + 9000,
            "timestamp advances by the 100 ms that elapsed"
        );
        // Late packets of the new segment's predecessor are dropped.
        assert_eq!(
            m.process(t1, &pkt(2, 400, 0, false)),
            Munged::Drop(DropReason::Late)
        );
        // NACK mapping goes back to the right source packet.
        let r1 = m.reverse(s1).unwrap();
        assert_eq!((r1.src_ssrc, r1.src_ext_seq), (1, 70_002));
        assert_eq!(((1u64 << 32) + 3010).wrapping_add(r1.ts_delta) as u32, ts1);
        let r2 = m.reverse(s2).unwrap();
        assert_eq!((r2.src_ssrc, r2.src_ext_seq), (2, 501));
        assert_eq!(99u64.wrapping_add(r2.ts_delta) as u32, ts2);
        assert_eq!(m.reverse(s2 + 1), None);
        assert_eq!(m.extend_out_seq(s2 as u16), s2);
    }

    #[test]
    fn vp8_picture_id_continues_across_a_switch() {
        let t0 = Instant::now();
        let mut m = Munger::new(7, 0, 0);
        let mut p = pkt(1, 100, 0, true);
        p.vp8 = Some((32000, Some(9)));
        fwd(m.process(t0, &p));
        m.switch_source();
        let mut q = pkt(2, 7, 0, true);
        q.vp8 = Some((5, Some(200)));
        match m.process(t0, &q) {
            Munged::Forward {
                vp8_pic_delta,
                vp8_tl0_delta,
                ..
            } => {
                assert_eq!((5 + vp8_pic_delta) & 0x7fff, 32001);
                assert_eq!(200u8.wrapping_add(vp8_tl0_delta), 10);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn descriptor_frame_numbers_continue_across_switches_and_moves() {
        let t0 = Instant::now();
        let mut m = Munger::new(7, 0, 0);
        let dd = |ssrc: u32, seq: u64, frame: u16, key: bool| {
            let mut p = pkt(ssrc, seq, seq * 3000, key);
            p.dd_frame = Some(frame);
            p
        };
        let delta = |r: Munged| match r {
            Munged::Forward { dd_frame_delta, .. } => dd_frame_delta,
            other => panic!("{other:?}"),
        };
        // Source 1 numbers frames 65534, 65535 (a picture of two packets), 0; the second
        // packet of 65535 comes late, after frame 0: it does not move the newest back.
        assert_eq!(delta(m.process(t0, &dd(1, 10, 65534, true))), 0);
        assert_eq!(delta(m.process(t0, &dd(1, 11, 65535, false))), 0);
        assert_eq!(delta(m.process(t0, &dd(1, 13, 0, false))), 0);
        assert_eq!(delta(m.process(t0, &dd(1, 12, 65535, false))), 0);
        // Source 2 (another layer, a restarted encoder) starts at 5: it goes out as 1.
        m.switch_source();
        let d = delta(m.process(t0, &dd(2, 500, 5, true)));
        assert_eq!(5u16.wrapping_add(d), 1);
        assert_eq!(
            6u16.wrapping_add(delta(m.process(t0, &dd(2, 501, 6, false)))),
            2
        );
        // A retransmission of either source's packet carries its segment's delta.
        let first = m.reverse(m.extend_out_seq(0)).unwrap();
        assert_eq!(first.dd_frame_delta, 0);
        let last = m.reverse(m.last_out_seq().unwrap()).unwrap();
        assert_eq!(last.dd_frame_delta, d);
        // Moved to another node, then a source that starts at 40_000: it goes out as 3.
        let mut r = Munger::restore(&m.snapshot(t0), t0);
        r.switch_source();
        let d2 = delta(r.process(t0, &dd(3, 7, 40_000, true)));
        assert_eq!(40_000u16.wrapping_add(d2), 3);
    }

    #[test]
    fn snapshot_restore_continues_the_sequence() {
        let t0 = Instant::now();
        let mut m = Munger::new(9, 65530, 1);
        for i in 0..10u64 {
            fwd(m.process(t0, &pkt(3, 10 + i, 3000 * i, i == 0)));
        }
        let snap = m.snapshot(t0);
        let mut r = Munger::restore(&snap, t0 + Duration::from_secs(5));
        let a = fwd(m.process(t0, &pkt(3, 20, 30000, false)));
        let b = fwd(r.process(t0, &pkt(3, 20, 30000, false)));
        assert_eq!(a, b);
        assert_eq!(
            r.snapshot(t0 + Duration::from_secs(5)).segments,
            snap.segments
        );
    }

    #[test]
    fn dropped_layers_leave_no_gap_and_nacks_map_around_them() {
        let t0 = Instant::now();
        let mut m = Munger::new(7, 0, 0);
        let vp8 = |seq: u64, pic: u16, key: bool| {
            let mut p = pkt(1, seq, seq * 100, key);
            p.vp8 = Some((pic, Some(0)));
            p
        };
        // Pictures 10 (key, 2 packets), 11 (dropped), 12, 13 (dropped), 14.
        let (a, _) = fwd(m.process(t0, &vp8(100, 10, true)));
        fwd(m.process(t0, &vp8(101, 10, false)));
        assert_eq!(m.drop_packet(&vp8(102, 11, false)), None);
        let r = m.process(t0, &vp8(103, 12, false));
        let Munged::Forward {
            ext_seq,
            vp8_pic_delta,
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(ext_seq, a + 2, "no gap for the dropped packet");
        assert_eq!((12 + vp8_pic_delta) & 0x7fff, 11, "picture ids continue");
        assert_eq!(m.drop_packet(&vp8(104, 13, false)), None);
        // 105 lost on the way in; 106 forwarded reserves a number for it.
        let (c, _) = fwd(m.process(t0, &vp8(106, 14, false)));
        assert_eq!(c, a + 4);
        // 105 comes (repaired) and belongs to picture 13: dropped, its number is a hole.
        assert_eq!(m.drop_packet(&vp8(105, 13, false)), Some(a + 3));
        let hole = m.reverse(a + 3).unwrap();
        assert!(hole.hole);
        let back = m.reverse(a + 2).unwrap();
        assert_eq!((back.src_ext_seq, back.hole), (103, false));
        assert_eq!(m.reverse(a + 1).unwrap().src_ext_seq, 101);
        // Restored elsewhere: the next packet follows on, numbered from a segment of its own.
        let mut r = Munger::restore(&m.snapshot(t0), t0);
        let (d, _) = fwd(r.process(t0, &vp8(107, 14, false)));
        assert_eq!(d, c + 1);
        // A switch to another source leaves the old layered numbers unmappable, not wrong.
        m.switch_source();
        fwd(m.process(t0, &pkt(2, 5000, 0, true)));
        assert_eq!(m.reverse(a + 2), None);
        assert_eq!(m.reverse(a + 1).unwrap().src_ext_seq, 101);
    }

    proptest! {
        /// Whatever the sources do (switches, reordering, keyframes at random),
        /// the newest forwarded packets form a gap-free outgoing sequence with
        /// non-decreasing timestamps.
        #[test]
        fn output_is_continuous_and_monotonic(ops in proptest::collection::vec((0u8..3, 0u8..10, any::<bool>()), 1..400)) {
            let t0 = Instant::now();
            let mut m = Munger::new(1, 65000, u32::MAX - 1000);
            let mut src_seq = [1000u64, 50_000, 7];
            let mut src_ts = [0u64, 1 << 31, 99];
            let mut last: Option<(u64, u64)> = None;
            let mut now = t0;
            for (src, step, key) in ops {
                let s = src as usize;
                now += Duration::from_millis(u64::from(step));
                src_seq[s] += 1;
                src_ts[s] += 90 * u64::from(step);
                if let Munged::Forward { ext_seq, ts, .. } = m.process(now, &pkt(s as u32, src_seq[s], src_ts[s], key)) {
                    if let Some((ls, lts)) = last {
                        if ext_seq > ls {
                            prop_assert_eq!(ext_seq, ls + 1, "gap in outgoing sequence");
                            let ext_ts = crate::seq::TsUnwrapper::from_highest(Some(lts)).peek(u64::from(ts));
                            prop_assert!(ext_ts >= lts, "timestamp went back");
                            last = Some((ext_seq, ext_ts));
                        }
                    } else {
                        last = Some((ext_seq, (1u64 << 32) + u64::from(ts)));
                    }
                }
            }
        }
    }
}
