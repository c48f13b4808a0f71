//! Delay-based congestion detection: packets grouped into send bursts, the
//! trend of the queueing delay between groups, and an overuse detector with
//! an adaptive threshold (GCC, draft-ietf-rmcat-gcc-02 §5; libwebrtc's
//! `InterArrivalDelta` and `TrendlineEstimator`).
//!
//! Why groups: single packets of one burst leave the sender together and
//! their arrival spacing only shows the bottleneck's serialisation; the
//! delay *between* bursts is what grows when the sender outpaces the link.
//! Why a trend: one late group is jitter; a queue that fills makes the delay
//! grow steadily, which a regression over ~20 groups sees through noise.
//! Why an adaptive threshold: on a jittery path a fixed threshold would cry
//! overuse all the time, and one tuned for jitter would be deaf on a clean
//! path (and lose against loss-based flows such as TCP).

use std::collections::VecDeque;
use std::time::Instant;

use crate::time::signed_us;

/// Packets sent within this span of a group's first packet form one group.
const SEND_GROUP_US: i64 = 5_000;
/// A packet arriving this soon after its group's last one, and earlier than
/// its send spacing predicts, is part of the same burst (the network
/// delivered a queued burst at once).
const BURST_DELTA_US: i64 = 5_000;
/// A burst never lasts longer than this.
const MAX_BURST_US: i64 = 100_000;
/// The receiver's clock jumped if arrival spacing exceeds local spacing by
/// this much: start over.
const ARRIVAL_JUMP_US: i64 = 3_000_000;
/// Consecutive groups arriving "before" their predecessor that mean the
/// receiver's clock went backwards: start over.
const REORDER_RESET: u32 = 3;

/// Groups in the regression window.
const WINDOW: usize = 20;
/// Exponential smoothing of the accumulated delay.
const SMOOTHING: f64 = 0.9;
/// Gain of the slope against the threshold.
const THRESHOLD_GAIN: f64 = 4.0;
/// The slope is scaled by the number of deltas seen, up to this many.
const MAX_DELTAS_GAIN: u32 = 60;
/// Initial adaptive threshold (ms-equivalent of the modified trend).
pub(crate) const INITIAL_THRESHOLD: f64 = 12.5;
const MIN_THRESHOLD: f64 = 6.0;
const MAX_THRESHOLD: f64 = 600.0;
/// Threshold adaptation when the trend is above / below it.
const K_UP: f64 = 0.0087;
const K_DOWN: f64 = 0.039;
/// Trends this far above the threshold are spikes (a sudden capacity drop):
/// the threshold does not adapt to them.
const MAX_ADAPT_OFFSET: f64 = 15.0;
/// The trend must stay above the threshold this long (ms) to be overuse.
const OVERUSE_TIME_MS: f64 = 10.0;

/// What the detector concludes about the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Usage {
    /// Delay stable.
    #[default]
    Normal,
    /// Delay falling: queues are draining.
    Underusing,
    /// Delay growing: the sender outpaces the bottleneck.
    Overusing,
}

impl Usage {
    pub fn to_u32(self) -> u32 {
        match self {
            Usage::Normal => 0,
            Usage::Underusing => 1,
            Usage::Overusing => 2,
        }
    }

    pub fn from_u32(v: u32) -> Self {
        match v {
            1 => Usage::Underusing,
            2 => Usage::Overusing,
            _ => Usage::Normal,
        }
    }
}

/// A group of packets sent in one burst.
#[derive(Debug, Clone, Copy)]
struct Group {
    first_send: Instant,
    /// Latest send time in the group.
    last_send: Instant,
    first_arrival: i64,
    /// Arrival of the packet added last (the group's completion).
    last_arrival: i64,
    /// When the sender learnt of that arrival (feedback processing time).
    last_local: Instant,
}

impl Group {
    fn new(sent: Instant, arrival: i64, local: Instant) -> Self {
        Self {
            first_send: sent,
            last_send: sent,
            first_arrival: arrival,
            last_arrival: arrival,
            last_local: local,
        }
    }
}

/// The spacing of two consecutive complete groups.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GroupDelta {
    pub send_ms: f64,
    pub arrival_ms: f64,
    /// Arrival of the later group, µs in the receiver's clock.
    pub arrival_us: i64,
}

/// Turns packets (in arrival order) into group deltas.
#[derive(Debug, Clone, Default)]
pub(crate) struct InterArrival {
    current: Option<Group>,
    prev: Option<Group>,
    reordered: u32,
}

impl InterArrival {
    /// Adds a received packet; returns the delta of the previous two groups
    /// when this packet starts a new one.
    pub fn push(&mut self, sent: Instant, arrival: i64, local: Instant) -> Option<GroupDelta> {
        let Some(cur) = self.current.as_mut() else {
            self.current = Some(Group::new(sent, arrival, local));
            return None;
        };
        if sent < cur.first_send {
            // Sent before the current group began: reordered, skip it.
            return None;
        }
        if !starts_new_group(cur, sent, arrival) {
            cur.last_send = cur.last_send.max(sent);
            cur.last_arrival = arrival;
            cur.last_local = local;
            return None;
        }
        let cur = *cur;
        let mut delta = None;
        if let Some(prev) = self.prev {
            let send_us = signed_us(cur.last_send, prev.last_send);
            let arrival_us = cur.last_arrival.saturating_sub(prev.last_arrival);
            let local_us = signed_us(cur.last_local, prev.last_local);
            if arrival_us.saturating_sub(local_us) >= ARRIVAL_JUMP_US {
                self.reset();
                self.current = Some(Group::new(sent, arrival, local));
                return None;
            }
            if arrival_us < 0 {
                self.reordered += 1;
                if self.reordered >= REORDER_RESET {
                    self.reset();
                }
                return None;
            }
            self.reordered = 0;
            delta = Some(GroupDelta {
                send_ms: send_us as f64 / 1000.0,
                arrival_ms: arrival_us as f64 / 1000.0,
                arrival_us: cur.last_arrival,
            });
        }
        self.prev = Some(cur);
        self.current = Some(Group::new(sent, arrival, local));
        delta
    }

    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Whether a packet begins a new group rather than joining `cur`.
fn starts_new_group(cur: &Group, sent: Instant, arrival: i64) -> bool {
    let arrival_delta = arrival.saturating_sub(cur.last_arrival);
    let send_delta = signed_us(sent, cur.last_send);
    if send_delta == 0 {
        return false;
    }
    let propagation_delta = arrival_delta.saturating_sub(send_delta);
    let in_burst = propagation_delta < 0
        && arrival_delta <= BURST_DELTA_US
        && arrival.saturating_sub(cur.first_arrival) < MAX_BURST_US;
    !in_burst && signed_us(sent, cur.first_send) > SEND_GROUP_US
}

/// Least-squares slope of the smoothed delay over arrival time.
fn slope(points: &VecDeque<(f64, f64)>) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in points {
        num += (x - mx) * (y - my);
        den += (x - mx) * (x - mx);
    }
    let s = num / den;
    (den != 0.0 && s.is_finite()).then_some(s)
}

/// The trendline estimator and the overuse detector on top of it.
#[derive(Debug, Clone)]
pub(crate) struct Trendline {
    window: VecDeque<(f64, f64)>,
    first_arrival_us: Option<i64>,
    accumulated_ms: f64,
    smoothed_ms: f64,
    deltas: u32,
    prev_trend: f64,
    threshold: f64,
    last_threshold_us: Option<i64>,
    /// Time (ms) the trend has been above the threshold; None when below.
    over_using_ms: Option<f64>,
    overuse_count: u32,
    usage: Usage,
}

impl Default for Trendline {
    fn default() -> Self {
        Self {
            window: VecDeque::with_capacity(WINDOW + 1),
            first_arrival_us: None,
            accumulated_ms: 0.0,
            smoothed_ms: 0.0,
            deltas: 0,
            prev_trend: 0.0,
            threshold: INITIAL_THRESHOLD,
            last_threshold_us: None,
            over_using_ms: None,
            overuse_count: 0,
            usage: Usage::Normal,
        }
    }
}

impl Trendline {
    /// A detector that continues from a snapshot's threshold and hypothesis.
    pub fn restored(threshold: f64, usage: Usage) -> Self {
        let threshold = if threshold.is_finite() {
            threshold.clamp(MIN_THRESHOLD, MAX_THRESHOLD)
        } else {
            INITIAL_THRESHOLD
        };
        Self {
            threshold,
            usage,
            ..Self::default()
        }
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// Adds one group delta and updates the hypothesis.
    pub fn update(&mut self, d: GroupDelta) {
        let delay_ms = d.arrival_ms - d.send_ms;
        self.deltas = (self.deltas + 1).min(1000);
        let first = *self.first_arrival_us.get_or_insert(d.arrival_us);
        self.accumulated_ms += delay_ms;
        self.smoothed_ms = SMOOTHING * self.smoothed_ms + (1.0 - SMOOTHING) * self.accumulated_ms;
        let x_ms = d.arrival_us.saturating_sub(first) as f64 / 1000.0;
        self.window.push_back((x_ms, self.smoothed_ms));
        if self.window.len() > WINDOW {
            self.window.pop_front();
        }
        let mut trend = self.prev_trend;
        if self.window.len() == WINDOW
            && let Some(s) = slope(&self.window)
        {
            trend = s;
        }
        self.detect(trend, d.send_ms, d.arrival_us);
    }

    fn detect(&mut self, trend: f64, send_delta_ms: f64, now_us: i64) {
        if self.deltas < 2 {
            self.usage = Usage::Normal;
            return;
        }
        let modified = f64::from(self.deltas.min(MAX_DELTAS_GAIN)) * trend * THRESHOLD_GAIN;
        if modified > self.threshold {
            let t = match self.over_using_ms {
                // Assume it has been overusing half the time since the last sample.
                None => send_delta_ms / 2.0,
                Some(t) => t + send_delta_ms,
            };
            self.over_using_ms = Some(t);
            self.overuse_count = self.overuse_count.saturating_add(1);
            if t > OVERUSE_TIME_MS && self.overuse_count > 1 && trend >= self.prev_trend {
                self.over_using_ms = Some(0.0);
                self.overuse_count = 0;
                self.usage = Usage::Overusing;
            }
        } else if modified < -self.threshold {
            self.over_using_ms = None;
            self.overuse_count = 0;
            self.usage = Usage::Underusing;
        } else {
            self.over_using_ms = None;
            self.overuse_count = 0;
            self.usage = Usage::Normal;
        }
        self.prev_trend = trend;
        self.adapt_threshold(modified, now_us);
    }

    fn adapt_threshold(&mut self, modified: f64, now_us: i64) {
        let last = *self.last_threshold_us.get_or_insert(now_us);
        self.last_threshold_us = Some(now_us);
        if modified.abs() > self.threshold + MAX_ADAPT_OFFSET {
            return;
        }
        let k = if modified.abs() < self.threshold {
            K_DOWN
        } else {
            K_UP
        };
        let dt_ms = (now_us.saturating_sub(last) as f64 / 1000.0).clamp(0.0, 100.0);
        self.threshold += k * (modified.abs() - self.threshold) * dt_ms;
        self.threshold = self.threshold.clamp(MIN_THRESHOLD, MAX_THRESHOLD);
    }
}

/// Groups and trendline together: feed received packets in arrival order.
#[derive(Debug, Clone, Default)]
pub(crate) struct DelayDetector {
    inter: InterArrival,
    pub trend: Trendline,
}

impl DelayDetector {
    pub fn restored(threshold: f64, usage: Usage) -> Self {
        Self {
            inter: InterArrival::default(),
            trend: Trendline::restored(threshold, usage),
        }
    }

    /// A packet sent at `sent` arrived at `arrival` (µs, receiver clock); the
    /// sender learnt it at `local`.
    pub fn on_packet(&mut self, sent: Instant, arrival: i64, local: Instant) {
        if let Some(d) = self.inter.push(sent, arrival, local) {
            self.trend.update(d);
        }
    }

    pub fn usage(&self) -> Usage {
        self.trend.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn packets_of_one_burst_form_one_group() {
        let t0 = Instant::now();
        let mut ia = InterArrival::default();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        // Group 1: sent at 0 and 2 ms; group 2 at 10 ms; group 3 at 20 ms.
        assert_eq!(ia.push(ms(0), 1_000_000, ms(100)), None);
        assert_eq!(ia.push(ms(2), 1_003_000, ms(100)), None);
        assert_eq!(ia.push(ms(10), 1_011_000, ms(100)), None);
        // Group 3 completes group 2: send 10 − 2 = 8 ms, arrival 11 − 3 = 8 ms.
        assert_eq!(
            ia.push(ms(20), 1_021_500, ms(100)),
            Some(GroupDelta {
                send_ms: 8.0,
                arrival_ms: 8.0,
                arrival_us: 1_011_000
            })
        );
    }

    #[test]
    fn a_burst_delivered_at_once_joins_its_group() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut ia = InterArrival::default();
        ia.push(ms(0), 0, ms(0));
        // Sent 8 ms later but arrived 1 ms later: queued behind the first, same burst.
        ia.push(ms(8), 1_000, ms(0));
        ia.push(ms(20), 20_000, ms(0));
        let d = ia.push(ms(40), 40_000, ms(0)).unwrap();
        assert_eq!((d.send_ms, d.arrival_ms), (12.0, 19.0));
    }

    #[test]
    fn growing_delay_is_overuse_and_steady_delay_is_normal() {
        let mut t = Trendline::default();
        // 40 groups 10 ms apart arriving 10 ms apart: normal.
        for i in 0..40 {
            t.update(GroupDelta {
                send_ms: 10.0,
                arrival_ms: 10.0,
                arrival_us: i * 10_000,
            });
        }
        assert_eq!(t.usage(), Usage::Normal);
        // Each group arrives 2 ms later than sent spacing (a 20 % overload).
        let base = 400_000;
        let mut over_at = None;
        for i in 0..40 {
            t.update(GroupDelta {
                send_ms: 10.0,
                arrival_ms: 12.0,
                arrival_us: base + i * 12_000,
            });
            if t.usage() == Usage::Overusing && over_at.is_none() {
                over_at = Some(i);
            }
        }
        assert_eq!(over_at, Some(10));
    }

    #[test]
    fn clock_jump_resets_the_groups() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut ia = InterArrival::default();
        ia.push(ms(0), 0, ms(0));
        ia.push(ms(10), 10_000, ms(0));
        // The receiver clock jumps 10 s ahead; this packet still completes the group before.
        assert!(ia.push(ms(20), 10_020_000, ms(0)).is_some());
        // The jump is seen between the next two groups: start over.
        assert_eq!(ia.push(ms(30), 10_030_000, ms(0)), None);
        assert_eq!(ia.push(ms(40), 10_040_000, ms(0)), None);
        assert!(ia.push(ms(50), 10_050_000, ms(0)).is_some());
    }
}
