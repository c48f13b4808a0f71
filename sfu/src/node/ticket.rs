//! Session tickets (DESIGN §6, `docs/sdk.md`): the cluster's signature over a session's identity
//! ([`TicketClaims`]: id, stream, kind, issuing node, generation, expiry). Any node of the
//! cluster checks one; nobody outside can make one. A client resumes its session with it — after
//! a node crash, a page reload, or in `reconnect` migrations — and every resumption consumes the
//! ticket's generation (here, and cluster-wide at the scheduler), so a ticket works once.
//!
//! Wire form: `base64url(TICKET_PREFIX ‖ JSON(claims) ‖ tag)`, tag = the cluster key's
//! HMAC-SHA256 truncated as for relay datagrams.

use std::time::{Duration, Instant};

use base64::Engine;
use ferry_proto::api::{SessionKind as ApiKind, TICKET_PREFIX, TicketClaims};
use ferry_proto::{NodeId, SessionId, StreamId};

use super::Node;
use crate::cluster::relay::ClusterKey;
use crate::node::signal::{SessionKind, TicketError};

/// How long a ticket is good for.
pub const TICKET_TTL: Duration = Duration::from_secs(120);

/// Longest ticket accepted (a real one is ~300 characters).
const MAX_TICKET_LEN: usize = 2048;

fn api_kind(kind: SessionKind) -> ApiKind {
    match kind {
        SessionKind::Publish => ApiKind::Publish,
        SessionKind::View => ApiKind::View,
    }
}

/// The ticket asserting `claims`, signed with the cluster's key.
pub fn sign_ticket(key: &ClusterKey, claims: &TicketClaims) -> String {
    let mut body = TICKET_PREFIX.to_vec();
    // Serializing plain strings and numbers cannot fail.
    let _ = serde_json::to_writer(&mut body, claims);
    key.seal(&mut body);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body)
}

impl Node {
    /// Unix seconds at `now`.
    pub(super) fn unix_now(&self, now: Instant) -> u64 {
        let w = &self.config.wall;
        (w.unix_at_base + now.saturating_duration_since(w.base)).as_secs()
    }

    /// A fresh ticket for session `id` and its expiry (Unix seconds); `None` outside a cluster
    /// (no key to sign with) or for an unknown session.
    pub fn issue_ticket(&self, now: Instant, id: &SessionId) -> Option<(String, u64)> {
        let s = self.session(id)?;
        self.ticket_for(
            now,
            &s.id,
            &s.stream,
            s.kind(),
            &self.config.node_id,
            s.ticket_generation,
        )
    }

    /// A ticket for a session that is (or is about to be) on `node`: what a `reconnect`
    /// migration's client gets for its target.
    pub fn ticket_for(
        &self,
        now: Instant,
        id: &SessionId,
        stream: &StreamId,
        kind: SessionKind,
        node: &NodeId,
        generation: u32,
    ) -> Option<(String, u64)> {
        let key = self.config.cluster_key.as_ref()?;
        let exp = self.unix_now(now) + TICKET_TTL.as_secs();
        let claims = TicketClaims {
            sid: id.clone(),
            stream: stream.clone(),
            kind: api_kind(kind),
            node: node.clone(),
            r#gen: generation,
            exp,
        };
        Some((sign_ticket(key, &claims), exp))
    }

    /// Checks a ticket for resuming a `kind` session of `stream` here: genuine, current, for
    /// this stream and kind, and of a generation not used on this node.
    pub fn check_ticket(
        &self,
        now: Instant,
        ticket: &str,
        stream: &StreamId,
        kind: SessionKind,
    ) -> Result<TicketClaims, TicketError> {
        let key = self
            .config
            .cluster_key
            .as_ref()
            .ok_or(TicketError::NoCluster)?;
        if ticket.len() > MAX_TICKET_LEN {
            return Err(TicketError::Malformed);
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(ticket.trim())
            .map_err(|_| TicketError::Malformed)?;
        let body = key.open(&raw).map_err(|e| match e {
            crate::cluster::relay::RelayError::BadTag => TicketError::Forged,
            _ => TicketError::Malformed,
        })?;
        let json = body
            .strip_prefix(TICKET_PREFIX)
            .ok_or(TicketError::Malformed)?;
        let claims: TicketClaims =
            serde_json::from_slice(json).map_err(|_| TicketError::Malformed)?;
        if claims.exp < self.unix_now(now) {
            return Err(TicketError::Expired);
        }
        if claims.stream != *stream || claims.kind != api_kind(kind) {
            return Err(TicketError::Mismatch);
        }
        if self.ticket_used(now, &claims.sid, claims.r#gen) {
            return Err(TicketError::Replayed);
        }
        // A live session here is past this generation once it has been resumed.
        if self
            .session(&claims.sid)
            .is_some_and(|s| s.ticket_generation > claims.r#gen)
        {
            return Err(TicketError::Replayed);
        }
        Ok(claims)
    }

    /// Whether generation `generation` of `session` was used on this node.
    fn ticket_used(&self, now: Instant, session: &SessionId, generation: u32) -> bool {
        let unix = self.unix_now(now);
        self.used_tickets
            .get(session)
            .is_some_and(|&(g, exp)| exp >= unix && generation <= g)
    }

    /// Records that generation `claims.gen` of a session was used here (kept until the ticket
    /// expires).
    pub fn consume_ticket(&mut self, now: Instant, claims: &TicketClaims) {
        let unix = self.unix_now(now);
        self.used_tickets.retain(|_, (_, exp)| *exp >= unix);
        let e = self
            .used_tickets
            .entry(claims.sid.clone())
            .or_insert((claims.r#gen, claims.exp));
        e.0 = e.0.max(claims.r#gen);
        e.1 = e.1.max(claims.exp);
    }
}
