//! RTP payloads back into frames: a [`FrameAssembler`] per received stream takes packets in any
//! order (after NACK repair, duplicates included) and hands out complete frames in order, never
//! a delta frame whose reference it lacks.
//!
//! A frame is the packets from the one after the previous frame's marker up to its own marker
//! (audio: every packet), all of one timestamp, all present, and fitting together (VP8: the first
//! starts partition 0 and no other does; H.264: fragmentation units open and close in order).
//! When the frame at the head cannot complete — a packet stays missing for
//! [`AssemblerConfig::max_wait`], or a later keyframe completes first — the assembler drops what
//! it holds up to the next frame start and, for video, lets only a keyframe through next;
//! [`FrameAssembler::wants_keyframe`] then asks for one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::codec::Codec;

use super::payload::{Kind, h264_access_unit};

pub use super::payload::START_CODE;

/// Payload buffers kept for reuse at most.
const SPARE_BUFFERS: usize = 256;
/// Payload buffers larger than this are freed rather than kept.
const SPARE_CAPACITY: usize = 2048;

/// How long an assembler waits and how much it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblerConfig {
    /// An incomplete frame is given up once the oldest packet held from it on arrived this long
    /// ago.
    pub max_wait: Duration,
    /// Packets held at most; beyond, the oldest are dropped.
    pub max_packets: usize,
    /// Payload bytes held at most; beyond, the oldest packets are dropped.
    pub max_bytes: usize,
}

impl Default for AssemblerConfig {
    /// 500 ms, 2,048 packets, 4 MiB.
    fn default() -> Self {
        AssemblerConfig {
            max_wait: Duration::from_millis(500),
            max_packets: 2048,
            max_bytes: 4 << 20,
        }
    }
}

/// One complete frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Extended RTP timestamp.
    pub ts: u64,
    /// A VP8 key frame, an H.264 access unit with an IDR slice, or any Opus packet.
    pub keyframe: bool,
    /// VP8: the frame without payload descriptors. H.264: the access unit in Annex B form, each
    /// NAL unit behind [`START_CODE`]. Opus: the packet.
    pub data: Vec<u8>,
    /// Extended sequence number of its first packet.
    pub first_seq: u64,
    /// Extended sequence number of its last packet.
    pub last_seq: u64,
    /// When its first packet arrived (the earliest arrival of its packets).
    pub first_arrival: Instant,
    /// When it became complete (the latest arrival of its packets).
    pub last_arrival: Instant,
}

/// What an assembler counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AssemblerStats {
    /// Frames handed out.
    pub frames: u64,
    /// Of those, keyframes.
    pub keyframes: u64,
    /// Complete delta frames dropped because a keyframe was due first.
    pub dropped_waiting_keyframe: u64,
    /// Times an incomplete frame was given up (packets missing too long, a later keyframe
    /// complete first, no frame start found).
    pub gave_up: u64,
    /// Complete frames whose packets did not fit together (dropped).
    pub corrupt_frames: u64,
    /// Packets whose payload did not parse (they only hold their place).
    pub malformed_packets: u64,
    /// Packets that arrived after their frame was handed out or given up.
    pub late_packets: u64,
    /// Packets already held.
    pub duplicate_packets: u64,
    /// Packets dropped to stay within the memory bounds.
    pub overflow_packets: u64,
}

/// A held packet.
#[derive(Debug)]
struct Packet {
    ts: u64,
    marker: bool,
    arrival: Instant,
    kind: Kind,
    payload: Vec<u8>,
}

/// What is remembered of the last packet let go, so the one after it still knows whether it
/// starts a frame.
#[derive(Debug, Clone, Copy)]
struct Prev {
    seq: u64,
    ts: u64,
    marker: bool,
}

/// Rebuilds the frames of one received stream. Sans-IO: feed it with
/// [`FrameAssembler::push`], drive its wait with [`FrameAssembler::handle_timeout`] at
/// [`FrameAssembler::poll_timeout`], and take frames with [`FrameAssembler::poll_frame`].
#[derive(Debug)]
pub struct FrameAssembler {
    codec: Codec,
    config: AssemblerConfig,
    packets: BTreeMap<u64, Packet>,
    /// Held packets that may start a keyframe.
    key_starts: BTreeSet<u64>,
    bytes: usize,
    /// Where the next frame starts, when known.
    next: Option<u64>,
    /// Packets below this were handed out or dropped.
    floor: u64,
    prev: Option<Prev>,
    /// Only a keyframe may be handed out next.
    need_key: bool,
    /// A keyframe request is warranted.
    key_wanted: bool,
    /// When the frame at the head is given up, if it stays stuck.
    deadline: Option<Instant>,
    ready: VecDeque<Frame>,
    spare: Vec<Vec<u8>>,
    stats: AssemblerStats,
}

impl FrameAssembler {
    /// An assembler for a stream of `codec`. Video starts waiting for a keyframe.
    pub fn new(codec: Codec, config: AssemblerConfig) -> Self {
        FrameAssembler {
            codec,
            config,
            packets: BTreeMap::new(),
            key_starts: BTreeSet::new(),
            bytes: 0,
            next: None,
            floor: 0,
            prev: None,
            need_key: codec.is_video(),
            key_wanted: false,
            deadline: None,
            ready: VecDeque::new(),
            spare: Vec::new(),
            stats: AssemblerStats::default(),
        }
    }

    /// The stream's codec.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// What it counted.
    pub fn stats(&self) -> AssemblerStats {
        self.stats
    }

    /// Whether it lost a frame it needed and a keyframe request (PLI) is due. Cleared when a
    /// keyframe is handed out.
    pub fn wants_keyframe(&self) -> bool {
        self.key_wanted
    }

    /// Lets only a keyframe through next (frames were lost after the assembler, say) and asks
    /// for one.
    pub fn require_keyframe(&mut self) {
        if self.codec.is_video() {
            self.need_key = true;
            self.key_wanted = true;
        }
    }

    /// Packets held.
    pub fn pending(&self) -> usize {
        self.packets.len()
    }

    /// Takes one RTP packet: its extended sequence number and timestamp, marker bit, payload and
    /// arrival time. Complete frames become available from [`FrameAssembler::poll_frame`].
    pub fn push(&mut self, seq: u64, ts: u64, marker: bool, payload: &[u8], arrival: Instant) {
        if seq < self.next.unwrap_or(self.floor) {
            self.stats.late_packets += 1;
            return;
        }
        if self.packets.contains_key(&seq) {
            self.stats.duplicate_packets += 1;
            return;
        }
        let kind = Kind::classify(self.codec, payload);
        if kind.bad {
            self.stats.malformed_packets += 1;
        }
        let keep = if kind.bad { &[][..] } else { payload };
        if !self.make_room(seq, keep.len()) {
            self.stats.overflow_packets += 1;
            return;
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.extend_from_slice(keep);
        self.bytes += buf.len();
        if kind.maybe_key {
            self.key_starts.insert(seq);
        }
        self.packets.insert(
            seq,
            Packet {
                ts,
                marker,
                arrival,
                kind,
                payload: buf,
            },
        );
        self.drain(arrival);
    }

    /// Gives up on what waited too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| d <= now) {
            self.drain(now);
        }
    }

    /// When [`FrameAssembler::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// The next complete frame, in order.
    pub fn poll_frame(&mut self) -> Option<Frame> {
        self.ready.pop_front()
    }

    /// Drops the oldest packets until one of `len` bytes fits; false if the packet itself is the
    /// oldest and must go.
    fn make_room(&mut self, seq: u64, len: usize) -> bool {
        let full = |s: &Self| {
            s.packets.len() >= s.config.max_packets.max(1) || s.bytes + len > s.config.max_bytes
        };
        if !full(self) {
            return true;
        }
        if len > self.config.max_bytes || self.packets.first_key_value().is_none_or(|f| *f.0 > seq)
        {
            return false;
        }
        while full(self) {
            let Some((s, p)) = self.packets.pop_first() else {
                break;
            };
            self.stats.overflow_packets += 1;
            self.forget(s, p);
        }
        // The head frame lost packets: start over from the next frame start.
        self.next = None;
        self.require_keyframe();
        seq >= self.floor
    }

    /// Lets go of one packet taken out of `packets`.
    fn forget(&mut self, seq: u64, p: Packet) {
        self.key_starts.remove(&seq);
        self.bytes -= p.payload.len();
        self.floor = self.floor.max(seq + 1);
        if self.prev.is_none_or(|prev| prev.seq < seq) {
            self.prev = Some(Prev {
                seq,
                ts: p.ts,
                marker: p.marker,
            });
        }
        self.recycle(p.payload);
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_CAPACITY {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// Lets go of every packet below `seq`.
    fn drop_below(&mut self, seq: u64) {
        let keep = self.packets.split_off(&seq);
        let gone = std::mem::replace(&mut self.packets, keep);
        for (s, p) in gone {
            self.forget(s, p);
        }
        self.floor = self.floor.max(seq);
    }

    /// Whether the held packet `k` starts a frame.
    fn is_start(&self, k: u64) -> bool {
        let Some(p) = self.packets.get(&k) else {
            return false;
        };
        if !self.codec.is_video() {
            return true;
        }
        let before = k.checked_sub(1).and_then(|b| match self.packets.get(&b) {
            Some(q) => Some((q.ts, q.marker)),
            None => self
                .prev
                .filter(|prev| prev.seq == b)
                .map(|prev| (prev.ts, prev.marker)),
        });
        match before {
            Some((ts, marker)) => marker || ts != p.ts,
            None => p.kind.sure_start,
        }
    }

    /// The last packet of the frame starting at `s`: `Ok(None)` while packets are missing,
    /// `Err(k)` when packet `k` has another timestamp before any marker (the frame lost its end).
    fn frame_end(&self, s: u64) -> Result<Option<u64>, u64> {
        let Some(first) = self.packets.get(&s) else {
            return Ok(None);
        };
        if !self.codec.is_video() {
            return Ok(Some(s));
        }
        for (expected, (&k, p)) in (s..).zip(self.packets.range(s..)) {
            if k != expected {
                return Ok(None);
            }
            if p.ts != first.ts {
                return Err(k);
            }
            if p.marker {
                return Ok(Some(k));
            }
        }
        Ok(None)
    }

    fn drain(&mut self, now: Instant) {
        self.deadline = None;
        loop {
            let head = match self.next {
                Some(s) => s,
                None => match self.packets.keys().copied().find(|k| self.is_start(*k)) {
                    Some(s) => {
                        self.drop_below(s);
                        self.next = Some(s);
                        s
                    }
                    None => {
                        self.wait_unsynced(now);
                        return;
                    }
                },
            };
            match self.frame_end(head) {
                Ok(Some(end)) => {
                    self.finish(head, end);
                    continue;
                }
                Err(k) => {
                    // The frame lost its marker (a sender cut it short): drop it, resume at `k`.
                    self.stats.corrupt_frames += 1;
                    self.require_keyframe();
                    self.drop_below(k);
                    self.next = Some(k);
                    continue;
                }
                Ok(None) => {}
            }
            let oldest = self.packets.values().map(|p| p.arrival).min();
            let deadline = oldest.map(|t| t + self.config.max_wait);
            let later_key = self.codec.is_video() && self.later_keyframe(head).is_some();
            if later_key || deadline.is_some_and(|d| d <= now) {
                self.skip(head);
                continue;
            }
            self.deadline = deadline;
            return;
        }
    }

    /// Nothing held starts a frame: what waited too long goes.
    fn wait_unsynced(&mut self, now: Instant) {
        let Some(oldest) = self.packets.values().map(|p| p.arrival).min() else {
            return;
        };
        let deadline = oldest + self.config.max_wait;
        if deadline > now {
            self.deadline = Some(deadline);
            return;
        }
        self.stats.gave_up += 1;
        self.require_keyframe();
        let end = self
            .packets
            .last_key_value()
            .map_or(self.floor, |l| *l.0 + 1);
        self.drop_below(end);
    }

    /// The start of the first complete keyframe after `head`.
    fn later_keyframe(&self, head: u64) -> Option<u64> {
        self.key_starts.range(head + 1..).copied().find(|&k| {
            self.is_start(k)
                && self.frame_end(k).ok().flatten().is_some_and(|e| {
                    self.packets
                        .range(k..=e)
                        .any(|(_, p)| p.kind.key && !p.kind.bad)
                })
        })
    }

    /// Gives up on the frame at `head`: resumes at the next frame start that may be a keyframe
    /// (audio: at the next packet).
    fn skip(&mut self, head: u64) {
        self.stats.gave_up += 1;
        self.require_keyframe();
        let next = if self.codec.is_video() {
            self.later_keyframe(head).or_else(|| {
                self.key_starts
                    .range(head + 1..)
                    .copied()
                    .find(|&k| self.is_start(k))
            })
        } else {
            self.packets.range(head + 1..).next().map(|(k, _)| *k)
        };
        match next {
            Some(k) => {
                self.drop_below(k);
                self.next = Some(k);
            }
            None => {
                let end = self.packets.last_key_value().map_or(head, |l| *l.0) + 1;
                self.drop_below(end.max(head + 1));
                self.next = None;
            }
        }
    }

    /// Hands out (or drops) the complete frame `s..=e` and moves past it.
    fn finish(&mut self, s: u64, e: u64) {
        let frame = self.build(s, e);
        let keep = self.packets.split_off(&(e + 1));
        let taken = std::mem::replace(&mut self.packets, keep);
        for (k, p) in taken {
            self.forget(k, p);
        }
        self.next = Some(e + 1);
        let Some(frame) = frame else {
            self.stats.corrupt_frames += 1;
            self.require_keyframe();
            return;
        };
        if self.need_key && !frame.keyframe {
            self.stats.dropped_waiting_keyframe += 1;
            self.key_wanted = true;
            self.recycle(frame.data);
            return;
        }
        if frame.keyframe && self.codec.is_video() {
            self.need_key = false;
            self.key_wanted = false;
        }
        self.stats.frames += 1;
        self.stats.keyframes += u64::from(frame.keyframe);
        self.ready.push_back(frame);
    }

    /// The frame of packets `s..=e` (all held), or `None` when they do not fit together.
    fn build(&self, s: u64, e: u64) -> Option<Frame> {
        let pkts = || self.packets.range(s..=e).map(|(_, p)| p);
        if pkts().any(|p| p.kind.bad) {
            return None;
        }
        let first = self.packets.get(&s)?;
        let size: usize = pkts().map(|p| p.payload.len()).sum();
        let mut data = Vec::with_capacity(size + 64);
        let keyframe = match self.codec {
            Codec::Opus => {
                data.extend_from_slice(&first.payload);
                true
            }
            // Ferry's own peers assemble only what they send.
            Codec::Vp9 | Codec::Av1 => return None,
            Codec::Vp8 => {
                if !first.kind.may_start || pkts().skip(1).any(|p| p.kind.may_start) {
                    return None;
                }
                for p in pkts() {
                    data.extend_from_slice(p.payload.get(p.kind.skip..)?);
                }
                first.kind.key
            }
            Codec::H264 => {
                h264_access_unit(pkts().map(|p| p.payload.as_slice()), &mut data)?;
                pkts().any(|p| p.kind.key)
            }
        };
        Some(Frame {
            ts: first.ts,
            keyframe,
            data,
            first_seq: s,
            last_seq: e,
            first_arrival: pkts().map(|p| p.arrival).min()?,
            last_arrival: pkts().map(|p| p.arrival).max()?,
        })
    }
}

/// Fuzz target body: feeds arbitrary packets to an assembler of each codec and checks that
/// frames come out in order, within their packets, and (video) only after a keyframe.
#[cfg(any(test, feature = "fuzzing"))]
#[allow(clippy::disallowed_methods)] // a fuzz body picks the start time
pub fn fuzz_depacketize(data: &[u8]) {
    let start = Instant::now();
    for codec in [Codec::Vp8, Codec::H264, Codec::Opus] {
        let config = AssemblerConfig {
            max_packets: 64,
            max_bytes: 4096,
            ..AssemblerConfig::default()
        };
        let mut a = FrameAssembler::new(codec, config);
        let mut rest = data;
        let mut seq = 1000u64;
        let mut ts = 0u64;
        let mut t = start;
        let mut last: Option<u64> = None;
        let mut keyed = !codec.is_video();
        while let [ctl, len, tail @ ..] = rest {
            let len = usize::from(*len % 64).min(tail.len());
            let (payload, after) = tail.split_at(len);
            rest = after;
            // Low bits move the sequence number (back, too), the next the timestamp.
            seq = (seq + u64::from(ctl & 0x07)).saturating_sub(2);
            ts += u64::from(ctl >> 3 & 0x03) * 3000;
            t += Duration::from_millis(u64::from(ctl >> 5) * 40);
            a.push(seq, ts, ctl & 0x80 != 0, payload, t);
            a.handle_timeout(t);
            assert!(a.pending() <= 64);
            while let Some(f) = a.poll_frame() {
                assert!(f.first_seq <= f.last_seq && last.is_none_or(|l| l < f.first_seq));
                last = Some(f.last_seq);
                keyed |= f.keyframe;
                assert!(keyed, "{codec:?}: delta frame before any keyframe");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::nal::{FU_A, STAP_A};
    use super::super::packetize::{Payloads, packetize};
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    /// A sent frame: (data, keyframe, payloads).
    struct Sent {
        data: Vec<u8>,
        keyframe: bool,
        payloads: Vec<Vec<u8>>,
    }

    fn vp8_frame(i: usize, key: bool, len: usize) -> Vec<u8> {
        let mut f = vec![if key { 0x10 } else { 0x11 }];
        f.extend((1..len).map(|b| (b * 7 + i) as u8));
        f
    }

    fn h264_au(i: usize, key: bool, len: usize) -> Vec<u8> {
        let mut au = Vec::new();
        let slice = |t: u8, first: bool, len: usize| {
            let mut v = vec![0x60 | t, if first { 0x88 } else { 0x21 }];
            v.extend((2..len).map(|b| ((b * 13 + i) % 255 + 1) as u8));
            v
        };
        let mut units = Vec::new();
        if key {
            units.push(vec![0x67, 0x42, 0xe0, 0x1f, 0xda]);
            units.push(vec![0x68, 0xce, 0x3c, 0x80]);
            units.push(vec![0x06, 0x05, 0x02, 0x11, 0x80]);
            units.push(slice(5, true, len));
            units.push(slice(5, false, 300));
        } else {
            units.push(slice(1, true, len));
        }
        for u in units {
            au.extend_from_slice(&START_CODE);
            au.extend_from_slice(&u);
        }
        au
    }

    fn frames(codec: Codec, n: usize, gop: usize) -> Vec<Sent> {
        let mut out = Payloads::new();
        (0..n)
            .map(|i| {
                let key = i.is_multiple_of(gop);
                let len = if key { 3000 } else { 200 + (i * 97) % 1500 };
                let data = match codec {
                    Codec::Vp8 => vp8_frame(i, key, len),
                    Codec::H264 => h264_au(i, key, len),
                    Codec::Opus => (0..60 + i % 40).map(|b| (b + i) as u8).collect(),
                    Codec::Vp9 | Codec::Av1 => unreachable!("not packetized here"),
                };
                packetize(codec, &data, i as u16, 1000, &mut out).unwrap();
                Sent {
                    data,
                    keyframe: key || codec == Codec::Opus,
                    payloads: out.to_vecs(),
                }
            })
            .collect()
    }

    /// (seq, ts, marker, payload) of every packet, seq from 1000 and ts 3000 apart.
    fn packets(sent: &[Sent]) -> Vec<(u64, u64, bool, Vec<u8>)> {
        let mut seq = 1000;
        let mut out = Vec::new();
        for (i, f) in sent.iter().enumerate() {
            let n = f.payloads.len();
            for (j, p) in f.payloads.iter().enumerate() {
                out.push((seq, 90_000 + i as u64 * 3000, j + 1 == n, p.clone()));
                seq += 1;
            }
        }
        out
    }

    fn run(
        codec: Codec,
        pkts: &[(u64, u64, bool, Vec<u8>)],
        step: Duration,
    ) -> (Vec<Frame>, FrameAssembler) {
        let mut a = FrameAssembler::new(codec, AssemblerConfig::default());
        let t0 = Instant::now();
        let mut got = Vec::new();
        for (i, (seq, ts, m, p)) in pkts.iter().enumerate() {
            let now = t0 + step * i as u32;
            a.handle_timeout(now);
            a.push(*seq, *ts, *m, p, now);
            got.extend(std::iter::from_fn(|| a.poll_frame()));
        }
        let end = t0 + step * pkts.len() as u32 + Duration::from_secs(1);
        a.handle_timeout(end);
        got.extend(std::iter::from_fn(|| a.poll_frame()));
        (got, a)
    }

    /// Deterministic shuffle within windows of `w` packets, plus duplicates of every 7th. The
    /// first window stays in order: the first packet to arrive is where a stream starts.
    fn scramble(pkts: &mut Vec<(u64, u64, bool, Vec<u8>)>, w: usize) {
        for chunk in pkts[w..].chunks_mut(w) {
            chunk.reverse();
            let n = chunk.len();
            if n > 2 {
                chunk.swap(0, n / 2);
            }
        }
        let dups: Vec<_> = pkts.iter().step_by(7).cloned().collect();
        for (i, d) in dups.into_iter().enumerate() {
            let at = (i * 11 + 5).min(pkts.len());
            pkts.insert(at, d);
        }
    }

    fn check_round_trip(codec: Codec) {
        let sent = frames(codec, 40, 15);
        let mut pkts = packets(&sent);
        scramble(&mut pkts, 5);
        // One packet is lost and comes back 6 packets later (before the next keyframe, which
        // would overtake), as a NACK repair would.
        let repaired = pkts.remove(8);
        pkts.insert(14, repaired);
        let (got, a) = run(codec, &pkts, MS);
        assert_eq!(got.len(), sent.len(), "{codec:?} {:?}", a.stats());
        for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
            assert_eq!(g.data, s.data, "{codec:?} frame {i}");
            assert_eq!((g.keyframe, g.ts), (s.keyframe, 90_000 + i as u64 * 3000));
        }
        let st = a.stats();
        assert!(st.duplicate_packets + st.late_packets > 0, "{st:?}");
        assert_eq!(
            (st.gave_up, st.corrupt_frames, st.malformed_packets),
            (0, 0, 0)
        );
        assert!(!a.wants_keyframe() && a.pending() == 0);
    }

    #[test]
    fn vp8_round_trips_through_reordering_and_duplicates() {
        check_round_trip(Codec::Vp8);
    }

    #[test]
    fn h264_round_trips_through_reordering_and_duplicates() {
        check_round_trip(Codec::H264);
        // STAP-A and FU-A were both in play.
        let sent = frames(Codec::H264, 2, 15);
        assert_eq!(sent[0].payloads[0][0] & 0x1f, STAP_A);
        assert!(sent[0].payloads.iter().any(|p| p[0] & 0x1f == FU_A));
    }

    #[test]
    fn opus_round_trips_through_reordering_and_duplicates() {
        check_round_trip(Codec::Opus);
    }

    #[test]
    fn a_lost_packet_skips_to_the_next_keyframe_and_asks_for_one() {
        for codec in [Codec::Vp8, Codec::H264] {
            let sent = frames(codec, 40, 15);
            let mut pkts = packets(&sent);
            // Frame 3's first packet never comes.
            let lost = pkts.iter().position(|p| p.1 == 90_000 + 3 * 3000).unwrap();
            pkts.remove(lost);
            let mut a = FrameAssembler::new(codec, AssemblerConfig::default());
            let t0 = Instant::now();
            let mut got = Vec::new();
            let mut asked = false;
            for (i, (seq, ts, m, p)) in pkts.iter().enumerate() {
                // 40 ms apart: the wait of 500 ms ends long before the next keyframe (frame 15).
                let now = t0 + 40 * MS * i as u32;
                a.handle_timeout(now);
                a.push(*seq, *ts, *m, p, now);
                got.extend(std::iter::from_fn(|| a.poll_frame()));
                asked |= a.wants_keyframe();
            }
            let ts: Vec<u64> = got.iter().map(|f| (f.ts - 90_000) / 3000).collect();
            let want: Vec<u64> = (0..3).chain(15..40).collect();
            assert_eq!(ts, want, "{codec:?}");
            assert!(got[3].keyframe);
            for g in &got {
                let i = ((g.ts - 90_000) / 3000) as usize;
                assert_eq!(g.data, sent[i].data);
            }
            assert!(asked && !a.wants_keyframe(), "asked, then served");
            let st = a.stats();
            assert_eq!(st.gave_up, 1, "{codec:?} {st:?}");
            assert!(
                st.dropped_waiting_keyframe > 0 && st.late_packets == 0,
                "{st:?}"
            );
        }
    }

    #[test]
    fn a_later_complete_keyframe_overtakes_a_stuck_frame_at_once() {
        let sent = frames(Codec::Vp8, 20, 5);
        let mut pkts = packets(&sent);
        // Frame 2's last packet is lost; frames 3, 4 (deltas) and 5 (key) arrive at once.
        let lost = pkts
            .iter()
            .position(|p| p.1 == 90_000 + 2 * 3000 && p.2)
            .unwrap();
        pkts.remove(lost);
        let (got, a) = run(Codec::Vp8, &pkts, MS);
        let ts: Vec<u64> = got.iter().map(|f| (f.ts - 90_000) / 3000).collect();
        assert_eq!(ts, (0..2).chain(5..20).collect::<Vec<_>>());
        assert_eq!(a.stats().gave_up, 1);
        // Within 1 ms per packet: far below the 500 ms wait.
        assert!(got[2].last_arrival - got[1].last_arrival < 50 * MS);
    }

    #[test]
    fn audio_skips_a_hole_after_the_wait_and_stays_in_order() {
        let sent = frames(Codec::Opus, 30, 1);
        let mut pkts = packets(&sent);
        pkts.remove(10);
        let (got, a) = run(Codec::Opus, &pkts, 20 * MS);
        assert_eq!(got.len(), 29);
        assert!(got.windows(2).all(|w| w[0].ts < w[1].ts));
        assert_eq!(a.stats().gave_up, 1);
        assert!(!a.wants_keyframe());
        // Packets 11.. waited for the hole.
        assert!(got[10].last_arrival - got[9].last_arrival >= 20 * MS);
    }

    #[test]
    fn a_stream_joined_mid_frame_waits_for_a_keyframe() {
        let sent = frames(Codec::H264, 20, 10);
        let pkts = packets(&sent);
        // Start at the keyframe's second packet (the IDR's first fragment, without the STAP-A
        // of parameter sets before it): nothing can be trusted before frame 1's start.
        assert_eq!(pkts[1].3[..2], [0x7c, 0x85]);
        let (got, a) = run(Codec::H264, &pkts[1..], MS);
        assert_eq!(got.first().map(|f| (f.ts - 90_000) / 3000), Some(10));
        assert_eq!(got.len(), 10);
        assert!(got[0].data.starts_with(&[0, 0, 0, 1, 0x67]));
        assert_eq!(a.stats().dropped_waiting_keyframe, 9, "{:?}", a.stats());
    }

    #[test]
    fn malformed_and_cut_frames_are_dropped_until_a_keyframe() {
        let sent = frames(Codec::Vp8, 12, 4);
        let mut pkts = packets(&sent);
        // Frame 2 is garbled; frame 9 loses its marker (cut short by a sender).
        let bad = pkts.iter().position(|p| p.1 == 90_000 + 2 * 3000).unwrap();
        pkts[bad].3 = vec![0x80];
        let cut = pkts
            .iter()
            .position(|p| p.1 == 90_000 + 9 * 3000 && p.2)
            .unwrap();
        pkts[cut].2 = false;
        let (got, a) = run(Codec::Vp8, &pkts, MS);
        let ts: Vec<u64> = got.iter().map(|f| (f.ts - 90_000) / 3000).collect();
        assert_eq!(ts, vec![0, 1, 4, 5, 6, 7, 8]);
        let st = a.stats();
        assert_eq!((st.malformed_packets, st.corrupt_frames), (1, 2), "{st:?}");
        assert_eq!((st.gave_up, st.dropped_waiting_keyframe), (0, 3));
    }

    #[test]
    fn memory_stays_bounded_and_unusable_packets_expire() {
        let config = AssemblerConfig {
            max_packets: 16,
            ..AssemblerConfig::default()
        };
        let mut a = FrameAssembler::new(Codec::Vp8, config);
        let t0 = Instant::now();
        // Continuation packets that never start a frame.
        for i in 0..100u64 {
            a.push(
                2000 + i,
                0,
                false,
                &[0x80, 0x80, 0x80, 1, 2],
                t0 + MS * i as u32,
            );
            assert!(a.pending() <= 16);
        }
        assert!(a.stats().overflow_packets > 0 && a.wants_keyframe());
        a.handle_timeout(t0 + Duration::from_secs(2));
        assert_eq!((a.pending(), a.poll_timeout()), (0, None));
        a.push(1, 0, true, &[0x90, 0x80, 0x80, 1, 0x10], t0);
        assert_eq!(a.stats().late_packets, 1);
    }

    proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            fuzz_depacketize(&data);
        }

        #[test]
        fn any_order_gives_the_frames_back(seed in any::<u64>()) {
            let sent = frames(Codec::H264, 12, 6);
            let mut pkts = packets(&sent);
            // A seeded shuffle within windows of 8.
            let mut x = seed | 1;
            for chunk in pkts[8..].chunks_mut(8) {
                for i in (1..chunk.len()).rev() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    chunk.swap(i, (x % (i as u64 + 1)) as usize);
                }
            }
            let (got, _) = run(Codec::H264, &pkts, MS);
            let data: Vec<&Vec<u8>> = got.iter().map(|f| &f.data).collect();
            let want: Vec<&Vec<u8>> = sent.iter().map(|f| &f.data).collect();
            prop_assert_eq!(data, want);
        }
    }
}
