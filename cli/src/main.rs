//! `ferry`: the one binary. `ferry dev` runs a local setup with the demo
//! page; `ferry node` runs one media node; `ferry bench` measures.

use std::net::SocketAddr;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ferry_proto::NodeId;
use ferry_sfu::driver::http::IceServer;
use ferry_sfu::driver::membership::{ClusterOptions, ClusterSecrets};
use ferry_sfu::driver::{self, NodeOptions};

mod access;
mod alloc;
mod bench;
mod config;
mod dev;
mod gpu;
mod migrate;
mod ops;
mod ops_rooms;
mod ops_turn;
mod record;
mod rooms;
mod scheduler;
mod sdk_files;
mod telemetry;
mod transcode;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

#[derive(Parser, Debug)]
#[command(
    name = "ferry",
    version,
    about = "Ferry WebRTC media-server cluster",
    after_help = "Every command also reads --config FILE (or $FERRY_CONFIG): a TOML file with a \
                  table per command ([node], [scheduler], …) whose keys are the flags' names; \
                  flags beat environment variables, which beat the file."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Local cluster on loopback: scheduler + demo page on :8080, edge, node-a and node-b.
    Dev(dev::DevArgs),
    /// Run one media node.
    Node(Box<NodeArgs>),
    /// Run the scheduler (placement, drains, migrations, operator API).
    Scheduler(scheduler::SchedulerArgs),
    /// Run an edge: the cluster's UDP ingress that routes clients to their node.
    Edge(EdgeArgs),
    /// Move one session to another node through the scheduler and follow it (exit 0 when committed).
    Migrate(migrate::MigrateArgs),
    /// Benchmarks that print a table and write JSON under target/bench/.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Mint an access token for WHIP/WHEP (printed on stdout).
    Token(access::TokenArgs),
    /// Nodes, sessions and running migrations of the cluster (tables, or --json).
    Status(ops::StatusArgs),
    /// Drain a node: no new sessions, every session migrated away (--wait: follow it).
    Drain(ops::DrainArgs),
    /// Cancel a node's drain: it takes sessions again, ramping back up.
    Undrain(ops::UndrainArgs),
    /// The TURN relays: list, drain, undrain.
    #[command(subcommand)]
    Turn(ops_turn::TurnCommand),
    /// The rooms across the cluster, or one room's replicas and participants.
    Rooms(ops_rooms::RoomsArgs),
    /// Recordings on a node: start, list, stop.
    #[command(subcommand)]
    Record(record::RecordCommand),
    /// Transcodes (ABR ladders): start, list, show, stop.
    #[command(subcommand)]
    Transcode(transcode::TranscodeCommand),
}

#[derive(clap::Args, Debug)]
struct NodeArgs {
    /// Node id.
    #[arg(long, default_value = "node-a")]
    id: String,
    /// HTTP (WHIP/WHEP) listen address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    http: SocketAddr,
    /// Media UDP listen address (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    udp: SocketAddr,
    /// IP announced in ICE candidates (needed when binding 0.0.0.0).
    #[arg(long)]
    announce: Option<std::net::IpAddr>,
    /// ICE server announced in `Link: rel="ice-server"` (repeatable), e.g. stun:stun.example.org:3478.
    #[arg(long = "ice-server")]
    ice_servers: Vec<String>,
    /// Packets cached per published stream for retransmission.
    #[arg(long, default_value_t = 1000)]
    nack_cache: usize,
    /// Sessions accepted before WHIP/WHEP answer 503.
    #[arg(long, default_value_t = 2000)]
    max_sessions: usize,
    /// Nodes a stream published here is relayed to directly; further subscribers get it from
    /// one of them (a relay tree of depth 2). 0: no limit.
    #[arg(long, default_value_t = ferry_sfu::node::RELAY_FANOUT)]
    relay_fanout: usize,
    /// Per-viewer adaptation: each viewer gets the layers its link carries (estimated from its
    /// transport-wide CC feedback). `false`: every viewer gets each track's top layer whatever
    /// its link (the node before adaptation; a benchmark's baseline).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    adaptive: bool,
    /// Scheduler to report to (heartbeats with load and sessions).
    #[arg(long)]
    scheduler: Option<String>,
    /// API token for the scheduler (default: $FERRY_API_TOKEN).
    #[arg(long, env = "FERRY_API_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Zone (AZ or ISP line) reported to the scheduler.
    #[arg(long, default_value = "default")]
    zone: String,
    /// Region reported to the scheduler (data residency).
    #[arg(long, default_value = "")]
    region: String,
    /// Capability flag reported to the scheduler (repeatable), e.g. gpu, av1_encode.
    #[arg(long = "capability")]
    capabilities: Vec<String>,
    /// Report as a canary (small fixed weight).
    #[arg(long)]
    canary: bool,
    /// GPU video memory in GiB, reported as free and total (nodes without NVML).
    #[arg(long)]
    gpu_vram_gib: Option<u64>,
    /// NVENC sessions the GPU allows (nodes without NVML).
    #[arg(long, default_value_t = 0)]
    nvenc_sessions: u32,
    /// Read GPU figures from NVML at every heartbeat (build with `--features nvml`).
    #[arg(long)]
    nvml: bool,
    /// Cluster secrets directory (cluster.key, ca.pem, ca-key.pem; created
    /// when missing). Enables relays between nodes, the edge and migration.
    #[arg(long)]
    cluster_dir: Option<std::path::PathBuf>,
    /// The edge clients reach this node through (needs --cluster-dir).
    #[arg(long, requires = "cluster_dir")]
    edge: Option<SocketAddr>,
    /// Where the migration transport (QUIC, mutual TLS) listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    migration_listen: SocketAddr,
    /// Where recordings without a target go (`DIR/{id}`; default: `recordings/` under
    /// --cluster-dir, else a target is required).
    #[arg(long)]
    recordings_dir: Option<std::path::PathBuf>,
    /// Cores forwarding media (worker threads sharing the media address; streams are spread
    /// over them). 0: one per CPU available.
    #[arg(long, env = "FERRY_WORKERS", default_value_t = 0)]
    workers: usize,
    /// Each worker thread on a CPU of its own (the first --workers CPUs this process may run
    /// on), when there are several workers and at least as many CPUs. For a node that shares
    /// its machine with busy processes: the kernel may otherwise put two workers on one CPU.
    #[arg(long, env = "FERRY_PIN_WORKERS", default_value_t = false, action = clap::ArgAction::Set)]
    pin_workers: bool,
    #[command(flatten)]
    rooms: crate::rooms::RoomArgs,
    #[command(flatten)]
    tokens: access::TokenKeyArgs,
    #[command(flatten)]
    tls: access::TlsArgs,
    #[command(flatten)]
    http_limit: access::HttpLimitArgs,
}

#[derive(clap::Args, Debug)]
struct EdgeArgs {
    /// UDP address clients and nodes reach the edge at.
    #[arg(long, default_value = "127.0.0.1:3478")]
    udp: SocketAddr,
    /// HTTP address for /metrics and /healthz.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Cluster secrets directory (as for `ferry node`).
    #[arg(long)]
    cluster_dir: std::path::PathBuf,
    /// HTTPS on the metrics listener.
    #[command(flatten)]
    tls: access::TlsArgs,
}

fn main() -> anyhow::Result<()> {
    let (config, args) = config::take_path(std::env::args_os().collect())?;
    let args = match &config {
        Some(path) => match config::apply(&<Cli as clap::CommandFactory>::command(), args, path) {
            Ok(args) => args,
            // --help, --version and usage errors print as clap prints them.
            Err(e) => match e.downcast::<clap::Error>() {
                Ok(clap_error) => clap_error.exit(),
                Err(e) => return Err(e.context("--config")),
            },
        },
        None => args,
    };
    let cli = Cli::parse_from(args);
    // The resource's `service.instance.id` in exported traces.
    let instance = match &cli.command {
        Command::Node(args) => args.id.clone(),
        Command::Dev(_) => "dev".to_owned(),
        Command::Scheduler(_) => "scheduler".to_owned(),
        Command::Edge(_) => "edge".to_owned(),
        Command::Migrate(_) => "migrate".to_owned(),
        Command::Bench(_) => "bench".to_owned(),
        Command::Token(_) => "token".to_owned(),
        Command::Status(_) => "status".to_owned(),
        Command::Drain(_) => "drain".to_owned(),
        Command::Undrain(_) => "undrain".to_owned(),
        Command::Turn(_) => "turn".to_owned(),
        Command::Rooms(_) => "rooms".to_owned(),
        Command::Record(_) => "record".to_owned(),
        Command::Transcode(_) => "transcode".to_owned(),
    };
    let _telemetry = telemetry::init(&instance)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async move {
        match cli.command {
            Command::Dev(args) => dev::run(args).await,
            Command::Node(args) => run_node(*args).await,
            Command::Scheduler(args) => scheduler::run(args).await,
            Command::Edge(args) => run_edge(args).await,
            Command::Migrate(args) => migrate::run(args).await,
            Command::Bench(cmd) => bench::run(cmd).await,
            Command::Token(args) => access::run_token(args),
            Command::Status(args) => ops::run("status", move |o| ops::status(&args, o)).await,
            Command::Drain(args) => ops::run("drain", move |o| ops::drain(&args, o)).await,
            Command::Undrain(args) => ops::run("undrain", move |o| ops::undrain(&args, o)).await,
            Command::Turn(cmd) => ops::run("turn", move |o| ops_turn::run(&cmd, o)).await,
            Command::Rooms(args) => ops::run("rooms", move |o| ops_rooms::run(&args, o)).await,
            Command::Record(cmd) => ops::run("record", move |o| record::run(&cmd, o)).await,
            Command::Transcode(cmd) => {
                ops::run("transcode", move |o| transcode::run(&cmd, o)).await
            }
        }
    })
}

async fn run_edge(args: EdgeArgs) -> anyhow::Result<()> {
    let secrets = ClusterSecrets::load_or_create(&args.cluster_dir).context("--cluster-dir")?;
    let tls = args.tls.server()?;
    let edge = ferry_sfu::driver::edge::start_edge(args.udp, args.http, tls, secrets.cluster_key())
        .await
        .context("starting the edge")?;
    let http = edge
        .http
        .map(|h| h.to_string())
        .unwrap_or_else(|| "-".into());
    println!("edge udp {} http {http}", edge.udp);
    tokio::select! {
        r = edge.task => r.context("edge")?.context("edge")?,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
    }
    Ok(())
}

/// Cluster membership of a node from its secrets directory.
pub(crate) fn cluster_options(
    dir: &std::path::Path,
    id: &NodeId,
    edge: Option<SocketAddr>,
    migration_listen: SocketAddr,
    token: &str,
) -> anyhow::Result<ClusterOptions> {
    let secrets = ClusterSecrets::load_or_create(dir).context("cluster secrets")?;
    Ok(ClusterOptions {
        key: secrets.key,
        identity: std::sync::Arc::new(secrets.identity(id).context("migration certificate")?),
        migration_listen,
        edge,
        token: token.to_owned(),
        directory_interval: std::time::Duration::from_secs(1),
    })
}

async fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    let id = NodeId::new(args.id.clone()).context("--id")?;
    // The API token (the cluster's, also a WHIP/WHEP credential for every stream): made up and
    // printed when not given, so a lone node can be used at all.
    let printed_token = args.token.is_none();
    let token = args
        .token
        .clone()
        .unwrap_or_else(scheduler::token_from_env_or_random);
    let keys = args.tokens.keys()?;
    let tls = args.tls.server()?;
    let client_tls = args.tls.client()?;
    let cluster = match &args.cluster_dir {
        Some(dir) => Some(cluster_options(
            dir,
            &id,
            args.edge,
            args.migration_listen,
            &token,
        )?),
        None => None,
    };
    let tokens = std::sync::Arc::new(keys.verifier.with_operator_token(token.clone()));
    let rooms = rooms::NodeRooms::start(
        &id,
        &token,
        tokens.clone(),
        tls.is_some(),
        &args.rooms,
        args.scheduler.as_deref(),
    );
    let transcoders = ferry_transcode::Transcoders::new(
        &token,
        args.gpu_vram_gib.is_some() || args.nvml,
        ffmpeg_path(),
        // Its own directory: nodes on one host may share the cluster directory.
        args.cluster_dir
            .as_ref()
            .map(|d| d.join("nodes").join(id.as_str())),
    );
    let node = driver::start(NodeOptions {
        cluster,
        id,
        http: args.http,
        udp: args.udp,
        announce: args.announce,
        ice_servers: args
            .ice_servers
            .into_iter()
            .map(|url| IceServer {
                url,
                username: None,
                credential: None,
            })
            .collect(),
        nack_cache: args.nack_cache,
        max_sessions: args.max_sessions,
        relay_fanout: args.relay_fanout,
        adaptive: args.adaptive,
        process_metrics: Some(rooms.metrics(&transcoders)),
        scheduler: args.scheduler.as_ref().map(|url| {
            let mut l = scheduler::link(url, &token, &args.id);
            l.tls = client_tls.clone();
            l.zone = args.zone.clone();
            l.region = args.region.clone();
            l.capabilities.extend(args.capabilities.iter().cloned());
            l.canary = args.canary;
            l.gpu = args.gpu_vram_gib.map(|gib| ferry_proto::api::GpuFigures {
                vram_free_bytes: gib << 30,
                vram_total_bytes: gib << 30,
                nvenc_sessions_free: args.nvenc_sessions,
                nvenc_sessions_max: args.nvenc_sessions,
            });
            l.gpu_reader = gpu::reader(args.nvml);
            if l.gpu.is_some() || l.gpu_reader.is_some() {
                l.capabilities.push("gpu".into());
            }
            l
        }),
        extra_routes: Some(rooms.routes(&transcoders)),
        tokens,
        http_limit: args.http_limit.limit(),
        tls: tls.clone(),
        recordings_dir: args
            .recordings_dir
            .clone()
            .or_else(|| args.cluster_dir.as_ref().map(|d| d.join("recordings"))),
        workers: workers_or_cpus(args.workers),
        pin_workers: args.pin_workers,
        directory: Some(rooms.directory.clone()),
    })
    .await
    .context("starting node")?;
    let migration = node
        .migration
        .map(|m| m.to_string())
        .unwrap_or_else(|| "-".into());
    let scheme = ferry_sfu::driver::tls::scheme(tls.is_some());
    transcoders.set_node(format!("{scheme}://{}", node.http));
    println!(
        "node {} http {scheme}://{} media udp {} (candidate {}) migration {migration}",
        args.id, node.http, node.udp, node.candidate
    );
    if printed_token {
        println!(
            "  API token {token}   (WHIP/WHEP and the migration API: Authorization: Bearer …)"
        );
    }
    if keys.generated {
        println!(
            "  no --token-secret/$FERRY_TOKEN_SECRET/--token-public-key: WHIP/WHEP accept the API token only"
        );
    }
    tokio::select! {
        r = node.server => r.context("http server")?.context("http server")?,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
    }
    Ok(())
}

/// The ffmpeg transcodes run: `$FERRY_FFMPEG`, else `ffmpeg` on the PATH.
pub(crate) fn ffmpeg_path() -> std::path::PathBuf {
    std::env::var_os("FERRY_FFMPEG")
        .filter(|p| !p.is_empty())
        .map_or_else(|| "ffmpeg".into(), Into::into)
}

/// `--workers`: 0 is one per CPU this process may run on.
pub(crate) fn workers_or_cpus(workers: usize) -> usize {
    match workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}
