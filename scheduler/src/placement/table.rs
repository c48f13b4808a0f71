//! The stable slot table: weighted rejection sampling over generations of
//! slots, each generation an independent Poisson clock per key.
//!
//! A table is a list of *generations*. A generation is a fixed-size array of
//! slots; each slot has an owner (a node or a zone, or none) and an
//! acceptance threshold `thr = ceil(w / W · 2^31)` (its weight against the
//! fixed scale `W`). For a key, generation `g` (size `n`) emits a stream of
//! *attempts* from SplitMix64 seeded with `(key, g)`: attempt `t` lands on
//! slot `fastrange(x_t, n)` and is *accepted* when 31 bits of the low word
//! of `x_t` are below that slot's threshold. With one generation the key
//! belongs to the owner of the first accepted attempt. With several,
//! attempt `t` of generation `g` happens at time `Σ_{i≤t} Exp(1)/n` (from
//! the stream's next output), and the key belongs to the earliest accepted
//! attempt of all generations.
//!
//! Why this is exact (the proofs are in `docs/placement.md`): the accepted
//! attempts of one slot form a Poisson process of rate `thr/2^31`,
//! independent of every other slot's, and a slot's attempts never depend
//! on any weight. So the first arrival is at slot `s` with probability
//! `thr_s / Σ thr`, and changing one slot's threshold only adds or removes
//! that slot's own accepted attempts: a key moves only to or from it.
//! Adding a generation adds independent clocks and moves keys only to the
//! slots that accept. Sizes never change, so `fastrange` suffices where jump
//! hash would be needed for a growing bucket count.

use super::hash::{GOLDEN, RENDEZVOUS_SALT, exp1, exp1_floor, fastrange, mix64};

/// No owner: a free (never used or vacated) slot.
pub(crate) const EMPTY: u32 = u32::MAX;

/// The threshold of a slot at full weight (`w = W`).
pub(crate) const FULL: u32 = 1 << 31;

/// Stream advance per attempt (two SplitMix64 outputs).
const STEP: u64 = GOLDEN.wrapping_mul(2);

/// The gap before the attempt at stream state `st`, in units of the mean.
#[inline(always)]
fn gap(st: u64) -> f64 {
    exp1(mix64(st.wrapping_add(STEP)))
}

/// Attempts per generation before the rendezvous fallback takes over. The
/// chance of reaching it is `(1 − Σthr/(n·2^31))^65536`: nil unless the
/// weights are tiny against the scale, which `docs/placement.md` warns of.
const MAX_ATTEMPTS: u32 = 1 << 16;

/// The acceptance threshold of weight `w` against scale `scale`.
///
/// Any positive weight gets at least 1, so "has weight" and "can be
/// chosen" never disagree.
pub(crate) fn threshold(w: f64, scale: f64) -> u32 {
    if w.is_nan() || w <= 0.0 {
        return 0;
    }
    let t = (w / scale * f64::from(FULL)).ceil();
    if t >= f64::from(FULL) {
        FULL
    } else {
        (t as u32).max(1)
    }
}

/// One slot: acceptance threshold and owner, packed in 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) thr: u32,
    pub(crate) owner: u32,
}

impl Slot {
    pub(crate) const FREE: Slot = Slot {
        thr: 0,
        owner: EMPTY,
    };
}

/// Where a slot is: generation index (position in the table) and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SlotRef {
    pub(crate) gen_index: u32,
    pub(crate) slot: u32,
}

/// One generation: a fixed number of slots with its own random streams.
#[derive(Clone, Debug)]
pub(crate) struct Gen {
    /// Stable identity; the seed derives from it (kept in the layout).
    pub(crate) id: u32,
    seed: u64,
    /// `1 / slots.len()`: the mean gap between attempts.
    gap: f64,
    pub(crate) slots: Vec<Slot>,
    live_thr: u64,
    free: u32,
}

impl Gen {
    fn new(table_seed: u64, id: u32, slots: Vec<Slot>) -> Gen {
        let live_thr = slots.iter().map(|s| u64::from(s.thr)).sum();
        let free = slots.iter().filter(|s| s.owner == EMPTY).count() as u32;
        Gen {
            id,
            seed: mix64(table_seed ^ mix64(u64::from(id).wrapping_add(1))),
            gap: 1.0 / slots.len().max(1) as f64,
            slots,
            live_thr,
            free,
        }
    }

    /// A key's stream state before its first attempt. Attempt `t` reads
    /// SplitMix64 outputs `2t + 1` (landing, acceptance) and `2t + 2` (time).
    #[inline(always)]
    fn start(&self, kh: u64) -> u64 {
        mix64(kh ^ self.seed)
    }

    /// One attempt at stream state `st`: the slot if accepted.
    #[inline(always)]
    fn attempt(&self, st: u64) -> Option<Slot> {
        let x = mix64(st.wrapping_add(GOLDEN));
        let slot = self.slots[fastrange(x, self.slots.len() as u32) as usize];
        (((x as u32) >> 1) < slot.thr).then_some(slot)
    }
}

/// A table of generations. Owners are small integers the caller maps.
#[derive(Clone, Debug)]
pub(crate) struct Table {
    seed: u64,
    gens: Vec<Gen>,
    next_id: u32,
    /// Generations with live weight, heaviest first: the first one found
    /// sets a tight time bound for the others.
    order: Vec<u32>,
}

impl Table {
    /// An empty table whose streams derive from `seed`.
    pub(crate) fn new(seed: u64) -> Table {
        Table {
            seed,
            gens: Vec::new(),
            next_id: 0,
            order: Vec::new(),
        }
    }

    /// A table from stored generations `(id, slots)`.
    pub(crate) fn restore(seed: u64, gens: Vec<(u32, Vec<Slot>)>, next_id: u32) -> Table {
        let mut t = Table {
            seed,
            gens: gens
                .into_iter()
                .map(|(id, slots)| Gen::new(seed, id, slots))
                .collect(),
            next_id,
            order: Vec::new(),
        };
        t.reorder();
        t
    }

    /// One generation holding exactly `slots`, with a fresh id.
    pub(crate) fn packed(seed: u64, id: u32, slots: Vec<Slot>) -> Table {
        if slots.is_empty() {
            let mut t = Table::new(seed);
            t.next_id = id;
            return t;
        }
        Table::restore(seed, vec![(id, slots)], id.wrapping_add(1))
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    pub(crate) fn next_id(&self) -> u32 {
        self.next_id
    }

    pub(crate) fn gens(&self) -> &[Gen] {
        &self.gens
    }

    /// Total number of slots, free ones included.
    pub(crate) fn capacity(&self) -> usize {
        self.gens.iter().map(|g| g.slots.len()).sum()
    }

    /// True when one generation holds every slot and at most `free` are
    /// free.
    pub(crate) fn is_compact(&self, free: usize) -> bool {
        self.gens.len() <= 1 && self.gens.iter().all(|g| g.free as usize <= free)
    }

    /// True when some slot can accept.
    pub(crate) fn is_live(&self) -> bool {
        !self.order.is_empty()
    }

    pub(crate) fn slot(&self, r: SlotRef) -> Option<Slot> {
        self.gens
            .get(r.gen_index as usize)
            .and_then(|g| g.slots.get(r.slot as usize))
            .copied()
    }

    /// Gives `owner` a free slot: `prefer` when it is free, else the first
    /// free slot (oldest generation first), else a new generation of
    /// `max(1, ceil(growth × capacity))` slots. The slot starts at weight 0,
    /// so taking it moves no key.
    pub(crate) fn insert(&mut self, owner: u32, prefer: Option<SlotRef>, growth: f64) -> SlotRef {
        let at = prefer
            .filter(|&r| self.slot(r).is_some_and(|s| s.owner == EMPTY))
            .or_else(|| self.first_free())
            .unwrap_or_else(|| self.grow(growth));
        let g = &mut self.gens[at.gen_index as usize];
        g.slots[at.slot as usize] = Slot { thr: 0, owner };
        g.free -= 1;
        at
    }

    fn first_free(&self) -> Option<SlotRef> {
        self.free_slots().next()
    }

    /// Free slots, oldest generation first.
    pub(crate) fn free_slots(&self) -> impl Iterator<Item = SlotRef> + '_ {
        self.gens
            .iter()
            .enumerate()
            .filter(|(_, g)| g.free > 0)
            .flat_map(|(gi, g)| {
                g.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.owner == EMPTY)
                    .map(move |(si, _)| SlotRef {
                        gen_index: gi as u32,
                        slot: si as u32,
                    })
            })
    }

    fn grow(&mut self, growth: f64) -> SlotRef {
        let n = ((self.capacity() as f64 * growth).ceil() as usize).clamp(1, 1 << 24);
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.gens.push(Gen::new(self.seed, id, vec![Slot::FREE; n]));
        SlotRef {
            gen_index: (self.gens.len() - 1) as u32,
            slot: 0,
        }
    }

    /// Sets a slot's threshold (its weight).
    pub(crate) fn set_thr(&mut self, r: SlotRef, thr: u32) {
        if let Some(g) = self.gens.get_mut(r.gen_index as usize)
            && let Some(s) = g.slots.get_mut(r.slot as usize)
        {
            g.live_thr = g.live_thr - u64::from(s.thr) + u64::from(thr);
            s.thr = thr;
        }
        self.reorder();
    }

    /// Frees a slot: weight 0 and no owner (a tombstone).
    pub(crate) fn vacate(&mut self, r: SlotRef) {
        self.set_thr(r, 0);
        if let Some(g) = self.gens.get_mut(r.gen_index as usize)
            && let Some(s) = g.slots.get_mut(r.slot as usize)
            && s.owner != EMPTY
        {
            s.owner = EMPTY;
            g.free += 1;
        }
    }

    fn reorder(&mut self) {
        let mut order: Vec<u32> = (0..self.gens.len() as u32)
            .filter(|&i| self.gens[i as usize].live_thr > 0)
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.gens[i as usize].live_thr));
        self.order = order;
    }

    /// The owner of a key: the earliest accepted attempt.
    #[inline]
    pub(crate) fn first(&self, kh: u64) -> Option<u32> {
        match self.order.as_slice() {
            [] => None,
            [only] => {
                let g = &self.gens[*only as usize];
                let mut st = g.start(kh);
                for _ in 0..MAX_ATTEMPTS {
                    if let Some(s) = g.attempt(st) {
                        return Some(s.owner);
                    }
                    st = st.wrapping_add(STEP);
                }
                self.rendezvous_first(kh)
            }
            _ => self.first_timed(kh),
        }
    }

    fn first_timed(&self, kh: u64) -> Option<u32> {
        // (time, generation index, owner) of the best accepted attempt.
        let mut best = (f64::INFINITY, u32::MAX, EMPTY);
        for &gi in &self.order {
            let g = &self.gens[gi as usize];
            let mut st = g.start(kh);
            let mut time = 0.0;
            for _ in 0..MAX_ATTEMPTS {
                let bits = mix64(st.wrapping_add(STEP));
                // A lower bound of the gap rules most small generations out
                // without a logarithm; it is below the computed gap, so it
                // never changes a result.
                if time + exp1_floor(bits) * g.gap > best.0 {
                    break;
                }
                time += exp1(bits) * g.gap;
                if later(time, gi, best.0, best.1) {
                    break;
                }
                if let Some(s) = g.attempt(st) {
                    best = (time, gi, s.owner);
                    break;
                }
                st = st.wrapping_add(STEP);
            }
        }
        if best.2 != EMPTY {
            Some(best.2)
        } else {
            self.rendezvous_first(kh)
        }
    }

    /// The owners a key prefers, best first, each once: the accepted
    /// attempts in time order for up to `budget` attempts accepted, then
    /// every other live owner in rendezvous order (see [`Candidates`]).
    pub(crate) fn candidates(&self, kh: u64, budget: usize) -> Candidates<'_> {
        Candidates {
            kh,
            events: Events::new(self, kh),
            budget,
            seen: Vec::new(),
            rest: None,
        }
    }

    /// Every live slot in weighted-rendezvous order (`Exp(1)/thr`, lowest
    /// first), skipping `skip`. Exact for weights too, but O(n log n): the
    /// last resort when the attempt streams ran out.
    fn rendezvous(&self, kh: u64, skip: &[u32]) -> Vec<u32> {
        let mut all: Vec<(f64, u32, u32, u32)> = Vec::new();
        for (gi, g) in self.gens.iter().enumerate() {
            let st = mix64(kh ^ g.seed ^ RENDEZVOUS_SALT);
            for (si, s) in g.slots.iter().enumerate() {
                if s.thr > 0 && !skip.contains(&s.owner) {
                    let x = mix64(st.wrapping_add((si as u64 + 1).wrapping_mul(GOLDEN)));
                    all.push((exp1(x) / f64::from(s.thr), gi as u32, si as u32, s.owner));
                }
            }
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        all.into_iter().map(|e| e.3).collect()
    }

    fn rendezvous_first(&self, kh: u64) -> Option<u32> {
        self.rendezvous(kh, &[]).first().copied()
    }
}

/// Is an attempt at `(t, g)` after the best so far `(bt, bg)`? Ties in
/// time (measure zero, but floats) go to the lower generation index.
#[inline(always)]
fn later(t: f64, g: u32, bt: f64, bg: u32) -> bool {
    (t > bt) | ((t == bt) & (g > bg))
}

/// Per generation: its streams and its next accepted attempt.
#[derive(Debug)]
struct Cursor {
    gen_index: u32,
    st: u64,
    time: f64,
    next: Option<(f64, u32)>,
}

/// The accepted attempts of every generation, merged in time order
/// (owners may repeat). With one generation, attempt order.
#[derive(Debug)]
struct Events<'a> {
    table: &'a Table,
    cursors: Vec<Cursor>,
}

impl<'a> Events<'a> {
    fn new(table: &'a Table, kh: u64) -> Events<'a> {
        let mut cursors: Vec<Cursor> = table
            .order
            .iter()
            .map(|&gi| {
                let g = &table.gens[gi as usize];
                Cursor {
                    gen_index: gi,
                    st: g.start(kh),
                    time: 0.0,
                    next: None,
                }
            })
            .collect();
        let timed = cursors.len() > 1;
        for c in &mut cursors {
            c.advance(&table.gens[c.gen_index as usize], timed);
        }
        Events { table, cursors }
    }
}

impl Cursor {
    fn advance(&mut self, g: &Gen, timed: bool) {
        self.next = None;
        for _ in 0..MAX_ATTEMPTS {
            let st = self.st;
            self.st = st.wrapping_add(STEP);
            self.time += if timed { gap(st) * g.gap } else { 1.0 };
            if let Some(s) = g.attempt(st) {
                self.next = Some((self.time, s.owner));
                return;
            }
        }
    }
}

impl Iterator for Events<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let timed = self.cursors.len() > 1;
        let mut pick: Option<(usize, f64, u32)> = None;
        for (i, c) in self.cursors.iter().enumerate() {
            if let Some((t, _)) = c.next
                && pick.is_none_or(|(_, bt, bg)| later(bt, bg, t, c.gen_index))
            {
                pick = Some((i, t, c.gen_index));
            }
        }
        let (i, _, _) = pick?;
        let c = &mut self.cursors[i];
        let owner = c.next.map(|n| n.1);
        c.advance(&self.table.gens[c.gen_index as usize], timed);
        owner
    }
}

/// A key's preference order over a table's live owners, each owner once.
///
/// First the owners of accepted attempts in time order — the same sequence
/// whose head is [`Table::first`], so with nothing full or filtered out a
/// placement equals a lookup — until `budget` accepted attempts have been
/// read; then every live owner not yet named, in weighted-rendezvous order.
/// Both parts pick owner `i` first with probability `w_i / Σw` among any
/// subset the caller keeps, so skipping filtered-out owners keeps the
/// shares of the rest proportional; the tail makes the walk complete
/// (every live owner appears), which bounded loads need.
#[derive(Debug)]
pub(crate) struct Candidates<'a> {
    kh: u64,
    events: Events<'a>,
    budget: usize,
    seen: Vec<u32>,
    rest: Option<std::vec::IntoIter<u32>>,
}

impl Iterator for Candidates<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        while self.budget > 0 {
            self.budget -= 1;
            match self.events.next() {
                Some(o) if !self.seen.contains(&o) => {
                    self.seen.push(o);
                    return Some(o);
                }
                Some(_) => {}
                None => self.budget = 0,
            }
        }
        if self.rest.is_none() {
            let order = self.events.table.rendezvous(self.kh, &self.seen);
            self.rest = Some(order.into_iter());
        }
        self.rest.as_mut().and_then(Iterator::next)
    }
}
