//! Loss repair: the per-stream packet cache that answers NACKs, and the
//! receiver-side generator that asks the publisher for what it lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferry_proto::state::media::{
    CachedPacket, MissingPacket, NackGeneratorState, PacketCacheState,
};

use crate::seq::SeqUnwrapper;
use crate::time::{age_ms, from_age_ms};

/// Largest RTP packet the cache stores.
pub const MAX_PACKET: usize = 1500;

#[derive(Debug, Clone, Default)]
struct Slot {
    ext_seq: Option<u64>,
    data: Vec<u8>,
}

/// The last `capacity` plaintext RTP packets of one stream, by extended
/// sequence number. Slots keep their allocation, so once warm an insert is a
/// copy and allocates only when a packet is larger than any before it in
/// that slot (audio slots stay small).
#[derive(Debug, Clone)]
pub struct PacketCache {
    slots: Vec<Slot>,
}

impl PacketCache {
    /// A cache holding up to `capacity` packets (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: vec![Slot::default(); capacity.max(1)],
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, ext_seq: u64) -> usize {
        (ext_seq % self.slots.len() as u64) as usize
    }

    /// Stores a packet, replacing whatever occupied its slot. Packets longer
    /// than [`MAX_PACKET`] are not cached.
    pub fn insert(&mut self, ext_seq: u64, packet: &[u8]) {
        if packet.len() > MAX_PACKET {
            return;
        }
        let i = self.index(ext_seq);
        let slot = &mut self.slots[i];
        slot.data.clear();
        // A slot's buffer is made large enough for any packet the first time it is used, so
        // a longer packet than the last one never reallocates on the media path.
        if slot.data.capacity() < MAX_PACKET {
            slot.data.reserve_exact(MAX_PACKET);
        }
        slot.data.extend_from_slice(packet);
        slot.ext_seq = Some(ext_seq);
    }

    /// The cached packet with this extended sequence number, if still held.
    pub fn get(&self, ext_seq: u64) -> Option<&[u8]> {
        let slot = &self.slots[self.index(ext_seq)];
        (slot.ext_seq == Some(ext_seq)).then_some(slot.data.as_slice())
    }

    /// Number of packets held.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.ext_seq.is_some()).count()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Exports the held packets, oldest first.
    pub fn snapshot(&self) -> PacketCacheState {
        let mut packets: Vec<CachedPacket> = self
            .slots
            .iter()
            .filter_map(|s| {
                s.ext_seq.map(|ext_seq| CachedPacket {
                    ext_seq,
                    data: s.data.clone(),
                })
            })
            .collect();
        packets.sort_by_key(|p| p.ext_seq);
        PacketCacheState {
            capacity: self.slots.len() as u32,
            packets,
        }
    }

    /// Rebuilds a cache; `capacity` overrides the saved one when given.
    pub fn restore(state: &PacketCacheState, capacity: Option<usize>) -> Self {
        let mut cache = Self::new(capacity.unwrap_or(state.capacity as usize));
        for p in &state.packets {
            cache.insert(p.ext_seq, &p.data);
        }
        cache
    }
}

/// How the NACK generator paces its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackConfig {
    /// Give up on a packet after this many NACKs.
    pub max_retries: u8,
    /// Give up on a packet this long after it went missing.
    pub max_age: Duration,
    /// Track at most this many missing packets; a larger gap resets the
    /// generator and asks for a keyframe instead.
    pub max_missing: usize,
    /// Never re-ask sooner than this.
    pub min_retry_interval: Duration,
}

impl Default for NackConfig {
    fn default() -> Self {
        Self {
            max_retries: 10,
            max_age: Duration::from_millis(1000),
            max_missing: 1000,
            min_retry_interval: Duration::from_millis(10),
        }
    }
}

/// What the generator learnt from one arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A packet not seen before that repairs nothing: the next one, one after a gap, or one
    /// older than the first packet received (reordered at the stream's start; the packets
    /// between it and the first are NACKed).
    New,
    /// A packet that was missing and has now arrived (repair or reorder).
    Recovered,
    /// Older than anything tracked and not missing: a duplicate.
    Duplicate,
    /// A gap too large to repair: the caller should ask for a keyframe.
    Reset,
}

#[derive(Debug, Clone, Copy)]
struct Missing {
    since: Instant,
    last_nack: Option<Instant>,
    retries: u8,
}

/// Receiver-side loss tracking for one stream, producing generic NACKs.
#[derive(Debug, Clone)]
pub struct NackGenerator {
    config: NackConfig,
    seq: SeqUnwrapper,
    missing: BTreeMap<u64, Missing>,
    /// Lowest extended sequence number received, while everything below it is unseen (not after
    /// a restore, which carries no record of what came before).
    lowest: Option<u64>,
    /// Smoothed time from a NACK to the repaired packet, used as the retry interval.
    srtt: Duration,
    gave_up: u64,
    recovered: u64,
}

impl NackGenerator {
    /// A fresh generator.
    pub fn new(config: NackConfig) -> Self {
        Self {
            config,
            seq: SeqUnwrapper::new(),
            missing: BTreeMap::new(),
            lowest: None,
            srtt: Duration::from_millis(50),
            gave_up: 0,
            recovered: 0,
        }
    }

    /// Highest extended sequence number received.
    pub fn highest(&self) -> Option<u64> {
        self.seq.highest()
    }

    /// Packets given up on so far.
    pub fn gave_up(&self) -> u64 {
        self.gave_up
    }

    /// Packets repaired after going missing.
    pub fn recovered(&self) -> u64 {
        self.recovered
    }

    /// Number of packets currently missing.
    pub fn missing(&self) -> usize {
        self.missing.len()
    }

    /// Records an arriving packet by its 16-bit sequence number; returns its
    /// extended number and what it means.
    pub fn on_packet(&mut self, now: Instant, seq: u16) -> (u64, Arrival) {
        let prev = self.seq.highest();
        let ext = self.seq.unwrap(u64::from(seq));
        let Some(prev) = prev else {
            self.lowest = Some(ext);
            return (ext, Arrival::New);
        };
        if ext > prev {
            let gap = ext - prev - 1;
            if gap as usize > self.config.max_missing {
                self.missing.clear();
                return (ext, Arrival::Reset);
            }
            self.mark_missing(now, prev + 1..ext);
            return (ext, Arrival::New);
        }
        if let Some(lowest) = self.lowest
            && ext < lowest
        {
            // Older than the first packet: reordered at the start. What lies between is missing
            // like any gap (within the same bound); far older is stale.
            if (lowest - ext - 1) as usize > self.config.max_missing {
                return (ext, Arrival::Duplicate);
            }
            self.lowest = Some(ext);
            self.mark_missing(now, ext + 1..lowest);
            return (ext, Arrival::New);
        }
        match self.missing.remove(&ext) {
            Some(m) => {
                // Karn's rule: only a packet asked for once times the repair. After several
                // NACKs the repair may answer an earlier one, and timing it from the last
                // would shrink the interval until the retries run out before a repair that
                // takes more than one hop (node → relay → origin → publisher) can arrive.
                if m.retries == 1
                    && let Some(sent) = m.last_nack
                {
                    let sample = now.saturating_duration_since(sent);
                    self.srtt = (self.srtt * 7 + sample) / 8;
                }
                self.recovered += 1;
                (ext, Arrival::Recovered)
            }
            None => (ext, Arrival::Duplicate),
        }
    }

    /// Records `range` as missing since `now`; past `max_missing` the oldest are given up.
    fn mark_missing(&mut self, now: Instant, range: std::ops::Range<u64>) {
        for s in range {
            self.missing.insert(
                s,
                Missing {
                    since: now,
                    last_nack: None,
                    retries: 0,
                },
            );
        }
        while self.missing.len() > self.config.max_missing {
            self.missing.pop_first();
            self.gave_up += 1;
        }
    }

    /// Takes `seq` as the last packet a previous source delivered (a viewer moving in): later
    /// gaps are asked for, nothing older is. Returns its extended number.
    pub fn resume_after(&mut self, now: Instant, seq: u16) -> u64 {
        let (ext, _) = self.on_packet(now, seq);
        self.lowest = None;
        ext
    }

    fn retry_interval(&self) -> Duration {
        (self.srtt + self.srtt / 2).max(self.config.min_retry_interval)
    }

    /// Appends the sequence numbers to NACK now. Returns how many packets were
    /// given up on in this call (each is a reason to request a keyframe).
    pub fn poll_nacks(&mut self, now: Instant, out: &mut Vec<u16>) -> usize {
        let interval = self.retry_interval();
        let mut expired = 0;
        let config = self.config;
        self.missing.retain(|&seq, m| {
            if m.retries >= config.max_retries
                || now.saturating_duration_since(m.since) >= config.max_age
            {
                expired += 1;
                return false;
            }
            let due = m.last_nack.is_none_or(|t| now >= t + interval);
            if due {
                out.push(seq as u16);
                m.last_nack = Some(now);
                m.retries += 1;
            }
            true
        });
        self.gave_up += expired as u64;
        expired
    }

    /// The packets still missing are asked for afresh (their retries and age start again now):
    /// the stream comes from a new source, which may have what the old one could not send.
    pub fn rearm(&mut self, now: Instant) {
        for m in self.missing.values_mut() {
            *m = Missing {
                since: now,
                last_nack: None,
                retries: 0,
            };
        }
    }

    /// When [`NackGenerator::poll_nacks`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let interval = self.retry_interval();
        self.missing
            .values()
            .map(|m| match m.last_nack {
                None => m.since,
                Some(t) => (t + interval).min(m.since + self.config.max_age),
            })
            .min()
    }

    /// Exports the generator's state.
    pub fn snapshot(&self, now: Instant) -> NackGeneratorState {
        NackGeneratorState {
            highest_ext_seq: self.seq.highest(),
            missing: self
                .missing
                .iter()
                .map(|(&ext_seq, m)| MissingPacket {
                    ext_seq,
                    age_ms: age_ms(now, m.since),
                    last_nack_age_ms: m.last_nack.map(|t| age_ms(now, t)),
                    retries: u32::from(m.retries),
                })
                .collect(),
            srtt_us: self.srtt.as_micros() as u64,
            gave_up: self.gave_up,
            recovered: self.recovered,
        }
    }

    /// Rebuilds a generator at `now`.
    pub fn restore(state: &NackGeneratorState, config: NackConfig, now: Instant) -> Self {
        Self {
            config,
            seq: SeqUnwrapper::from_highest(state.highest_ext_seq),
            missing: state
                .missing
                .iter()
                .map(|m| {
                    (
                        m.ext_seq,
                        Missing {
                            since: from_age_ms(now, m.age_ms),
                            last_nack: m.last_nack_age_ms.map(|a| from_age_ms(now, a)),
                            retries: m.retries.min(u32::from(u8::MAX)) as u8,
                        },
                    )
                })
                .collect(),
            lowest: None,
            srtt: Duration::from_micros(state.srtt_us.max(1)),
            gave_up: state.gave_up,
            recovered: state.recovered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keeps_the_last_capacity_packets() {
        let mut c = PacketCache::new(4);
        for s in 10..16u64 {
            c.insert(s, &[s as u8; 3]);
        }
        assert_eq!(c.get(11), None, "evicted");
        assert_eq!(c.get(12), Some(&[12u8; 3][..]));
        assert_eq!(c.get(15), Some(&[15u8; 3][..]));
        assert_eq!(c.len(), 4);
        let back = PacketCache::restore(&c.snapshot(), None);
        assert_eq!(back.get(13), Some(&[13u8; 3][..]));
        assert_eq!(back.snapshot(), c.snapshot());
        c.insert(99, &[0; MAX_PACKET + 1]);
        assert_eq!(c.get(99), None, "oversized packets are not cached");
    }

    #[test]
    fn generator_nacks_gaps_retries_and_gives_up() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = NackGenerator::new(NackConfig::default());
        assert_eq!(g.on_packet(t0, 100).1, Arrival::New);
        assert_eq!(g.on_packet(t0, 103).1, Arrival::New);
        let mut out = vec![];
        g.poll_nacks(t0, &mut out);
        assert_eq!(out, vec![101, 102]);
        out.clear();
        g.poll_nacks(t0 + ms(10), &mut out);
        assert!(out.is_empty(), "not due before the retry interval");
        assert_eq!(g.on_packet(t0 + ms(20), 101).1, Arrival::Recovered);
        assert_eq!(g.on_packet(t0 + ms(21), 101).1, Arrival::Duplicate);
        g.poll_nacks(t0 + ms(200), &mut out);
        assert_eq!(out, vec![102]);
        assert_eq!(g.poll_nacks(t0 + ms(1000), &mut vec![]), 1);
        assert_eq!(g.missing(), 0);
        assert_eq!(g.gave_up(), 1);
        assert_eq!(g.recovered(), 1);
    }

    #[test]
    fn a_packet_older_than_the_first_is_new_and_what_lies_between_is_nacked() {
        let t0 = Instant::now();
        let mut g = NackGenerator::new(NackConfig::default());
        assert_eq!(g.on_packet(t0, 1).1, Arrival::New);
        // Reordered at the start, across the wrap: 65534 came before 1.
        assert_eq!(g.on_packet(t0, 65534).1, Arrival::New);
        let mut out = vec![];
        g.poll_nacks(t0, &mut out);
        assert_eq!(out, vec![65535, 0]);
        assert_eq!(g.on_packet(t0, 0).1, Arrival::Recovered);
        assert_eq!(g.on_packet(t0, 65534).1, Arrival::Duplicate);
        // Far older than the bound: stale, nothing asked for.
        assert_eq!(g.on_packet(t0, 60000).1, Arrival::Duplicate);
        assert_eq!(g.missing(), 1);
        // Nor does one that resumes after another source's last packet.
        let mut h = NackGenerator::new(NackConfig::default());
        h.resume_after(t0, 500);
        assert_eq!(h.on_packet(t0, 498).1, Arrival::Duplicate);
        assert_eq!(h.on_packet(t0, 503).1, Arrival::New);
        assert_eq!(h.missing(), 2);
        // A restored generator knows nothing of what came before its highest: older is stale.
        let mut r = NackGenerator::restore(&g.snapshot(t0), NackConfig::default(), t0);
        assert_eq!(r.on_packet(t0, 65000).1, Arrival::Duplicate);
        assert_eq!(r.missing(), 1);
    }

    #[test]
    fn a_rearmed_generator_asks_a_new_source_with_its_full_budget() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let config = NackConfig {
            max_retries: 3,
            ..NackConfig::default()
        };
        let mut g = NackGenerator::new(config);
        g.on_packet(t0, 10);
        g.on_packet(t0, 12);
        // Three NACKs to a source that never answers (it died): one more poll gives up.
        for i in 0..3 {
            let mut out = vec![];
            g.poll_nacks(t0 + ms(100 * i), &mut out);
            assert_eq!(out, vec![11]);
        }
        let mut spent = g.clone();
        assert_eq!(spent.poll_nacks(t0 + ms(300), &mut vec![]), 1, "given up");
        // Re-armed for a new source at 300 ms: asked again, three times, and its age starts anew.
        g.rearm(t0 + ms(300));
        for i in 0..3 {
            let mut out = vec![];
            assert_eq!(g.poll_nacks(t0 + ms(300 + 100 * i), &mut out), 0);
            assert_eq!(out, vec![11]);
        }
        assert_eq!(g.on_packet(t0 + ms(550), 11).1, Arrival::Recovered);
        assert_eq!(g.gave_up(), 0);
    }

    #[test]
    fn generator_resets_on_huge_gap_and_handles_wrap() {
        let t0 = Instant::now();
        let mut g = NackGenerator::new(NackConfig::default());
        g.on_packet(t0, 65534);
        g.on_packet(t0, 1);
        let mut out = vec![];
        g.poll_nacks(t0, &mut out);
        assert_eq!(out, vec![65535, 0]);
        assert_eq!(g.on_packet(t0, 20000).1, Arrival::Reset);
        assert_eq!(g.missing(), 0);
    }

    #[test]
    fn generator_snapshot_round_trips() {
        let t0 = Instant::now();
        let mut g = NackGenerator::new(NackConfig::default());
        g.on_packet(t0, 1);
        g.on_packet(t0, 5);
        g.poll_nacks(t0, &mut vec![]);
        let s = g.snapshot(t0 + Duration::from_millis(7));
        let t1 = t0 + Duration::from_secs(60);
        let r = NackGenerator::restore(&s, NackConfig::default(), t1);
        assert_eq!(r.snapshot(t1), s);
        assert_eq!(r.missing(), 3);
    }
}
