//! Property tests: balance and movement on random clusters grown by random
//! joins, removals and weight changes (so they span several generations
//! with tombstones, not only freshly packed tables).
//!
//! The proptest seed is fixed: the suite is deterministic, and a failure is
//! a property violation, never bad luck on the day (the statistical bounds
//! below are also set so that luck could fail them with p < 1e-3 per case).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use ferry_proto::NodeId;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::tests::{id, key, owners};
use super::*;

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0xF3_44_71),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    }
}

/// A random history: `joins` nodes over `zones` zones with random weights
/// and zone weights, then churn: some removed, some re-weighted, some new.
#[derive(Clone, Debug)]
struct History {
    joins: usize,
    zones: usize,
    seed: u64,
}

fn history(max_nodes: usize) -> impl Strategy<Value = History> {
    (1..=max_nodes, 1..=4usize, any::<u64>()).prop_map(|(joins, zones, seed)| History {
        joins,
        zones,
        seed,
    })
}

/// SplitMix64 for the test's own choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// A weight in [0.05, 1]: up to 20× apart.
    fn weight(&mut self) -> f64 {
        0.05 + 0.95 * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The cluster, and the test's own record of specs and zone weights.
fn build(h: &History) -> (Cluster, BTreeMap<NodeId, NodeSpec>, BTreeMap<String, f64>) {
    let mut rng = Rng(h.seed);
    let mut c = Cluster::new(PlacementConfig::default()).unwrap();
    let mut specs = BTreeMap::new();
    let mut zone_w = BTreeMap::new();
    for z in 0..h.zones {
        let w = rng.weight();
        c.set_zone_weight(&format!("z{z}"), w).unwrap();
        zone_w.insert(format!("z{z}"), w);
    }
    let mut next = 0;
    let mut join = |c: &mut Cluster, specs: &mut BTreeMap<NodeId, NodeSpec>, rng: &mut Rng| {
        let s = NodeSpec::new(
            id(&format!("n{next}")),
            &format!("z{}", rng.below(h.zones)),
            rng.weight(),
        );
        next += 1;
        c.upsert(s.clone()).unwrap();
        specs.insert(s.id.clone(), s);
    };
    for _ in 0..h.joins {
        join(&mut c, &mut specs, &mut rng);
    }
    // Churn: about 10 % each of removals, weight changes and new joins.
    for _ in 0..h.joins / 10 {
        let victim = specs.keys().nth(rng.below(specs.len())).cloned().unwrap();
        if specs.len() > 1 {
            assert!(c.remove(&victim));
            specs.remove(&victim);
        }
        let changed = specs.keys().nth(rng.below(specs.len())).cloned().unwrap();
        let s = specs.get_mut(&changed).unwrap();
        s.weight = rng.weight();
        c.upsert(s.clone()).unwrap();
        join(&mut c, &mut specs, &mut rng);
    }
    (c, specs, zone_w)
}

/// Expected shares computed independently of the cluster: zone weight over
/// the live zones' total, times node weight over its zone's total.
fn expected(
    specs: &BTreeMap<NodeId, NodeSpec>,
    zone_w: &BTreeMap<String, f64>,
) -> BTreeMap<NodeId, f64> {
    let mut in_zone: BTreeMap<&str, f64> = BTreeMap::new();
    for s in specs.values() {
        *in_zone.entry(&s.zone).or_default() += s.weight;
    }
    let total: f64 = in_zone.keys().map(|z| zone_w[*z]).sum();
    specs
        .values()
        .map(|s| {
            (
                s.id.clone(),
                zone_w[&s.zone] / total * s.weight / in_zone[s.zone.as_str()],
            )
        })
        .collect()
}

/// Checks observed counts against expected shares.
///
/// Per node (share ≥ 0.1 %): `|o − e| ≤ max(0.02·e, z·σ)`, σ = √(n·p·(1−p)).
/// A literal ±2 % is impossible for any hash: a 0.1 % share of 1 M keys is
/// ~1,000 keys with σ ≈ 32 keys = 3.2 %. z is 4 per node, widened so that the
/// chance that *any* of the k checked nodes strays that far by luck stays
/// below α = 1e-3 (union bound with the Gaussian tail e^{−z²/2}):
/// `z = max(4, √(2·ln(k/α)))` — 4.9 for k = 100, 5.3 for k = 1,000.
///
/// Chi-square over nodes expecting ≥ 5 keys: X² ≤ the Wilson–Hilferty
/// quantile of χ²(df) at z = 4.75 (p ≈ 1e-6).
fn check_balance(counts: &BTreeMap<NodeId, u64>, want: &BTreeMap<NodeId, f64>, n: u64) {
    let nf = n as f64;
    let checked: Vec<(&NodeId, f64)> = want
        .iter()
        .filter(|(_, p)| **p >= 0.001)
        .map(|(i, p)| (i, *p))
        .collect();
    let k = checked.len().max(1) as f64;
    let z = f64::max(4.0, (2.0 * (k / 1e-3).ln()).sqrt());
    for (node, p) in &checked {
        let e = p * nf;
        let o = counts.get(*node).copied().unwrap_or(0) as f64;
        let sigma = (nf * p * (1.0 - p)).sqrt();
        let tol = f64::max(0.02 * e, z * sigma);
        assert!(
            (o - e).abs() <= tol,
            "{node}: observed {o}, expected {e:.1} ± {tol:.1}"
        );
    }
    let mut x2 = 0.0f64;
    let mut df = 0.0f64;
    for (node, p) in want {
        let e = p * nf;
        if e >= 5.0 {
            let o = counts.get(node).copied().unwrap_or(0) as f64;
            x2 += (o - e) * (o - e) / e;
            df += 1.0;
        }
    }
    if df >= 1.0 {
        let a = 2.0 / (9.0 * df);
        let limit = df * (1.0 - a + 4.75 * a.sqrt()).powi(3);
        assert!(x2 <= limit, "chi-square {x2:.1} > {limit:.1} (df {df})");
    }
    for (node, c) in counts {
        assert!(
            want.get(node).is_some_and(|p| *p > 0.0 || *c == 0),
            "{node} has no share"
        );
    }
}

fn count(c: &Cluster, n: u64) -> BTreeMap<NodeId, u64> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        if let Some(o) = c.lookup_key(key(i)) {
            *m.entry(o.clone()).or_default() += 1;
        }
    }
    m
}

const KEYS: u64 = 1_000_000;
const MOVE_KEYS: u64 = 100_000;

proptest! {
    #![proptest_config(config(10))]

    /// Shares match weights on small clusters (1–50 nodes).
    #[test]
    fn shares_follow_weights_small(h in history(50)) {
        let (c, specs, zone_w) = build(&h);
        check_balance(&count(&c, KEYS), &expected(&specs, &zone_w), KEYS);
    }
}

proptest! {
    #![proptest_config(config(4))]

    /// Shares match weights on large clusters (up to 2,000 nodes).
    #[test]
    fn shares_follow_weights_large(h in history(2000)) {
        let (c, specs, zone_w) = build(&h);
        check_balance(&count(&c, KEYS), &expected(&specs, &zone_w), KEYS);
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// Removing any node moves exactly its keys; a join moves keys only to
    /// the new node; changing a weight moves keys only to (up) or from
    /// (down) that node; no change in one zone moves a key of another.
    #[test]
    fn changes_move_only_the_changed_nodes_keys(h in history(300), pick in any::<u64>()) {
        let (mut c, specs, _) = build(&h);
        let ids: Vec<&NodeId> = specs.keys().collect();
        let victim = ids[(pick % ids.len() as u64) as usize].clone();
        let victim_zone = specs[&victim].zone.clone();
        let zone_of = |o: &Option<NodeId>| {
            o.as_ref().map(|n| specs.get(n).map_or(victim_zone.clone(), |s| s.zone.clone()))
        };
        let base = owners(&c, MOVE_KEYS);

        // Weight up, then down, then removal.
        let mut s = specs[&victim].clone();
        s.weight = (s.weight * 1.7).min(1.0);
        c.upsert(s.clone()).unwrap();
        let up = owners(&c, MOVE_KEYS);
        for (a, b) in base.iter().zip(&up) {
            prop_assert!(a == b || b.as_ref() == Some(&victim), "up: {a:?} → {b:?}");
        }
        s.weight *= 0.3;
        c.upsert(s.clone()).unwrap();
        let down = owners(&c, MOVE_KEYS);
        for (a, b) in up.iter().zip(&down) {
            prop_assert!(a == b || a.as_ref() == Some(&victim), "down: {a:?} → {b:?}");
        }
        prop_assert!(c.remove(&victim));
        let gone = owners(&c, MOVE_KEYS);
        for (a, b) in down.iter().zip(&gone) {
            if a.as_ref() == Some(&victim) {
                prop_assert!(b.as_ref() != Some(&victim));
                // Its zone still has nodes: keys stay in the zone.
                if specs.values().any(|o| o.zone == s.zone && o.id != victim) {
                    prop_assert_eq!(zone_of(b), Some(s.zone.clone()));
                }
            } else {
                prop_assert_eq!(a, b);
            }
        }
        // A new node in the victim's zone: keys only to it (it takes the
        // victim's tombstone or a spare slot; nothing else moves).
        c.upsert(NodeSpec::new(id("newcomer"), &s.zone, 0.6)).unwrap();
        let joined = owners(&c, MOVE_KEYS);
        for (a, b) in gone.iter().zip(&joined) {
            prop_assert!(a == b || b.as_ref() == Some(&id("newcomer")), "join: {a:?} → {b:?}");
        }
        // None of it moved a key of another zone, or a key across zones.
        for (a, b) in base.iter().zip(&joined) {
            let (za, zb) = (zone_of(a), zone_of(b));
            if za.as_deref() != Some(s.zone.as_str()) {
                prop_assert_eq!(a, b);
            }
            prop_assert_eq!(za, zb);
        }
    }

    /// Snapshot → JSON → restore gives identical lookups and placements.
    #[test]
    fn layout_round_trip_is_identical(h in history(300)) {
        let (c, _, _) = build(&h);
        let json = serde_json::to_vec(&c.snapshot()).unwrap();
        let back = Cluster::restore(c.config().clone(), serde_json::from_slice(&json).unwrap()).unwrap();
        prop_assert_eq!(owners(&back, MOVE_KEYS), owners(&c, MOVE_KEYS));
        let req = Requirements::default();
        let load = |n: &NodeId| n.as_str().len() as u64;
        for i in 0..2_000 {
            prop_assert_eq!(back.place_key(key(i), &req, &load, 10_000), c.place_key(key(i), &req, &load, 10_000));
        }
    }
}

proptest! {
    #![proptest_config(config(6))]

    /// Keys placed one by one with loads counted: no node ever exceeds
    /// ceil((1+ε) · share · keys placed), and every key finds a node.
    #[test]
    fn bounded_loads_hold(h in history(120), eps in prop::sample::select(vec![0.0, 0.1, 0.25])) {
        let (c0, specs, zone_w) = build(&h);
        let cfg = PlacementConfig { epsilon: eps, ..PlacementConfig::default() };
        let c = Cluster::restore(cfg, c0.snapshot()).unwrap();
        let want = expected(&specs, &zone_w);
        let mut load: BTreeMap<NodeId, u64> = BTreeMap::new();
        let n = 20_000u64;
        for m in 1..=n {
            let p = {
                let l = &load;
                c.place_key(key(m), &Requirements::default(), &|x| l.get(x).copied().unwrap_or(0), m)
            };
            let p = p.unwrap();
            let l = load.entry(p.node.clone()).or_default();
            *l += 1;
            let bound = ((1.0 + eps) * want[&p.node] * m as f64 * (1.0 + 1e-9)).ceil() as u64;
            prop_assert!(*l <= bound, "{} at {} > {} after {}", p.node, l, bound, m);
        }
        prop_assert_eq!(load.values().sum::<u64>(), n);
    }

    /// Hard filters always hold; anti-affinity spreads over distinct hosts
    /// whenever enough hosts qualify.
    #[test]
    fn filters_hold_and_hosts_spread(h in history(200), need in prop::sample::select(vec!["gpu", "av1_encode"])) {
        let (c0, specs, _) = build(&h);
        let mut c = c0.clone();
        let mut rng = Rng(h.seed ^ 0xABCD);
        for s in specs.values() {
            let mut s = s.clone();
            s.host = format!("host{}", rng.below(12));
            s.region = ["eu", "us"][rng.below(2)].to_owned();
            if rng.below(3) == 0 { s.capabilities.insert("gpu".into()); }
            if rng.below(4) == 0 { s.capabilities.insert("av1_encode".into()); }
            c.upsert(s).unwrap();
        }
        let req = Requirements { capabilities: vec![need.into()], region: Some("eu".into()), avoid_hosts: vec![] };
        let fits = |n: &NodeId| {
            let s = c.node(n).unwrap();
            s.capabilities.contains(need) && s.region == "eu" && s.weight > 0.0
        };
        let hosts: BTreeSet<String> = c.nodes().filter(|s| fits(&s.id)).map(|s| s.host.clone()).collect();
        for room in 0..200u64 {
            let mut r = req.clone();
            for t in 0..4u64 {
                match c.place_key(key(room * 10 + t), &r, &|_| 0, 1) {
                    Ok(p) => {
                        prop_assert!(fits(&p.node));
                        prop_assert!(p.backups.iter().all(&fits));
                        let host = c.node(&p.node).unwrap().host.clone();
                        if (t as usize) < hosts.len() {
                            prop_assert!(!r.avoid_hosts.contains(&host), "host reused with {} hosts", hosts.len());
                        }
                        r.avoid_hosts.push(host);
                    }
                    Err(e) => {
                        prop_assert_eq!(e, Unplaceable::NoEligibleNode);
                        prop_assert!(hosts.is_empty());
                    }
                }
            }
        }
    }
}
