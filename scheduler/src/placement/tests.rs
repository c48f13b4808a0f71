//! Unit tests: exact outputs for small cases.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use ferry_proto::NodeId;

use super::table::{self, FULL, Table, threshold};
use super::*;

pub(super) fn id(s: &str) -> NodeId {
    NodeId::new(s).unwrap()
}

pub(super) fn spec(name: &str, zone: &str, weight: f64) -> NodeSpec {
    NodeSpec::new(id(name), zone, weight)
}

pub(super) fn key(i: u64) -> Key {
    Key::new(&i.to_le_bytes())
}

/// Owner of each of `n` keys.
pub(super) fn owners(c: &Cluster, n: u64) -> Vec<Option<NodeId>> {
    (0..n).map(|i| c.lookup_key(key(i)).cloned()).collect()
}

fn counts(c: &Cluster, n: u64) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for o in owners(c, n).into_iter().flatten() {
        *m.entry(o.to_string()).or_default() += 1;
    }
    m
}

fn cluster(nodes: &[(&str, &str, f64)]) -> Cluster {
    let mut c = Cluster::new(PlacementConfig::default()).unwrap();
    for &(n, z, w) in nodes {
        c.upsert(spec(n, z, w)).unwrap();
    }
    c
}

const NONE: &dyn Fn(&NodeId) -> u64 = &|_| 0;

#[test]
fn thresholds_are_exact_at_the_ends() {
    assert_eq!(threshold(0.0, 1.0), 0);
    assert_eq!(threshold(1.0, 1.0), FULL);
    assert_eq!(threshold(0.5, 1.0), FULL / 2);
    assert_eq!(
        threshold(1e-300, 1.0),
        1,
        "any positive weight can be chosen"
    );
    assert_eq!(threshold(f64::NAN, 1.0), 0);
}

#[test]
fn empty_cluster_places_nothing() {
    let c = Cluster::new(PlacementConfig::default()).unwrap();
    assert_eq!(c.lookup(b"room"), None);
    assert_eq!(
        c.place(b"room", &Requirements::default(), NONE, 1),
        Err(Unplaceable::NoEligibleNode)
    );
}

#[test]
fn config_and_weights_are_validated() {
    let bad = PlacementConfig {
        weight_scale: 0.0,
        ..PlacementConfig::default()
    };
    assert!(matches!(
        Cluster::new(bad),
        Err(ConfigError::Invalid {
            field: "weight_scale",
            ..
        })
    ));
    let mut c = cluster(&[("a", "z", 1.0)]);
    let before = c.snapshot();
    assert_eq!(
        c.upsert(spec("a", "z", 1.5)),
        Err(ChangeError::Weight {
            weight: 1.5,
            scale: 1.0
        })
    );
    assert!(c.upsert(spec("b", "z", f64::NAN)).is_err());
    assert!(c.set_zone_weight("z", -1.0).is_err());
    let mut many = spec("c", "z", 1.0);
    many.capabilities = (0..65).map(|i| format!("cap{i}")).collect();
    assert_eq!(c.upsert(many), Err(ChangeError::TooManyCapabilities));
    assert_eq!(c.snapshot(), before, "a refused change changes nothing");
}

#[test]
fn one_node_takes_every_key_and_zero_weight_takes_none() {
    let c = cluster(&[("a", "z", 0.3), ("b", "z", 0.0)]);
    assert!(
        owners(&c, 1000)
            .iter()
            .all(|o| o.as_ref() == Some(&id("a")))
    );
    assert_eq!(c.share(&id("a")), 1.0);
    assert_eq!(c.share(&id("b")), 0.0);
}

/// Pins the mapping itself: a change here changes every deployed
/// scheduler's placements, which must be a deliberate (versioned) act.
#[test]
fn lookups_are_stable() {
    let mut c = cluster(&[
        ("a", "z1", 1.0),
        ("b", "z1", 0.5),
        ("c", "z1", 0.25),
        ("d", "z2", 1.0),
        ("e", "z2", 1.0),
    ]);
    c.compact();
    let got: Vec<String> = (0..12)
        .map(|i| {
            c.lookup(format!("room-{i}").as_bytes())
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(got, GOLDEN);
}

const GOLDEN: [&str; 12] = ["e", "a", "a", "e", "e", "a", "a", "e", "b", "b", "e", "b"];

#[test]
fn shares_follow_weights_in_a_small_cluster() {
    // z1: a=1, b=0.5, c=0.25 (shares 4/7, 2/7, 1/7 of z1); z2: d, e equal.
    let c = cluster(&[
        ("a", "z1", 1.0),
        ("b", "z1", 0.5),
        ("c", "z1", 0.25),
        ("d", "z2", 1.0),
        ("e", "z2", 1.0),
    ]);
    let n = 200_000;
    let got = counts(&c, n);
    let want = [
        ("a", 0.5 * 4.0 / 7.0),
        ("b", 0.5 * 2.0 / 7.0),
        ("c", 0.5 / 7.0),
        ("d", 0.25),
        ("e", 0.25),
    ];
    for (name, p) in want {
        assert_eq!(c.share(&id(name)), p);
        let e = p * n as f64;
        let o = got[name] as f64;
        assert!(
            (o - e).abs() < 5.0 * (e * (1.0 - p)).sqrt(),
            "{name}: {o} vs {e}"
        );
    }
}

#[test]
fn a_node_that_leaves_and_rejoins_gets_its_keys_back() {
    let mut c = cluster(&[("a", "z", 1.0), ("b", "z", 1.0), ("c", "z", 1.0)]);
    let before = owners(&c, 20_000);
    assert!(c.remove(&id("b")));
    assert!(!c.remove(&id("b")));
    let gone = owners(&c, 20_000);
    for (x, y) in before.iter().zip(&gone) {
        if x.as_ref() != Some(&id("b")) {
            assert_eq!(x, y);
        }
    }
    c.upsert(spec("b", "z", 1.0)).unwrap();
    assert_eq!(owners(&c, 20_000), before);
}

#[test]
fn joins_take_never_used_slots_before_other_nodes_tombstones() {
    let mut c = cluster(&[("a", "z", 1.0), ("b", "z", 1.0), ("c", "z", 1.0)]);
    c.compact(); // 3 slots + 1 spare
    let before = owners(&c, 20_000);
    c.remove(&id("b"));
    c.upsert(spec("d", "z", 1.0)).unwrap(); // takes the spare
    c.upsert(spec("b", "z", 1.0)).unwrap(); // its tombstone is still free
    for (x, y) in before.iter().zip(owners(&c, 20_000)) {
        assert!(x == &y || y == Some(id("d")), "{x:?} → {y:?}");
    }
    assert_eq!(c.zone_stats()[0].2, 1, "no new generation");
}

#[test]
fn a_join_into_a_tombstone_moves_nothing_at_weight_zero() {
    let cfg = PlacementConfig {
        spare: 0.0,
        ..PlacementConfig::default()
    };
    let mut c = Cluster::new(cfg).unwrap();
    for n in ["a", "b", "c"] {
        c.upsert(spec(n, "z", 1.0)).unwrap();
    }
    c.compact();
    c.remove(&id("b"));
    let before = owners(&c, 20_000);
    c.upsert(spec("d", "z", 0.0)).unwrap();
    assert_eq!(c.zone_stats()[0].1, 3, "d took b's tombstone");
    assert_eq!(owners(&c, 20_000), before);
    c.upsert(spec("d", "z", 1.0)).unwrap();
    for (x, y) in before.iter().zip(owners(&c, 20_000)) {
        assert!(x.as_ref() == y.as_ref() || y == Some(id("d")));
    }
}

#[test]
fn growth_adds_generations_and_compaction_leaves_spares() {
    let mut c = Cluster::new(PlacementConfig::default()).unwrap();
    for i in 0..10 {
        c.upsert(spec(&format!("n{i}"), "z", 1.0)).unwrap();
    }
    // growth 1.0: generations of 1, 1, 2, 4, 8 slots (16 slots, 10 used).
    let (_, slots, gens) = c.zone_stats()[0].clone();
    assert_eq!((slots, gens), (16, 5));
    let before = owners(&c, 10_000);
    c.compact();
    // One generation: 10 nodes + ceil(0.25 × 10) spare slots.
    assert_eq!(c.zone_stats()[0].1, 13);
    assert_eq!(c.zone_stats()[0].2, 1);
    let after = owners(&c, 10_000);
    assert!(before != after, "compaction rehashes");
    let snap = c.snapshot();
    c.compact();
    assert_eq!(c.snapshot(), snap, "a compact cluster is left alone");
    // Three joins fill the spares: still one generation, keys only to them.
    for i in 10..13 {
        c.upsert(spec(&format!("n{i}"), "z", 1.0)).unwrap();
    }
    assert_eq!((c.zone_stats()[0].1, c.zone_stats()[0].2), (13, 1));
    let new = [id("n10"), id("n11"), id("n12")];
    for (a, b) in after.iter().zip(owners(&c, 10_000)) {
        assert!(a.as_ref() == b.as_ref() || new.contains(b.as_ref().unwrap()));
    }
    // The next one needs a new generation of 13 slots.
    c.upsert(spec("n13", "z", 1.0)).unwrap();
    assert_eq!((c.zone_stats()[0].1, c.zone_stats()[0].2), (26, 2));
}

#[test]
fn zone_loss_moves_only_that_zones_keys_and_they_come_back() {
    let mut c = cluster(&[
        ("a1", "a", 1.0),
        ("a2", "a", 1.0),
        ("b1", "b", 1.0),
        ("c1", "c", 1.0),
    ]);
    let zone = |o: &Option<NodeId>| c.node(o.as_ref().unwrap()).unwrap().zone.clone();
    let before = owners(&c, 30_000);
    let zones_before: Vec<String> = before.iter().map(zone).collect();
    c.remove(&id("a1"));
    c.remove(&id("a2"));
    let lost = owners(&c, 30_000);
    let mut moved_to = BTreeSet::new();
    for ((x, y), z) in before.iter().zip(&lost).zip(&zones_before) {
        if z == "a" {
            moved_to.insert(y.clone().unwrap().to_string());
        } else {
            assert_eq!(x, y, "zone {z}'s key moved");
        }
    }
    assert_eq!(moved_to, BTreeSet::from(["b1".into(), "c1".into()]));
    c.upsert(spec("a1", "a", 1.0)).unwrap();
    c.upsert(spec("a2", "a", 1.0)).unwrap();
    assert_eq!(owners(&c, 30_000), before);
}

#[test]
fn zone_weight_is_explicit_and_moves_only_between_that_zone_and_the_rest() {
    let mut c = cluster(&[("a1", "a", 1.0), ("a2", "a", 1.0), ("b1", "b", 1.0)]);
    // Two nodes in a, one in b, equal zone weights: b1 gets half the keys.
    assert_eq!(c.share(&id("b1")), 0.5);
    let before = owners(&c, 30_000);
    c.set_zone_weight("a", 0.5).unwrap();
    assert_eq!(c.zone_weight("a"), Some(0.5));
    assert!((c.share(&id("b1")) - 2.0 / 3.0).abs() < 1e-12);
    for (x, y) in before.iter().zip(owners(&c, 30_000)) {
        assert!(
            x.as_ref() == y.as_ref() || y == Some(id("b1")),
            "{x:?} → {y:?}"
        );
    }
}

#[test]
fn filters_are_hard() {
    let mut c = cluster(&[("cpu1", "z", 1.0), ("cpu2", "z", 1.0)]);
    let mut gpu = spec("gpu1", "z", 0.2);
    gpu.capabilities = BTreeSet::from(["gpu".into(), "av1_encode".into()]);
    gpu.region = "eu".into();
    c.upsert(gpu).unwrap();
    let req = Requirements {
        capabilities: vec!["av1_encode".into()],
        ..Requirements::default()
    };
    for i in 0..200u64 {
        let p = c.place(&i.to_le_bytes(), &req, NONE, 1).unwrap();
        assert_eq!(p.node, id("gpu1"));
        assert!(p.backups.is_empty(), "nothing else qualifies");
    }
    let us = Requirements {
        region: Some("us".into()),
        ..Requirements::default()
    };
    assert_eq!(
        c.place(b"k", &us, NONE, 1),
        Err(Unplaceable::NoEligibleNode)
    );
    let unknown = Requirements {
        capabilities: vec!["fpga".into()],
        ..Requirements::default()
    };
    assert_eq!(
        c.place(b"k", &unknown, NONE, 1),
        Err(Unplaceable::NoEligibleNode)
    );
    assert_eq!(c.load_bound(&id("gpu1"), &req, 10), Some(13));
    assert_eq!(c.load_bound(&id("cpu1"), &req, 10), None);
}

#[test]
fn placement_equals_lookup_when_nothing_is_full() {
    let c = cluster(&[
        ("a", "z1", 1.0),
        ("b", "z1", 0.5),
        ("c", "z2", 0.7),
        ("d", "z3", 0.1),
    ]);
    for i in 0..5_000u64 {
        let k = key(i);
        let p = c.place_key(k, &Requirements::default(), NONE, 1).unwrap();
        assert_eq!(Some(&p.node), c.lookup_key(k));
        assert_eq!(p.backups.len(), 2);
        let mut all: Vec<&NodeId> = p.backups.iter().collect();
        all.push(&p.node);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 3, "backups are distinct");
    }
}

#[test]
fn anti_affinity_spreads_a_rooms_transcodes_over_hosts() {
    let mut c = Cluster::new(PlacementConfig::default()).unwrap();
    for h in 0..4 {
        for n in 0..2 {
            let mut s = spec(&format!("h{h}n{n}"), "z", 1.0);
            s.host = format!("host{h}");
            c.upsert(s).unwrap();
        }
    }
    for room in 0..100u64 {
        let mut req = Requirements::default();
        for t in 0..4u64 {
            let k = format!("room-{room}/transcode-{t}");
            let p = c.place(k.as_bytes(), &req, NONE, 1).unwrap();
            let host = c.node(&p.node).unwrap().host.clone();
            assert!(
                !req.avoid_hosts.contains(&host),
                "room {room}: {host} reused"
            );
            req.avoid_hosts.push(host);
        }
    }
    // A fifth transcode must share a host: soft, so it is still placed.
    let req = Requirements {
        avoid_hosts: (0..4).map(|h| format!("host{h}")).collect(),
        ..Requirements::default()
    };
    assert!(c.place(b"room-0/transcode-4", &req, NONE, 1).is_ok());
}

#[test]
fn bounded_loads_with_zero_slack_balance_exactly() {
    let cfg = PlacementConfig {
        epsilon: 0.0,
        ..PlacementConfig::default()
    };
    let mut c = Cluster::new(cfg).unwrap();
    for n in ["a", "b", "c", "d"] {
        c.upsert(spec(n, "z", 1.0)).unwrap();
    }
    let mut load: BTreeMap<NodeId, u64> = BTreeMap::new();
    for m in 1..=400u64 {
        let l = load.clone();
        let p = c
            .place_key(
                key(m),
                &Requirements::default(),
                &|n| l.get(n).copied().unwrap_or(0),
                m,
            )
            .unwrap();
        *load.entry(p.node).or_default() += 1;
        let max = *load.values().max().unwrap();
        assert!(max <= m.div_ceil(4), "after {m}: {load:?}");
    }
    assert!(load.values().all(|&l| l == 100));
    let full = |_: &NodeId| 100;
    assert_eq!(
        c.place(b"x", &Requirements::default(), &full, 400),
        Err(Unplaceable::Full)
    );
}

#[test]
fn layout_round_trips_through_json() {
    let mut c = cluster(&[("a", "z1", 1.0), ("b", "z1", 0.5), ("c", "z2", 0.7)]);
    for i in 0..5 {
        c.upsert(spec(&format!("g{i}"), "z2", 0.4)).unwrap();
    }
    c.remove(&id("b"));
    c.remove(&id("g1"));
    c.set_zone_weight("z2", 0.8).unwrap();
    let json = serde_json::to_string(&c.snapshot()).unwrap();
    let back = Cluster::restore(
        PlacementConfig::default(),
        serde_json::from_str(&json).unwrap(),
    )
    .unwrap();
    assert_eq!(owners(&back, 20_000), owners(&c, 20_000));
    assert_eq!(back.snapshot(), c.snapshot());
    // The tombstones survive: b comes back to its old slot in both.
    let mut c2 = back.clone();
    c2.upsert(spec("b", "z1", 0.5)).unwrap();
    c.upsert(spec("b", "z1", 0.5)).unwrap();
    assert_eq!(owners(&c2, 20_000), owners(&c, 20_000));
}

#[test]
fn bad_layouts_are_refused() {
    let c = cluster(&[("a", "z1", 1.0), ("b", "z1", 0.5)]);
    let good = c.snapshot();
    let other = PlacementConfig {
        weight_scale: 2.0,
        ..PlacementConfig::default()
    };
    assert!(matches!(
        Cluster::restore(other, good.clone()),
        Err(LayoutError::Scale { .. })
    ));
    let mut v = good.clone();
    v.version = 99;
    assert_eq!(
        Cluster::restore(PlacementConfig::default(), v).err(),
        Some(LayoutError::Version(99))
    );
    let mut dup = good.clone();
    dup.zones[0].generations[1].slots[0] = SlotLayout::Taken("a".into());
    assert!(matches!(
        Cluster::restore(PlacementConfig::default(), dup),
        Err(LayoutError::Duplicate(_) | LayoutError::Unplaced(_))
    ));
    let mut unknown = good.clone();
    unknown.zones[0].generations[0].slots[0] = SlotLayout::Taken("zz".into());
    assert!(Cluster::restore(PlacementConfig::default(), unknown).is_err());
    let mut empty_gen = good;
    empty_gen.zones[0].generations.push(GenerationLayout {
        id: 77,
        slots: vec![],
    });
    assert_eq!(
        Cluster::restore(PlacementConfig::default(), empty_gen).err(),
        Some(LayoutError::Generation)
    );
}

#[test]
fn first_is_the_head_of_the_candidate_order() {
    // A table with three generations (one empty) and uneven weights.
    let t = Table::restore(
        42,
        vec![
            (
                0,
                vec![
                    table::Slot {
                        thr: FULL,
                        owner: 0,
                    },
                    table::Slot {
                        thr: FULL / 3,
                        owner: 1,
                    },
                ],
            ),
            (1, vec![table::Slot::FREE; 3]),
            (
                2,
                vec![
                    table::Slot {
                        thr: FULL / 2,
                        owner: 2,
                    },
                    table::Slot { thr: 0, owner: 3 },
                    table::Slot {
                        thr: FULL,
                        owner: 4,
                    },
                    table::Slot { thr: 7, owner: 5 },
                ],
            ),
        ],
        3,
    );
    for i in 0..20_000u64 {
        let kh = key(i).hash();
        let all: Vec<u32> = t.candidates(kh, 8).collect();
        assert_eq!(Some(all[0]), t.first(kh));
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 4, 5], "every live owner once");
    }
}

#[test]
fn ring_and_maglev_cover_their_nodes() {
    let nodes: Vec<(NodeId, f64)> = (0..10).map(|i| (id(&format!("n{i}")), 1.0)).collect();
    let ring = Ring::new(&nodes, 100.0);
    let maglev = Maglev::new(&nodes, 1000);
    assert_eq!(ring.points(), 1000);
    assert_eq!(maglev.size(), 1009);
    let mut r = BTreeMap::<&NodeId, u64>::new();
    let mut m = BTreeMap::<&NodeId, u64>::new();
    for i in 0..100_000 {
        *r.entry(ring.lookup_key(key(i)).unwrap()).or_default() += 1;
        *m.entry(maglev.lookup_key(key(i)).unwrap()).or_default() += 1;
    }
    assert_eq!(r.len(), 10);
    assert_eq!(m.len(), 10);
    // Maglev's table is balanced to within one entry per node.
    assert!(m.values().all(|&c| (9_000..11_000).contains(&c)), "{m:?}");
    assert!(Ring::new(&[], 100.0).lookup(b"x").is_none());
    assert!(Maglev::new(&[], 100).lookup(b"x").is_none());
}
