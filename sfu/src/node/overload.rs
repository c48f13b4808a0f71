//! Overload without queueing.
//!
//! A node that is asked to send more than its core can forward does not build a queue of its
//! own: each datagram's fan-out goes out before the next datagram is read. What grows is the
//! socket's receive buffer (8 MiB: seconds of media), and with it the latency of everything the
//! node delivers. The driver tells the core how long each datagram waited there (the kernel's
//! receive stamp, [`crate::udp::RecvBatch::waited`]); this controller turns that delay into a
//! *shed ratio*: the share of video viewers that skip the current group of pictures.
//!
//! Shedding is by whole frames and whole GOPs, never by packets: a viewer leaves at a frame
//! boundary and comes back at a keyframe (its munger re-bases sequence numbers, so it sees no
//! gap to NACK). Which viewers skip is a hash of the viewer and the stream's GOP number, so the
//! skipped set changes at every keyframe and every viewer keeps decoding; while viewers are
//! skipped the node asks the publisher for a keyframe every [`OverloadConfig::rotate_every`].
//! Audio, relay links and retransmissions are never shed.
//!
//! The control law, once per [`OverloadConfig::window`]: while the mean delay of the window is
//! above the target and not falling, shed more (in proportion to how far above, up to four
//! steps); once it is below half the target, shed less, slowly. Viewers leave mid-GOP only
//! while the largest delay is three times the target ([`Overload::urgent`]).

use std::time::{Duration, Instant};

/// Tuning of the overload controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverloadConfig {
    /// Queueing delay the node aims to stay under; `Duration::ZERO` turns shedding off.
    pub target: Duration,
    /// How often the shed ratio is adjusted.
    pub window: Duration,
    /// While viewers are shed, a keyframe is requested this often so that the set rotates.
    pub rotate_every: Duration,
    /// Largest share of video viewers shed.
    pub max_ratio: f64,
}

impl Default for OverloadConfig {
    fn default() -> Self {
        OverloadConfig {
            target: Duration::from_millis(20),
            window: Duration::from_millis(100),
            rotate_every: Duration::from_secs(1),
            max_ratio: 0.95,
        }
    }
}

/// Added to the shed ratio per window above the target (times up to 4).
const STEP_UP: f64 = 0.05;
/// Taken off per window below half the target.
const STEP_DOWN: f64 = 0.02;

/// The controller's state.
#[derive(Debug, Clone)]
pub struct Overload {
    cfg: OverloadConfig,
    window_end: Option<Instant>,
    window_max: Duration,
    window_sum: Duration,
    window_count: u32,
    last_window_max: Duration,
    last_window_mean: Duration,
    ratio: f64,
}

impl Overload {
    /// A controller that sheds nothing yet.
    pub fn new(cfg: OverloadConfig) -> Self {
        Overload {
            cfg,
            window_end: None,
            window_max: Duration::ZERO,
            window_sum: Duration::ZERO,
            window_count: 0,
            last_window_max: Duration::ZERO,
            last_window_mean: Duration::ZERO,
            ratio: 0.0,
        }
    }

    /// Its tuning.
    pub fn config(&self) -> &OverloadConfig {
        &self.cfg
    }

    /// A datagram handled at `now` waited `lag` in the socket before.
    pub fn note(&mut self, now: Instant, lag: Duration) {
        if self.cfg.target.is_zero() {
            return;
        }
        let end = *self.window_end.get_or_insert(now + self.cfg.window);
        if now >= end {
            self.close_window();
            self.window_end = Some(now + self.cfg.window);
        }
        self.window_max = self.window_max.max(lag);
        self.window_sum += lag;
        self.window_count += 1;
    }

    fn close_window(&mut self) {
        let lag = self.window_sum / self.window_count.max(1);
        let target = self.cfg.target;
        if lag > target && lag.as_secs_f64() >= 0.9 * self.last_window_mean.as_secs_f64() {
            let steps = (lag.as_secs_f64() / target.as_secs_f64()).min(4.0);
            self.ratio = (self.ratio + STEP_UP * steps).min(self.cfg.max_ratio);
        } else if lag < target / 2 {
            self.ratio = (self.ratio - STEP_DOWN).max(0.0);
        }
        self.last_window_mean = lag;
        self.last_window_max = self.window_max;
        self.window_max = Duration::ZERO;
        self.window_sum = Duration::ZERO;
        self.window_count = 0;
    }

    /// The share of video viewers that skip the current GOP.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The largest queueing delay of the last full window.
    pub fn lag(&self) -> Duration {
        self.last_window_max
    }

    /// Whether the mean delay is far (three times) above the target: viewers leave mid-GOP,
    /// not only at keyframes. (The largest delay is no measure of it: one keyframe burst to
    /// many viewers is tens of milliseconds of work.)
    pub fn urgent(&self) -> bool {
        let mean = self.window_sum / self.window_count.max(1);
        !self.cfg.target.is_zero() && mean.max(self.last_window_mean) > 3 * self.cfg.target
    }

    /// Whether viewer `viewer` skips GOP `gop` of its stream at the current ratio.
    pub fn sheds(&self, viewer: usize, gop: u64) -> bool {
        self.ratio > 0.0 && unit_hash(viewer as u64, gop) < self.ratio
    }
}

/// A hash of `(a, b)` (splitmix64's finaliser).
pub(crate) fn hash(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(b.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(0x94d0_49bb_1331_11eb);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `h` mapped to [0, 1).
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn unit_hash(a: u64, b: u64) -> f64 {
    unit(hash(a, b))
}

/// `/metrics` gauges of an overload controller: its last measured delay and shed ratio.
pub fn prometheus(lag: Duration, ratio: f64) -> String {
    format!(
        "# HELP ferry_node_ingress_lag_seconds Largest time a datagram waited in the media socket's receive buffer over the last window.\n\
         # TYPE ferry_node_ingress_lag_seconds gauge\n\
         ferry_node_ingress_lag_seconds {}\n\
         # HELP ferry_node_shed_ratio Share of video viewers that skip the current group of pictures because the node is overloaded.\n\
         # TYPE ferry_node_shed_ratio gauge\n\
         ferry_node_shed_ratio {}\n",
        lag.as_secs_f64(),
        ratio
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(o: &mut Overload, t0: Instant, from_ms: u64, to_ms: u64, lag_ms: u64) {
        for ms in from_ms..to_ms {
            o.note(
                t0 + Duration::from_millis(ms),
                Duration::from_millis(lag_ms),
            );
        }
    }

    #[test]
    fn sheds_while_the_delay_is_above_target_and_recovers_below() {
        let t0 = Instant::now();
        let mut o = Overload::new(OverloadConfig::default());
        run(&mut o, t0, 0, 1000, 2);
        assert_eq!(o.ratio(), 0.0);
        // 80 ms: four steps a window (a window closes at the first datagram after it: two
        // of the three so far).
        run(&mut o, t0, 1000, 1300, 80);
        assert!((o.ratio() - 0.4).abs() < 1e-9, "{}", o.ratio());
        // The third closes; then falling: hold.
        run(&mut o, t0, 1300, 1400, 40);
        run(&mut o, t0, 1400, 1500, 30);
        assert!((o.ratio() - 0.6).abs() < 1e-9, "{}", o.ratio());
        // Capped.
        run(&mut o, t0, 1500, 3000, 200);
        assert_eq!(o.ratio(), 0.95);
        // Below half the target: back to zero, slowly (0.02 a window).
        run(&mut o, t0, 3000, 4000, 5);
        assert!(o.ratio() > 0.7, "{}", o.ratio());
        run(&mut o, t0, 4000, 9000, 5);
        assert_eq!(o.ratio(), 0.0);
        assert_eq!(o.lag(), Duration::from_millis(5));
    }

    #[test]
    fn off_when_the_target_is_zero() {
        let t0 = Instant::now();
        let mut o = Overload::new(OverloadConfig {
            target: Duration::ZERO,
            ..OverloadConfig::default()
        });
        run(&mut o, t0, 0, 2000, 500);
        assert_eq!(o.ratio(), 0.0);
        assert!(!o.sheds(1, 1));
    }

    #[test]
    fn the_shed_set_has_the_ratio_s_size_and_rotates_per_gop() {
        let mut o = Overload::new(OverloadConfig::default());
        o.ratio = 0.5;
        let set = |gop| (0..1000).filter(|&v| o.sheds(v, gop)).collect::<Vec<_>>();
        let (a, b) = (set(1), set(2));
        for s in [&a, &b] {
            assert!((430..570).contains(&s.len()), "{}", s.len());
        }
        let both = a.iter().filter(|v| b.contains(v)).count();
        // Independent draws: about a quarter skip both GOPs.
        assert!((180..320).contains(&both), "{both}");
        // Over 8 GOPs nobody is skipped every time (0.5^8 · 1000 ≈ 4 expected): allow a few.
        let always = (0..1000)
            .filter(|&v| (1..=8).all(|g| o.sheds(v, g)))
            .count();
        assert!(always < 15, "{always}");
    }
}
