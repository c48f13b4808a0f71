//! Sessions that move away, as their clients see it: what a client is told when its session
//! went to another node, and the session URLs that keep answering afterwards.
//!
//! The migrator moves a session's state (snapshot, WAL, cutover); the client meanwhile holds
//! this node's URL and, for `ice-restart` and `reconnect` cutovers, must act. When the migration
//! starts the source core notes what the client will need ([`Node::plan_move`]); once the target
//! confirmed (or the commit went out unconfirmed) [`Node::move_committed`] gives the `migrate`
//! event for the session's event stream:
//!
//! - `edge`: the session's URL on the target (the edge already sends its media there);
//! - `ice-restart`: the same URL, for the client's ICE-restart PATCH;
//! - `reconnect`: the target's WHIP/WHEP endpoint and a ticket for it (the session keeps its id).
//!
//! From then on PATCH and DELETE of the session here answer [`SignalError::Moved`] with its URL
//! on the target (307), so a WHIP/WHEP client need not follow the event at all
//! (RFC 9725 §4.6). Such pointers are kept a day, at most [`MovedSessions::MAX`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ferry_proto::api::CutoverMode;
use ferry_proto::{NodeId, SessionId, StreamId};

use super::Node;
use crate::node::session::Role;
use crate::node::signal::{SessionKind, SignalError};

/// A client's `migrate` event: its session went to another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveNotice {
    /// The session.
    pub session: SessionId,
    /// The node it went to.
    pub target: NodeId,
    /// How its client follows.
    pub mode: CutoverMode,
    /// The event's JSON: `mode`, `from`, `target`, `location`, `epoch`, and for `reconnect`
    /// `session` and `ticket`.
    pub data: String,
}

/// An outgoing migration, as its client will be told about it.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    stream: StreamId,
    kind: SessionKind,
    target: NodeId,
    mode: CutoverMode,
    /// The session's ticket generation (a `reconnect` ticket carries it).
    generation: u32,
}

/// Where sessions that left this node went: their URL on the target. Bounded: the oldest
/// entries go first, and an entry is dropped after [`MovedSessions::KEEP`].
#[derive(Debug, Default)]
pub(super) struct MovedSessions {
    at: HashMap<SessionId, (String, Instant)>,
    order: VecDeque<(SessionId, Instant)>,
}

impl MovedSessions {
    const KEEP: Duration = Duration::from_secs(24 * 3600);
    const MAX: usize = 100_000;

    fn insert(&mut self, now: Instant, session: SessionId, url: String) {
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

    fn get(&self, now: Instant, session: &SessionId) -> Option<&str> {
        self.at
            .get(session)
            .filter(|(_, at)| now.duration_since(*at) < Self::KEEP)
            .map(|(url, _)| url.as_str())
    }
}

impl Node {
    /// The HTTP base URL (`scheme://host:port`) of peer node `node`, where moved clients go.
    pub fn set_peer_http(&mut self, node: NodeId, base: String) {
        self.peer_http.insert(node, base);
    }

    /// Source: session `id` starts moving to `target` by `mode`; what its client will need is
    /// noted now (the session leaves this core at the commit).
    pub fn plan_move(
        &mut self,
        id: &SessionId,
        target: &NodeId,
        mode: CutoverMode,
    ) -> Result<(), SignalError> {
        let s = self
            .session(id)
            .ok_or_else(|| SignalError::SessionNotFound(id.to_string()))?;
        let plan = Planned {
            stream: s.stream.clone(),
            kind: match s.role {
                Role::Publisher(_) => SessionKind::Publish,
                Role::Viewer(_) => SessionKind::View,
            },
            target: target.clone(),
            mode,
            generation: s.ticket_generation,
        };
        self.planned_moves.insert(id.clone(), plan);
        Ok(())
    }

    /// Whether a move of `id` was planned here and has not ended.
    pub fn has_planned_move(&self, id: &SessionId) -> bool {
        self.planned_moves.contains_key(id)
    }

    /// Source: the move of `id` committed (`epoch`: the target's): the client's `migrate`
    /// event; from now on the session's URL here answers with its URL on the target. `None`
    /// when no move was planned.
    pub fn move_committed(
        &mut self,
        now: Instant,
        id: &SessionId,
        epoch: u64,
    ) -> Option<MoveNotice> {
        let p = self.planned_moves.remove(id)?;
        let base = self.peer_http.get(&p.target).cloned().unwrap_or_default();
        let path = match p.kind {
            SessionKind::Publish => "whip",
            SessionKind::View => "whep",
        };
        let url = format!("{base}/{path}/{}/{id}", p.stream);
        let me = self.id().clone();
        let data = match p.mode {
            // A new PeerConnection: POST to the target's endpoint with the ticket; the session
            // keeps its id.
            CutoverMode::Reconnect => {
                let ticket = self.ticket_for(now, id, &p.stream, p.kind, &p.target, p.generation);
                serde_json::json!({
                    "mode": p.mode,
                    "from": me,
                    "target": p.target,
                    "location": format!("{base}/{path}/{}", p.stream),
                    "session": id,
                    "ticket": ticket.map(|t| t.0),
                    "epoch": epoch,
                })
            }
            // The edge or the client's ICE restart moves the media; the client's URL is the
            // session's on the target.
            CutoverMode::Edge | CutoverMode::IceRestart => serde_json::json!({
                "mode": p.mode,
                "from": me,
                "target": p.target,
                "location": url,
                "epoch": epoch,
            }),
        }
        .to_string();
        self.moved.insert(now, id.clone(), url);
        Some(MoveNotice {
            session: id.clone(),
            target: p.target,
            mode: p.mode,
            data,
        })
    }

    /// Source: the move of `id` ended without a commit (rolled back, refused, lost): its client
    /// is told nothing.
    pub fn move_abandoned(&mut self, id: &SessionId) {
        self.planned_moves.remove(id);
    }

    /// Whether `id` moved away from this core (its URL answers where it went).
    pub fn moved_away(&self, now: Instant, id: &SessionId) -> bool {
        self.moved.get(now, id).is_some()
    }

    /// The error for a request about session `id`, which is not here: where it went, or not
    /// found.
    pub(super) fn not_here(&self, now: Instant, id: &SessionId) -> SignalError {
        match self.moved.get(now, id) {
            Some(url) => SignalError::Moved(url.to_owned()),
            None => SignalError::SessionNotFound(id.to_string()),
        }
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
