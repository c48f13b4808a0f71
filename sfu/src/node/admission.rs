//! Admission: how many sessions a node takes, shared by its cores.
//!
//! A node of several cores (`--workers N`) is one node to its clients and the scheduler: its
//! session limit (`--max-sessions`) holds for all cores together. Each core keeps the number of
//! sessions it holds in its own slot of the node's [`Admission`] and, before it takes another
//! session (a WHIP/WHEP request, a migration into the node), adds the other cores' slots to its
//! own count. The cores run on their own threads, so the slots are atomics; a single core (and
//! every core of the deterministic simulation) has nothing else to read.
//!
//! A session that replaces its own transport (a client that resumes with a ticket while its old
//! transport is still here) takes no new place.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The session limit of one node and what each of its cores holds.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    held: Box<[AtomicUsize]>,
}

impl Admission {
    /// A node that takes `max` sessions over `cores` cores.
    pub fn new(max: usize, cores: usize) -> Self {
        Self {
            max,
            held: (0..cores.max(1)).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Sessions the node takes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Number of cores sharing the limit.
    pub fn cores(&self) -> usize {
        self.held.len()
    }

    /// Sessions held by every core.
    pub fn held(&self) -> usize {
        self.held.iter().map(|h| h.load(Ordering::Relaxed)).sum()
    }

    /// Whether core `core`, holding `own` sessions, may take one more.
    pub fn admits(&self, core: usize, own: usize) -> bool {
        let others: usize = self
            .held
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != core)
            .map(|(_, h)| h.load(Ordering::Relaxed))
            .sum();
        others + own < self.max
    }

    /// Core `core` now holds `own` sessions.
    pub fn set(&self, core: usize, own: usize) {
        if let Some(h) = self.held.get(core) {
            h.store(own, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_share_one_limit() {
        let a = Admission::new(3, 2);
        a.set(0, 2);
        assert!(a.admits(1, 0));
        a.set(1, 1);
        assert!(!a.admits(1, 1), "2 + 1 sessions held of 3");
        assert!(!a.admits(0, 2));
        a.set(0, 1);
        assert!(a.admits(1, 1));
        assert_eq!(a.held(), 2);
    }

    #[test]
    fn a_core_out_of_range_changes_nothing() {
        let a = Admission::new(1, 1);
        a.set(5, 10);
        assert!(a.admits(0, 0));
        assert_eq!(a.cores(), 1);
    }
}
