//! Deterministic simulations: a node core, a publisher peer and viewer peers
//! on a seeded network (delay, jitter, loss, reorder) under a virtual clock.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::NodeId;
use ferry_sfu::codec::Codec;
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;
use prost::Message;

use crate::support;
use support::video;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn lossy(loss: f64) -> LinkConfig {
    LinkConfig {
        loss,
        jitter: Duration::from_millis(5),
        reorder: 0.01,
        ..LinkConfig::delay(Duration::from_millis(20))
    }
}

/// With 5 % loss (plus jitter and reordering) on every path, both viewers
/// receive every video packet — publisher→node losses are repaired by the
/// node's NACKs, node→viewer losses by the viewers' NACKs answered from the
/// node's cache — and the viewers' keyframe needs reach the publisher.
#[test]
fn five_percent_loss_is_repaired_for_both_viewers() {
    for (seed, codec) in [(1, Codec::Vp8), (2, Codec::H264), (3, Codec::Vp8)] {
        let node = addr("10.0.0.100:5000");
        let mut tb = Testbed::new(seed, lossy(0.05));
        tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
        let (publisher, _) = tb
            .publish(node, "cam", codec, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        assert!(
            tb.peers[publisher].is_connected(),
            "publisher connects through loss"
        );
        let (b, b_id) = tb.view(node, "cam", addr("10.0.0.2:4000")).unwrap();
        let (c, c_id) = tb.view(node, "cam", addr("10.0.0.3:4000")).unwrap();
        tb.run_for(Duration::from_secs(10));
        tb.peers[publisher].pause_media();
        tb.run_for(Duration::from_secs(2));

        let m = tb.nodes[0].node.metrics().clone();
        let p = tb.peers[publisher].stats();
        eprintln!(
            "seed {seed} {codec:?}: net {:?}; node nacks_sent={} nacks_received={} rtx_sent={} missed={} plis={} gave_up={}; publisher plis_received={} nacks_received={}",
            tb.net.stats(),
            m.nacks_sent,
            m.nacks_received,
            m.retransmissions_sent,
            m.retransmissions_missed,
            m.plis_sent,
            m.nack_gave_up,
            p.plis_received,
            p.nacks_received
        );
        for (v, id) in [(b, &b_id), (c, &c_id)] {
            let s = video(&tb, v);
            // The node's first video packet to the viewer (nothing before the first packet a
            // receiver gets is NACKed: if that one was lost for good, the start is not seen).
            let first_sent = match tb.nodes[0].node.session(id).map(|s| &s.role) {
                Some(ferry_sfu::node::session::Role::Viewer(tracks)) => tracks
                    .iter()
                    .find(|t| t.line.video)
                    .and_then(|t| t.munger.first_out_seq()),
                _ => None,
            };
            eprintln!(
                "  viewer {v}: packets={} missing={} {:?} range {:?}..{:?} gave_up={} recovered={} rtx={} first_key={:?} ts_regressions={} frames {}/{}",
                s.packets,
                s.received.missing(),
                s.received.holes().collect::<Vec<_>>(),
                s.received.first(),
                s.received.last(),
                s.nack_gave_up,
                s.recovered,
                s.rtx_packets,
                s.first_packet_keyframe,
                s.ts_regressions,
                s.frames_completed,
                s.frames_seen
            );
            assert!(s.packets > 300, "viewer {v} got {} packets", s.packets);
            assert_eq!(
                s.received.missing(),
                0,
                "viewer {v} lost {:?}",
                s.received.holes().collect::<Vec<_>>()
            );
            assert!(s.recovered > 0, "losses happened and were repaired");
            let first_seen = s.received.first().map(|f| f as u16);
            if first_seen == first_sent.map(|f| f as u16) {
                assert_eq!(s.first_packet_keyframe, Some(true), "IDR-aware start");
            } else {
                eprintln!("  viewer {v}: its first packet was lost for good: start not seen");
            }
            assert!(first_sent.is_some(), "viewer {v}: the node sent it video");
            assert_eq!(s.ts_regressions, 0, "monotonic timestamps");
            assert_eq!(tb.peers[v].stats().srtp_errors, 0);
            assert!(s.sender_reports > 5, "sender reports reach the viewer");
            assert!(
                s.sr_max_deviation_ticks.is_some_and(|d| d <= 90),
                "SR NTP↔RTP mapping after rewriting is within 1 ms: {:?}",
                s.sr_max_deviation_ticks
            );
        }
        assert!(m.nacks_sent > 0, "the node NACKed the publisher");
        assert!(m.retransmissions_sent > 0, "the node answered viewer NACKs");
        assert!(
            p.plis_received + p.firs_received > 0,
            "keyframe requests reached the publisher"
        );
    }
}

/// The heart of migration: every session of a node is snapshotted
/// mid-stream, encoded to bytes, and restored into a fresh core that takes
/// over the address. The unchanged peers keep going: the viewer decrypts the
/// new core's packets (same keys, continuing SRTP indices), its sequence
/// continues without a gap, and the new core decrypts the publisher.
#[test]
fn sessions_restored_into_a_fresh_core_continue_at_the_unchanged_peers() {
    let node = addr("10.0.0.100:5000");
    let mut tb = Testbed::new(7, lossy(0.01));
    tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
    let (publisher, pub_session) = tb
        .publish(node, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_millis(500));
    let (viewer, view_session) = tb.view(node, "cam", addr("10.0.0.2:4000")).unwrap();
    tb.run_for(Duration::from_secs(3));
    let before = video(&tb, viewer);
    assert!(before.packets > 100);

    let now = tb.now();
    let snaps: Vec<Vec<u8>> = [&pub_session, &view_session]
        .iter()
        .map(|id| {
            tb.node(node)
                .snapshot_session(now, id)
                .unwrap()
                .encode_to_vec()
        })
        .collect();
    eprintln!(
        "snapshot bytes: publisher {} viewer {}",
        snaps[0].len(),
        snaps[1].len()
    );

    // A fresh core takes over the address (as a restarted process, or an edge flip would).
    tb.add_node(NodeId::new("node-b").unwrap(), node).unwrap();
    for bytes in &snaps {
        let snap = ferry_proto::state::SessionSnapshot::decode(bytes.as_slice()).unwrap();
        let id = tb.node(node).restore_session(now, snap.clone()).unwrap();
        // Round trip: the restored session exports exactly what it was given.
        assert_eq!(tb.node(node).snapshot_session(now, &id).unwrap(), snap);
    }
    tb.run_for(Duration::from_secs(3));
    assert!(tb.peers[viewer].is_connected() && tb.peers[publisher].is_connected());
    tb.peers[publisher].pause_media();
    tb.run_for(Duration::from_secs(2));

    let after = video(&tb, viewer);
    let m = tb.node(node).metrics().clone();
    eprintln!(
        "restored core: rtp_received={} forwarded={} auth_failures={} replays={} rtx_sent={}; viewer packets {} -> {}, missing {}",
        m.rtp_received,
        m.rtp_forwarded,
        m.srtp_auth_failures,
        m.srtp_replays,
        m.retransmissions_sent,
        before.packets,
        after.packets,
        after.received.missing()
    );
    assert_eq!(after.ssrc, before.ssrc, "same outgoing stream");
    assert!(after.packets > before.packets + 150, "media kept flowing");
    assert_eq!(after.received.missing(), 0, "no gap in the sequence");
    assert_eq!(after.ts_regressions, 0);
    assert_eq!(
        tb.peers[viewer].stats().srtp_errors,
        0,
        "the viewer decrypts the new core"
    );
    assert_eq!(
        m.srtp_auth_failures, 0,
        "the new core decrypts the publisher"
    );
    assert!(m.rtp_received > 100 && m.rtp_forwarded > 100);
    assert_eq!(m.sessions_connected, 0, "no new DTLS handshake");
}

/// A viewer whose address changes (NAT rebinding) is followed by ICE
/// nomination from the new address; media continues there.
#[test]
fn viewer_path_switch_keeps_media_flowing() {
    let node = addr("10.0.0.100:5000");
    let mut tb = Testbed::new(11, LinkConfig::delay(Duration::from_millis(10)));
    tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
    tb.publish(node, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_millis(500));
    let (viewer, _) = tb.view(node, "cam", addr("10.0.0.2:4000")).unwrap();
    tb.run_for(Duration::from_secs(2));
    let before = video(&tb, viewer).packets;
    tb.peers[viewer].set_local_addr(addr("10.0.0.9:7000"));
    tb.run_for(Duration::from_secs(3));
    let after = video(&tb, viewer);
    assert!(
        after.packets > before + 100,
        "{before} -> {}",
        after.packets
    );
    assert!(tb.nodes[0].node.metrics().ice_path_switches >= 1);
}

/// A publisher that moves to a new address and, as browsers do after an ICE restart, sends media
/// there once a check succeeded but before the check that nominates the path: the node takes
/// that media (nothing dropped as from an unknown source), so the viewer misses nothing.
#[test]
fn publisher_media_on_a_checked_path_before_its_nomination_is_kept() {
    use ferry_sfu::ice::Nomination;
    let node = addr("10.0.0.100:5000");
    // 50 ms each way: the nominating check comes 100 ms after the first, three frames later.
    let mut tb = Testbed::new(12, LinkConfig::delay(Duration::from_millis(50)));
    tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
    let (publisher, _) = tb
        .publish(node, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_millis(500));
    let (viewer, _) = tb.view(node, "cam", addr("10.0.0.2:4000")).unwrap();
    tb.run_for(Duration::from_secs(2));
    let before = video(&tb, viewer).packets;
    tb.peers[publisher].set_nomination(Nomination::Regular);
    tb.peers[publisher].set_local_addr(addr("10.0.0.9:7000"));
    tb.run_for(Duration::from_secs(3));
    let after = video(&tb, viewer);
    let m = tb.nodes[0].node.metrics();
    assert!(
        after.packets > before + 100,
        "{before} -> {}",
        after.packets
    );
    assert!(
        m.ice_path_switches >= 1,
        "the nominating check switched the path"
    );
    assert_eq!(
        m.dropped_unknown_source, 0,
        "media on the checked path before its nomination was dropped"
    );
    assert_eq!(
        m.retransmissions_missed, 0,
        "the viewer asked for packets the node never had"
    );
    assert_eq!(after.nack_gave_up, 0, "the viewer lost packets");
}

/// A viewer that vanishes (no more ICE consent checks) is dropped after the
/// RFC 7675 30 s; the publisher and the other viewer are untouched.
#[test]
fn consent_expiry_ends_a_vanished_viewer_only() {
    let node = addr("10.0.0.100:5000");
    let mut tb = Testbed::new(13, LinkConfig::delay(Duration::from_millis(10)));
    tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
    tb.publish(node, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_millis(500));
    let (gone, _) = tb.view(node, "cam", addr("10.0.0.2:4000")).unwrap();
    let (stays, _) = tb.view(node, "cam", addr("10.0.0.3:4000")).unwrap();
    tb.run_for(Duration::from_secs(2));
    tb.net.set_down(tb.peers[gone].config().local_addr, true);
    // Its last check came at most 2.5 s (the consent interval) before it vanished.
    tb.run_for(Duration::from_secs(27));
    assert_eq!(
        tb.nodes[0].node.sessions().len(),
        3,
        "consent still valid before 30 s: {:?}",
        tb.nodes[0].events
    );
    tb.run_for(Duration::from_secs(4));
    let m = tb.nodes[0].node.metrics().clone();
    assert_eq!(m.consent_expired, 1);
    assert_eq!(tb.nodes[0].node.sessions().len(), 2);
    let before = video(&tb, stays).packets;
    tb.run_for(Duration::from_secs(1));
    assert!(
        video(&tb, stays).packets > before,
        "the other viewer still plays"
    );
}

/// Cascade relay: the stream published on node A is relayed to node B,
/// whose viewer plays it as completely as A's local viewer, with 5 % loss
/// on every path (relay-link losses repaired by relay NACKs); keyframe
/// requests from B's viewer reach the publisher through A. The relay is
/// torn down when B's viewer leaves.
#[test]
fn relayed_stream_plays_on_a_second_node() {
    let (a, b) = (addr("10.0.0.100:5000"), addr("10.0.0.101:5000"));
    let mut tb = Testbed::new(21, lossy(0.05));
    tb.add_node(NodeId::new("node-a").unwrap(), a).unwrap();
    tb.add_node(NodeId::new("node-b").unwrap(), b).unwrap();
    let (publisher, _) = tb
        .publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    let now = tb.now();
    let stream = ferry_proto::StreamId::new("cam").unwrap();
    tb.node(b).subscribe_relay(now, &stream, a);
    tb.run_for(Duration::from_millis(500));
    assert!(tb.node(b).relay_ready(&stream), "offer arrived");
    let (local, _) = tb.view(a, "cam", addr("10.0.0.2:4000")).unwrap();
    let (remote, remote_session) = tb.view(b, "cam", addr("10.0.0.3:4000")).unwrap();
    tb.run_for(Duration::from_secs(8));
    tb.peers[publisher].pause_media();
    tb.run_for(Duration::from_secs(2));
    let (ma, mb) = (tb.node(a).metrics().clone(), tb.node(b).metrics().clone());
    eprintln!(
        "relay: a sent {} retransmitted {}; b received {} refused {}; b rtx_sent {} missed {} nacks_received {}",
        ma.relay_sent,
        ma.relay_retransmitted,
        mb.relay_received,
        mb.relay_refused,
        mb.retransmissions_sent,
        mb.retransmissions_missed,
        mb.nacks_received
    );
    for v in [local, remote] {
        let s = video(&tb, v);
        eprintln!(
            "  viewer {v}: packets={} missing={} {:?} range {:?}..{:?} gave_up={} first_key={:?}",
            s.packets,
            s.received.missing(),
            s.received.holes().collect::<Vec<_>>(),
            s.received.first(),
            s.received.last(),
            s.nack_gave_up,
            s.first_packet_keyframe
        );
        assert!(s.packets > 300);
        assert_eq!(
            s.received.missing(),
            0,
            "viewer {v} lost {:?}",
            s.received.holes().collect::<Vec<_>>()
        );
        assert_eq!(s.first_packet_keyframe, Some(true));
        assert_eq!(s.ts_regressions, 0);
    }
    assert!(ma.relay_sent > 300 && mb.relay_received > 300);
    assert!(
        ma.relay_retransmitted > 0,
        "relay-link losses were repaired"
    );
    assert_eq!(mb.relay_refused, 0);
    // B's viewer leaves: the relay goes away within a couple of refresh periods.
    let now = tb.now();
    tb.node(b).delete(now, &remote_session).unwrap();
    tb.run_for(Duration::from_secs(3));
    let sent = tb.node(a).metrics().relay_sent;
    tb.run_for(Duration::from_secs(1));
    assert_eq!(
        tb.node(a).metrics().relay_sent,
        sent,
        "no relay once unused"
    );
}

/// A recording ends with its stream: at once when the publisher deletes its session, after the
/// publisher's grace period when it is lost (it may come back meanwhile, and the recording with
/// it); the open segment and the playlist with `EXT-X-ENDLIST` go out first.
#[test]
fn a_recording_ends_with_its_stream() {
    use ferry_sfu::node::{RecordingOutput, RecordingPhase};
    for deleted in [true, false] {
        let node = addr("10.0.0.100:5000");
        let mut tb = Testbed::new(41, lossy(0.0));
        tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
        let (publisher, session) = tb
            .publish(node, "cam", Codec::H264, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        let now = tb.now();
        let stream = ferry_proto::StreamId::new("cam").unwrap();
        let rec = tb
            .node(node)
            .start_recording(now, None, &stream, Some("/tmp/ferry-sim-recording".into()))
            .unwrap();
        tb.run_for(Duration::from_secs(5));
        let now = tb.now();
        if deleted {
            tb.node(node).delete(now, &session).unwrap();
        } else {
            // Its transport ends (RTCP BYE, DTLS close_notify) without a DELETE: a lost
            // publisher, whom the stream waits for.
            tb.peers[publisher].close();
            let mut waited = Duration::ZERO;
            while tb.node(node).session(&session).is_some() {
                assert!(
                    waited < Duration::from_secs(60),
                    "the publisher's session ends"
                );
                tb.run_for(Duration::from_secs(1));
                waited += Duration::from_secs(1);
            }
            let r = tb.node(node).recording(&rec.id).unwrap();
            assert_eq!(
                r.state,
                RecordingPhase::Recording,
                "waits for the publisher"
            );
            tb.run_for(ferry_sfu::node::PUBLISHER_GRACE);
        }
        tb.run_for(Duration::from_millis(100));
        let r = tb.node(node).recording(&rec.id).unwrap();
        assert_eq!(r.state, RecordingPhase::Stopped, "deleted={deleted}");
        assert!(r.frames > 100, "it took the stream's media: {r:?}");
        let mut outputs = Vec::new();
        while let Some(o) = tb.node(node).poll_recording() {
            outputs.push(o);
        }
        let playlist_last = outputs.iter().rev().find_map(|o| match o {
            RecordingOutput::Put(_, obj) if obj.name.ends_with(".m3u8") => {
                Some(String::from_utf8_lossy(&obj.bytes).into_owned())
            }
            _ => None,
        });
        assert!(
            playlist_last.is_some_and(|p| p.contains("#EXT-X-ENDLIST")),
            "the playlist was closed"
        );
        assert!(matches!(outputs.last(), Some(RecordingOutput::Ended(id)) if *id == rec.id));
    }
}

/// The "DTLS ClientHello race" (RTPEngine, Asterisk, FreeSWITCH): a DTLS record from an
/// address that passed no ICE connectivity check — a stranger, or the peer's own host on
/// another port — is dropped before any DTLS state sees it (counted as from an unknown
/// source), while the session waits for its peer's handshake; the peer then connects as if
/// nothing had come.
#[test]
fn dtls_from_an_address_that_passed_no_ice_check_is_dropped() {
    let node = addr("10.0.0.100:5000");
    let mut tb = Testbed::new(3, LinkConfig::delay(Duration::from_millis(20)));
    tb.add_node(NodeId::new("node-a").unwrap(), node).unwrap();
    let (publisher, _) = tb
        .publish(node, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    // A record that reads as a DTLS 1.2 ClientHello (content type 22, epoch 0).
    let hello = [
        22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let now = tb.now();
    for from in ["10.0.0.66:4444", "10.0.0.1:4001"] {
        tb.node(node)
            .handle_datagram(now, addr(from), &mut hello.clone());
    }
    assert_eq!(tb.node(node).metrics().dropped_unknown_source, 2);
    tb.run_for(Duration::from_secs(2));
    assert!(tb.peers[publisher].stats().connected, "the peer connected");
    let m = tb.node(node).metrics();
    assert_eq!(m.dtls_failures, 0);
    assert_eq!(m.sessions_connected, 1);
    // After it connected, the same from a stranger is dropped the same way.
    let (now, before) = (tb.now(), tb.node(node).metrics().dropped_unknown_source);
    tb.node(node)
        .handle_datagram(now, addr("10.0.0.66:4444"), &mut hello.clone());
    assert_eq!(tb.node(node).metrics().dropped_unknown_source, before + 1);
    tb.run_for(Duration::from_millis(500));
    assert!(tb.peers[publisher].stats().connected);
}
