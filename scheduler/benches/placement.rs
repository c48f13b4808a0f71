//! Placement lookup cost at 10 … 10,000 nodes: ours — compacted, with
//! uniform and with heterogeneous weights; grown 2× by joins since its last
//! compaction (two generations); grown from one node without ever being
//! compacted (log₂ n generations, the worst case) — unweighted jump hash
//! (`jumphash` crate), Maglev (`maglev` crate and ours, weighted) and our
//! vnode ring.
//!
//! Every policy gets the same pre-hashed 64-bit keys, so the numbers compare
//! the mappings, not the key hashers (the crates are given a pass-through
//! hasher). Ends with a summary of ours / jump hash, timed directly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use ferry_proto::NodeId;
use ferry_scheduler::placement::{Cluster, Key, Maglev, NodeSpec, PlacementConfig, Ring};
use jumphash::CustomJumpHasher;

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];
const KEYS: usize = 4096;

/// Feeds already-hashed keys through: `finish` is one SplitMix64 mix of
/// what was written (node names go through XXH3 first).
#[derive(Clone, Default)]
struct Pass(u64);

impl Hasher for Pass {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = self.0.rotate_left(5) ^ Key::new(bytes).hash();
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = self.0.rotate_left(5) ^ x;
    }
    fn write_u32(&mut self, x: u32) {
        self.0 = self.0.rotate_left(5) ^ u64::from(x);
    }
}

fn ids(n: usize) -> Vec<NodeId> {
    (0..n)
        .map(|i| NodeId::new(format!("node-{i:05}")).unwrap())
        .collect()
}

/// Heterogeneous weights in [0.1, 1] (a 10× spread), deterministic.
fn hetero(i: usize) -> f64 {
    let x = Key::new(&(i as u64).to_le_bytes()).hash();
    0.1 + 0.9 * (x >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Clone, Copy)]
enum Shape {
    /// All nodes joined, then `compact()`.
    Compact,
    /// Half the nodes, `compact()`, then the other half joined.
    Grown2x,
    /// Joined one by one from an empty cluster, never compacted.
    Scratch,
}

fn ours(n: usize, weight: impl Fn(usize) -> f64, shape: Shape) -> Cluster {
    let mut c = Cluster::new(PlacementConfig::default()).unwrap();
    let ids = ids(n);
    let half = match shape {
        Shape::Grown2x => n / 2,
        _ => n,
    };
    for (i, id) in ids.iter().enumerate() {
        c.upsert(NodeSpec::new(id.clone(), "az-1", weight(i)))
            .unwrap();
        if i + 1 == half && !matches!(shape, Shape::Scratch) {
            c.compact();
        }
    }
    c
}

fn keys() -> Vec<u64> {
    (0..KEYS as u64)
        .map(|i| Key::new(format!("room-{i}").as_bytes()).hash())
        .collect()
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let jump = CustomJumpHasher::new(Pass::default());
    for n in SIZES {
        let mut g = c.benchmark_group(format!("lookup/{n}"));
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(800));
        let mut run = |name: &str, f: &dyn Fn(u64) -> usize| {
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                let mut i = 0usize;
                b.iter(|| {
                    i = (i + 1) & (KEYS - 1);
                    black_box(f(black_box(keys[i])))
                })
            });
        };
        let uniform = ours(n, |_| 1.0, Shape::Compact);
        run("ours-uniform", &|k| {
            uniform
                .lookup_key(Key::from_hash(k))
                .map_or(0, |x| x.as_str().len())
        });
        let weighted = ours(n, hetero, Shape::Compact);
        run("ours-hetero", &|k| {
            weighted
                .lookup_key(Key::from_hash(k))
                .map_or(0, |x| x.as_str().len())
        });
        let grown = ours(n, |_| 1.0, Shape::Grown2x);
        run("ours-grown2x", &|k| {
            grown
                .lookup_key(Key::from_hash(k))
                .map_or(0, |x| x.as_str().len())
        });
        let scratch = ours(n, |_| 1.0, Shape::Scratch);
        run("ours-scratch", &|k| {
            scratch
                .lookup_key(Key::from_hash(k))
                .map_or(0, |x| x.as_str().len())
        });
        run("jumphash", &|k| jump.slot(&k, n as u32) as usize);
        let nodes: Vec<(NodeId, f64)> = ids(n).into_iter().map(|i| (i, 1.0)).collect();
        let mg = Maglev::new(&nodes, 100 * n);
        run("maglev-ours", &|k| {
            mg.lookup_key(Key::from_hash(k))
                .map_or(0, |x| x.as_str().len())
        });
        let ring = Ring::new(&nodes, 100.0);
        run("ring-100vn", &|k| {
            ring.lookup_key(Key::from_hash(k))
                .map_or(0, |x| x.as_str().len())
        });
        // The crate materialises an n × M permutation table (M ≥ 100 n):
        // 800 MB at 1,000 nodes, 80 GB at 10,000, so it stops at 1,000.
        if n <= 1_000 {
            let names: Vec<String> = ids(n).into_iter().map(String::from).collect();
            let crate_maglev = maglev::Maglev::with_capacity_and_hasher(
                names,
                100 * n,
                BuildHasherDefault::<Pass>::default(),
            );
            run("maglev-crate", &|k| {
                use maglev::ConsistentHasher;
                crate_maglev.get(&k).map_or(0, String::len)
            });
        }
        g.finish();
    }
}

/// ns per lookup, timed over many passes of the key set.
fn time(f: &dyn Fn(u64) -> usize, keys: &[u64]) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut acc = 0usize;
        for _ in 0..50 {
            for &k in keys {
                acc = acc.wrapping_add(f(black_box(k)));
            }
        }
        black_box(acc);
        best = best.min(t.elapsed().as_nanos() as f64 / (50 * keys.len()) as f64);
    }
    best
}

fn summary() {
    let keys = keys();
    let jump = CustomJumpHasher::new(Pass::default());
    println!("\nsummary: ns/lookup (best of 5) and ratio to unweighted jump hash");
    println!(
        "{:>6} | {:>6} | {:>6} {:>5} | {:>6} {:>5} | {:>7} {:>5} | {:>7} {:>5}",
        "nodes", "jump", "ours", "ratio", "hetero", "ratio", "grown2x", "ratio", "scratch", "ratio"
    );
    for n in SIZES {
        let j = time(&|k| jump.slot(&k, n as u32) as usize, &keys);
        let look = |c: Cluster| {
            move |k: u64| {
                c.lookup_key(Key::from_hash(k))
                    .map_or(0, |x| x.as_str().len())
            }
        };
        let u = time(&look(ours(n, |_| 1.0, Shape::Compact)), &keys);
        let h = time(&look(ours(n, hetero, Shape::Compact)), &keys);
        let g = time(&look(ours(n, |_| 1.0, Shape::Grown2x)), &keys);
        let s = time(&look(ours(n, |_| 1.0, Shape::Scratch)), &keys);
        println!(
            "{n:>6} | {j:>6.1} | {u:>6.1} {:>5.2} | {h:>6.1} {:>5.2} | {g:>7.1} {:>5.2} | {s:>7.1} {:>5.2}",
            u / j,
            h / j,
            g / j,
            s / j
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary();
}
