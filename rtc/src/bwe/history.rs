//! The sent-packet history: what the estimator must still know about a packet
//! when its transport-wide feedback comes back (send time, size, probe
//! cluster, and what the feedback said so far).
//!
//! A ring indexed by the extended transport-wide sequence number (a viewer's numbers come one
//! after the other, so slots are rarely empty): no allocation per packet once the ring has
//! grown, which the node's forwarding path relies on. Sequence numbers that arrive out of order
//! land in their slot, a gap leaves empty slots, one further ahead than the ring holds starts it
//! over; bounded both by count and by age, so a viewer that never sends feedback cannot grow it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Packets kept at most (about 10 s at 10 Mbit/s of 1200-byte packets).
pub(crate) const MAX_PACKETS: usize = 10_000;
/// Feedback for a packet older than this is ignored (libwebrtc keeps 60 s;
/// feedback comes within an RTT plus the 50–100 ms report interval, so a few
/// seconds are plenty and keep the map small).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(5);

/// What the feedback said about a packet so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// No report yet.
    Pending,
    /// Reported received; final (a receiver cannot un-receive a packet, so a
    /// later "lost" for it is a stale, overlapping report).
    Received,
    /// Reported lost; a later report may still say received (reordering).
    Lost,
}

/// One sent packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SentRecord {
    pub sent: Instant,
    pub size: usize,
    pub probe: Option<u32>,
    pub fate: Fate,
}

/// Sent packets by extended transport-wide sequence number.
#[derive(Debug, Clone, Default)]
pub(crate) struct SentHistory {
    /// Slot `i` holds sequence number `base + i`.
    packets: VecDeque<Option<SentRecord>>,
    base: u64,
}

impl SentHistory {
    /// Records a sent packet. A sequence number sent twice keeps the later
    /// send (the transport-wide counter never repeats in practice; if the
    /// caller does, the newest send is the one feedback will describe).
    pub fn insert(&mut self, seq: u64, record: SentRecord) {
        let end = self.base.saturating_add(self.packets.len() as u64);
        if self.packets.is_empty()
            || seq >= end.saturating_add(MAX_PACKETS as u64)
            || seq < self.base
        {
            if seq < self.base && self.base - seq < MAX_PACKETS as u64 && !self.packets.is_empty() {
                // A little behind the ring: prepend empty slots down to it (bounded below).
                for _ in seq..self.base {
                    self.packets.push_front(None);
                }
                self.base = seq;
            } else {
                self.packets.clear();
                self.base = seq;
                self.packets.push_back(None);
            }
        }
        let end = self.base.saturating_add(self.packets.len() as u64);
        for _ in end..=seq {
            self.packets.push_back(None);
        }
        if let Some(slot) = self.packets.get_mut((seq - self.base) as usize) {
            *slot = Some(record);
        }
        self.prune(record.sent);
    }

    /// The packet with this sequence number, if still held.
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut SentRecord> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        self.packets.get_mut(i)?.as_mut()
    }

    /// Packets held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.packets.iter().filter(|p| p.is_some()).count()
    }

    /// Drops what the count bound or the age bound no longer allows. Age is
    /// judged on the lowest sequence numbers, which are the oldest unless the
    /// caller reorders sends; the count bound holds either way.
    fn prune(&mut self, now: Instant) {
        while self.packets.len() > MAX_PACKETS {
            self.packets.pop_front();
            self.base = self.base.saturating_add(1);
        }
        while let Some(first) = self.packets.front() {
            match first {
                Some(r) if now.saturating_duration_since(r.sent) <= MAX_AGE => break,
                _ => {
                    self.packets.pop_front();
                    self.base = self.base.saturating_add(1);
                }
            }
        }
    }
}
