//! Extension of RTP's wrapping 16-bit sequence numbers and 32-bit timestamps
//! to monotonic 64-bit counters, so every comparison on the media path is a
//! plain integer comparison.

/// Unwraps a wrapping counter of `BITS` bits into a 64-bit extended value.
///
/// The first value seen is placed at `1 << BITS` (one cycle in), so a packet
/// that arrives slightly before the first one still has a positive extended
/// value. Values are interpreted relative to the highest seen: within half
/// the range ahead is newer, otherwise older.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unwrapper<const BITS: u32> {
    highest: Option<u64>,
}

/// 16-bit RTP sequence numbers.
pub type SeqUnwrapper = Unwrapper<16>;
/// 32-bit RTP timestamps.
pub type TsUnwrapper = Unwrapper<32>;

impl<const BITS: u32> Unwrapper<BITS> {
    const RANGE: u64 = 1 << BITS;
    const MASK: u64 = Self::RANGE - 1;
    const HALF: u64 = Self::RANGE / 2;

    /// A fresh unwrapper.
    pub const fn new() -> Self {
        Self { highest: None }
    }

    /// Resumes from a saved highest extended value.
    pub const fn from_highest(highest: Option<u64>) -> Self {
        Self { highest }
    }

    /// The highest extended value seen.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Extends `value` without updating state.
    pub fn peek(&self, value: u64) -> u64 {
        let value = value & Self::MASK;
        let Some(highest) = self.highest else {
            return Self::RANGE + value;
        };
        let cycle = highest & !Self::MASK;
        let candidate = cycle | value;
        let low = highest & Self::MASK;
        if value > low {
            if value - low < Self::HALF || candidate < Self::RANGE {
                candidate
            } else {
                candidate - Self::RANGE
            }
        } else if low - value <= Self::HALF {
            candidate
        } else {
            // Past the top of u64 (a highest value no stream reaches, from a peer's snapshot)
            // it stays in the highest cycle instead of overflowing.
            candidate.checked_add(Self::RANGE).unwrap_or(candidate)
        }
    }

    /// Extends `value` and records it.
    pub fn unwrap(&mut self, value: u64) -> u64 {
        let ext = self.peek(value);
        if self.highest.is_none_or(|h| ext > h) {
            self.highest = Some(ext);
        }
        ext
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_highest_value_at_the_top_of_u64_does_not_overflow() {
        // What a peer's snapshot may carry (found by the munger_state fuzz target).
        let u = SeqUnwrapper::from_highest(Some(u64::MAX - 10));
        assert_eq!(u.peek(0x0001) & 0xffff, 0x0001);
        assert_eq!(u.peek(0xfff0), u64::MAX - 15);
    }

    #[test]
    fn seq_wraps_forward_and_back() {
        let mut u = SeqUnwrapper::new();
        assert_eq!(u.unwrap(65534), 65536 + 65534);
        assert_eq!(u.unwrap(65535), 65536 + 65535);
        assert_eq!(u.unwrap(0), 2 * 65536);
        assert_eq!(
            u.unwrap(65535),
            65536 + 65535,
            "late packet from before the wrap"
        );
        assert_eq!(u.unwrap(1), 2 * 65536 + 1);
        assert_eq!(u.highest(), Some(2 * 65536 + 1));
    }

    #[test]
    fn first_value_leaves_room_for_older_packets() {
        let mut u = SeqUnwrapper::new();
        assert_eq!(u.unwrap(3), 65536 + 3);
        assert_eq!(
            u.unwrap(65530),
            65530,
            "older than the first, across the wrap"
        );
    }

    #[test]
    fn timestamps_wrap() {
        let mut u = TsUnwrapper::new();
        let base = 1u64 << 32;
        assert_eq!(u.unwrap(u32::MAX as u64 - 10), base + u32::MAX as u64 - 10);
        assert_eq!(u.unwrap(5), 2 * base + 5);
    }

    proptest! {
        #[test]
        fn unwrap_recovers_any_walk_with_small_steps(start in 0u64..65536, steps in proptest::collection::vec(-1000i64..3000, 1..500)) {
            let mut u = SeqUnwrapper::new();
            let mut truth = (1u64 << 16) + start;
            prop_assert_eq!(u.unwrap(start), truth);
            let mut highest = truth;
            for step in steps {
                let next = truth as i64 + step;
                // Stay inside the representable window around the highest value.
                if next < 0 || (highest as i64 - next) >= (1 << 15) { continue; }
                truth = next as u64;
                prop_assert_eq!(u.unwrap(truth & 0xffff), truth);
                highest = highest.max(truth);
            }
        }
    }
}
