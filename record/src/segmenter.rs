//! Where segments end: at the first keyframe at least [`SegmentPolicy::min`] after the
//! segment's start. Never elsewhere: a segment that reaches [`SegmentPolicy::max`] without a
//! keyframe goes on (a cut mid-GOP would leave the next segment undecodable) and is reported
//! once as an overrun.

use std::time::Duration;

/// Segment length bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPolicy {
    /// A segment ends at the first keyframe this long after its start.
    pub min: Duration,
    /// A segment longer than this is an overrun (reported, not cut).
    pub max: Duration,
}

impl Default for SegmentPolicy {
    /// 2 s to 6 s.
    fn default() -> Self {
        SegmentPolicy {
            min: Duration::from_secs(2),
            max: Duration::from_secs(6),
        }
    }
}

/// What to do with the frame just seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It belongs to the open segment.
    Continue,
    /// The open segment ends before it; it starts the next one.
    Cut,
    /// It belongs to the open segment, which just passed the maximum with no keyframe.
    Overrun,
}

/// Decides cuts for one recording's cutting track (video, or audio when there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segmenter {
    policy: SegmentPolicy,
    rate: u32,
    /// Media time of the open segment's first frame.
    start: Option<u64>,
    overrun: bool,
}

impl Segmenter {
    /// A segmenter for a track with `rate` ticks per second.
    pub fn new(policy: SegmentPolicy, rate: u32) -> Segmenter {
        Segmenter {
            policy,
            rate,
            start: None,
            overrun: false,
        }
    }

    /// Media time of the open segment's first frame.
    pub fn start(&self) -> Option<u64> {
        self.start
    }

    fn ticks(&self, d: Duration) -> u64 {
        u64::try_from(d.as_nanos() * u128::from(self.rate) / 1_000_000_000).unwrap_or(u64::MAX)
    }

    /// Takes the next frame of the cutting track, at media time `t`. The first frame opens the
    /// first segment (the caller only hands over a keyframe first).
    pub fn handle_frame(&mut self, t: u64, keyframe: bool) -> Decision {
        let Some(start) = self.start else {
            self.start = Some(t);
            return Decision::Continue;
        };
        let len = t.saturating_sub(start);
        if keyframe && len >= self.ticks(self.policy.min) {
            self.start = Some(t);
            self.overrun = false;
            return Decision::Cut;
        }
        if !self.overrun && len > self.ticks(self.policy.max) {
            self.overrun = true;
            return Decision::Overrun;
        }
        Decision::Continue
    }

    /// Starts the next segment at `t` whatever the policy says (a hand-over cut).
    pub fn force_start(&mut self, t: u64) {
        self.start = Some(t);
        self.overrun = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cuts_at_the_first_keyframe_after_the_minimum() {
        let mut s = Segmenter::new(SegmentPolicy::default(), 90_000);
        // 30 fps, keyframes every 1.5 s (45 frames): cuts at 3 s, 6 s, ...
        let mut cuts = Vec::new();
        for i in 0..400u64 {
            if s.handle_frame(i * 3000, i % 45 == 0) == Decision::Cut {
                cuts.push(i);
            }
        }
        assert_eq!(cuts, vec![90, 180, 270, 360]);
    }

    #[test]
    fn no_keyframe_by_the_maximum_goes_on_and_is_reported_once() {
        let mut s = Segmenter::new(SegmentPolicy::default(), 90_000);
        let mut got = Vec::new();
        for i in 0..400u64 {
            let d = s.handle_frame(i * 3000, i == 0 || i == 300);
            if d != Decision::Continue {
                got.push((i, d));
            }
        }
        assert_eq!(got, vec![(181, Decision::Overrun), (300, Decision::Cut)]);
    }

    proptest! {
        /// Cuts happen only at keyframes, at the first keyframe at or past the minimum; a
        /// segment passes the maximum only when no keyframe came between minimum and maximum.
        #[test]
        fn cut_rules_hold(
            frames in proptest::collection::vec((1u64..9000, proptest::bool::weighted(0.05)), 1..600),
            min_ms in 500u64..4000,
            extra_ms in 0u64..4000,
        ) {
            let policy = SegmentPolicy {
                min: Duration::from_millis(min_ms),
                max: Duration::from_millis(min_ms + extra_ms),
            };
            let min = min_ms * 90;
            let max = (min_ms + extra_ms) * 90;
            let mut s = Segmenter::new(policy, 90_000);
            let mut t = 0;
            let mut start = 0;
            let mut overrun_seen = false;
            prop_assert_eq!(s.handle_frame(0, true), Decision::Continue);
            for (step, key) in frames {
                t += step;
                let d = s.handle_frame(t, key);
                let len = t - start;
                match d {
                    Decision::Cut => {
                        prop_assert!(key && len >= min);
                        start = t;
                        overrun_seen = false;
                    }
                    Decision::Overrun => {
                        prop_assert!(!overrun_seen && len > max && !(key && len >= min));
                        overrun_seen = true;
                    }
                    Decision::Continue => prop_assert!(!(key && len >= min)),
                }
                prop_assert_eq!(s.start(), Some(start));
            }
        }
    }
}
