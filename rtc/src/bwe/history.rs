//! The sent-packet history: what the estimator must still know about a packet
//! when its transport-wide feedback comes back (send time, size, probe
//! cluster, and what the feedback said so far).
//!
//! A ring indexed by the extended transport-wide sequence number (a viewer's numbers come one
//! after the other, so slots are rarely empty): no allocation per packet once the ring has
//! grown, which the node's forwarding path relies on. Sequence numbers that arrive out of order
//! land in their slot, a gap leaves empty slots, one further ahead than the ring holds starts it
//! over; bounded both by count and by age, so a viewer that never sends feedback cannot grow it.
//! Once feedback comes, packets sent well before the newest one it reported are forgotten too
//! ([`KEEP_BEHIND_REPORT`]), and the ring gives back memory it no longer needs: with hundreds of
//! viewers the ring's next slot is then memory the node touched a moment ago, not seconds ago.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Packets kept at most (about 10 s at 10 Mbit/s of 1200-byte packets).
pub(crate) const MAX_PACKETS: usize = 10_000;
/// Feedback for a packet older than this is ignored (libwebrtc keeps 60 s;
/// feedback comes within an RTT plus the 50–100 ms report interval, so a few
/// seconds are plenty and keep the map small).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(5);
/// The age bound is applied at every this many inserts (a sequence number that is a multiple of
/// it), not at each: the oldest slot is memory the node has not touched for seconds, and with
/// hundreds of viewers a cache miss per forwarded packet (`ferry bench forward --adaptive`).
/// So a packet is kept up to this many packets past [`MAX_AGE`].
const AGE_CHECK_EVERY: u64 = 64;
/// Packets sent more than this before the newest packet a feedback message reported are
/// forgotten: a report for them would have to trail that one by more than this (feedback
/// messages come every 50–100 ms; a packet reported lost and then received trails by its
/// reordering). A report that late is ignored, as one older than [`MAX_AGE`] is.
pub(crate) const KEEP_BEHIND_REPORT: Duration = Duration::from_millis(250);
/// The ring gives memory back when it uses less than a quarter of what it holds, down to this
/// many slots.
const MIN_CAPACITY: usize = 256;

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

/// A [`SentRecord`] as the ring holds it, in 16 bytes instead of 40: a node writes one slot per
/// packet it sends a viewer and holds seconds of them for each of hundreds of viewers, so the
/// slot about to be written is memory untouched since the ring last came round, and smaller
/// slots are fewer cache misses (`ferry bench forward --adaptive true,false`). Exact: the send
/// time in nanoseconds since the ring's epoch, the size saturating at 65,535 bytes (no
/// datagram is larger).
#[derive(Debug, Clone, Copy)]
struct Slot {
    sent_ns: u64,
    probe: u32,
    size: u16,
    /// [`EMPTY`], or a [`Fate`] (`fate_code`), plus [`HAS_PROBE`].
    flags: u8,
}

const EMPTY: u8 = 0;
const HAS_PROBE: u8 = 0x80;
const EMPTY_SLOT: Slot = Slot {
    sent_ns: 0,
    probe: 0,
    size: 0,
    flags: EMPTY,
};

fn fate_code(f: Fate) -> u8 {
    match f {
        Fate::Pending => 1,
        Fate::Received => 2,
        Fate::Lost => 3,
    }
}

impl Slot {
    fn is_empty(&self) -> bool {
        self.flags & !HAS_PROBE == EMPTY
    }

    fn fate(&self) -> Option<Fate> {
        match self.flags & !HAS_PROBE {
            1 => Some(Fate::Pending),
            2 => Some(Fate::Received),
            3 => Some(Fate::Lost),
            _ => None,
        }
    }
}

/// Sent packets by extended transport-wide sequence number.
#[derive(Debug, Clone, Default)]
pub(crate) struct SentHistory {
    /// Slot `i` holds sequence number `base + i`.
    packets: VecDeque<Slot>,
    base: u64,
    /// Send times count from here (the first packet's).
    epoch: Option<Instant>,
    /// The send time (`Slot::sent_ns`) of the newest packet feedback reported.
    newest_reported_ns: Option<u64>,
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
                    self.packets.push_front(EMPTY_SLOT);
                }
                self.base = seq;
            } else {
                self.packets.clear();
                self.base = seq;
                self.packets.push_back(EMPTY_SLOT);
            }
        }
        let end = self.base.saturating_add(self.packets.len() as u64);
        for _ in end..=seq {
            self.packets.push_back(EMPTY_SLOT);
        }
        let epoch = *self.epoch.get_or_insert(record.sent);
        let slot = Slot {
            sent_ns: u64::try_from(record.sent.saturating_duration_since(epoch).as_nanos())
                .unwrap_or(u64::MAX),
            probe: record.probe.unwrap_or(0),
            size: u16::try_from(record.size).unwrap_or(u16::MAX),
            flags: fate_code(record.fate) | if record.probe.is_some() { HAS_PROBE } else { 0 },
        };
        if let Some(s) = self.packets.get_mut((seq - self.base) as usize) {
            *s = slot;
        }
        self.prune(seq, record.sent);
    }

    /// Records what a feedback message said of a packet (`received`, or reported lost) and
    /// returns the packet as it was before, if still held. Received is final (a receiver cannot
    /// un-receive a packet, so a later "lost" for it is a stale, overlapping report); lost may
    /// still turn into received (reordering).
    pub fn report(&mut self, seq: u64, received: bool) -> Option<SentRecord> {
        let i = self.index(seq)?;
        let s = *self.packets.get(i)?;
        let before = self.record(&s)?;
        let fate = match (received, before.fate) {
            (true, Fate::Pending | Fate::Lost) => Some(Fate::Received),
            (false, Fate::Pending) => Some(Fate::Lost),
            _ => None,
        };
        if let (Some(fate), Some(slot)) = (fate, self.packets.get_mut(i)) {
            slot.flags = (s.flags & HAS_PROBE) | fate_code(fate);
        }
        if self.newest_reported_ns.is_none_or(|n| s.sent_ns > n) {
            self.newest_reported_ns = Some(s.sent_ns);
        }
        Some(before)
    }

    /// After a feedback message: forgets the packets sent more than [`KEEP_BEHIND_REPORT`]
    /// before the newest one reported, and gives back memory the ring no longer needs (an
    /// allocation at most once per halving of its use, never per packet).
    pub fn after_feedback(&mut self) {
        let Some(newest) = self.newest_reported_ns else {
            return;
        };
        let keep = u64::try_from(KEEP_BEHIND_REPORT.as_nanos()).unwrap_or(u64::MAX);
        let from = newest.saturating_sub(keep);
        while let Some(first) = self.packets.front() {
            if !first.is_empty() && first.sent_ns >= from {
                break;
            }
            self.packets.pop_front();
            self.base = self.base.saturating_add(1);
        }
        let cap = self.packets.capacity();
        if cap > MIN_CAPACITY && self.packets.len() < cap / 4 {
            self.packets
                .shrink_to((self.packets.len() * 2).max(MIN_CAPACITY));
        }
    }

    /// The ring index of `seq`, if it is not below the ring.
    fn index(&self, seq: u64) -> Option<usize> {
        usize::try_from(seq.checked_sub(self.base)?).ok()
    }

    fn record(&self, s: &Slot) -> Option<SentRecord> {
        Some(SentRecord {
            fate: s.fate()?,
            sent: self.sent_at(s)?,
            size: usize::from(s.size),
            probe: (s.flags & HAS_PROBE != 0).then_some(s.probe),
        })
    }

    /// When the packet in slot `s` was sent (`None` before the first packet).
    fn sent_at(&self, s: &Slot) -> Option<Instant> {
        self.epoch?.checked_add(Duration::from_nanos(s.sent_ns))
    }

    /// Packets held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.packets.iter().filter(|p| !p.is_empty()).count()
    }

    /// Drops what the count bound or the age bound (checked when `seq` is a multiple of
    /// [`AGE_CHECK_EVERY`]) no longer allows. Age is judged on the lowest sequence numbers,
    /// which are the oldest unless the caller reorders sends; the count bound holds either way.
    fn prune(&mut self, seq: u64, now: Instant) {
        while self.packets.len() > MAX_PACKETS {
            self.packets.pop_front();
            self.base = self.base.saturating_add(1);
        }
        if !seq.is_multiple_of(AGE_CHECK_EVERY) {
            return;
        }
        while let Some(first) = self.packets.front() {
            let sent = (!first.is_empty()).then(|| self.sent_at(first)).flatten();
            if sent.is_some_and(|t| now.saturating_duration_since(t) <= MAX_AGE) {
                break;
            }
            self.packets.pop_front();
            self.base = self.base.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(at: Instant) -> SentRecord {
        SentRecord {
            sent: at,
            size: 1200,
            probe: None,
            fate: Fate::Pending,
        }
    }

    #[test]
    fn a_report_moves_a_packets_fate_and_returns_it_as_it_was() {
        let t0 = Instant::now();
        let mut h = SentHistory::default();
        for seq in 0..3 {
            h.insert(seq, sent(t0));
        }
        assert_eq!(h.report(0, false).map(|r| r.fate), Some(Fate::Pending));
        // Lost, then received (reordered): received is final.
        assert_eq!(h.report(0, true).map(|r| r.fate), Some(Fate::Lost));
        assert_eq!(h.report(0, false).map(|r| r.fate), Some(Fate::Received));
        assert_eq!(h.report(0, true).map(|r| r.fate), Some(Fate::Received));
        assert_eq!(h.report(1, true).map(|r| r.fate), Some(Fate::Pending));
        assert!(h.report(7, true).is_none());
    }

    #[test]
    fn packets_well_behind_the_newest_reported_one_are_forgotten_and_the_ring_shrinks() {
        let t0 = Instant::now();
        let mut h = SentHistory::default();
        // 2 s at 1 packet a millisecond, no feedback yet: held up to the age bound.
        for seq in 0..2000u64 {
            h.insert(seq, sent(t0 + Duration::from_millis(seq)));
        }
        assert_eq!(h.len(), 2000);
        let grown = h.packets.capacity();
        // Feedback reports packet 1999 (sent at 1999 ms): what was sent before 1749 ms goes.
        h.report(1999, true);
        h.after_feedback();
        assert_eq!(h.len(), 251);
        assert!(h.report(1748, true).is_none());
        assert!(h.report(1749, true).is_some());
        assert!(
            h.packets.capacity() < grown / 2,
            "{} of {grown}",
            h.packets.capacity()
        );
        // New packets still land after the forgotten ones.
        h.insert(2000, sent(t0 + Duration::from_millis(2000)));
        assert_eq!(h.report(2000, true).map(|r| r.fate), Some(Fate::Pending));
    }
}
