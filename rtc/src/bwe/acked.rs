//! The acknowledged bitrate: how fast the receiver actually got our packets
//! (libwebrtc's `AcknowledgedBitrateEstimator` / `BitrateEstimator`).
//!
//! Measured on the receiver's arrival times in fixed windows (500 ms for the
//! first sample, 150 ms after), each window a sample folded into a Bayesian
//! estimate whose sample uncertainty grows with the distance from the
//! current estimate: one odd window (a keyframe burst, a pause) moves it
//! little, a sustained change moves it within a few windows. The AIMD
//! decrease (β × acked) and the increase limit both hang on it, so it must
//! neither lag a capacity drop for long nor jump on a burst.

use std::collections::VecDeque;

/// First window, long for a stable initial sample.
const INITIAL_WINDOW_US: i64 = 500_000;
/// Following windows.
const WINDOW_US: i64 = 150_000;
/// Scales a sample's distance from the estimate into its uncertainty.
const UNCERTAINTY_SCALE: f64 = 10.0;
/// Variance the estimate gains per sample (the rate may have changed).
const VAR_GROWTH: f64 = 5.0;
/// Initial variance of the estimate.
pub(crate) const INITIAL_VAR: f64 = 50.0;
/// Variance added when the sender's own rate is about to jump
/// ([`AckedBitrate::expect_fast_rate_change`]; libwebrtc's `ExpectFastRateChange` adds the
/// same when the sender leaves an application-limited stretch).
const FAST_CHANGE_VAR: f64 = 200.0;
/// Span of the recent receive rate.
const RECENT_US: i64 = 250_000;
/// Packets the recent window holds at most.
const RECENT_MAX: usize = 1024;
/// The recent rate needs this many packets…
const RECENT_MIN_PACKETS: usize = 5;
/// …over at least this span.
const RECENT_MIN_SPAN_US: i64 = 50_000;

/// The acknowledged bitrate estimator.
#[derive(Debug, Clone)]
pub(crate) struct AckedBitrate {
    estimate_kbps: Option<f64>,
    var: f64,
    sum_bytes: u64,
    window_elapsed_us: i64,
    prev_arrival_us: Option<i64>,
    /// The last [`RECENT_US`] of arrivals (µs, bytes), and their byte sum.
    recent: VecDeque<(i64, usize)>,
    recent_bytes: u64,
}

impl Default for AckedBitrate {
    fn default() -> Self {
        Self {
            estimate_kbps: None,
            var: INITIAL_VAR,
            sum_bytes: 0,
            window_elapsed_us: 0,
            prev_arrival_us: None,
            recent: VecDeque::new(),
            recent_bytes: 0,
        }
    }
}

impl AckedBitrate {
    /// Rebuilt from a snapshot (the current window starts afresh).
    pub fn restored(estimate_kbps: Option<f64>, var: f64) -> Self {
        let estimate_kbps = estimate_kbps.filter(|e| e.is_finite() && *e >= 0.0);
        let var = if var.is_finite() && var > 0.0 {
            var
        } else {
            INITIAL_VAR
        };
        Self {
            estimate_kbps,
            var,
            ..Self::default()
        }
    }

    /// The estimate in bit/s.
    pub fn bitrate_bps(&self) -> Option<u64> {
        self.estimate_kbps.map(|k| (k * 1000.0) as u64)
    }

    /// The receive rate of the last 250 ms, unsmoothed. On overuse the link
    /// is saturated and this *is* its capacity, while the Bayesian estimate
    /// trails any change of rate for several windows; decreases take this
    /// (the role of libwebrtc's robust throughput estimator).
    pub fn recent_bps(&self) -> Option<u64> {
        let (first, first_size) = *self.recent.front()?;
        let (last, _) = *self.recent.back()?;
        let span = last.saturating_sub(first);
        if self.recent.len() < RECENT_MIN_PACKETS || span < RECENT_MIN_SPAN_US {
            return None;
        }
        let bytes = self.recent_bytes.saturating_sub(first_size as u64);
        Some((bytes as f64 * 8e6 / span as f64) as u64)
    }

    /// The sender's own rate is about to change by a step (a viewer switched up a layer
    /// after being application-limited below its estimate): the next windows are trusted
    /// over the old estimate, which then follows the new rate within two or three windows
    /// instead of a second or more. The AIMD decrease is β × this estimate: lagging at the
    /// old rate, a decrease after a switch up would fall far below what the link carried.
    pub fn expect_fast_rate_change(&mut self) {
        self.var += FAST_CHANGE_VAR;
    }

    pub fn state(&self) -> (Option<f64>, f64) {
        (self.estimate_kbps, self.var)
    }

    /// A packet of `bytes` arrived at `arrival_us` (receiver clock); feed
    /// them in arrival order.
    pub fn on_packet(&mut self, arrival_us: i64, bytes: usize) {
        let window = if self.estimate_kbps.is_none() {
            INITIAL_WINDOW_US
        } else {
            WINDOW_US
        };
        if self.prev_arrival_us.is_some_and(|p| arrival_us < p) {
            // Time went backwards (reordering or a receiver clock reset).
            self.sum_bytes = 0;
            self.window_elapsed_us = 0;
            self.prev_arrival_us = None;
            self.recent.clear();
            self.recent_bytes = 0;
        }
        self.recent.push_back((arrival_us, bytes));
        self.recent_bytes = self.recent_bytes.saturating_add(bytes as u64);
        while let Some(&(t, b)) = self.recent.front() {
            if self.recent.len() <= RECENT_MAX && arrival_us.saturating_sub(t) <= RECENT_US {
                break;
            }
            self.recent.pop_front();
            self.recent_bytes = self.recent_bytes.saturating_sub(b as u64);
        }
        if let Some(prev) = self.prev_arrival_us {
            let gap = arrival_us.saturating_sub(prev);
            self.window_elapsed_us = self.window_elapsed_us.saturating_add(gap);
            if gap > window {
                // Nothing arrived for a whole window: what was summed is stale.
                self.sum_bytes = 0;
                self.window_elapsed_us %= window;
            }
        }
        self.prev_arrival_us = Some(arrival_us);
        if self.window_elapsed_us >= window {
            // bytes × 8 / ms = kbit/s.
            let sample = self.sum_bytes as f64 * 8.0 / (window as f64 / 1000.0);
            self.window_elapsed_us -= window;
            self.sum_bytes = 0;
            self.fold(sample);
        }
        self.sum_bytes = self.sum_bytes.saturating_add(bytes as u64);
    }

    fn fold(&mut self, sample: f64) {
        let Some(est) = self.estimate_kbps.filter(|e| *e > 0.0) else {
            self.estimate_kbps = Some(sample);
            return;
        };
        let uncertainty = UNCERTAINTY_SCALE * (est - sample).abs() / est;
        let sample_var = uncertainty * uncertainty;
        let pred_var = self.var + VAR_GROWTH;
        let est = (sample_var * est + pred_var * sample) / (sample_var + pred_var);
        self.var = sample_var * pred_var / (sample_var + pred_var);
        self.estimate_kbps = Some(est.max(0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(a: &mut AckedBitrate, from_us: i64, to_us: i64, every_us: i64, bytes: usize) {
        let mut t = from_us;
        while t < to_us {
            a.on_packet(t, bytes);
            t += every_us;
        }
    }

    #[test]
    fn measures_a_steady_rate_and_follows_a_drop() {
        let mut a = AckedBitrate::default();
        // 1000 bytes every 8 ms = 1 Mbit/s, from an arbitrary receiver clock base.
        let base = 7_000_000_000;
        feed(&mut a, base, base + 2_000_000, 8_000, 1000);
        let b = a.bitrate_bps().unwrap();
        assert!((980_000..1_020_000).contains(&b), "{b}");
        // Halved: the estimate follows within a second.
        feed(&mut a, base + 2_000_000, base + 3_000_000, 16_000, 1000);
        let b = a.bitrate_bps().unwrap();
        assert!((500_000..560_000).contains(&b), "{b}");
        // The recent rate: 15 packets after the first in the last 250 ms (240 ms span).
        assert_eq!(a.recent_bps(), Some(500_000));
    }

    #[test]
    fn a_rate_step_the_sender_announces_is_followed_within_a_few_windows() {
        let base = 1_000_000;
        let step = |announce: bool| {
            let mut a = AckedBitrate::default();
            // 500 kbit/s for 3 s, then 1.5 Mbit/s for 300 ms (two windows).
            feed(&mut a, base, base + 3_000_000, 16_000, 1000);
            if announce {
                a.expect_fast_rate_change();
            }
            feed(&mut a, base + 3_000_000, base + 3_300_000, 5_333, 1000);
            a.bitrate_bps().unwrap()
        };
        let (quiet, announced) = (step(false), step(true));
        assert!(quiet < 800_000, "{quiet}");
        assert!(announced > 1_000_000, "{announced}");
    }

    #[test]
    fn backwards_and_huge_jumps_do_not_panic() {
        let mut a = AckedBitrate::default();
        a.on_packet(i64::MAX - 10, 1200);
        a.on_packet(i64::MIN, 1200);
        a.on_packet(0, usize::MAX);
        a.on_packet(i64::MAX, 1200);
        a.on_packet(i64::MAX, 1200);
        let _ = a.bitrate_bps();
    }
}
