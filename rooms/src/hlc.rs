//! Hybrid logical clock: physical milliseconds + a logical counter + the replica as tiebreak.
//!
//! The clock never reads time itself: every call takes the caller's wall clock in milliseconds.
//! Stamps are strictly increasing per clock even when the wall clock steps backwards, and a
//! received stamp too far ahead of the local wall clock is refused instead of dragging the
//! clock into the future.

use serde::{Deserialize, Serialize};

use crate::ids::ReplicaId;

/// How far ahead of the local wall clock a received stamp may be by default.
pub const DEFAULT_MAX_DRIFT_MS: u64 = 500;

/// One HLC stamp. Ordered by wall time, then logical counter, then replica: a total order in
/// which two stamps from different replicas never compare equal.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct Hlc {
    /// Physical component, milliseconds (the largest wall time the clock has seen).
    pub wall_ms: u64,
    /// Logical counter within one `wall_ms`.
    pub logical: u32,
    /// The replica that produced the stamp.
    pub replica: ReplicaId,
}

/// A received stamp the clock refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HlcError {
    /// The stamp is further ahead of the local wall clock than the configured drift bound.
    #[error(
        "remote stamp {received_ms} ms is {ahead_ms} ms ahead of the local clock (max {max_drift_ms} ms)"
    )]
    TooFarAhead {
        /// The remote stamp's physical time.
        received_ms: u64,
        /// How far ahead of the local wall clock it is.
        ahead_ms: u64,
        /// The configured bound.
        max_drift_ms: u64,
    },
}

/// The clock of one replica.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct HlcClock {
    replica: ReplicaId,
    wall_ms: u64,
    logical: u32,
    max_drift_ms: u64,
}

impl HlcClock {
    /// A clock for `replica` that refuses stamps more than `max_drift_ms` ahead.
    pub fn new(replica: ReplicaId, max_drift_ms: u64) -> Self {
        Self {
            replica,
            wall_ms: 0,
            logical: 0,
            max_drift_ms,
        }
    }

    /// A new stamp for a local event at wall time `wall_ms`.
    pub fn now(&mut self, wall_ms: u64) -> Hlc {
        if wall_ms > self.wall_ms {
            self.wall_ms = wall_ms;
            self.logical = 0;
        } else {
            self.set_logical(u64::from(self.logical) + 1);
        }
        self.last()
    }

    /// Folds in a stamp received from another replica and returns a stamp for the receive
    /// event, greater than both `received` and every stamp this clock gave before.
    pub fn update(&mut self, received: &Hlc, wall_ms: u64) -> Result<Hlc, HlcError> {
        let limit = wall_ms.saturating_add(self.max_drift_ms);
        if received.wall_ms > limit {
            return Err(HlcError::TooFarAhead {
                received_ms: received.wall_ms,
                ahead_ms: received.wall_ms - wall_ms,
                max_drift_ms: self.max_drift_ms,
            });
        }
        let prev = self.wall_ms;
        let wall = prev.max(received.wall_ms).max(wall_ms);
        let logical = match (wall == prev, wall == received.wall_ms) {
            (true, true) => u64::from(self.logical.max(received.logical)) + 1,
            (true, false) => u64::from(self.logical) + 1,
            (false, true) => u64::from(received.logical) + 1,
            (false, false) => 0,
        };
        self.wall_ms = wall;
        self.set_logical(logical);
        Ok(self.last())
    }

    /// The last stamp given out (or folded in).
    pub fn last(&self) -> Hlc {
        Hlc {
            wall_ms: self.wall_ms,
            logical: self.logical,
            replica: self.replica.clone(),
        }
    }

    /// The configured drift bound.
    pub fn max_drift_ms(&self) -> u64 {
        self.max_drift_ms
    }

    /// A counter overflow borrows one millisecond rather than wrapping: still monotonic.
    fn set_logical(&mut self, logical: u64) {
        match u32::try_from(logical) {
            Ok(l) => self.logical = l,
            Err(_) => {
                self.wall_ms = self.wall_ms.saturating_add(1);
                self.logical = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(s: &str) -> ReplicaId {
        ReplicaId::new(s).unwrap()
    }

    #[test]
    fn now_follows_wall_clock_and_ticks_when_it_stalls_or_goes_back() {
        let mut c = HlcClock::new(node("a"), 500);
        assert_eq!((c.now(100).wall_ms, c.last().logical), (100, 0));
        assert_eq!((c.now(100).wall_ms, c.last().logical), (100, 1));
        // Wall clock steps back 60 ms: the stamp stays at 100 and counts.
        assert_eq!((c.now(40).wall_ms, c.last().logical), (100, 2));
        assert_eq!((c.now(101).wall_ms, c.last().logical), (101, 0));
    }

    #[test]
    fn update_moves_past_the_received_stamp() {
        let mut c = HlcClock::new(node("a"), 500);
        c.now(100);
        let remote = Hlc {
            wall_ms: 300,
            logical: 7,
            replica: node("b"),
        };
        let s = c.update(&remote, 200).unwrap();
        assert_eq!((s.wall_ms, s.logical), (300, 8));
        assert!(s > remote);
        // The next local stamp is still above, even though the wall clock lags behind 300.
        assert!(c.now(250) > s);
    }

    #[test]
    fn update_refuses_stamps_beyond_the_drift_bound() {
        let mut c = HlcClock::new(node("a"), 500);
        c.now(1_000);
        let remote = Hlc {
            wall_ms: 1_501,
            logical: 0,
            replica: node("b"),
        };
        assert_eq!(
            c.update(&remote, 1_000),
            Err(HlcError::TooFarAhead {
                received_ms: 1_501,
                ahead_ms: 501,
                max_drift_ms: 500
            })
        );
        // Refusal leaves the clock untouched; at the bound exactly it is accepted.
        assert_eq!(c.last().wall_ms, 1_000);
        let ok = Hlc {
            wall_ms: 1_500,
            ..remote
        };
        assert!(c.update(&ok, 1_000).is_ok());
    }

    #[test]
    fn logical_overflow_borrows_a_millisecond() {
        let mut c = HlcClock::new(node("a"), 500);
        c.now(10);
        c.logical = u32::MAX;
        let s = c.now(10);
        assert_eq!((s.wall_ms, s.logical), (11, 0));
    }

    #[derive(Debug, Clone)]
    enum Event {
        Local(u64),
        Receive {
            wall: u64,
            remote_wall: u64,
            remote_logical: u32,
        },
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u64..10_000).prop_map(Event::Local),
            (0u64..10_000, 0u64..11_000, 0u32..5).prop_map(
                |(wall, remote_wall, remote_logical)| {
                    Event::Receive {
                        wall,
                        remote_wall,
                        remote_logical,
                    }
                }
            ),
        ]
    }

    proptest! {
        /// Under arbitrary (also backwards) wall clocks and receives, stamps strictly increase,
        /// every accepted receive yields a stamp above the received one, and a refused one
        /// leaves the clock unchanged.
        #[test]
        fn hlc_is_strictly_monotonic(events in proptest::collection::vec(event(), 1..200)) {
            let mut c = HlcClock::new(node("a"), 500);
            let mut last: Option<Hlc> = None;
            for e in events {
                let stamp = match e {
                    Event::Local(wall) => c.now(wall),
                    Event::Receive { wall, remote_wall, remote_logical } => {
                        let remote = Hlc { wall_ms: remote_wall, logical: remote_logical, replica: node("b") };
                        let before = c.clone();
                        match c.update(&remote, wall) {
                            Ok(s) => { prop_assert!(s > remote); s }
                            Err(HlcError::TooFarAhead { .. }) => {
                                prop_assert!(remote_wall > wall + 500);
                                prop_assert_eq!(&c, &before);
                                continue;
                            }
                        }
                    }
                };
                if let Some(prev) = &last {
                    prop_assert!(stamp > *prev, "{stamp:?} <= {prev:?}");
                }
                last = Some(stamp);
            }
        }
    }
}
