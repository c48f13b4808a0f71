//! `ferry bench placement`: the scheduler's placement under scale events — keys moved and
//! load spread, ours against a vnode ring and Maglev (no processes: the placement code alone).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

/// Options of `ferry bench placement`.
#[derive(clap::Args, Debug)]
pub struct PlacementArgs {
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Keys (rooms, streams) placed.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Zones the nodes are spread over (round robin).
    #[arg(long, default_value_t = 4)]
    zones: usize,
    /// Bounded-loads ε for the `ours+bl` rows.
    #[arg(long, default_value_t = 0.25)]
    epsilon: f64,
    /// Ring virtual nodes per unit of weight.
    #[arg(long, default_value_t = 100.0)]
    vnodes: f64,
    /// Seed of the weights and of the nodes each event picks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/placement.json")]
    out: PathBuf,
}

/// `ferry bench placement`: scale events on one simulated cluster (see
/// `ferry_scheduler::placement::scale` for what each event and policy is).
pub(crate) fn placement(args: PlacementArgs) -> Result<()> {
    use ferry_scheduler::placement::scale::{ScaleParams, ScaleRow, simulate};

    #[derive(Serialize)]
    struct Row {
        #[serde(flatten)]
        row: ScaleRow,
        /// Wall time since the previous row (a policy's first row includes
        /// its baseline run).
        seconds: f64,
    }
    let params = ScaleParams {
        nodes: args.nodes,
        keys: args.keys,
        zones: args.zones,
        epsilon: args.epsilon,
        vnodes: args.vnodes,
        seed: args.seed,
    };
    println!(
        "{} nodes ({} zones), {} keys; loads are relative to each node's weighted share",
        args.nodes, args.zones, args.keys
    );
    println!(
        "{:<22} {:<8} | {:>8} {:>8} {:>6} {:>8} | {:>7} {:>7} | {:>6} {:>6} | {:>6}",
        "event",
        "policy",
        "moved %",
        "optimal",
        "ratio",
        "extra %",
        "max/avg",
        "after",
        "CV",
        "after",
        "s"
    );
    let mut rows = Vec::new();
    let mut t = Instant::now();
    simulate(&params, |r| {
        let seconds = t.elapsed().as_secs_f64();
        println!(
            "{:<22} {:<8} | {:>8.3} {:>8.3} {:>6.2} {:>8.3} | {:>7.3} {:>7.3} | {:>6.3} {:>6.3} | {:>6.2}",
            r.event,
            r.policy,
            100.0 * r.moved,
            100.0 * r.optimal,
            if r.optimal > 0.0 {
                r.moved / r.optimal
            } else {
                0.0
            },
            100.0 * r.extra,
            r.max_over_avg_before,
            r.max_over_avg_after,
            r.cv_before,
            r.cv_after,
            seconds
        );
        rows.push(Row {
            row: r.clone(),
            seconds,
        });
        t = Instant::now();
    })?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&rows)?)?;
    println!("wrote {}", args.out.display());
    Ok(())
}
