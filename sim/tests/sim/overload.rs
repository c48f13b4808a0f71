//! An overloaded node in the deterministic simulation (its CPU modelled: every datagram it
//! sends costs time, what arrives meanwhile waits in its receive queue): at twice the load it
//! can forward, the node sheds whole video frames of a rotating share of its viewers instead of
//! queueing, so the delay of what it delivers stays bounded and every viewer keeps decoding;
//! without shedding the queue (and the delay) grows without bound. When the load goes, every
//! viewer gets every frame again.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::NodeId;
use ferry_sfu::codec::Codec;
use ferry_sfu::node::overload::OverloadConfig;
use ferry_sfu::peer::RecvStreamStats;
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;

const A: &str = "10.0.0.100:5000";
const VIEWERS: usize = 20;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn video(tb: &Testbed, peer: usize) -> RecvStreamStats {
    tb.peers[peer].stats().video().next().cloned().unwrap()
}

struct Run {
    /// 99th percentile and largest time a datagram waited at the node, after the first
    /// two seconds of overload.
    p99: Duration,
    max: Duration,
    /// Per viewer: (keyframes, completed frames) received during the overload.
    during: Vec<(u64, u64)>,
    tb: Testbed,
}

/// A publisher and [`VIEWERS`] viewers on one node; after 2 s the node's CPU can send only
/// half of what the fan-out needs, for `overload` of virtual time.
fn overloaded(seed: u64, shed: bool, overload: Duration) -> Run {
    let mut tb = Testbed::new(
        seed,
        LinkConfig {
            jitter: Duration::from_millis(1),
            ..LinkConfig::delay(Duration::from_millis(5))
        },
    );
    // The forward bench's stream: 4 Mbit/s of video (~350 packets/s) and Opus (50/s).
    tb.video_bitrate_bps = 4_000_000;
    tb.add_node(NodeId::new("node-a").unwrap(), addr(A))
        .unwrap();
    if !shed {
        tb.node(addr(A)).set_overload_config(OverloadConfig {
            target: Duration::ZERO,
            ..OverloadConfig::default()
        });
    }
    tb.publish(addr(A), "cam", Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    let viewers: Vec<usize> = (0..VIEWERS)
        .map(|i| {
            tb.view(addr(A), "cam", addr(&format!("10.0.1.{}:4000", i + 1)))
                .unwrap()
                .0
        })
        .collect();
    tb.run_for(Duration::from_secs(2));
    // Measured demand: the publisher's packets per second, each sent to every viewer.
    let before = tb.node(addr(A)).metrics().rtp_received;
    tb.run_for(Duration::from_secs(1));
    let pps = (tb.node(addr(A)).metrics().rtp_received - before) as f64;
    let demand = pps * VIEWERS as f64;
    let start: Vec<(u64, u64)> = viewers
        .iter()
        .map(|&v| {
            let s = video(&tb, v);
            (s.keyframes, s.frames_completed)
        })
        .collect();
    // Capacity: half the demand.
    tb.set_cpu(
        addr(A),
        Duration::ZERO,
        Duration::from_secs_f64(2.0 / demand),
    );
    let t0 = tb.now();
    tb.run_for(overload);
    let cpu = tb.nodes[0].cpu.as_ref().unwrap();
    let mut waited: Vec<Duration> = cpu
        .waited
        .iter()
        .filter(|(at, _)| *at >= t0 + Duration::from_secs(2))
        .map(|(_, w)| *w)
        .collect();
    waited.sort();
    let p99 = waited[waited.len() * 99 / 100];
    let max = *waited.last().unwrap();
    let during = viewers
        .iter()
        .zip(&start)
        .map(|(&v, (k, f))| {
            let s = video(&tb, v);
            (s.keyframes - k, s.frames_completed - f)
        })
        .collect();
    Run {
        p99,
        max,
        during,
        tb,
    }
}

#[test]
fn at_twice_its_capacity_a_node_sheds_whole_frames_and_keeps_the_delay_bounded() {
    for seed in [1, 2, 3] {
        let mut r = overloaded(seed, true, Duration::from_secs(10));
        let m = r.tb.node(addr(A)).metrics().clone();
        let ratio = r.tb.node(addr(A)).overload().ratio();
        eprintln!(
            "seed {seed}: waited p99 {:?} max {:?}, shed ratio {ratio:.2}, dropped {} sheds {} rotations {}, per viewer (keyframes, frames) {:?}",
            r.p99,
            r.max,
            m.dropped_overload,
            m.overload_sheds,
            m.overload_keyframe_requests,
            r.during
        );
        assert!(r.p99 <= Duration::from_millis(100), "p99 {:?}", r.p99);
        assert!(m.dropped_overload > 0 && m.overload_sheds > 0);
        assert!(ratio > 0.2, "{ratio}");
        for (i, (keyframes, frames)) in r.during.iter().enumerate() {
            assert!(*keyframes >= 1, "viewer {i} got a keyframe through");
            assert!(*frames >= 30, "viewer {i} decoded frames: {frames}");
        }
        // Whole frames: nothing a viewer got has a hole or a timestamp going back.
        for v in 1..=VIEWERS {
            let s = video(&r.tb, v);
            assert_eq!(s.ts_regressions, 0, "viewer {v}");
            assert_eq!(s.nack_gave_up, 0, "viewer {v}: no gap left unrepaired");
        }
        // The load goes: the node stops shedding and everyone gets every frame.
        r.tb.set_cpu(addr(A), Duration::ZERO, Duration::from_nanos(100));
        r.tb.run_for(Duration::from_secs(8));
        assert_eq!(r.tb.node(addr(A)).overload().ratio(), 0.0);
        let frames: Vec<u64> = (1..=VIEWERS)
            .map(|v| video(&r.tb, v).frames_completed)
            .collect();
        r.tb.run_for(Duration::from_secs(2));
        for v in 1..=VIEWERS {
            let got = video(&r.tb, v).frames_completed - frames[v - 1];
            assert!((58..=62).contains(&got), "viewer {v}: {got} frames in 2 s");
        }
    }
}

#[test]
fn without_shedding_the_same_load_queues_for_seconds() {
    let r = overloaded(1, false, Duration::from_secs(6));
    eprintln!("no shedding: waited p99 {:?} max {:?}", r.p99, r.max);
    assert!(r.max > Duration::from_secs(1), "max {:?}", r.max);
}
