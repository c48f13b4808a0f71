//! One track's extended RTP timestamps onto the recording's media timeline: ticks of the track's
//! clock since the recording began, strictly increasing, with no gap a sender did not make.
//!
//! A track is anchored at its first frame (at the offset from the recording's start that the
//! recorder works out from arrival times or sender reports); later frames move by their RTP
//! timestamp difference. A frame at or before the last one taken is stale (a duplicate, or a
//! frame another recorder already wrote before a hand-over). When RTP time and arrival time
//! disagree by more than [`JUMP_LIMIT_SECS`] (a sender restarted its clock) the track is anchored
//! again so that media time follows arrival time.

use serde::{Deserialize, Serialize};

/// RTP and arrival time may disagree by this much before the track is re-anchored.
pub const JUMP_LIMIT_SECS: u64 = 5;

/// The mapping of one track: plain data that moves with a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackClock {
    /// Ticks per second.
    pub rate: u32,
    /// Extended RTP timestamp of the anchor.
    pub anchor_ext: u64,
    /// Media time of the anchor, in ticks.
    pub anchor_media: u64,
    /// Extended RTP timestamp of the last frame taken.
    pub last_ext: u64,
    /// Media time of the last frame taken.
    pub last_media: u64,
}

/// What became of a frame's timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped {
    /// Its media time.
    At(u64),
    /// At or before the last frame taken: drop it.
    Stale,
}

impl TrackClock {
    /// A clock whose first frame, at extended timestamp `ext`, lies at media time `media`.
    pub fn start(rate: u32, ext: u64, media: u64) -> TrackClock {
        TrackClock {
            rate,
            anchor_ext: ext,
            anchor_media: media,
            last_ext: ext,
            last_media: media,
        }
    }

    /// Maps the frame at extended timestamp `ext`; `elapsed_ticks` is the arrival time since
    /// the last frame taken, in this clock's ticks, when known (it guards against jumps).
    pub fn map(&mut self, ext: u64, elapsed_ticks: Option<u64>) -> Mapped {
        if ext <= self.last_ext {
            return Mapped::Stale;
        }
        let rtp_delta = ext - self.last_ext;
        let limit = u64::from(self.rate) * JUMP_LIMIT_SECS;
        let media = match elapsed_ticks {
            Some(wall) if rtp_delta.abs_diff(wall) > limit => {
                // The sender's clock jumped: follow arrival time from here on.
                let media = self.last_media.saturating_add(wall.max(1));
                self.anchor_ext = ext;
                self.anchor_media = media;
                media
            }
            _ => self
                .anchor_media
                .saturating_add(ext.saturating_sub(self.anchor_ext)),
        };
        let media = media.max(self.last_media + 1);
        self.last_ext = ext;
        self.last_media = media;
        Mapped::At(media)
    }
}

/// `ticks` of a `from`-Hz clock in a `to`-Hz clock, rounded down.
pub fn rescale(ticks: u64, from: u32, to: u32) -> u64 {
    if from == 0 {
        return 0;
    }
    let v = u128::from(ticks) * u128::from(to) / u128::from(from);
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Seconds between two 64-bit NTP timestamps (`a - b`), as a signed count of `rate` ticks.
pub fn ntp_diff_ticks(a: u64, b: u64, rate: u32) -> i64 {
    let diff = i128::from(a) - i128::from(b);
    let ticks = diff * i128::from(rate) / (1i128 << 32);
    i64::try_from(ticks).unwrap_or(if ticks < 0 { i64::MIN } else { i64::MAX })
}

/// The signed distance in ticks from RTP timestamp `from` to `to` (32-bit, wrapping).
pub fn rtp_diff(to: u32, from: u32) -> i64 {
    i64::from(to.wrapping_sub(from) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_rtc::seq::TsUnwrapper;
    use proptest::prelude::*;

    #[test]
    fn frames_move_by_their_timestamp_difference() {
        let mut c = TrackClock::start(90_000, 1000, 4500);
        assert_eq!(c.map(4000, Some(3000)), Mapped::At(7500));
        assert_eq!(c.map(4000, Some(0)), Mapped::Stale);
        assert_eq!(c.map(3999, None), Mapped::Stale);
        // 60 s of silence is no jump when arrival agrees.
        assert_eq!(
            c.map(4000 + 60 * 90_000, Some(60 * 90_000)),
            Mapped::At(7500 + 60 * 90_000)
        );
    }

    #[test]
    fn a_clock_jump_follows_arrival_time() {
        let mut c = TrackClock::start(48_000, 0, 0);
        assert_eq!(c.map(960, Some(960)), Mapped::At(960));
        // The sender restarted 10^9 ticks ahead, 20 ms later.
        assert_eq!(c.map(1_000_000_000, Some(960)), Mapped::At(1920));
        assert_eq!(c.map(1_000_000_960, Some(960)), Mapped::At(2880));
    }

    #[test]
    fn ntp_and_rtp_differences() {
        assert_eq!(ntp_diff_ticks(3 << 32, 1 << 32, 90_000), 180_000);
        assert_eq!(ntp_diff_ticks(1 << 32, (1 << 32) + (1 << 31), 1000), -500);
        assert_eq!(rtp_diff(5, u32::MAX - 4), 10);
        assert_eq!(rtp_diff(u32::MAX - 4, 5), -10);
        assert_eq!(rescale(90_000, 90_000, 1000), 1000);
        assert_eq!(rescale(1, 0, 1000), 0);
    }

    proptest! {
        /// Any start, any steps (wrapping the 32-bit timestamp many times), any reordering
        /// within the unwrapper's half range: media time strictly increases, and for in-order
        /// frames it moves exactly by the RTP difference.
        #[test]
        fn monotonic_across_wraparound(
            start in any::<u32>(),
            steps in proptest::collection::vec((1u32..200_000, any::<bool>()), 1..400),
        ) {
            let mut unwrap = TsUnwrapper::new();
            let first = unwrap.unwrap(u64::from(start));
            let mut c = TrackClock::start(90_000, first, 0);
            let mut ts = start;
            let mut last_media = 0;
            for (step, replay) in steps {
                if replay {
                    // A stale copy of an older frame.
                    let old = ts.wrapping_sub(step);
                    let ext = unwrap.unwrap(u64::from(old));
                    prop_assert_eq!(c.map(ext, None), Mapped::Stale);
                }
                ts = ts.wrapping_add(step);
                let ext = unwrap.unwrap(u64::from(ts));
                match c.map(ext, Some(u64::from(step))) {
                    Mapped::At(m) => {
                        prop_assert_eq!(m, last_media + u64::from(step));
                        last_media = m;
                    }
                    Mapped::Stale => prop_assert!(false, "in-order frame taken as stale"),
                }
            }
        }
    }
}
