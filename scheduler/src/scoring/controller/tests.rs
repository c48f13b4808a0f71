use super::*;
use crate::scoring::capability::Capability;
use crate::scoring::heartbeat::{Codec, GpuFigures};
use crate::scoring::snapshot::{ControllerSnapshot, RestoreError};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

fn id(s: &str) -> NodeId {
    NodeId::new(s).unwrap()
}

fn at(start: Instant, ms: u64) -> Instant {
    start + Duration::from_millis(ms)
}

/// An idle node; with `gpu` its score is the maximum (target W), without it 2/3 W.
fn idle(node: &str, gpu: bool) -> Heartbeat {
    Heartbeat {
        node: id(node),
        cpu: 0.0,
        memory: 0.0,
        bandwidth_used_bps: 0,
        bandwidth_capacity_bps: 1_000_000_000,
        packet_loss: 0.0,
        sessions: 0,
        session_capacity: 100,
        sessions_to_move: 0,
        gpu: gpu.then_some(GpuFigures {
            vram_free_bytes: 24 * GIB,
            vram_total_bytes: 24 * GIB,
            nvenc_sessions_free: 8,
            nvenc_sessions_max: 8,
        }),
        encoders: vec![Codec::H264],
    }
}

/// The default settings without the cold start and the linear ramp, so a lone node climbs as
/// the smoothing alone lets it (the rules these tests are about).
fn warm() -> ControllerConfig {
    ControllerConfig {
        cold_start_at_target: false,
        ramp_ms: 0,
        ..ControllerConfig::default()
    }
}

#[test]
fn nodes_that_start_together_start_at_their_target_and_later_ones_ramp() {
    let start = Instant::now();
    let mut ctl = WeightController::new(ControllerConfig::default(), start).unwrap();
    let (a, b) = (idle("node-a", true), idle("node-b", true));
    ctl.handle_heartbeat(start, a.clone());
    assert_eq!(
        ctl.weight(&id("node-a")),
        Some(Weight::FULL),
        "nobody to protect: no ramp"
    );
    // node-b reports 300 ms later: the same cold start (node-a already has weight).
    ctl.handle_heartbeat(at(start, 300), b.clone());
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::FULL));
    assert_eq!(
        events(&mut ctl),
        [changed("node-a", 0, 10_000), changed("node-b", 0, 10_000)]
    );
    run(&mut ctl, start, 1, 9, &[a.clone(), b.clone()]);
    // The last moment of the 10 s grace still counts (an idle node without GPU: 2/3 W) ...
    assert!(ctl.is_cold_start(at(start, 9_999)));
    ctl.handle_heartbeat(at(start, 9_999), idle("node-c", false));
    assert_eq!(ctl.weight(&id("node-c")), Some(Weight::from_units(6_667)));
    assert!(!ctl.node(&id("node-c")).unwrap().ramping);
    // ... its end does not: node-d joins a running cluster and ramps, W per 600 s.
    assert!(!ctl.is_cold_start(at(start, 10_000)));
    ctl.handle_heartbeat(at(start, 10_000), idle("node-d", true));
    assert_eq!(ctl.weight(&id("node-d")), Some(Weight::ZERO));
    assert!(ctl.node(&id("node-d")).unwrap().ramping);
    events(&mut ctl);
    let all = [a, b, idle("node-c", false), idle("node-d", true)];
    run(&mut ctl, start, 10, 10, &all);
    assert_eq!(
        ctl.weight(&id("node-d")),
        Some(Weight::ZERO),
        "0 s into the ramp"
    );
    run(&mut ctl, start, 11, 11, &all);
    assert_eq!(events(&mut ctl), [changed("node-d", 0, 16)], "1/600 of W");
    run(&mut ctl, start, 12, 310, &all);
    assert_eq!(
        ctl.weight(&id("node-d")),
        Some(Weight::from_units(5_000)),
        "half way"
    );
    run(&mut ctl, start, 311, 609, &all);
    assert_eq!(ctl.weight(&id("node-d")), Some(Weight::from_units(9_983)));
    assert!(ctl.node(&id("node-d")).unwrap().ramping);
    run(&mut ctl, start, 610, 610, &all);
    assert_eq!(ctl.weight(&id("node-d")), Some(Weight::FULL));
    assert!(!ctl.node(&id("node-d")).unwrap().ramping, "ramp over");
    // The nodes of the cold start kept their weights all along.
    assert_eq!(ctl.weight(&id("node-a")), Some(Weight::FULL));
    assert_eq!(ctl.weight(&id("node-c")), Some(Weight::from_units(6_667)));
}

#[test]
fn a_cluster_that_lost_all_its_weight_starts_cold_again() {
    let start = Instant::now();
    let mut ctl = WeightController::new(ControllerConfig::default(), start).unwrap();
    ctl.handle_heartbeat(start, idle("node-a", true));
    run(&mut ctl, start, 1, 20, &[idle("node-a", true)]);
    ctl.set_node_state(&id("node-a"), NodeState::Draining);
    assert!(ctl.is_cold_start(at(start, 20_500)), "no node has weight");
    ctl.handle_heartbeat(at(start, 20_500), idle("node-b", true));
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::FULL));
    // Without the cold start a lone node ramps even into an empty cluster.
    let mut ctl = WeightController::new(
        ControllerConfig {
            cold_start_at_target: false,
            ..ControllerConfig::default()
        },
        start,
    )
    .unwrap();
    ctl.handle_heartbeat(start, idle("node-a", true));
    assert_eq!(ctl.weight(&id("node-a")), Some(Weight::ZERO));
    assert!(ctl.node(&id("node-a")).unwrap().ramping);
}

#[test]
fn a_node_active_again_after_a_drain_ramps_from_its_weight() {
    let start = Instant::now();
    let config = ControllerConfig {
        ramp_ms: 60_000,
        ..ControllerConfig::default()
    };
    let mut ctl = WeightController::new(config, start).unwrap();
    let hbs = [idle("node-a", true), idle("node-b", true)];
    run(&mut ctl, start, 0, 5, &hbs);
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::FULL));
    ctl.set_node_state(&id("node-b"), NodeState::Draining);
    run(&mut ctl, start, 6, 30, &hbs);
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::ZERO));
    events(&mut ctl);
    // Undrained at 30.5 s: the ramp starts at its next heartbeat (31 s), from 0, W per 60 s.
    ctl.set_node_state(&id("node-b"), NodeState::Active);
    assert!(ctl.node(&id("node-b")).unwrap().ramping);
    // The first ticks are held back by the smoothing (at most +100 a tick from 0), …
    run(&mut ctl, start, 31, 33, &hbs);
    assert_eq!(
        events(&mut ctl),
        [changed("node-b", 0, 100), changed("node-b", 100, 200)]
    );
    // … later ones by the ramp: half of W 30 s into a 60 s ramp.
    run(&mut ctl, start, 34, 61, &hbs);
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::from_units(5_000)));
    run(&mut ctl, start, 62, 91, &hbs);
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::FULL));
    assert!(!ctl.node(&id("node-b")).unwrap().ramping);
    assert_eq!(ctl.weight(&id("node-a")), Some(Weight::FULL), "untouched");
}

fn events(ctl: &mut WeightController) -> Vec<Event> {
    std::iter::from_fn(|| ctl.poll_event()).collect()
}

fn changed(node: &str, from: u32, to: u32) -> Event {
    Event::WeightChanged {
        node: id(node),
        from: Weight::from_units(from),
        to: Weight::from_units(to),
    }
}

/// Ticks once a second from `from_s` to `to_s` (inclusive), sending each heartbeat first.
fn run(ctl: &mut WeightController, start: Instant, from_s: u64, to_s: u64, hbs: &[Heartbeat]) {
    for s in from_s..=to_s {
        let now = at(start, s * 1000);
        for hb in hbs {
            ctl.handle_heartbeat(now, hb.clone());
        }
        ctl.handle_timeout(now);
    }
}

/// A controller with `node-a` (GPU, idle) ramped to W at t = 35 s.
fn at_full() -> (WeightController, Instant) {
    let start = Instant::now();
    let mut ctl = WeightController::new(warm(), start).unwrap();
    run(&mut ctl, start, 1, 35, &[idle("node-a", true)]);
    assert_eq!(ctl.weight(&id("node-a")), Some(Weight::FULL));
    events(&mut ctl);
    (ctl, start)
}

#[test]
fn a_new_node_ramps_from_zero_to_its_target_in_35_ticks() {
    let start = Instant::now();
    let mut ctl = WeightController::new(warm(), start).unwrap();
    ctl.handle_heartbeat(start, idle("node-a", true));
    assert_eq!(ctl.weight(&id("node-a")), Some(Weight::ZERO));
    assert_eq!(ctl.node(&id("node-a")).unwrap().target, Weight::FULL);
    assert_eq!(ctl.poll_timeout(), Some(at(start, 1000)));

    // Nothing moves between ticks.
    ctl.handle_timeout(at(start, 999));
    assert_eq!(events(&mut ctl), []);

    run(&mut ctl, start, 1, 34, &[idle("node-a", true)]);
    assert_eq!(ctl.weight(&id("node-a")), Some(Weight::from_units(9_829)));
    let ev = events(&mut ctl);
    assert_eq!(ev.len(), 34);
    assert_eq!(ev[0], changed("node-a", 0, 100));
    assert_eq!(ev[10], changed("node-a", 1000, 1100));
    run(&mut ctl, start, 35, 40, &[idle("node-a", true)]);
    assert_eq!(events(&mut ctl), [changed("node-a", 9_829, 10_000)]);
    assert_eq!(ctl.weight_value(&id("node-a")), Some(1.0));
}

#[test]
fn a_canary_keeps_its_fixed_weight_whatever_its_score() {
    let start = Instant::now();
    let mut ctl = WeightController::new(warm(), start).unwrap();
    let canary = NodeConfig {
        canary: true,
        ..NodeConfig::default()
    };
    ctl.set_node_config(&id("canary"), canary);
    run(&mut ctl, start, 1, 5, &[idle("canary", true)]);
    assert_eq!(ctl.weight(&id("canary")), Some(Weight::from_units(500)));
    let busy = Heartbeat {
        cpu: 1.0,
        packet_loss: 0.5,
        ..idle("canary", false)
    };
    for (s, hb) in (6..=30).zip([idle("canary", true), busy].into_iter().cycle()) {
        run(&mut ctl, start, s, s, &[hb]);
        assert_eq!(ctl.weight(&id("canary")), Some(Weight::from_units(500)));
    }
    // Leaving the canary set, it heads for its score's target (W for an idle GPU node).
    ctl.set_node_config(&id("canary"), NodeConfig::default());
    run(&mut ctl, start, 31, 31, &[idle("canary", true)]);
    assert_eq!(ctl.weight(&id("canary")), Some(Weight::from_units(600)));
}

#[test]
fn spot_reclaim_decays_to_zero_by_the_deadline_and_requests_one_drain() {
    let (mut ctl, start) = at_full();
    let a = id("node-a");
    let deadline = at(start, 40_500);
    ctl.handle_spot_reclaim(at(start, 35_500), &a, deadline)
        .unwrap();
    let drain = Event::DrainRequested {
        node: a.clone(),
        reason: DrainReason::SpotReclaim { deadline },
    };
    assert_eq!(events(&mut ctl), [drain]);
    // A repeated notice with a later deadline changes nothing and emits nothing.
    ctl.handle_spot_reclaim(at(start, 35_600), &a, at(start, 99_000))
        .unwrap();
    assert_eq!(ctl.node(&a).unwrap().reclaim_deadline, Some(deadline));

    // Five ticks before the deadline: 2 000 units each (20 %, faster than the 10 % rule), and
    // heartbeats of an idle node do not lift it.
    run(&mut ctl, start, 36, 40, &[idle("node-a", true)]);
    assert_eq!(
        events(&mut ctl),
        [
            changed("node-a", 10_000, 8_000),
            changed("node-a", 8_000, 6_000),
            changed("node-a", 6_000, 4_000),
            changed("node-a", 4_000, 2_000),
            changed("node-a", 2_000, 0),
        ]
    );
    run(&mut ctl, start, 41, 45, &[idle("node-a", true)]);
    assert_eq!(events(&mut ctl), []);
    assert_eq!(ctl.weight(&a), Some(Weight::ZERO));
}

#[test]
fn a_far_reclaim_deadline_decays_by_the_ten_percent_rule() {
    let (mut ctl, start) = at_full();
    let a = id("node-a");
    ctl.handle_spot_reclaim(at(start, 35_000), &a, at(start, 155_000))
        .unwrap();
    let hb = [idle("node-a", true)];
    run(&mut ctl, start, 36, 36, &hb);
    assert_eq!(ctl.weight(&a), Some(Weight::from_units(9_000)));
    run(&mut ctl, start, 37, 66, &hb);
    assert_eq!(ctl.weight(&a), Some(Weight::from_units(89)));
    run(&mut ctl, start, 67, 67, &hb);
    assert_eq!(ctl.weight(&a), Some(Weight::ZERO), "32 ticks from W to 0");
    let drains = events(&mut ctl)
        .into_iter()
        .filter(|e| matches!(e, Event::DrainRequested { .. }))
        .count();
    assert_eq!(drains, 1);
}

#[test]
fn a_reclaim_deadline_between_ticks_is_met_even_when_ticks_are_late() {
    let (mut ctl, start) = at_full();
    let a = id("node-a");
    let deadline = at(start, 35_300);
    ctl.handle_spot_reclaim(at(start, 35_100), &a, deadline)
        .unwrap();
    // The deadline comes before the next tick, so the driver is woken for it.
    assert_eq!(ctl.poll_timeout(), Some(deadline));
    ctl.handle_timeout(deadline);
    assert_eq!(ctl.weight(&a), Some(Weight::ZERO));
    assert_eq!(ctl.poll_timeout(), Some(at(start, 36_000)));
    // A notice whose deadline has passed zeroes at once.
    let (mut ctl, start) = at_full();
    ctl.handle_spot_reclaim(at(start, 35_100), &a, at(start, 35_000))
        .unwrap();
    assert_eq!(ctl.weight(&a), Some(Weight::ZERO));
    assert!(matches!(
        events(&mut ctl)[..],
        [Event::DrainRequested { .. }, Event::WeightChanged { .. }]
    ));
}

#[test]
fn reclaim_of_an_unknown_node_is_refused() {
    let start = Instant::now();
    let mut ctl = WeightController::new(warm(), start).unwrap();
    assert_eq!(
        ctl.handle_spot_reclaim(start, &id("ghost"), start),
        Err(ControllerError::UnknownNode(id("ghost")))
    );
}

#[test]
fn draining_and_down_nodes_go_to_zero_at_once_and_ramp_back_from_zero() {
    let (mut ctl, start) = at_full();
    let a = id("node-a");
    ctl.set_node_state(&a, NodeState::Draining);
    assert_eq!(events(&mut ctl), [changed("node-a", 10_000, 0)]);
    run(&mut ctl, start, 36, 40, &[idle("node-a", true)]);
    assert_eq!(ctl.weight(&a), Some(Weight::ZERO));
    ctl.set_node_state(&a, NodeState::Down);
    assert_eq!(events(&mut ctl), []);

    ctl.set_node_state(&a, NodeState::Active);
    run(&mut ctl, start, 41, 42, &[idle("node-a", true)]);
    assert_eq!(
        events(&mut ctl),
        [changed("node-a", 0, 100), changed("node-a", 100, 200)]
    );
}

#[test]
fn a_silent_node_goes_to_zero_once_and_ramps_up_when_it_reports_again() {
    let (mut ctl, start) = at_full();
    let a = id("node-a");
    // Last heartbeat at 35 s; stale from the tick at 40 s (5 s timeout).
    run(&mut ctl, start, 36, 39, &[]);
    assert_eq!(events(&mut ctl), []);
    run(&mut ctl, start, 40, 45, &[]);
    assert_eq!(
        events(&mut ctl),
        [
            Event::NodeStale { node: a.clone() },
            changed("node-a", 10_000, 0)
        ]
    );
    assert!(ctl.node(&a).unwrap().stale);
    run(&mut ctl, start, 46, 46, &[idle("node-a", true)]);
    assert_eq!(events(&mut ctl), [changed("node-a", 0, 100)]);
    assert!(!ctl.node(&a).unwrap().stale);
}

#[test]
fn removing_a_node_reports_its_weight_gone() {
    let (mut ctl, _) = at_full();
    assert!(ctl.remove_node(&id("node-a")));
    assert_eq!(events(&mut ctl), [changed("node-a", 10_000, 0)]);
    assert!(!ctl.remove_node(&id("node-a")));
    assert_eq!(ctl.weight(&id("node-a")), None);
}

#[test]
fn eligible_nodes_have_weight_and_every_required_capability() {
    let (mut ctl, start) = at_full();
    let av1 = Heartbeat {
        encoders: vec![Codec::Av1],
        ..idle("node-b", false)
    };
    run(&mut ctl, start, 36, 36, &[idle("node-a", true), av1]);
    ctl.handle_heartbeat(at(start, 36_000), idle("node-c", true)); // weight still 0
    let names = |ctl: &WeightController, req: &[Capability]| {
        ctl.eligible(req.iter().copied().collect())
            .map(|(n, _)| n.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&ctl, &[]), ["node-a", "node-b"]);
    assert_eq!(
        names(&ctl, &[Capability::Gpu, Capability::H264Encode]),
        ["node-a"]
    );
    assert_eq!(names(&ctl, &[Capability::Av1Encode]), ["node-b"]);
    assert_eq!(
        names(&ctl, &[Capability::Nvenc, Capability::Av1Encode]),
        [] as [&str; 0]
    );
    // Config withholds a capability the heartbeat shows.
    let cfg = NodeConfig {
        remove_capabilities: [Capability::Av1Encode].into_iter().collect(),
        ..NodeConfig::default()
    };
    ctl.set_node_config(&id("node-b"), cfg);
    assert_eq!(names(&ctl, &[Capability::Av1Encode]), [] as [&str; 0]);
}

#[test]
fn config_that_would_freeze_weights_is_rejected() {
    let mut c = ControllerConfig::default();
    c.smoothing.min_step = Weight::ZERO;
    let err = WeightController::new(c, Instant::now()).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Controller {
            name: "smoothing.min_step",
            ..
        }
    ));
    let c = ControllerConfig {
        tick_ms: 0,
        ..ControllerConfig::default()
    };
    assert!(WeightController::new(c, Instant::now()).is_err());
    // The defaults as JSON, with one override.
    let c: ControllerConfig = serde_json::from_str(r#"{"tick_ms": 500}"#).unwrap();
    assert_eq!(c.tick_ms, 500);
    assert_eq!(c.canary_weight, Weight::from_units(500));
    assert_eq!((c.ramp_ms, c.cold_start_grace_ms), (600_000, 10_000));
    for bad in [
        ControllerConfig {
            ramp_ms: 86_400_001,
            ..ControllerConfig::default()
        },
        ControllerConfig {
            cold_start_grace_ms: 3_600_001,
            ..ControllerConfig::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn snapshot_and_restore_keep_a_ramp_and_a_cold_start_under_way() {
    let start = Instant::now();
    let mut ctl = WeightController::new(ControllerConfig::default(), start).unwrap();
    ctl.handle_heartbeat(start, idle("node-a", true));
    let hbs = [idle("node-a", true), idle("node-b", true)];
    run(&mut ctl, start, 11, 71, &hbs);
    assert_eq!(ctl.weight(&id("node-b")), Some(Weight::from_units(1_000)));
    // node-c is undrained-like: active again with a ramp that has not begun.
    ctl.handle_heartbeat(at(start, 71_000), idle("node-c", true));
    ctl.set_node_state(&id("node-c"), NodeState::Draining);
    ctl.set_node_state(&id("node-c"), NodeState::Active);
    events(&mut ctl);
    let now = at(start, 71_500);
    let snap = ctl.snapshot(now, 5_000_000);
    assert_eq!(snap.cold_start_left_ms, None, "the cold start is over");
    let b = snap.nodes.iter().find(|n| n.node == id("node-b")).unwrap();
    assert_eq!(
        b.ramp,
        Some(crate::scoring::RampSnapshot {
            from: Weight::ZERO,
            elapsed_ms: Some(60_500)
        })
    );
    let json = serde_json::to_string(&snap).unwrap();
    let snap: ControllerSnapshot = serde_json::from_str(&json).unwrap();
    let start2 = Instant::now() + Duration::from_secs(1000);
    let mut back =
        WeightController::restore(*ctl.config(), at(start2, 71_500), 5_000_000, &snap).unwrap();
    assert_eq!(back.snapshot(at(start2, 71_500), 5_000_000), snap);
    let hbs = [
        idle("node-a", true),
        idle("node-b", true),
        idle("node-c", true),
    ];
    for s in 72..=200 {
        run(&mut ctl, start, s, s, &hbs);
        run(&mut back, start2, s, s, &hbs);
        assert_eq!(events(&mut back), events(&mut ctl), "at {s} s");
    }
    assert_eq!(back.weight(&id("node-b")), Some(Weight::from_units(3_150)));

    // A cold start under way survives a restore, less the downtime.
    let mut ctl = WeightController::new(ControllerConfig::default(), start).unwrap();
    ctl.handle_heartbeat(start, idle("node-a", true));
    let snap = ctl.snapshot(at(start, 4_000), 1_000_000);
    assert_eq!(snap.cold_start_left_ms, Some(6_000));
    let now = Instant::now() + Duration::from_secs(50);
    let mut back = WeightController::restore(*ctl.config(), now, 1_002_000, &snap).unwrap();
    assert!(back.is_cold_start(now + Duration::from_millis(3_999)));
    assert!(!back.is_cold_start(now + Duration::from_millis(4_000)));
    back.handle_heartbeat(now + Duration::from_millis(3_000), idle("node-b", true));
    assert_eq!(back.weight(&id("node-b")), Some(Weight::FULL));
}

/// Several nodes in every interesting state at t = 37.5 s.
fn busy_cluster() -> (WeightController, Instant) {
    let (mut ctl, start) = at_full();
    ctl.set_node_config(
        &id("canary"),
        NodeConfig {
            canary: true,
            ..NodeConfig::default()
        },
    );
    run(
        &mut ctl,
        start,
        36,
        37,
        &[
            idle("node-a", true),
            idle("node-b", false),
            idle("canary", true),
        ],
    );
    ctl.handle_heartbeat(at(start, 37_000), idle("spot", true));
    ctl.handle_heartbeat(at(start, 37_000), idle("drained", true));
    ctl.set_node_state(&id("drained"), NodeState::Draining);
    ctl.handle_spot_reclaim(at(start, 37_500), &id("node-a"), at(start, 47_000))
        .unwrap();
    events(&mut ctl);
    (ctl, start)
}

#[test]
fn snapshot_and_restore_keep_weights_and_behaviour() {
    let (mut ctl, start) = busy_cluster();
    let now = at(start, 37_500);
    let snap = ctl.snapshot(now, 1_000_000);
    let json = serde_json::to_string(&snap).unwrap();
    let snap: ControllerSnapshot = serde_json::from_str(&json).unwrap();

    // Restored in a new process: another Instant base, no downtime.
    let start2 = Instant::now() + Duration::from_secs(1000);
    let now2 = at(start2, 37_500);
    let mut back = WeightController::restore(*ctl.config(), now2, 1_000_000, &snap).unwrap();
    assert_eq!(back.snapshot(now2, 1_000_000), snap);
    assert_eq!(
        back.weights().collect::<Vec<_>>(),
        ctl.weights().collect::<Vec<_>>()
    );
    assert_eq!(back.poll_timeout(), Some(at(start2, 38_000)));

    // Both go on the same way, tick for tick.
    let hbs = [
        idle("node-b", false),
        idle("canary", true),
        idle("spot", true),
    ];
    for s in 38..=60 {
        run(&mut ctl, start, s, s, &hbs);
        run(&mut back, start2, s, s, &hbs);
        let strip = |evs: Vec<Event>| {
            evs.into_iter()
                .filter(|e| matches!(e, Event::WeightChanged { .. } | Event::NodeStale { .. }))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            strip(events(&mut back)),
            strip(events(&mut ctl)),
            "at {s} s"
        );
    }
    assert_eq!(back.weight(&id("node-a")), Some(Weight::ZERO));
    assert_eq!(back.weight(&id("canary")), Some(Weight::from_units(500)));
}

#[test]
fn restore_counts_downtime_against_reclaim_deadlines_but_not_heartbeats() {
    let (ctl, start) = busy_cluster();
    let snap = ctl.snapshot(at(start, 37_500), 1_000_000);
    // The scheduler was down 20 s: node-a's reclaim deadline (9.5 s away) has passed, while the
    // nodes that reported 0.5 s before the snapshot are not stale.
    let now = Instant::now();
    let mut back = WeightController::restore(*ctl.config(), now, 1_020_000, &snap).unwrap();
    assert_eq!(back.poll_timeout(), Some(now));
    back.handle_timeout(now);
    assert_eq!(back.weight(&id("node-a")), Some(Weight::ZERO));
    assert!(!back.node(&id("node-b")).unwrap().stale);
    assert!(!back.weight(&id("node-b")).unwrap().is_zero());
}

#[test]
fn restore_refuses_unknown_versions_and_duplicate_nodes() {
    let (ctl, start) = busy_cluster();
    let now = at(start, 37_500);
    let mut snap = ctl.snapshot(now, 0);
    snap.version = 2;
    assert_eq!(
        WeightController::restore(*ctl.config(), now, 0, &snap).unwrap_err(),
        RestoreError::UnsupportedVersion(2)
    );
    let mut snap = ctl.snapshot(now, 0);
    snap.nodes.push(snap.nodes[0].clone());
    assert_eq!(
        WeightController::restore(*ctl.config(), now, 0, &snap).unwrap_err(),
        RestoreError::DuplicateNode(snap.nodes[0].node.clone())
    );
}

fn arb_heartbeat(node: &'static str) -> impl Strategy<Value = Heartbeat> {
    (
        0.0..=1.0f64,
        0.0..=1.0f64,
        0u64..=1000,
        0.0..=0.2f64,
        0u32..=120,
        0u32..=20,
        proptest::option::of((0u64..=24, 0u32..=8)),
    )
        .prop_map(
            move |(cpu, memory, bw, loss, sessions, moving, gpu)| Heartbeat {
                node: id(node),
                cpu,
                memory,
                bandwidth_used_bps: bw,
                bandwidth_capacity_bps: 1000,
                packet_loss: loss,
                sessions,
                session_capacity: 100,
                sessions_to_move: moving,
                gpu: gpu.map(|(vram, nvenc)| GpuFigures {
                    vram_free_bytes: vram * GIB,
                    vram_total_bytes: 24 * GIB,
                    nvenc_sessions_free: nvenc,
                    nvenc_sessions_max: 8,
                }),
                encoders: vec![],
            },
        )
}

proptest! {
    /// Whatever the heartbeats (so whatever the targets) and canary flips, no tick moves a
    /// weight by more than 10 % of its current value or the 0.01 W floor.
    #[test]
    fn no_tick_moves_a_weight_more_than_ten_percent(
        ticks in proptest::collection::vec(
            (arb_heartbeat("node-a"), arb_heartbeat("node-b"), any::<bool>(), 1u64..=3000),
            1..120,
        ),
    ) {
        let start = Instant::now();
        let mut ctl = WeightController::new(warm(), start).unwrap();
        let mut now = start;
        for (a, b, canary, gap_ms) in ticks {
            now += Duration::from_millis(gap_ms);
            ctl.handle_heartbeat(now, a);
            ctl.handle_heartbeat(now, b);
            ctl.set_node_config(&id("node-b"), NodeConfig { canary, ..NodeConfig::default() });
            ctl.handle_timeout(now);
            let mut moved = std::collections::BTreeSet::new();
            for e in events(&mut ctl) {
                let Event::WeightChanged { node, from, to } = e else {
                    return Err(TestCaseError::fail(format!("unexpected {e:?}")));
                };
                prop_assert!(moved.insert(node.clone()), "{node} moved twice in one tick");
                let delta = from.units().abs_diff(to.units());
                prop_assert!(
                    delta * 10 <= from.units() || delta <= 100,
                    "{node}: {from:?} -> {to:?}"
                );
            }
        }
    }
}
