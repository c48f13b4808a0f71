//! Migration on the node cores (DESIGN §4), in the deterministic
//! simulation: sessions move between two nodes while media flows, through
//! an edge or through the source's forwarding pointer, with loss, jitter
//! and reordering, at seeded random moments, including crashes.
//!
//! The steps are driven here in protocol order (the migrator's protocol
//! core is tested on its own); what these tests check are the invariants
//! every receiver must see: no gap after repair, monotonic timestamps, no
//! SRTP index used for two different packets, no new SSRC, one owner.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use ferry_migrator::SessionHost;
use ferry_proto::{NodeId, SessionId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;
use rand::{RngExt, SeedableRng};

use crate::support;
use support::{Timing, addr, id_of, link, migrate, video};

const A: &str = "10.0.0.100:5000";
const B: &str = "10.0.0.101:5000";
const EDGE: &str = "10.0.0.200:3478";

/// Every viewer: packets flowing, nothing lost after repair, monotonic
/// timestamps, no SRTP index reused, the stream started at a keyframe; the
/// publisher got no SRTCP index twice either.
fn check_invariants(tb: &Testbed, publisher: usize, viewers: &[usize], min_packets: u64) {
    check_invariants_under_loss(tb, publisher, viewers, min_packets, 0);
}

/// Assertions [`check_invariants_under_loss`] makes per viewer, and for the publisher.
const CHECKS_PER_VIEWER: usize = 6;
const CHECKS_PER_PUBLISHER: usize = 2;

/// [`check_invariants`], where up to `unrepaired` single packets may stay lost: on a lossy
/// network a packet lost on two hops (publisher → node → viewer) can outlast the viewer's NACK
/// retries, whatever a migration does. A hole of two packets or more (what a migration that
/// dropped or misnumbered packets leaves) still fails.
fn check_invariants_under_loss(
    tb: &Testbed,
    publisher: usize,
    viewers: &[usize],
    min_packets: u64,
    unrepaired: u64,
) -> usize {
    for &v in viewers {
        let s = video(tb, v);
        let st = tb.peers[v].stats();
        eprintln!(
            "  viewer {v}: packets={} missing={} holes={:?} recovered={} rtx={} max_gap={:?} srtp_errors={} reuse={}",
            s.packets,
            s.received.missing(),
            s.received.holes().take(8).collect::<Vec<_>>(),
            s.recovered,
            s.rtx_packets,
            s.max_arrival_gap,
            st.srtp_errors,
            st.srtp_index_reuse,
        );
        eprintln!(
            "    gave_up={} nacks={} ",
            s.nack_gave_up,
            tb.peers[v].stats().nacks_sent
        );
        assert!(s.packets > min_packets, "viewer {v} keeps receiving");
        assert!(
            s.received.missing() <= unrepaired && s.received.holes().all(|(a, b)| a == b),
            "viewer {v}: gap-free after repair (at most {unrepaired} single packets lost): {:?}",
            s.received.holes().take(8).collect::<Vec<_>>()
        );
        assert_eq!(s.ts_regressions, 0, "viewer {v}: monotonic timestamps");
        assert!(s.keyframes >= 1, "viewer {v} decoded from a keyframe");
        assert_eq!(st.srtp_index_reuse, 0, "viewer {v}: no SRTP index reuse");
        assert!(st.connected, "viewer {v} still connected");
    }
    let p = tb.peers[publisher].stats();
    assert_eq!(p.srtp_index_reuse, 0, "publisher: no SRTCP index reuse");
    assert!(p.connected, "publisher still connected");
    CHECKS_PER_VIEWER * viewers.len() + CHECKS_PER_PUBLISHER
}

struct World {
    tb: Testbed,
    a: SocketAddr,
    b: SocketAddr,
    publisher: usize,
    publisher_id: SessionId,
    local: usize,
    local_id: SessionId,
    remote: usize,
    remote_id: SessionId,
}

/// Node A with the publisher and viewer `local`, node B with viewer
/// `remote` fed by the relay; behind an edge or reached directly.
fn world(seed: u64, loss: f64, codec: Codec, edge: bool) -> World {
    world_on(seed, loss, codec, edge, 1, "cam")
}

/// [`world`] on nodes of `cores` cores each (`--workers`), the stream named `name`.
fn world_on(seed: u64, loss: f64, codec: Codec, edge: bool, cores: usize, name: &str) -> World {
    world_linked(seed, link(loss), codec, edge, cores, name)
}

/// [`world_on`] with every link as `cfg`.
fn world_linked(
    seed: u64,
    cfg: LinkConfig,
    codec: Codec,
    edge: bool,
    cores: usize,
    name: &str,
) -> World {
    let (a, b) = (addr(A), addr(B));
    let mut tb = Testbed::new(seed, cfg);
    if edge {
        tb.add_edge(addr(EDGE));
    }
    for (id, at) in [("node-a", a), ("node-b", b)] {
        let id = NodeId::new(id).unwrap();
        let made = if cores > 1 {
            tb.add_sharded_node(id, at, cores).unwrap()
        } else {
            vec![tb.add_node(id, at).unwrap()]
        };
        if edge {
            for i in made {
                tb.nodes[i].node.set_candidates(vec![addr(EDGE)]);
                tb.nodes[i].node.set_edge(Some(addr(EDGE)), Some(at));
            }
        }
    }
    let (publisher, publisher_id) = tb.publish(a, name, codec, addr("10.0.0.1:4000")).unwrap();
    tb.run_for(Duration::from_secs(1));
    let now = tb.now();
    let stream = StreamId::new(name).unwrap();
    tb.core(b, &stream).subscribe_relay(now, &stream, a);
    tb.run_for(Duration::from_millis(300));
    // Under loss the relay's offer may take a resubscription (every second) or two.
    let mut waited = Duration::ZERO;
    while !tb.core(b, &stream).has_stream(&stream) {
        assert!(
            waited < Duration::from_secs(10),
            "no relay of {name} to B in 10 s"
        );
        tb.run_for(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    }
    let (local, local_id) = tb.view(a, name, addr("10.0.0.2:4000")).unwrap();
    let (remote, remote_id) = tb.view(b, name, addr("10.0.0.3:4000")).unwrap();
    tb.run_for(Duration::from_secs(2));
    World {
        tb,
        a,
        b,
        publisher,
        publisher_id,
        local,
        local_id,
        remote,
        remote_id,
    }
}

/// The acceptance scenario on the cores: the publisher a→b, then viewer
/// `local` a→b, then both back, with loss, through the edge and through
/// forwarding pointers, for VP8 and H.264, at seeded random moments.
#[test]
fn publisher_and_viewer_move_and_back_without_a_gap() {
    for (seed, codec, edge) in [
        (11, Codec::Vp8, true),
        (12, Codec::H264, true),
        (13, Codec::Vp8, false),
        (14, Codec::H264, false),
        (15, Codec::Vp8, true),
    ] {
        eprintln!("seed {seed} {codec:?} edge={edge}");
        move_and_back(world(seed, 0.02, codec, edge), seed, edge);
    }
}

/// On a network that loses and reorders nothing (10 ms, jitter 3 ms: FIFO), the moves of
/// [`publisher_and_viewer_move_and_back_without_a_gap`] leave no gap for a viewer to repair:
/// every packet arrives once, in order, with no NACK sent. (With loss a gap is repaired and
/// the test above cannot tell a hole the migration made from one the network made.)
#[test]
fn a_lossless_network_needs_no_repair_across_migrations() {
    let fifo = LinkConfig {
        jitter: Duration::from_millis(3),
        ..LinkConfig::delay(Duration::from_millis(10))
    };
    for seed in 21..29u64 {
        let codec = if seed % 2 == 0 {
            Codec::Vp8
        } else {
            Codec::H264
        };
        let edge = seed % 4 < 2;
        eprintln!("seed {seed} {codec:?} edge={edge}");
        let w = world_linked(seed, fifo, codec, edge, 1, "cam");
        let (local, remote) = (w.local, w.remote);
        let tb = move_and_back(w, seed, edge);
        for v in [local, remote] {
            let s = video(&tb, v);
            let nacks = tb.peers[v].stats().nacks_sent;
            assert_eq!(
                (s.recovered, s.rtx_packets, s.duplicates, nacks),
                (0, 0, 0, 0),
                "seed {seed} {codec:?} edge={edge} viewer {v}: repaired (recovered, rtx, \
                 duplicates, nacks sent) on a lossless network; holes now {:?}",
                s.received.holes().take(8).collect::<Vec<_>>()
            );
        }
    }
}

/// A publisher moving to the node its stream was relayed to: what the source relayed just
/// before the freeze may reach the target after it activated the publisher (a slow relay link
/// here; in the Chromium ice-restart test, a target busy elsewhere read it late). The target
/// still takes those packets from its old origin for a while, so its viewer loses none of them.
/// (Before, the target dropped the relay at activation and refused them —
/// `relay_refused` +1..3 — and the viewer NACKed the hole, repaired by the publisher's
/// retransmission: Chrome counts such a packet lost.)
#[test]
fn a_publisher_moving_to_its_relay_node_keeps_what_was_relayed_in_flight() {
    let fifo = LinkConfig {
        jitter: Duration::ZERO,
        ..LinkConfig::delay(Duration::from_millis(1))
    };
    for (seed, edge) in [(41, false), (42, true), (43, false), (44, true)] {
        let w = world_linked(seed, fifo, Codec::Vp8, edge, 1, "cam");
        let (a, b) = (w.a, w.b);
        // The relay A→B runs 100 ms behind; every step of the migration takes under 30 ms.
        let mut tb = w.tb;
        tb.net.set_link(
            a,
            b,
            LinkConfig {
                jitter: Duration::ZERO,
                ..LinkConfig::delay(Duration::from_millis(100))
            },
        );
        tb.run_for(Duration::from_millis(500));
        let before = metrics(&tb, b).relay_refused;
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        migrate(&mut tb, &mut timing, &w.publisher_id, a, b);
        tb.run_for(Duration::from_secs(2));
        let refused = metrics(&tb, b).relay_refused - before;
        let s = video(&tb, w.remote);
        let holes: Vec<_> = s.received.holes().take(8).collect();
        eprintln!(
            "seed {seed} edge={edge}: node-b refused {refused} relayed packets; viewer on B: \
             holes {holes:?}, nacks sent {}, recovered {}, rtx {}",
            tb.peers[w.remote].stats().nacks_sent,
            s.recovered,
            s.rtx_packets
        );
        assert_eq!(
            refused, 0,
            "seed {seed}: node-b refused what node-a relayed before the move"
        );
        assert!(
            holes.is_empty(),
            "seed {seed}: the viewer on B misses {holes:?}"
        );
        // Through the edge, the publisher's packets after the flip reach node-b directly, 100
        // ms before what node-a relayed just before it: the viewer NACKs that reordering before
        // the relayed packets come. Without an edge they come the same way, in order.
        if !edge {
            assert_eq!(
                s.recovered, 0,
                "seed {seed}: the viewer on B repaired what node-a had relayed"
            );
        }
        assert!(
            metrics(&tb, b).relay_drained > 0,
            "seed {seed}: node-b took relayed packets after the move"
        );
    }
}

/// A viewer migrating to a node whose relay of its stream has just lost its last viewer (the
/// relay would be torn down at the next tick): the relay stays for the imported viewer, which
/// plays on after its cutover. (Before, a tick between import and activation tore the relay
/// down, and the viewer activated on a node without its stream: no media until its client
/// recovered — the Chromium ice-restart test's "no media" flake.)
#[test]
fn a_viewer_migrating_in_keeps_the_relay_it_needs() {
    for seed in [21, 22] {
        let (a, b) = (addr(A), addr(B));
        let mut tb = Testbed::new(seed, link(0.0));
        tb.add_node(NodeId::new("node-a").unwrap(), a).unwrap();
        tb.add_node(NodeId::new("node-b").unwrap(), b).unwrap();
        let (publisher, _) = tb
            .publish(a, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        let stream = StreamId::new("cam").unwrap();
        let now = tb.now();
        tb.node(b).subscribe_relay(now, &stream, a);
        tb.run_for(Duration::from_millis(300));
        let (_, leaving) = tb.view(b, "cam", addr("10.0.0.2:4000")).unwrap();
        let (mover, mover_id) = tb.view(a, "cam", addr("10.0.0.3:4000")).unwrap();
        tb.run_for(Duration::from_secs(2));
        // B's relay loses its only viewer, and the mover arrives while the relay's teardown is
        // due (it is checked every relay::REFRESH).
        let now = tb.now();
        tb.node(b).delete(now, &leaving).unwrap();
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        support::migrate_slowly(
            &mut tb,
            &mut timing,
            &mover_id,
            a,
            b,
            ferry_sfu::cluster::relay::REFRESH * 3,
        );
        let before = video(&tb, mover).packets;
        tb.run_for(Duration::from_secs(2));
        let after = video(&tb, mover).packets;
        eprintln!(
            "seed {seed}: {} video packets in the 2 s after the cutover",
            after - before
        );
        assert!(
            after - before > 100,
            "seed {seed}: the migrated viewer gets its stream on node-b ({} packets)",
            after - before
        );
        tb.peers[publisher].pause_media();
    }
}

/// The same between nodes of two cores each (`--workers 2`): the stream lives on core 1 of
/// both; every datagram — the clients', the edge's tunnels, the relay, the forwarding
/// pointers' — reaches it through the router, wherever the kernel's hash delivered it.
#[test]
fn sessions_move_and_back_between_nodes_of_two_cores() {
    let lobby = StreamId::new("lobby").unwrap();
    assert_eq!(ferry_sfu::cluster::shards::shard_of(&lobby, 2), 1);
    for (seed, codec, edge) in [(31, Codec::Vp8, true), (32, Codec::H264, false)] {
        eprintln!("seed {seed} {codec:?} edge={edge} (2 cores)");
        let w = world_on(seed, 0.02, codec, edge, 2, "lobby");
        let tb = move_and_back(w, seed, edge);
        let on_core = |at: SocketAddr, k: usize| {
            tb.nodes
                .iter()
                .filter(|n| n.addr == at)
                .nth(k)
                .unwrap()
                .node
                .sessions()
                .len()
        };
        assert_eq!((on_core(addr(A), 0), on_core(addr(A), 1)), (0, 2));
        assert_eq!((on_core(addr(B), 0), on_core(addr(B), 1)), (0, 1));
    }
}

/// The Chromium migration test's sequence in the simulation, on nodes of two cores: the
/// publisher a→b, the local viewer a→b, the remote viewer b→a (into the node its stream has
/// just left, which must relay it in again), then each back, a move every 1.5–2.5 s, 1 % loss.
/// Every viewer plays through every move. (Before, a lost relay offer left the viewer that
/// moved in without media until the relay's next refresh, up to a second, and what the source
/// sent meanwhile was never repaired: the Chromium ice-restart test's rare "no media".)
#[test]
fn every_session_moves_and_back_on_nodes_of_two_cores() {
    use rand::RngExt;
    let seeds: Vec<u64> = match std::env::var("DEBUG_MOVES") {
        Ok(v) => vec![v.parse().unwrap()],
        Err(_) => (61..69).collect(),
    };
    for seed in seeds {
        let edge = seed % 2 == 0;
        let codec = if seed % 4 < 2 {
            Codec::Vp8
        } else {
            Codec::H264
        };
        let mut w = world_on(seed, 0.01, codec, edge, 2, "cam");
        let (a, b) = (w.a, w.b);
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let moves = [
            (w.publisher_id.clone(), a, b),
            (w.local_id.clone(), a, b),
            (w.remote_id.clone(), b, a),
            (w.publisher_id.clone(), b, a),
            (w.local_id.clone(), b, a),
            (w.remote_id.clone(), a, b),
        ];
        for (k, (id, from, to)) in moves.iter().enumerate() {
            let before: Vec<u64> = [w.local, w.remote]
                .iter()
                .map(|&v| video(&w.tb, v).packets)
                .collect();
            migrate(&mut w.tb, &mut timing, id, *from, *to);
            let pause = Duration::from_millis(timing.0.random_range(1500..2500));
            w.tb.run_for(pause);
            for (i, &v) in [w.local, w.remote].iter().enumerate() {
                let st = video(&w.tb, v);
                if std::env::var("DEBUG_MOVES").is_ok() {
                    eprintln!(
                        "  seed {seed} move {k}: viewer {v} +{} missing {} holes {:?} gap {:?}",
                        st.packets - before[i],
                        st.received.missing(),
                        st.received.holes().take(4).collect::<Vec<_>>(),
                        st.max_arrival_gap
                    );
                }
                let got = st.packets - before[i];
                assert!(
                    got > 60,
                    "seed {seed} {codec:?} edge={edge}: viewer {v} got {got} video packets in                      the {pause:?} after move {k}"
                );
            }
        }
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(2));
        for v in [w.local, w.remote] {
            let s = video(&w.tb, v);
            eprintln!(
                "seed {seed} {codec:?} edge={edge}: viewer {v} packets {} missing {} largest gap {:?}",
                s.packets,
                s.received.missing(),
                s.max_arrival_gap
            );
            assert!(
                s.max_arrival_gap < Duration::from_millis(300),
                "seed {seed}: viewer {v}: largest gap {:?}",
                s.max_arrival_gap
            );
            // What the relay missed while it was set up is NACKed at its source (without that,
            // seeds 65 and 66 leave holes of 20-40 packets); a single packet lost on the two
            // hops and not repaired in time remains possible (seed 63).
            assert!(
                s.received.missing() <= 1,
                "seed {seed}: viewer {v}: holes {:?}",
                s.received.holes().take(8).collect::<Vec<_>>()
            );
        }
    }
}

/// Counters of the node at `at`, its cores summed.
fn metrics(tb: &Testbed, at: SocketAddr) -> ferry_sfu::node::metrics::NodeMetrics {
    let mut m = ferry_sfu::node::metrics::NodeMetrics::default();
    for n in tb.nodes.iter().filter(|n| n.addr == at) {
        m.add(n.node.metrics());
    }
    m
}

/// Sessions on the node at `at`, all cores.
fn sessions(tb: &Testbed, at: SocketAddr) -> usize {
    tb.nodes
        .iter()
        .filter(|n| n.addr == at)
        .map(|n| n.node.sessions().len())
        .sum()
}

/// The acceptance scenario: the publisher a→b, then viewer `local` a→b, then both back, at
/// seeded random moments; checks the invariants and gives the world back.
fn move_and_back(mut w: World, seed: u64, edge: bool) -> Testbed {
    let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    let (a, b) = (w.a, w.b);
    let before: Vec<u64> = [w.local, w.remote]
        .iter()
        .map(|&v| video(&w.tb, v).packets)
        .collect();
    let e1 = migrate(&mut w.tb, &mut timing, &w.publisher_id, a, b);
    w.tb.run_for(Duration::from_millis(1500));
    let e2 = migrate(&mut w.tb, &mut timing, &w.local_id, a, b);
    w.tb.run_for(Duration::from_millis(1500));
    let e3 = migrate(&mut w.tb, &mut timing, &w.publisher_id, b, a);
    w.tb.run_for(Duration::from_millis(1500));
    let e4 = migrate(&mut w.tb, &mut timing, &w.local_id, b, a);
    assert_eq!(
        (e1, e2, e3, e4),
        (2, 2, 3, 3),
        "each cutover raises the epoch"
    );
    w.tb.run_for(Duration::from_secs(2));
    w.tb.peers[w.publisher].pause_media();
    w.tb.run_for(Duration::from_secs(2));
    check_invariants(&w.tb, w.publisher, &[w.local, w.remote], before[0] + 400);
    for v in [w.local, w.remote] {
        let gap = video(&w.tb, v).max_arrival_gap;
        assert!(
            gap < Duration::from_millis(250),
            "viewer {v}: largest gap {gap:?}"
        );
    }
    let (ma, mb) = (metrics(&w.tb, a), metrics(&w.tb, b));
    assert_eq!(ma.migrations_out + mb.migrations_out, 4);
    assert_eq!(ma.migrations_in + mb.migrations_in, 4);
    assert_eq!(
        sessions(&w.tb, a),
        2,
        "publisher and local viewer back on A"
    );
    assert_eq!(sessions(&w.tb, b), 1, "remote viewer on B");
    if edge {
        let em = w.tb.edges[0].edge.metrics().clone();
        eprintln!("  edge: {em:?}");
        assert!(em.flips >= 4, "every cutover flipped the route");
    } else {
        assert!(ma.forwarded_to_client + mb.forwarded_to_client > 0);
    }
    w.tb
}

/// The target dies before commit: the source resumes at a higher epoch from
/// exactly where it froze; nothing the target prepared ever reaches a client.
#[test]
fn target_crash_before_commit_rolls_back() {
    for (seed, edge, publisher) in [(21, true, true), (22, false, false), (23, true, false)] {
        eprintln!("seed {seed} edge={edge} publisher={publisher}");
        let mut w = world(seed, 0.02, Codec::Vp8, edge);
        let (a, b) = (w.a, w.b);
        let id = if publisher {
            w.publisher_id.clone()
        } else {
            w.local_id.clone()
        };
        let stream = StreamId::new("cam").unwrap();
        let now = w.tb.now();
        w.tb.node(b).prewarm(now, &id, &stream, publisher).unwrap();
        let snap = w.tb.node(a).export_snapshot(now, &id).unwrap();
        w.tb.node(b).import_snapshot(now, snap).unwrap();
        w.tb.run_for(Duration::from_millis(40));
        let now = w.tb.now();
        let (fin, wal) = w.tb.node(a).freeze(now, &id).unwrap();
        w.tb.node(b).apply_wal(now, &id, &wal).unwrap();
        w.tb.node(b).install_final(now, fin.clone()).unwrap();
        w.tb.run_for(Duration::from_millis(20));
        // B is gone before it heard the commit.
        let remote_stats = video(&w.tb, w.remote).packets;
        w.tb.crash_node(b);
        w.tb.run_for(Duration::from_millis(200));
        let now = w.tb.now();
        w.tb.node(a).resume(now, &id, fin.epoch + 1).unwrap();
        w.tb.run_for(Duration::from_secs(3));
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(2));
        // The viewer on B died with B; the others must not notice.
        check_invariants(&w.tb, w.publisher, &[w.local], 300);
        assert!(video(&w.tb, w.remote).packets >= remote_stats);
        assert_eq!(w.tb.node(a).metrics().migrations_rolled_back, 1);
        let gap = video(&w.tb, w.local).max_arrival_gap;
        assert!(gap < Duration::from_millis(400), "largest gap {gap:?}");
        if edge {
            assert_eq!(
                w.tb.edges[0].edge.metrics().flips,
                0,
                "the route never moved"
            );
        }
    }
}

/// The source dies right after the cutover: behind the edge the session
/// plays on from the target, and a stale owner is fenced.
#[test]
fn source_crash_after_cutover_leaves_the_target_playing() {
    for (seed, viewer) in [(31, true), (32, false)] {
        eprintln!("seed {seed} viewer={viewer}");
        let mut w = world(seed, 0.02, Codec::Vp8, true);
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let (a, b) = (w.a, w.b);
        if viewer {
            // Move the viewer to B, then A (with the publisher) must stay up;
            // instead: move the publisher first so A holds only the viewer.
            migrate(&mut w.tb, &mut timing, &w.publisher_id, a, b);
            w.tb.run_for(Duration::from_millis(500));
            migrate(&mut w.tb, &mut timing, &w.local_id, a, b);
        } else {
            migrate(&mut w.tb, &mut timing, &w.publisher_id, a, b);
        }
        w.tb.run_for(Duration::from_millis(5));
        w.tb.crash_node(a);
        w.tb.run_for(Duration::from_secs(4));
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(2));
        let viewers: Vec<usize> = if viewer {
            vec![w.local, w.remote]
        } else {
            vec![w.remote]
        };
        check_invariants(&w.tb, w.publisher, &viewers, 300);
    }
}

/// A stale owner's datagrams never reach the client: after a cutover the
/// edge drops what the old owner sends under its old epoch.
#[test]
fn the_edge_fences_a_stale_owner() {
    let mut w = world(41, 0.0, Codec::Vp8, true);
    let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(41));
    let (a, b) = (w.a, w.b);
    migrate(&mut w.tb, &mut timing, &w.local_id, a, b);
    w.tb.run_for(Duration::from_millis(200));
    // Forge what a confused old owner would send: a datagram to the viewer
    // under the old epoch, authenticated with the cluster key.
    let client = addr("10.0.0.2:4000");
    let mut buf = Vec::new();
    ferry_sfu::cluster::tunnel::write(
        &w.tb.cluster_key(),
        &ferry_sfu::cluster::tunnel::TunnelHeader {
            flags: ferry_sfu::cluster::tunnel::TO_CLIENT,
            epoch: 1,
            client,
        },
        &[0x80, 96, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1],
        &mut buf,
    );
    let fenced = w.tb.edges[0].edge.metrics().fenced;
    let now = w.tb.now();
    w.tb.edges[0].edge.handle_datagram(now, a, &buf);
    assert!(w.tb.edges[0].edge.poll_transmit().is_none());
    assert_eq!(w.tb.edges[0].edge.metrics().fenced, fenced + 1);
    w.tb.run_for(Duration::from_secs(1));
    check_invariants(&w.tb, w.publisher, &[w.local, w.remote], 100);
}

/// The audit the invariant tests rely on does catch a two-time pad: a
/// target activated from a stale snapshot while the source keeps running
/// (what the commit protocol forbids) reuses SRTCP indices the source used.
#[test]
fn the_srtp_audit_catches_two_owners() {
    let mut w = world(51, 0.0, Codec::Vp8, true);
    let (a, b) = (w.a, w.b);
    let stream = StreamId::new("cam").unwrap();
    let now = w.tb.now();
    w.tb.node(b)
        .prewarm(now, &w.local_id, &stream, false)
        .unwrap();
    let snap = w.tb.node(a).export_snapshot(now, &w.local_id).unwrap();
    w.tb.node(b).import_snapshot(now, snap).unwrap();
    w.tb.run_for(Duration::from_millis(1500));
    let now = w.tb.now();
    w.tb.node(b).activate(now, &w.local_id, 2).unwrap();
    w.tb.run_for(Duration::from_secs(3));
    let reuse = w.tb.peers[w.local].stats().srtp_index_reuse;
    assert!(reuse > 0, "two owners reuse SRTP/SRTCP indices");
}

// ---------------------------------------------------------------------------
// The same scenarios driven by the real protocol engine: one
// `ferry_migrator::Migrator` per node, its messages carried by a seeded
// in-memory network (delay, loss) on the virtual clock.

use ferry_migrator::{MigrationEvent, MigrationPlan, Migrator, Outcome, Phase, Role};
use ferry_proto::MigrationId;
use ferry_proto::api::CutoverMode;

struct InFlight {
    at: std::time::Instant,
    from: NodeId,
    to: NodeId,
    msg: ferry_migrator::Message,
}

struct Protocol {
    nodes: Vec<(SocketAddr, NodeId, Migrator)>,
    net: Vec<InFlight>,
    /// Everything delivered, for replay.
    log: Vec<(NodeId, NodeId, ferry_migrator::Message)>,
    events: Vec<(NodeId, MigrationEvent)>,
    rng: rand_chacha::ChaCha8Rng,
    loss: f64,
    crashed: Vec<SocketAddr>,
}

impl Protocol {
    fn new(tb: &mut Testbed, at: &[SocketAddr], seed: u64, loss: f64) -> Self {
        let nodes = at
            .iter()
            .map(|&a| {
                let id = id_of(tb, a);
                (
                    a,
                    id.clone(),
                    Migrator::new(id, ferry_migrator::Config::default()),
                )
            })
            .collect();
        Self {
            nodes,
            net: Vec::new(),
            log: Vec::new(),
            events: Vec::new(),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            loss,
            crashed: Vec::new(),
        }
    }

    fn index(&self, id: &NodeId) -> usize {
        self.nodes.iter().position(|n| &n.1 == id).unwrap()
    }

    fn start(
        &mut self,
        tb: &mut Testbed,
        id: &str,
        session: &SessionId,
        from: SocketAddr,
        to: SocketAddr,
        publisher: bool,
    ) {
        let (stream, epoch) = {
            let s = tb.node(from).session(session).unwrap();
            (s.stream.clone(), s.epoch)
        };
        let target = id_of(tb, to);
        let i = self.nodes.iter().position(|n| n.0 == from).unwrap();
        let now = tb.now();
        let plan = MigrationPlan {
            id: MigrationId::new(id).unwrap(),
            session: session.clone(),
            stream,
            publisher,
            target,
            epoch,
            mode: CutoverMode::Edge,
            trace_parent: String::new(),
        };
        self.nodes[i].2.start(now, tb.node(from), plan).unwrap();
        self.collect(tb);
    }

    /// Moves transmits onto the network and events into the log.
    fn collect(&mut self, tb: &Testbed) {
        let now = tb.now();
        for (_, me, m) in &mut self.nodes {
            while let Some((to, msg)) = m.poll_transmit() {
                if self.rng.random_bool(self.loss) {
                    continue;
                }
                let delay = Duration::from_micros(self.rng.random_range(500..3_000));
                self.net.push(InFlight {
                    at: now + delay,
                    from: me.clone(),
                    to,
                    msg,
                });
            }
            while let Some(e) = m.poll_event() {
                self.events.push((me.clone(), e));
            }
        }
    }

    /// Runs media and protocol together for `d`, in 1 ms steps.
    fn run(&mut self, tb: &mut Testbed, d: Duration) {
        let until = tb.now() + d;
        while tb.now() < until {
            tb.run_for(Duration::from_millis(1));
            let now = tb.now();
            let due: Vec<InFlight> = {
                let (due, keep) = std::mem::take(&mut self.net)
                    .into_iter()
                    .partition(|f| f.at <= now);
                self.net = keep;
                due
            };
            for f in due {
                let i = self.index(&f.to);
                let at = self.nodes[i].0;
                if self.crashed.contains(&at) {
                    continue;
                }
                self.log.push((f.from.clone(), f.to.clone(), f.msg.clone()));
                self.nodes[i]
                    .2
                    .handle_message(now, tb.node(at), &f.from, f.msg);
            }
            for i in 0..self.nodes.len() {
                let at = self.nodes[i].0;
                if self.crashed.contains(&at) {
                    continue;
                }
                if self.nodes[i].2.poll_timeout().is_some_and(|t| t <= now) {
                    self.nodes[i].2.handle_timeout(now, tb.node(at));
                }
            }
            self.collect(tb);
        }
    }

    /// Runs until a report for `id` arrives from `node` (or `limit` passes).
    fn until_finished(
        &mut self,
        tb: &mut Testbed,
        node: &NodeId,
        id: &str,
        limit: Duration,
    ) -> Option<ferry_migrator::MigrationReport> {
        let until = tb.now() + limit;
        while tb.now() < until {
            self.run(tb, Duration::from_millis(1));
            if let Some(r) = self.report(node, id) {
                return Some(r);
            }
        }
        None
    }

    fn report(&self, node: &NodeId, id: &str) -> Option<ferry_migrator::MigrationReport> {
        self.events.iter().find_map(|(n, e)| match e {
            MigrationEvent::Finished(r) if n == node && r.id.as_str() == id => Some((**r).clone()),
            _ => None,
        })
    }

    /// Runs until `node` enters `phase` of `id` as `role`.
    fn until_phase(&mut self, tb: &mut Testbed, node: &NodeId, id: &str, role: Role, phase: Phase) {
        for _ in 0..5_000 {
            let seen = self.events.iter().any(|(n, e)| {
                matches!(e, MigrationEvent::Phase { id: i, role: r, phase: p }
                    if n == node && i.as_str() == id && *r == role && *p == phase)
            });
            if seen {
                return;
            }
            self.run(tb, Duration::from_millis(1));
        }
        panic!("{node} never entered {phase:?} of {id}");
    }
}

/// What a node looks like from outside: its sessions, their epochs and
/// whether they send, plus the migration counters.
fn node_view(tb: &mut Testbed, at: SocketAddr) -> (Vec<(String, u64, bool)>, u64, u64, u64) {
    let n = tb.node(at);
    let mut s: Vec<_> = n
        .sessions()
        .iter()
        .filter_map(|i| {
            n.session(&i.id)
                .map(|s| (i.id.to_string(), s.epoch, s.active))
        })
        .collect();
    s.sort();
    let m = n.metrics();
    (
        s,
        m.migrations_out,
        m.migrations_in,
        m.migrations_rolled_back,
    )
}

/// The acceptance scenario with the real protocol engine: publisher a→b,
/// viewer a→b, both back, over a lossy control network; then every message
/// of the four finished migrations is delivered again, and nothing changes.
#[test]
fn the_migrator_moves_sessions_and_replays_change_nothing() {
    for (seed, codec, edge) in [(61, Codec::Vp8, true), (62, Codec::H264, false)] {
        eprintln!("seed {seed} {codec:?} edge={edge}");
        let mut w = world(seed, 0.02, codec, edge);
        let (a, b) = (w.a, w.b);
        let mut p = Protocol::new(&mut w.tb, &[a, b], seed, 0.05);
        let (na, nb) = (id_of(&mut w.tb, a), id_of(&mut w.tb, b));
        let steps = [
            ("m1", w.publisher_id.clone(), a, b, true, &na),
            ("m2", w.local_id.clone(), a, b, false, &na),
            ("m3", w.publisher_id.clone(), b, a, true, &nb),
            ("m4", w.local_id.clone(), b, a, false, &nb),
        ];
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        for (id, session, from, to, publisher, source) in &steps {
            p.start(&mut w.tb, id, session, *from, *to, *publisher);
            let r = p
                .until_finished(&mut w.tb, source, id, Duration::from_secs(5))
                .unwrap_or_else(|| panic!("{id} did not finish"));
            eprintln!(
                "  {id}: {:?} phases={:?} snapshot={}B wal={}B/{} blackout={:?}",
                r.outcome,
                r.phases.to_ms(),
                r.snapshot_bytes,
                r.wal_bytes,
                r.wal_records,
                r.blackout
            );
            assert_eq!(r.outcome, Outcome::Committed, "{id}: {:?}", r.reason);
            p.run(&mut w.tb, Duration::from_millis(1000) + timing.pause());
        }
        p.run(&mut w.tb, Duration::from_secs(1));
        let before = (node_view(&mut w.tb, a), node_view(&mut w.tb, b));
        assert_eq!(before.0.1 + before.1.1, 4, "four migrations out");
        assert_eq!(before.0.2 + before.1.2, 4, "four migrations in");
        // Replay: every message delivered so far, again, in order.
        let log = std::mem::take(&mut p.log);
        let reports = p
            .events
            .iter()
            .filter(|(_, e)| matches!(e, MigrationEvent::Finished(_)))
            .count();
        for (from, to, msg) in log {
            let i = p.index(&to);
            let at = p.nodes[i].0;
            let now = w.tb.now();
            p.nodes[i].2.handle_message(now, w.tb.node(at), &from, msg);
            p.collect(&w.tb);
        }
        p.run(&mut w.tb, Duration::from_secs(1));
        let after = (node_view(&mut w.tb, a), node_view(&mut w.tb, b));
        assert_eq!(
            before, after,
            "replaying finished migrations changed a node"
        );
        let reports_after = p
            .events
            .iter()
            .filter(|(_, e)| matches!(e, MigrationEvent::Finished(_)))
            .count();
        assert_eq!(reports, reports_after, "a replay produced another report");
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(2));
        // 2 % loss on every link: a single packet may outlast its NACKs, as in the sweep.
        check_invariants_under_loss(&w.tb, w.publisher, &[w.local, w.remote], 400, 1);
        for v in [w.local, w.remote] {
            let gap = video(&w.tb, v).max_arrival_gap;
            assert!(
                gap < Duration::from_millis(250),
                "viewer {v}: largest gap {gap:?}"
            );
        }
    }
}

/// The target process dies mid-migration (at a seeded phase): the source's
/// engine times out, rolls back and the session plays on from the source.
#[test]
fn the_migrator_rolls_back_when_the_target_dies() {
    for (seed, phase, publisher) in [
        (71, Phase::Snapshot, true),
        (72, Phase::Wal, false),
        (73, Phase::Cutover, true),
        (74, Phase::Cutover, false),
    ] {
        eprintln!("seed {seed} crash at {phase:?} publisher={publisher}");
        let mut w = world(seed, 0.02, Codec::Vp8, true);
        let (a, b) = (w.a, w.b);
        let mut p = Protocol::new(&mut w.tb, &[a, b], seed, 0.0);
        let na = id_of(&mut w.tb, a);
        let id = if publisher {
            w.publisher_id.clone()
        } else {
            w.local_id.clone()
        };
        p.start(&mut w.tb, "crash", &id, a, b, publisher);
        p.until_phase(&mut w.tb, &na, "crash", Role::Source, phase);
        w.tb.crash_node(b);
        p.crashed.push(b);
        let r = p
            .until_finished(&mut w.tb, &na, "crash", Duration::from_secs(5))
            .expect("the source gives up on a dead target");
        eprintln!(
            "  {:?} {:?} phases={:?}",
            r.outcome,
            r.reason,
            r.phases.to_ms()
        );
        assert_eq!(r.outcome, Outcome::RolledBack);
        p.run(&mut w.tb, Duration::from_secs(3));
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(2));
        check_invariants(&w.tb, w.publisher, &[w.local], 300);
        let s = w.tb.node(a).session(&id).unwrap();
        assert!(s.active, "the session is live on the source");
        assert_eq!(
            w.tb.edges[0].edge.metrics().flips,
            0,
            "the route never moved"
        );
        let gap = video(&w.tb, w.local).max_arrival_gap;
        assert!(gap < Duration::from_millis(800), "largest gap {gap:?}");
    }
}

/// The source process dies right after it handed over: the target owns the
/// session and it plays on from there.
#[test]
fn the_migrator_survives_the_source_dying_after_cutover() {
    for seed in [81, 82, 83, 84, 85, 86] {
        eprintln!("seed {seed}");
        let mut w = world(seed, 0.02, Codec::Vp8, true);
        let (a, b) = (w.a, w.b);
        let mut p = Protocol::new(&mut w.tb, &[a, b], seed, 0.0);
        let nb = id_of(&mut w.tb, b);
        let na = id_of(&mut w.tb, a);
        // Publisher first (so A then only holds the local viewer), then the viewer.
        p.start(&mut w.tb, "p", &w.publisher_id.clone(), a, b, true);
        assert_eq!(
            p.until_finished(&mut w.tb, &na, "p", Duration::from_secs(5))
                .unwrap()
                .outcome,
            Outcome::Committed
        );
        p.run(&mut w.tb, Duration::from_millis(500));
        p.start(&mut w.tb, "v", &w.local_id.clone(), a, b, false);
        // The target activated (it heard Commit); the source may not have
        // heard Committed yet.
        let r = p
            .until_finished(&mut w.tb, &nb, "v", Duration::from_secs(5))
            .unwrap();
        assert_eq!(r.outcome, Outcome::Committed);
        w.tb.crash_node(a);
        p.crashed.push(a);
        p.run(&mut w.tb, Duration::from_secs(4));
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(2));
        check_invariants(&w.tb, w.publisher, &[w.local, w.remote], 300);
    }
}

/// After a migration the client can restart ICE at the target (the
/// `ice-restart` cutover): the migrated session answers the PATCH.
#[test]
fn a_migrated_session_takes_an_ice_restart_at_the_target() {
    let mut w = world(91, 0.0, Codec::Vp8, false);
    let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(91));
    let (a, b) = (w.a, w.b);
    migrate(&mut w.tb, &mut timing, &w.publisher_id, a, b);
    migrate(&mut w.tb, &mut timing, &w.local_id, a, b);
    w.tb.run_for(Duration::from_millis(200));
    for id in [w.publisher_id.clone(), w.local_id.clone()] {
        let frag = "a=ice-ufrag:newU\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\n";
        let now = w.tb.now();
        let r = w.tb.node(b).patch(now, &id, frag, Some("*"));
        assert!(r.is_ok(), "{id}: {r:?}");
    }
}

/// A drain of a relay-fed node: the publisher on B, viewers on A fed by a
/// relay from B, all viewers moved to B by the real protocol engine, up to
/// four at once, over a lossy network.
#[test]
fn draining_relay_fed_viewers_to_the_origin_loses_nothing() {
    for seed in 101u64..=115 {
        eprintln!("seed {seed}");
        let (a, b) = (addr(A), addr(B));
        let mut tb = Testbed::new(seed, link(0.02));
        tb.add_edge(addr(EDGE));
        tb.add_node_behind_edge(NodeId::new("node-a").unwrap(), a, addr(EDGE))
            .unwrap();
        tb.add_node_behind_edge(NodeId::new("node-b").unwrap(), b, addr(EDGE))
            .unwrap();
        let (publisher, _) = tb
            .publish(b, "cam", Codec::Vp8, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        let now = tb.now();
        tb.node(a)
            .subscribe_relay(now, &StreamId::new("cam").unwrap(), b);
        tb.run_for(Duration::from_millis(300));
        let mut viewers = Vec::new();
        for i in 0..8 {
            let (v, id) = tb
                .view(a, "cam", addr(&format!("10.0.1.{i}:4000")))
                .unwrap();
            viewers.push((v, id));
        }
        // DTLS over a lossy link may need a retransmission or two (1 s, 2 s).
        for _ in 0..10 {
            tb.run_for(Duration::from_secs(1));
            if viewers.iter().all(|(v, _)| {
                let st = tb.peers[*v].stats();
                st.connected && st.video().map(|r| r.packets).sum::<u64>() > 0
            }) {
                break;
            }
        }
        for (v, id) in &viewers {
            let st = tb.peers[*v].stats();
            assert!(
                st.connected && st.video().map(|r| r.packets).sum::<u64>() > 0,
                "viewer {v} ({id}) plays before the drain: connected={} ssrcs={:?}",
                st.connected,
                st.ssrcs_seen
            );
        }
        let mut p = Protocol::new(&mut tb, &[a, b], seed, 0.02);
        let na = id_of(&mut tb, a);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for chunk in viewers.chunks(4) {
            for (i, (_, id)) in chunk.iter().enumerate() {
                p.start(&mut tb, &format!("d{seed}-{id}-{i}"), id, a, b, false);
                p.run(&mut tb, Duration::from_micros(rng.random_range(0..3_000)));
            }
            for (i, (_, id)) in chunk.iter().enumerate() {
                let r = p
                    .until_finished(
                        &mut tb,
                        &na,
                        &format!("d{seed}-{id}-{i}"),
                        Duration::from_secs(5),
                    )
                    .unwrap();
                assert_eq!(r.outcome, Outcome::Committed, "{:?}", r.reason);
            }
        }
        let at_end: Vec<u64> = viewers
            .iter()
            .map(|(v, _)| video(&tb, *v).packets)
            .collect();
        p.run(&mut tb, Duration::from_secs(2));
        for ((v, id), before) in viewers.iter().zip(&at_end) {
            let after = video(&tb, *v).packets;
            assert!(
                after > before + 50,
                "viewer {v} ({id}) plays on from B: {before} → {after} packets"
            );
        }
        tb.peers[publisher].pause_media();
        tb.run_for(Duration::from_secs(2));
        let ids: Vec<usize> = viewers.iter().map(|(v, _)| *v).collect();
        check_invariants(&tb, publisher, &ids, 100);
        assert_eq!(tb.node(b).sessions().len(), 9, "everyone on B");
    }
}

// ---------------------------------------------------------------------------
// The seeded sweep: the invariants of DESIGN §4 under random faults, many seeds.

/// What goes wrong during a swept migration.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Nothing: the session moves and is there.
    None,
    /// The target dies in the middle (at `phase` of the source): the source rolls back.
    TargetDies(Phase),
    /// The source dies once the target committed (the publisher moved first, so the source
    /// holds only the moved viewer's old copy): the target plays on.
    SourceDiesAfterCommit,
}

/// One seed of the sweep: a random codec, path (edge or the source's forwarding pointer),
/// media loss (0–5 %) and control-message loss (0–5 %), which session moves, and a [`Fault`].
/// Returns what it did; panics (naming the seed) when an invariant fails.
fn sweep_one(seed: u64) -> Swept {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let codec = if rng.random_bool(0.5) {
        Codec::Vp8
    } else {
        Codec::H264
    };
    let media_loss = [0.0, 0.01, 0.02, 0.03, 0.05][rng.random_range(0..5usize)];
    let control_loss = [0.0, 0.01, 0.02, 0.05][rng.random_range(0..4usize)];
    let fault = match rng.random_range(0..6u32) {
        0 => Fault::TargetDies(Phase::Snapshot),
        1 => Fault::TargetDies(Phase::Wal),
        2 => Fault::TargetDies(Phase::Cutover),
        3 => Fault::SourceDiesAfterCommit,
        _ => Fault::None,
    };
    // Without an edge the clients still send to the source, which forwards to the target
    // (the forwarding pointer) until they move their path: a source that dies then takes the
    // path with it (the client reconnects; docs/migration.md). Behind an edge the route moves.
    let edge = matches!(fault, Fault::SourceDiesAfterCommit) || rng.random_bool(0.5);
    let move_publisher = rng.random_bool(0.5);
    eprintln!(
        "sweep seed {seed}: {codec:?} edge={edge} media loss {media_loss} control loss \
         {control_loss} {fault:?} publisher={move_publisher} (replay: FERRY_SIM_SEED={seed})"
    );
    let mut w = world(seed, media_loss, codec, edge);
    // Both viewers play before anything moves (under loss a first keyframe can take seconds:
    // the wait is printed, and bounded).
    let mut waited = Duration::ZERO;
    while [w.local, w.remote]
        .iter()
        .any(|&v| w.tb.peers[v].stats().video().next().is_none())
    {
        assert!(
            waited < Duration::from_secs(10),
            "seed {seed}: a viewer got no video in 10 s"
        );
        w.tb.run_for(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    }
    if !waited.is_zero() {
        eprintln!("  first video after {waited:?} more");
    }
    let (a, b) = (w.a, w.b);
    let mut p = Protocol::new(&mut w.tb, &[a, b], seed, control_loss);
    let (na, nb) = (id_of(&mut w.tb, a), id_of(&mut w.tb, b));
    let mut checks = 0;
    // A migration ends committed or rolled back: under message loss a rollback (the cutover
    // timed out, say) is a correct outcome, as long as the session stays whole on one node.
    let migrate = |p: &mut Protocol, w: &mut World, id: &str, session: SessionId, publisher| {
        p.start(&mut w.tb, id, &session, a, b, publisher);
        let r = p
            .until_finished(&mut w.tb, &na, id, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("seed {seed}: {id} did not finish"));
        eprintln!("  {id}: {:?} {:?}", r.outcome, r.reason);
        p.run(&mut w.tb, Duration::from_millis(500));
        r.outcome
    };
    let mut outcomes = Vec::new();
    let (alive, viewers): (Vec<SocketAddr>, Vec<usize>) = match fault {
        Fault::None => {
            let (id, publisher) = if move_publisher {
                (w.publisher_id.clone(), true)
            } else {
                (w.local_id.clone(), false)
            };
            outcomes.push(migrate(&mut p, &mut w, "m", id, publisher));
            (vec![a, b], vec![w.local, w.remote])
        }
        Fault::TargetDies(phase) => {
            let (id, publisher) = if move_publisher {
                (w.publisher_id.clone(), true)
            } else {
                (w.local_id.clone(), false)
            };
            p.start(&mut w.tb, "m", &id, a, b, publisher);
            p.until_phase(&mut w.tb, &na, "m", Role::Source, phase);
            w.tb.crash_node(b);
            p.crashed.push(b);
            let r = p
                .until_finished(&mut w.tb, &na, "m", Duration::from_secs(10))
                .unwrap_or_else(|| panic!("seed {seed}: the source never gave up"));
            assert_eq!(r.outcome, Outcome::RolledBack, "seed {seed}");
            outcomes.push(r.outcome);
            (vec![a], vec![w.local])
        }
        Fault::SourceDiesAfterCommit => {
            let publisher_id = w.publisher_id.clone();
            let first = migrate(&mut p, &mut w, "p", publisher_id, true);
            outcomes.push(first);
            p.start(&mut w.tb, "v", &w.local_id.clone(), a, b, false);
            let r = p
                .until_finished(&mut w.tb, &nb, "v", Duration::from_secs(10))
                .unwrap_or_else(|| panic!("seed {seed}: the target never finished"));
            eprintln!("  v (target): {:?} {:?}", r.outcome, r.reason);
            outcomes.push(r.outcome);
            if first == Outcome::Committed && r.outcome == Outcome::Committed {
                // Both sessions are on B now: A dies.
                w.tb.crash_node(a);
                p.crashed.push(a);
                (vec![b], vec![w.local, w.remote])
            } else {
                (vec![a, b], vec![w.local, w.remote])
            }
        }
    };
    p.run(&mut w.tb, Duration::from_secs(3));
    // One owner per session: every session of a live peer is active on exactly one live node.
    let mut sessions = vec![w.publisher_id.clone(), w.local_id.clone()];
    if alive.contains(&b) {
        sessions.push(w.remote_id.clone());
    }
    for id in &sessions {
        let owners = alive
            .iter()
            .filter(|&&at| w.tb.node(at).session(id).is_some_and(|s| s.active))
            .count();
        assert_eq!(owners, 1, "seed {seed}: session {id} has {owners} owners");
        checks += 1;
    }
    // No session lost, no SRTP index reused, every viewer gap-free after repair, monotonic
    // timestamps, started at a keyframe, still connected.
    w.tb.peers[w.publisher].pause_media();
    w.tb.run_for(Duration::from_secs(2));
    let unrepaired = if media_loss > 0.0 { 2 } else { 0 };
    let checked = check_invariants_under_loss(&w.tb, w.publisher, &viewers, 200, unrepaired);
    let fingerprint = viewers
        .iter()
        .map(|&v| {
            let s = video(&w.tb, v);
            format!(
                "packets={} missing={} recovered={} rtx={} gave_up={} max_gap={:?} nacks={}",
                s.packets,
                s.received.missing(),
                s.recovered,
                s.rtx_packets,
                s.nack_gave_up,
                s.max_arrival_gap,
                w.tb.peers[v].stats().nacks_sent
            )
        })
        .collect();
    Swept {
        fingerprint,
        checks: checks + checked,
        committed: outcomes
            .iter()
            .filter(|o| **o == Outcome::Committed)
            .count(),
        rolled_back: outcomes
            .iter()
            .filter(|o| **o == Outcome::RolledBack)
            .count(),
        killed: 2 - alive.len(),
    }
}

/// What one seed of the sweep did.
#[derive(Debug, Default)]
struct Swept {
    /// What each checked viewer received (to compare two runs of a seed).
    fingerprint: Vec<String>,
    /// Invariant checks made (each assertion over a session or a viewer).
    checks: usize,
    committed: usize,
    rolled_back: usize,
    /// Nodes killed.
    killed: usize,
}

/// The simulation is a function of its seed: a seed run twice in one process, where every hash
/// map gets keys of its own (so any order taken from one differs between the runs), gives every
/// viewer the same packets, losses, repairs and gaps. Seed 1513 took one of two outcomes per
/// process while the relay's NACKs went out in its hash map's order.
#[test]
fn a_seed_replays_identically() {
    for seed in (1_000..1_016).chain([1_513]) {
        let (first, second) = (sweep_one(seed), sweep_one(seed));
        assert_eq!(first.fingerprint, second.fingerprint, "seed {seed}");
    }
}

/// The sweep: `FERRY_SIM_SEEDS` seeds (200 by default; thousands in `ferry bench`-length runs)
/// from `FERRY_SIM_FROM` (1000), or the one `FERRY_SIM_SEED` names. Prints how many seeds and invariant checks passed.
#[test]
fn seeded_sweep_of_migrations_with_loss_and_kills() {
    let seeds: Vec<u64> = match std::env::var("FERRY_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(one) => vec![one],
        None => {
            let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
            let n = var("FERRY_SIM_SEEDS").unwrap_or(200u64);
            let from = var("FERRY_SIM_FROM").unwrap_or(1_000u64);
            (from..from + n).collect()
        }
    };
    let mut total = Swept::default();
    for &seed in &seeds {
        let s = sweep_one(seed);
        total.checks += s.checks;
        total.committed += s.committed;
        total.rolled_back += s.rolled_back;
        total.killed += s.killed;
    }
    println!(
        "migration sweep: {} seeds, {} invariant checks passed; migrations {} committed, {} \
         rolled back; {} nodes killed",
        seeds.len(),
        total.checks,
        total.committed,
        total.rolled_back,
        total.killed
    );
}
