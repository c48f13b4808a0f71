//! Sequence numbering for a viewer that gets only some of its layer's packets: the frames of
//! temporal or spatial layers above the one it plays are not forwarded, yet its outgoing
//! sequence numbers must stay gap-free (a gap is a loss it would NACK) and, for VP8, its
//! picture ids continuous (a gap is a missing frame its decoder would wait for).
//!
//! Every source packet of the current source gets a slot in a window of the most recent
//! [`WINDOW`] sequence numbers: a packet forwarded takes the next outgoing number; one dropped
//! takes none; one not seen yet when a later one came reserves a number (it is probably lost
//! and will be repaired, or late). A reserved packet that turns out to be dropped leaves its
//! outgoing number empty: the caller fills it with a padding packet, which a receiver takes as
//! the missing number. A NACK maps back through a second window, outgoing to source.

use ferry_proto::state::media::{LayeredSlot, LayeredState};

/// The highest extended sequence number or timestamp a restored munger (or its window) takes:
/// 2^56, 25 000 years of a 90 kHz clock, far past any stream and far below the top of u64.
pub const MAX_RESTORED_EXT: u64 = 1 << 56;

/// Source sequence numbers remembered (and outgoing ones mapped back): about a second of a
/// 4 Mbit/s layer, longer than a NACK takes to come back.
pub(super) const WINDOW: usize = 1024;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Fate {
    #[default]
    Empty,
    Forwarded,
    Reserved,
    Dropped,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    src: u64,
    out: u64,
    pic_delta: u16,
    fate: Fate,
}

#[derive(Debug, Clone, Copy, Default)]
struct Back {
    out: u64,
    src: u64,
    hole: bool,
    used: bool,
}

/// What an outgoing sequence number carried (for a NACK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// This source packet, with this VP8 picture-id delta.
    Packet {
        /// Source extended sequence number.
        src: u64,
        /// VP8 picture-id delta in force for it.
        pic_delta: u16,
    },
    /// Nothing: a slot whose packet was dropped (answer with padding).
    Hole,
}

/// The numbering of one viewer's track while packets of its source are being dropped.
#[derive(Debug, Clone)]
pub(super) struct LayeredMap {
    slots: Vec<Slot>,
    back: Vec<Back>,
    /// Highest source sequence number given a slot.
    highest: u64,
    /// The next outgoing sequence number.
    next_out: u64,
    /// VP8 picture-id delta for pictures after the last dropped one.
    pic_delta: u16,
    /// The last VP8 picture id among the newest packets, and whether it was dropped.
    last_pic: Option<(u16, bool)>,
    /// The highest source number when the map took over: what came before is mapped by the
    /// munger's segments.
    pub start_src: u64,
}

impl LayeredMap {
    /// A map that continues after source `highest` went out as `last_out`.
    pub fn new(highest: u64, last_out: u64, pic_delta: u16, last_pic: Option<u16>) -> Self {
        Self {
            slots: vec![Slot::default(); WINDOW],
            back: vec![Back::default(); WINDOW],
            highest,
            next_out: last_out + 1,
            pic_delta,
            last_pic: last_pic.map(|p| (p, false)),
            start_src: highest,
        }
    }

    fn slot(&self, src: u64) -> Option<&Slot> {
        let s = &self.slots[(src % WINDOW as u64) as usize];
        (s.fate != Fate::Empty && s.src == src).then_some(s)
    }

    fn set(&mut self, src: u64, out: u64, fate: Fate) {
        let pic_delta = self.pic_delta;
        self.slots[(src % WINDOW as u64) as usize] = Slot {
            src,
            out,
            pic_delta,
            fate,
        };
        if matches!(fate, Fate::Forwarded | Fate::Reserved) {
            self.back[(out % WINDOW as u64) as usize] = Back {
                out,
                src,
                hole: false,
                used: true,
            };
        }
    }

    /// Gives the source numbers between the highest and `src` (not seen yet) their slots.
    fn reserve_up_to(&mut self, src: u64) {
        let gap = src - self.highest - 1;
        if gap as usize >= WINDOW {
            // Too far ahead to reserve anything sensible: start over from here.
            self.highest = src - 1;
            return;
        }
        for s in self.highest + 1..src {
            let out = self.next_out;
            self.next_out += 1;
            self.set(s, out, Fate::Reserved);
        }
    }

    /// Counts a VP8 picture among the newest packets; a dropped picture shifts the ids of
    /// those after it down by one.
    fn picture(&mut self, pic: Option<u16>, dropped: bool) {
        let Some(pic) = pic else {
            return;
        };
        match self.last_pic {
            Some((p, was_dropped)) if p == pic => {
                // The same picture: dropped or forwarded as a whole (a frame is one decision).
                self.last_pic = Some((p, was_dropped || dropped));
            }
            _ => {
                if dropped {
                    self.pic_delta = self.pic_delta.wrapping_sub(1) & 0x7fff;
                }
                self.last_pic = Some((pic, dropped));
            }
        }
    }

    /// A packet forwarded: its outgoing number and VP8 picture-id delta; `None` for a packet
    /// too old to number (or one dropped before: a duplicate).
    pub fn forward(&mut self, src: u64, pic: Option<u16>) -> Option<(u64, u16)> {
        if src > self.highest {
            self.reserve_up_to(src);
            self.picture(pic, false);
            let out = self.next_out;
            self.next_out += 1;
            self.set(src, out, Fate::Forwarded);
            self.highest = src;
            return Some((out, self.pic_delta));
        }
        let s = *self.slot(src)?;
        match s.fate {
            Fate::Reserved => {
                self.slots[(src % WINDOW as u64) as usize].fate = Fate::Forwarded;
                Some((s.out, s.pic_delta))
            }
            // A retransmission of a packet forwarded already: the same number.
            Fate::Forwarded => Some((s.out, s.pic_delta)),
            Fate::Dropped | Fate::Empty => None,
        }
    }

    /// A packet not forwarded: the outgoing number it leaves empty, if one was reserved for it
    /// (the caller fills it with padding).
    pub fn drop_packet(&mut self, src: u64, pic: Option<u16>) -> Option<u64> {
        if src > self.highest {
            self.reserve_up_to(src);
            self.picture(pic, true);
            self.set(src, 0, Fate::Dropped);
            self.highest = src;
            return None;
        }
        let s = *self.slot(src)?;
        if s.fate != Fate::Reserved {
            return None;
        }
        self.slots[(src % WINDOW as u64) as usize].fate = Fate::Dropped;
        let b = &mut self.back[(s.out % WINDOW as u64) as usize];
        if b.used && b.out == s.out {
            b.hole = true;
        }
        Some(s.out)
    }

    /// What outgoing number `out` carried, while the window remembers it.
    pub fn reverse(&self, out: u64) -> Option<Carried> {
        let b = self.back[(out % WINDOW as u64) as usize];
        if !b.used || b.out != out {
            return None;
        }
        if b.hole {
            return Some(Carried::Hole);
        }
        let s = self.slot(b.src)?;
        (s.fate == Fate::Forwarded).then_some(Carried::Packet {
            src: b.src,
            pic_delta: s.pic_delta,
        })
    }

    /// The last outgoing number handed out.
    pub fn last_out(&self) -> u64 {
        self.next_out - 1
    }

    /// Highest source number given a slot.
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// The current VP8 picture-id delta.
    pub fn pic_delta(&self) -> u16 {
        self.pic_delta
    }

    /// Exports the window (part of the viewer's snapshot).
    pub fn snapshot(&self) -> LayeredState {
        let from = self.highest.saturating_sub(WINDOW as u64 - 1);
        let slots = (from..=self.highest)
            .filter_map(|src| self.slot(src))
            .map(|s| LayeredSlot {
                src: s.src,
                out: s.out,
                pic_delta: u32::from(s.pic_delta),
                fate: match s.fate {
                    Fate::Forwarded => 1,
                    Fate::Reserved => 2,
                    Fate::Dropped | Fate::Empty => 3,
                },
            })
            .collect();
        LayeredState {
            slots,
            highest: self.highest,
            next_out: self.next_out,
            pic_delta: u32::from(self.pic_delta),
            last_pic: self.last_pic.map(|(p, _)| u32::from(p)),
            last_pic_dropped: self.last_pic.is_some_and(|(_, d)| d),
            start_src: self.start_src,
        }
    }

    /// Rebuilds a window; `None` when the state does not describe one (a numbering that
    /// would go backwards, slots beyond the window).
    pub fn restore(s: &LayeredState) -> Option<Self> {
        if s.next_out == 0
            || s.start_src > s.highest
            || s.highest > MAX_RESTORED_EXT
            || s.next_out > MAX_RESTORED_EXT
        {
            return None;
        }
        let mut m = Self {
            slots: vec![Slot::default(); WINDOW],
            back: vec![Back::default(); WINDOW],
            highest: s.highest,
            next_out: s.next_out,
            pic_delta: (s.pic_delta & 0x7fff) as u16,
            last_pic: s
                .last_pic
                .map(|p| ((p & 0x7fff) as u16, s.last_pic_dropped)),
            start_src: s.start_src,
        };
        let from = s.highest.saturating_sub(WINDOW as u64 - 1);
        for slot in &s.slots {
            let fate = match slot.fate {
                1 => Fate::Forwarded,
                2 => Fate::Reserved,
                3 => Fate::Dropped,
                _ => return None,
            };
            if slot.src < from || slot.src > s.highest || slot.out >= s.next_out {
                return None;
            }
            m.slots[(slot.src % WINDOW as u64) as usize] = Slot {
                src: slot.src,
                out: slot.out,
                pic_delta: (slot.pic_delta & 0x7fff) as u16,
                fate,
            };
            // The outgoing side as `set` and `drop_packet` left it: a number taken, or one
            // reserved and left empty (a hole, answered with padding).
            if fate != Fate::Dropped || slot.out != 0 {
                m.back[(slot.out % WINDOW as u64) as usize] = Back {
                    out: slot.out,
                    src: slot.src,
                    hole: fate == Fate::Dropped,
                    used: true,
                };
            }
        }
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window exported and rebuilt (a viewer that moves while it gets some of its layer's
    /// packets) numbers what comes next and answers NACKs as the original does.
    #[test]
    fn a_restored_window_numbers_and_answers_as_the_original() {
        let mut m = LayeredMap::new(99, 999, 0, Some(9));
        m.forward(100, Some(10));
        m.drop_packet(101, Some(11));
        // 102 not seen yet: 103 reserves a number for it.
        m.forward(103, Some(12));
        let mut back = LayeredMap::restore(&m.snapshot()).expect("a window");
        for out in 995..1010 {
            assert_eq!(back.reverse(out), m.reverse(out), "out {out}");
        }
        // 102 turns out dropped on both: the same hole; then the same numbers.
        assert_eq!(
            back.drop_packet(102, Some(11)),
            m.drop_packet(102, Some(11))
        );
        assert_eq!(back.reverse(1001), Some(Carried::Hole));
        assert_eq!(back.forward(104, Some(13)), m.forward(104, Some(13)));
        assert_eq!(back.forward(100, Some(10)), m.forward(100, Some(10)));
        // Not a window: refused, not trusted.
        let mut bad = m.snapshot();
        bad.slots[0].fate = 9;
        assert!(LayeredMap::restore(&bad).is_none());
        let mut bad = m.snapshot();
        bad.slots[0].out = bad.next_out;
        assert!(LayeredMap::restore(&bad).is_none());
    }

    #[test]
    fn dropped_packets_take_no_numbers_and_pictures_stay_continuous() {
        // Source 100.. : frames of 2 packets, pictures 10 (T0), 11 (T2, dropped), 12 (T1).
        let mut m = LayeredMap::new(99, 999, 0, Some(9));
        assert_eq!(m.forward(100, Some(10)), Some((1000, 0)));
        assert_eq!(m.forward(101, Some(10)), Some((1001, 0)));
        assert_eq!(m.drop_packet(102, Some(11)), None);
        assert_eq!(m.drop_packet(103, Some(11)), None);
        // Picture 12 goes out as 11: the dropped one left no gap.
        assert_eq!(m.forward(104, Some(12)), Some((1002, 0x7fff)));
        assert_eq!(12u16.wrapping_add(0x7fff) & 0x7fff, 11);
        assert_eq!(m.forward(105, Some(12)), Some((1003, 0x7fff)));
        // NACKs map back.
        assert_eq!(
            m.reverse(1002),
            Some(Carried::Packet {
                src: 104,
                pic_delta: 0x7fff
            })
        );
        assert_eq!(m.reverse(1004), None);
    }

    #[test]
    fn a_late_packet_takes_its_reserved_number_or_leaves_a_hole() {
        let mut m = LayeredMap::new(4_099, 999, 0, None);
        assert_eq!(m.forward(4_100, None), Some((1000, 0)));
        // 4101 and 4102 not seen yet: reserved 1001 and 1002.
        assert_eq!(m.forward(4_103, None), Some((1003, 0)));
        // 4101 comes (repaired): it was to be forwarded.
        assert_eq!(m.forward(4_101, None), Some((1001, 0)));
        // 4102 comes, but its frame is dropped: 1002 stays empty, fill it.
        assert_eq!(m.drop_packet(4_102, None), Some(1002));
        assert_eq!(m.reverse(1002), Some(Carried::Hole));
        // Retransmitted again: the same number; dropped again: nothing.
        assert_eq!(m.forward(4_101, None), Some((1001, 0)));
        assert_eq!(m.drop_packet(4_102, None), None);
        // Older than the window: not numbered.
        assert_eq!(m.forward(4_103 - WINDOW as u64, None), None);
    }

    #[test]
    fn a_jump_beyond_the_window_starts_over() {
        let mut m = LayeredMap::new(99, 999, 0, None);
        assert_eq!(m.forward(100, None), Some((1000, 0)));
        assert_eq!(m.forward(100 + 5 * WINDOW as u64, None), Some((1001, 0)));
        assert_eq!(m.last_out(), 1001);
    }
}
