//! The driver: everything of the node that touches the world. Worker threads run the cores
//! ([`Node`]s) over their sockets (`cores.rs`, through `udp::serve`: read socket →
//! `handle_datagram` → drain `poll_transmit` → write socket; arm the timer from
//! `poll_timeout`); the control task serves commands from the HTTP layer ([`http`]) and drives
//! the migrator; beside them the edge's loop ([`edge`]), TLS ([`tls`]), the heartbeat and the
//! scheduler link, the cluster's secrets and directory ([`membership`]) and the recordings'
//! object writers ([`recording_writer`]).

// The driver reads the clock and gives the cores `now` (clippy.toml forbids it elsewhere).
#![allow(clippy::disallowed_methods)]

mod control;
mod cores;
mod handle;
mod recordings;

pub mod edge;
pub mod heartbeat;
pub mod http;
pub mod membership;
pub mod recording_writer;
pub mod scheduler_link;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ferry_migrator::transport::QuicTransport;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::driver::membership::{
    ClusterOptions, Directory, MigrationBook, SessionEvents, SharedDirectory,
};
use crate::node::Node;
use control::{Migrations, run};
use cores::Cores;
use handle::Command;
pub use handle::{NodeHandle, NodeReport};
pub use membership::SessionEvent;

/// Binds the media socket and starts the node's task.
pub async fn spawn(node: Node, udp_bind: SocketAddr) -> std::io::Result<NodeHandle> {
    let socket = crate::udp::bind(udp_bind)?;
    spawn_on(node, socket)
}

/// Starts the node's task on an already bound socket.
pub fn spawn_on(node: Node, socket: UdpSocket) -> std::io::Result<NodeHandle> {
    let udp = socket.local_addr()?;
    let (tx, rx) = mpsc::channel(256);
    let id = node.id().clone();
    let events = SessionEvents::default();
    let (cores, workers, reports) =
        Cores::new(vec![node], vec![socket], events.clone(), id.clone(), None);
    run(cores, workers, reports, &[], rx, None)?;
    Ok(NodeHandle {
        tx,
        udp,
        token: None,
        events,
        scheduler: None,
        id,
        ready: Arc::default(),
    })
}

/// What [`start`] needs to run one node.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Node id.
    pub id: ferry_proto::NodeId,
    /// HTTP (WHIP/WHEP) listen address.
    pub http: SocketAddr,
    /// Media UDP listen address.
    pub udp: SocketAddr,
    /// Address announced in candidates (default: the bound one; loopback if unspecified).
    pub announce: Option<std::net::IpAddr>,
    /// ICE servers for `Link` headers.
    pub ice_servers: Vec<crate::driver::http::IceServer>,
    /// NACK cache per stream.
    pub nack_cache: usize,
    /// Sessions accepted before answering 503.
    pub max_sessions: usize,
    /// Nodes a stream published here is relayed to directly before further ones are sent one
    /// level down (0: no limit; [`crate::node::RELAY_FANOUT`]).
    pub relay_fanout: usize,
    /// Per-viewer adaptation ([`crate::node::NodeConfig::adaptive`]; off: every viewer gets each
    /// track's top layer, a benchmark's baseline).
    pub adaptive: bool,
    /// Extra text for `/metrics` from the embedding process.
    pub process_metrics: Option<crate::driver::http::ProcessMetrics>,
    /// The scheduler to report to, if any.
    pub scheduler: Option<crate::driver::heartbeat::SchedulerLink>,
    /// Cluster membership: relays, edge, migration (`None`: a lone node).
    pub cluster: Option<ClusterOptions>,
    /// More routes on the node's HTTP server (the binary adds the browser SDK's files).
    pub extra_routes: Option<axum::Router>,
    /// Checks the access tokens of WHIP/WHEP `POST`s (always on: without a token key, only the
    /// operator token it was given gets in).
    pub tokens: Arc<ferry_proto::auth::Verifier>,
    /// Requests one client address may make on the HTTP listener
    /// ([`crate::driver::http::limits`]).
    pub http_limit: crate::driver::http::limits::RateLimit,
    /// Serve HTTPS with this certificate (and advertise `https://` URLs).
    pub tls: Option<Arc<crate::driver::tls::ServerTls>>,
    /// Where recordings without a target go (`{dir}/{id}`); `None`: a target is required.
    pub recordings_dir: Option<std::path::PathBuf>,
    /// Cores forwarding media, each with its own worker thread and socket (at least 1).
    pub workers: usize,
    /// Each worker thread on a CPU of its own ([`cores::worker_cpus`]): when there are several
    /// and the process may run on at least as many CPUs (off by default: `ferry node
    /// --pin-workers`).
    pub pin_workers: bool,
    /// The cluster directory to keep up to date (shared with the embedding process, e.g. the
    /// room server finding the other nodes); `None`: the node's own.
    pub directory: Option<SharedDirectory>,
}

/// A node started by [`start`].
#[derive(Debug)]
pub struct RunningNode {
    /// Handle to the node task.
    pub handle: NodeHandle,
    /// Where HTTP listens.
    pub http: SocketAddr,
    /// Where media listens.
    pub udp: SocketAddr,
    /// The announced candidate.
    pub candidate: SocketAddr,
    /// The HTTP server task.
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Where the migration transport listens (in a cluster).
    pub migration: Option<SocketAddr>,
}

/// Binds sockets, makes a certificate and starts the node and its HTTP API.
pub async fn start(opts: NodeOptions) -> std::io::Result<RunningNode> {
    use rand::RngExt;

    let workers = opts.workers.max(1);
    let sockets = crate::udp::bind_shared(opts.udp, workers)?;
    let udp = sockets[0].local_addr()?;
    let ip = match (opts.announce, udp.ip()) {
        (Some(ip), _) => ip,
        (None, ip) if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        (None, ip) => ip,
    };
    let candidate = SocketAddr::new(ip, udp.port());
    let mut rng = rand::rng();
    let cert = loop {
        if let Ok(c) = crate::cert::generate(rng.random()) {
            break c;
        }
    };
    let now = Instant::now();
    let wall = crate::time::WallClock {
        base: now,
        unix_at_base: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    };
    let candidates = match opts.cluster.as_ref().and_then(|c| c.edge) {
        Some(edge) => vec![edge],
        None => vec![candidate],
    };
    let mut config = crate::node::NodeConfig::new(opts.id.clone(), candidates, rng.random(), wall);
    config.nack_cache = opts.nack_cache;
    config.max_sessions = opts.max_sessions;
    config.relay_fanout = opts.relay_fanout;
    config.adaptive = opts.adaptive;
    let mut runtime = None;
    let migrations = ferry_migrator::Config::default();
    let mut migration = None;
    let directory: SharedDirectory = opts.directory.clone().unwrap_or_default();
    let events = SessionEvents::default();
    if let Some(c) = &opts.cluster {
        config.cluster_key = Some(crate::cluster::relay::ClusterKey::new(&c.key));
        config.cluster_addr = Some(candidate);
        config.edge = c.edge;
        let transport =
            QuicTransport::bind(&c.identity, c.migration_listen).map_err(std::io::Error::other)?;
        let quic = transport.local_addr().map_err(std::io::Error::other)?;
        // Advertise the address the migration listener is bound to; a wildcard bind is
        // reached at the media address's IP.
        let quic_ip = if quic.ip().is_unspecified() {
            ip
        } else {
            quic.ip()
        };
        migration = Some(SocketAddr::new(quic_ip, quic.port()));
        runtime = Some(Migrations {
            transport,
            routes: cores::MigrationRoutes::new(migrations.finished_capacity),
            book: MigrationBook::default(),
        });
    }
    let cert = Arc::new(cert);
    let id = config.node_id.clone();
    let nodes = (0..workers)
        .map(|i| {
            let mut config = config.clone();
            // Each core draws its own ICE credentials and session ids.
            config.seed[0] ^= i as u8;
            let mut node = Node::new(config, cert.clone(), now);
            node.set_recordings_dir(
                opts.recordings_dir
                    .as_ref()
                    .map(|d| d.to_string_lossy().into_owned()),
            );
            node
        })
        .collect();
    let (cores, shards, reports) = Cores::new(
        nodes,
        sockets,
        events.clone(),
        id,
        runtime
            .as_ref()
            .map(|m: &Migrations| (migrations.clone(), m.transport.sender())),
    );
    tracing::info!(workers, %udp, "media workers started");
    let (tx, rx) = mpsc::channel(256);
    let cpus = if opts.pin_workers {
        cores::worker_cpus(workers)
    } else {
        Vec::new()
    };
    run(cores, shards, reports, &cpus, rx, runtime)?;
    let handle = NodeHandle {
        tx,
        udp,
        token: opts.cluster.as_ref().map(|c| Arc::from(c.token.as_str())),
        events,
        scheduler: opts.scheduler.clone(),
        id: opts.id.clone(),
        ready: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind(opts.http).await?;
    let http = listener.local_addr()?;
    let scheme = crate::driver::tls::scheme(opts.tls.is_some());
    if opts.scheduler.is_some() {
        handle.readiness().wait_for_scheduler();
    }
    let access = crate::driver::http::Access {
        tokens: opts.tokens,
        scheme,
    };
    let limits = crate::driver::http::limits::HttpLimits::new(opts.http_limit).trusting({
        let (node, tokens) = (handle.clone(), access.tokens.clone());
        move |bearer| node.authorized(Some(bearer)) || tokens.is_operator_token(bearer)
    });
    let mut app = crate::driver::http::router(
        handle.clone(),
        opts.ice_servers,
        opts.process_metrics,
        access,
        limits.clone(),
    );
    if let Some(extra) = opts.extra_routes {
        app = app.merge(extra);
    }
    // Every route counts, the embedding process's too (room joins, the SDK's files).
    let app = limits.apply(app);
    let server = tokio::spawn(crate::driver::tls::serve(listener, opts.tls, app));
    if let Some(link) = opts.scheduler {
        let mut hb = crate::driver::heartbeat::Reporter::new(
            link.clone(),
            opts.id.clone(),
            format!("{scheme}://{http}"),
            candidates_media(&opts.cluster, candidate),
            opts.max_sessions as u64,
        )
        .with_workers(workers);
        if let (Some(c), Some(m)) = (&opts.cluster, migration) {
            hb = hb.with_cluster(candidate.to_string(), m.to_string());
            tokio::spawn(refresh_directory(
                link,
                opts.id.clone(),
                c.directory_interval,
                directory,
                handle.clone(),
            ));
        }
        tokio::spawn(hb.run(handle.clone()));
    }
    Ok(RunningNode {
        handle,
        http,
        udp,
        candidate,
        server,
        migration,
    })
}

/// The media address clients are told: the edge's when behind one.
fn candidates_media(cluster: &Option<ClusterOptions>, candidate: SocketAddr) -> String {
    cluster
        .as_ref()
        .and_then(|c| c.edge)
        .unwrap_or(candidate)
        .to_string()
}

/// Keeps the directory (peers, stream origins) in step with the
/// scheduler's routing table, long-polling for changes.
async fn refresh_directory(
    link: crate::driver::heartbeat::SchedulerLink,
    me: ferry_proto::NodeId,
    interval: std::time::Duration,
    directory: SharedDirectory,
    node: NodeHandle,
) {
    let mut version = 0u64;
    loop {
        let link = link.clone();
        let table = tokio::task::spawn_blocking(move || {
            let path = format!("/v1/routing?since={version}&timeout_s=5");
            let a = link
                .call(&path, None, std::time::Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            if a.status != 200 {
                return Err(format!("{} {}", a.status, a.body.trim()));
            }
            serde_json::from_str::<ferry_proto::api::RoutingTable>(&a.body)
                .map_err(|e| e.to_string())
        })
        .await;
        match table {
            Ok(Ok(t)) => {
                version = t.version;
                let d = Directory::from_routing(&me, &t);
                tracing::debug!(
                    version,
                    peers = d.peers.len(),
                    origins = d.origins.len(),
                    "directory updated"
                );
                *directory.lock().unwrap_or_else(|e| e.into_inner()) = d.clone();
                if node.tx.send(Command::Directory(Box::new(d))).await.is_err() {
                    return;
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "routing table not read");
                tokio::time::sleep(interval).await;
            }
            Err(_) => return,
        }
    }
}
