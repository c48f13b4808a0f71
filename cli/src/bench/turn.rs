//! `ferry bench turn`: the TURN fleet's relay choice under scale events (no processes: the
//! selection code alone).

use std::path::PathBuf;

use anyhow::Result;

/// Options of `ferry bench turn`.
#[derive(clap::Args, Debug)]
pub struct TurnArgs {
    /// Relays at the start.
    #[arg(long, default_value_t = 50)]
    servers: usize,
    /// Users (each holds one credential).
    #[arg(long, default_value_t = 100_000)]
    clients: usize,
    /// Zones the relays are spread over.
    #[arg(long, default_value_t = 3)]
    zones: usize,
    /// Seed of the relays' weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/turn.json")]
    out: PathBuf,
}

pub(crate) fn turn(args: TurnArgs) -> Result<()> {
    use ferry_scheduler::turn::scale::{TurnScaleParams, simulate};
    let params = TurnScaleParams {
        servers: args.servers,
        clients: args.clients,
        zones: args.zones,
        seed: args.seed,
    };
    println!(
        "{} TURN relays ({} zones, weights 1 or 2), {} users; after each event every user asks again",
        args.servers, args.zones, args.clients
    );
    println!(
        "{:<26} {:>6} | {:>8} {:>8} {:>6} | {:>8} {:>8} | {:>6} {:>9} | {:>6}",
        "event", "relays", "moved", "minimum", "ratio", "forced", "rebal.", "CV", "max/share", "s"
    );
    let rows = simulate(&params, |r| {
        println!(
            "{:<26} {:>6} | {:>8} {:>8} {:>6.2} | {:>8} {:>8} | {:>6.3} {:>9.3} | {:>6.2}",
            r.event,
            r.relays_in_service,
            r.moved,
            r.minimum,
            r.ratio,
            r.relay_left,
            r.rebalanced,
            r.cv,
            r.max_over_share,
            r.seconds
        );
    })
    .map_err(anyhow::Error::msg)?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::json!({
        "servers": args.servers,
        "clients": args.clients,
        "zones": args.zones,
        "seed": args.seed,
        "rows": rows,
    });
    std::fs::write(&args.out, serde_json::to_string_pretty(&json)?)?;
    println!("wrote {}", args.out.display());
    Ok(())
}
