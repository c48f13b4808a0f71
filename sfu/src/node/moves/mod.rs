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

mod book;

use std::time::Instant;

use ferry_proto::api::CutoverMode;
use ferry_proto::{NodeId, SessionId};

use super::Node;
use crate::node::session::Role;
use crate::node::signal::{SessionKind, SignalError};
pub(super) use book::{MovedSessions, Planned};

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
