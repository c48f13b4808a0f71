//! The node's book of moves: the outgoing migrations its clients will be told about, and where
//! sessions that left went.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ferry_proto::api::CutoverMode;
use ferry_proto::{NodeId, SessionId, StreamId};

use crate::node::signal::SessionKind;

/// An outgoing migration, as its client will be told about it.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub(super) stream: StreamId,
    pub(super) kind: SessionKind,
    pub(super) target: NodeId,
    pub(super) mode: CutoverMode,
    /// The session's ticket generation (a `reconnect` ticket carries it).
    pub(super) generation: u32,
}

/// Where sessions that left this node went: their URL on the target. Bounded: the oldest
/// entries go first, and an entry is dropped after [`MovedSessions::KEEP`].
#[derive(Debug, Default)]
pub(crate) struct MovedSessions {
    at: HashMap<SessionId, (String, Instant)>,
    order: VecDeque<(SessionId, Instant)>,
}

impl MovedSessions {
    const KEEP: Duration = Duration::from_secs(24 * 3600);
    const MAX: usize = 100_000;

    pub(super) fn insert(&mut self, now: Instant, session: SessionId, url: String) {
        while let Some((old, at)) = self.order.front() {
            if self.order.len() < Self::MAX && now.duration_since(*at) < Self::KEEP {
                break;
            }
            if self.at.get(old).is_some_and(|(_, t)| t == at) {
                self.at.remove(old);
            }
            self.order.pop_front();
        }
        self.order.push_back((session.clone(), now));
        self.at.insert(session, (url, now));
    }

    pub(super) fn get(&self, now: Instant, session: &SessionId) -> Option<&str> {
        self.at
            .get(session)
            .filter(|(_, at)| now.duration_since(*at) < Self::KEEP)
            .map(|(url, _)| url.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn moved_sessions_are_bounded_by_age() {
        let t0 = Instant::now();
        let mut m = MovedSessions::default();
        m.insert(t0, sid("a"), "u-a".into());
        m.insert(t0 + Duration::from_secs(10), sid("b"), "u-b".into());
        assert_eq!(m.get(t0, &sid("a")), Some("u-a"));
        let late = t0 + MovedSessions::KEEP + Duration::from_secs(1);
        assert_eq!(m.get(late, &sid("a")), None, "a day old");
        m.insert(late, sid("c"), "u-c".into());
        assert_eq!(m.order.len(), 2, "the expired entry left the queue");
        assert_eq!(m.get(late, &sid("b")), Some("u-b"));
    }

    #[test]
    fn a_session_moved_again_keeps_its_latest_url() {
        let t0 = Instant::now();
        let mut m = MovedSessions::default();
        m.insert(t0, sid("a"), "first".into());
        m.insert(t0 + Duration::from_secs(1), sid("a"), "second".into());
        assert_eq!(
            m.get(t0 + Duration::from_secs(2), &sid("a")),
            Some("second")
        );
        let late = t0 + MovedSessions::KEEP + Duration::from_millis(500);
        m.insert(late, sid("b"), "u-b".into());
        assert_eq!(
            m.get(late, &sid("a")),
            Some("second"),
            "the newer entry stays"
        );
    }
}
