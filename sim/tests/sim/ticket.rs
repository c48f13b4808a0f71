//! Migration tickets on a node core: checked against stream, kind, expiry and forgery; a
//! generation is spent once.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use base64::Engine;
use ferry_proto::api::TICKET_PREFIX;
use ferry_proto::{SessionId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sfu::node::TICKET_TTL;
use ferry_sfu::node::TicketError;
use ferry_sfu::node::signal::SessionKind;
use ferry_sim::testbed::Testbed;

fn setup() -> (Testbed, std::net::SocketAddr, SessionId) {
    let mut tb = Testbed::new(
        7,
        ferry_sim::net::LinkConfig::delay(Duration::from_millis(5)),
    );
    let a: std::net::SocketAddr = "10.0.0.100:5000".parse().unwrap();
    tb.add_node(ferry_proto::NodeId::new("node-a").unwrap(), a)
        .unwrap();
    let (_, id) = tb
        .publish(a, "cam", Codec::Vp8, "10.0.0.1:4000".parse().unwrap())
        .unwrap();
    (tb, a, id)
}

#[test]
fn tickets_are_checked() {
    let (mut tb, a, id) = setup();
    let now = tb.now();
    let cam = StreamId::new("cam").unwrap();
    let n = tb.node(a);
    let (t, exp) = n.issue_ticket(now, &id).unwrap();
    let c = n.check_ticket(now, &t, &cam, SessionKind::Publish).unwrap();
    assert_eq!((c.sid.clone(), c.exp, c.r#gen), (id.clone(), exp, 0));
    let other = StreamId::new("other").unwrap();
    assert_eq!(
        n.check_ticket(now, &t, &other, SessionKind::Publish),
        Err(TicketError::Mismatch)
    );
    assert_eq!(
        n.check_ticket(now, &t, &cam, SessionKind::View),
        Err(TicketError::Mismatch)
    );
    let later = now + TICKET_TTL + Duration::from_secs(2);
    assert_eq!(
        n.check_ticket(later, &t, &cam, SessionKind::Publish),
        Err(TicketError::Expired)
    );
    // Any flipped bit of the body or the tag.
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&t)
        .unwrap();
    for i in [0, TICKET_PREFIX.len() + 3, raw.len() - 1] {
        let mut forged = raw.clone();
        forged[i] ^= 1;
        let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged);
        let e = n
            .check_ticket(now, &forged, &cam, SessionKind::Publish)
            .unwrap_err();
        assert!(
            matches!(e, TicketError::Forged | TicketError::Malformed),
            "{i}: {e:?}"
        );
    }
    assert_eq!(
        n.check_ticket(now, "!!", &cam, SessionKind::Publish),
        Err(TicketError::Malformed)
    );
    assert_eq!(
        n.check_ticket(now, &"A".repeat(5000), &cam, SessionKind::Publish),
        Err(TicketError::Malformed)
    );
    // Statuses: each refusal its own.
    assert_eq!(TicketError::Forged.status(), 403);
    assert_eq!(TicketError::Expired.status(), 410);
    assert_eq!(TicketError::Replayed.status(), 409);
}

#[test]
fn a_generation_is_used_once() {
    let (mut tb, a, id) = setup();
    let now = tb.now();
    let cam = StreamId::new("cam").unwrap();
    let n = tb.node(a);
    let (t, _) = n.issue_ticket(now, &id).unwrap();
    let (t2, _) = n.issue_ticket(now + Duration::from_secs(1), &id).unwrap();
    let c = n.check_ticket(now, &t, &cam, SessionKind::Publish).unwrap();
    n.consume_ticket(now, &c);
    assert_eq!(
        n.check_ticket(now, &t, &cam, SessionKind::Publish),
        Err(TicketError::Replayed)
    );
    // Another ticket of the same generation (a refresh) is spent too.
    assert_eq!(
        n.check_ticket(now, &t2, &cam, SessionKind::Publish),
        Err(TicketError::Replayed)
    );
}
