//! Reconnect tickets (the `reconnect` cutover): after a viewer's session
//! migrated, its client opens a new PeerConnection to the target with a
//! ticket that names the session; the new transport takes over the
//! session's identity (same id, same Location) and starts at a keyframe.
//!
//! A ticket is `base64url(body ‖ tag)`, body = `"ferry-ticket 1\0" session
//! "\0" stream "\0" expiry (unix seconds, decimal)`, tag = the cluster key's
//! HMAC-SHA256 truncated as for relay datagrams: any node of the cluster
//! can check it, nobody outside can make one.

use std::time::{Duration, Instant};

use base64::Engine;
use ferry_proto::{SessionId, StreamId};

use super::Node;
use crate::session::{CloseReason, Role};
use crate::signal::{SessionAnswer, SignalError};

/// How long a ticket is good for.
pub const TICKET_TTL: Duration = Duration::from_secs(60);

const PREFIX: &str = "ferry-ticket 1\0";

impl Node {
    fn unix_now(&self, now: Instant) -> u64 {
        let w = &self.config.wall;
        (w.unix_at_base + now.saturating_duration_since(w.base)).as_secs()
    }

    /// A ticket for the client of session `id` of `stream` (`None`
    /// outside a cluster: there is no key to sign with).
    pub fn reconnect_ticket(
        &self,
        now: Instant,
        id: &SessionId,
        stream: &StreamId,
    ) -> Option<String> {
        let key = self.config.cluster_key.as_ref()?;
        let expiry = self.unix_now(now) + TICKET_TTL.as_secs();
        let mut body = format!("{PREFIX}{id}\0{stream}\0{expiry}").into_bytes();
        key.seal(&mut body);
        Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body))
    }

    /// The session a ticket names, if the ticket is genuine, current and
    /// for `stream`.
    pub fn check_ticket(
        &self,
        now: Instant,
        ticket: &str,
        stream: &StreamId,
    ) -> Result<SessionId, SignalError> {
        let key = self
            .config
            .cluster_key
            .as_ref()
            .ok_or(SignalError::BadTicket("this node is not in a cluster"))?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(ticket.trim())
            .map_err(|_| SignalError::BadTicket("not base64url"))?;
        let body = key
            .open(&raw)
            .map_err(|_| SignalError::BadTicket("not signed by this cluster"))?;
        let text = std::str::from_utf8(body).map_err(|_| SignalError::BadTicket("malformed"))?;
        let rest = text
            .strip_prefix(PREFIX)
            .ok_or(SignalError::BadTicket("unknown version"))?;
        let mut parts = rest.split('\0');
        let (Some(id), Some(s), Some(expiry), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SignalError::BadTicket("malformed"));
        };
        let expiry: u64 = expiry
            .parse()
            .map_err(|_| SignalError::BadTicket("malformed"))?;
        if expiry < self.unix_now(now) {
            return Err(SignalError::BadTicket("expired"));
        }
        if s != stream.as_str() {
            return Err(SignalError::BadTicket("for another stream"));
        }
        SessionId::new(id).map_err(|_| SignalError::BadTicket("malformed"))
    }

    /// WHEP with a ticket: a new transport for a viewer session that
    /// migrated here. The answer carries the session's own id; the old
    /// transport is closed (its client is replacing it).
    pub fn view_resume(
        &mut self,
        now: Instant,
        stream: &StreamId,
        offer: &str,
        ticket: &str,
    ) -> Result<SessionAnswer, SignalError> {
        let id = match self.check_ticket(now, ticket, stream) {
            Ok(id) => id,
            Err(e) => return self.reject(e),
        };
        let old = self.by_id.get(&id).copied().filter(|&k| {
            self.sessions[k].as_ref().is_some_and(|s| {
                s.active && matches!(s.role, Role::Viewer(_)) && s.stream == *stream
            })
        });
        let Some(old) = old else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
        };
        let mut answer = self.view(now, stream, offer)?;
        self.close(old, CloseReason::Replaced);
        if let Some(key) = self.by_id.remove(&answer.session) {
            if let Some(s) = self.sessions[key].as_mut() {
                s.id = id.clone();
            }
            self.by_id.insert(id.clone(), key);
        }
        answer.session = id;
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::codec::Codec;
    use crate::testbed::Testbed;

    #[test]
    fn tickets_are_checked() {
        let mut tb = Testbed::new(7, crate::sim::LinkConfig::delay(Duration::from_millis(5)));
        let a: std::net::SocketAddr = "10.0.0.100:5000".parse().unwrap();
        tb.add_node(ferry_proto::NodeId::new("node-a").unwrap(), a)
            .unwrap();
        tb.publish(a, "cam", Codec::Vp8, "10.0.0.1:4000".parse().unwrap())
            .unwrap();
        let now = tb.now();
        let id = SessionId::new("s1").unwrap();
        let cam = StreamId::new("cam").unwrap();
        let n = tb.node(a);
        let t = n.reconnect_ticket(now, &id, &cam).unwrap();
        assert_eq!(n.check_ticket(now, &t, &cam), Ok(id.clone()));
        let other = StreamId::new("other").unwrap();
        assert_eq!(
            n.check_ticket(now, &t, &other),
            Err(SignalError::BadTicket("for another stream"))
        );
        let later = now + TICKET_TTL + Duration::from_secs(2);
        assert_eq!(
            n.check_ticket(later, &t, &cam),
            Err(SignalError::BadTicket("expired"))
        );
        let mut forged = t.clone().into_bytes();
        forged[3] ^= 1;
        let forged = String::from_utf8(forged).unwrap();
        assert!(n.check_ticket(now, &forged, &cam).is_err());
        assert_eq!(
            n.check_ticket(now, "!!", &cam),
            Err(SignalError::BadTicket("not base64url"))
        );
    }
}
