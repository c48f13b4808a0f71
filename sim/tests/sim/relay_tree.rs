//! The relay tree (issue 10, scope 4: "a tree of depth ≤ 2 when one level is not enough"), in the
//! deterministic simulation with loss, jitter and reordering on every link.
//!
//! The origin relays a stream to `--relay-fanout` nodes directly and sends further subscribers
//! one level down, to the least loaded direct subscriber; a node one level down gets what its
//! parent received (NACKs answered from the parent's relay cache, keyframe requests passed up,
//! sender reports passed down). The tree keeps every viewer's stream whole while it changes:
//! the publisher migrates to a node two levels down, a parent's own viewer leaves (it sends its
//! subscribers back to the origin), and a parent dies (its subscribers follow the directory to
//! the origin, which places them again).

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::{NodeId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sim::testbed::Testbed;
use rand::SeedableRng;

use crate::support;
use support::{Timing, addr, link, migrate, video};

const NODES: [&str; 5] = [
    "10.0.0.100:5000",
    "10.0.0.101:5000",
    "10.0.0.102:5000",
    "10.0.0.103:5000",
    "10.0.0.104:5000",
];

/// A testbed with nodes at `NODES[..k]` (node-a, node-b, …), each relaying a stream published
/// there to `fanout` nodes directly.
fn nodes(seed: u64, k: usize, fanout: usize) -> (Testbed, Vec<SocketAddr>) {
    let n: Vec<SocketAddr> = NODES[..k].iter().map(|s| addr(s)).collect();
    let mut tb = Testbed::new(seed, link(0.02));
    for (i, at) in n.iter().enumerate() {
        let id = NodeId::new(format!("node-{}", (b'a' + i as u8) as char)).unwrap();
        tb.add_node(id, *at).unwrap();
        tb.node(*at).set_relay_fanout(fanout);
    }
    (tb, n)
}

/// Every viewer in `viewers` received its stream whole up to now (holes are given a second to
/// be repaired, through every level: the media goes on meanwhile), nothing given up, a keyframe,
/// sender reports, and timestamps that never went back.
fn check_whole(tb: &mut Testbed, viewers: &[(char, usize)], phase: &str) {
    let marks: Vec<u64> = viewers
        .iter()
        .map(|&(_, v)| video(tb, v).received.last().unwrap_or(0))
        .collect();
    tb.run_for(Duration::from_secs(1));
    for (&(node, v), mark) in viewers.iter().zip(marks) {
        let s = video(tb, v);
        assert!(
            s.packets > 100,
            "{phase}: viewer on {node}: {} packets",
            s.packets
        );
        let holes: Vec<(u64, u64)> = s.received.holes().filter(|h| h.0 <= mark).collect();
        assert!(holes.is_empty(), "{phase}: viewer on {node} lost {holes:?}");
        assert!(
            s.keyframes >= 1 && s.nack_gave_up == 0,
            "{phase}: {node}: {s:?}"
        );
        assert_eq!(s.ts_regressions, 0, "{phase}: {node}");
        // Sender reports reach every level (audio/video sync on the viewers).
        assert!(s.sender_reports > 0, "{phase}: {node}: no sender report");
    }
}

#[test]
fn a_stream_relayed_to_more_nodes_than_the_fanout_goes_one_level_down_and_stays_whole() {
    for seed in [71, 72, 73] {
        let (mut tb, n) = nodes(seed, 5, 2);
        let (a, b, c, d, e) = (n[0], n[1], n[2], n[3], n[4]);
        let (publisher, publisher_id) = tb
            .publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        let stream = StreamId::new("cam").unwrap();
        let mut viewers = vec![('a', tb.view(a, "cam", addr("10.0.0.2:4000")).unwrap())];
        for (name, at, port) in [
            ('b', b, 4001),
            ('c', c, 4002),
            ('d', d, 4003),
            ('e', e, 4004),
        ] {
            let now = tb.now();
            tb.node(at).subscribe_relay(now, &stream, a);
            tb.run_for(Duration::from_millis(400));
            let src = tb.node(at).relay_source(&stream);
            let redirects = tb.node(a).metrics().relay_redirects;
            assert!(
                tb.node(at).relay_ready(&stream),
                "seed {seed}: {name} offered (source {src:?}, a redirected {redirects})"
            );
            let client = addr(&format!("10.0.1.{}:{port}", port - 4000));
            viewers.push((name, tb.view(at, "cam", client).unwrap()));
        }
        // Two relay links out of the origin; the others one level down, spread over them.
        let mut direct = tb.node(a).relay_subscribers(&stream);
        direct.sort();
        assert_eq!(direct, vec![b, c], "seed {seed}");
        assert_eq!(tb.node(d).relay_source(&stream), Some(b), "seed {seed}");
        assert_eq!(tb.node(e).relay_source(&stream), Some(c), "seed {seed}");
        assert_eq!(tb.node(a).metrics().relay_redirects, 2);
        tb.run_for(Duration::from_secs(5));
        let ids: Vec<(char, usize)> = viewers.iter().map(|(n, (v, _))| (*n, *v)).collect();
        check_whole(&mut tb, &ids, "tree");
        let (ma, mb) = (tb.node(a).metrics().clone(), tb.node(b).metrics().clone());
        let md = tb.node(d).metrics().clone();
        eprintln!(
            "seed {seed}: a sent {} retransmitted {}; b forwarded {} retransmitted {}; d received {} refused {}",
            ma.relay_sent,
            ma.relay_retransmitted,
            mb.relay_forwarded,
            mb.relay_retransmitted,
            md.relay_received,
            md.relay_refused
        );
        assert!(mb.relay_forwarded > 200, "b relays on what it receives");
        assert!(
            mb.relay_retransmitted > 0,
            "d's losses on the b→d link were repaired by b"
        );
        assert_eq!(md.relay_refused, 0);

        // The publisher moves to e, two levels down: e is the origin now, every viewer goes on.
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        migrate(&mut tb, &mut timing, &publisher_id, a, e);
        tb.run_for(Duration::from_secs(4));
        assert_eq!(
            tb.node(e).relay_source(&stream),
            None,
            "seed {seed}: published on e"
        );
        assert_eq!(
            tb.node(a).relay_source(&stream),
            Some(e),
            "seed {seed}: a follows"
        );
        check_whole(&mut tb, &ids, "publisher moved two levels down");

        // b's own viewer leaves: b stops relaying and sends d back to b's source.
        let b_viewer = viewers.iter().find(|(n, _)| *n == 'b').unwrap().1.1.clone();
        let now = tb.now();
        tb.node(b).delete(now, &b_viewer).unwrap();
        tb.run_for(Duration::from_secs(4));
        assert_eq!(
            tb.node(b).relay_source(&stream),
            None,
            "seed {seed}: b stopped"
        );
        let d_source = tb.node(d).relay_source(&stream);
        assert!(
            d_source.is_some() && d_source != Some(b),
            "seed {seed}: d moved on ({d_source:?})"
        );
        let ids: Vec<(char, usize)> = ids.into_iter().filter(|(n, _)| *n != 'b').collect();
        check_whole(&mut tb, &ids, "a parent stopped relaying");

        // c dies: the scheduler's directory says so, and c's subscribers follow it to the
        // origin, which places them again (keeping what was relayed: the hole is NACKed there,
        // or — NACKs spent on the dead node — the viewer gets a keyframe after it).
        // (The directory every node had since the publisher's move names e as its origin.)
        let origins = HashMap::from([(stream.clone(), e)]);
        for at in [a, b, c, d, e] {
            let now = tb.now();
            tb.node(at).repoint_relays(now, &origins, &HashSet::new());
        }
        let mut under_c = Vec::new();
        for &(name, v) in &ids {
            let at = n[usize::from(name as u8 - b'a')];
            if name != 'c' && tb.node(at).relay_source(&stream) == Some(c) {
                let st = video(&tb, v);
                under_c.push((name, v, st.received.last().unwrap_or(0), st.keyframes));
            }
        }
        assert!(
            !under_c.is_empty(),
            "seed {seed}: c relays to a node below it"
        );
        tb.crash_node(c);
        tb.run_for(Duration::from_millis(100));
        let down = HashSet::from([c]);
        for at in [a, b, d, e] {
            let now = tb.now();
            tb.node(at).repoint_relays(now, &origins, &down);
        }
        tb.run_for(Duration::from_secs(4));
        for at in [a, d] {
            let s = tb.node(at).relay_source(&stream);
            assert!(
                s.is_some() && s != Some(c),
                "seed {seed}: {at} off c ({s:?})"
            );
        }
        assert!(!tb.node(e).relay_subscribers(&stream).contains(&c));
        tb.peers[publisher].pause_media();
        tb.run_for(Duration::from_secs(1));
        for &(name, v, last, keyframes) in &under_c {
            let st = video(&tb, v);
            let holes: Vec<(u64, u64)> = st.received.holes().filter(|h| h.1 > last).collect();
            eprintln!("seed {seed}: viewer on {name} below the dead c: holes after it {holes:?}");
            assert!(
                st.received.last().unwrap_or(0) > last + 300,
                "seed {seed}: {name}'s stream goes on"
            );
            assert!(
                holes.iter().all(|h| h.1 < last + 60),
                "seed {seed}: {name}: holes only where c died: {holes:?}"
            );
            assert!(
                holes.is_empty() || st.keyframes > keyframes,
                "seed {seed}: {name}: a keyframe after the hole"
            );
            assert_eq!(st.ts_regressions, 0);
        }
        let ids: Vec<(char, usize)> = ids
            .into_iter()
            .filter(|(n, _)| *n != 'c' && !under_c.iter().any(|u| u.0 == *n))
            .collect();
        check_whole(&mut tb, &ids, "a parent died");
    }
}

/// A stream that ends ends everywhere in the tree: the origin tells the nodes it relays to, and
/// they tell the nodes one level down, whose viewers are closed.
#[test]
fn the_end_of_a_stream_reaches_the_second_level() {
    let (mut tb, n) = nodes(81, 3, 1);
    let (a, b, c) = (n[0], n[1], n[2]);
    let (_, publisher_id) = tb
        .publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    let stream = StreamId::new("cam").unwrap();
    for (at, client) in [(b, "10.0.1.1:4001"), (c, "10.0.1.2:4002")] {
        let now = tb.now();
        tb.node(at).subscribe_relay(now, &stream, a);
        tb.run_for(Duration::from_millis(400));
        tb.view(at, "cam", addr(client)).unwrap();
    }
    assert_eq!(
        tb.node(c).relay_source(&stream),
        Some(b),
        "c is one level down"
    );
    tb.run_for(Duration::from_secs(2));
    assert_eq!(
        (tb.node(b).session_count(), tb.node(c).session_count()),
        (1, 1)
    );
    let now = tb.now();
    tb.node(a).delete(now, &publisher_id).unwrap();
    // At once, down both levels (not at c's next subscription refresh, up to a second later).
    tb.run_for(Duration::from_millis(100));
    for at in [b, c] {
        assert_eq!(
            tb.node(at).session_count(),
            0,
            "{at}: its viewer was closed"
        );
        assert_eq!(tb.node(at).relay_source(&stream), None);
    }
}

/// A parent that dies is left for the origin when it goes silent, not seconds later when the
/// directory declares it down: the viewer below stalls for about `ferry_sfu::cluster::relay::PARENT_SILENCE`, the
/// origin relays to its node directly (past its fan-out) and the hole is NACKed there.
#[test]
fn a_silent_parent_is_left_for_the_origin_before_the_directory_declares_it_down() {
    for seed in [91, 92, 93] {
        let (mut tb, n) = nodes(seed, 3, 1);
        let (a, b, c) = (n[0], n[1], n[2]);
        tb.publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        let stream = StreamId::new("cam").unwrap();
        // Every node's directory names a as the stream's origin.
        let origins = HashMap::from([(stream.clone(), a)]);
        let mut viewers = Vec::new();
        for (at, client) in [(b, "10.0.1.1:4001"), (c, "10.0.1.2:4002")] {
            let now = tb.now();
            tb.node(at).repoint_relays(now, &origins, &HashSet::new());
            tb.node(at).subscribe_relay(now, &stream, a);
            tb.run_for(Duration::from_millis(400));
            viewers.push(tb.view(at, "cam", addr(client)).unwrap().0);
        }
        assert_eq!(tb.node(c).relay_source(&stream), Some(b), "seed {seed}");
        tb.run_for(Duration::from_secs(3));
        check_whole(&mut tb, &[('b', viewers[0]), ('c', viewers[1])], "tree");
        assert_eq!(
            tb.node(c).metrics().relay_parent_failovers,
            0,
            "seed {seed}"
        );

        // b dies; nobody tells the nodes.
        let before = video(&tb, viewers[1]);
        tb.crash_node(b);
        let (mut last, mut stalled, mut longest) = (
            before.received.last().unwrap_or(0),
            Duration::ZERO,
            Duration::ZERO,
        );
        let step = Duration::from_millis(10);
        for _ in 0..300 {
            tb.run_for(step);
            let now = video(&tb, viewers[1]).received.last().unwrap_or(0);
            if now > last {
                last = now;
                stalled = Duration::ZERO;
            } else {
                stalled += step;
                longest = longest.max(stalled);
            }
        }
        let after = video(&tb, viewers[1]);
        let holes: Vec<(u64, u64)> = after
            .received
            .holes()
            .filter(|h| h.1 > before.received.last().unwrap_or(0))
            .collect();
        eprintln!(
            "seed {seed}: viewer below the dead parent stalled {longest:?}; holes {holes:?}; keyframes {} -> {}",
            before.keyframes, after.keyframes
        );
        assert_eq!(tb.node(c).relay_source(&stream), Some(a), "seed {seed}");
        assert_eq!(
            tb.node(c).metrics().relay_parent_failovers,
            1,
            "seed {seed}"
        );
        assert!(tb.node(a).relay_subscribers(&stream).contains(&c));
        assert!(
            longest < Duration::from_millis(1000),
            "seed {seed}: stalled {longest:?}"
        );
        assert!(
            holes.is_empty() || after.keyframes > before.keyframes,
            "seed {seed}: a keyframe after the hole {holes:?}"
        );
        assert_eq!(after.ts_regressions, 0);
        check_whole(&mut tb, &[('c', viewers[1])], "after the failover");
    }
}

/// An origin past its fan-out sends a newcomer to its least loaded direct subscriber (the load
/// each one's subscriptions say: its sessions and relay links, plus those sent to it since),
/// not to the one it sent the fewest.
#[test]
fn a_newcomer_goes_one_level_down_under_the_least_loaded_parent() {
    for seed in [121, 122, 123] {
        let (mut tb, n) = nodes(seed, 5, 2);
        let (a, b, c, d, e) = (n[0], n[1], n[2], n[3], n[4]);
        tb.publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        let stream = StreamId::new("cam").unwrap();
        // b subscribes first and plays to five viewers; c to one.
        for (at, viewers, net) in [(b, 5, 1), (c, 1, 2)] {
            let now = tb.now();
            tb.node(at).subscribe_relay(now, &stream, a);
            tb.run_for(Duration::from_millis(400));
            for k in 0..viewers {
                let client = addr(&format!("10.0.{net}.{k}:4000"));
                tb.view(at, "cam", client).unwrap();
            }
        }
        // Their next refreshes tell a their loads.
        tb.run_for(Duration::from_millis(1500));
        for (at, net) in [(d, 3), (e, 4)] {
            let now = tb.now();
            tb.node(at).subscribe_relay(now, &stream, a);
            tb.run_for(Duration::from_millis(400));
            tb.view(at, "cam", addr(&format!("10.0.{net}.0:4000")))
                .unwrap();
        }
        assert_eq!(tb.node(d).relay_source(&stream), Some(c), "seed {seed}");
        assert_eq!(tb.node(e).relay_source(&stream), Some(c), "seed {seed}");
        let mut direct = tb.node(a).relay_subscribers(&stream);
        direct.sort();
        assert_eq!(direct, vec![b, c], "seed {seed}");
        assert_eq!(
            tb.node(c).relay_subscribers(&stream).len(),
            2,
            "seed {seed}"
        );
    }
}
