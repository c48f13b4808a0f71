//! What a client is told when its session moves (the source core's `migrate` event), in the
//! deterministic simulation: a `reconnect` client resumes on the target with the ticket it is
//! given and keeps playing under its session id; every mode's session URL on the source answers
//! with the URL on the target; a move that does not commit tells nothing.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use ferry_proto::api::CutoverMode;
use ferry_proto::{NodeId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sfu::node::signal::{SessionKind, SignalError};
use ferry_sim::testbed::Testbed;
use rand::SeedableRng;
use support::{Timing, addr, id_of, link, migrate, video};

const A: &str = "10.0.0.100:5000";
const B: &str = "10.0.0.101:5000";
const B_HTTP: &str = "https://node-b.example:8443";

/// Node A publishes `cam` with a viewer; node B (two cores) relays it.
fn world(seed: u64) -> (Testbed, ferry_proto::SessionId, usize) {
    let (a, b) = (addr(A), addr(B));
    let mut tb = Testbed::new(seed, link(0.01));
    tb.add_node(NodeId::new("node-a").unwrap(), a).unwrap();
    tb.add_sharded_node(NodeId::new("node-b").unwrap(), b, 2)
        .unwrap();
    tb.node(a)
        .set_peer_http(NodeId::new("node-b").unwrap(), B_HTTP.into());
    tb.publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    let stream = StreamId::new("cam").unwrap();
    let now = tb.now();
    tb.core(b, &stream).subscribe_relay(now, &stream, a);
    tb.run_for(Duration::from_millis(300));
    let (viewer, id) = tb.view(a, "cam", addr("10.0.0.2:4000")).unwrap();
    tb.run_for(Duration::from_secs(1));
    (tb, id, viewer)
}

fn json(data: &str) -> serde_json::Value {
    serde_json::from_str(data).unwrap()
}

#[test]
fn a_reconnecting_client_resumes_on_the_target_with_the_ticket_it_is_told() {
    for seed in [1, 2, 3] {
        let (a, b) = (addr(A), addr(B));
        let (mut tb, id, _) = world(seed);
        let target = id_of(&mut tb, b);
        tb.node(a)
            .plan_move(&id, &target, CutoverMode::Reconnect)
            .unwrap();
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let epoch = migrate(&mut tb, &mut timing, &id, a, b);
        let now = tb.now();
        let notice = tb.node(a).move_committed(now, &id, epoch).unwrap();
        let data = json(&notice.data);
        assert_eq!(data["mode"], "reconnect");
        assert_eq!(data["from"], "node-a");
        assert_eq!(data["target"], "node-b");
        assert_eq!(data["location"], format!("{B_HTTP}/whep/cam"));
        assert_eq!(data["session"], id.as_str());
        assert_eq!(data["epoch"], epoch);
        let ticket = data["ticket"].as_str().unwrap().to_owned();

        // The ticket names the session and the target, for this stream and kind only.
        let stream = StreamId::new("cam").unwrap();
        let claims = tb
            .core(b, &stream)
            .check_ticket(now, &ticket, &stream, SessionKind::View)
            .unwrap();
        assert_eq!(
            (claims.sid.as_str(), claims.node.as_str()),
            (id.as_str(), "node-b")
        );
        assert!(
            tb.core(b, &stream)
                .check_ticket(now, &ticket, &stream, SessionKind::Publish)
                .is_err(),
            "the wrong resource"
        );
        // The client's new PeerConnection on the target: the same session, and it plays.
        let (peer, resumed) = tb
            .view_with(b, "cam", addr("10.0.0.3:4000"), Some(&ticket))
            .unwrap();
        assert_eq!(resumed, id, "the session keeps its id");
        tb.run_for(Duration::from_secs(2));
        let v = video(&tb, peer);
        eprintln!("seed {seed}: resumed viewer got {} packets", v.packets);
        assert!(v.packets > 100, "the resumed viewer plays: {}", v.packets);
        assert!(v.keyframes >= 1);
        // Used once: the same ticket again is refused.
        let now = tb.now();
        assert!(
            tb.core(b, &stream)
                .check_ticket(now, &ticket, &stream, SessionKind::View)
                .is_err(),
            "a replayed ticket"
        );
        // The URL the client held on node A answers where the session went.
        match tb.node(a).delete(now, &id) {
            Err(SignalError::Moved(url)) => assert_eq!(url, format!("{B_HTTP}/whep/cam/{id}")),
            other => panic!("DELETE on the source: {other:?}"),
        }
    }
}

#[test]
fn edge_and_ice_restart_clients_are_told_the_session_url_on_the_target() {
    for (seed, mode, name) in [
        (4, CutoverMode::Edge, "edge"),
        (5, CutoverMode::IceRestart, "ice-restart"),
    ] {
        let (a, b) = (addr(A), addr(B));
        let (mut tb, id, viewer) = world(seed);
        let target = id_of(&mut tb, b);
        tb.node(a).plan_move(&id, &target, mode).unwrap();
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let epoch = migrate(&mut tb, &mut timing, &id, a, b);
        let now = tb.now();
        let notice = tb.node(a).move_committed(now, &id, epoch).unwrap();
        let data = json(&notice.data);
        assert_eq!(data["mode"], name);
        assert_eq!(data["location"], format!("{B_HTTP}/whep/cam/{id}"));
        assert!(data.get("ticket").is_none(), "no ticket: {data}");
        assert!(
            tb.node(a).move_committed(now, &id, epoch).is_none(),
            "told once"
        );
        match tb.node(a).patch(now, &id, "a=ice-ufrag:x\r\n", Some("*")) {
            Err(SignalError::Moved(url)) => assert_eq!(url, format!("{B_HTTP}/whep/cam/{id}")),
            other => panic!("PATCH on the source: {other:?}"),
        }
        // The forwarding pointer keeps the viewer playing meanwhile.
        let before = video(&tb, viewer).packets;
        tb.run_for(Duration::from_secs(1));
        assert!(video(&tb, viewer).packets > before + 50);
    }
}

#[test]
fn a_move_that_does_not_commit_tells_the_client_nothing() {
    let (a, b) = (addr(A), addr(B));
    let (mut tb, id, _) = world(6);
    let target = id_of(&mut tb, b);
    tb.node(a)
        .plan_move(&id, &target, CutoverMode::Edge)
        .unwrap();
    assert!(tb.node(a).has_planned_move(&id));
    tb.node(a).move_abandoned(&id);
    let now = tb.now();
    assert!(tb.node(a).move_committed(now, &id, 2).is_none());
    // The session is still here and answers as itself.
    assert!(tb.node(a).session(&id).is_some());
    assert!(matches!(
        tb.node(a)
            .delete(now, &ferry_proto::SessionId::new("gone").unwrap()),
        Err(SignalError::SessionNotFound(_))
    ));
    // Planning needs the session.
    assert!(
        tb.node(a)
            .plan_move(
                &ferry_proto::SessionId::new("gone").unwrap(),
                &target,
                CutoverMode::Edge
            )
            .is_err()
    );
}
