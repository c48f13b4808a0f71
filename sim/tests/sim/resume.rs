//! Sessions resumed with tickets (DESIGN §6) on the node cores, in the deterministic simulation:
//! a publisher whose client comes back with a new transport — new SSRCs, sequence numbers and
//! keys — on the same node, on the node its viewers are relayed to after its own node died, or
//! on a third node; a viewer whose node died. Viewers keep their sessions and see one
//! continuous stream: no new SSRC, no sequence gap, monotonic timestamps, starting at a
//! keyframe.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::{NodeId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sfu::node::TicketError;
use ferry_sfu::node::signal::SignalError;
use ferry_sfu::peer::RecvStreamStats;
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const A: &str = "10.0.0.100:5000";
const B: &str = "10.0.0.101:5000";
const C: &str = "10.0.0.102:5000";

fn link() -> LinkConfig {
    LinkConfig {
        jitter: Duration::from_millis(2),
        ..LinkConfig::delay(Duration::from_millis(10))
    }
}

/// The one video stream a viewer receives (one outgoing SSRC whatever the source).
fn video(tb: &Testbed, peer: usize) -> RecvStreamStats {
    let st = tb.peers[peer].stats();
    let v: Vec<_> = st.video().cloned().collect();
    assert_eq!(v.len(), 1, "one video SSRC: {:?}", st.ssrcs_seen);
    v[0].clone()
}

/// Node A publishes `cam` (peer 0) with a local viewer; node B relays it to a viewer; with
/// `third`, node C exists too.
struct World {
    tb: Testbed,
    publisher_id: ferry_proto::SessionId,
    local: usize,
    local_id: ferry_proto::SessionId,
    remote: usize,
}

fn world(seed: u64, codec: Codec, third: bool) -> World {
    let mut tb = Testbed::new(seed, link());
    tb.add_node(NodeId::new("node-a").unwrap(), addr(A))
        .unwrap();
    tb.add_node(NodeId::new("node-b").unwrap(), addr(B))
        .unwrap();
    if third {
        tb.add_node(NodeId::new("node-c").unwrap(), addr(C))
            .unwrap();
    }
    let (_, publisher_id) = tb
        .publish(addr(A), "cam", codec, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    let now = tb.now();
    tb.node(addr(B))
        .subscribe_relay(now, &StreamId::new("cam").unwrap(), addr(A));
    tb.run_for(Duration::from_millis(300));
    let (local, local_id) = tb.view(addr(A), "cam", addr("10.0.0.2:4000")).unwrap();
    let (remote, _) = tb.view(addr(B), "cam", addr("10.0.0.3:4000")).unwrap();
    tb.run_for(Duration::from_secs(2));
    World {
        tb,
        publisher_id,
        local,
        local_id,
        remote,
    }
}

impl World {
    /// A fresh ticket for the publisher's session, from node A.
    fn publisher_ticket(&mut self) -> String {
        let now = self.tb.now();
        self.tb
            .node(addr(A))
            .issue_ticket(now, &self.publisher_id)
            .unwrap()
            .0
    }

    /// The publisher's client comes back (a new peer at `from`) on `node` with `ticket`: the
    /// same session. Returns the new peer.
    fn resume_publisher(&mut self, node: &str, codec: Codec, from: &str, ticket: &str) -> usize {
        let (p, id) = self
            .tb
            .publish_with(addr(node), "cam", codec, addr(from), Some(ticket))
            .unwrap();
        assert_eq!(id, self.publisher_id, "the session keeps its id");
        p
    }

    /// Runs `d`, then stops every publisher in `peers` and lets repairs finish.
    fn run_then_quiesce(&mut self, d: Duration, peers: &[usize]) {
        self.tb.run_for(d);
        for &p in peers {
            self.tb.peers[p].pause_media();
        }
        self.tb.run_for(Duration::from_secs(1));
    }
}

/// The publisher stops sending and its repairs finish (what it sent arrives everywhere), then
/// it goes silent: its client lost its path.
fn publisher_goes_silent(tb: &mut Testbed) {
    tb.peers[0].pause_media();
    tb.run_for(Duration::from_millis(800));
    tb.net.set_down(addr("10.0.0.1:4000"), true);
}

fn check_continuous(tb: &Testbed, viewer: usize, before: u64) {
    let s = video(tb, viewer);
    eprintln!(
        "  viewer {viewer}: packets {} (before {before}) missing {} ts_regressions {} keyframes {} max_gap {:?}",
        s.packets,
        s.received.missing(),
        s.ts_regressions,
        s.keyframes,
        s.max_arrival_gap
    );
    assert!(
        s.packets > before + 100,
        "viewer {viewer} receives the new source"
    );
    assert_eq!(s.received.missing(), 0, "viewer {viewer}: no sequence gap");
    assert_eq!(s.ts_regressions, 0, "viewer {viewer}: monotonic timestamps");
    assert!(
        s.keyframes >= 2,
        "viewer {viewer}: the new source starts at a keyframe"
    );
    assert!(tb.peers[viewer].stats().connected);
}

#[test]
fn a_publisher_resumes_on_its_node_and_every_viewer_follows() {
    for (seed, codec) in [(1, Codec::Vp8), (2, Codec::H264)] {
        let mut w = world(seed, codec, false);
        let ticket = w.publisher_ticket();
        let before = [w.local, w.remote].map(|v| video(&w.tb, v).packets);
        publisher_goes_silent(&mut w.tb);
        w.tb.run_for(Duration::from_millis(500));
        let p2 = w.resume_publisher(A, codec, "10.0.0.9:4000", &ticket);
        w.run_then_quiesce(Duration::from_secs(3), &[p2]);
        for (v, b) in [w.local, w.remote].into_iter().zip(before) {
            check_continuous(&w.tb, v, b);
        }
        let a = w.tb.node(addr(A));
        assert_eq!(a.metrics().sessions_resumed, 1);
        assert_eq!(
            a.sessions().len(),
            2,
            "the new publisher and the local viewer"
        );
        // The ticket was spent; so is every other of its generation.
        let now = w.tb.now();
        let cam = StreamId::new("cam").unwrap();
        assert_eq!(
            w.tb.node(addr(A)).check_ticket(
                now,
                &ticket,
                &cam,
                ferry_sfu::node::signal::SessionKind::Publish
            ),
            Err(TicketError::Replayed)
        );
    }
}

#[test]
fn a_publisher_whose_node_died_resumes_where_its_viewers_are() {
    let mut w = world(3, Codec::Vp8, false);
    let ticket = w.publisher_ticket();
    let before = video(&w.tb, w.remote).packets;
    publisher_goes_silent(&mut w.tb);
    w.tb.crash_node(addr(A));
    w.tb.run_for(Duration::from_millis(700));
    let p2 = w.resume_publisher(B, Codec::Vp8, "10.0.0.9:4000", &ticket);
    w.run_then_quiesce(Duration::from_secs(3), &[p2]);
    check_continuous(&w.tb, w.remote, before);
    assert_eq!(w.tb.node(addr(B)).sessions().len(), 2);
}

#[test]
fn relays_follow_a_publisher_that_came_back_on_a_third_node() {
    let mut w = world(4, Codec::H264, true);
    let ticket = w.publisher_ticket();
    let before = video(&w.tb, w.remote).packets;
    publisher_goes_silent(&mut w.tb);
    w.tb.crash_node(addr(A));
    w.tb.run_for(Duration::from_millis(500));
    let p2 = w.resume_publisher(C, Codec::H264, "10.0.0.9:4000", &ticket);
    w.tb.run_for(Duration::from_millis(200));
    // The routing table now says: A is down, cam is published on C.
    let origins = HashMap::from([(StreamId::new("cam").unwrap(), addr(C))]);
    let down = HashSet::from([addr(A)]);
    let now = w.tb.now();
    w.tb.node(addr(B)).repoint_relays(now, &origins, &down);
    w.run_then_quiesce(Duration::from_secs(3), &[p2]);
    check_continuous(&w.tb, w.remote, before);
    assert_eq!(w.tb.node(addr(B)).metrics().relays_repointed, 1);
}

#[test]
fn a_viewer_whose_node_died_resumes_its_session_elsewhere() {
    let mut w = world(5, Codec::Vp8, false);
    // The local viewer's node is A; the publisher is there too, so make B the publisher's
    // home: move nothing, just lose A's viewer and resume it on B (relayed from A).
    let now = w.tb.now();
    let (ticket, _) = w.tb.node(addr(A)).issue_ticket(now, &w.local_id).unwrap();
    w.tb.net.set_down(addr("10.0.0.2:4000"), true);
    let (v2, id) =
        w.tb.view_with(addr(B), "cam", addr("10.0.0.8:4000"), Some(&ticket))
            .unwrap();
    assert_eq!(id, w.local_id, "the viewer keeps its session id");
    w.tb.run_for(Duration::from_secs(2));
    let s = video(&w.tb, v2);
    assert!(s.packets > 50 && s.first_packet_keyframe == Some(true));
    assert_eq!(s.ts_regressions, 0);
    // Forged, expired and replayed tickets, and tickets for another resource.
    let now = w.tb.now();
    let b = w.tb.node(addr(B));
    let cam = StreamId::new("cam").unwrap();
    let view = ferry_sfu::node::signal::SessionKind::View;
    assert_eq!(
        b.check_ticket(now, &ticket, &cam, view),
        Err(TicketError::Replayed)
    );
    let (fresh, _) = b.issue_ticket(now, &w.local_id).unwrap();
    let mut forged = fresh.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(
        b.check_ticket(now, &forged, &cam, view),
        Err(TicketError::Forged)
    );
    let other = StreamId::new("other").unwrap();
    assert_eq!(
        b.check_ticket(now, &fresh, &other, view),
        Err(TicketError::Mismatch)
    );
    let later = now + ferry_sfu::node::TICKET_TTL + Duration::from_secs(1);
    assert_eq!(
        b.check_ticket(later, &fresh, &cam, view),
        Err(TicketError::Expired)
    );
    let err =
        w.tb.view_with(addr(B), "cam", addr("10.0.0.7:4000"), Some(&forged))
            .unwrap_err();
    assert_eq!(err, SignalError::BadTicket(TicketError::Forged));
    assert_eq!(err.status(), 403);
}

#[test]
fn viewers_wait_for_a_lost_publisher_then_end() {
    let mut w = world(6, Codec::Vp8, false);
    publisher_goes_silent(&mut w.tb);
    // Consent expires (30 s) and the stream waits its grace period, then ends.
    w.tb.run_for(Duration::from_secs(35));
    assert_eq!(
        w.tb.node(addr(A)).sessions().len(),
        1,
        "the publisher's session expired, its viewer waits for it"
    );
    assert_eq!(
        w.tb.node(addr(B)).sessions().len(),
        1,
        "so does the relayed one"
    );
    w.tb.run_for(ferry_sfu::node::PUBLISHER_GRACE);
    assert_eq!(
        w.tb.node(addr(A)).sessions().len(),
        0,
        "then the stream ends"
    );
    assert_eq!(
        w.tb.node(addr(B)).sessions().len(),
        0,
        "relayed viewers too"
    );
}

#[test]
fn a_resumed_publisher_must_keep_its_viewers_codecs() {
    let mut w = world(7, Codec::Vp8, false);
    let ticket = w.publisher_ticket();
    let err =
        w.tb.publish_with(
            addr(A),
            "cam",
            Codec::H264,
            addr("10.0.0.9:4000"),
            Some(&ticket),
        )
        .unwrap_err();
    assert_eq!(err.status(), 422, "{err}");
    // Nothing changed: the first publisher still feeds its viewers.
    let before = video(&w.tb, w.local).packets;
    w.tb.run_for(Duration::from_secs(1));
    assert!(video(&w.tb, w.local).packets > before + 20);
}

#[test]
fn make_before_break_a_publisher_resumed_while_its_old_transport_works() {
    for (seed, codec) in [(8, Codec::Vp8), (9, Codec::H264)] {
        let mut w = world(seed, codec, false);
        let ticket = w.publisher_ticket();
        let before = [w.local, w.remote].map(|v| video(&w.tb, v).packets);
        for v in [w.local, w.remote] {
            w.tb.peers[v].reset_arrival_gaps();
        }
        // The old transport keeps sending while the new one connects (the SDK's `reconnect`).
        let p2 = w.resume_publisher(A, codec, "10.0.0.9:4000", &ticket);
        w.run_then_quiesce(Duration::from_secs(2), &[p2, 0]);
        assert_eq!(
            w.tb.node(addr(A)).sessions().len(),
            2,
            "the old publisher transport was closed once the new one took over"
        );
        for (v, b) in [w.local, w.remote].into_iter().zip(before) {
            check_continuous(&w.tb, v, b);
            let gap = video(&w.tb, v).max_arrival_gap;
            assert!(
                gap < Duration::from_millis(150),
                "viewer {v}: the switch left a {gap:?} hole"
            );
        }
    }
}

#[test]
fn a_resume_of_a_resume_that_never_carried_media_replaces_the_working_transport() {
    let mut w = world(10, Codec::Vp8, false);
    let t1 = w.publisher_ticket();
    // A new transport that never gets anywhere (its network is down from the start).
    w.tb.net.set_down(addr("10.0.0.8:4000"), true);
    w.resume_publisher(A, Codec::Vp8, "10.0.0.8:4000", &t1);
    w.tb.run_for(Duration::from_millis(500));
    let t2 = w.publisher_ticket();
    let before = video(&w.tb, w.local).packets;
    let p3 = w.resume_publisher(A, Codec::Vp8, "10.0.0.9:4000", &t2);
    w.run_then_quiesce(Duration::from_secs(2), &[p3, 0]);
    check_continuous(&w.tb, w.local, before);
    assert_eq!(
        w.tb.node(addr(A)).sessions().len(),
        2,
        "the third transport and the viewer; the first and the unfinished second are gone"
    );
}
