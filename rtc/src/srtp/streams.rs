//! A small per-SSRC map with least-recently-used bookkeeping.
//!
//! Sessions carry a handful of SSRCs, so a vector scanned linearly beats hashing and keeps the
//! entries in one cache-friendly block. Lookups return copies: callers compute the next state
//! and write it back only once a packet has been accepted, so a rejected packet cannot leave
//! half an update behind.

#[derive(Clone, Debug)]
struct Entry<T> {
    ssrc: u32,
    last_used: u64,
    state: T,
}

#[derive(Clone, Debug)]
pub(crate) struct StreamMap<T> {
    entries: Vec<Entry<T>>,
    tick: u64,
}

/// What [`StreamMap::put`] does when a new SSRC arrives and the map is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenFull {
    /// Drop the least recently used SSRC (the unprotect side: a peer picks the SSRCs).
    EvictLeastRecent,
    /// Grow past the cap: the protect side, which checks its own cap before encrypting and
    /// must never forget a ROC (that could reuse a keystream).
    Grow,
}

impl<T: Copy> StreamMap<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            tick: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&self, ssrc: u32) -> Option<T> {
        self.entries
            .iter()
            .find(|e| e.ssrc == ssrc)
            .map(|e| e.state)
    }

    /// Inserts or replaces the state of `ssrc` and marks it most recently used.
    pub(crate) fn put(&mut self, ssrc: u32, state: T, cap: usize, when_full: WhenFull) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.entries.iter_mut().find(|e| e.ssrc == ssrc) {
            e.state = state;
            e.last_used = tick;
            return;
        }
        if self.entries.len() >= cap
            && when_full == WhenFull::EvictLeastRecent
            && let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
        {
            self.entries.swap_remove(oldest);
        }
        self.entries.push(Entry {
            ssrc,
            last_used: tick,
            state,
        });
    }

    /// All entries, least recently used first.
    pub(crate) fn by_age(&self) -> Vec<(u32, T)> {
        let mut order: Vec<&Entry<T>> = self.entries.iter().collect();
        order.sort_by_key(|e| e.last_used);
        order.into_iter().map(|e| (e.ssrc, e.state)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut m = StreamMap::with_capacity(2);
        m.put(1, 10u8, 2, WhenFull::EvictLeastRecent);
        m.put(2, 20, 2, WhenFull::EvictLeastRecent);
        m.put(1, 11, 2, WhenFull::EvictLeastRecent);
        m.put(3, 30, 2, WhenFull::EvictLeastRecent);
        assert_eq!((m.get(1), m.get(2), m.get(3)), (Some(11), None, Some(30)));
        assert_eq!(m.by_age(), vec![(1, 11), (3, 30)]);
    }

    #[test]
    fn grows_when_asked() {
        let mut m = StreamMap::with_capacity(1);
        m.put(1, 1u8, 1, WhenFull::Grow);
        m.put(2, 2, 1, WhenFull::Grow);
        m.put(1, 3, 1, WhenFull::Grow);
        assert_eq!((m.len(), m.get(1), m.get(2)), (2, Some(3), Some(2)));
        assert_eq!(m.by_age(), vec![(2, 2), (1, 3)]);
    }
}
