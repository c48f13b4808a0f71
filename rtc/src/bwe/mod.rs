//! Send-side bandwidth estimation for one viewer transport, in the GCC family
//! (draft-ietf-rmcat-gcc-02; libwebrtc's `goog_cc`), sans-IO.
//!
//! The media node stamps every packet it sends to a viewer with a
//! transport-wide sequence number and reports it through
//! [`BandwidthEstimator::on_sent`]; the viewer's transport-wide CC feedback
//! (arrival time per sequence number, decoded elsewhere) comes back through
//! [`BandwidthEstimator::handle_feedback`]. From these:
//!
//! - **delay-based** detection groups packets sent within 5 ms, fits a
//!   trendline to the smoothed queueing delay between groups, and compares
//!   it with an adaptive threshold (`delay.rs`); an AIMD rate control turns
//!   overuse / normal / underuse into an estimate (`rate.rs`): decrease to
//!   0.85 × the acknowledged bitrate, hold while queues drain, increase
//!   8 %/s far from the last known capacity and additively near it;
//! - **loss-based** control caps the estimate when more than 10 % is lost
//!   and lifts the cap under 2 % (`loss.rs`);
//! - **probing** (`probe.rs`): before the allocator switches a viewer up it
//!   asks [`BandwidthEstimator::request_probe`]; short padding clusters at
//!   1.25–2× the estimate, measured by their receive rate, raise the
//!   estimate at once when the path carries them;
//! - viewers without transport-wide CC drive the estimate with REMB
//!   ([`BandwidthEstimator::handle_remb`]) and RTCP receiver-report loss.
//!
//! The estimate is the minimum of the delay-based one (and REMB, when a
//! viewer sends both) and the loss-based cap, clamped to the configured
//! range. Everything is bounded (history by count and age, per-cluster
//! feedback by count), never panics on odd input (reordered or unknown
//! sequence numbers, huge gaps, receiver clocks that jump), reads no clock
//! and draws no randomness: times are `Instant`s passed in.
//!
//! A drive loop, per viewer:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ferry_rtc::bwe::{BandwidthEstimator, BweConfig, PacketFeedback, SentPacket};
//!
//! let mut bwe = BandwidthEstimator::new(BweConfig::default());
//! let t0 = Instant::now();
//! let mut seq = 0u64;
//! // Every packet to the viewer: the next transport-wide sequence number.
//! for i in 0..20u64 {
//!     bwe.on_sent(t0 + Duration::from_millis(i * 10), SentPacket { seq, size: 1200, probe: None });
//!     seq += 1;
//! }
//! // A TWCC feedback message, decoded: arrivals in the viewer's clock (any base).
//! let report: Vec<PacketFeedback> = (0..20)
//!     .map(|s| PacketFeedback { seq: s, arrival_us: Some(9_000_000 + s as i64 * 10_000) })
//!     .collect();
//! let now = t0 + Duration::from_millis(250);
//! bwe.handle_feedback(now, &report);
//!
//! // The allocator would like 1 Mbit/s: probe before switching up.
//! let _started = bwe.request_probe(now, 1_000_000);
//! // On every wake-up (at `poll_timeout()` at the latest):
//! bwe.handle_timeout(now);
//! while let Some(probe) = bwe.poll_probe(now) {
//!     // Send `probe.bytes` of padding (in packets of any size), each reported:
//!     bwe.on_sent(now, SentPacket { seq, size: probe.bytes, probe: Some(probe.cluster) });
//!     seq += 1;
//! }
//! let _next_wake_up = bwe.poll_timeout();
//! assert!(bwe.estimate_bps() >= BweConfig::default().min_bps);
//! ```

mod acked;
mod delay;
mod history;
mod loss;
mod probe;
mod rate;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use ferry_proto::state::bwe::BweState;

use crate::time::{age_ms, from_age_ms};
use acked::AckedBitrate;
use delay::{DelayDetector, Usage};
use history::{Fate, SentHistory, SentRecord};
use loss::LossController;
use probe::{ProbeLimits, Prober};
use rate::{AimdRateControl, LinkCapacity, RateState};

pub use probe::{ProbeOutcome, ProbeSend};

/// Round-trip time assumed until one is measured (libwebrtc's default).
const DEFAULT_RTT: Duration = Duration::from_millis(200);
/// Longest round-trip time believed.
const MAX_RTT: Duration = Duration::from_secs(10);
/// No feedback for this long (or 4 RTTs) while sending: the link is
/// probably down, cut the estimate rather than keep pouring.
const FEEDBACK_TIMEOUT: Duration = Duration::from_secs(1);
/// What each feedback timeout leaves of the estimate.
const FEEDBACK_TIMEOUT_FACTOR: f64 = 0.8;
/// Configured durations are capped here (no overflow on `Instant` sums).
const MAX_CONFIG_DURATION: Duration = Duration::from_secs(3600);
/// After the sender stepped up, how long a decrease on overuse is measured on the recent
/// receive rate alone (the Bayesian acknowledged rate follows the step within a second or so,
/// `AckedBitrate::expect_fast_rate_change`, the switch's keyframe comes up to an RTT later).
const STEP_UP_WINDOW: Duration = Duration::from_secs(2);

/// Estimator settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BweConfig {
    /// Estimate before anything is known (bps).
    pub initial_bps: u64,
    /// The estimate never goes below this (bps).
    pub min_bps: u64,
    /// …nor above this (bps); probes neither.
    pub max_bps: u64,
    /// A probe cluster's rate (media and padding together) never exceeds this (bps).
    pub probe_max_bps: u64,
    /// …nor this multiple of the estimate.
    pub probe_max_factor: f64,
    /// Length of one probe cluster.
    pub probe_duration: Duration,
    /// Least time between the end of a successful probe and the next.
    pub probe_min_interval: Duration,
    /// Wait after a failed probe; doubles with each failure in a row…
    pub probe_backoff: Duration,
    /// …up to this: also how long a viewer whose link was freed may wait
    /// for the probe that finds out.
    pub probe_backoff_max: Duration,
}

impl Default for BweConfig {
    fn default() -> Self {
        Self {
            initial_bps: 300_000,
            min_bps: 30_000,
            max_bps: 20_000_000,
            probe_max_bps: 10_000_000,
            probe_max_factor: 2.0,
            probe_duration: Duration::from_millis(20),
            probe_min_interval: Duration::from_secs(1),
            probe_backoff: Duration::from_secs(2),
            probe_backoff_max: Duration::from_secs(3),
        }
    }
}

/// A packet sent to the viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentPacket {
    /// Transport-wide sequence number, already extended to 64 bits.
    pub seq: u64,
    /// Bytes on the wire.
    pub size: usize,
    /// Probe cluster of a padding packet sent for [`ProbeSend`].
    pub probe: Option<u32>,
}

/// One packet's entry in a transport-wide feedback message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketFeedback {
    /// Transport-wide sequence number, extended to 64 bits.
    pub seq: u64,
    /// Arrival time in µs in the receiver's clock (any base: only
    /// differences count); `None` when reported lost.
    pub arrival_us: Option<i64>,
}

/// What limits the estimate, for metrics and the allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Congestion {
    /// Delay stable, no loss limit.
    Normal,
    /// Queueing delay grows: the estimate is coming down.
    Overusing,
    /// Queues drain: the estimate holds.
    Underusing,
    /// Loss (or missing feedback) caps the estimate below the delay-based one.
    LossLimited,
}

/// A packet acknowledged by one feedback message.
#[derive(Debug, Clone, Copy)]
struct Acked {
    seq: u64,
    sent: Instant,
    arrival: i64,
    size: usize,
    probe: Option<u32>,
}

/// One viewer's bandwidth estimator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct BandwidthEstimator {
    cfg: BweConfig,
    history: SentHistory,
    delay: DelayDetector,
    rate: AimdRateControl,
    loss: LossController,
    acked: AckedBitrate,
    prober: Prober,
    rtt: Option<Duration>,
    remb: Option<u64>,
    twcc: bool,
    feedback_deadline: Option<Instant>,
    feedback_lost: bool,
    estimate: u64,
    congestion: Congestion,
    scratch: Vec<Acked>,
    /// Until then, overuse does not decrease the estimate (a switch up's keyframe burst).
    burst_until: Option<Instant>,
    /// The sender's rate stepped up at this time ([`Self::expect_burst`]): the first packet
    /// sent since that is acknowledged tells the acknowledged rate to follow quickly (earlier
    /// ones still show the old rate and would use the licence up).
    fast_change_from: Option<Instant>,
    /// When the sender last stepped up ([`Self::expect_burst`]): for [`STEP_UP_WINDOW`] after,
    /// a decrease is measured on the recent receive rate alone.
    stepped_up_at: Option<Instant>,
    /// The path has said where its limit lies: an overuse (or a probe ran). Until then the
    /// estimate is at least what the receiver acknowledged.
    settled: bool,
}

impl BandwidthEstimator {
    /// A fresh estimator at `cfg.initial_bps`.
    pub fn new(cfg: BweConfig) -> Self {
        let min = cfg.min_bps;
        let max = cfg.max_bps.max(min);
        let mut bwe = Self {
            rate: AimdRateControl::new(cfg.initial_bps, min, max),
            cfg,
            history: SentHistory::default(),
            delay: DelayDetector::default(),
            loss: LossController::default(),
            acked: AckedBitrate::default(),
            prober: Prober::default(),
            rtt: None,
            remb: None,
            twcc: false,
            feedback_deadline: None,
            feedback_lost: false,
            estimate: 0,
            congestion: Congestion::Normal,
            scratch: Vec::new(),
            burst_until: None,
            fast_change_from: None,
            stepped_up_at: None,
            settled: false,
        };
        bwe.refresh();
        bwe
    }

    /// The sender is about to send a burst above the estimate it was given on purpose (the
    /// allocator switched a viewer up a layer a probe showed room for, and the new layer
    /// starts with a keyframe): the queue that burst builds is not taken as congestion for an
    /// RTT plus `hold`. The decrease is measured against the acknowledged rate, which still
    /// shows the old layer: without this, every switch up would undo itself. Overuse that
    /// lasts decreases once the hold is over, against an acknowledged rate told to follow
    /// the step quickly from the first packet sent after it
    /// ([`AckedBitrate::expect_fast_rate_change`]).
    pub fn expect_burst(&mut self, now: Instant, hold: Duration) {
        let until = now.checked_add(self.rtt_or_default() + hold.min(MAX_CONFIG_DURATION));
        self.burst_until = until.max(self.burst_until);
        self.fast_change_from = Some(now);
        self.stepped_up_at = Some(now);
    }

    fn limits(&self) -> ProbeLimits {
        let cap = |d: Duration| d.min(MAX_CONFIG_DURATION);
        ProbeLimits {
            max_bps: self.cfg.probe_max_bps.min(self.cfg.max_bps),
            max_factor: if self.cfg.probe_max_factor.is_finite() {
                self.cfg.probe_max_factor.max(0.0)
            } else {
                2.0
            },
            duration: cap(self.cfg.probe_duration),
            min_interval: cap(self.cfg.probe_min_interval),
            backoff: cap(self.cfg.probe_backoff),
            backoff_max: cap(self.cfg.probe_backoff_max),
        }
    }

    fn rtt_or_default(&self) -> Duration {
        self.rtt.unwrap_or(DEFAULT_RTT)
    }

    /// A packet left for the viewer at `now`.
    pub fn on_sent(&mut self, now: Instant, p: SentPacket) {
        let probe = self.prober.on_sent(now, p.size, p.probe);
        self.history.insert(
            p.seq,
            SentRecord {
                sent: now,
                size: p.size,
                probe,
                fate: Fate::Pending,
            },
        );
        if self.twcc && self.feedback_deadline.is_none() {
            let timeout = FEEDBACK_TIMEOUT.max(self.rtt_or_default() * 4);
            self.feedback_deadline = now.checked_add(timeout);
        }
    }

    /// One transport-wide feedback message. Sequence numbers may repeat
    /// across messages (a lost packet later reported received counts as
    /// received; a received one stays received), come in any order, or be
    /// unknown (ignored).
    pub fn handle_feedback(&mut self, now: Instant, packets: &[PacketFeedback]) {
        self.twcc = true;
        self.feedback_deadline = None;
        self.feedback_lost = false;
        let mut acked = std::mem::take(&mut self.scratch);
        acked.clear();
        let (mut received, mut lost) = (0u64, 0u64);
        for p in packets {
            let Some(rec) = self.history.report(p.seq, p.arrival_us.is_some()) else {
                continue;
            };
            match (p.arrival_us, rec.fate) {
                // Loss is counted on media only: a probe's padding dropped by a full queue says
                // the probe rate does not fit (the probe fails), not that the media rate does
                // not.
                (Some(arrival), Fate::Pending | Fate::Lost) => {
                    if rec.probe.is_none() {
                        if rec.fate == Fate::Lost {
                            self.loss.recovered();
                        } else {
                            received += 1;
                        }
                    }
                    acked.push(Acked {
                        seq: p.seq,
                        sent: rec.sent,
                        arrival,
                        size: rec.size,
                        probe: rec.probe,
                    });
                }
                (None, Fate::Pending) if rec.probe.is_none() => lost += 1,
                _ => {}
            }
        }
        self.history.after_feedback();
        self.loss.count(now, received, lost);
        acked.sort_unstable_by_key(|a| (a.arrival, a.seq));
        for a in &acked {
            if self.fast_change_from.is_some_and(|t| a.sent >= t) {
                self.acked.expect_fast_rate_change();
                self.fast_change_from = None;
            }
            self.acked.on_packet(a.arrival, a.size);
            if let Some(cluster) = a.probe {
                self.prober.on_acked(cluster, a.sent, a.arrival, a.size);
            }
            self.delay.on_packet(a.sent, a.arrival, now);
        }
        let acked_any = !acked.is_empty();
        self.update_delay_based(now, acked_any);
        self.scratch = acked;
        if let Some(fraction) = self.loss.take_sample(now) {
            let uncapped = self.uncapped();
            let rtt = self.rtt_or_default();
            let acked = self.acked.bitrate_bps();
            self.loss
                .update(now, fraction, self.estimate, uncapped, acked, rtt);
        }
        if acked_any {
            self.floor_at_acked(now);
        }
        self.refresh();
    }

    /// After a feedback message: the probe verdict (a cluster's packets may
    /// all have been reported by earlier messages), then the rate control,
    /// which only moves on news (`acked_any`).
    fn update_delay_based(&mut self, now: Instant, acked_any: bool) {
        let usage = self.delay.usage();
        if usage == Usage::Overusing {
            self.settled = true;
        }
        // On overuse the decrease is measured on the last 250 ms of arrivals where they are
        // lower (what the link carries now: the Bayesian estimate trails a capacity that just
        // fell for several windows), and on them alone for a while after the sender stepped up
        // (the Bayesian estimate still shows the rate before the step, and β × that would drop
        // the estimate to a fraction of the link). Not always on them alone: right after a
        // capacity drop those 250 ms still hold arrivals from before it.
        let mut acked = self.acked.bitrate_bps();
        if usage == Usage::Overusing
            && let Some(r) = self.acked.recent_bps()
        {
            let stepped = self
                .stepped_up_at
                .is_some_and(|t| now.saturating_duration_since(t) < STEP_UP_WINDOW);
            acked = Some(match acked {
                Some(a) if !stepped => a.min(r),
                _ => r,
            });
        }
        let limits = self.limits();
        let raise =
            self.prober
                .after_feedback(now, self.estimate, usage == Usage::Overusing, &limits);
        if let Some(ceiling) = self.prober.take_ceiling() {
            self.rate.saturated_at(now, ceiling);
        }
        if !acked_any {
            if let Some(r) = raise.filter(|r| *r > self.estimate) {
                self.raise_to(now, r);
            }
            return;
        }
        if usage == Usage::Overusing {
            if self.burst_until.is_some_and(|t| now < t) {
                return;
            }
            if self.prober.guards(now, self.rtt_or_default()) {
                // The probe's own queue (the probe was failed above); see
                // `Prober::guards`. Overuse that persists decreases after.
                return;
            }
            match acked {
                Some(a) => {
                    if self.rate.time_to_reduce_further(now, a) {
                        self.rate.update(now, usage, Some(a));
                    }
                }
                // Nothing acknowledged long enough to measure: halve, once per RTT.
                None => {
                    if self.rate.time_to_reduce_further(now, u64::MAX) {
                        self.rate.scale(now, 0.5);
                    }
                }
            }
        } else if let Some(r) = raise.filter(|r| *r > self.estimate) {
            self.raise_to(now, r);
        } else {
            self.rate.update(now, usage, acked);
        }
    }

    /// Before the path said where its limit lies (an overuse, a probe), the estimate is at
    /// least what the receiver acknowledged (libwebrtc's rate control takes the measured
    /// throughput as its estimate once it has one, `AimdRateControl::bitrate_is_initialized_`).
    /// A low start under a stream that cannot go lower (a single stream, a lowest layer above
    /// the start) would otherwise take seconds of 8 %/s increases to reach what already
    /// flows — and on a path with random loss the loss cap would hold it at the start for
    /// good — with everything held to the estimate (retransmissions) starved meanwhile. What
    /// arrived is at most what the path carries: where a shaper drops the excess without a
    /// queue, the acknowledged rate is the shaper's. Not once a probe ran (its padding counts
    /// in the acknowledged rate).
    fn floor_at_acked(&mut self, now: Instant) {
        // (An overuse settles the estimate before this runs, `update_delay_based`.)
        if self.settled || self.has_probed() {
            return;
        }
        let Some(a) = self.acked.bitrate_bps() else {
            return;
        };
        if a > self.rate.estimate() {
            self.rate.set_estimate(now, a);
        }
        self.loss.lift_to(a);
    }

    /// A probe showed the path carries `bps`, above the estimate: the delay-based part rises to
    /// it (where it is lower) and the loss cap with it (a cap that waited for a probe).
    fn raise_to(&mut self, now: Instant, bps: u64) {
        if bps > self.rate.estimate() {
            self.rate.set_estimate(now, bps);
        }
        self.loss.lift_to(bps);
    }

    /// The estimate before the loss cap.
    fn uncapped(&self) -> u64 {
        let delay = self.rate.estimate();
        match (self.twcc, self.remb) {
            (true, Some(remb)) => delay.min(remb),
            (true, None) => delay,
            (false, remb) => remb.unwrap_or(delay),
        }
    }

    fn refresh(&mut self) {
        let uncapped = self.uncapped();
        let cap = self.loss.cap();
        let max = self.cfg.max_bps.max(self.cfg.min_bps);
        self.estimate = cap
            .map_or(uncapped, |c| c.min(uncapped))
            .clamp(self.cfg.min_bps, max);
        let usage = if self.twcc {
            self.delay.usage()
        } else {
            Usage::Normal
        };
        self.congestion = if self.feedback_lost {
            Congestion::LossLimited
        } else if usage == Usage::Overusing {
            Congestion::Overusing
        } else if cap.is_some_and(|c| c < uncapped) {
            Congestion::LossLimited
        } else if usage == Usage::Underusing {
            Congestion::Underusing
        } else {
            Congestion::Normal
        };
    }

    /// A REMB from the viewer: for a viewer without transport-wide CC it is
    /// the estimate (before the loss cap); with it, an upper limit.
    pub fn handle_remb(&mut self, now: Instant, bps: u64) {
        self.remb = Some(bps);
        if !self.twcc {
            // Keeps the delay-based part where REMB is, should feedback start.
            self.rate.set_estimate(now, bps);
        }
        self.refresh();
    }

    /// The loss fraction (1/256) of an RTCP receiver report. Used for
    /// viewers without transport-wide CC; with it, the feedback already
    /// says what was lost, and counting both would count losses twice.
    pub fn handle_loss_report(&mut self, now: Instant, fraction_lost: u8) {
        if self.twcc {
            return;
        }
        let uncapped = self.uncapped();
        let rtt = self.rtt_or_default();
        self.loss
            .update(now, fraction_lost, self.estimate, uncapped, None, rtt);
        self.refresh();
    }

    /// A round-trip time measurement (RTCP); smoothed with weight 1/8.
    pub fn handle_rtt(&mut self, _now: Instant, rtt: Duration) {
        let rtt = rtt.min(MAX_RTT);
        let smoothed = match self.rtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        };
        self.rtt = Some(smoothed);
        self.rate.set_rtt(smoothed);
    }

    /// What the allocator may spend on this viewer (bps).
    pub fn estimate_bps(&self) -> u64 {
        self.estimate
    }

    /// What currently limits the estimate.
    pub fn congestion(&self) -> Congestion {
        self.congestion
    }

    /// The rate the viewer's feedback acknowledged, once measured (bps).
    pub fn acked_bps(&self) -> Option<u64> {
        self.acked.bitrate_bps()
    }

    /// The smoothed round-trip time, once measured.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    /// The last loss fraction measured (1/256).
    pub fn fraction_lost(&self) -> u8 {
        self.loss.fraction()
    }

    /// The allocator wants to know whether `target_bps` is reachable before
    /// it switches up. True when a probe towards it runs (started now or
    /// already running); false when refused: the target is within the
    /// estimate, the viewer has no transport-wide CC, the path is congested,
    /// or a recent probe (or failure's back-off) says wait. Results come
    /// through [`Self::estimate_bps`] and [`Self::take_probe_outcome`].
    pub fn request_probe(&mut self, now: Instant, target_bps: u64) -> bool {
        if !self.twcc && self.remb.is_some() {
            return false;
        }
        // Not into a queue or into loss. A loss cap on a clean path (it grows only as far as
        // the acknowledged rate vouches) is what a probe is for.
        let congested = match self.congestion {
            Congestion::Overusing => true,
            Congestion::LossLimited => self.feedback_lost || self.loss.lossy(),
            _ => false,
        };
        if !self.prober.active() && congested {
            return false;
        }
        let target = target_bps.min(self.cfg.max_bps);
        let limits = self.limits();
        self.prober.request(now, target, self.estimate, &limits)
    }

    /// Padding to send now for the running probe cluster, if any: call
    /// until `None`, at [`Self::poll_timeout`] at the latest.
    pub fn poll_probe(&mut self, now: Instant) -> Option<ProbeSend> {
        let rtt = self.rtt_or_default();
        self.prober.poll_send(now, rtt)
    }

    /// Whether this estimator (or the one its snapshot came from) ever probed.
    pub fn has_probed(&self) -> bool {
        self.prober.next_id() > 1
    }

    /// Whether a probe session runs.
    pub fn is_probing(&self) -> bool {
        self.prober.active()
    }

    /// How the last probe session ended, once (taken).
    pub fn take_probe_outcome(&mut self) -> Option<ProbeOutcome> {
        self.prober.take_outcome()
    }

    /// When [`Self::handle_timeout`] (and [`Self::poll_probe`]) should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.prober.poll_timeout(), self.feedback_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Timers: a probe cluster's end, a probe result that did not come, and
    /// feedback that stopped coming (the estimate falls by a fifth each time).
    pub fn handle_timeout(&mut self, now: Instant) {
        let rtt = self.rtt_or_default();
        let limits = self.limits();
        self.prober.handle_timeout(now, rtt, &limits);
        if self.feedback_deadline.is_some_and(|d| now >= d) {
            self.feedback_deadline = None;
            self.feedback_lost = true;
            let cut = (self.estimate as f64 * FEEDBACK_TIMEOUT_FACTOR) as u64;
            self.loss.clamp_to(now, cut);
            self.refresh();
        }
    }

    /// The state to carry to another node (ages relative to `now`).
    pub fn snapshot(&self, now: Instant) -> BweState {
        let (acked_kbps, acked_var) = self.acked.state();
        BweState {
            estimate_bps: self.estimate,
            delay_bps: self.rate.estimate(),
            rate_state: self.rate.state().to_u32(),
            link_capacity_kbps: self.rate.capacity.estimate_kbps,
            link_capacity_deviation: self.rate.capacity.deviation,
            rate_change_age_ms: self.rate.last_change().map(|t| age_ms(now, t)),
            loss_cap_bps: self.loss.cap(),
            fraction_lost: u32::from(self.loss.fraction()),
            loss_decrease_age_ms: self.loss.last_decrease().map(|t| age_ms(now, t)),
            acked_kbps,
            acked_var,
            threshold: self.delay.trend.threshold(),
            hypothesis: self.delay.usage().to_u32(),
            rtt_us: self.rtt.map_or(0, |r| r.as_micros() as u64),
            remb_bps: self.remb,
            twcc: self.twcc,
            probe_failures: self.prober.failures(),
            probe_wait_ms: self
                .prober
                .next_allowed()
                .map_or(0, |t| t.saturating_duration_since(now).as_millis() as u64),
            next_probe_id: self.prober.next_id(),
            acked_floor: !self.settled,
        }
    }

    /// An estimator that continues from a snapshot: same estimate, rate
    /// control state, link capacity, loss cap and detector threshold, so a
    /// migrated viewer does not start over at `initial_bps`. Packets the
    /// old node sent are unknown here; their feedback is ignored.
    pub fn restore(s: &BweState, cfg: BweConfig, now: Instant) -> Self {
        let mut bwe = Self::new(cfg);
        let capacity = LinkCapacity {
            estimate_kbps: s.link_capacity_kbps.filter(|k| k.is_finite() && *k > 0.0),
            deviation: if s.link_capacity_deviation.is_finite() {
                s.link_capacity_deviation.clamp(0.4, 2.5)
            } else {
                0.4
            },
        };
        bwe.rate = AimdRateControl::restored(
            bwe.rate,
            s.delay_bps,
            RateState::from_u32(s.rate_state),
            capacity,
            s.rate_change_age_ms.map(|a| from_age_ms(now, a)),
        );
        bwe.loss = LossController::restored(
            s.loss_cap_bps,
            s.fraction_lost.min(255) as u8,
            s.loss_decrease_age_ms.map(|a| from_age_ms(now, a)),
            now,
        );
        bwe.acked = AckedBitrate::restored(s.acked_kbps, s.acked_var);
        bwe.delay = DelayDetector::restored(s.threshold, Usage::from_u32(s.hypothesis));
        bwe.rtt = (s.rtt_us > 0).then(|| Duration::from_micros(s.rtt_us).min(MAX_RTT));
        if let Some(rtt) = bwe.rtt {
            bwe.rate.set_rtt(rtt);
        }
        bwe.remb = s.remb_bps;
        bwe.twcc = s.twcc;
        bwe.settled = !s.acked_floor;
        let wait = Duration::from_millis(s.probe_wait_ms).min(MAX_CONFIG_DURATION);
        bwe.prober = Prober::restored(
            s.next_probe_id,
            s.probe_failures,
            (s.probe_wait_ms > 0).then(|| now.checked_add(wait).unwrap_or(now)),
        );
        bwe.refresh();
        bwe
    }
}
