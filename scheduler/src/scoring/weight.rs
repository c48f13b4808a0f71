//! Placement weights on a fixed integer scale, and the smoothing step between two of them.
//!
//! Weights are integers (`0..=WEIGHT_UNITS`, where `WEIGHT_UNITS` is the full weight W) so that
//! smoothing is exact: a ramp takes the same number of ticks on every machine and a snapshot
//! restores the very same weight.

use serde::{Deserialize, Serialize};

/// Weight units per full weight W: the resolution is W/10 000.
pub const WEIGHT_UNITS: u32 = 10_000;

/// A placement weight in `0..=WEIGHT_UNITS` units. 0 means "place nothing here".
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(try_from = "u32", into = "u32")]
pub struct Weight(u32);

/// A weight above [`WEIGHT_UNITS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("weight {0} is above the full scale {WEIGHT_UNITS}")]
pub struct WeightOutOfRange(pub u32);

impl Weight {
    /// No placement.
    pub const ZERO: Weight = Weight(0);
    /// The full weight W.
    pub const FULL: Weight = Weight(WEIGHT_UNITS);

    /// A weight of `units`, clamped to [`Weight::FULL`].
    pub const fn from_units(units: u32) -> Weight {
        if units > WEIGHT_UNITS {
            Weight::FULL
        } else {
            Weight(units)
        }
    }

    /// The weight nearest to `fraction · W`; the fraction is clamped into `[0, 1]`, NaN is 0.
    pub fn from_fraction(fraction: f64) -> Weight {
        if fraction.is_nan() {
            return Weight::ZERO;
        }
        // In range after the clamp, so the cast neither truncates nor saturates.
        Weight((fraction.clamp(0.0, 1.0) * f64::from(WEIGHT_UNITS)).round() as u32)
    }

    /// The weight in units.
    pub const fn units(self) -> u32 {
        self.0
    }

    /// The weight as a fraction of W, in `[0, 1]`.
    pub fn fraction(self) -> f64 {
        f64::from(self.0) / f64::from(WEIGHT_UNITS)
    }

    /// Whether the placement hash may send anything here.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl TryFrom<u32> for Weight {
    type Error = WeightOutOfRange;
    fn try_from(units: u32) -> Result<Self, Self::Error> {
        if units > WEIGHT_UNITS {
            Err(WeightOutOfRange(units))
        } else {
            Ok(Weight(units))
        }
    }
}

impl From<Weight> for u32 {
    fn from(w: Weight) -> u32 {
        w.0
    }
}

/// How far a weight may move in one tick: `max(current · max_step_permille / 1000, min_step)`.
///
/// The relative bound alone would keep a node at 0 for ever, so `min_step` is the absolute floor
/// that lets it leave 0; below `min_step · 1000 / max_step_permille` (0.1 W with the defaults) the
/// floor is the larger of the two and the relative change per tick exceeds 10 %.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Smoothing {
    /// Largest change per tick relative to the current weight, per mille (100 = 10 %).
    pub max_step_permille: u32,
    /// Smallest change per tick, absolute.
    pub min_step: Weight,
}

impl Default for Smoothing {
    fn default() -> Self {
        Self {
            max_step_permille: 100,
            min_step: Weight(WEIGHT_UNITS / 100),
        }
    }
}

impl Smoothing {
    /// The largest change allowed from `current` in one tick, in units.
    pub fn max_step(&self, current: Weight) -> u32 {
        // current <= 10 000 and permille <= 1000 (validated), so this cannot overflow.
        let relative = current.0 * self.max_step_permille / 1000;
        relative.max(self.min_step.0)
    }

    /// One tick's move from `current` towards `target`: never past the target, never more than
    /// [`Smoothing::max_step`].
    pub fn step(&self, current: Weight, target: Weight) -> Weight {
        let max = self.max_step(current);
        if target.0 > current.0 {
            Weight(current.0 + (target.0 - current.0).min(max))
        } else {
            Weight(current.0 - (current.0 - target.0).min(max))
        }
    }

    /// Ticks [`Smoothing::step`] takes from `from` to `to`.
    pub fn ticks_between(&self, from: Weight, to: Weight) -> u32 {
        let (mut w, mut n) = (from, 0);
        while w != to {
            w = self.step(w, to);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fractions_round_to_the_nearest_unit() {
        assert_eq!(Weight::from_fraction(0.25), Weight(2_500));
        assert_eq!(Weight::from_fraction(2.0 / 3.0), Weight(6_667));
        assert_eq!(Weight::from_fraction(-0.5), Weight::ZERO);
        assert_eq!(Weight::from_fraction(1.5), Weight::FULL);
        assert_eq!(Weight::from_fraction(f64::NAN), Weight::ZERO);
        assert_eq!(Weight::from_units(20_000), Weight::FULL);
        assert_eq!(Weight(5_000).fraction(), 0.5);
    }

    #[test]
    fn weights_above_full_scale_do_not_deserialize() {
        assert_eq!(
            serde_json::from_str::<Weight>("10000").unwrap(),
            Weight::FULL
        );
        assert!(serde_json::from_str::<Weight>("10001").is_err());
    }

    #[test]
    fn ramp_from_zero_to_full_follows_the_documented_sequence() {
        let s = Smoothing::default();
        let mut w = Weight::ZERO;
        let mut seen = vec![];
        while w != Weight::FULL {
            w = s.step(w, Weight::FULL);
            seen.push(w.0);
        }
        assert_eq!(
            seen,
            [
                100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, // +0.01 W floor
                1100, 1210, 1331, 1464, 1610, 1771, 1948, 2142, 2356, 2591, // then +10 %
                2850, 3135, 3448, 3792, 4171, 4588, 5046, 5550, 6105, 6715, //
                7386, 8124, 8936, 9829, 10000,
            ]
        );
        assert_eq!(s.ticks_between(Weight::ZERO, Weight::FULL), 35);
        assert_eq!(s.ticks_between(Weight::ZERO, Weight(5_000)), 27);
        assert_eq!(s.ticks_between(Weight::ZERO, Weight(500)), 5);
        assert_eq!(s.ticks_between(Weight::FULL, Weight::ZERO), 32);
    }

    proptest! {
        #[test]
        fn a_step_never_exceeds_ten_percent_or_the_floor_and_never_overshoots(
            targets in proptest::collection::vec(0..=WEIGHT_UNITS, 1..200),
            start in 0..=WEIGHT_UNITS,
        ) {
            let s = Smoothing::default();
            let mut w = Weight(start);
            for t in targets {
                let t = Weight(t);
                let next = s.step(w, t);
                let delta = next.0.abs_diff(w.0);
                // 10 % of the current weight, or the 0.01 W floor, whichever is larger.
                prop_assert!(delta * 10 <= w.0 || delta <= 100, "{w:?} -> {next:?}");
                prop_assert!(next.0.abs_diff(t.0) <= w.0.abs_diff(t.0));
                prop_assert!((w.0.min(t.0)..=w.0.max(t.0)).contains(&next.0));
                w = next;
            }
        }
    }
}
