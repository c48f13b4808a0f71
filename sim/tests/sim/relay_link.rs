//! The relay link between two nodes seen from the wire (issue 35, scope 1): what a packet
//! capture of it shows, and what a host without the cluster key can do with it.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::{NodeId, StreamId};
use ferry_sfu::cluster::relay::{self, ClusterKey, Control, Subscribe, control};
use ferry_sfu::cluster::relay_seal::{RelayOpener, RelaySealer};
use ferry_sfu::codec::Codec;
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;

use crate::support::{addr, link, video};

/// node-a publishing `cam`, node-b relaying it to a viewer; returns (testbed, a, b, viewer).
fn relayed(seed: u64, link: LinkConfig) -> (Testbed, SocketAddr, SocketAddr, usize) {
    let (a, b) = (addr("10.0.0.100:5000"), addr("10.0.0.101:5000"));
    let mut tb = Testbed::new(seed, link);
    tb.add_node(NodeId::new("node-a").unwrap(), a).unwrap();
    tb.add_node(NodeId::new("node-b").unwrap(), b).unwrap();
    tb.publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    tb.net.capture(a, b);
    let now = tb.now();
    tb.node(b)
        .subscribe_relay(now, &StreamId::new("cam").unwrap(), a);
    tb.run_for(Duration::from_millis(400));
    let (viewer, _) = tb.view(b, "cam", addr("10.0.1.1:4001")).unwrap();
    tb.run_for(Duration::from_secs(3));
    assert!(video(&tb, viewer).packets > 100);
    (tb, a, b, viewer)
}

/// The relay media datagrams the capture of a → b holds.
fn captured_media(tb: &Testbed) -> Vec<Vec<u8>> {
    tb.net
        .captured()
        .iter()
        .filter(|(_, _, d)| d.first() == Some(&relay::MEDIA))
        .map(|(_, _, d)| d.clone())
        .collect()
}

#[test]
fn relayed_media_is_encrypted_on_the_wire_and_opens_with_the_cluster_key() {
    for seed in [81, 82] {
        let (tb, ..) = relayed(seed, link(0.02));
        let wire = captured_media(&tb);
        assert!(wire.len() > 100, "seed {seed}: {} datagrams", wire.len());
        let mut open = RelayOpener::new(tb.cluster_key().seal_keys());
        for w in &wire {
            let mut d = w.clone();
            let (_, rtp) = relay::read_media(&mut open, &mut d).unwrap();
            // The packet's SSRC and the end of its payload are nowhere in the datagram.
            assert!(rtp.len() >= 28, "seed {seed}: {} bytes", rtp.len());
            let tail = &rtp[rtp.len() - 16..];
            assert!(!w.windows(16).any(|x| x == tail), "seed {seed}");
            assert!(!w[27..].windows(4).any(|x| x == &rtp[8..12]), "seed {seed}");
        }
    }
}

#[test]
fn a_host_without_the_cluster_key_can_neither_subscribe_nor_inject_and_a_replay_does_nothing() {
    // Lossless links: every captured datagram reached node-b once, so each replay is one.
    let (mut tb, a, b, viewer) = relayed(83, LinkConfig::delay(Duration::from_millis(10)));
    let stream = StreamId::new("cam").unwrap();
    let rogue = addr("10.0.0.66:5000");
    tb.net.capture(a, rogue);
    let mut forged = RelaySealer::new(&ClusterKey::new(&[0x42; 32]).seal_keys(), 7);

    // A subscription sealed with another key gets nothing relayed.
    let sub = relay::write_control(
        &mut forged,
        &Control {
            body: Some(control::Body::Subscribe(Subscribe {
                stream: stream.to_string(),
                direct: true,
                load: 0,
            })),
        },
    );
    let refused_a = tb.node(a).metrics().relay_refused;
    let now = tb.now();
    tb.net.send(now, rogue, a, sub);
    tb.run_for(Duration::from_secs(1));
    assert_eq!(tb.node(a).metrics().relay_refused, refused_a + 1);
    assert!(tb.net.captured().iter().all(|(_, to, _)| *to != rogue));
    assert_eq!(tb.node(a).relay_subscribers(&stream), vec![b]);

    // Spoofing node-a's address towards node-b: twenty captured datagrams sent again, and one
    // with a real header sealed with another key.
    let wire = captured_media(&tb);
    let replays: Vec<Vec<u8>> = wire[wire.len() - 20..].to_vec();
    let mut open = RelayOpener::new(tb.cluster_key().seal_keys());
    let mut d = replays[0].clone();
    let (mut h, rtp) = relay::read_media(&mut open, &mut d).unwrap();
    let rtp = rtp.to_vec();
    h.src.ext_seq += 10;
    let mut injected = Vec::new();
    relay::write_media(&mut forged, &h, &rtp, &mut injected);
    let before = tb.node(b).metrics().clone();
    let seen = video(&tb, viewer);
    let now = tb.now();
    for r in &replays {
        tb.net.send(now, a, b, r.clone());
    }
    tb.net.send(now, a, b, injected);
    tb.run_for(Duration::from_secs(1));
    let after = tb.node(b).metrics().clone();
    assert_eq!(after.relay_replayed - before.relay_replayed, 20);
    assert_eq!(after.relay_refused - before.relay_refused, 21);
    // The viewer got nothing twice and its stream went on whole.
    let now_seen = video(&tb, viewer);
    assert_eq!(now_seen.duplicates, seen.duplicates);
    assert_eq!(now_seen.ts_regressions, 0);
    assert!(now_seen.packets > seen.packets + 30);
    let mark = now_seen.received.last().unwrap_or(0);
    tb.run_for(Duration::from_secs(1));
    let holes: Vec<(u64, u64)> = video(&tb, viewer)
        .received
        .holes()
        .filter(|h| h.0 <= mark)
        .collect();
    assert!(holes.is_empty(), "{holes:?}");
}
