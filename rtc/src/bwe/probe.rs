//! Probing: finding out whether a higher rate is reachable before the
//! allocator switches a viewer up (libwebrtc's `ProbeController`,
//! `BitrateProber` and `ProbeBitrateEstimator`; LiveKit's padding prober).
//!
//! An SFU forwards discrete layers, so while a viewer gets the 500 kbit/s
//! layer nothing shows whether 1.5 Mbit/s would fit, and switching up blind
//! risks a queue and a freeze. A probe sends a short *cluster* (≥ 5 packets
//! and ≥ 10 kB, over 20–250 ms) at 1.25–2× the estimate: media sent meanwhile
//! counts towards the cluster's rate, padding fills the rest. The receive
//! rate of the cluster's packets in the feedback says what the path carried:
//! a link that keeps up delivers them as fast as they were sent, a saturated
//! one spreads them out. A shaper's token bucket (`tc … tbf burst`, a
//! policer's allowance) passes its first few kB at line rate whatever the
//! link's rate, so a cluster is bigger than such a burst and the rate of its
//! second half counts too: a link that carried only the burst fast reads as
//! the rate it drains at. A success raises the estimate at once; a cluster that
//! got through but stayed below the target (capped at 2× the estimate) is
//! followed by a higher one; a failure backs off exponentially, so a viewer
//! on a link that cannot do more is not hammered with padding.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::time::signed_us;

/// A cluster has at least this many packets…
const MIN_PACKETS: u32 = 5;
/// …and bytes: more than a shaper's burst allowance lets through at line
/// rate (`tc … tbf` wants at least rate/HZ; 4–10 kB is usual at a few
/// hundred kbit/s), so part of the cluster meets the rate the link drains at…
const MIN_CLUSTER_BYTES: f64 = 10_000.0;
/// …within this much time, whatever the rate.
const MAX_CLUSTER_DURATION: Duration = Duration::from_millis(250);
/// Packets of a cluster's second half the feedback must report for its rate to count.
const MIN_TAIL_PACKETS: u32 = 3;
/// Probe somewhat above the target, so "reachable" is measured, not guessed.
const TARGET_MARGIN: f64 = 1.15;
/// Probing less than this far above the estimate teaches little.
const MIN_STEP: f64 = 1.25;
/// Padding handed out per send: about a tenth of the cluster, within these.
const MIN_SLOT_BYTES: f64 = 200.0;
const MAX_SLOT_BYTES: f64 = 1200.0;
const SLOTS_PER_CLUSTER: f64 = 10.0;
/// A cluster's result must come within this (plus an RTT) of its end.
const RESULT_WAIT: Duration = Duration::from_secs(1);
/// Clusters per session (e.g. 2×, 4×, 8×, 16× a low estimate).
const MAX_CLUSTERS: u32 = 4;
/// A cluster the link carried at this share of its rate was not saturated.
const CONTINUE_RATIO: f64 = 0.9;
/// Share of a cluster's packets and bytes the feedback must report.
const MIN_RECEIVED_RATIO: f64 = 0.8;
/// Send or receive spans beyond this are not a probe.
const MAX_SPAN_US: i64 = 1_000_000;
/// Received faster than twice the send rate: a measurement artefact.
const MAX_VALID_RATIO: f64 = 2.0;
/// Received below this share of the send rate: the link saturated…
const MIN_RATIO_UNSATURATED: f64 = 0.9;
/// …and the result is this share of the receive rate.
const SATURATED_UTILISATION: f64 = 0.95;
/// Clusters whose feedback is still collected.
const MAX_TRACKED: usize = 8;
/// Overuse this soon (plus an RTT) after a cluster is blamed on the probe.
const PROBE_GUARD: Duration = Duration::from_millis(250);

/// "Send `bytes` of padding now for cluster `cluster`." Split into packets
/// as the transport likes (RTP padding-only packets carry up to 255 bytes,
/// RTX re-sends of old packets more), each reported through
/// [`BandwidthEstimator::on_sent`](super::BandwidthEstimator::on_sent) with
/// `probe: Some(cluster)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSend {
    /// Probe cluster id.
    pub cluster: u32,
    /// Padding bytes to send now.
    pub bytes: usize,
}

/// How a probe session towards a requested target ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// The rate the allocator asked about.
    pub target_bps: u64,
    /// What the last cluster measured, if it measured anything.
    pub measured_bps: Option<u64>,
    /// The target is reachable.
    pub success: bool,
}

/// Probing limits (from [`BweConfig`](super::BweConfig)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbeLimits {
    pub max_bps: u64,
    pub max_factor: f64,
    pub duration: Duration,
    pub min_interval: Duration,
    pub backoff: Duration,
    pub backoff_max: Duration,
}

/// A cluster being sent.
#[derive(Debug, Clone)]
struct Cluster {
    id: u32,
    rate_bps: u64,
    start: Instant,
    interval: Duration,
    slot_bytes: usize,
    /// Sends planned over the cluster's duration.
    slots: u32,
    /// Next send slot not yet served.
    next_slot: u32,
    /// Padding handed out, and media sent meanwhile (for pacing).
    issued: usize,
    media: usize,
    /// Packets and bytes actually sent in the cluster.
    packets: u32,
    bytes: usize,
}

impl Cluster {
    fn slot_at(&self, now: Instant) -> u32 {
        let elapsed = now.saturating_duration_since(self.start).as_nanos();
        let interval = self.interval.as_nanos().max(1);
        u32::try_from(elapsed / interval).unwrap_or(u32::MAX)
    }

    fn finished(&self, slot: u32) -> bool {
        (slot >= self.slots && self.packets >= MIN_PACKETS)
            || slot >= self.slots.saturating_mul(3).saturating_add(MIN_PACKETS)
    }
}

#[derive(Debug, Clone)]
enum Phase {
    Idle,
    Sending(Cluster),
    Waiting {
        id: u32,
        rate_bps: u64,
        packets: u32,
        bytes: usize,
        deadline: Instant,
    },
}

#[derive(Debug, Clone, Copy)]
struct Session {
    target_bps: u64,
    clusters: u32,
    /// The estimator's first probe: it asks for everything the viewer could want, from a
    /// start that knows nothing of the path, so its failure says where the path ends (its
    /// clusters measured that), not that probing should back off.
    first: bool,
}

/// What feedback reported about one cluster's packets: all of them, and
/// those sent in its second half.
#[derive(Debug, Clone, Copy)]
struct ClusterFeedback {
    id: u32,
    /// Where the cluster's second half begins (its planned midpoint).
    tail_from: Instant,
    all: Option<Span>,
    tail: Option<Span>,
}

impl ClusterFeedback {
    fn add(&mut self, sent: Instant, arrival: i64, size: usize) {
        Span::add_to(&mut self.all, sent, arrival, size);
        if sent >= self.tail_from {
            Span::add_to(&mut self.tail, sent, arrival, size);
        }
    }

    /// The rate the path drained the cluster's packets at where it spread
    /// them out: all of them, or those of its second half (which meet the
    /// link's rate once the first used up a shaper's burst allowance).
    fn drained(&self) -> Option<u64> {
        let all = self.all.and_then(|a| a.saturated_rate());
        let tail = self
            .tail
            .filter(|t| t.packets >= MIN_TAIL_PACKETS)
            .and_then(|t| t.saturated_rate());
        match (all, tail) {
            (Some(a), Some(t)) => Some(a.min(t)),
            (a, t) => a.or(t),
        }
    }

    /// The cluster's measurement, once enough of its `sent_packets` and
    /// `sent_bytes` were reported.
    fn measure(&self, sent_packets: u32, sent_bytes: usize) -> Measured {
        let Some(all) = self.all else {
            return Measured::Pending;
        };
        let need_packets = (f64::from(sent_packets) * MIN_RECEIVED_RATIO)
            .ceil()
            .max(4.0);
        if f64::from(all.packets) < need_packets
            || (all.bytes as f64) < sent_bytes as f64 * MIN_RECEIVED_RATIO
        {
            return Measured::Pending;
        }
        match (all.rate(), self.drained()) {
            (Measured::Rate(a), Some(t)) => Measured::Rate(a.min(t)),
            (all, _) => all,
        }
    }
}

/// Send and arrival spans of some packets of a cluster.
#[derive(Debug, Clone, Copy)]
struct Span {
    first_send: Instant,
    last_send: Instant,
    last_send_size: usize,
    first_arrival: i64,
    first_arrival_size: usize,
    last_arrival: i64,
    packets: u32,
    bytes: usize,
}

impl Span {
    fn new(sent: Instant, arrival: i64, size: usize) -> Self {
        Self {
            first_send: sent,
            last_send: sent,
            last_send_size: size,
            first_arrival: arrival,
            first_arrival_size: size,
            last_arrival: arrival,
            packets: 1,
            bytes: size,
        }
    }

    /// Adds a packet to `span`, starting it with the first.
    fn add_to(span: &mut Option<Self>, sent: Instant, arrival: i64, size: usize) {
        match span {
            Some(s) => s.add(sent, arrival, size),
            None => *span = Some(Self::new(sent, arrival, size)),
        }
    }

    fn add(&mut self, sent: Instant, arrival: i64, size: usize) {
        self.packets = self.packets.saturating_add(1);
        self.bytes = self.bytes.saturating_add(size);
        self.first_send = self.first_send.min(sent);
        if sent >= self.last_send {
            self.last_send = sent;
            self.last_send_size = size;
        }
        if arrival < self.first_arrival {
            self.first_arrival = arrival;
            self.first_arrival_size = size;
        }
        self.last_arrival = self.last_arrival.max(arrival);
    }

    /// The send and receive spans of these packets (µs); None for spans
    /// that are no probe.
    fn spans_us(&self) -> Option<(i64, i64)> {
        let send_us = signed_us(self.last_send, self.first_send);
        let recv_us = self.last_arrival.saturating_sub(self.first_arrival);
        (send_us > 0 && send_us <= MAX_SPAN_US && recv_us > 0 && recv_us <= MAX_SPAN_US)
            .then_some((send_us, recv_us))
    }

    /// The send and receive rates of these packets (bps), the last packet
    /// sent and the first received left out (their spans begin and end on
    /// them).
    fn rates(&self) -> Option<(f64, f64)> {
        let (send_us, recv_us) = self.spans_us()?;
        let send_bps = self.bytes.saturating_sub(self.last_send_size) as f64 * 8e6 / send_us as f64;
        Some((send_bps, self.recv_bps(recv_us)))
    }

    /// The receive rate over a receive span of `recv_us` (the first packet
    /// received left out).
    fn recv_bps(&self, recv_us: i64) -> f64 {
        self.bytes.saturating_sub(self.first_arrival_size) as f64 * 8e6 / recv_us as f64
    }

    /// The rate the path carried these packets at: the send rate while it
    /// kept up, a share of the receive rate where it spread them out.
    fn rate(&self) -> Measured {
        let Some((send_bps, recv_bps)) = self.rates() else {
            return Measured::Invalid;
        };
        if recv_bps > MAX_VALID_RATIO * send_bps {
            return Measured::Invalid;
        }
        let rate = if recv_bps < MIN_RATIO_UNSATURATED * send_bps {
            SATURATED_UTILISATION * recv_bps
        } else {
            send_bps.min(recv_bps)
        };
        Measured::Rate(rate as u64)
    }

    /// The rate the path drained these packets at, where it spread them
    /// out (they took longer to arrive than to be sent: a saturated link);
    /// None where it kept up with them. Spans, not rates, are compared: a
    /// few packets of mixed sizes (padding, audio, video) skew the rates'
    /// first/last-packet corrections.
    fn saturated_rate(&self) -> Option<u64> {
        let (send_us, recv_us) = self.spans_us()?;
        ((send_us as f64) < MIN_RATIO_UNSATURATED * recv_us as f64)
            .then(|| (SATURATED_UTILISATION * self.recv_bps(recv_us)) as u64)
    }
}

/// A cluster's measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Measured {
    Pending,
    Invalid,
    Rate(u64),
}

/// The probe controller, pacer and result estimator in one.
#[derive(Debug, Clone)]
pub(crate) struct Prober {
    phase: Phase,
    session: Option<Session>,
    next_id: u32,
    failures: u32,
    next_allowed: Option<Instant>,
    /// The recent clusters, as feedback reports their packets.
    feedback: VecDeque<ClusterFeedback>,
    outcome: Option<ProbeOutcome>,
    /// A failed cluster's measured rate where the path did not carry it.
    ceiling: Option<u64>,
    last_cluster_end: Option<Instant>,
}

impl Default for Prober {
    fn default() -> Self {
        Self {
            phase: Phase::Idle,
            session: None,
            next_id: 1,
            failures: 0,
            next_allowed: None,
            feedback: VecDeque::with_capacity(MAX_TRACKED),
            outcome: None,
            ceiling: None,
            last_cluster_end: None,
        }
    }
}

impl Prober {
    /// Rebuilt from a snapshot: no probe in flight, the back-off kept.
    pub fn restored(next_id: u32, failures: u32, next_allowed: Option<Instant>) -> Self {
        Self {
            next_id: next_id.max(1),
            failures,
            next_allowed,
            ..Self::default()
        }
    }

    pub fn next_id(&self) -> u32 {
        self.next_id
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn next_allowed(&self) -> Option<Instant> {
        self.next_allowed
    }

    pub fn active(&self) -> bool {
        self.session.is_some()
    }

    /// Whether queueing seen now may be the probe's own: a cluster runs or
    /// awaits its result, or ended or was judged less than an RTT +
    /// [`PROBE_GUARD`] ago. A failed cluster overloads the link for its
    /// 20–250 ms; the queue it leaves drains at what the media leaves of the
    /// link, and the delay trend still rises while the cluster's rise is in
    /// its window. Cutting the media to β × the (application-limited)
    /// acknowledged rate for it would switch the viewer down for the probe's
    /// sake. Real congestion outlasts the guard.
    pub fn guards(&self, now: Instant, rtt: Duration) -> bool {
        !matches!(self.phase, Phase::Idle)
            || self
                .last_cluster_end
                .is_some_and(|e| now < later(e, rtt.min(Duration::from_secs(1)) + PROBE_GUARD))
    }

    /// The rate a failed cluster saturated the path at, once: the estimate
    /// should not sit above it.
    pub fn take_ceiling(&mut self) -> Option<u64> {
        self.ceiling.take()
    }

    pub fn take_outcome(&mut self) -> Option<ProbeOutcome> {
        self.outcome.take()
    }

    /// The allocator asks whether `target` is reachable. Starts a session
    /// (true), joins the running one (true), or refuses (false).
    pub fn request(
        &mut self,
        now: Instant,
        target: u64,
        estimate: u64,
        limits: &ProbeLimits,
    ) -> bool {
        if let Some(s) = self.session.as_mut() {
            s.target_bps = s.target_bps.max(target);
            return true;
        }
        if target <= estimate || self.next_allowed.is_some_and(|t| now < t) {
            return false;
        }
        let Some(rate) = plan_rate(target, estimate, limits) else {
            return false;
        };
        self.session = Some(Session {
            target_bps: target,
            clusters: 0,
            first: self.next_id == 1,
        });
        self.start_cluster(now, rate, limits);
        true
    }

    fn start_cluster(&mut self, now: Instant, rate_bps: u64, limits: &ProbeLimits) {
        let rate = rate_bps.max(1) as f64;
        let asked = limits
            .duration
            .clamp(Duration::from_millis(5), Duration::from_millis(200));
        let for_bytes = Duration::try_from_secs_f64(MIN_CLUSTER_BYTES * 8.0 / rate)
            .unwrap_or(MAX_CLUSTER_DURATION)
            .min(MAX_CLUSTER_DURATION);
        let duration = asked.max(for_bytes);
        let total = rate * duration.as_secs_f64() / 8.0;
        let slot_bytes = (total / SLOTS_PER_CLUSTER).clamp(MIN_SLOT_BYTES, MAX_SLOT_BYTES);
        let interval = Duration::try_from_secs_f64(slot_bytes * 8.0 / rate)
            .unwrap_or(Duration::from_millis(100))
            .clamp(Duration::from_millis(1), Duration::from_millis(100));
        let slots = (duration.as_nanos() / interval.as_nanos().max(1)) as u32 + 1;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        if self.feedback.len() >= MAX_TRACKED {
            self.feedback.pop_front();
        }
        self.feedback.push_back(ClusterFeedback {
            id,
            tail_from: later(now, duration / 2),
            all: None,
            tail: None,
        });
        if let Some(s) = self.session.as_mut() {
            s.clusters += 1;
        }
        self.phase = Phase::Sending(Cluster {
            id,
            rate_bps,
            start: now,
            interval,
            slot_bytes: slot_bytes as usize,
            slots,
            next_slot: 0,
            issued: 0,
            media: 0,
            packets: 0,
            bytes: 0,
        });
    }

    /// Padding due now, if any.
    pub fn poll_send(&mut self, now: Instant, rtt: Duration) -> Option<ProbeSend> {
        let Phase::Sending(c) = &mut self.phase else {
            return None;
        };
        if now < c.start {
            return None;
        }
        let slot = c.slot_at(now);
        if c.finished(slot) {
            self.finish_sending(now, rtt);
            return None;
        }
        c.next_slot = slot.saturating_add(1);
        let due = (slot as usize)
            .saturating_add(1)
            .saturating_mul(c.slot_bytes);
        let sent = c.issued.saturating_add(c.media);
        let bytes = due.saturating_sub(sent);
        if bytes == 0 || bytes < c.slot_bytes / 2 {
            return None;
        }
        c.issued = c.issued.saturating_add(bytes);
        Some(ProbeSend {
            cluster: c.id,
            bytes,
        })
    }

    fn finish_sending(&mut self, now: Instant, rtt: Duration) {
        self.last_cluster_end = Some(now);
        if let Phase::Sending(c) = &self.phase {
            self.phase = Phase::Waiting {
                id: c.id,
                rate_bps: c.rate_bps,
                packets: c.packets,
                bytes: c.bytes,
                deadline: later(now, RESULT_WAIT + rtt.min(Duration::from_secs(5))),
            };
        }
    }

    /// A packet was sent; returns the cluster it belongs to (media sent
    /// while a cluster runs is part of it: it loads the link all the same).
    pub fn on_sent(&mut self, now: Instant, size: usize, probe: Option<u32>) -> Option<u32> {
        let Phase::Sending(c) = &mut self.phase else {
            return probe;
        };
        match probe {
            Some(id) if id == c.id => {
                c.packets = c.packets.saturating_add(1);
                c.bytes = c.bytes.saturating_add(size);
                Some(id)
            }
            Some(id) => Some(id),
            // Media joins between the first padding and the last planned
            // slot, so both ends of the cluster are padding of slot size:
            // the rate estimate drops one packet at each end, and a big
            // frame packet there would skew it.
            None if c.issued > 0 && now >= c.start && c.slot_at(now) < c.slots => {
                c.packets = c.packets.saturating_add(1);
                c.bytes = c.bytes.saturating_add(size);
                c.media = c.media.saturating_add(size);
                Some(c.id)
            }
            None => None,
        }
    }

    /// Feedback reported a cluster packet received.
    pub fn on_acked(&mut self, id: u32, sent: Instant, arrival: i64, size: usize) {
        if let Some(f) = self.feedback.iter_mut().find(|f| f.id == id) {
            f.add(sent, arrival, size);
        }
    }

    /// After a feedback message: judges the waiting cluster. Returns a
    /// measured rate the estimate may rise to.
    pub fn after_feedback(
        &mut self,
        now: Instant,
        estimate: u64,
        overusing: bool,
        limits: &ProbeLimits,
    ) -> Option<u64> {
        let session = self.session?;
        if overusing {
            // The probe (or something else) built a queue: not now.
            self.fail(now, None, limits);
            return None;
        }
        let Phase::Waiting {
            id,
            rate_bps,
            packets,
            bytes,
            ..
        } = self.phase
        else {
            return None;
        };
        let feedback = self.feedback.iter().find(|f| f.id == id).copied()?;
        let r = match feedback.measure(packets, bytes) {
            Measured::Pending => return None,
            Measured::Invalid => {
                self.fail(now, None, limits);
                return None;
            }
            // A cluster shows at most the rate it was sent at: media sent in a burst during it
            // (a keyframe) and a shaper's burst allowance can make a short span read higher.
            Measured::Rate(r) => r.min(rate_bps),
        };
        if r >= session.target_bps {
            self.failures = 0;
            self.next_allowed = Some(later(now, limits.min_interval));
            self.end(now, session, Some(r), true);
            return Some(r);
        }
        let carried = r as f64 >= CONTINUE_RATIO * rate_bps as f64;
        let next = plan_rate(session.target_bps, estimate.max(r), limits)
            .filter(|n| *n as f64 > rate_bps as f64 * 1.05);
        match next {
            Some(next) if carried && session.clusters < MAX_CLUSTERS => {
                self.start_cluster(now, next, limits);
            }
            _ => {
                // Where the path spread the cluster out (not where loss
                // thinned it), what it drained at is its capacity.
                self.ceiling = feedback.drained().map(|d| d.min(rate_bps));
                self.fail(now, Some(r), limits);
            }
        }
        Some(r)
    }

    fn fail(&mut self, now: Instant, measured: Option<u64>, limits: &ProbeLimits) {
        let Some(session) = self.session else {
            return;
        };
        let wait = if session.first {
            limits.min_interval
        } else {
            self.failures = self.failures.saturating_add(1);
            let factor = 2u32.saturating_pow(self.failures.saturating_sub(1).min(16));
            limits
                .backoff
                .saturating_mul(factor)
                .min(limits.backoff_max)
                .max(limits.min_interval)
        };
        self.next_allowed = Some(later(now, wait));
        self.end(now, session, measured, false);
    }

    fn end(&mut self, now: Instant, session: Session, measured: Option<u64>, success: bool) {
        self.outcome = Some(ProbeOutcome {
            target_bps: session.target_bps,
            measured_bps: measured,
            success,
        });
        self.session = None;
        self.phase = Phase::Idle;
        // A verdict may come before the cluster's last packets arrived (an
        // overuse fails it while it is sent): its queue counts from here.
        self.last_cluster_end = Some(now);
    }

    /// When [`Self::handle_timeout`] or [`Self::poll_send`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Idle => None,
            Phase::Sending(c) => {
                let offset = c.interval.saturating_mul(c.next_slot);
                Some(c.start.checked_add(offset).unwrap_or(c.start))
            }
            Phase::Waiting { deadline, .. } => Some(*deadline),
        }
    }

    /// Ends a cluster whose time is up, or fails one whose result is late.
    pub fn handle_timeout(&mut self, now: Instant, rtt: Duration, limits: &ProbeLimits) {
        match &self.phase {
            Phase::Idle => {}
            Phase::Sending(c) => {
                if c.finished(c.slot_at(now)) {
                    self.finish_sending(now, rtt);
                }
            }
            Phase::Waiting { deadline, .. } => {
                if now >= *deadline {
                    self.fail(now, None, limits);
                }
            }
        }
    }
}

/// `now + d`, or `now` where that cannot be represented.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now)
}

/// The rate of the next cluster towards `target`: 15 % above it, at least
/// 1.25× the estimate, at most `max_factor` × the estimate and the absolute
/// cap. None when that is no real step up.
fn plan_rate(target: u64, estimate: u64, limits: &ProbeLimits) -> Option<u64> {
    let e = estimate as f64;
    let want = (target as f64 * TARGET_MARGIN).max(e * MIN_STEP);
    let ceiling = (e * limits.max_factor).min(limits.max_bps as f64);
    let rate = want.min(ceiling);
    (rate > e * 1.05 && rate >= 1.0).then_some(rate.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ProbeLimits {
        ProbeLimits {
            max_bps: 10_000_000,
            max_factor: 2.0,
            duration: Duration::from_millis(20),
            min_interval: Duration::from_secs(1),
            backoff: Duration::from_secs(2),
            backoff_max: Duration::from_secs(30),
        }
    }

    #[test]
    fn plans_between_the_step_and_the_cap() {
        let l = limits();
        assert_eq!(plan_rate(1_540_000, 1_000_000, &l), Some(1_771_000));
        assert_eq!(plan_rate(1_050_000, 1_000_000, &l), Some(1_250_000));
        assert_eq!(plan_rate(5_000_000, 1_000_000, &l), Some(2_000_000));
        let capped = ProbeLimits {
            max_bps: 1_020_000,
            ..l
        };
        assert_eq!(plan_rate(5_000_000, 1_000_000, &capped), None);
    }

    #[test]
    fn paces_a_cluster_counting_media() {
        let t0 = Instant::now();
        let l = limits();
        let mut p = Prober::default();
        assert!(p.request(t0, 4_000_000, 2_000_000, &l));
        // Media before the first padding is not part of the cluster.
        assert_eq!(p.on_sent(t0, 625, None), None);
        // 4 Mbit/s × 20 ms = 10 000 bytes: 1000-byte slots every 2 ms, 11 sends.
        assert_eq!(
            p.poll_send(t0, Duration::ZERO),
            Some(ProbeSend {
                cluster: 1,
                bytes: 1000
            })
        );
        assert_eq!(p.poll_send(t0, Duration::ZERO), None);
        assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_millis(2)));
        // A 1000-byte media packet at 1 ms covers the next slot.
        assert_eq!(
            p.on_sent(t0 + Duration::from_millis(1), 1000, None),
            Some(1)
        );
        assert_eq!(
            p.poll_send(t0 + Duration::from_millis(2), Duration::ZERO),
            None
        );
        assert_eq!(
            p.poll_send(t0 + Duration::from_millis(4), Duration::ZERO),
            Some(ProbeSend {
                cluster: 1,
                bytes: 1000
            })
        );
    }

    #[test]
    fn a_slow_cluster_is_stretched_past_a_burst_allowance() {
        let t0 = Instant::now();
        let mut p = Prober::default();
        // 1 Mbit/s × 20 ms would be 2500 bytes, inside a shaper's burst: 10 kB over 80 ms.
        assert!(p.request(t0, 1_000_000, 500_000, &limits()));
        assert_eq!(
            p.poll_send(t0, Duration::ZERO),
            Some(ProbeSend {
                cluster: 1,
                bytes: 1000
            })
        );
        assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_millis(8)));
    }

    /// Sends one cluster towards `target` from `estimate` through `link`,
    /// reports every packet, and returns what the prober made of it.
    fn probe_through(
        link: crate::bwe::sim::LinkConfig,
        estimate: u64,
        target: u64,
    ) -> (Option<u64>, Option<u64>, Option<ProbeOutcome>) {
        let t0 = Instant::now();
        let l = limits();
        let mut link = crate::bwe::sim::Link::new(link, t0);
        let mut p = Prober::default();
        assert!(p.request(t0, target, estimate, &l));
        let mut sent = Vec::new();
        let mut now = t0;
        while p.active() && now < t0 + Duration::from_secs(1) {
            while let Some(send) = p.poll_send(now, Duration::ZERO) {
                p.on_sent(now, send.bytes, Some(send.cluster));
                sent.push((now, send.bytes, send.cluster, link.send(now, send.bytes)));
            }
            p.handle_timeout(now, Duration::ZERO, &l);
            if matches!(p.phase, Phase::Waiting { .. }) {
                break;
            }
            now += Duration::from_millis(1);
        }
        for (at, size, cluster, arrival) in sent {
            if let Some(a) = arrival {
                p.on_acked(cluster, at, signed_us(a, t0), size);
            }
        }
        let raise = p.after_feedback(now + Duration::from_millis(300), estimate, false, &l);
        (raise, p.take_ceiling(), p.take_outcome())
    }

    #[test]
    fn a_cluster_a_token_bucket_let_through_in_part_reads_as_the_drain_rate() {
        // `tc … tbf rate 400kbit burst 4000`: the first 4 kB pass at once.
        let mut shaped = crate::bwe::sim::LinkConfig::constant(400_000);
        shaped.burst_bytes = 4_000;
        shaped.queue_bytes = 14_000;
        let (raise, ceiling, outcome) = probe_through(shaped, 400_000, 1_035_000);
        let ceiling = ceiling.expect("a saturated cluster sets a ceiling");
        assert!((360_000..=400_000).contains(&ceiling), "{ceiling}");
        assert_eq!(raise, Some(ceiling));
        let outcome = outcome.expect("the session ended");
        assert!(!outcome.success);
        // A path that keeps up: carried, the session goes on with a higher cluster.
        let (raise, ceiling, outcome) = probe_through(
            crate::bwe::sim::LinkConfig::constant(10_000_000),
            400_000,
            1_035_000,
        );
        assert_eq!((ceiling, outcome), (None, None));
        assert!(raise.is_some_and(|r| r >= 760_000), "{raise:?}");
    }

    #[test]
    fn the_first_session_failing_does_not_back_off_the_next() {
        let t0 = Instant::now();
        let l = limits();
        let mut p = Prober::default();
        // An overuse fails the running session. The first: no back-off, the least interval.
        assert!(p.request(t0, 4_000_000, 300_000, &l));
        assert_eq!(p.after_feedback(t0, 300_000, true, &l), None);
        assert!(p.take_outcome().is_some_and(|o| !o.success));
        assert_eq!(
            (p.failures(), p.next_allowed()),
            (0, Some(t0 + l.min_interval))
        );
        // The second fails as any other: the back-off, then twice it.
        let t1 = t0 + l.min_interval;
        assert!(p.request(t1, 1_000_000, 300_000, &l));
        p.after_feedback(t1, 300_000, true, &l);
        assert_eq!((p.failures(), p.next_allowed()), (1, Some(t1 + l.backoff)));
        let t2 = t1 + l.backoff;
        assert!(p.request(t2, 1_000_000, 300_000, &l));
        p.after_feedback(t2, 300_000, true, &l);
        assert_eq!(
            (p.failures(), p.next_allowed()),
            (2, Some(t2 + l.backoff * 2))
        );
        // A prober restored from a snapshot that probed before is past its first.
        let mut moved = Prober::restored(5, 0, None);
        assert!(moved.request(t0, 4_000_000, 300_000, &l));
        moved.after_feedback(t0, 300_000, true, &l);
        assert_eq!(moved.failures(), 1);
    }
}
