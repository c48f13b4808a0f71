//! What a [`super::Peer`] measured: plain data, cheap to clone, for assertions and bench tables.

use crate::codec::Codec;
use crate::media::AssemblerStats;
use crate::rtcp::SenderReportData;

/// A set of extended sequence numbers as sorted, disjoint, non-adjacent inclusive ranges: a
/// gap-free stream is one range however long it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqRanges {
    ranges: Vec<(u64, u64)>,
}

impl SeqRanges {
    /// Adds `x`; returns false if it was already there.
    pub fn insert(&mut self, x: u64) -> bool {
        // First range starting after x; the one before it may contain or touch x.
        let i = self.ranges.partition_point(|&(start, _)| start <= x);
        if i > 0 && self.ranges[i - 1].1 >= x {
            return false;
        }
        let joins_prev = i > 0 && self.ranges[i - 1].1 + 1 == x;
        let joins_next = i < self.ranges.len() && self.ranges[i].0 == x + 1;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.ranges[i - 1].1 = self.ranges[i].1;
                self.ranges.remove(i);
            }
            (true, false) => self.ranges[i - 1].1 = x,
            (false, true) => self.ranges[i].0 = x,
            (false, false) => self.ranges.insert(i, (x, x)),
        }
        true
    }

    /// Whether `x` is in the set.
    pub fn contains(&self, x: u64) -> bool {
        let i = self.ranges.partition_point(|&(start, _)| start <= x);
        i > 0 && self.ranges[i - 1].1 >= x
    }

    /// The inclusive ranges, ascending.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// Number of members.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(a, b)| b - a + 1).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Smallest member.
    pub fn first(&self) -> Option<u64> {
        self.ranges.first().map(|r| r.0)
    }

    /// Largest member.
    pub fn last(&self) -> Option<u64> {
        self.ranges.last().map(|r| r.1)
    }

    /// The holes between the first and last member, as inclusive ranges.
    pub fn holes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.windows(2).map(|w| (w[0].1 + 1, w[1].0 - 1))
    }

    /// Members missing between the first and the last.
    pub fn missing(&self) -> u64 {
        self.holes().map(|(a, b)| b - a + 1).sum()
    }

    /// Length of the longest hole (0 when gap-free).
    pub fn max_gap(&self) -> u64 {
        self.holes().map(|(a, b)| b - a + 1).max().unwrap_or(0)
    }
}

/// Histogram resolution: values below `2 * SUB` µs are exact, above that buckets are 1/`SUB`
/// of their power of two wide (≤ 1.6 % error).
const SUB: u64 = 64;

fn bucket_of(us: u64) -> usize {
    if us < 2 * SUB {
        return us as usize;
    }
    let e = 63 - u64::from(us.leading_zeros());
    let shift = e - 6;
    (2 * SUB + (e - 7) * SUB + ((us >> shift) & (SUB - 1))) as usize
}

/// The middle of bucket `i`.
fn value_of(i: usize) -> u64 {
    let i = i as u64;
    if i < 2 * SUB {
        return i;
    }
    let k = i - 2 * SUB;
    let shift = k / SUB + 1;
    ((SUB + k % SUB) << shift) + (1 << shift) / 2
}

/// One-way latency from the payload stamps (receive time − capture time), in µs: exact count,
/// sum, min and max, and a log-linear histogram for quantiles (a few KiB however long it runs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyStats {
    /// Samples taken.
    pub count: u64,
    /// Sum of all samples.
    pub sum_us: u64,
    /// Smallest sample.
    pub min_us: Option<u64>,
    /// Largest sample.
    pub max_us: Option<u64>,
    buckets: Vec<u32>,
}

impl LatencyStats {
    pub(super) fn record(&mut self, us: u64) {
        let i = bucket_of(us);
        if i >= self.buckets.len() {
            self.buckets.resize(i + 1, 0);
        }
        self.buckets[i] = self.buckets[i].saturating_add(1);
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.min_us = Some(self.min_us.map_or(us, |m| m.min(us)));
        self.max_us = Some(self.max_us.map_or(us, |m| m.max(us)));
    }

    /// Adds another histogram's samples to this one.
    pub fn merge(&mut self, other: &LatencyStats) {
        if other.buckets.len() > self.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a = a.saturating_add(*b);
        }
        self.count += other.count;
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
        self.min_us = match (self.min_us, other.min_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max_us = match (self.max_us, other.max_us) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// The samples recorded since `earlier`, a copy of this histogram taken before: a
    /// measurement window's own figures (what a run's warm-up recorded does not count). Its
    /// min and max are exact where they were reached in the window, else the bucket's middle.
    pub fn since(&self, earlier: &LatencyStats) -> LatencyStats {
        let buckets: Vec<u32> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, &c)| c.saturating_sub(earlier.buckets.get(i).copied().unwrap_or(0)))
            .collect();
        let first = buckets.iter().position(|&c| c > 0);
        let last = buckets.iter().rposition(|&c| c > 0);
        let min_us = first.map(|i| match (self.min_us, earlier.min_us) {
            (Some(m), Some(e)) if m < e => m,
            (Some(m), None) => m,
            _ => value_of(i).max(self.min_us.unwrap_or(0)),
        });
        let max_us = last.map(|i| match (self.max_us, earlier.max_us) {
            (Some(m), Some(e)) if m > e => m,
            (Some(m), None) => m,
            _ => value_of(i).min(self.max_us.unwrap_or(u64::MAX)),
        });
        LatencyStats {
            count: self.count.saturating_sub(earlier.count),
            sum_us: self.sum_us.saturating_sub(earlier.sum_us),
            min_us,
            max_us,
            buckets,
        }
    }

    /// Records one sample (for callers measuring their own latencies).
    pub fn add(&mut self, us: u64) {
        self.record(us);
    }

    /// Mean over all samples.
    pub fn mean_us(&self) -> Option<u64> {
        self.sum_us.checked_div(self.count)
    }

    /// The `p`-quantile (0.0..=1.0, nearest rank), within 1.6 % and inside `[min, max]`.
    pub fn quantile_us(&self, p: f64) -> Option<u64> {
        let (min, max) = (self.min_us?, self.max_us?);
        let total: u64 = self.buckets.iter().map(|&c| u64::from(c)).sum();
        let rank = ((p.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        // The extremes are known exactly.
        if rank == 1 {
            return Some(min);
        }
        if rank >= total {
            return Some(max);
        }
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(value_of(i).clamp(min, max));
            }
        }
        Some(max)
    }
}

/// One stream a publisher sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendStreamStats {
    /// Media SSRC.
    pub ssrc: u32,
    /// RTX SSRC when RTX was negotiated.
    pub rtx_ssrc: Option<u32>,
    /// Codec.
    pub codec: Codec,
    /// Negotiated payload type.
    pub pt: u8,
    /// Media packets sent (first transmissions).
    pub packets: u64,
    /// Payload bytes of those.
    pub bytes: u64,
    /// Frames (audio: packets) sent.
    pub frames: u64,
    /// Keyframes sent (periodic and forced).
    pub keyframes: u64,
    /// Packets sent again in answer to NACKs (as RTX or plain).
    pub retransmissions: u64,
    /// Sequence number of the first packet.
    pub first_seq: u16,
    /// Simulcast: the layer's rid.
    pub rid: Option<String>,
}

/// One stream a viewer receives (keyed by media SSRC; RTX arrivals are folded in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvStreamStats {
    /// Media SSRC.
    pub ssrc: u32,
    /// RTX SSRC, from the answer's FID group or first seen.
    pub rtx_ssrc: Option<u32>,
    /// Codec, from the payload type or the answer.
    pub codec: Option<Codec>,
    /// Unique media packets (first arrivals plus repairs).
    pub packets: u64,
    /// Payload bytes of those.
    pub bytes: u64,
    /// Packets that arrived again after a copy was already held.
    pub duplicates: u64,
    /// Packets that arrived as RTX (before de-duplication).
    pub rtx_packets: u64,
    /// Missing packets that arrived later (by retransmission or reordering).
    pub recovered: u64,
    /// Missing packets the NACK generator gave up on.
    pub nack_gave_up: u64,
    /// Every extended sequence number received; holes are what stays lost after repair.
    pub received: SeqRanges,
    /// Whether the packet with the lowest sequence number received belongs to a keyframe (starts
    /// one, or is of its frame: the first one may be lost for good); `None` before any.
    pub first_packet_keyframe: Option<bool>,
    /// Keyframe starts received.
    pub keyframes: u64,
    /// Packets whose extended timestamp is below that of a packet with a lower extended
    /// sequence number, or above one with a higher.
    pub ts_regressions: u64,
    /// Distinct frame numbers seen (stamped payloads only).
    pub frames_seen: u64,
    /// VP8 frame starts received per temporal layer (TID 0 to 3; all in 0 without temporal
    /// layers).
    pub temporal_frames: [u64; 4],
    /// Frames with every packet from the frame start to the marker received.
    pub frames_completed: u64,
    /// Packets without a readable stamp.
    pub unstamped: u64,
    /// Receive time − capture time.
    pub latency: LatencyStats,
    /// Sender reports received for this SSRC.
    pub sender_reports: u64,
    /// The latest sender report.
    pub last_sr: Option<SenderReportData>,
    /// Largest |RTP timestamp − timestamp the latest SR predicts from the capture time| over
    /// stamped packets, in clock ticks: 0–1 when the sender's (or the SFU's rewritten) NTP↔RTP
    /// mapping is exact.
    pub sr_max_deviation_ticks: Option<u64>,
    /// Largest time between two packets that were new to the receiver (a
    /// blackout shows here).
    pub max_arrival_gap: std::time::Duration,
    /// External media: what frame assembly produced (frames handed out, delta frames dropped
    /// waiting for a keyframe, frames given up); zero with synthetic media.
    pub assembled: AssemblerStats,
    /// External media: frames dropped because the application let
    /// [`super::MAX_QUEUED_FRAMES`] pile up unpolled.
    pub frames_overflowed: u64,
    /// Unique media packets per simulcast layer index their stamps carry (a simulcast
    /// publisher's, however the server switched); empty for a single stream.
    pub layer_packets: Vec<u64>,
    /// Payload bytes of those, per layer index.
    pub layer_bytes: Vec<u64>,
    /// [`RecvStreamStats::temporal_frames`] per layer index (a switch's sample holds frames
    /// of the layer left and of the one reached: which temporal layers came of which).
    pub layer_temporal_frames: Vec<[u64; 4]>,
    /// The layer of the stamped packet with the highest sequence number so far.
    pub layer: Option<u8>,
    /// Times `layer` changed (in sequence order, so a late repair of the old layer does not
    /// count).
    pub layer_changes: u64,
}

impl RecvStreamStats {
    pub(super) fn new(ssrc: u32, rtx_ssrc: Option<u32>, codec: Option<Codec>) -> Self {
        RecvStreamStats {
            ssrc,
            rtx_ssrc,
            codec,
            packets: 0,
            bytes: 0,
            duplicates: 0,
            rtx_packets: 0,
            recovered: 0,
            nack_gave_up: 0,
            received: SeqRanges::default(),
            first_packet_keyframe: None,
            keyframes: 0,
            ts_regressions: 0,
            frames_seen: 0,
            temporal_frames: [0; 4],
            frames_completed: 0,
            unstamped: 0,
            latency: LatencyStats::default(),
            sender_reports: 0,
            last_sr: None,
            sr_max_deviation_ticks: None,
            max_arrival_gap: std::time::Duration::ZERO,
            assembled: AssemblerStats::default(),
            frames_overflowed: 0,
            layer_packets: Vec::new(),
            layer_bytes: Vec::new(),
            layer_temporal_frames: Vec::new(),
            layer: None,
            layer_changes: 0,
        }
    }

    /// Counts a new packet of `bytes` payload bytes, extended sequence number `ext`, stamped
    /// with `layer`; `newest` is the highest sequence number stamped with a layer before it.
    pub(super) fn count_layer(&mut self, layer: u8, bytes: usize, ext: u64, newest: &mut u64) {
        let i = usize::from(layer);
        if self.layer_packets.len() <= i {
            self.layer_packets.resize(i + 1, 0);
            self.layer_bytes.resize(i + 1, 0);
        }
        self.layer_packets[i] += 1;
        self.layer_bytes[i] += bytes as u64;
        if self.layer.is_none() || ext > *newest {
            *newest = ext;
            if self.layer.is_some_and(|l| l != layer) {
                self.layer_changes += 1;
            }
            self.layer = Some(layer);
        }
    }

    /// A VP8 frame of temporal layer `tid` (0–3) started on simulcast layer `layer`.
    pub(super) fn count_layer_frame(&mut self, layer: u8, tid: u8) {
        let i = usize::from(layer);
        if self.layer_temporal_frames.len() <= i {
            self.layer_temporal_frames.resize(i + 1, [0; 4]);
        }
        self.layer_temporal_frames[i][usize::from(tid & 3)] += 1;
    }

    /// Payload bytes received on simulcast layer `layer`.
    pub fn bytes_of_layer(&self, layer: u8) -> u64 {
        self.layer_bytes
            .get(usize::from(layer))
            .copied()
            .unwrap_or(0)
    }

    /// Packets received on simulcast layer `layer`.
    pub fn packets_of_layer(&self, layer: u8) -> u64 {
        self.layer_packets
            .get(usize::from(layer))
            .copied()
            .unwrap_or(0)
    }

    /// Whether this is a video stream.
    pub fn is_video(&self) -> bool {
        self.codec.is_some_and(Codec::is_video)
    }
}

/// Everything a peer counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// ICE and DTLS done, SRTP keyed, not closed.
    pub connected: bool,
    /// The DTLS handshake failed (bad fingerprint, protocol error).
    pub dtls_failed: bool,
    /// Datagrams handed to `poll_transmit`'s caller.
    pub datagrams_sent: u64,
    /// Datagrams fed to `handle_datagram`.
    pub datagrams_received: u64,
    /// Bytes of those (UDP payloads: what a link carries of them, less IP and UDP headers).
    pub bytes_received: u64,
    /// Datagrams ignored: unknown source, unknown first byte, undecodable.
    pub datagrams_dropped: u64,
    /// SRTP/SRTCP packets that failed authentication or replay checks.
    pub srtp_errors: u64,
    /// Packets the sender encrypted under an (SSRC, index) it had used for a
    /// different plaintext (a two-time pad: must stay 0).
    pub srtp_index_reuse: u64,
    /// ICE error responses received, and checks of the server we could not authenticate.
    pub ice_errors: u64,
    /// Publisher: streams sent.
    pub sent: Vec<SendStreamStats>,
    /// Viewer: streams received, in order of first arrival.
    pub received: Vec<RecvStreamStats>,
    /// Every SSRC seen on decrypted RTP (media and RTX), in order of first arrival.
    pub ssrcs_seen: Vec<u32>,
    /// NACK feedback messages sent.
    pub nack_packets_sent: u64,
    /// Sequence numbers asked for in them.
    pub nacks_sent: u64,
    /// Sequence numbers asked for in NACKs received.
    pub nacks_received: u64,
    /// PLIs sent.
    pub plis_sent: u64,
    /// PLIs received.
    pub plis_received: u64,
    /// FIRs received (new command sequence numbers only).
    pub firs_received: u64,
    /// Packets retransmitted in answer to NACKs.
    pub retransmissions_sent: u64,
    /// NACKed packets no longer in the send cache.
    pub nack_misses: u64,
    /// Keyframes sent.
    pub keyframes_sent: u64,
    /// Of those, forced by PLI/FIR.
    pub forced_keyframes: u64,
    /// Latest REMB estimate received.
    pub remb_bps: Option<u64>,
    /// Sender reports sent.
    pub sender_reports_sent: u64,
    /// Receiver reports sent (periodic ones and those in NACK/PLI compounds).
    pub receiver_reports_sent: u64,
    /// Viewer: transport-wide CC feedback packets sent (each after an empty receiver report,
    /// not counted in `receiver_reports_sent`).
    pub twcc_feedback_sent: u64,
}

impl PeerStats {
    /// The received stream with this media SSRC.
    pub fn stream(&self, ssrc: u32) -> Option<&RecvStreamStats> {
        self.received.iter().find(|s| s.ssrc == ssrc)
    }

    /// Received video streams.
    pub fn video(&self) -> impl Iterator<Item = &RecvStreamStats> {
        self.received.iter().filter(|s| s.is_video())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_ranges_merge_and_report_holes() {
        let mut s = SeqRanges::default();
        for x in [5, 7, 9, 6, 12] {
            assert!(s.insert(x));
        }
        assert!(!s.insert(6));
        assert_eq!(s.ranges(), &[(5, 7), (9, 9), (12, 12)]);
        assert_eq!((s.missing(), s.max_gap(), s.len()), (3, 2, 5));
        assert!(s.insert(8) && s.insert(10) && s.insert(11) && s.insert(4));
        assert_eq!(s.ranges(), &[(4, 12)]);
        assert_eq!((s.missing(), s.max_gap()), (0, 0));
        assert!(s.contains(4) && !s.contains(13) && !s.contains(3));
    }

    #[test]
    fn latency_quantiles_are_within_the_bucket_error() {
        let mut l = LatencyStats::default();
        for us in 1..=100_000u64 {
            l.record(us);
        }
        assert_eq!(
            (l.min_us, l.max_us, l.count),
            (Some(1), Some(100_000), 100_000)
        );
        assert_eq!(l.mean_us(), Some(50_000));
        for (p, want) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.001, 100.0)] {
            let got = l.quantile_us(p).unwrap() as f64;
            assert!((got - want).abs() / want < 0.016, "p{p}: {got} vs {want}");
        }
        assert_eq!(l.quantile_us(1.0), Some(100_000));
        assert_eq!(l.quantile_us(0.0), Some(1));
        for us in [0, 1, 127, 128, 129, 1000, 1 << 20, u64::MAX] {
            let v = value_of(bucket_of(us));
            assert!(v.abs_diff(us) <= us / 64 + 1, "{us} -> {v}");
        }
        assert!(l.buckets.len() < 1024);
        assert_eq!(LatencyStats::default().quantile_us(0.5), None);
    }

    #[test]
    fn a_window_of_a_latency_histogram_counts_only_its_own_samples() {
        let mut l = LatencyStats::default();
        for us in [40_000, 50_000, 60_000] {
            l.record(us);
        }
        let before = l.clone();
        for us in 1_000..=2_000u64 {
            l.record(us);
        }
        let w = l.since(&before);
        // The minimum was reached in the window (exact); the maximum was not the histogram's
        // (60 ms was), so it is its bucket's middle.
        assert_eq!((w.count, w.min_us), (1001, Some(1_000)));
        let max = w.max_us.unwrap();
        assert!(max.abs_diff(2_000) <= 2_000 / 64 + 1, "{max}");
        assert_eq!(w.mean_us(), Some(1_500));
        // The warm-up's 60 ms is not the window's p99 (the whole histogram's would be 50 ms).
        let p99 = w.quantile_us(0.99).unwrap();
        assert!((1_950..=2_000).contains(&p99), "{p99}");
        assert!(l.quantile_us(0.999).unwrap() >= 49_000);
        // A new maximum in the window is exact; none at all is none.
        l.record(70_000);
        assert_eq!(l.since(&before).max_us, Some(70_000));
        assert_eq!(l.since(&l).quantile_us(0.5), None);
    }
}
