//! AIMD rate control driven by the overuse detector (GCC §5.5; libwebrtc's
//! `AimdRateControl` and `LinkCapacityEstimator`).
//!
//! Far from the last known link capacity the estimate grows
//! multiplicatively (8 %/s) to find it quickly; near it, additively (about a
//! packet per response time) so it does not overshoot into a queue again. On
//! overuse it falls to β = 0.85 of what the receiver acknowledged, and it
//! holds while the queue drains (underuse).

use std::time::{Duration, Instant};

use super::delay::Usage;

/// Decrease factor on overuse.
const BETA: f64 = 0.85;
/// Multiplicative increase per second.
const INCREASE_PER_S: f64 = 1.08;
/// Smallest multiplicative step (bps).
const MIN_INCREASE_BPS: f64 = 1_000.0;
/// Smallest additive increase rate (bps per second).
const MIN_NEAR_MAX_INCREASE: f64 = 4_000.0;
/// The estimate may run ahead of what the receiver acknowledged by this
/// factor (plus [`HEADROOM_BPS`]) before increases stop. libwebrtc allows
/// 1.5 for an encoder that follows the estimate; an SFU sends discrete
/// layers, so an estimate far above the sent rate is untested (a 3.8 Mbit/s
/// estimate on a 3 Mbit/s link while a 2.5 Mbit/s layer flows); probes, not
/// AIMD, validate such jumps.
const HEADROOM: f64 = 1.25;
const HEADROOM_BPS: f64 = 10_000.0;
/// Overuse estimate decreases are deepened by this much so the queue drains.
const EXTRA_BACKOFF_BPS: f64 = 5_000.0;
/// Exponential averaging of the link capacity on overuse.
const CAPACITY_ALPHA: f64 = 0.05;

/// Rate-control state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateState {
    Hold,
    Increase,
    Decrease,
}

impl RateState {
    pub fn to_u32(self) -> u32 {
        match self {
            RateState::Hold => 0,
            RateState::Increase => 1,
            RateState::Decrease => 2,
        }
    }

    pub fn from_u32(v: u32) -> Self {
        match v {
            1 => RateState::Increase,
            2 => RateState::Decrease,
            _ => RateState::Hold,
        }
    }
}

/// Where the link saturated the last times we overused it: an exponential
/// average and its normalised variance (in kbit/s, as libwebrtc keeps them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LinkCapacity {
    pub estimate_kbps: Option<f64>,
    pub deviation: f64,
}

impl Default for LinkCapacity {
    fn default() -> Self {
        Self {
            estimate_kbps: None,
            deviation: 0.4,
        }
    }
}

impl LinkCapacity {
    fn std_kbps(&self, est: f64) -> f64 {
        (est * self.deviation).max(0.0).sqrt()
    }

    fn upper_bps(&self) -> f64 {
        self.estimate_kbps
            .map_or(f64::INFINITY, |e| (e + 3.0 * self.std_kbps(e)) * 1000.0)
    }

    fn lower_bps(&self) -> f64 {
        self.estimate_kbps
            .map_or(0.0, |e| (e - 3.0 * self.std_kbps(e)).max(0.0) * 1000.0)
    }

    fn update(&mut self, sample_bps: f64, alpha: f64) {
        let sample = sample_bps / 1000.0;
        let est = match self.estimate_kbps {
            None => sample,
            Some(e) => (1.0 - alpha) * e + alpha * sample,
        };
        self.estimate_kbps = Some(est);
        let err = est - sample;
        self.deviation =
            ((1.0 - alpha) * self.deviation + alpha * err * err / est.max(1.0)).clamp(0.4, 2.5);
    }

    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// The delay-based estimate.
#[derive(Debug, Clone)]
pub(crate) struct AimdRateControl {
    bitrate: f64,
    min: f64,
    max: f64,
    state: RateState,
    pub capacity: LinkCapacity,
    last_change: Option<Instant>,
    latest_acked: Option<f64>,
    rtt: Duration,
}

impl AimdRateControl {
    pub fn new(initial: u64, min: u64, max: u64) -> Self {
        let (min, max) = (min as f64, (max.max(min)) as f64);
        Self {
            bitrate: (initial as f64).clamp(min, max),
            min,
            max,
            state: RateState::Hold,
            capacity: LinkCapacity::default(),
            last_change: None,
            latest_acked: None,
            rtt: Duration::from_millis(200),
        }
    }

    /// Rebuilt from a snapshot.
    pub fn restored(
        base: Self,
        bitrate: u64,
        state: RateState,
        capacity: LinkCapacity,
        last_change: Option<Instant>,
    ) -> Self {
        Self {
            bitrate: (bitrate as f64).clamp(base.min, base.max),
            state,
            capacity,
            last_change,
            ..base
        }
    }

    pub fn estimate(&self) -> u64 {
        self.bitrate as u64
    }

    pub fn state(&self) -> RateState {
        self.state
    }

    pub fn last_change(&self) -> Option<Instant> {
        self.last_change
    }

    pub fn set_rtt(&mut self, rtt: Duration) {
        self.rtt = rtt;
    }

    /// Sets the estimate outright (a probe result). A rate above the link
    /// capacity's upper bound shows that capacity is stale.
    pub fn set_estimate(&mut self, now: Instant, bps: u64) {
        let bps = (bps as f64).clamp(self.min, self.max);
        if bps > self.capacity.upper_bps() {
            self.capacity.reset();
        }
        self.bitrate = bps;
        self.last_change = Some(now);
    }

    /// A probe saturated the path at `bps`: an estimate above it comes down
    /// to it (the acknowledged rate, padding included, let AIMD run above
    /// it), and the link capacity learns it, so increases near it are
    /// additive.
    pub fn saturated_at(&mut self, now: Instant, bps: u64) {
        let bps = (bps as f64).clamp(self.min, self.max);
        if self.bitrate <= bps {
            return;
        }
        self.learn_capacity(bps);
        self.bitrate = bps;
        self.last_change = Some(now);
    }

    /// Scales the estimate down (feedback stopped; overuse before any
    /// acknowledged bitrate is known).
    pub fn scale(&mut self, now: Instant, factor: f64) {
        self.bitrate = (self.bitrate * factor).clamp(self.min, self.max);
        self.last_change = Some(now);
    }

    /// Whether another decrease is due: at most once per RTT (10–200 ms),
    /// unless the receiver gets less than half the estimate.
    pub fn time_to_reduce_further(&self, now: Instant, acked: u64) -> bool {
        let interval = self
            .rtt
            .clamp(Duration::from_millis(10), Duration::from_millis(200));
        let waited = self
            .last_change
            .is_none_or(|t| now.saturating_duration_since(t) >= interval);
        waited || (acked as f64) < 0.5 * self.bitrate
    }

    /// One update with the detector's hypothesis and the acknowledged bitrate.
    pub fn update(&mut self, now: Instant, usage: Usage, acked: Option<u64>) {
        if let Some(a) = acked {
            self.latest_acked = Some(a as f64);
        }
        match usage {
            Usage::Normal => {
                if self.state == RateState::Hold {
                    self.last_change = Some(now);
                    self.state = RateState::Increase;
                }
            }
            Usage::Overusing => {
                if self.state != RateState::Decrease {
                    self.state = RateState::Decrease;
                }
            }
            Usage::Underusing => self.state = RateState::Hold,
        }
        let throughput = self.latest_acked.unwrap_or(self.bitrate);
        match self.state {
            RateState::Hold => {}
            RateState::Increase => self.increase(now, throughput),
            RateState::Decrease => self.decrease(now, throughput),
        }
        self.bitrate = self.bitrate.clamp(self.min, self.max);
    }

    fn increase(&mut self, now: Instant, throughput: f64) {
        if throughput > self.capacity.upper_bps() {
            self.capacity.reset();
        }
        let limit = HEADROOM * throughput + HEADROOM_BPS;
        if self.bitrate < limit {
            let dt = self.last_change.map_or(0.0, |t| {
                now.saturating_duration_since(t).as_secs_f64().min(1.0)
            });
            let step = if self.capacity.estimate_kbps.is_some() {
                self.near_max_increase_per_s() * dt
            } else {
                (self.bitrate * (INCREASE_PER_S.powf(dt) - 1.0)).max(MIN_INCREASE_BPS)
            };
            self.bitrate = (self.bitrate + step).min(limit);
        }
        self.last_change = Some(now);
    }

    fn decrease(&mut self, now: Instant, throughput: f64) {
        let mut decreased = BETA * throughput;
        if decreased > EXTRA_BACKOFF_BPS {
            decreased -= EXTRA_BACKOFF_BPS;
        }
        if decreased > self.bitrate
            && let Some(cap) = self.capacity.estimate_kbps
        {
            decreased = BETA * cap * 1000.0;
        }
        if decreased < self.bitrate {
            self.bitrate = decreased;
        }
        self.learn_capacity(throughput);
        self.state = RateState::Hold;
        self.last_change = Some(now);
    }

    /// The link saturated at `bps`: the capacity estimate takes it in.
    fn learn_capacity(&mut self, bps: f64) {
        if bps < self.capacity.lower_bps() {
            // Far below where the link saturated before: that capacity is stale.
            self.capacity.reset();
        }
        self.capacity.update(bps, CAPACITY_ALPHA);
    }

    /// Additive increase near capacity: about one average packet per
    /// response time (twice RTT + 100 ms, the detector's reaction time).
    fn near_max_increase_per_s(&self) -> f64 {
        let frame_bytes = self.bitrate / 8.0 / 30.0;
        let packets = (frame_bytes / 1200.0).ceil().max(1.0);
        let packet_bits = frame_bytes / packets * 8.0;
        let response = (self.rtt + Duration::from_millis(100)).as_secs_f64() * 2.0;
        (packet_bits / response).max(MIN_NEAR_MAX_INCREASE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increases_eight_percent_per_second_then_decreases_to_beta_of_acked() {
        let t0 = Instant::now();
        let mut r = AimdRateControl::new(1_000_000, 10_000, 10_000_000);
        r.update(t0, Usage::Normal, Some(1_000_000));
        r.update(t0 + Duration::from_secs(1), Usage::Normal, Some(1_000_000));
        // The first update steps by the 1 kbit/s minimum, the next by 8 %.
        assert_eq!(r.estimate(), 1_081_080);
        assert_eq!(r.state(), RateState::Increase);
        // Overuse: 0.85 × 900 kbit/s − 5 kbit/s.
        r.update(
            t0 + Duration::from_millis(1100),
            Usage::Overusing,
            Some(900_000),
        );
        assert_eq!(r.estimate(), 760_000);
        assert_eq!(r.state(), RateState::Hold);
        assert_eq!(r.capacity.estimate_kbps, Some(900.0));
    }

    #[test]
    fn increase_is_additive_near_capacity_and_limited_by_throughput() {
        let t0 = Instant::now();
        let mut r = AimdRateControl::new(800_000, 10_000, 10_000_000);
        r.set_rtt(Duration::from_millis(100));
        r.update(t0, Usage::Overusing, Some(800_000));
        assert_eq!(r.estimate(), 675_000);
        r.update(t0, Usage::Normal, Some(800_000));
        r.update(t0 + Duration::from_secs(1), Usage::Normal, Some(800_000));
        // 675 kbit/s: 2813-byte frames in 3 packets of 7500 bits, per 0.4 s.
        assert_eq!(r.estimate(), 693_750);
        // Acknowledged 100 kbit/s: no increase beyond 1.25 × 100 + 10 kbit/s.
        let mut r = AimdRateControl::new(100_000, 10_000, 10_000_000);
        r.update(t0, Usage::Normal, Some(100_000));
        r.update(t0 + Duration::from_secs(10), Usage::Normal, Some(100_000));
        // 101 kbit/s after the first update; one second counts at most.
        assert_eq!(r.estimate(), 109_080);
        r.update(t0 + Duration::from_secs(11), Usage::Normal, Some(100_000));
        assert_eq!(r.estimate(), 117_806);
        r.update(t0 + Duration::from_secs(12), Usage::Normal, Some(100_000));
        assert_eq!(r.estimate(), 127_230);
        r.update(t0 + Duration::from_secs(13), Usage::Normal, Some(100_000));
        assert_eq!(r.estimate(), 135_000);
    }

    #[test]
    fn reduces_at_most_once_per_rtt_unless_far_off() {
        let t0 = Instant::now();
        let mut r = AimdRateControl::new(1_000_000, 10_000, 10_000_000);
        r.set_rtt(Duration::from_millis(100));
        r.update(t0, Usage::Overusing, Some(1_000_000));
        assert!(!r.time_to_reduce_further(t0 + Duration::from_millis(50), 800_000));
        assert!(r.time_to_reduce_further(t0 + Duration::from_millis(100), 800_000));
        assert!(r.time_to_reduce_further(t0 + Duration::from_millis(50), 400_000));
    }
}
