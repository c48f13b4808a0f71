//! A viewer of a stream published on another node, through the node's own request path (as
//! the WHEP API calls it): the core subscribes the relay from the directory's origin and
//! answers the viewer once the origin's offer arrived, or with a 404 after `RELAY_WAIT` — in
//! the deterministic simulation, with loss on every link.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::{NodeId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sfu::node::RELAY_WAIT;
use ferry_sfu::node::signal::SignalError;
use ferry_sim::testbed::Testbed;

use crate::support;
use support::{addr, link, video};

/// Nodes a and b (links with `loss`), "cam" published on a for a second.
fn publishing_on_a(seed: u64, loss: f64) -> (Testbed, SocketAddr, SocketAddr, StreamId) {
    let (a, b) = (addr("10.0.0.100:5000"), addr("10.0.0.101:5000"));
    let mut tb = Testbed::new(seed, link(loss));
    tb.add_node(NodeId::new("node-a").unwrap(), a).unwrap();
    tb.add_node(NodeId::new("node-b").unwrap(), b).unwrap();
    tb.publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    (tb, a, b, StreamId::new("cam").unwrap())
}

#[test]
fn a_viewer_of_a_stream_published_elsewhere_is_answered_when_its_relay_is_offered() {
    for seed in [101, 102, 103] {
        let (mut tb, a, b, stream) = publishing_on_a(seed, 0.02);

        // Nothing known of the stream: 404 at once.
        let before = tb.now();
        let err = tb.view(b, "cam", addr("10.0.1.1:4001")).unwrap_err();
        assert!(matches!(err, SignalError::StreamNotFound(_)), "{err:?}");
        assert_eq!(tb.now(), before, "seed {seed}: answered without waiting");

        // The directory names a as its origin: the request waits for the relay, no longer.
        let now = tb.now();
        let origins = HashMap::from([(stream.clone(), a)]);
        tb.node(b).repoint_relays(now, &origins, &HashSet::new());
        let before = tb.now();
        let (viewer, _) = tb.view(b, "cam", addr("10.0.1.2:4002")).unwrap();
        let waited = tb.now() - before;
        eprintln!("seed {seed}: the viewer on b waited {waited:?} for the relay");
        // A round trip; a lost subscription or offer costs one retry (200 ms).
        assert!(
            waited < Duration::from_millis(500),
            "seed {seed}: {waited:?}"
        );
        assert_eq!(tb.node(b).relay_source(&stream), Some(a));
        assert_eq!(tb.node(b).waiting_requests(), 0);
        assert_eq!(tb.node(b).metrics().relay_waits_answered, 1);
        tb.run_for(Duration::from_secs(2));
        let s = video(&tb, viewer);
        assert!(s.packets > 100 && s.keyframes >= 1, "seed {seed}: {s:?}");

        // An origin that does not answer: 404 after RELAY_WAIT, counted like any other.
        let now = tb.now();
        let gone = HashMap::from([(StreamId::new("other").unwrap(), addr("10.0.0.199:5000"))]);
        tb.node(b).repoint_relays(now, &gone, &HashSet::new());
        let rejected = tb.node(b).metrics().signal_rejected;
        let before = tb.now();
        let err = tb.view(b, "other", addr("10.0.1.3:4003")).unwrap_err();
        let waited = tb.now() - before;
        assert!(matches!(err, SignalError::StreamNotFound(_)), "{err:?}");
        assert!(
            waited >= RELAY_WAIT && waited < RELAY_WAIT + Duration::from_millis(50),
            "seed {seed}: {waited:?}"
        );
        assert_eq!(tb.node(b).metrics().signal_rejected, rejected + 1);
        assert_eq!(tb.node(b).metrics().relay_waits_timed_out, 1);
        assert_eq!(tb.node(b).waiting_requests(), 0);
    }
}

/// A recording that starts here waits the same way ([`ferry_sfu::node::Node::request_stream`]),
/// and a lost subscription is asked again every `SUBSCRIBE_RETRY` while something waits, not at
/// the relay's next refresh (a second).
#[test]
fn a_waiting_request_asks_again_for_a_lost_subscription() {
    for seed in [111, 112, 113] {
        let (mut tb, a, b, stream) = publishing_on_a(seed, 0.0);
        let now = tb.now();
        let origins = HashMap::from([(stream.clone(), a)]);
        tb.node(b).repoint_relays(now, &origins, &HashSet::new());
        // Everything b sends to a is lost for 300 ms: the subscription and its first retry.
        let cut = ferry_sim::net::LinkConfig {
            loss: 1.0,
            ..link(0.0)
        };
        tb.net.set_link(b, a, cut);
        let id = tb.node(b).request_stream(now, &stream).unwrap();
        tb.run_for(Duration::from_millis(300));
        assert!(
            tb.node(b).poll_answer().is_none(),
            "seed {seed}: nothing came"
        );
        tb.net.set_link(b, a, link(0.0));
        let healed = tb.now();
        let mut answered = None;
        for _ in 0..300 {
            tb.run_for(Duration::from_millis(5));
            if let Some((got, answer)) = tb.node(b).poll_answer() {
                assert_eq!(got, id);
                assert!(
                    matches!(answer, ferry_sfu::node::Answer::Stream(true)),
                    "{answer:?}"
                );
                answered = Some(tb.now() - healed);
                break;
            }
        }
        let after = answered.expect("answered");
        eprintln!("seed {seed}: the stream came {after:?} after the link healed");
        assert!(
            after <= ferry_sfu::node::SUBSCRIBE_RETRY + Duration::from_millis(60),
            "seed {seed}: {after:?}"
        );
        assert!(tb.node(b).has_stream(&stream));
    }
}
