//! Packet index estimation (RFC 3711 §3.3.1, Appendix A) and the sliding replay window.

use super::error::SrtpError;

/// Number of indices behind the highest one that the window remembers.
pub(crate) const WINDOW_SIZE: u64 = 128;

/// Largest 48-bit SRTP packet index.
pub(crate) const MAX_RTP_INDEX: u64 = (1 << 48) - 1;

/// Largest 31-bit SRTCP index.
pub(crate) const MAX_RTCP_INDEX: u32 = (1 << 31) - 1;

/// The 48-bit index whose low 16 bits are `seq` and which lies closest to `highest`.
///
/// This is Appendix A's choice of `v` among ROC-1, ROC and ROC+1. A guess below zero means the
/// packet predates the stream (`TooOld`); one past 2^48 - 1 means the ROC is exhausted.
pub(crate) fn estimate_index(highest: u64, seq: u16) -> Result<u64, SrtpError> {
    let roc = highest >> 16;
    let s_l = highest & 0xffff;
    let seq = u64::from(seq);
    let v = if s_l < 0x8000 {
        if seq > s_l + 0x8000 {
            roc.checked_sub(1).ok_or(SrtpError::TooOld)?
        } else {
            roc
        }
    } else if s_l - 0x8000 > seq {
        roc + 1
    } else {
        roc
    };
    let index = (v << 16) | seq;
    if index > MAX_RTP_INDEX {
        return Err(SrtpError::IndexExhausted);
    }
    Ok(index)
}

/// Which of the last [`WINDOW_SIZE`] indices up to and including the highest were accepted.
/// Bit `i` stands for `highest - i`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplayWindow {
    pub(crate) bits: u128,
}

impl ReplayWindow {
    /// A window that has seen exactly its highest index.
    pub(crate) fn first() -> Self {
        Self { bits: 1 }
    }

    pub(crate) fn from_halves(lo: u64, hi: u64) -> Self {
        Self {
            bits: (u128::from(hi) << 64) | u128::from(lo),
        }
    }

    pub(crate) fn lo(self) -> u64 {
        self.bits as u64
    }

    pub(crate) fn hi(self) -> u64 {
        (self.bits >> 64) as u64
    }

    /// Whether `index` may still be accepted; changes nothing.
    pub(crate) fn check(self, highest: u64, index: u64) -> Result<(), SrtpError> {
        let Some(delta) = highest.checked_sub(index) else {
            return Ok(());
        };
        if delta >= WINDOW_SIZE {
            return Err(SrtpError::TooOld);
        }
        if (self.bits >> delta) & 1 == 1 {
            return Err(SrtpError::Replayed);
        }
        Ok(())
    }

    /// Records `index` (which passed [`check`](Self::check)) and returns the new highest index.
    pub(crate) fn accept(&mut self, highest: u64, index: u64) -> u64 {
        match index.checked_sub(highest) {
            Some(0) | None => {
                let delta = highest - index;
                if delta < WINDOW_SIZE {
                    self.bits |= 1 << delta;
                }
                highest
            }
            Some(shift) => {
                self.bits = if shift >= WINDOW_SIZE {
                    0
                } else {
                    self.bits << shift
                };
                self.bits |= 1;
                index
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_follows_appendix_a() {
        // In the middle of a ROC, the nearest index wins.
        assert_eq!(estimate_index(0x0001_1000, 0x1001), Ok(0x0001_1001));
        assert_eq!(estimate_index(0x0001_1000, 0x0fff), Ok(0x0001_0fff));
        // s_l high, small seq: the sequence number wrapped.
        assert_eq!(estimate_index(0x0000_fff0, 0x0005), Ok(0x0001_0005));
        // s_l low, large seq: a late packet from before the wrap.
        assert_eq!(estimate_index(0x0001_0005, 0xfff0), Ok(0x0000_fff0));
        // Boundaries of the 2^15 half window.
        assert_eq!(estimate_index(0x0001_0000, 0x8000), Ok(0x0001_8000));
        assert_eq!(estimate_index(0x0001_0000, 0x8001), Ok(0x0000_8001));
        assert_eq!(estimate_index(0x0001_8000, 0x0000), Ok(0x0001_0000));
        assert_eq!(estimate_index(0x0001_8001, 0x0000), Ok(0x0002_0000));
    }

    #[test]
    fn estimate_rejects_negative_and_exhausted() {
        assert_eq!(estimate_index(0x0000_0010, 0xfff0), Err(SrtpError::TooOld));
        assert_eq!(
            estimate_index(MAX_RTP_INDEX, 0x0001),
            Err(SrtpError::IndexExhausted)
        );
        assert_eq!(estimate_index(MAX_RTP_INDEX, 0xfffe), Ok(MAX_RTP_INDEX - 1));
    }

    #[test]
    fn window_tracks_exactly_128_indices() {
        let mut w = ReplayWindow::first();
        let mut highest = 1000;
        assert_eq!(w.check(highest, 1000), Err(SrtpError::Replayed));
        assert_eq!(w.check(highest, 1000 - 127), Ok(()));
        assert_eq!(w.check(highest, 1000 - 128), Err(SrtpError::TooOld));
        highest = w.accept(highest, 1000 - 127);
        assert_eq!(highest, 1000);
        assert_eq!(w.check(highest, 1000 - 127), Err(SrtpError::Replayed));
        highest = w.accept(highest, 1001);
        assert_eq!(highest, 1001);
        // 873 slid out of the window: it is now too old rather than a replay.
        assert_eq!(w.check(highest, 873), Err(SrtpError::TooOld));
        assert_eq!(w.check(highest, 1000), Err(SrtpError::Replayed));
        assert_eq!(w.check(highest, 999), Ok(()));
        highest = w.accept(highest, 5000);
        assert_eq!((highest, w.bits), (5000, 1));
    }

    #[test]
    fn window_halves_round_trip() {
        let w = ReplayWindow {
            bits: 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        };
        assert_eq!(ReplayWindow::from_halves(w.lo(), w.hi()), w);
    }
}
