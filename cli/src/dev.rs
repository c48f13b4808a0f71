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

use crate::scheduler::{SchedulerArgs, StoreKind, start_scheduler};

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
    /// Hot streams: once the publisher's node serves this many viewers of a stream, further
    /// viewers go to the other node (relayed). 0: all on the publisher's node.
    #[arg(long, env = "FERRY_HOT_STREAM_VIEWERS", default_value_t = 0)]
    hot_stream_viewers: u64,
    /// The edge's UDP address: what clients' ICE candidates point at.
    #[arg(long, default_value = "127.0.0.1:3478")]
    edge: SocketAddr,
    /// Clients reach the nodes directly instead of through the edge.
    #[arg(long)]
    no_edge: bool,
    /// Where the scheduler's state and the cluster secrets are kept, from one run to the
    /// next (default: a fresh directory per run, removed at exit).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    /// Where recordings without a target go (`DIR/{node}/{id}`; default: `recordings/` under
    /// the state directory — removed at exit without --state-dir).
    #[arg(long)]
    recordings_dir: Option<std::path::PathBuf>,
    /// Cores forwarding media on each node (0: one per CPU available).
    #[arg(long, env = "FERRY_WORKERS", default_value_t = 0)]
    workers: usize,
    /// Each node's worker threads on CPUs of their own (`ferry node --pin-workers`).
    #[arg(long, env = "FERRY_PIN_WORKERS", default_value_t = false, action = clap::ArgAction::Set)]
    pin_workers: bool,
    #[command(flatten)]
    rooms: crate::rooms::RoomArgs,
    /// Each node's HTTP listener's limits per client address (`ferry node --http-rate`).
    #[command(flatten)]
    http_limit: crate::access::HttpLimitArgs,
    /// Where the scheduler keeps the cluster state (`etcd` needs `--features etcd`).
    #[arg(long, env = "FERRY_STORE", value_enum, default_value_t = StoreKind::Embedded)]
    store: StoreKind,
    /// etcd client URLs, comma-separated (`--store etcd`).
    #[arg(
        long,
        env = "FERRY_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    etcd_endpoints: Vec<String>,
    /// How WHIP/WHEP access tokens are checked (gateway and nodes).
    #[command(flatten)]
    tokens: crate::access::TokenKeyArgs,
    /// HTTPS on the gateway and the nodes.
    /// TURN relays the gateway hands out (`POST /v1/turn/credentials`).
    #[command(flatten)]
    turn: crate::scheduler::TurnArgs,
    #[command(flatten)]
    tls: crate::access::TlsArgs,
}

/// How long the printed dev token lives.
const DEV_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let token = crate::scheduler::token_from_env_or_random();
    // One token key for the gateway and the nodes (made up when none is given).
    let token_keys = args.tokens.resolved();
    let keys = token_keys.keys()?;
    let dev_token = match &keys.signer {
        Some(signer) => Some(crate::access::mint(
            signer,
            "ferry-dev",
            "*",
            true,
            true,
            DEV_TOKEN_TTL,
        )?),
        None => None,
    };
    let node_tokens = Arc::new(keys.verifier.with_operator_token(token.clone()));
    let node_tls = args.tls.server()?;
    let client_tls = args.tls.client()?;
    // Without --state-dir every run starts from a fresh cluster (no node left drained by the
    // last run); the directory goes at exit.
    let fresh = args.state_dir.is_none();
    let state_dir = args.state_dir.clone().unwrap_or_else(|| {
        use rand::RngExt;
        let n: u32 = rand::rng().random();
        std::env::temp_dir().join(format!("ferry-dev-{}-{n:08x}", std::process::id()))
    });
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let _cleanup = fresh.then(|| RemoveOnDrop(state_dir.clone()));
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
            store: args.store,
            etcd_endpoints: args.etcd_endpoints.clone(),
            // A fresh run gets a key space of its own; --state-dir names a lasting one.
            etcd_prefix: if fresh {
                format!(
                    "/ferry-dev/{}",
                    state_dir
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
                )
            } else {
                "/ferry-dev/default".into()
            },
            lease_ttl_s: 5,
            advertise: None,
            hot_stream_viewers: args.hot_stream_viewers,
            tokens: token_keys,
            tls: args.tls.clone(),
            turn: args.turn.clone(),
            http_limit: args.http_limit.clone(),
        },
        Some(demo),
    )
    .await?;
    let gateway = sched.url.clone();
    let cluster_dir = state_dir.join("cluster");
    let secrets = ferry_sfu::driver::membership::ClusterSecrets::load_or_create(&cluster_dir)
        .context("cluster secrets")?;
    let edge = if args.no_edge {
        None
    } else {
        Some(
            ferry_sfu::driver::edge::start_edge(args.edge, None, None, secrets.cluster_key())
                .await
                .with_context(|| format!("starting the edge on {}", args.edge))?,
        )
    };
    let edge_addr = edge.as_ref().map(|e| e.udp);
    let mut nodes = Vec::new();
    for (name, http) in [("node-a", args.node_a), ("node-b", args.node_b)] {
        let id = NodeId::new(name).context("node id")?;
        let rooms = crate::rooms::NodeRooms::start(
            &id,
            &token,
            node_tokens.clone(),
            node_tls.is_some(),
            &args.rooms,
            Some(&gateway),
        );
        let transcoders = ferry_transcode::Transcoders::new(
            &token,
            false,
            crate::ffmpeg_path(),
            Some(state_dir.join(name)),
        );
        let node = driver::start(NodeOptions {
            id: id.clone(),
            http,
            udp: args.udp,
            announce: None,
            ice_servers: Vec::new(),
            nack_cache: 1000,
            max_sessions: 2000,
            relay_fanout: ferry_sfu::node::RELAY_FANOUT,
            adaptive: true,
            process_metrics: Some(rooms.metrics(&transcoders)),
            scheduler: Some({
                let mut l = crate::scheduler::link(&gateway, &token, name);
                l.tls = client_tls.clone();
                l
            }),
            cluster: Some(crate::cluster_options(
                &cluster_dir,
                &id,
                edge_addr,
                // The inter-node link (migrations) on the media address's interface, so
                // that `--udp 10.0.0.1:0` migrates between nodes reached at 10.0.0.1.
                SocketAddr::new(args.udp.ip(), 0),
                &token,
            )?),
            extra_routes: Some(rooms.routes(&transcoders)),
            tokens: node_tokens.clone(),
            http_limit: args.http_limit.limit(),
            tls: node_tls.clone(),
            recordings_dir: Some(
                args.recordings_dir
                    .clone()
                    .unwrap_or_else(|| state_dir.join("recordings"))
                    .join(name),
            ),
            workers: crate::workers_or_cpus(args.workers),
            pin_workers: args.pin_workers,
            directory: Some(rooms.directory.clone()),
        })
        .await
        .with_context(|| format!("starting {name}"))?;
        transcoders.set_node(format!(
            "{}://{}",
            ferry_sfu::driver::tls::scheme(node_tls.is_some()),
            node.http
        ));
        nodes.push((name, node));
    }
    // First line: machine-readable addresses (tests and scripts read it).
    let scheme = ferry_sfu::driver::tls::scheme(node_tls.is_some());
    let mut first = format!("ferry dev gateway {gateway} token {token}");
    for (name, n) in &nodes {
        first.push_str(&format!(
            " {name} {scheme}://{} udp {}",
            n.http, n.candidate
        ));
    }
    if let Some(e) = edge_addr {
        first.push_str(&format!(" edge {e}"));
    }
    if let Some(t) = &dev_token {
        first.push_str(&format!(" access-token {t}"));
    }
    println!("{first}");
    println!("  demo page + API   {gateway}/   (OpenAPI: {gateway}/openapi.json)");
    println!(
        "  API token         {token}   (mutating calls, and WHIP/WHEP: Authorization: Bearer …)"
    );
    match &dev_token {
        Some(t) => println!(
            "  dev access token  {t}   (WHIP/WHEP, every stream, {} days)",
            DEV_TOKEN_TTL.as_secs() / 86_400
        ),
        None => println!(
            "  dev access token  none: tokens are checked with --token-public-key; mint them with its private key (ferry token --private-key …)"
        ),
    }
    for (name, n) in &nodes {
        println!(
            "  {name:<17} {scheme}://{}  media udp {}",
            n.http, n.candidate
        );
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

/// Removes a directory when dropped (the fresh state of a `ferry dev` run).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
