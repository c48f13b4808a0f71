//! What a viewer's NACKs may cost: the retransmissions a viewer is sent are held to its
//! bandwidth estimate over the last second.
//!
//! Without it, a viewer whose link is full keeps it full with retransmissions of what the
//! link dropped, which the link drops in turn: the loss feeds itself while the estimate sits
//! at its floor (`docs/adaptation.md`, "loss near the lowest layer"). libwebrtc's sender
//! limits its retransmission rate to its target rate the same way (a one-second rate window).
//!
//! libwebrtc and mediasoup also skip a packet resent less than an RTT ago. We tried it and
//! left it out: a receiver may retry sooner than an RTT (ours retries at 1.5× the
//! NACK-to-repair time it measured: 25 ms in the simulation, where the node measured an RTT
//! of 73 ms), and each refused retry is a repair chance lost when the retransmission itself
//! was lost — the simulation's failover tests lost packets for good with it, and limited to
//! links whose delay grows it changed `ferry bench adaptive`'s loss by less than the seeds
//! differ. Pure: the caller passes the time and the estimate.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The window the retransmission rate is measured over.
pub const WINDOW: Duration = Duration::from_secs(1);

/// One viewer's retransmission budget. Not migrated: it describes the last second only.
#[derive(Debug, Clone, Default)]
pub struct ResendBudget {
    sent: VecDeque<(Instant, usize)>,
    bytes: usize,
    /// Retransmissions refused.
    pub refused: u64,
}

impl ResendBudget {
    /// May a retransmission of `size` bytes go out at `now`, given the viewer's estimate
    /// `budget_bps` (`None`: it reports nothing of its link, no limit)? Counts it when it may.
    pub fn admit(&mut self, now: Instant, size: usize, budget_bps: Option<u64>) -> bool {
        while let Some(&(at, n)) = self.sent.front() {
            if now.saturating_duration_since(at) < WINDOW {
                break;
            }
            self.sent.pop_front();
            self.bytes -= n;
        }
        if let Some(bps) = budget_bps {
            let allowed = (u128::from(bps) * WINDOW.as_millis() / 8_000) as usize;
            if self.bytes + size > allowed {
                self.refused += 1;
                return false;
            }
        }
        self.sent.push_back((now, size));
        self.bytes += size;
        true
    }

    /// Bytes retransmitted in the last [`WINDOW`] (as of the last call).
    #[cfg(test)]
    fn window_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_rate_over_a_second_stays_within_the_estimate() {
        let t0 = Instant::now();
        let mut b = ResendBudget::default();
        // 96 kbit/s: 12 000 bytes a second, ten 1200-byte packets.
        let sent = (0..30u64)
            .filter(|k| b.admit(t0 + ms(k * 10), 1200, Some(96_000)))
            .count();
        assert_eq!(sent, 10);
        assert_eq!(b.refused, 20);
        assert_eq!(b.window_bytes(), 12_000);
        // A second after the first, its room is free again; the rest a little later.
        assert!(b.admit(t0 + ms(1000), 1200, Some(96_000)));
        assert!(!b.admit(t0 + ms(1000), 1200, Some(96_000)));
        assert!(b.admit(t0 + ms(1010), 1200, Some(96_000)));
        // A smaller estimate refuses what a larger one let through.
        assert!(!b.admit(t0 + ms(1020), 1200, Some(48_000)));
        // No estimate: no limit.
        let mut free = ResendBudget::default();
        assert!((0..100).all(|_| free.admit(t0, 1200, None)));
    }
}
