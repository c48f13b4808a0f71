//! `ferry dev`: everything on loopback with embedded defaults — the
//! scheduler (API, demo page, WHIP/WHEP 307s) on :8080, an edge (the UDP
//! ingress clients reach) on :3478 and two nodes behind it, `node-a`
//! (:8081) and `node-b` (:8082), that report to the scheduler, relay
//! streams to each other and migrate sessions between them.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::response::Html;
use axum::routing::get;
use ferry_proto::NodeId;
use ferry_scheduler::service::Scheduler;
use ferry_sfu::driver::{self, NodeOptions};

use crate::scheduler::{SchedulerArgs, start_scheduler};

const DEMO: &str = include_str!("demo/index.html");
/// Where the demo page gets the dev API token (a `<meta name="ferry-token">`).
const DEV_TOKEN_SLOT: &str = "<!--ferry-dev-token-->";

/// Options of `ferry dev`.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Scheduler (API, demo page) address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    gateway: SocketAddr,
    /// HTTP address of node-a.
    #[arg(long, default_value = "127.0.0.1:8081")]
    node_a: SocketAddr,
    /// HTTP address of node-b.
    #[arg(long, default_value = "127.0.0.1:8082")]
    node_b: SocketAddr,
    /// Media UDP address of the nodes' sockets (port 0 picks one each).
    #[arg(long, default_value = "127.0.0.1:0")]
    udp: SocketAddr,
    /// The edge's UDP address: what clients' ICE candidates point at.
    #[arg(long, default_value = "127.0.0.1:3478")]
    edge: SocketAddr,
    /// Clients reach the nodes directly instead of through the edge.
    #[arg(long)]
    no_edge: bool,
    /// Where the scheduler's state and the cluster secrets are kept
    /// (default: `ferry-dev` in the temp directory).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let token = crate::scheduler::token_from_env_or_random();
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("ferry-dev"));
    let state_file = state_dir.join("scheduler.json");
    // The demo page drives the operator API (moves, drains) with the dev token: loopback only.
    let page = DEMO.replace(
        DEV_TOKEN_SLOT,
        &format!("<meta name=\"ferry-token\" content=\"{token}\">"),
    );
    let demo: Router<Arc<Scheduler>> = Router::new()
        .route("/", get(move || async move { Html(page) }))
        .merge(crate::sdk_files::routes());
    let sched = start_scheduler(
        SchedulerArgs {
            http: args.gateway,
            state_file: Some(state_file.clone()),
            token: Some(token.clone()),
        },
        Some(demo),
    )
    .await?;
    let gateway = format!("http://{}", sched.addr);
    let cluster_dir = state_dir.join("cluster");
    let secrets = ferry_sfu::cluster::ClusterSecrets::load_or_create(&cluster_dir)
        .context("cluster secrets")?;
    let edge = if args.no_edge {
        None
    } else {
        Some(
            ferry_sfu::edge_driver::start_edge(args.edge, None, secrets.cluster_key())
                .await
                .with_context(|| format!("starting the edge on {}", args.edge))?,
        )
    };
    let edge_addr = edge.as_ref().map(|e| e.udp);
    let mut nodes = Vec::new();
    for (name, http) in [("node-a", args.node_a), ("node-b", args.node_b)] {
        let id = NodeId::new(name).context("node id")?;
        let node = driver::start(NodeOptions {
            id: id.clone(),
            http,
            udp: args.udp,
            announce: None,
            ice_servers: Vec::new(),
            nack_cache: 1000,
            max_sessions: 2000,
            process_metrics: Some(crate::alloc::prometheus),
            scheduler: Some(crate::scheduler::link(&gateway, &token, name)),
            cluster: Some(crate::cluster_options(
                &cluster_dir,
                &id,
                edge_addr,
                "127.0.0.1:0".parse()?,
                &token,
            )?),
            extra_routes: Some(crate::sdk_files::routes()),
        })
        .await
        .with_context(|| format!("starting {name}"))?;
        nodes.push((name, node));
    }
    // First line: machine-readable addresses (tests and scripts read it).
    let mut first = format!("ferry dev gateway {gateway} token {token}");
    for (name, n) in &nodes {
        first.push_str(&format!(" {name} http://{} udp {}", n.http, n.candidate));
    }
    if let Some(e) = edge_addr {
        first.push_str(&format!(" edge {e}"));
    }
    println!("{first}");
    println!("  demo page + API   {gateway}/   (OpenAPI: {gateway}/openapi.json)");
    println!("  API token         {token}   (mutating calls: Authorization: Bearer …)");
    for (name, n) in &nodes {
        println!("  {name:<17} http://{}  media udp {}", n.http, n.candidate);
    }
    match edge_addr {
        Some(e) => println!("  edge              udp {e}  (clients' candidates; nodes behind it)"),
        None => println!("  edge              none (--no-edge): clients reach the nodes directly"),
    }
    println!("  migrate           POST {gateway}/v1/migrations  or  ferry migrate --session …");
    println!("  publish           POST {gateway}/whip/{{stream}}  (307 to the placed node)");
    println!("  play              POST {gateway}/whep/{{stream}}  (307 to the stream's node)");
    println!("  state             {}", state_file.display());
    let mut servers: Vec<_> = nodes.into_iter().map(|(_, n)| n.server).collect();
    let first_node = servers.remove(0);
    let second_node = servers.remove(0);
    tokio::select! {
        r = sched.server => r.context("scheduler")??,
        r = first_node => r.context("node-a")??,
        r = second_node => r.context("node-b")??,
        r = async {
            match edge {
                Some(e) => e.task.await,
                None => std::future::pending().await,
            }
        } => r.context("edge")??,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
    }
    sched.scheduler.flush().context("saving scheduler state")?;
    Ok(())
}
