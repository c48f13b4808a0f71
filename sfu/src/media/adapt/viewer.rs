//! One viewer's adaptation state: the transport-wide sequence numbers it is sent, its
//! bandwidth estimator (fed by its transport-wide CC feedback, or its REMB), what the allocator
//! gave it, and what it costs in probes. All of it moves with the viewer in a migration: the
//! estimate, the rate control and the probing back-off continue on the new node (no slow start,
//! no up-probe burst after the cutover).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ferry_proto::state::ViewerAdaptState;

use super::allocator::{Allocation, Budget};
use super::prefs::Preferences;
use super::resend::ResendBudget;
use crate::bwe::{BandwidthEstimator, BweConfig, Congestion, PacketFeedback, SentPacket};
use crate::twcc::{REFERENCE_WRAP_US, TwccFeedback};

/// How long after a switch up (plus an RTT) its keyframe burst is not taken as congestion.
pub const SWITCH_BURST_HOLD: Duration = Duration::from_millis(500);

/// How many (time, estimate, allocated) points a viewer keeps for its plot.
pub const HISTORY_LEN: usize = 120;
/// How often a point is added.
pub const HISTORY_EVERY: Duration = Duration::from_millis(500);

/// Estimator settings for viewers: start at 300 kbit/s (a low layer and audio fit a link of a
/// few hundred kbit/s; a 1 Mbit/s start gave such links the middle layer for their first
/// second: 4.6–6.0 % of `ferry bench adaptive`'s steady phase lost), let the first probe ask
/// for the whole ladder (`Allocation::top_bps`), and until the path says where it ends, take
/// what the viewer acknowledges as the estimate at least (a stream that cannot go lower). The
/// default probe clusters (20 ms, but at
/// least 10 kB, judged on their second half too) see through a shaper's burst allowance. In
/// `ferry_rtc::bwe::sim`'s token-bucket scenario (`tbf rate 400kbit burst 4000`, seeds 1–3,
/// a 1 Mbit/s start) the 150 ms clusters used before left a p95 queue of 95–103 ms and 0.13 %
/// loss, the default ones 39–46 ms and none.
pub fn viewer_bwe_config() -> BweConfig {
    BweConfig {
        initial_bps: 300_000,
        ..BweConfig::default()
    }
}

/// One point of a viewer's adaptation history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPoint {
    /// When.
    pub at: Instant,
    /// The estimate (bit/s).
    pub estimate_bps: u64,
    /// What was allocated (bit/s).
    pub allocated_bps: u64,
}

/// The adaptation state of a viewer session.
#[derive(Debug, Clone)]
pub struct ViewerAdapt {
    /// The transport-wide sequence number extension's id, when the viewer negotiated it.
    pub twcc_ext: Option<u8>,
    /// The next transport-wide sequence number (64-bit; the wire carries its low 16 bits).
    next_seq: u64,
    /// The estimator, when the viewer says anything of its link (transport-wide CC or REMB).
    bwe: Option<BandwidthEstimator>,
    /// The last feedback's reference time, as sent and unwrapped.
    reference: Option<(i64, i64)>,
    /// The estimate the last allocation was made with.
    pub allocated_at_bps: u64,
    /// What the last allocation gave it.
    pub allocated_bps: u64,
    /// What a step up would take, if one is wanted.
    pub wanted_bps: Option<u64>,
    /// Padding packets sent to probe.
    pub probe_packets: u64,
    /// Bytes of those.
    pub probe_bytes: u64,
    /// Feedback messages received.
    pub feedbacks: u64,
    /// Recent (time, estimate, allocated), for the session view and the demo page's plot.
    pub history: VecDeque<HistoryPoint>,
    /// What the viewer asked for.
    pub prefs: Preferences,
    /// What its NACKs may cost.
    pub resend: ResendBudget,
    /// Smoothed round-trip time from its receiver reports. Not migrated: measured afresh.
    rtt: Option<Duration>,
    /// The last feedback message's packets, kept for the next one (no allocation per message).
    feedback: Vec<PacketFeedback>,
}

impl Default for ViewerAdapt {
    fn default() -> Self {
        Self::new(None, false)
    }
}

impl ViewerAdapt {
    /// Adaptation for a viewer that negotiated transport-wide CC with extension id `twcc_ext`,
    /// or REMB (`remb`), or neither (no estimate: it gets everything).
    pub fn new(twcc_ext: Option<u8>, remb: bool) -> Self {
        Self {
            twcc_ext,
            next_seq: 0,
            bwe: (twcc_ext.is_some() || remb).then(|| BandwidthEstimator::new(viewer_bwe_config())),
            reference: None,
            allocated_at_bps: 0,
            allocated_bps: 0,
            wanted_bps: None,
            probe_packets: 0,
            probe_bytes: 0,
            feedbacks: 0,
            history: VecDeque::new(),
            prefs: Preferences::default(),
            resend: ResendBudget::default(),
            rtt: None,
            feedback: Vec::new(),
        }
    }

    /// The transport-wide sequence number for a packet of `size` bytes about to be sent at
    /// `now` (`probe`: the probe cluster of a padding packet), recorded for the estimator.
    pub fn stamp(&mut self, now: Instant, size: usize, probe: Option<u32>) -> u16 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(bwe) = self.bwe.as_mut() {
            bwe.on_sent(now, SentPacket { seq, size, probe });
        }
        seq as u16
    }

    /// What the viewer may be sent; `None` when it says nothing of its link.
    pub fn estimate_bps(&self) -> Option<u64> {
        self.bwe.as_ref().map(BandwidthEstimator::estimate_bps)
    }

    /// What the allocator shares out: the estimate (the viewer's own cap on the rate where
    /// there is none yet) within that cap; `None` without either.
    pub fn budget(&self) -> Option<Budget> {
        let limit_bps = self.prefs.max_bitrate;
        Some(Budget {
            estimate_bps: self.estimate_bps().or(limit_bps)?,
            limit_bps,
        })
    }

    /// The acknowledged bitrate and the loss fraction (0–1) its feedback reports.
    pub fn acked_and_loss(&self) -> (Option<u64>, Option<f64>) {
        match self.bwe.as_ref() {
            Some(b) => (b.acked_bps(), Some(f64::from(b.fraction_lost()) / 256.0)),
            None => (None, None),
        }
    }

    /// What limits the estimate.
    pub fn congestion(&self) -> Option<Congestion> {
        self.bwe.as_ref().map(BandwidthEstimator::congestion)
    }

    /// A transport-wide CC feedback message from the viewer (its FCI).
    pub fn handle_twcc(&mut self, now: Instant, fci: &[u8]) -> Result<(), crate::twcc::TwccError> {
        let fb = TwccFeedback::parse(fci)?;
        let Some(bwe) = self.bwe.as_mut() else {
            return Ok(());
        };
        self.feedbacks += 1;
        // The reference time wraps (24 bits of 64 ms): keep it continuous across feedbacks,
        // since the estimator compares arrivals of different messages.
        let raw = fb.reference_time_us;
        let offset = match self.reference {
            Some((last_raw, offset)) => {
                let d = raw - last_raw;
                if d < -REFERENCE_WRAP_US / 2 {
                    offset + REFERENCE_WRAP_US
                } else if d > REFERENCE_WRAP_US / 2 {
                    offset - REFERENCE_WRAP_US
                } else {
                    offset
                }
            }
            None => 0,
        };
        self.reference = Some((raw, offset));
        // Sequence numbers extend against the highest sent: feedback is about the past.
        let highest = self.next_seq.saturating_sub(1);
        self.feedback.clear();
        self.feedback
            .extend(fb.packets().map(|(seq, arrival)| PacketFeedback {
                seq: extend_back(highest, seq),
                arrival_us: arrival.map(|a| a + offset),
            }));
        bwe.handle_feedback(now, &self.feedback);
        Ok(())
    }

    /// A round-trip time measured from the viewer's receiver report (shown in its session
    /// view). Not given to the estimator, which keeps its default: with the measured RTT its
    /// switch-up burst hold (an RTT + 500 ms) and its rate control's response time shrank, and
    /// `ferry bench adaptive` seed 1 climbed in 16.4 s (p50) instead of 3.1 s, flapping 3.1
    /// instead of 1.0 times a minute.
    pub fn handle_rtt(&mut self, _now: Instant, rtt: Duration) {
        self.rtt = Some(match self.rtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
    }

    /// The viewer's smoothed round-trip time, once its reports gave one.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    /// A REMB from the viewer.
    pub fn handle_remb(&mut self, now: Instant, bps: u64) {
        let bwe = self
            .bwe
            .get_or_insert_with(|| BandwidthEstimator::new(viewer_bwe_config()));
        bwe.handle_remb(now, bps);
    }

    /// The loss fraction of a receiver report of the viewer.
    pub fn handle_loss_report(&mut self, now: Instant, fraction_lost: u8) {
        if let Some(bwe) = self.bwe.as_mut() {
            bwe.handle_loss_report(now, fraction_lost);
        }
    }

    /// A layer switch up was decided: its keyframe burst is expected (see
    /// [`BandwidthEstimator::expect_burst`]).
    pub fn expect_burst(&mut self, now: Instant) {
        if let Some(bwe) = self.bwe.as_mut() {
            bwe.expect_burst(now, SWITCH_BURST_HOLD);
        }
    }

    /// Whether its estimator ever probed (here or on a node it came from). A viewer without
    /// an estimator needs no probe.
    pub fn has_probed(&self) -> bool {
        self.bwe.as_ref().is_none_or(BandwidthEstimator::has_probed)
    }

    /// Asks the estimator to find out whether `target_bps` is reachable (a probe).
    pub fn request_probe(&mut self, now: Instant, target_bps: u64) -> bool {
        match (self.bwe.as_mut(), self.twcc_ext) {
            (Some(bwe), Some(_)) => bwe.request_probe(now, target_bps),
            _ => false,
        }
    }

    /// Padding to send now for a running probe: `(cluster, bytes)`.
    pub fn poll_probe(&mut self, now: Instant) -> Option<(u32, usize)> {
        let p = self.bwe.as_mut()?.poll_probe(now)?;
        Some((p.cluster, p.bytes))
    }

    /// When [`ViewerAdapt::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let bwe = self.bwe.as_ref().and_then(BandwidthEstimator::poll_timeout);
        let history = self.history.back().map(|p| p.at + HISTORY_EVERY);
        match (bwe, history) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The estimator's timers; adds a history point when one is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(bwe) = self.bwe.as_mut() else {
            return;
        };
        bwe.handle_timeout(now);
        if self
            .history
            .back()
            .is_none_or(|p| now >= p.at + HISTORY_EVERY)
        {
            if self.history.len() >= HISTORY_LEN {
                self.history.pop_front();
            }
            self.history.push_back(HistoryPoint {
                at: now,
                estimate_bps: bwe.estimate_bps(),
                allocated_bps: self.allocated_bps,
            });
        }
    }

    /// Notes what the allocator decided with `estimate_bps`.
    pub fn note_allocation(&mut self, estimate_bps: u64, a: &Allocation) {
        self.allocated_at_bps = estimate_bps;
        self.allocated_bps = a.allocated_bps;
        self.wanted_bps = a.wanted_bps;
    }

    /// Whether the estimate moved enough since the last allocation to allocate again: any
    /// change while it is below what is allocated, or a change of a tenth.
    pub fn needs_allocation(&self) -> bool {
        let Some(e) = self.estimate_bps() else {
            return false;
        };
        (e < self.allocated_bps && e != self.allocated_at_bps)
            || e.abs_diff(self.allocated_at_bps) * 10 > self.allocated_at_bps
    }

    /// Exports the state.
    pub fn snapshot(&self, now: Instant) -> ViewerAdaptState {
        ViewerAdaptState {
            next_seq: self.next_seq,
            bwe: self.bwe.as_ref().map(|b| b.snapshot(now)),
            allocated_bps: self.allocated_bps,
            probe_packets: self.probe_packets,
            probe_bytes: self.probe_bytes,
            max_height: self.prefs.max_height,
            max_width: self.prefs.max_width,
            max_fps: self.prefs.max_fps,
            max_bitrate: self.prefs.max_bitrate,
        }
    }

    /// Rebuilds the state (on another node) for a viewer that negotiated `twcc_ext`/`remb`.
    pub fn restore(s: &ViewerAdaptState, twcc_ext: Option<u8>, remb: bool, now: Instant) -> Self {
        let mut a = Self::new(twcc_ext, remb);
        // The viewer's feedback numbers the packets as they were numbered: go on from there.
        a.next_seq = s.next_seq;
        if let Some(b) = &s.bwe {
            a.bwe = Some(BandwidthEstimator::restore(b, viewer_bwe_config(), now));
        }
        a.allocated_bps = s.allocated_bps;
        a.allocated_at_bps = a.estimate_bps().unwrap_or(0);
        a.probe_packets = s.probe_packets;
        a.probe_bytes = s.probe_bytes;
        let prefs = Preferences {
            max_height: s.max_height,
            max_width: s.max_width,
            max_fps: s.max_fps,
            max_bitrate: s.max_bitrate,
        };
        // A snapshot's caps were checked where they were set; a bad one is dropped, not trusted.
        if prefs.validate().is_ok() {
            a.prefs = prefs;
        }
        a
    }
}

/// The 64-bit sequence number whose low 16 bits are `seq`, nearest `highest` (the last one
/// sent: feedback reports packets already sent).
fn extend_back(highest: u64, seq: u16) -> u64 {
    let cand = (highest & !0xFFFF) | u64::from(seq);
    if cand > highest && cand - highest > 0x8000 && cand >= 0x1_0000 {
        cand - 0x1_0000
    } else if cand < highest && highest - cand > 0x8000 {
        cand + 0x1_0000
    } else {
        cand
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_sequence_numbers_extend_against_what_was_sent() {
        assert_eq!(extend_back(100, 90), 90);
        assert_eq!(extend_back(0x1_0005, 0xFFF0), 0xFFF0, "before the wrap");
        assert_eq!(extend_back(0x1_0005, 3), 0x1_0003);
        assert_eq!(extend_back(0x2_FFFF, 0xFFFE), 0x2_FFFE);
        assert_eq!(extend_back(5, 0xFFFF), 0xFFFF, "nothing below 0");
    }
}
