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
/// The age bound is applied at every this many inserts (a sequence number that is a multiple of
/// it), not at each: the oldest slot is memory the node has not touched for seconds, and with
/// hundreds of viewers a cache miss per forwarded packet (`ferry bench forward --adaptive`).
/// So a packet is kept up to this many packets past [`MAX_AGE`].
const AGE_CHECK_EVERY: u64 = 64;

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

    /// The packet with this sequence number, if still held.
    pub fn get(&self, seq: u64) -> Option<SentRecord> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        let s = self.packets.get(i)?;
        Some(SentRecord {
            fate: s.fate()?,
            sent: self.sent_at(s)?,
            size: usize::from(s.size),
            probe: (s.flags & HAS_PROBE != 0).then_some(s.probe),
        })
    }

    /// Records what feedback said of a packet still held (nothing otherwise).
    pub fn set_fate(&mut self, seq: u64, fate: Fate) {
        let Some(i) = seq
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if let Some(s) = self.packets.get_mut(i).filter(|s| !s.is_empty()) {
            s.flags = (s.flags & HAS_PROBE) | fate_code(fate);
        }
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
