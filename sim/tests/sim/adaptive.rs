//! Per-viewer adaptation in the deterministic testbed: a publisher sends three simulcast layers
//! (q 150 kbit/s, h 500 kbit/s, f 2.5 Mbit/s), viewers sit behind links of their own (a
//! bottleneck with a drop-tail queue), and the node estimates each link from the viewer's
//! transport-wide CC feedback. Each viewer gets the layer its link carries; a capacity step
//! down moves it down, a step back up moves it up again; the free viewer beside it never moves.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::{NodeId, SessionId};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::SimulcastConfig;
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;

use crate::support;
use support::video;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const NODE: &str = "10.0.0.100:5000";

/// A bottleneck of `kbit` with a queue of 200 ms of it (as `tc … tbf latency 200ms`).
fn bottleneck(kbit: u64) -> LinkConfig {
    let bps = kbit * 1000;
    LinkConfig::delay(Duration::from_millis(20)).with_rate(bps, (bps / 8 / 5) as usize)
}

/// A node, a simulcast publisher, a free viewer and a viewer behind `kbit`.
fn world(seed: u64, codec: Codec, kbit: u64) -> (Testbed, usize, usize, SocketAddr, SessionId) {
    let mut tb = Testbed::new(seed, LinkConfig::delay(Duration::from_millis(20)));
    tb.simulcast = Some(SimulcastConfig::chrome_720p());
    tb.add_node(NodeId::new("node-a").unwrap(), addr(NODE))
        .unwrap();
    tb.publish(addr(NODE), "cam", codec, addr("10.0.0.1:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    let shaped = addr("10.0.0.3:4000");
    tb.set_link_to(shaped, bottleneck(kbit));
    let (free, _) = tb.view(addr(NODE), "cam", addr("10.0.0.2:4000")).unwrap();
    let (slow, slow_id) = tb.view(addr(NODE), "cam", shaped).unwrap();
    (tb, free, slow, shaped, slow_id)
}

/// The layer (0 = q … 2 = f) viewer `v` got most packets of over the next `span`, and its
/// largest arrival gap meanwhile.
fn layer_over(tb: &mut Testbed, v: usize, span: Duration) -> (u8, Duration) {
    let before = video(tb, v).layer_packets.clone();
    tb.peers[v].reset_arrival_gaps();
    tb.run_for(span);
    let s = video(tb, v);
    let got: Vec<u64> = (0..3)
        .map(|l| s.layer_packets.get(l).copied().unwrap_or(0) - before.get(l).copied().unwrap_or(0))
        .collect();
    let top = (0..3).max_by_key(|&l| got[l]).unwrap_or(0) as u8;
    (top, s.max_arrival_gap)
}

#[test]
fn each_viewer_gets_the_layer_its_link_carries_and_follows_its_capacity() {
    for (seed, codec) in [(1, Codec::Vp8), (2, Codec::H264)] {
        let (mut tb, free, slow, shaped, _) = world(seed, codec, 400);
        // Settle (start at 1 Mbit/s, probes find the rest).
        tb.run_for(Duration::from_secs(10));
        let (f, _) = layer_over(&mut tb, free, Duration::from_secs(5));
        let (s, gap) = layer_over(&mut tb, slow, Duration::from_secs(5));
        eprintln!("seed {seed} {codec:?}: at 400 kbit/s: free {f} slow {s} (gap {gap:?})");
        assert_eq!(f, 2, "seed {seed}: the free viewer plays the top layer");
        assert_eq!(s, 0, "seed {seed}: 400 kbit/s carries q (150k) only");
        assert!(
            gap < Duration::from_millis(500),
            "seed {seed}: no freeze on q: {gap:?}"
        );
        // The link widens: up to h within 5 s (probe, then switch at h's keyframe).
        tb.set_link_to(shaped, bottleneck(1_000));
        tb.run_for(Duration::from_secs(5));
        let (s, _) = layer_over(&mut tb, slow, Duration::from_secs(3));
        eprintln!("seed {seed} {codec:?}: at 1 Mbit/s: slow {s}");
        assert_eq!(s, 1, "seed {seed}: 1 Mbit/s carries h (500k), not f (2.5M)");
        // Free: back to the top.
        tb.set_link_to(shaped, LinkConfig::delay(Duration::from_millis(20)));
        tb.run_for(Duration::from_secs(5));
        let (s, _) = layer_over(&mut tb, slow, Duration::from_secs(3));
        eprintln!("seed {seed} {codec:?}: free link: slow {s}");
        assert_eq!(s, 2, "seed {seed}: a free link climbs back to f");
        // And down again: 400 kbit/s, q within 2 s, no freeze of more than 500 ms after that.
        tb.set_link_to(shaped, bottleneck(400));
        tb.run_for(Duration::from_secs(2));
        let (s, gap) = layer_over(&mut tb, slow, Duration::from_secs(5));
        eprintln!("seed {seed} {codec:?}: back at 400 kbit/s: slow {s} (gap {gap:?})");
        assert_eq!(s, 0, "seed {seed}: down to q after the drop");
        assert!(gap < Duration::from_millis(500), "seed {seed}: {gap:?}");
        let (f, _) = layer_over(&mut tb, free, Duration::from_secs(2));
        assert_eq!(f, 2, "seed {seed}: the free viewer never moved");
        let m = tb.nodes[0].node.metrics();
        assert!(m.twcc_feedback_received > 0 && m.probe_packets > 0 && m.layer_downs > 0);
    }
}

/// Probe packets node `at` sent so far (all its cores).
fn probes(tb: &Testbed, at: SocketAddr) -> u64 {
    tb.nodes
        .iter()
        .filter(|n| n.addr == at)
        .map(|n| n.node.metrics().probe_packets)
        .sum()
}

/// A viewer settled on q behind 400 kbit/s moves to node-b and back: each node it arrives on
/// keeps it on q (its estimate comes with it, and it climbs nothing for
/// `allocator::MOVE_HOLD`), sends it no probe meanwhile, and it sees no gap of 500 ms.
#[test]
fn a_shaped_viewer_that_moves_keeps_its_layer_and_sends_no_probe_burst() {
    use rand::SeedableRng;
    const B: &str = "10.0.0.101:5000";
    for seed in [3, 4] {
        let (mut tb, _free, slow, _, id) = world(seed, Codec::Vp8, 400);
        tb.add_node(NodeId::new("node-b").unwrap(), addr(B))
            .unwrap();
        tb.run_for(Duration::from_secs(10));
        let (s, _) = layer_over(&mut tb, slow, Duration::from_secs(3));
        assert_eq!(s, 0, "seed {seed}: settled on q");
        let mut timing = support::Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        for (from, to) in [(addr(NODE), addr(B)), (addr(B), addr(NODE))] {
            let probes_before = probes(&tb, to);
            support::migrate(&mut tb, &mut timing, &id, from, to);
            let (s, gap) = layer_over(&mut tb, slow, Duration::from_secs(4));
            let sent = probes(&tb, to) - probes_before;
            eprintln!("seed {seed}: on {to}: layer {s}, gap {gap:?}, {sent} probe packets");
            assert_eq!(s, 0, "seed {seed}: still q on {to}");
            assert!(gap < Duration::from_millis(500), "seed {seed}: gap {gap:?}");
            assert_eq!(sent, 0, "seed {seed}: no probe within the move's hold");
        }
    }
}

/// Video frames per temporal layer viewer `v` got over the next `span` (its layer too).
fn temporal_over(tb: &mut Testbed, v: usize, span: Duration) -> (u8, [u64; 4], Duration) {
    let before = video(tb, v).temporal_frames;
    let (layer, gap) = layer_over(tb, v, span);
    let after = video(tb, v).temporal_frames;
    let mut got = [0; 4];
    for t in 0..4 {
        got[t] = after[t] - before[t];
    }
    (layer, got, gap)
}

/// A publisher whose encodings carry three temporal layers each (as Chrome's VP8 simulcast):
/// a viewer whose link carries a layer at half its frame rate but not at its full rate gets
/// that (the base and middle temporal layers, few frames of the top one), one whose link
/// carries not even the lowest layer whole gets the lowest layer at a lower frame rate rather
/// than losing packets, and both climb back to every frame of the top layer on a free link.
#[test]
fn a_viewer_between_two_layers_gets_the_higher_one_at_a_lower_frame_rate() {
    // Lossless links: the seed changes nothing here.
    for seed in [5] {
        let mut tb = Testbed::new(seed, LinkConfig::delay(Duration::from_millis(20)));
        tb.simulcast = Some(SimulcastConfig::chrome_720p().with_temporal_layers(3));
        tb.add_node(NodeId::new("node-a").unwrap(), addr(NODE))
            .unwrap();
        tb.publish(addr(NODE), "cam", Codec::Vp8, addr("10.0.0.1:4000"))
            .unwrap();
        tb.run_for(Duration::from_secs(1));
        // h (500 k) whole does not fit 520 kbit/s with the audio, h up to T1 (60 %) does.
        let mid = addr("10.0.0.3:4000");
        tb.set_link_to(mid, bottleneck(520));
        // q (150 k) whole does not fit 160 kbit/s with the audio, q up to T0 (40 %) does.
        let starved = addr("10.0.0.4:4000");
        tb.set_link_to(starved, bottleneck(160));
        let (m, _) = tb.view(addr(NODE), "cam", mid).unwrap();
        let (s, _) = tb.view(addr(NODE), "cam", starved).unwrap();
        tb.run_for(Duration::from_secs(15));
        let (layer, frames, gap) = temporal_over(&mut tb, m, Duration::from_secs(5));
        eprintln!(
            "seed {seed}: 520 kbit/s: layer {layer} frames per temporal layer {frames:?}, gap {gap:?}"
        );
        assert_eq!(layer, 1, "seed {seed}: h");
        assert!(frames[0] > 0 && frames[1] > 0, "seed {seed}: {frames:?}");
        // At full rate T2 has as many frames as T0 and T1 together; a climb that is tried
        // and comes back within the window brings a few.
        assert!(
            frames[2] * 4 < frames[0] + frames[1],
            "seed {seed}: T2: {frames:?}"
        );
        assert!(gap < Duration::from_millis(500), "seed {seed}: {gap:?}");
        let (layer, frames, gap) = temporal_over(&mut tb, s, Duration::from_secs(5));
        eprintln!(
            "seed {seed}: 160 kbit/s: layer {layer} frames per temporal layer {frames:?}, gap {gap:?}"
        );
        assert_eq!(layer, 0, "seed {seed}: q");
        assert!(frames[0] > 0, "seed {seed}: {frames:?}");
        assert!(
            frames[2] * 4 < frames[0] + frames[1],
            "seed {seed}: T2: {frames:?}"
        );
        assert!(gap < Duration::from_millis(500), "seed {seed}: {gap:?}");
        let session = tb.nodes[0].node.metrics();
        assert!(session.layer_downs > 0);
        // Free links: every frame of f within 10 s.
        tb.set_link_to(mid, LinkConfig::delay(Duration::from_millis(20)));
        tb.set_link_to(starved, LinkConfig::delay(Duration::from_millis(20)));
        tb.run_for(Duration::from_secs(10));
        for v in [m, s] {
            let (layer, frames, _) = temporal_over(&mut tb, v, Duration::from_secs(3));
            eprintln!("seed {seed}: free: layer {layer} frames {frames:?}");
            assert_eq!(layer, 2, "seed {seed}: back to f");
            assert!(
                frames[2] * 3 > frames[0] + frames[1],
                "seed {seed}: T2 back: {frames:?}"
            );
        }
    }
}
