//! Reading a session ticket's claims for routing (`Ferry-Ticket` on a WHIP/WHEP POST). The
//! scheduler has no cluster key: it trusts nothing in a ticket, it only sends the request to the
//! node that holds the session it names; that node checks the signature.

use base64::Engine;
use ferry_proto::api::{TICKET_PREFIX, TicketClaims};

/// Bytes of the signature after the claims.
const TAG_LEN: usize = 16;
/// Longest ticket looked at.
const MAX_LEN: usize = 2048;

/// The claims of `ticket`, unverified; `None` for anything that is not a ticket.
pub fn peek(ticket: &str) -> Option<TicketClaims> {
    if ticket.len() > MAX_LEN {
        return None;
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(ticket.trim())
        .ok()?;
    let body = raw.strip_prefix(TICKET_PREFIX)?;
    let json = body.get(..body.len().checked_sub(TAG_LEN)?)?;
    serde_json::from_slice(json).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_kept_fuzz_corpus_runs_without_a_panic() {
        let body = |data: &[u8]| {
            if let Ok(text) = std::str::from_utf8(data) {
                let _ = peek(text);
            }
        };
        let path = "ferry_scheduler::ticket::peek";
        ferry_testkit::fuzz_corpus::replay("scheduler_ticket", path, body).unwrap();
    }

    #[test]
    fn claims_are_read_and_garbage_is_not() {
        let claims = TicketClaims {
            sid: ferry_proto::SessionId::new("s1").unwrap(),
            stream: ferry_proto::StreamId::new("cam").unwrap(),
            kind: ferry_proto::api::SessionKind::View,
            node: ferry_proto::NodeId::new("node-a").unwrap(),
            r#gen: 2,
            exp: 1_900_000_000,
        };
        let mut raw = TICKET_PREFIX.to_vec();
        raw.extend(serde_json::to_vec(&claims).unwrap());
        raw.extend([0u8; TAG_LEN]);
        let t = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
        assert_eq!(peek(&t), Some(claims));
        for bad in ["", "!!", "AAAA", &"A".repeat(3000)] {
            assert_eq!(peek(bad), None);
        }
        raw.truncate(TICKET_PREFIX.len() + 3);
        let t = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
        assert_eq!(peek(&t), None);
    }
}
