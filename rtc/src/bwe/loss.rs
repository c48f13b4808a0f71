//! Loss-based control (GCC §6; libwebrtc's `SendSideBandwidthEstimation`,
//! the v1 loss rules): a cap on the estimate that loss lowers and a clean
//! path lifts again.
//!
//! Under 2 % loss the path is fine (wireless links lose some packets
//! without congestion) and the cap grows 8 %/s until it no longer binds;
//! between 2 and 10 % the estimate holds; above 10 % the cap falls to
//! `estimate × (1 − loss / 2)`, at most once per 300 ms + RTT so one loss
//! episode is not punished twice before its effect shows. Delay-based
//! detection reacts first in a queue; this catches congestion that drops
//! without queueing (policers, shallow buffers) and a link that dies.

use std::time::{Duration, Instant};

/// Below this loss the cap may grow.
const LOW_LOSS: f64 = 0.02;
/// Above this loss the cap falls.
const HIGH_LOSS: f64 = 0.10;
/// Growth of the cap per second on a clean path.
const INCREASE_PER_S: f64 = 1.08;
/// Extra growth per second so low rates do not get stuck.
const INCREASE_BPS: f64 = 1_000.0;
/// A transport-wide loss sample needs this many reported packets…
const MIN_PACKETS: u64 = 20;
/// …and this much time, so 2 % random loss does not read as 10 % in a short
/// window (3 of 24 packets happens about once in 90 windows).
const MIN_WINDOW: Duration = Duration::from_millis(250);
/// Decreases are this far apart at least (plus the RTT).
const DECREASE_INTERVAL: Duration = Duration::from_millis(300);

/// The loss-based cap.
#[derive(Debug, Clone, Default)]
pub(crate) struct LossController {
    cap: Option<f64>,
    fraction: u8,
    last_decrease: Option<Instant>,
    last_update: Option<Instant>,
    // Transport-wide feedback accumulated towards the next sample.
    reported: u64,
    lost: u64,
    window_start: Option<Instant>,
}

impl LossController {
    /// Rebuilt from a snapshot.
    pub fn restored(
        cap: Option<u64>,
        fraction: u8,
        last_decrease: Option<Instant>,
        now: Instant,
    ) -> Self {
        Self {
            cap: cap.map(|c| c as f64),
            fraction,
            last_decrease,
            last_update: Some(now),
            ..Self::default()
        }
    }

    /// The cap, if loss limits the estimate.
    pub fn cap(&self) -> Option<u64> {
        self.cap.map(|c| c as u64)
    }

    /// Last loss fraction (1/256).
    pub fn fraction(&self) -> u8 {
        self.fraction
    }

    /// Whether the last sample lost enough to keep the cap from growing: a cap on a clean path
    /// only waits for the acknowledged rate or a probe to lift it.
    pub fn lossy(&self) -> bool {
        f64::from(self.fraction) / 256.0 >= LOW_LOSS
    }

    pub fn last_decrease(&self) -> Option<Instant> {
        self.last_decrease
    }

    /// Counts first reports from transport-wide feedback.
    pub fn count(&mut self, now: Instant, received: u64, lost: u64) {
        if received > 0 || lost > 0 {
            self.window_start.get_or_insert(now);
        }
        self.reported = self.reported.saturating_add(received.saturating_add(lost));
        self.lost = self.lost.saturating_add(lost);
    }

    /// A packet reported lost before was reported received after all.
    pub fn recovered(&mut self) {
        self.lost = self.lost.saturating_sub(1);
    }

    /// The loss fraction of the window, once it holds enough packets.
    pub fn take_sample(&mut self, now: Instant) -> Option<u8> {
        let start = self.window_start?;
        if self.reported < MIN_PACKETS || now.saturating_duration_since(start) < MIN_WINDOW {
            return None;
        }
        let fraction = (self.lost.min(self.reported) * 256 / self.reported).min(255) as u8;
        self.reported = 0;
        self.lost = 0;
        self.window_start = None;
        Some(fraction)
    }

    /// Lowers the cap to `bps` at once (feedback stopped: everything is lost).
    pub fn clamp_to(&mut self, now: Instant, bps: u64) {
        let bps = bps as f64;
        self.cap = Some(self.cap.map_or(bps, |c| c.min(bps)));
        self.last_decrease = Some(now);
        self.last_update = Some(now);
    }

    /// Lifts the cap to at least `bps` (a probe showed the path carries it).
    pub fn lift_to(&mut self, bps: u64) {
        if let Some(c) = self.cap.as_mut() {
            *c = c.max(bps as f64);
        }
    }

    /// One loss sample. `estimate` is the estimate in force (the base of a
    /// decrease), `uncapped` what the estimate would be without this cap (a
    /// cap that grew past it is dropped).
    pub fn update(
        &mut self,
        now: Instant,
        fraction: u8,
        estimate: u64,
        uncapped: u64,
        acked: Option<u64>,
        rtt: Duration,
    ) {
        self.fraction = fraction;
        let loss = f64::from(fraction) / 256.0;
        let dt = self.last_update.map_or(0.0, |t| {
            now.saturating_duration_since(t).as_secs_f64().min(1.0)
        });
        self.last_update = Some(now);
        if loss < LOW_LOSS {
            if let Some(c) = self.cap {
                // A clean path that carries `acked` is no reason to cap below it: after a loss
                // episode the cap starts again from what gets through, not from 8 %/s above
                // whatever the episode left.
                // Nor does it grow past what the acknowledged rate vouches for (1.5× it, as
                // the delay-based increase): a viewer that gets a low layer after the episode
                // would otherwise see its cap climb blind to any estimate, and be switched up
                // into a link that cannot carry it; a probe lifts the cap (`lift_to`).
                let floor = acked.map_or(0.0, |a| a as f64);
                let vouched = acked.map_or(f64::MAX, |a| 1.5 * a as f64 + 10_000.0);
                let grown = (c * INCREASE_PER_S.powf(dt) + INCREASE_BPS * dt)
                    .min(vouched.max(c))
                    .max(floor);
                self.cap = (grown < uncapped as f64).then_some(grown);
            }
        } else if loss <= HIGH_LOSS {
            if self.cap.is_none() {
                self.cap = Some(estimate as f64);
            }
        } else {
            let due = self
                .last_decrease
                .is_none_or(|t| now.saturating_duration_since(t) >= DECREASE_INTERVAL + rtt);
            if due {
                let base = self.cap.map_or(estimate as f64, |c| c.min(estimate as f64));
                self.cap = Some(base * (1.0 - loss / 2.0));
                self.last_decrease = Some(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Duration = Duration::from_millis(100);

    #[test]
    fn high_loss_decreases_low_loss_lifts_the_cap_again() {
        let t0 = Instant::now();
        let mut l = LossController::default();
        // 25 % loss: cap = 1 Mbit/s × (1 − 0.125).
        l.update(t0, 64, 1_000_000, 1_000_000, None, RTT);
        assert_eq!(l.cap(), Some(875_000));
        // Again within 400 ms: no second decrease.
        l.update(
            t0 + Duration::from_millis(200),
            64,
            875_000,
            1_000_000,
            None,
            RTT,
        );
        assert_eq!(l.cap(), Some(875_000));
        // 5 % holds.
        l.update(
            t0 + Duration::from_millis(700),
            13,
            875_000,
            1_000_000,
            None,
            RTT,
        );
        assert_eq!(l.cap(), Some(875_000));
        // Clean: +8 % + 1 kbit/s per second, dropped once past the uncapped estimate.
        l.update(
            t0 + Duration::from_millis(1700),
            0,
            875_000,
            1_000_000,
            None,
            RTT,
        );
        assert_eq!(l.cap(), Some(946_000));
        l.update(
            t0 + Duration::from_millis(2700),
            0,
            946_000,
            1_000_000,
            None,
            RTT,
        );
        assert_eq!(l.cap(), None);
    }

    /// After a loss episode a viewer that gets a low layer does not see its cap climb blind:
    /// it grows to 1.5× what is acknowledged (+10 kbit/s) and no further, a probe lifts it,
    /// and a clean path is no reason to refuse that probe.
    #[test]
    fn a_clean_cap_grows_only_as_far_as_the_acknowledged_rate_vouches() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut l = LossController::default();
        // 40 % loss from 2 Mbit/s: cap 1.6 M; then 0.6 Mbit/s acknowledged for 5 s.
        l.update(t0, 102, 2_000_000, 2_000_000, Some(600_000), RTT);
        assert_eq!(l.cap(), Some(1_601_562));
        assert!(l.lossy());
        for k in 1..=5 {
            l.update(t0 + s * k, 0, 1_601_562, 2_000_000, Some(600_000), RTT);
        }
        // Above 1.5 × 600 k + 10 k = 910 k already: it holds where it is.
        assert_eq!(l.cap(), Some(1_601_562));
        assert!(!l.lossy());
        // A lower cap grows, but stops at what the acknowledged rate vouches for.
        let mut l = LossController::default();
        l.update(t0, 102, 1_000_000, 2_000_000, Some(600_000), RTT);
        assert_eq!(l.cap(), Some(800_781));
        for k in 1..=10 {
            l.update(t0 + s * k, 0, 800_000, 2_000_000, Some(600_000), RTT);
        }
        assert_eq!(l.cap(), Some(910_000));
        // A probe lifts it.
        l.lift_to(1_800_000);
        assert_eq!(l.cap(), Some(1_800_000));
    }

    #[test]
    fn transport_wide_samples_need_packets_and_time() {
        let t0 = Instant::now();
        let mut l = LossController::default();
        l.count(t0, 30, 0);
        assert_eq!(l.take_sample(t0 + Duration::from_millis(100)), None);
        l.count(t0 + Duration::from_millis(200), 8, 2);
        l.recovered();
        assert_eq!(l.take_sample(t0 + Duration::from_millis(250)), Some(6));
        assert_eq!(l.take_sample(t0 + Duration::from_millis(900)), None);
    }
}
